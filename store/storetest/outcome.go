package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- RecordOutcome -----------------------------------------------------------

// RunOutcome runs the checks of RecordOutcome (draft "Knowing the
// Outcome", "Kept Records"): the work's own writes and the hop's outcome
// commit together or not at all, and the work's slow part holds no lock,
// so intake goes on while it runs. open must return a fresh, empty store on
// each call, closed when t ends. The checks create a table "effects"
// through DB().
func RunOutcome(t *testing.T, open func(t *testing.T) store.SQLStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.SQLStore)
	}{
		{"OutcomeCommitsWithEffect", testOutcomeCommits},
		{"OutcomeWorkErrorRecordsNothing", testOutcomeWorkError},
		{"OutcomeEffectErrorRecordsNothing", testOutcomeEffectError},
		{"OutcomeNoEffectIsAnError", testOutcomeNilEffect},
		{"OutcomeNotTerminalRecordsNothing", testOutcomeNotTerminal},
		{"OutcomeOnTerminalHopIsConflict", testOutcomeTerminal},
		{"OutcomeMissingHopIsErrNotFound", testOutcomeMissing},
		{"OutcomeConcurrentOnce", testOutcomeConcurrent},
		{"OutcomeEffectExcludesTransition", testOutcomeExcludesTransition},
		{"OutcomeWorkHoldsNoLock", testOutcomeWorkHoldsNoLock},
		{"OutcomeEffectSeesTheRecordAsItStands", testOutcomeEffectSeesRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			if _, err := s.DB().ExecContext(t.Context(), `CREATE TABLE effects (hop TEXT NOT NULL, note TEXT NOT NULL)`); err != nil {
				t.Fatalf("create effects: %v", err)
			}
			tt.fn(t, s)
		})
	}
}

// at is a clock stopped at tm.
func at(tm time.Time) func() time.Time { return func() time.Time { return tm } }

// effect writes the work's effect for hop in tx. The values are the
// suite's own constants (no quotes), so the statement needs no
// placeholders, whose syntax differs between the databases.
func effect(tx *sql.Tx, hop, note string) error {
	_, err := tx.Exec(`INSERT INTO effects (hop, note) VALUES ('` + hop + `', '` + note + `')`)
	return err
}

func effects(t *testing.T, s store.SQLStore, hop string) int {
	t.Helper()
	var n int
	if err := s.DB().QueryRowContext(t.Context(), `SELECT COUNT(*) FROM effects WHERE hop = '`+hop+`'`).Scan(&n); err != nil {
		t.Fatalf("count effects: %v", err)
	}
	return n
}

// outcomeWork is work whose Effect writes one effect row and returns the
// outcome st. calls counts the work's runs; seen gets the record the work
// was given.
func outcomeWork(hop, note string, st store.State, calls *int, seen **store.Record) func(context.Context, *store.Record) (store.Effect, error) {
	return func(_ context.Context, r *store.Record) (store.Effect, error) {
		if calls != nil {
			*calls++
		}
		if seen != nil {
			*seen = copyRecord(r)
		}
		return func(tx *sql.Tx, _ *store.Record) (store.Outcome, error) {
			if err := effect(tx, hop, note); err != nil {
				return store.Outcome{}, err
			}
			return store.Outcome{State: st, Status: Status(hop + "/" + note), StatusForm: handoff.FormCOSE}, nil
		}, nil
	}
}

// The work's writes and the outcome commit together: afterwards both the
// effect and the terminal record (status, Decided) are there. The work sees
// the record as it stands. Both Accepted and Received hops (completed
// without accepted first) may get an outcome.
func testOutcomeCommits(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	for i, c := range []struct {
		from, to store.State
	}{{store.Accepted, store.Completed}, {store.Accepted, store.Failed}, {store.Received, store.Completed}, {store.Received, store.Failed}} {
		hop := fmt.Sprintf("outcome-%s-%s", c.from, c.to)
		want := put(t, s, hop, c.from)
		var calls int
		var seen *store.Record
		now := Base.Add(time.Duration(i+1) * time.Minute)
		if err := s.RecordOutcome(ctx, Iss, hop, at(now), outcomeWork(hop, "done", c.to, &calls, &seen)); err != nil {
			t.Fatalf("RecordOutcome(%s): %v", hop, err)
		}
		if calls != 1 {
			t.Errorf("work ran %d times; want once", calls)
		}
		checkRecord(t, "the record work saw", seen, want)
		if n := effects(t, s, hop); n != 1 {
			t.Errorf("%d effect rows after RecordOutcome; want 1", n)
		}
		want.Earlier, want.EarlierForm = want.Status, want.StatusForm // the outcome's status replaces the last one
		want.State, want.Status, want.StatusForm, want.Decided = c.to, Status(hop+"/done"), handoff.FormCOSE, now
		checkGet(t, s, hop, want)
	}
}

