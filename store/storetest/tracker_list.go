package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- ListIssued --------------------------------------------------------------

// RunListIssued runs the issued listing's tests (part of RunTracker)
// alone, for a tracker set up in a way of its own (a database in a
// locale, say).
func RunListIssued(t *testing.T, open func(t *testing.T) store.Tracker) {
	t.Run("ListIssuedMatchesTheModelByPages", func(t *testing.T) { testListIssued(t, open(t)) })
	t.Run("ListIssuedPageIsOneSnapshot", func(t *testing.T) { testListIssuedWhileMoving(t, open(t)) })
}

// ListIssued, against a model: hops issued to three delegates in every
// view, resolved and not, created at instants that several share (the
// listing then orders by aud and hop, by bytes: names whose byte order
// differs from a locale's). Every query of every combination of view,
// delegate, resolution and time window, read by pages of 1, 3 and the
// limit, lists exactly the model's hops in the model's order.
func testListIssued(t *testing.T, tr store.Tracker) {
	other, third := "https://agent.example/B-other", "https://agent.example/a-third" // "B" < "a" < "d" by bytes
	auds := []string{Aud, other, third}
	names := []string{"b", "B", "a", "ab", "\u00e9", "z", "a b", "A"}
	var all []*store.Issued
	for i, v := range store.Views() {
		for j, name := range names {
			h := NewIssued(fmt.Sprintf("%s-%s", v, name), fmt.Sprintf("work-%d-%d", i, j), j)
			h.Aud = auds[(i+j)%3]
			// Four instants, each shared by several hops.
			h.Created = Base.Add(time.Duration((i+j)%4) * time.Second)
			if j%2 == 1 {
				prev := handoff.DigestOf([]byte(name))
				h.Prev = &prev
			}
			mustIssue(t, tr, h, true)
			resolved := (i+j)%3 != 0
			switch {
			case v != store.Offered:
				mustView(t, tr, h, v, resolved, Status(h.Hop+"/"+string(v)), handoff.FormJWS)
			case resolved:
				mustResolve(t, tr, h) // an observation: the work took no effect
			}
			all = append(all, h)
		}
	}
	// Hops to one delegate, unresolved, created at one instant, whose order
	// by bytes ("A" < "B" < "Z" < "a" < "a b" < "ab" < "b" < "\u00e9") is
	// not a locale's: the listing orders them by bytes.
	for j, name := range []string{"tie-a", "tie-B", "tie-\u00e9", "tie-Z", "tie-a b", "tie-ab", "tie-A", "tie-b"} {
		h := NewIssued(name, "tie-work-"+name, 100+j)
		h.Created = Base.Add(2 * time.Second)
		mustIssue(t, tr, h, true)
		all = append(all, h)
	}

	no, yes := false, true
	views := append([]store.View{""}, store.Views()...)
	windows := [][2]time.Time{{}, {Base.Add(time.Second), Base.Add(3 * time.Second)}, {Base.Add(2 * time.Second), time.Time{}}, {time.Time{}, Base.Add(time.Second)}}
	for _, v := range views {
		for _, aud := range []string{"", Aud, other, "https://nobody.example"} {
			for _, res := range []*bool{nil, &no, &yes} {
				for _, w := range windows {
					q := store.IssuedQuery{View: v, Aud: aud, Resolved: res, From: w[0], To: w[1]}
					var want []*store.Issued
					for _, h := range all {
						if q.Matches(h) {
							want = append(want, h)
						}
					}
					slices.SortFunc(want, func(a, b *store.Issued) int {
						if a.Cursor().Before(*b.Cursor()) {
							return -1
						}
						return 1
					})
					for _, limit := range []int{1, 3, store.MaxListLimit} {
						checkListedIssued(t, tr, q, limit, want)
					}
				}
			}
		}
	}
	for _, bad := range []store.IssuedQuery{{Limit: 0}, {Limit: store.MaxListLimit + 1}, {View: "expired", Limit: 1},
		{From: Base, To: Base, Limit: 1}, {To: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 1},
		{From: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 1}, {After: &store.IssuedCursor{Aud: Aud, Hop: "x"}, Limit: 1}} {
		if _, err := tr.ListIssued(t.Context(), bad); err == nil {
			t.Errorf("ListIssued(%+v) succeeded; want an error", bad)
		}
	}
}

// A page is read in one snapshot: hops that move on (another view, and
// resolved) while pages of every view are read are listed once a page.
func testListIssuedWhileMoving(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	const n = 150
	for i := range n {
		mustIssue(t, tr, NewIssued(fmt.Sprintf("moving-%03d", i), fmt.Sprintf("moving-work-%03d", i), i), false)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if err := tr.SetView(ctx, fmt.Sprintf("moving-%03d", i), store.Offered, store.ViewComplete, true, Status("moved"), handoff.FormJWS); err != nil {
				t.Errorf("move %d: %v", i, err)
				return
			}
		}
	}()
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		page, err := tr.ListIssued(ctx, store.IssuedQuery{Limit: store.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]store.View{}
		for _, h := range page {
			if v, dup := seen[h.Hop]; dup {
				t.Fatalf("one page lists %s twice, %s and %s", h.Hop, v, h.View)
			}
			seen[h.Hop] = h.View
		}
		if len(page) != n {
			t.Fatalf("a page of %d hops while %d are issued", len(page), n)
		}
	}
}

// checkListedIssued reads q by pages of limit and compares with want.
func checkListedIssued(t *testing.T, tr store.Tracker, q store.IssuedQuery, limit int, want []*store.Issued) {
	t.Helper()
	q.Limit = limit
	var got []*store.Issued
	for pages := 0; pages <= len(want)+1; pages++ {
		page, err := tr.ListIssued(t.Context(), q)
		if err != nil {
			t.Fatalf("ListIssued(%+v): %v", q, err)
		}
		if len(page) > limit {
			t.Fatalf("ListIssued(limit %d) returned %d hops", limit, len(page))
		}
		got = append(got, page...)
		if len(page) < limit {
			break
		}
		q.After = page[len(page)-1].Cursor()
	}
	res := "any"
	if q.Resolved != nil {
		res = fmt.Sprint(*q.Resolved)
	}
	what := fmt.Sprintf("ListIssued(view %q, aud %q, resolved %s, from %v, to %v) by pages of %d", q.View, q.Aud, res, q.From, q.To, limit)
	if len(got) != len(want) {
		t.Fatalf("%s listed %d hops; want %d", what, len(got), len(want))
	}
	for i := range want {
		checkIssued(t, fmt.Sprintf("%s [%d]", what, i), got[i], want[i])
	}
}
