package store_test

import (
	"testing"

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
