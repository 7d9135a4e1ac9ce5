package store_test

import (
	"errors"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

func TestMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		m := store.NewMemory(storetest.Base)
		t.Cleanup(func() { m.Close() })
		return m
	})
}

func TestTracker(t *testing.T) {
	storetest.RunTracker(t, func(t *testing.T) store.Tracker {
		m := store.NewMemory(storetest.Base)
		t.Cleanup(func() { m.Close() })
		return m
	})
}

// An error about one hop is a *HopError naming it, and still matches its
// sentinel.
func TestHopErrorNamesTheHop(t *testing.T) {
	m := store.NewMemory(storetest.Base)
	_, err := m.Get(t.Context(), "https://planner.example", "hop-1")
	var he *store.HopError
	if !errors.Is(err, store.ErrNotFound) || !errors.As(err, &he) || he.Iss != "https://planner.example" || he.Hop != "hop-1" {
		t.Fatalf("Get of an unknown hop: %v (%T); want a *store.HopError naming it, wrapping ErrNotFound", err, err)
	}
	if store.AtHop(nil, "a", "b") != nil {
		t.Fatal("AtHop(nil) is not nil")
	}
}

// A hop state maps to the status state that reports it, checked: the
// same word for the four decided states, none for received.
func TestStateWire(t *testing.T) {
	for s, want := range map[store.State]handoff.State{store.Accepted: handoff.StateAccepted, store.Rejected: handoff.StateRejected,
		store.Completed: handoff.StateCompleted, store.Failed: handoff.StateFailed} {
		if got, err := s.Wire(); err != nil || got != want {
			t.Errorf("%s.Wire() = %q, %v; want %q", s, got, err, want)
		}
	}
	for _, s := range []store.State{store.Received, "", "canceled"} {
		if got, err := s.Wire(); err == nil {
			t.Errorf("%q.Wire() = %q; want an error", s, got)
		}
	}
}

// Lifecycle (the draft's state figure): the moves a hop may make, stated
// here on their own rather than read from CanMove, so that a store's
// lifecycle cannot drift from the draft's unnoticed. In particular a hop
// taken (accepted) never moves to rejected: the delegate "MUST NOT send
// "rejected" for a hop it has taken".
func TestLifecycleMoves(t *testing.T) {
	allowed := map[[2]store.State]bool{
		{store.Received, store.Accepted}:  true,
		{store.Received, store.Rejected}:  true,
		{store.Received, store.Completed}: true, // "completed" sent directly (accepted implied)
		{store.Received, store.Failed}:    true,
		{store.Accepted, store.Completed}: true,
		{store.Accepted, store.Failed}:    true,
	}
	for _, from := range store.States() {
		for _, to := range store.States() {
			if got, want := store.CanMove(from, to), allowed[[2]store.State{from, to}]; got != want {
				t.Errorf("CanMove(%s, %s) = %v; the draft's lifecycle says %v", from, to, got, want)
			}
		}
	}
}
