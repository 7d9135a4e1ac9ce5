package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

// --- Flags ---------------------------------------------------------------

func sampleFlags() []store.Flag {
	return []store.Flag{
		{Kind: store.FlagEquivocation, Iss: Iss, Hop: "f1", Detail: "digest a != digest b", Created: Base},
		{Kind: store.FlagUnknownOutcome, Iss: Iss, Hop: "f2", Detail: "lookup timed out\nsecond line, ünïcode", Created: Base.Add(time.Second)},
		{Kind: store.FlagConflictingInputs, Iss: "https://agent.example/other", Hop: "f3", Detail: "", Created: Base.Add(2*time.Second + time.Nanosecond)},
	}
}

func checkFlags(t *testing.T, what string, got, want []store.Flag) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d flags %+v; want %d %+v", what, len(got), got, len(want), want)
		return
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Kind != w.Kind || g.Iss != w.Iss || g.Hop != w.Hop || g.Detail != w.Detail ||
			!g.Created.Equal(w.Created) || !g.Resolved.Equal(w.Resolved) || g.Resolution != w.Resolution || g.Key != w.Key {
			t.Errorf("%s: flag %d = %+v; want %+v", what, i, g, w)
		}
	}
}

func raiseAll(t *testing.T, s store.Store, flags []store.Flag) []store.Flag {
	t.Helper()
	var prev int64
	for i := range flags {
		id, err := s.Raise(t.Context(), flags[i])
		if err != nil {
			t.Fatalf("Raise: %v", err)
		}
		if i > 0 && id <= prev {
			t.Errorf("Raise returned id %d after %d; want increasing ids (Flags lists oldest first)", id, prev)
		}
		prev = id
		flags[i].ID = id
	}
	return flags
}

func mustFlags(t *testing.T, s store.Store, all bool) []store.Flag {
	t.Helper()
	fl, err := s.Flags(t.Context(), all)
	if err != nil {
		t.Fatalf("Flags(%v): %v", all, err)
	}
	return fl
}

// Raise records a flag and returns its id; Flags lists them oldest first,
// open ones only unless all; Resolve closes one with the operator's
// resolution and time.
func testFlagsRaiseListResolve(t *testing.T, s store.Store) {
	ctx := t.Context()
	checkFlags(t, "Flags(open) of an empty store", mustFlags(t, s, false), nil)
	checkFlags(t, "Flags(all) of an empty store", mustFlags(t, s, true), nil)

	flags := raiseAll(t, s, sampleFlags())
	checkFlags(t, "Flags(open)", mustFlags(t, s, false), flags)
	checkFlags(t, "Flags(all)", mustFlags(t, s, true), flags)

	at := Base.Add(time.Hour + time.Nanosecond)
	if err := s.Resolve(ctx, flags[1].ID, "checked the ledger: done ✓", at); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	resolved := append([]store.Flag(nil), flags...)
	resolved[1].Resolved, resolved[1].Resolution = at, "checked the ledger: done ✓"
	checkFlags(t, "Flags(open) after Resolve", mustFlags(t, s, false), []store.Flag{flags[0], flags[2]})
	checkFlags(t, "Flags(all) after Resolve", mustFlags(t, s, true), resolved)

	// A flag raised later comes last.
	late := raiseAll(t, s, []store.Flag{{Kind: store.FlagEquivocation, Iss: Iss, Hop: "f4", Detail: "late", Created: Base.Add(-time.Hour)}})
	if late[0].ID <= flags[2].ID {
		t.Errorf("a later flag got id %d, not above %d", late[0].ID, flags[2].ID)
	}
	checkFlags(t, "Flags(open) after a later Raise", mustFlags(t, s, false), []store.Flag{flags[0], flags[2], late[0]})
	checkFlags(t, "Flags(all) after a later Raise", mustFlags(t, s, true), append(resolved, late[0]))
}

