package sqlhop_test

import (
	"path/filepath"
	"testing"

	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/internal/sqlhop"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// TestListBothWays: a delegator's hops are listed alike whether List
// reads them from the primary key (a delegator with few hops) or looks
// for them in the listing index (one with many): the listing's model
// test, on SQLite, with the bound set so that every delegator takes one
// way, then the other.
func TestListBothWays(t *testing.T) {
	for _, few := range []int{0, 1 << 30} {
		storetest.RunList(t, func(t *testing.T) store.Store {
			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hops.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			sqlhop.SetIssFew(s, few)
			return s
		})
	}
}
