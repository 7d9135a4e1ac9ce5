package postgres_test

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// A database the version before chains were kept left behind (its schema
// one migration short, with a hop in it) opens: the migration adds the
// column, the old hop reads back whole with no chain (nil), and a hop
// claimed now keeps its chain, on another handle too. The earlier
// version's claim function still works beside the new one (a replica not
// yet upgraded).
func TestMigrationAddsTheChain(t *testing.T) {
	adminDSN(t)
	ctx := t.Context()
	dsn := freshDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := postgres.Migrations[:len(postgres.Migrations)-1]
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i, m := range old {
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
	was := storetest.NewRecord("before", store.Accepted, 0) // no chain
	args := func(r *store.Record) []any {
		return []any{r.Iss, r.Hop, r.Digest.Alg, r.Digest.Val, r.Offer, int(r.OfferForm), string(r.State), r.Status, int(r.StatusForm),
			0, 0, r.Received.UnixNano(), r.KeepUntil.UnixNano(), 0}
	}
	// The earlier version's checked claim.
	var n int
	if err := db.QueryRowContext(ctx, `SELECT handoff_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, args(was)...).Scan(&n); err != nil || n != 1 {
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
	if err := db.QueryRowContext(ctx, `SELECT handoff_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, args(late)...).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the earlier version's claim after migrating = %d, %v", n, err)
	}
	other := open(t, dsn)
	for _, want := range []*store.Record{was, now, late} {
		got, err := other.Get(ctx, want.Iss, want.Hop)
		if err != nil {
			t.Fatalf("Get(%s): %v", want.Hop, err)
		}
		if d := storetest.DiffRecord(got, want); d != nil {
			t.Errorf("Get(%s) differs:\n\t%s", want.Hop, strings.Join(d, "\n\t"))
		}
	}
}
