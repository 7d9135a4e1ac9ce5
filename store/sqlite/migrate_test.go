package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// A database the version before chains were kept left behind (its schema
// one migration short, with a hop in it, claimed by that version's
// statement) opens: the migration adds the column, the old hop reads
// back whole with no chain (nil), and a hop claimed now keeps its chain,
// also after reopening.
func TestMigrationAddsTheChain(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hops.db")
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	old := sqlite.Migrations[:len(sqlite.Migrations)-1]
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i, m := range old {
		for _, stmt := range strings.Split(m, ";\n") {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("migration %d: %v", i+1, err)
			}
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES (?)`, i+1); err != nil {
			t.Fatal(err)
		}
	}
	was := storetest.NewRecord("before", store.Accepted, 0) // no chain
	if _, err := db.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('since', '0')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO hops (iss, hop, digest_alg, digest, offer, offer_form, state, status, status_form, canceled, equivocated, received, keep_until, decided)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, 0)`, was.Iss, was.Hop, was.Digest.Alg, was.Digest.Val, was.Offer, int(was.OfferForm),
		string(was.State), was.Status, int(was.StatusForm), was.Received.UnixNano(), was.KeepUntil.UnixNano()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open of the earlier schema: %v", err)
	}
	checkVersions(t, versions(t, s))
	if vs := versions(t, s); len(vs) != len(sqlite.Migrations) {
		t.Errorf("schema_migrations = %v; want %d migrations", vs, len(sqlite.Migrations))
	}
	now := storetest.NewRecord("after", store.Received, 2) // a chain of two
	if _, ins, err := s.Claim(ctx, now); err != nil || !ins {
		t.Fatalf("Claim after migrating = %v, %v", ins, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	for _, want := range []*store.Record{was, now} {
		got, err := s.Get(ctx, want.Iss, want.Hop)
		if err != nil {
			t.Fatalf("Get(%s): %v", want.Hop, err)
		}
		if d := storetest.DiffRecord(got, want); d != nil {
			t.Errorf("Get(%s) differs:\n\t%s", want.Hop, strings.Join(d, "\n\t"))
		}
	}
}
