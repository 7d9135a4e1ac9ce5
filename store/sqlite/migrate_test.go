package sqlite_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// The migrations the tests below start before.
const (
	chainMigration   = 9  // hops.chain
	earlierMigration = 10 // hops.earlier, earlier_form
	issuedMigration  = 11 // issued_listed
)

// schemaBefore makes a database at path as the version before migration
// n left it (migrations 1 to n-1 applied, Since stamped), with the hops
// that version's insert wrote, and closes it.
func schemaBefore(t *testing.T, path string, n int, hops ...*store.Record) {
	t.Helper()
	ctx := t.Context()
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for i, m := range sqlite.Migrations[:n-1] {
		for _, stmt := range strings.Split(m, ";\n") {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("migration %d: %v", i+1, err)
			}
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES (?)`, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES ('since', '0')`); err != nil {
		t.Fatal(err)
	}
	for _, r := range hops {
		if _, err := db.ExecContext(ctx, `INSERT INTO hops (iss, hop, digest_alg, digest, offer, offer_form, state, status, status_form, canceled, equivocated, received, keep_until, decided)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?)`, r.Iss, r.Hop, r.Digest.Alg, r.Digest.Val, r.Offer, int(r.OfferForm),
			string(r.State), r.Status, int(r.StatusForm), r.Received.UnixNano(), r.KeepUntil.UnixNano(), nanos(r.Decided)); err != nil {
			t.Fatal(err)
		}
	}
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

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
// in it, claimed by that version's statement) opens: the migration adds
// the column, the old hop reads back whole with no chain (nil), and a hop
// claimed now keeps its chain, also after reopening.
func TestMigrationAddsTheChain(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hops.db")
	was := storetest.NewRecord("before", store.Accepted, 0) // no chain
	schemaBefore(t, path, chainMigration, was)

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
	checkHops(t, open(t, path), was, now)
}

// A database the version before the earlier status was kept left behind
// opens: its hops read back with none (nil), an accepted hop moved to
// completed now keeps its "accepted" as Earlier, and a hop the earlier
// version moved keeps only its last status, as it did.
func TestMigrationKeepsTheStatusBefore(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hops.db")
	accepted := storetest.NewRecord("accepted", store.Accepted, 0)
	moved := storetest.NewRecord("moved", store.Completed, 0) // moved by the earlier version: its "accepted" is gone
	moved.Status, moved.StatusForm, moved.Decided = storetest.Status("moved/completed"), handoff.FormJWS, storetest.Base
	schemaBefore(t, path, earlierMigration, accepted, moved)

	s := open(t, path)
	if vs := versions(t, s); len(vs) != len(sqlite.Migrations) {
		t.Errorf("schema_migrations = %v; want %d migrations", vs, len(sqlite.Migrations))
	}
	checkHops(t, s, accepted, moved)
	done := storetest.Base.Add(storetest.Retention)
	if err := s.Transition(ctx, store.Move{Iss: accepted.Iss, Hop: accepted.Hop, From: store.Accepted, To: store.Completed,
		Status: storetest.Status("accepted/completed"), Form: handoff.FormCOSE, Now: done}); err != nil {
		t.Fatal(err)
	}
	accepted.Earlier, accepted.EarlierForm = accepted.Status, accepted.StatusForm
	accepted.State, accepted.Status, accepted.StatusForm, accepted.Decided = store.Completed, storetest.Status("accepted/completed"), handoff.FormCOSE, done
	checkHops(t, s, accepted, moved)
}

// A database the version before the issued listing left behind, with hops
// issued in it, opens: the migration builds the listing's indexes over
// them, and the listing finds them, by delegate too.
func TestMigrationAddsTheIssuedListing(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hops.db")
	schemaBefore(t, path, issuedMigration)
	db, err := sql.Open("sqlite", sqlite.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	var want []*store.Issued
	for i, aud := range []string{storetest.Aud, "https://agent.example/other", storetest.Aud} {
		h := storetest.NewIssued(fmt.Sprintf("issued-%d", i), fmt.Sprintf("work-%d", i), i)
		h.Aud, h.Created = aud, storetest.Base.Add(time.Duration(i)*time.Second)
		if _, err := db.ExecContext(ctx, `INSERT INTO issued (hop, aud, work, offer, offer_form, digest_alg, digest, exp, view, created)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, h.Hop, h.Aud, h.Work, h.Offer, int(h.OfferForm), h.Digest.Alg, h.Digest.Val,
			h.Exp.UnixNano(), string(h.View), h.Created.UnixNano()); err != nil {
			t.Fatal(err)
		}
		want = append([]*store.Issued{h}, want...) // newest first
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	checkVersions(t, versions(t, s))
	for _, q := range []store.IssuedQuery{{Limit: 10}, {Aud: storetest.Aud, Limit: 10}} {
		got, err := s.ListIssued(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var w []*store.Issued
		for _, h := range want {
			if q.Matches(h) {
				w = append(w, h)
			}
		}
		if len(got) != len(w) {
			t.Fatalf("ListIssued(aud %q) = %d hops; want %d", q.Aud, len(got), len(w))
		}
		for i := range w {
			if d := storetest.DiffIssued(got[i], w[i]); d != nil {
				t.Errorf("ListIssued(aud %q)[%d] differs:\n\t%s", q.Aud, i, strings.Join(d, "\n\t"))
			}
		}
	}
}