// Resolving a flag twice, or a flag that does not exist, fails with
// ErrConflict and changes nothing.
func testResolveTwiceOrUnknownIsConflict(t *testing.T, s store.Store) {
	ctx := t.Context()
	flags := raiseAll(t, s, sampleFlags())
	if err := s.Resolve(ctx, flags[0].ID, "first", Base.Add(time.Minute)); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	// Two operators resolving one flag: the second is told it is no
	// longer open (ErrConflict), not that the store failed.
	if err := s.Resolve(ctx, flags[0].ID, "second", Base.Add(2*time.Minute)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("resolving flag %d twice: %v; want ErrConflict", flags[0].ID, err)
	}
	maxID := flags[len(flags)-1].ID
	for _, id := range []int64{0, -1, maxID + 1, maxID + 1000} {
		if err := s.Resolve(ctx, id, "nope", Base); !errors.Is(err, store.ErrConflict) {
			t.Errorf("Resolve(%d) of an unknown flag: %v; want ErrConflict", id, err)
		}
	}
	want := append([]store.Flag(nil), flags...)
	want[0].Resolved, want[0].Resolution = Base.Add(time.Minute), "first"
	checkFlags(t, "Flags(all)", mustFlags(t, s, true), want)
	checkFlags(t, "Flags(open)", mustFlags(t, s, false), want[1:])
}

// ListFlags pages through the flags q selects, newest first, each once:
// open ones or all, of every hop or of a few hops, as the model
// (FlagQuery.Matches over Flags(all)) says; CountOpenFlags counts the
// open ones, no further than its bound.
func testListFlags(t *testing.T, s store.Store) {
	ctx := t.Context()
	if n, err := s.CountOpenFlags(ctx, 10); err != nil || n != 0 {
		t.Errorf("CountOpenFlags of an empty store: %d, %v", n, err)
	}
	// 3 hops of two delegators, 40 flags, every third resolved.
	hops := []store.HopKey{{Iss: Iss, Hop: "l1"}, {Iss: Iss, Hop: "l2"}, {Iss: "https://agent.example/other", Hop: "l1"}}
	var raised []store.Flag
	for i := range 40 {
		k := hops[i%len(hops)]
		raised = append(raised, store.Flag{Kind: store.FlagUnknownOutcome, Iss: k.Iss, Hop: k.Hop, Detail: fmt.Sprint("flag ", i), Created: Base.Add(time.Duration(i) * time.Second)})
	}
	raised = raiseAll(t, s, raised)
	open := 0
	for i, f := range raised {
		if i%3 == 0 {
			if err := s.Resolve(ctx, f.ID, "done", Base.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		open++
	}
	all := mustFlags(t, s, true)
	for _, max := range []int{0, 1, open - 1, open, open + 1, 1000} {
		want := min(max, open)
		if n, err := s.CountOpenFlags(ctx, max); err != nil || n != want {
			t.Errorf("CountOpenFlags(%d) = %d, %v; want %d", max, n, err, want)
		}
	}
	for _, q := range []store.FlagQuery{
		{},
		{Open: true},
		{Hops: hops[:1]},
		{Hops: hops[2:], Open: true},
		{Hops: hops[1:]},
		{Hops: []store.HopKey{{Iss: Iss, Hop: "none"}}},
		{Hops: []store.HopKey{{Iss: "https://agent.example/other", Hop: "l2"}}, Open: true},
	} {
		var want []store.Flag
		for _, f := range slices.Backward(all) {
			if q.Matches(f) {
				want = append(want, f)
			}
		}
		for _, limit := range []int{1, 7, store.MaxListLimit} {
			q.Limit, q.Before = limit, 0
			var got []store.Flag
			for pages := 0; ; pages++ {
				if pages > len(all)+1 {
					t.Fatalf("%+v: the pages never end", q)
				}
				page, err := s.ListFlags(ctx, q)
				if err != nil {
					t.Fatalf("ListFlags(%+v): %v", q, err)
				}
				if len(page) > limit {
					t.Errorf("ListFlags(%+v): %d flags", q, len(page))
				}
				got = append(got, page...)
				if len(page) < limit {
					break
				}
				q.Before = page[len(page)-1].ID
			}
			checkFlags(t, fmt.Sprintf("ListFlags(%+v), every page", q), got, want)
		}
	}
	for _, q := range []store.FlagQuery{{Limit: 0}, {Limit: store.MaxListLimit + 1}, {Limit: 1, Before: -1}, {Limit: 1, Hops: make([]store.HopKey, store.MaxFlagHops+1)}} {
		if _, err := s.ListFlags(ctx, q); err == nil {
			t.Errorf("ListFlags(%+v) succeeded; want an error", q)
		}
	}
}
