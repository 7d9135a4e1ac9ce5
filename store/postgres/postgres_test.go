package postgres_test

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// The tests run against the PostgreSQL server named by HANDOFF_TEST_POSTGRES
// (a libpq connection string or URL), which scripts/pg.sh starts:
//
//	source scripts/pg.sh && pg_start && trap pg_stop EXIT && go test ./store/...
//
// Without it they are skipped, except in CI (CI set), where no test is
// silently skipped.
const envDSN = "HANDOFF_TEST_POSTGRES"

// freshDSN returns a connection string for a new, empty schema of its own
// (first on the search_path), dropped when t ends. A schema rather than a
// database: CREATE DATABASE with fsync on costs seconds, a schema
// milliseconds, and each schema has its own tables all the same.
func freshDSN(t testing.TB) string {
	t.Helper()
	admin := adminDSN(t)
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatalf("%s: %v", envDSN, err)
	}
	var b [8]byte
	rand.Read(b[:])
	schema := "handoff_test_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		db.Close()
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		defer db.Close()
		// Not t.Context(): it is canceled before cleanups run.
		if _, err := db.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return withSearchPath(t, admin, schema)
}

// adminDSN returns HANDOFF_TEST_POSTGRES, skipping t when it is unset (or
// failing it in CI). Every test calls it first, so that a skip is reported
// once per test, not once per subtest.
func adminDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(envDSN)
	if dsn == "" {
		msg := envDSN + " is not set: no PostgreSQL to test against (start one with: source scripts/pg.sh && pg_start)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; in CI no test is silently skipped")
		}
		t.Skip(msg)
	}
	return dsn
}

