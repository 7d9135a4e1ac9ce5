package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/quantumlearningmachines/handoff/store/sqlite"
)

// openState opens the replay memory of `verify --state DIR`: the SQLite hop
// store DIR/hops.db (WAL, synchronous=FULL), created on first use, so that
// separate runs, even concurrent ones, share one memory. The CLI checks
// offers; it is not a delegate that restarted, so the restart rule
// (Options.Since) is not applied: a new DIR starts with an empty memory.
func openState(dir string) (*sqlite.Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s, err := sqlite.Open(context.Background(), filepath.Join(dir, "hops.db"))
	if err != nil {
		return nil, fmt.Errorf("state %s: %w", dir, err)
	}
	return s, nil
}
