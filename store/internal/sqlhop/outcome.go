package sqlhop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

// RecordOutcome runs taken work whose effect lives in the same database as
// the hop records, and records the hop's outcome in the same transaction
// as that effect (draft "Knowing the Outcome", "Kept Records"): the
// outcome is recorded exactly when the work's effect committed. No work
// holds the database while it runs (decision 56): intake (claims, cancels,
// marks, flags of other hops) goes on meanwhile.
//
//  1. The hop is read, with no transaction: ErrNotFound when there is no
//     record, ErrConflict when it is terminal; work does not run then.
//  2. work(ctx, r) runs outside any transaction: the slow part, with no
//     effect of its own. It returns the Effect that writes its result.
//  3. One short transaction: the hop is read again, locked; if it became
//     terminal meanwhile (another outcome, a failure recorded), the
//     transaction ends with ErrConflict and the Effect never runs, so
//     nothing of the work takes effect. Otherwise the Effect gets the
//     record as it now stands (canceled or equivocated meanwhile, say: it
//     decides what that means) and makes its writes; the outcome it
//     returns is recorded; both commit together.
//
// If work or the Effect returns an error, or the commit fails, nothing is
// recorded and nothing of the Effect's writes takes effect. now stamps
// Decided; it is called inside the short transaction.
//
// The short transaction runs detached from ctx, within OutcomeBound: once
// the slow part is done, a caller's deadline passing (a request timing
// out just as the work finishes) must not drop its result and leave the
// hop "accepted" with nobody working on it.
func (s *DB) RecordOutcome(ctx context.Context, iss, hop string, now func() time.Time, work func(ctx context.Context, r *store.Record) (store.Effect, error)) error {
	if err := s.open(); err != nil {
		return err
	}
	r, err := s.Get(ctx, iss, hop)
	if err != nil {
		return err
	}
	if r.State != store.Received && r.State != store.Accepted {
		return store.AtHop(fmt.Errorf("%w: hop is already %s", store.ErrConflict, r.State), iss, hop)
	}
	effect, err := work(ctx, r)
	if err != nil {
		return err
	}
	if effect == nil {
		return store.AtHop(errors.New("store: outcome: the work returned no effect to record"), iss, hop)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), OutcomeBound)
	defer cancel()
	return s.applyOutcome(actx, iss, hop, now, effect)
}

var _ store.SQLStore = (*DB)(nil)

// OutcomeBound bounds RecordOutcome's short transaction, busy retries
// included: three times SQLite's busy timeout.
const OutcomeBound = 30 * time.Second

// applyOutcome is RecordOutcome's short transaction.
func (s *DB) applyOutcome(ctx context.Context, iss, hop string, now func() time.Time, effect store.Effect) error {
	var tx *sql.Tx
	// A busy BEGIN (SQLite: another writer held the lock past the busy
	// timeout) took nothing: it is begun again within ctx.
	err := retryBusy(ctx, s.d, func() (err error) {
		tx, err = s.db.BeginTx(ctx, nil)
		return err
	})
	if err != nil {
		return store.AtHop(fmt.Errorf("store: outcome: %w", err), iss, hop)
	}
	defer tx.Rollback()
	r, err := scanHop(tx.QueryRowContext(ctx, s.q.getForUpdate, iss, hop))
	if err != nil {
		return store.AtHop(err, iss, hop)
	}
	if r.State != store.Received && r.State != store.Accepted {
		return store.AtHop(fmt.Errorf("%w: hop became %s while the work ran; its effect is not applied", store.ErrConflict, r.State), iss, hop)
	}
	out, err := effect(tx, r)
	if err != nil {
		return err
	}
	if out.State != store.Completed && out.State != store.Failed {
		return store.AtHop(fmt.Errorf("store: an outcome is completed or failed, not %q", out.State), iss, hop)
	}
	if err := s.transition(ctx, tx, store.Move{Iss: iss, Hop: hop, From: r.State, To: out.State, Status: out.Status, Form: out.StatusForm, Now: now()}); err != nil {
		return store.AtHop(err, iss, hop)
	}
	if err := tx.Commit(); err != nil {
		// The commit may have taken effect with its acknowledgement lost:
		// the outcome is unknown to this caller, but not lost, since the
		// record is present exactly when the work's effect committed.
		return store.AtHop(fmt.Errorf("store: outcome: commit failed, so whether the work and its outcome took effect is unknown "+
			"(read the hop: its outcome is recorded exactly when the work's effect committed): %w", err), iss, hop)
	}
	return nil
}
