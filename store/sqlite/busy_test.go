package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/internal/sqlhop"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// lockFor takes the write lock of the database file at path from another
// connection (another process, in effect) and releases it after d.
func lockFor(t *testing.T, path string, d time.Duration) <-chan struct{} {
	t.Helper()
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(d)
		conn.ExecContext(context.Background(), `COMMIT`)
		conn.Close()
	}()
	return done
}

// Decision 56: a claim that finds the database locked past the busy
// timeout (another writer held it) is made again, with backoff, within
// the caller's context, rather than failing the offer; at the context's
// deadline it fails, naming the hop, and wrote nothing.
func TestBusyClaimRetried(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hops.db")
	// A busy timeout far shorter than the lock is held, so the retry (not
	// the driver's own wait) is what is tested.
	db, err := sql.Open("sqlite", strings.Replace(DSN(path), "busy_timeout%2810000%29", "busy_timeout%2820%29", 1))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sqlhop.Open(context.Background(), db, dialect, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var busy int
	if err := s.DB().QueryRow(`PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 20 {
		t.Fatalf("busy timeout %d, %v; want the test's 20 ms", busy, err)
	}

	released := lockFor(t, path, 400*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	r := storetest.NewRecord("waited", store.Accepted, 0)
	if _, stored, err := s.Claim(ctx, r); err != nil || !stored {
		t.Fatalf("Claim while another writer holds the lock: stored %v, %v; want it stored once the lock is free", stored, err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("the claim returned after %v, before the lock was released", el)
	}
	<-released

	released = lockFor(t, path, time.Second)
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err = s.Claim(ctx, storetest.NewRecord("gave-up", store.Accepted, 0))
	// The deadline ends it in a retry's wait (the busy error) or inside an
	// attempt (the driver's interrupt): either way it names the hop.
	if err == nil || !(strings.Contains(err.Error(), "locked") || errors.Is(err, context.DeadlineExceeded)) || !strings.Contains(err.Error(), "gave-up") {
		t.Fatalf("Claim past its deadline under a held lock = %v; want the busy error or the deadline, naming the hop", err)
	}
	<-released
	if _, err := s.Get(context.Background(), storetest.Iss, "gave-up"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a claim that gave up left a record: %v", err)
	}
}
