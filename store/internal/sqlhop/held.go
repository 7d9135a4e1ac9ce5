package sqlhop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// The held cancels (store.HeldCancels) live in the table held_cancels,
// keyed by (iss, offer_alg, offer), created by each dialect's migration
// "held cancels". The table is small (bounded by HoldLimits.Total) and
// touched only by early cancels, Receive's look for one, and Sweep, so its
// statements are bound when used rather than prepared.

const heldCols = `iss, offer_alg, offer, status, status_form, arrived, keep_until, seq`

// heldLockName serializes the bound check and the insert of Hold across
// processes sharing a PostgreSQL database, through the dialect's LockWork
// (an advisory lock on the hash of a name; a work name hashing alike only
// makes one wait for the other). SQLite's IMMEDIATE transaction already
// holds the write lock.
const heldLockName = "handoff: held cancels"

// Hold implements store.HeldCancels.
func (s *DB) Hold(ctx context.Context, h *store.Held, lim store.HoldLimits) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := store.CheckHold(h, lim); err != nil {
		return err
	}
	err := retryBusy(ctx, s.d, func() error { return s.hold(ctx, h, lim) })
	if err != nil && !errors.Is(err, store.ErrHeldFull) {
		err = store.HeldError(fmt.Errorf("store: hold: %w", err), h.Iss, h.Offer)
	}
	return err
}

func (s *DB) hold(ctx context.Context, h *store.Held, lim store.HoldLimits) error {
	b := s.d.bind
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if s.d.LockWork != "" {
		if _, err := tx.ExecContext(ctx, s.d.LockWork, heldLockName); err != nil {
			return err
		}
	}
	if s.d.LockOffer != "" {
		// Ordered with the claims of this offer (store.Store.Claim).
		if _, err := tx.ExecContext(ctx, s.d.LockOffer, h.Iss, h.Offer.Alg, h.Offer.Val); err != nil {
			return err
		}
	}
	arrived, keep := nanos(h.Arrived), nanos(h.KeepUntil)
	// The order of arrival: after every cancel held now (Holds are
	// serialized, so no two get one number).
	var seq int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM held_cancels`).Scan(&seq); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, b(`UPDATE held_cancels SET status = ?, status_form = ?, arrived = ?, keep_until = ?, seq = ?
		WHERE iss = ? AND offer_alg = ? AND offer = ?`), h.Status, int(h.Form), arrived, keep, seq, h.Iss, h.Offer.Alg, h.Offer.Val)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return tx.Commit() // a replacement: the counts stay
	}
	count := func() (all, mine int, err error) {
		err = tx.QueryRowContext(ctx, b(`SELECT COUNT(*), COALESCE(SUM(CASE WHEN iss = ? THEN 1 ELSE 0 END), 0) FROM held_cancels`), h.Iss).Scan(&all, &mine)
		return all, mine, err
	}
	all, mine, err := count()
	if err != nil {
		return err
	}
	if all >= lim.Total || mine >= lim.PerIss {
		if _, err := tx.ExecContext(ctx, b(`DELETE FROM held_cancels WHERE keep_until < ?`), arrived); err != nil {
			return err
		}
		if all, mine, err = count(); err != nil {
			return err
		}
	}
	if over := mine - lim.PerIss + 1; over > 0 {
		// The issuer's own oldest go; never another's.
		if err := s.dropOldest(ctx, tx, h.Iss, over); err != nil {
			return err
		}
		all -= over
	}
	if all >= lim.Total {
		return store.HeldError(store.ErrHeldFull, h.Iss, h.Offer)
	}
	if _, err := tx.ExecContext(ctx, b(`INSERT INTO held_cancels (`+heldCols+`) VALUES (?,?,?,?,?,?,?,?)`),
		h.Iss, h.Offer.Alg, h.Offer.Val, h.Status, int(h.Form), arrived, keep, seq); err != nil {
		return err
	}
	return tx.Commit()
}

// dropOldest removes the n oldest cancels held from iss.
func (s *DB) dropOldest(ctx context.Context, tx *sql.Tx, iss string, n int) error {
	rows, err := tx.QueryContext(ctx, s.d.bind(`SELECT offer_alg, offer FROM held_cancels WHERE iss = ? ORDER BY seq LIMIT ?`), iss, n)
	if err != nil {
		return err
	}
	var keys []handoff.Digest
	for rows.Next() {
		var d handoff.Digest
		if err := rows.Scan(&d.Alg, &d.Val); err != nil {
			rows.Close()
			return err
		}
		keys = append(keys, d)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, d := range keys {
		if _, err := tx.ExecContext(ctx, s.d.bind(`DELETE FROM held_cancels WHERE iss = ? AND offer_alg = ? AND offer = ?`), iss, d.Alg, d.Val); err != nil {
			return err
		}
	}
	return nil
}

// HeldFor implements store.HeldCancels.
func (s *DB) HeldFor(ctx context.Context, iss string, offer handoff.Digest) (*store.Held, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	h := store.Held{Iss: iss, Offer: handoff.Digest{Alg: offer.Alg, Val: append([]byte(nil), offer.Val...)}}
	var form int
	var arrived, keep int64
	err := s.db.QueryRowContext(ctx, s.q.heldFor, iss, offer.Alg, offer.Val).Scan(&h.Status, &form, &arrived, &keep)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.HeldError(store.ErrNotFound, iss, offer)
	}
	if err != nil {
		return nil, store.HeldError(fmt.Errorf("store: held cancel: %w", err), iss, offer)
	}
	h.Form, h.Arrived, h.KeepUntil = handoff.Form(form), fromNanos(arrived), fromNanos(keep)
	return &h, nil
}

// TakeHeld implements store.HeldCancels: one DELETE, whose affected-row
// count tells the one caller that removed the row.
func (s *DB) TakeHeld(ctx context.Context, iss string, offer handoff.Digest, status []byte) (bool, error) {
	if err := s.open(); err != nil {
		return false, err
	}
	q := `DELETE FROM held_cancels WHERE iss = ? AND offer_alg = ? AND offer = ?`
	args := []any{iss, offer.Alg, offer.Val}
	if status != nil {
		q += ` AND status = ?`
		args = append(args, status)
	}
	var n int64
	err := retryBusy(ctx, s.d, func() error {
		res, err := s.db.ExecContext(ctx, s.d.bind(q), args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return false, store.HeldError(fmt.Errorf("store: take held cancel: %w", err), iss, offer)
	}
	return n == 1, nil
}

// sweepHeld removes the held cancels past their keep-until at now.
func (s *DB) sweepHeld(ctx context.Context, now int64) error {
	_, err := s.db.ExecContext(ctx, s.d.bind(`DELETE FROM held_cancels WHERE keep_until < ?`), now)
	return err
}
