package storetest

import (
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

// Resolving a flag twice, or a flag that does not exist, is an error and
// changes nothing.
func testResolveTwiceOrUnknownFails(t *testing.T, s store.Store) {
	ctx := t.Context()
	flags := raiseAll(t, s, sampleFlags())
	if err := s.Resolve(ctx, flags[0].ID, "first", Base.Add(time.Minute)); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if err := s.Resolve(ctx, flags[0].ID, "second", Base.Add(2*time.Minute)); err == nil {
		t.Errorf("resolving flag %d twice succeeded; want an error", flags[0].ID)
	}
	maxID := flags[len(flags)-1].ID
	for _, id := range []int64{0, -1, maxID + 1, maxID + 1000} {
		if err := s.Resolve(ctx, id, "nope", Base); err == nil {
			t.Errorf("Resolve(%d) of an unknown flag succeeded; want an error", id)
		}
	}
	want := append([]store.Flag(nil), flags...)
	want[0].Resolved, want[0].Resolution = Base.Add(time.Minute), "first"
	checkFlags(t, "Flags(all)", mustFlags(t, s, true), want)
	checkFlags(t, "Flags(open)", mustFlags(t, s, false), want[1:])
}