var errWork = errors.New("storetest: the work failed")

// If the work returns an error, RecordOutcome returns it; no effect runs
// and no outcome is recorded; the hop can still get one.
func testOutcomeWorkError(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	want := put(t, s, "boom", store.Accepted)
	ran := false
	err := s.RecordOutcome(ctx, Iss, "boom", at(Base.Add(time.Minute)), func(context.Context, *store.Record) (store.Effect, error) {
		return func(tx *sql.Tx, _ *store.Record) (store.Outcome, error) {
			ran = true
			return store.Outcome{State: store.Completed, Status: Status("never"), StatusForm: handoff.FormJWS}, effect(tx, "boom", "partial")
		}, errWork
	})
	if !errors.Is(err, errWork) {
		t.Errorf("RecordOutcome = %v; want the work's error", err)
	}
	if ran {
		t.Error("the effect of work that failed ran")
	}
	checkGet(t, s, "boom", want)
	if err := s.RecordOutcome(ctx, Iss, "boom", at(Base.Add(2*time.Minute)), outcomeWork("boom", "retry", store.Completed, nil, nil)); err != nil {
		t.Fatalf("second RecordOutcome: %v", err)
	}
	if n := effects(t, s, "boom"); n != 1 {
		t.Errorf("%d effect rows after the retry; want 1", n)
	}
	want.Earlier, want.EarlierForm = want.Status, want.StatusForm
	want.State, want.Status, want.StatusForm, want.Decided = store.Completed, Status("boom/retry"), handoff.FormCOSE, Base.Add(2*time.Minute)
	checkGet(t, s, "boom", want)
}

// If the Effect returns an error after writing, RecordOutcome returns it,
// and neither its writes nor an outcome are kept.
func testOutcomeEffectError(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	want := put(t, s, "boom", store.Accepted)
	err := s.RecordOutcome(ctx, Iss, "boom", at(Base.Add(time.Minute)), func(context.Context, *store.Record) (store.Effect, error) {
		return func(tx *sql.Tx, _ *store.Record) (store.Outcome, error) {
			if err := effect(tx, "boom", "partial"); err != nil {
				return store.Outcome{}, err
			}
			return store.Outcome{State: store.Completed, Status: Status("never"), StatusForm: handoff.FormJWS}, errWork
		}, nil
	})
	if !errors.Is(err, errWork) {
		t.Errorf("RecordOutcome = %v; want the effect's error", err)
	}
	if n := effects(t, s, "boom"); n != 0 {
		t.Errorf("%d effect rows after the effect failed; want 0", n)
	}
	checkGet(t, s, "boom", want)
}

// Work that returns no Effect (and no error) records nothing and is an
// error naming the hop.
func testOutcomeNilEffect(t *testing.T, s store.SQLStore) {
	want := put(t, s, "nil", store.Accepted)
	err := s.RecordOutcome(t.Context(), Iss, "nil", at(Base), func(context.Context, *store.Record) (store.Effect, error) { return nil, nil })
	if err == nil || !containsAll(err.Error(), "nil") {
		t.Errorf("RecordOutcome with no effect = %v; want an error naming the hop", err)
	}
	checkGet(t, s, "nil", want)
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// An outcome is completed or failed: an Effect that returns any other
// state makes RecordOutcome fail, with nothing of it kept.
func testOutcomeNotTerminal(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	for _, st := range []store.State{store.Accepted, store.Received, store.Rejected, "", "canceled"} {
		hop := "not-terminal-" + string(st)
		want := put(t, s, hop, store.Accepted)
		if err := s.RecordOutcome(ctx, Iss, hop, at(Base.Add(time.Minute)), outcomeWork(hop, "x", st, nil, nil)); err == nil {
			t.Errorf("RecordOutcome with outcome %q succeeded; want an error", st)
		}
		if n := effects(t, s, hop); n != 0 {
			t.Errorf("outcome %q: %d effect rows; want 0", st, n)
		}
		checkGet(t, s, hop, want)
	}
}

// On a hop that is already terminal RecordOutcome is ErrConflict and the
// work does not run.
func testOutcomeTerminal(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	for _, st := range []store.State{store.Rejected, store.Completed, store.Failed} {
		hop := "terminal-" + string(st)
		want := put(t, s, hop, st)
		var calls int
		err := s.RecordOutcome(ctx, Iss, hop, at(Base.Add(time.Hour)), outcomeWork(hop, "again", store.Completed, &calls, nil))
		if !errors.Is(err, store.ErrConflict) {
			t.Errorf("RecordOutcome on a %s hop = %v; want ErrConflict", st, err)
		}
		if calls != 0 {
			t.Errorf("RecordOutcome on a %s hop ran the work", st)
		}
		if n := effects(t, s, hop); n != 0 {
			t.Errorf("%d effect rows; want 0", n)
		}
		checkGet(t, s, hop, want)
	}
}

// On a hop with no record RecordOutcome is ErrNotFound and the work does
// not run.
func testOutcomeMissing(t *testing.T, s store.SQLStore) {
	var calls int
	err := s.RecordOutcome(t.Context(), Iss, "absent", at(Base), outcomeWork("absent", "x", store.Completed, &calls, nil))
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RecordOutcome on a missing hop = %v; want ErrNotFound", err)
	}
	if calls != 0 {
		t.Errorf("RecordOutcome on a missing hop ran the work")
	}
	if n := effects(t, s, "absent"); n != 0 {
		t.Errorf("%d effect rows; want 0", n)
	}
	checkGone(t, s, Iss, "absent")
}

