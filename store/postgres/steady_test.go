package postgres_test

import (
	"database/sql"
	"testing"

	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// TestSteadyStreamFlat (issue 19): under a steady stream with sweeping,
// the store's tables and indexes stay flat once vacuumed (what autovacuum
// does in service): swept rows' space is reused.
func TestSteadyStreamFlat(t *testing.T) {
	dsn := freshDSN(t)
	s := open(t, dsn)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	size := func() int64 {
		var names []string
		rows, err := db.QueryContext(t.Context(), `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind = 'r' AND n.nspname = current_schema()`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		rows.Close()
		var total int64
		for _, n := range names {
			if _, err := db.ExecContext(t.Context(), `VACUUM "`+n+`"`); err != nil {
				t.Fatal(err)
			}
			var b int64
			if err := db.QueryRowContext(t.Context(), `SELECT pg_total_relation_size(quote_ident($1)::regclass)`, n).Scan(&b); err != nil {
				t.Fatal(err)
			}
			total += b
		}
		return total
	}
	storetest.SteadyStream(t, s, size)
}
