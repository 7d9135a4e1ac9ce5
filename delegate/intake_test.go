package delegate_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
)

// slowWork is how long the one piece of work of TestIntakeNeverWaitsOnWork
// takes: longer than SQLite's busy timeout (10 s), so that intake waiting
// on it would fail, not merely be slow.
const slowWork = 15 * time.Second

// Decision 56 ("Kept Records": the record stays atomic with the effect,
// but no application work holds the database): while one 15 s piece of
// work runs through RecordOutcome, 100 other offers are taken (accepted),
// canceled (a signed "canceled" applied to the running hop) and refused
// (deferred, then rejected), all of them finished before the work ends;
// the work's effect and outcome then commit together. On SQLite and on
// PostgreSQL, in parallel (about 16 s in all).
func TestIntakeNeverWaitsOnWork(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 15 s piece of work")
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hops.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		intakeDuringWork(t, s, s.DB(), `INSERT INTO effects (hop) VALUES (?)`)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s, err := postgres.Open(context.Background(), postgresTarget(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		intakeDuringWork(t, s, s.DB(), `INSERT INTO effects (hop) VALUES ($1)`)
	})
}

func intakeDuringWork(t *testing.T, s store.Store, db *sql.DB, insert string) {
	ctx := context.Background()
	w := newWorld(t)
	if err := s.Forget(ctx, w.clock().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE effects (hop TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	d := w.delegate(s, nil)
	deferred := w.delegate(s, func(c *delegate.Config) { c.Defer = true }) // a second replica, deciding later

	slowB, slow := w.offer("")
	if a, err := d.Receive(ctx, slowB, "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("the slow offer: %+v, %v", a, err)
	}
	working := make(chan struct{})
	var workEnd time.Time
	outcome := make(chan error, 1)
	go func() {
		st, err := d.RecordOutcome(ctx, slow.Iss, slow.Hop, func(context.Context) (delegate.Effect, error) {
			close(working)
			time.Sleep(slowWork)
			workEnd = time.Now()
			return func(tx *sql.Tx) (delegate.Outcome, error) {
				_, err := tx.Exec(insert, slow.Hop)
				return delegate.Outcome{State: store.Completed}, err
			}, nil
		})
		if err == nil && statusOf(t, w, st, slowB).State != handoff.StateCompleted {
			err = fmt.Errorf("status %v; want completed", st)
		}
		outcome <- err
	}()
	<-working

	// 100 offers: a third taken, a third taken then canceled, a third
	// refused; eight at a time, each bounded well inside the work's time.
	const n = 100
	offers := make([][]byte, n)
	hops := make([]*handoff.Offer, n)
	for i := range n {
		offers[i], hops[i] = w.offer("")
	}
	errs := make([]error, n)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				errs[i] = intakeOne(w, s, d, deferred, i%3, offers[i], hops[i])
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	intakeEnd := time.Now()

	if err := <-outcome; err != nil {
		t.Fatalf("the slow work's RecordOutcome: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("offer %d (%s): %v", i, []string{"taken", "canceled", "refused"}[i%3], err)
		}
	}
	if !intakeEnd.Before(workEnd) {
		t.Errorf("intake finished %v after the work ended; want every offer handled while it ran", intakeEnd.Sub(workEnd))
	}
	if r, err := s.Get(ctx, slow.Iss, slow.Hop); err != nil || r.State != store.Completed {
		t.Fatalf("the slow hop: %+v, %v; want completed", r, err)
	}
	var effects int
	if err := db.QueryRow(`SELECT COUNT(*) FROM effects`).Scan(&effects); err != nil || effects != 1 {
		t.Fatalf("effects %d, %v; want the slow work's one", effects, err)
	}
}

// intakeOne handles one offer as kind says (0 taken, 1 taken then
// canceled, 2 refused), within a bound shorter than the slow work, and
// checks the record it leaves.
func intakeOne(w *world, s store.Store, d, deferred *delegate.Delegate, kind int, b []byte, o *handoff.Offer) error {
	ctx, cancel := context.WithTimeout(context.Background(), slowWork-3*time.Second)
	defer cancel()
	via := d
	if kind == 2 {
		via = deferred
	}
	a, err := via.Receive(ctx, b, "ctx", "planner")
	if err != nil {
		return fmt.Errorf("Receive: %w", err)
	}
	want := store.Accepted
	switch kind {
	case 0:
		if !a.Take {
			return fmt.Errorf("not taken: %s", a.Outcome)
		}
	case 1:
		if !a.Take {
			return fmt.Errorf("not taken: %s", a.Outcome)
		}
		h, err := handoff.ParseHandoff(b, handoff.Limits{})
		if err != nil {
			return err
		}
		c, err := w.signers["planner"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "planner", Aud: "coder",
			Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
		if err != nil {
			return err
		}
		r, err := d.Cancel(ctx, c, o.Iss, o.Hop)
		if err != nil || !r.Canceled {
			return fmt.Errorf("Cancel: %+v, %w", r, err)
		}
	case 2:
		if a.Take || a.Record == nil || a.Record.State != store.Received {
			return fmt.Errorf("deferred offer: take %v, outcome %s", a.Take, a.Outcome)
		}
		if _, err := deferred.Reject(ctx, o.Iss, o.Hop, handoff.ReasonPolicy); err != nil {
			return fmt.Errorf("Reject: %w", err)
		}
		want = store.Rejected
	}
	r, err := s.Get(ctx, o.Iss, o.Hop)
	if err != nil {
		return err
	}
	if r.State != want || r.Canceled != (kind == 1) {
		return fmt.Errorf("record %s (canceled %v); want %s", r.State, r.Canceled, want)
	}
	return nil
}
