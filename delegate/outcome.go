package delegate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Transactional is a store whose records live in a SQL database that the
// work can write too (store/sqlite, store/postgres).
type Transactional interface {
	RecordOutcome(ctx context.Context, iss, hop string, now func() time.Time, work func(context.Context, *store.Record) (store.Effect, error)) error
}

// Effect is the last, quick part of taken work whose effect lives in the
// same database as the hop records: it makes the work's writes in tx and
// returns the outcome. It runs in the one short transaction that records
// the outcome, so the slow part of the work must be done before, outside
// it (see RecordOutcome).
type Effect func(tx *sql.Tx) (Outcome, error)

// RecordOutcome runs taken work whose effect lives in the same database as
// the hop records, and records the hop's outcome in the same transaction
// as the effect: the outcome is recorded exactly when the effect
// committed (draft "Knowing the Outcome", "Kept Records").
//
// work is the slow part, run outside any transaction, so that intake
// (claims, cancels, marks, flags of other hops) never waits on it; it has
// no effect of its own and returns the Effect that writes its result. The
// Effect then runs in one short transaction, on the hop as it stands then:
//
//   - terminal meanwhile (another outcome or a failure was recorded): the
//     Effect never runs, nothing takes effect, and the error wraps
//     store.ErrConflict;
//   - canceled or equivocated meanwhile: the Effect never runs, so the
//     work takes no effect, and the hop is recorded "failed" with no refs
//     (reason "policy" for a cancel, "equivocation" for a second offer):
//     the stop the cancel asked for, failing safe. That status is returned
//     to send, with an error wrapping ErrCanceled or ErrEquivocated;
//   - otherwise the Effect makes its writes and the outcome it returns is
//     signed and recorded with them.
//
// A hop already canceled or equivocated when RecordOutcome is called does
// not run work at all: it is recorded "failed" with no effect (its work
// never began), returned with ErrCanceled or ErrEquivocated as above.
//
// If work or the Effect returns an error, nothing of it takes effect and
// the hop stays as it was: the caller knows, and settles it. If the store
// fails to record the outcome of work that was done (or cannot say
// whether its commit took effect), the hop is flagged "unknown outcome"
// too, for the operator. The short transaction does not end with ctx: a
// deadline passing once the slow part is done does not drop its result.
// A second call for a hop whose RecordOutcome runs in this process waits
// for it: if the first recorded an outcome, the second finds it
// (store.ErrConflict) and runs nothing; if the first's work failed
// (nothing recorded), the second runs the work. work must not call
// RecordOutcome for its own hop: that call would wait for itself until
// its context ends.
//
// It returns the status to send.
func (d *Delegate) RecordOutcome(ctx context.Context, iss, hop string, work func(ctx context.Context) (Effect, error)) (*handoff.Element, error) {
	ts, ok := d.cfg.Store.(Transactional)
	if !ok {
		return nil, errors.New("delegate: the store has no transactions for the work (use Finish with an authoritative observation)")
	}
	release, err := d.working1(ctx, iss, hop)
	if err != nil {
		return nil, err
	}
	defer release()
	var st *handoff.Element
	var stopped *store.Record // the hop as found canceled or equivocated in the short transaction
	workErr := false          // the error is the work's own (or its Effect's): the caller knows
	err = ts.RecordOutcome(ctx, iss, hop, d.now, func(ctx context.Context, r0 *store.Record) (store.Effect, error) {
		var apply Effect
		if !r0.Canceled && !r0.Equivocated {
			// A hop canceled or equivocated before its work began does not
			// run it: it is recorded failed with no effect below.
			var err error
			if apply, err = work(ctx); err != nil {
				workErr = true
				return nil, err
			}
			if apply == nil {
				workErr = true
				return nil, store.AtHop(errors.New("delegate: the work returned no effect to record"), iss, hop)
			}
		}
		return func(tx *sql.Tx, r *store.Record) (store.Outcome, error) {
			// r is the hop as it stands now, locked: the status is signed
			// for it, so a "failed" on an equivocated hop carries reason
			// equivocation (draft "Forks, Concurrency, and Equivocation").
			// The marks never clear: a hop marked before the work began
			// is marked still.
			var out Outcome
			var err error
			switch {
			case apply == nil:
				out, stopped = canceledBeforeWork(r), r
			case r.Canceled || r.Equivocated:
				out, stopped = stoppedWhileWorking(r), r
			default:
				if out, err = apply(tx); err != nil {
					workErr = true
					return store.Outcome{}, err
				}
				if err := out.check(); err != nil {
					workErr = true
					return store.Outcome{}, store.AtHop(err, iss, hop)
				}
			}
			if st, err = d.status(r, out); err != nil {
				return store.Outcome{}, err
			}
			return store.Outcome{State: out.State, Status: st.Octets, StatusForm: st.Form}, nil
		}, nil
	})
	if err != nil {
		if !workErr && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			// The store failed to record the outcome (or could not say
			// whether its commit took effect): the hop may stay "accepted"
			// with its work done and nobody to record it. Flagged, for the
			// operator to read the hop and settle it (decision 61).
			detail := fmt.Sprintf("recording the outcome of the hop's work failed (%v): read the hop; if it is still accepted, "+
				"find out whether the work's effect committed and settle it with Finish or Release", err)
			if ferr := d.raiseDetached(ctx, store.FlagUnknownOutcome, iss, hop, detail); ferr != nil {
				return nil, errors.Join(err, ferr)
			}
		}
		return nil, err
	}
	if stopped != nil {
		var errs []error
		if stopped.Equivocated {
			errs = append(errs, ErrEquivocated)
		}
		if stopped.Canceled {
			errs = append(errs, ErrCanceled)
		}
		return st, store.AtHop(fmt.Errorf("%w: the hop was recorded failed; the work's effect was not applied",
			errors.Join(errs...)), iss, hop)
	}
	return st, nil
}

// working1 waits until no other RecordOutcome for (iss, hop) runs in this
// process, then marks this one running until release. The store's short
// transaction decides which outcome is recorded, but only this keeps the
// slow part from running twice when a host calls twice for one hop (a
// retry after a timeout, two workers handed the same hop): the second
// finds the outcome recorded (store.ErrConflict) and runs nothing. Calls
// on two processes sharing the store are not serialized (decision 65).
func (d *Delegate) working1(ctx context.Context, iss, hop string) (release func(), err error) {
	k := [2]string{iss, hop}
	for {
		d.mu.Lock()
		busy := d.working[k]
		if busy == nil {
			done := make(chan struct{})
			d.working[k] = done
			d.mu.Unlock()
			return func() {
				d.mu.Lock()
				delete(d.working, k)
				d.mu.Unlock()
				close(done)
			}, nil
		}
		d.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, store.AtHop(fmt.Errorf("delegate: waiting for the hop's other RecordOutcome to end: %w", context.Cause(ctx)), iss, hop)
		}
	}
}

// stoppedWhileWorking is the outcome of work whose hop was canceled or
// equivocated while it ran: its effect is never applied, so it took none.
func stoppedWhileWorking(r *store.Record) Outcome {
	out := Outcome{State: store.Failed, Reason: handoff.ReasonPolicy, NoEffect: true,
		Detail: "canceled by the delegator while the work ran; its effect was not applied"}
	if r.Equivocated {
		out.Detail = "a second, different offer for this hop arrived while the work ran; its effect was not applied"
	}
	return out
}