func withSearchPath(t testing.TB, dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("%s: %v", envDSN, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}

// open opens the store at dsn, closing it when t ends.
func open(t testing.TB, dsn string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	// Keep the connections the concurrency tests open (64 at once) for
	// their next round: a PostgreSQL connection costs a process start.
	s.DB().SetMaxIdleConns(64)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func fresh(t testing.TB) *postgres.Store { return open(t, freshDSN(t)) }

func TestConformance(t *testing.T) {
	adminDSN(t)
	storetest.Run(t, func(t *testing.T) store.Store { return fresh(t) })
}

func TestOutcome(t *testing.T) {
	adminDSN(t)
	storetest.RunOutcome(t, func(t *testing.T) store.SQLStore { return fresh(t) })
}

func TestTracker(t *testing.T) {
	adminDSN(t)
	storetest.RunTracker(t, func(t *testing.T) store.Tracker { return fresh(t) })
}

// Records, flags and Since live in the database: a store reopened on it (a
// restarted replica) has them all.
func TestReopenKeepsRecordsAndSince(t *testing.T) {
	ctx := t.Context()
	dsn := freshDSN(t)
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	since, err := s.Since(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := storetest.NewRecord("a", store.Accepted, 0)
	b := storetest.NewRecord("b", store.Received, 2) // its offer came with a chain of two
	c := storetest.NewRecord("c", store.Received, 0)
	c.Chain, c.ChainForms = [][]byte{}, []handoff.Form{} // an empty chain stays empty
	for _, r := range []*store.Record{a, b, c} {
		if _, ins, err := s.Claim(ctx, r); err != nil || !ins {
			t.Fatalf("Claim(%s) = %v, %v", r.Hop, ins, err)
		}
	}
	done := storetest.Base.Add(time.Minute)
	if err := s.Transition(ctx, store.Move{Iss: storetest.Iss, Hop: "a", From: store.Accepted, To: store.Completed, Status: storetest.Status("a/done"), Form: handoff.FormCOSE, Now: done}); err != nil {
		t.Fatal(err)
	}
	a.Earlier, a.EarlierForm = a.Status, a.StatusForm
	a.State, a.Status, a.StatusForm, a.Decided = store.Completed, storetest.Status("a/done"), handoff.FormCOSE, done
	if err := s.MarkCanceled(ctx, storetest.Iss, "b"); err != nil {
		t.Fatal(err)
	}
	b.Canceled = true
	id, err := s.Raise(ctx, store.Flag{Kind: store.FlagUnknownOutcome, Iss: storetest.Iss, Hop: "b", Detail: "d", Created: storetest.Base})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dsn)
	for _, want := range []*store.Record{a, b, c} {
		got, err := s.Get(ctx, want.Iss, want.Hop)
		if err != nil {
			t.Fatalf("Get(%s) after reopening: %v", want.Hop, err)
		}
		if d := storetest.DiffRecord(got, want); d != nil {
			t.Errorf("Get(%s) after reopening differs:\n\t%s", want.Hop, strings.Join(d, "\n\t"))
		}
	}
	if got, err := s.Since(ctx); err != nil || !got.Equal(since) {
		t.Errorf("Since after reopening = %v, %v; want %v", got, err, since)
	}
	if fl, err := s.Flags(ctx, false); err != nil || len(fl) != 1 || fl[0].ID != id {
		t.Errorf("Flags after reopening = %+v, %v; want flag %d", fl, err, id)
	}

	forgot := storetest.Base.Add(3 * time.Hour)
	if err := s.Forget(ctx, forgot); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, dsn)
	if got, err := s2.Since(ctx); err != nil || !got.Equal(forgot) {
		t.Errorf("Since seen by another store after Forget = %v, %v; want %v", got, err, forgot)
	}
	if _, err := s2.Get(ctx, storetest.Iss, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get by another store after Forget = %v; want ErrNotFound", err)
	}
}

// Two stores on one database (two replicas) racing to claim one hop:
// exactly one claim inserts, and every caller gets the winner's record;
// racing transitions: exactly one wins.
func TestTwoStoresRaceClaims(t *testing.T) {
	dsn := freshDSN(t)
	storetest.RunTwoHandles(t, func(t *testing.T) store.Store { return open(t, dsn) })
}

func versions(t *testing.T, s *postgres.Store) []int {
	t.Helper()
	rows, err := s.DB().QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatalf("schema_migrations: %v", err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func checkVersions(t *testing.T, vs []int) {
	t.Helper()
	if len(vs) == 0 {
		t.Fatalf("schema_migrations is empty")
	}
	for i, v := range vs {
		if v != i+1 {
			t.Fatalf("schema_migrations = %v; want 1, 2, ... each once", vs)
		}
	}
}

// The schema version is kept in schema_migrations, one row per migration,
// each applied once however often the store is opened; a database whose
// schema is newer than the program is refused.
func TestMigrationVersionTable(t *testing.T) {
	ctx := t.Context()
	dsn := freshDSN(t)
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	vs := versions(t, s)
	checkVersions(t, vs)
	s.Close()
	s = open(t, dsn)
	if again := versions(t, s); len(again) != len(vs) {
		t.Errorf("schema_migrations after reopening = %v; was %v", again, vs)
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, len(vs)+1); err != nil {
		t.Fatal(err)
	}
	if s2, err := postgres.Open(ctx, dsn); err == nil {
		s2.Close()
		t.Errorf("Open of a database whose schema is version %d (newer than the program's) succeeded", len(vs)+1)
	}
}

// Stores opened at once on a new database (replicas starting together) all
// open, and the migrations run once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := freshDSN(t)
	const n = 8
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = postgres.Open(t.Context(), dsn)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Open %d: %v", i, errs[i])
			continue
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	for i := range n {
		if errs[i] == nil {
			checkVersions(t, versions(t, stores[i]))
			break
		}
	}
}

// Concurrent claims share a group commit (one transaction, one multi-row
// insert). A claim PostgreSQL refuses (an iss that is not UTF-8) must fail
// alone: every other claim of its batch is still stored and answered as
// its own (Claim: "one atomic step" per record).
func TestGroupCommitBadClaimFailsAlone(t *testing.T) {
	s := fresh(t)
	const n = 32
	for round := range 3 {
		start := make(chan struct{})
		errs := make([]error, n)
		stored := make([]bool, n)
		recs := make([]*store.Record, n)
		var wg sync.WaitGroup
		for i := range n {
			recs[i] = storetest.NewRecord(fmt.Sprintf("batch-%d-%d", round, i), store.Accepted, i)
			if i == n/2 {
				recs[i].Iss = "bad\xffiss"
			}
			r := *recs[i]
			wg.Go(func() {
				<-start
				_, stored[i], errs[i] = s.Claim(t.Context(), &r)
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			if i == n/2 {
				if errs[i] == nil {
					t.Errorf("round %d: the claim with a non-UTF-8 iss succeeded", round)
				}
				continue
			}
			if errs[i] != nil || !stored[i] {
				t.Errorf("round %d: claim %d beside a bad one: stored %v, error %v", round, i, stored[i], errs[i])
				continue
			}
			got, err := s.Get(t.Context(), recs[i].Iss, recs[i].Hop)
			if err != nil {
				t.Errorf("round %d: Get %d: %v", round, i, err)
			} else if d := storetest.DiffRecord(got, recs[i]); d != nil {
				t.Errorf("round %d: record %d:\n\t%s", round, i, strings.Join(d, "\n\t"))
			}
		}
	}
}

// Open refuses a database whose default isolation is not READ COMMITTED:
// the claim's order against a held cancel (store.Store.Claim) relies on
// each statement seeing what committed while it waited for its lock.
func TestOpenRefusesStricterIsolation(t *testing.T) {
	dsn := freshDSN(t)
	for _, iso := range []string{"repeatable read", "serializable"} {
		var d string
		if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("default_transaction_isolation", iso)
			u.RawQuery = q.Encode()
			d = u.String()
		} else {
			d = dsn + " default_transaction_isolation='" + iso + "'"
		}
		s, err := postgres.Open(t.Context(), d)
		if err == nil {
			s.Close()
			t.Fatalf("Open with %s: no error; want a refusal", iso)
		}
		if !strings.Contains(err.Error(), "read committed") {
			t.Fatalf("Open with %s: %v; want it to name the isolation it needs", iso, err)
		}
	}
}