// Concurrent RecordOutcome calls on one hop: exactly one succeeds; the
// others are ErrConflict and their effects never apply; there is exactly
// one effect and the record is the winner's outcome.
func testOutcomeConcurrent(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	const n = 4
	for round := range 4 {
		hop := fmt.Sprintf("once-%d", round)
		want := put(t, s, hop, []store.State{store.Accepted, store.Received}[round%2])
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				st := []store.State{store.Completed, store.Failed}[i%2]
				errs[i] = s.RecordOutcome(ctx, Iss, hop, at(Base.Add(time.Duration(i+1)*time.Second)),
					func(context.Context, *store.Record) (store.Effect, error) {
						time.Sleep(20 * time.Millisecond) // all of them work at once
						return func(tx *sql.Tx, _ *store.Record) (store.Outcome, error) {
							if err := effect(tx, hop, fmt.Sprint(i)); err != nil {
								return store.Outcome{}, err
							}
							time.Sleep(10 * time.Millisecond) // widen the window
							return store.Outcome{State: st, Status: Status(fmt.Sprintf("%s/%d", hop, i)), StatusForm: handoff.FormJWS}, nil
						}, nil
					})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: RecordOutcome %d and %d both succeeded", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("round %d: RecordOutcome %d = %v; want success or ErrConflict", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no RecordOutcome succeeded", round)
		}
		if c := effects(t, s, hop); c != 1 {
			t.Errorf("round %d: %d effect rows; want exactly 1", round, c)
		}
		var note string
		if err := s.DB().QueryRowContext(ctx, `SELECT note FROM effects WHERE hop = '`+hop+`'`).Scan(&note); err == nil && note != fmt.Sprint(winner) {
			t.Errorf("round %d: the effect is %s's, but %d won", round, note, winner)
		}
		want.State = []store.State{store.Completed, store.Failed}[winner%2]
		want.Earlier, want.EarlierForm = want.Status, want.StatusForm
		want.Status, want.StatusForm = Status(fmt.Sprintf("%s/%d", hop, winner)), handoff.FormJWS
		want.Decided = Base.Add(time.Duration(winner+1) * time.Second)
		checkGet(t, s, hop, want)
	}
}

// While the Effect runs, the hop is locked against other writers: a plain
// Transition of the same hop that starts during it waits and then fails
// with ErrConflict, so the record never disagrees with the effect.
func testOutcomeExcludesTransition(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	want := put(t, s, "locked", store.Accepted)
	inEffect := make(chan struct{})
	var once sync.Once
	started := func() { once.Do(func() { close(inEffect) }) }
	defer started()
	moved := make(chan error, 1)
	go func() {
		<-inEffect
		moved <- s.Transition(ctx, store.Move{Iss: Iss, Hop: "locked", From: store.Accepted, To: store.Failed, Status: Status("locked/other"), Form: handoff.FormJWS, Now: Base.Add(time.Hour)})
	}()
	err := s.RecordOutcome(ctx, Iss, "locked", at(Base.Add(time.Minute)), func(context.Context, *store.Record) (store.Effect, error) {
		return func(tx *sql.Tx, _ *store.Record) (store.Outcome, error) {
			if err := effect(tx, "locked", "x"); err != nil {
				return store.Outcome{}, err
			}
			started()
			time.Sleep(100 * time.Millisecond) // let the Transition reach the database
			return store.Outcome{State: store.Completed, Status: Status("locked/done"), StatusForm: handoff.FormCOSE}, nil
		}, nil
	})
	if err != nil {
		t.Fatalf("RecordOutcome: %v", err)
	}
	if err := <-moved; !errors.Is(err, store.ErrConflict) {
		t.Errorf("a Transition during the effect = %v; want ErrConflict", err)
	}
	if n := effects(t, s, "locked"); n != 1 {
		t.Errorf("%d effect rows; want 1", n)
	}
	want.Earlier, want.EarlierForm = want.Status, want.StatusForm
	want.State, want.Status, want.StatusForm, want.Decided = store.Completed, Status("locked/done"), handoff.FormCOSE, Base.Add(time.Minute)
	checkGet(t, s, "locked", want)
}

