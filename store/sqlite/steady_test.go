package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// TestSteadyStreamFlat (issue 19): under a steady stream with sweeping,
// the database file stays flat: swept pages are reused.
func TestSteadyStreamFlat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hops.db")
	s := open(t, path)
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The database's pages, those in the WAL not yet checkpointed
	// included: what the file holds once checkpointed.
	size := func() int64 {
		var pages, pageSize int64
		if err := db.QueryRow("PRAGMA page_count").Scan(&pages); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow("PRAGMA page_size").Scan(&pageSize); err != nil {
			t.Fatal(err)
		}
		return pages * pageSize
	}
	storetest.SteadyStream(t, s, size)
}
