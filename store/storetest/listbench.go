package storetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

// A listing benchmark (issue 17: the operator console at fleet size) on a
// store filled with rows hop records of this shape, which each SQL store's
// test writes in bulk in its own dialect (record x, 0 <= x < rows):
//
//	iss       ListBenchRare when x % 500 == 37, else "https://agent-<x % 20>.example"
//	hop       x as 16 hexadecimal digits
//	state     by x % 1000: 0-9 accepted (1%), 10-29 rejected, 30-49
//	          failed (2% each), 50 received (0.1%), the rest completed
//	received  ListBenchBase plus x milliseconds
//
// with an open flag (FlagUnknownOutcome, raised by BenchList) on every hop
// whose x % 5000 == 3. The offers and statuses are a few hundred octets
// of filler.

// ListBenchRare is the delegator of one hop in 500.
const ListBenchRare = "https://rare.example"

// ListBenchBase is when the benchmark's first hop was received.
var ListBenchBase = time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC)

// listBenchIss is record x's delegator.
func listBenchIss(x int) string {
	if x%500 == 37 {
		return ListBenchRare
	}
	return fmt.Sprintf("https://agent-%d.example", x%20)
}

// ListBenchRows is how many records a listing benchmark fills its store
// with: HANDOFF_LIST_ROWS, or 20,000 (scripts/bench-list.sh sets a million).
func ListBenchRows(b *testing.B) int {
	n := 20_000
	if v := os.Getenv("HANDOFF_LIST_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			b.Fatalf("HANDOFF_LIST_ROWS=%q: want a whole number of at least 1000", v)
		}
	}
	return n
}

// BenchList fills s with ListBenchRows records of the shape above (fill
// writes records lo to hi, both included, in the store's own bulk way, a
// hundred thousand at a time; BenchList raises the flags), then reads a
// page of 50 records of each kind an operator asks for and reports each
// page's time (ms/page; the console's target is well under 50 ms).
func BenchList(b *testing.B, s store.Store, fill func(ctx context.Context, lo, hi int) error) {
	rows := ListBenchRows(b)
	for lo := 0; lo < rows; lo += 100_000 {
		if err := fill(b.Context(), lo, min(lo+100_000, rows)-1); err != nil {
			b.Fatalf("filling the store: %v", err)
		}
	}
	for x := 3; x < rows; x += 5000 {
		f := store.Flag{Kind: store.FlagUnknownOutcome, Iss: listBenchIss(x), Hop: fmt.Sprintf("%016x", x), Detail: "bench", Created: ListBenchBase}
		if _, err := s.Raise(b.Context(), f); err != nil {
			b.Fatalf("raising the flags: %v", err)
		}
	}
	mid := ListBenchBase.Add(time.Duration(rows/2) * time.Millisecond)
	cases := []struct {
		name string
		q    store.HopQuery
	}{
		{"newest", store.HopQuery{}},
		{"state=accepted", store.HopQuery{State: store.Accepted}},
		{"state=received", store.HopQuery{State: store.Received}},
		{"iss=common", store.HopQuery{Iss: "https://agent-3.example"}},
		{"iss=rare", store.HopQuery{Iss: ListBenchRare}},
		{"iss=rare,state=failed", store.HopQuery{Iss: ListBenchRare, State: store.Failed}},
		{"iss=common,state=received", store.HopQuery{Iss: "https://agent-10.example", State: store.Received}},
		{"flagged", store.HopQuery{Flagged: true}},
		{"flagged,state=accepted", store.HopQuery{Flagged: true, State: store.Accepted}},
		{"window", store.HopQuery{From: mid, To: mid.Add(time.Minute)}},
		{"state=failed,window", store.HopQuery{State: store.Failed, From: mid, To: mid.Add(time.Minute)}},
		{"after-middle", store.HopQuery{After: &store.HopCursor{Received: mid, Iss: "https://agent-0.example", Hop: fmt.Sprintf("%016x", rows/2)}}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			q := c.q
			q.Limit = 50
			n := 0
			for b.Loop() {
				page, err := s.List(b.Context(), q)
				if err != nil {
					b.Fatal(err)
				}
				n = len(page)
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
			b.ReportMetric(float64(n), "records")
		})
	}
}
