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
