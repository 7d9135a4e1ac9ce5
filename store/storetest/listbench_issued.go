package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

// A benchmark of the issued listing (Tracker.ListIssued: the console's
// page of hops issued onward) on a tracker filled with ListBenchRows
// issued hops of this shape, which each SQL store's test writes in bulk
// in its own dialect (hop x, 0 <= x < rows):
//
//	aud       ListBenchRareAud when x % 500 == 7, else "https://downstream-<x % 8>.example"
//	hop       x as 16 hexadecimal digits
//	view      by x % 1000: 0-4 offered, unresolved (0.5%); 5-14 accepted,
//	resolved  unresolved (1%); 15-19 offered, resolved (an observation);
//	          20-39 rejected, 40-59 failed (2% each), 60-61 canceled, all
//	          resolved; 62 canceled, unresolved (0.1%); the rest
//	          completed, resolved
//	created   ListBenchBase plus x milliseconds
//
// The offers and statuses are a few hundred octets of filler.

// ListBenchRareAud is the delegate of one issued hop in 500.
const ListBenchRareAud = "https://rare-downstream.example"

// BenchListIssued fills tr with ListBenchRows issued hops of the shape
// above (fill writes hops lo to hi, both included, in the store's own
// bulk way, a hundred thousand at a time), then reads a page of 50 hops
// of each kind an operator asks for and reports each page's time
// (ms/page; the console's target is well under 50 ms).
func BenchListIssued(b *testing.B, tr store.Tracker, fill func(ctx context.Context, lo, hi int) error) {
	rows := ListBenchRows(b)
	for lo := 0; lo < rows; lo += 100_000 {
		if err := fill(b.Context(), lo, min(lo+100_000, rows)-1); err != nil {
			b.Fatalf("filling the store: %v", err)
		}
	}
	mid := ListBenchBase.Add(time.Duration(rows/2) * time.Millisecond)
	no := false
	cases := []struct {
		name string
		q    store.IssuedQuery
	}{
		{"newest", store.IssuedQuery{}},
		{"unresolved", store.IssuedQuery{Resolved: &no}},
		{"view=accepted", store.IssuedQuery{View: store.ViewAccepted}},
		{"view=offered,unresolved", store.IssuedQuery{View: store.Offered, Resolved: &no}},
		{"view=canceled,unresolved", store.IssuedQuery{View: store.ViewCanceled, Resolved: &no}},
		{"aud=common", store.IssuedQuery{Aud: "https://downstream-3.example"}},
		{"aud=rare", store.IssuedQuery{Aud: ListBenchRareAud}},
		{"aud=rare,unresolved", store.IssuedQuery{Aud: ListBenchRareAud, Resolved: &no}},
		{"aud=rare,view=failed", store.IssuedQuery{Aud: ListBenchRareAud, View: store.ViewFailed}},
		{"window", store.IssuedQuery{From: mid, To: mid.Add(time.Minute)}},
		{"unresolved,window", store.IssuedQuery{Resolved: &no, From: mid, To: mid.Add(time.Minute)}},
		{"after-middle", store.IssuedQuery{After: &store.IssuedCursor{Created: mid, Aud: "https://downstream-0.example", Hop: fmt.Sprintf("%016x", rows/2)}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			q := c.q
			q.Limit = 50
			n := 0
			for b.Loop() {
				page, err := tr.ListIssued(b.Context(), q)
				if err != nil {
					b.Fatal(err)
				}
				n = len(page)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
			b.ReportMetric(float64(n), "hops")
		})
	}
}
