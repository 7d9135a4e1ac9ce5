package delegate_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
)

// openSQLiteStore opens a fresh SQLite store whose memory began an hour
// ago, with an effects table for the work.
func openSQLiteStore(t *testing.T, w *world) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hops.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Forget(context.Background(), w.clock().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().Exec(`CREATE TABLE effects (hop TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	return s
}

// takenOnSQLite is a delegate on a fresh SQLite store (openSQLiteStore)
// that has just taken one offer's hop.
func takenOnSQLite(t *testing.T) (*world, *sqlite.Store, *delegate.Delegate, []byte, *handoff.Offer) {
	t.Helper()
	w := newWorld(t)
	s := openSQLiteStore(t, w)
	d := w.delegate(s, nil)
	b, o := w.offer("")
	if a, err := d.Receive(context.Background(), b, "ctx", "planner"); err != nil || !a.Take {
		t.Fatal(a, err)
	}
	return w, s, d, b, o
}

// completes is the quick part of work that records hop's effect (a row
// of the effects table) and declares it completed.
func completes(hop string) delegate.Effect {
	return func(tx *sql.Tx) (delegate.Outcome, error) {
		_, err := tx.Exec(`INSERT INTO effects (hop) VALUES (?)`, hop)
		return delegate.Outcome{State: store.Completed}, err
	}
}

// "Knowing the Outcome", Lifecycle (canceled) and "Forks, Concurrency, and
// Equivocation": a hop canceled, or equivocated, while RecordOutcome's
// work runs (outside any transaction) never gets the work's effect: the
// Effect is not applied, and the hop is recorded failed with no refs
// (reason policy, or equivocation), returned to send with ErrCanceled or
// ErrEquivocated.
func TestRecordOutcomeStoppedWhileWorking(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name    string
		meddle  func(t *testing.T, w *world, d *delegate.Delegate, b []byte, o *handoff.Offer)
		sentry  error
		reason  handoff.Reason
		cancel  bool
		equivoc bool
	}{
		{"canceled", func(t *testing.T, w *world, d *delegate.Delegate, b []byte, o *handoff.Offer) {
			if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); err != nil {
				t.Errorf("Cancel: %v", err)
			}
		}, delegate.ErrCanceled, handoff.ReasonPolicy, true, false},
		{"equivocated", func(t *testing.T, w *world, d *delegate.Delegate, _ []byte, o *handoff.Offer) {
			second, _ := w.offer(o.Hop)
			if _, err := d.Receive(ctx, second, "ctx", "planner"); err != nil {
				t.Errorf("second offer: %v", err)
			}
		}, delegate.ErrEquivocated, handoff.ReasonEquivocation, false, true},
	} {
		for _, before := range []bool{false, true} {
			name := c.name + " while working"
			if before {
				name = c.name + " before the work began"
			}
			t.Run(name, func(t *testing.T) {
				w := newWorld(t)
				s := openSQLiteStore(t, w)
				d := w.delegate(s, nil)
				b, o := w.offer("")
				if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
					t.Fatalf("Receive: %+v, %v", a, err)
				}
				if before {
					c.meddle(t, w, d, b, o)
				}
				applied, ran := false, false
				st, err := d.RecordOutcome(ctx, o.Iss, o.Hop, func(context.Context) (delegate.Effect, error) {
					ran = true
					if !before {
						c.meddle(t, w, d, b, o) // while the slow part runs
					}
					return func(tx *sql.Tx) (delegate.Outcome, error) {
						applied = true
						_, err := tx.Exec(`INSERT INTO effects (hop) VALUES (?)`, o.Hop)
						return delegate.Outcome{State: store.Completed}, err
					}, nil
				})
				if !errors.Is(err, c.sentry) {
					t.Fatalf("RecordOutcome = %v; want %v", err, c.sentry)
				}
				if applied || count(t, s.DB()) != 0 {
					t.Fatal("the work's effect was applied on a hop stopped while it ran")
				}
				if before && ran {
					t.Error("the work ran for a hop stopped before it began")
				}
				got := statusOf(t, w, st, b)
				if got.State != handoff.StateFailed || got.Reason != c.reason || len(got.Refs) != 0 {
					t.Fatalf("status %s, %s, refs %v; want failed, %s, no refs", got.State, got.Reason, got.Refs, c.reason)
				}
				r, err := s.Get(ctx, o.Iss, o.Hop)
				if err != nil || r.State != store.Failed || r.Canceled != c.cancel || r.Equivocated != c.equivoc || string(r.Status) != string(st.Octets) {
					t.Fatalf("record %+v, %v; want failed with the returned status", r, err)
				}
			})
		}
	}
}

// "Kept Records": once the slow part of the work is done, its result is
// recorded even if the caller's context ends just then (a request
// deadline): the short transaction runs detached, within OutcomeBound.
func TestRecordOutcomeOutlivesTheCallersDeadline(t *testing.T) {
	w := newWorld(t)
	s := openSQLiteStore(t, w)
	d := w.delegate(s, nil)
	b, o := w.offer("")
	if a, err := d.Receive(context.Background(), b, "ctx", "planner"); err != nil || !a.Take {
		t.Fatal(a, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := d.RecordOutcome(ctx, o.Iss, o.Hop, func(context.Context) (delegate.Effect, error) {
		cancel() // the deadline passes as the slow part finishes
		return completes(o.Hop), nil
	})
	if err != nil || st == nil {
		t.Fatalf("RecordOutcome: %v", err)
	}
	r, err := s.Get(context.Background(), o.Iss, o.Hop)
	if err != nil || r.State != store.Completed || count(t, s.DB()) != 1 {
		t.Fatalf("hop %+v, %v, %d effects; want completed with its effect", r, err, count(t, s.DB()))
	}
}

// "Kept Records": when the store cannot record the outcome of work that
// was done (here a real SQLite trigger refuses the hop's update), the hop
// stays accepted and is flagged "unknown outcome" for the operator; an
// error of the work itself is the caller's to handle and raises nothing.
func TestRecordOutcomeStoreFailureIsFlagged(t *testing.T) {
	ctx := context.Background()
	_, s, d, _, o := takenOnSQLite(t)
	effect := func(context.Context) (delegate.Effect, error) {
		return completes(o.Hop), nil
	}
	// The work's own error: no flag.
	if _, err := d.RecordOutcome(ctx, o.Iss, o.Hop, func(context.Context) (delegate.Effect, error) {
		return nil, errors.New("the work failed")
	}); err == nil {
		t.Fatal("RecordOutcome of failing work: no error")
	}
	if fs, _ := d.Flags(ctx, false); len(fs) != 0 {
		t.Fatalf("flags %+v after the work's own error; want none", fs)
	}
	if _, err := s.DB().Exec(`CREATE TRIGGER refuse_outcome BEFORE UPDATE OF state ON hops BEGIN SELECT RAISE(ABORT, 'disk on fire'); END`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RecordOutcome(ctx, o.Iss, o.Hop, effect); err == nil {
		t.Fatal("RecordOutcome under a refusing store: no error")
	}
	r, err := s.Get(ctx, o.Iss, o.Hop)
	if err != nil || r.State != store.Accepted || count(t, s.DB()) != 0 {
		t.Fatalf("hop %+v, %v, %d effects; want accepted, no effect", r, err, count(t, s.DB()))
	}
	fs, err := d.Flags(ctx, false)
	if err != nil || len(fs) != 1 || fs[0].Kind != store.FlagUnknownOutcome || fs[0].Hop != o.Hop {
		t.Fatalf("flags %+v, %v; want one unknown-outcome flag for the hop", fs, err)
	}
}

// "Knowing the Outcome": a host that calls RecordOutcome twice for one
// hop at once (a retry after a timeout, two workers handed the same hop)
// runs the work once. The second call waits for the first, finds the
// outcome recorded, and returns store.ErrConflict without running
// anything; the effect is applied once.
func TestRecordOutcomeTwiceRunsOnce(t *testing.T) {
	ctx := context.Background()
	w, s, d, _, o := takenOnSQLite(t)
	var runs atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	work := func(context.Context) (delegate.Effect, error) {
		if runs.Add(1) == 1 {
			close(entered)
			<-release
		}
		return completes(o.Hop), nil
	}
	first := make(chan error, 1)
	go func() { _, err := d.RecordOutcome(ctx, o.Iss, o.Hop, work); first <- err }()
	<-entered
	second := make(chan error, 1)
	go func() { _, err := d.RecordOutcome(ctx, o.Iss, o.Hop, work); second <- err }()
	// The second call is waiting: it does not end while the first runs.
	select {
	case err := <-second:
		t.Fatalf("the second call ended (%v) while the first call's work ran", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
	if err := <-second; !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second call: %v; want store.ErrConflict (the outcome is recorded)", err)
	}
	if n := runs.Load(); n != 1 || count(t, s.DB()) != 1 {
		t.Fatalf("work ran %d times, %d effects; want once", n, count(t, s.DB()))
	}
	// A caller that gives up waiting gets its context's error.
	b2, o2 := w.offer("")
	if a, err := d.Receive(ctx, b2, "ctx", "planner"); err != nil || !a.Take {
		t.Fatal(a, err)
	}
	hold, held := make(chan struct{}), make(chan struct{})
	go d.RecordOutcome(ctx, o2.Iss, o2.Hop, func(context.Context) (delegate.Effect, error) {
		close(held)
		<-hold
		return nil, errors.New("gave up")
	})
	<-held
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := d.RecordOutcome(cctx, o2.Iss, o2.Hop, work); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting call whose context ended: %v; want its deadline", err)
	}
	close(hold)
}