// The work's slow part holds no lock (decision 56): while it runs, claims,
// marks, flags, held cancels of other hops, and even a terminal
// transition of its own hop, complete. The hop having become terminal,
// the Effect never runs and RecordOutcome is ErrConflict: nothing of the
// work takes effect, and the record stays the other writer's.
func testOutcomeWorkHoldsNoLock(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	put(t, s, "slow", store.Accepted)
	put(t, s, "other", store.Accepted)
	intake := make(chan error, 1)
	ran := false
	err := s.RecordOutcome(ctx, Iss, "slow", at(Base.Add(time.Hour)), func(ctx context.Context, _ *store.Record) (store.Effect, error) {
		go func() {
			intake <- func() error {
				if _, _, err := s.Claim(ctx, NewRecord("new", store.Accepted, 0)); err != nil {
					return fmt.Errorf("Claim: %w", err)
				}
				if err := s.MarkCanceled(ctx, Iss, "other"); err != nil {
					return fmt.Errorf("MarkCanceled: %w", err)
				}
				if _, err := s.Raise(ctx, sampleFlags()[0]); err != nil {
					return fmt.Errorf("Raise: %w", err)
				}
				if err := s.Hold(ctx, newHeld(Iss, "early", 0), heldLim); err != nil {
					return fmt.Errorf("Hold: %w", err)
				}
				if err := s.Transition(ctx, store.Move{Iss: Iss, Hop: "slow", From: store.Accepted, To: store.Failed, Status: Status("slow/failed"), Form: handoff.FormJWS, Now: Base.Add(time.Minute)}); err != nil {
					return fmt.Errorf("Transition of the working hop: %w", err)
				}
				return nil
			}()
		}()
		// The work goes on until intake is done; were a lock held, intake
		// would wait out the busy timeout (or forever, for a row lock).
		select {
		case err := <-intake:
			if err != nil {
				return nil, err
			}
		case <-time.After(5 * time.Second):
			return nil, errors.New("intake did not finish while the work ran")
		}
		return func(tx *sql.Tx, _ *store.Record) (store.Outcome, error) {
			ran = true
			return store.Outcome{State: store.Completed, Status: Status("slow/done"), StatusForm: handoff.FormCOSE}, effect(tx, "slow", "x")
		}, nil
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("RecordOutcome after the hop failed meanwhile = %v; want ErrConflict", err)
	}
	if ran || effects(t, s, "slow") != 0 {
		t.Error("the effect of work on a hop that became terminal meanwhile was applied")
	}
	if r := mustGet(t, s, "slow"); r.State != store.Failed || string(r.Status) != string(Status("slow/failed")) {
		t.Errorf("record %s; want the other writer's failed", r.State)
	}
}

// The Effect is given the record as it stands in the short transaction:
// a cancel or an equivocation marked while the work ran is visible to it
// (and it decides what that means), while the work saw the record before.
func testOutcomeEffectSeesRecord(t *testing.T, s store.SQLStore) {
	ctx := t.Context()
	put(t, s, "marked", store.Accepted)
	var before, inTx *store.Record
	err := s.RecordOutcome(ctx, Iss, "marked", at(Base.Add(time.Minute)), func(ctx context.Context, r *store.Record) (store.Effect, error) {
		before = copyRecord(r)
		if err := s.MarkCanceled(ctx, Iss, "marked"); err != nil {
			return nil, err
		}
		if err := s.MarkEquivocated(ctx, Iss, "marked"); err != nil {
			return nil, err
		}
		return func(_ *sql.Tx, r *store.Record) (store.Outcome, error) {
			inTx = copyRecord(r)
			return store.Outcome{State: store.Failed, Status: Status("marked/failed"), StatusForm: handoff.FormJWS}, nil
		}, nil
	})
	if err != nil {
		t.Fatalf("RecordOutcome: %v", err)
	}
	if before.Canceled || before.Equivocated {
		t.Error("the work saw marks made after it began")
	}
	if inTx == nil || !inTx.Canceled || !inTx.Equivocated || inTx.State != store.Accepted {
		t.Errorf("the effect saw %+v; want the hop accepted, canceled and equivocated", inTx)
	}
}
