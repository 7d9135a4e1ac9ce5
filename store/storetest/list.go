package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- List ------------------------------------------------------------------

// RunList runs the listing's model test (part of Run) alone, for a store
// whose listing can take more than one way to the same page.
func RunList(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("ListMatchesTheModelByPages", func(t *testing.T) { testList(t, open(t)) })
	t.Run("ListPageIsOneSnapshot", func(t *testing.T) { testListWhileMoving(t, open(t)) })
}

// List, against a model: hops of two delegators in every state, received
// at instants that several share (the listing then orders by iss and hop,
// by bytes: names whose byte order differs from a locale's), some with
// open flags and some with resolved ones. Every query of every
// combination of state, delegator, flag and time window, read by pages
// of 1, 3 and the limit, lists exactly the model's records in the
// model's order.
func testList(t *testing.T, s store.Store) {
	ctx := t.Context()
	other := "https://agent.example/a-other" // sorts before Iss
	names := []string{"b", "B", "a", "ab", "\u00e9", "z", "a b", "A"}
	var all []*store.Record
	flagged := map[[2]string]bool{}
	for i, st := range []store.State{store.Received, store.Accepted, store.Rejected, store.Completed, store.Failed} {
		for j, name := range names {
			iss := Iss
			if j%3 == 0 {
				iss = other
			}
			hop := fmt.Sprintf("%s-%s", st, name)
			r := NewRecord(hop, st, j)
			r.Iss = iss
			// Four instants, each shared by several hops.
			r.Received = Base.Add(time.Duration((i+j)%4) * time.Second)
			r.KeepUntil = r.Received.Add(keepFor)
			if st == store.Completed || st == store.Failed {
				r.State = store.Received
				mustClaim(t, s, r)
				r.State, r.Status, r.StatusForm, r.Decided = st, Status(hop+"/"+string(st)), handoff.FormJWS, Base.Add(time.Minute)
				if err := s.Transition(ctx, store.Move{Iss: iss, Hop: hop, From: store.Received, To: st, Status: r.Status, Form: r.StatusForm, Now: r.Decided}); err != nil {
					t.Fatal(err)
				}
			} else {
				mustClaim(t, s, r)
			}
			all = append(all, r)
			if (i+j)%3 == 1 {
				id, err := s.Raise(ctx, store.Flag{Kind: store.FlagUnknownOutcome, Iss: iss, Hop: hop, Detail: "d", Created: Base})
				if err != nil {
					t.Fatal(err)
				}
				if (i+j)%2 == 0 {
					if err := s.Resolve(ctx, id, "settled", Base); err != nil {
						t.Fatal(err)
					}
				} else {
					flagged[[2]string{iss, hop}] = true
				}
			}
		}
	}
	// A second open flag on a flagged hop lists it once.
	for k := range flagged {
		if _, err := s.Raise(ctx, store.Flag{Kind: store.FlagEquivocation, Iss: k[0], Hop: k[1], Detail: "again", Created: Base}); err != nil {
			t.Fatal(err)
		}
		break
	}
	// Hops of one delegator in one state received at one instant, whose
	// order by bytes ("A" < "B" < "Z" < "a" < "a b" < "ab" < "b" < "\u00e9")
	// is not a locale's: the listing orders them by bytes.
	for j, name := range []string{"tie-a", "tie-B", "tie-\u00e9", "tie-Z", "tie-a b", "tie-ab", "tie-A", "tie-b"} {
		r := NewRecord(name, store.Accepted, 100+j)
		r.Received = Base.Add(2 * time.Second)
		r.KeepUntil = r.Received.Add(keepFor)
		mustClaim(t, s, r)
		all = append(all, r)
	}

	states := append([]store.State{""}, store.States()...)
	windows := [][2]time.Time{{}, {Base.Add(time.Second), Base.Add(3 * time.Second)}, {Base.Add(2 * time.Second), time.Time{}}, {time.Time{}, Base.Add(time.Second)}}
	for _, st := range states {
		for _, iss := range []string{"", Iss, other, "https://nobody.example"} {
			for _, fl := range []bool{false, true} {
				for _, w := range windows {
					q := store.HopQuery{State: st, Iss: iss, Flagged: fl, From: w[0], To: w[1]}
					var want []*store.Record
					for _, r := range all {
						if q.Matches(r, flagged[[2]string{r.Iss, r.Hop}]) {
							want = append(want, r)
						}
					}
					slices.SortFunc(want, func(a, b *store.Record) int {
						if a.Cursor().Before(*b.Cursor()) {
							return -1
						}
						return 1
					})
					for _, limit := range []int{1, 3, store.MaxListLimit} {
						checkListed(t, s, q, limit, want)
					}
				}
			}
		}
	}
	for _, bad := range []store.HopQuery{{Limit: 0}, {Limit: store.MaxListLimit + 1}, {State: "done", Limit: 1},
		{From: Base, To: Base, Limit: 1}, {To: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 1},
		{From: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC), Limit: 1}, {After: &store.HopCursor{Iss: Iss, Hop: "x"}, Limit: 1}} {
		if _, err := s.List(ctx, bad); err == nil {
			t.Errorf("List(%+v) succeeded; want an error", bad)
		}
	}
}

// A page is read in one snapshot: hops that move on while pages of every
// state are read are listed once a page (a page read state by state
// listed a hop that moved between two of the reads in both).
func testListWhileMoving(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 150
	for i := range n {
		put(t, s, fmt.Sprintf("moving-%03d", i), store.Received)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			err := s.Transition(ctx, store.Move{Iss: Iss, Hop: fmt.Sprintf("moving-%03d", i), From: store.Received, To: store.Completed,
				Status: Status("moved"), Form: handoff.FormJWS, Now: Base.Add(time.Minute)})
			if err != nil {
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
		page, err := s.List(ctx, store.HopQuery{Limit: store.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]store.State{}
		for _, r := range page {
			if st, dup := seen[r.Hop]; dup {
				t.Fatalf("one page lists %s twice, %s and %s", r.Hop, st, r.State)
			}
			seen[r.Hop] = r.State
		}
		if len(page) != n {
			t.Fatalf("a page of %d hops while %d are recorded", len(page), n)
		}
	}
}

// checkListed reads q by pages of limit and compares with want.
func checkListed(t *testing.T, s store.Store, q store.HopQuery, limit int, want []*store.Record) {
	t.Helper()
	q.Limit = limit
	var got []*store.Record
	for pages := 0; pages <= len(want)+1; pages++ {
		page, err := s.List(t.Context(), q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		if len(page) > limit {
			t.Fatalf("List(limit %d) returned %d records", limit, len(page))
		}
		got = append(got, page...)
		if len(page) < limit {
			break
		}
		q.After = page[len(page)-1].Cursor()
	}
	what := fmt.Sprintf("List(state %q, iss %q, flagged %v, from %v, to %v) by pages of %d", q.State, q.Iss, q.Flagged, q.From, q.To, limit)
	if len(got) != len(want) {
		t.Fatalf("%s listed %d records; want %d", what, len(got), len(want))
	}
	for i := range want {
		checkRecord(t, fmt.Sprintf("%s [%d]", what, i), got[i], want[i])
	}
}
