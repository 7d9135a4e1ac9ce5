package postgres_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// The migrations the tests below start before.
const (
	chainMigration   = 10 // hops.chain, the fifteen-parameter handoff_claim
	earlierMigration = 11 // hops.earlier, earlier_form
)

// schemaBefore makes the database at dsn as the version before migration
// n left it (migrations 1 to n-1 applied, Since stamped) and returns a
// handle on it, for what that version would write.
func schemaBefore(t *testing.T, dsn string, n int) *sql.DB {
	t.Helper()
	ctx := t.Context()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i, m := range postgres.Migrations[:n-1] {
		for _, stmt := range strings.Split(m, ";\n") {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("migration %d: %v", i+1, err)
			}
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('since', '0')`); err != nil {
		t.Fatal(err)
	}
	return db
}

// claimArgs are the fourteen parameters of the earlier versions'
// handoff_claim for r.
func claimArgs(r *store.Record) []any {
	return []any{r.Iss, r.Hop, r.Digest.Alg, r.Digest.Val, r.Offer, int(r.OfferForm), string(r.State), r.Status, int(r.StatusForm),
		0, 0, r.Received.UnixNano(), r.KeepUntil.UnixNano(), 0}
}

const claim14 = `SELECT handoff_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`

// checkHops reads each hop of want from s and compares.
func checkHops(t *testing.T, s store.Store, want ...*store.Record) {
	t.Helper()
	for _, w := range want {
		got, err := s.Get(t.Context(), w.Iss, w.Hop)
		if err != nil {
			t.Fatalf("Get(%s): %v", w.Hop, err)
		}
		if d := storetest.DiffRecord(got, w); d != nil {
			t.Errorf("Get(%s) differs:\n\t%s", w.Hop, strings.Join(d, "\n\t"))
		}
	}
}

// A database the version before chains were kept left behind (with a hop
// in it) opens: the migration adds the column, the old hop reads back
// whole with no chain (nil), and a hop claimed now keeps its chain, on
// another handle too. The earlier version's claim function still works
// beside the new one (a replica not yet upgraded).
func TestMigrationAddsTheChain(t *testing.T) {
	adminDSN(t)
	ctx := t.Context()
	dsn := freshDSN(t)
	db := schemaBefore(t, dsn, chainMigration)
	was := storetest.NewRecord("before", store.Accepted, 0) // no chain
	// The earlier version's checked claim.
	var n int
	if err := db.QueryRowContext(ctx, claim14, claimArgs(was)...).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the earlier version's claim = %d, %v", n, err)
	}

	s := open(t, dsn)
	if vs := versions(t, s); len(vs) != len(postgres.Migrations) {
		t.Errorf("schema_migrations = %v; want %d migrations", vs, len(postgres.Migrations))
	}
	now := storetest.NewRecord("after", store.Received, 2) // a chain of two
	if _, ins, err := s.Claim(ctx, now); err != nil || !ins {
		t.Fatalf("Claim after migrating = %v, %v", ins, err)
	}
	// A replica of the earlier version, still running, claims with its
	// function: the hop has no chain.
	late := storetest.NewRecord("late", store.Accepted, 0)
	if err := db.QueryRowContext(ctx, claim14, claimArgs(late)...).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the earlier version's claim after migrating = %d, %v", n, err)
	}
	checkHops(t, open(t, dsn), was, now, late)
}

// A database the version before the earlier status was kept left behind
// opens: its hop reads back with none (nil), and moved to completed now
// keeps its "accepted" as Earlier. A replica of the earlier version,
// still running, moves a hop with its own statement: the hop keeps its
// last status only, as it did.
func TestMigrationKeepsTheStatusBefore(t *testing.T) {
	adminDSN(t)
	ctx := t.Context()
	dsn := freshDSN(t)
	db := schemaBefore(t, dsn, earlierMigration)
	was := storetest.NewRecord("before", store.Accepted, 0)
	var n int
	if err := db.QueryRowContext(ctx, `SELECT handoff_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, NULL)`,
		claimArgs(was)...).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the earlier version's claim = %d, %v", n, err)
	}

	s := open(t, dsn)
	if vs := versions(t, s); len(vs) != len(postgres.Migrations) {
		t.Errorf("schema_migrations = %v; want %d migrations", vs, len(postgres.Migrations))
	}
	checkHops(t, s, was)
	late := storetest.NewRecord("late", store.Accepted, 0)
	if _, ins, err := s.Claim(ctx, late); err != nil || !ins {
		t.Fatalf("Claim after migrating = %v, %v", ins, err)
	}
	done := storetest.Base.Add(storetest.Retention)
	if err := s.Transition(ctx, store.Move{Iss: was.Iss, Hop: was.Hop, From: store.Accepted, To: store.Completed,
		Status: storetest.Status("before/completed"), Form: handoff.FormCOSE, Now: done}); err != nil {
		t.Fatal(err)
	}
	was.Earlier, was.EarlierForm = was.Status, was.StatusForm
	was.State, was.Status, was.StatusForm, was.Decided = store.Completed, storetest.Status("before/completed"), handoff.FormCOSE, done
	// The earlier version's move.
	if _, err := db.ExecContext(ctx, `UPDATE hops SET state = $1, status = $2, status_form = $3, decided = $4
		WHERE iss = $5 AND hop = $6 AND state = $7`, "failed", storetest.Status("late/failed"), int(handoff.FormJWS), done.UnixNano(),
		late.Iss, late.Hop, "accepted"); err != nil {
		t.Fatal(err)
	}
	late.State, late.Status, late.StatusForm, late.Decided = store.Failed, storetest.Status("late/failed"), handoff.FormJWS, done
	checkHops(t, open(t, dsn), was, late)
}
