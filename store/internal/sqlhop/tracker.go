package sqlhop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

const issuedCols = `hop, aud, work, offer, offer_form, digest_alg, digest, prev_alg, prev, exp, view, resolved, status, status_form, attempts, next_ask, created`

func scanIssued(row scanner) (*store.Issued, error) {
	var h store.Issued
	var offerForm, statusForm, resolved int
	var prevAlg, view string
	var prev []byte
	var exp, next, created int64
	if err := row.Scan(&h.Hop, &h.Aud, &h.Work, &h.Offer, &offerForm, &h.Digest.Alg, &h.Digest.Val, &prevAlg, &prev,
		&exp, &view, &resolved, &h.Status, &statusForm, &h.Attempts, &next, &created); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, store.ErrNotFound
		}
		return nil, err
	}
	h.OfferForm, h.StatusForm = handoff.Form(offerForm), handoff.Form(statusForm)
	if prevAlg != "" {
		h.Prev = &handoff.Digest{Alg: prevAlg, Val: prev}
	}
	h.Exp, h.NextAsk, h.Created = fromNanos(exp), fromNanos(next), fromNanos(created)
	h.View, h.Resolved = store.View(view), resolved != 0
	return &h, nil
}

func (s *DB) issuedRows(ctx context.Context, q string, args ...any) ([]*store.Issued, error) {
	rows, err := s.db.QueryContext(ctx, s.d.bind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("store: issued hops: %w", err)
	}
	defer rows.Close()
	var out []*store.Issued
	for rows.Next() {
		h, err := scanIssued(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// Issue implements store.Tracker.
func (s *DB) Issue(ctx context.Context, h *store.Issued, safeTwice bool) error {
	if err := s.open(); err != nil {
		return err
	}
	if h.Hop == "" || h.Aud == "" || h.Work == "" || len(h.Offer) == 0 || len(h.Digest.Val) == 0 || h.View != store.Offered {
		return errors.New("store: an issued hop needs hop, aud, work, the offer and its digest, in view offered")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: issue: %w", err)
	}
	defer tx.Rollback()
	if !safeTwice {
		if s.d.LockWork != "" {
			if _, err := tx.ExecContext(ctx, s.d.LockWork, h.Work); err != nil {
				return fmt.Errorf("store: issue: %w", err)
			}
		}
		var other string
		err := tx.QueryRowContext(ctx, s.d.bind(`SELECT hop FROM issued WHERE work = ? AND resolved = 0 LIMIT 1`), h.Work).Scan(&other)
		if err == nil {
			return fmt.Errorf("%w: hop %s", store.ErrUnresolvedWork, other)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("store: issue: %w", err)
		}
	}
	var prevAlg string
	var prev []byte
	if h.Prev != nil {
		prevAlg, prev = h.Prev.Alg, h.Prev.Val
	}
	if _, err := tx.ExecContext(ctx, s.d.bind(`INSERT INTO issued (`+issuedCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`),
		h.Hop, h.Aud, h.Work, h.Offer, int(h.OfferForm), h.Digest.Alg, h.Digest.Val, prevAlg, prev, nanos(h.Exp),
		string(h.View), boolInt(h.Resolved), h.Status, int(h.StatusForm), h.Attempts, nanos(h.NextAsk), nanos(h.Created)); err != nil {
		return fmt.Errorf("store: issue hop %s: %w", h.Hop, err)
	}
	return tx.Commit()
}

// IssuedHop implements store.Tracker.
func (s *DB) IssuedHop(ctx context.Context, hop string) (*store.Issued, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	return scanIssued(s.db.QueryRowContext(ctx, s.d.bind(`SELECT `+issuedCols+` FROM issued WHERE hop = ?`), hop))
}

// SetView implements store.Tracker.
func (s *DB) SetView(ctx context.Context, hop string, from, to store.View, resolved bool, status []byte, form handoff.Form) error {
	if err := s.open(); err != nil {
		return err
	}
	q := `UPDATE issued SET view = ?, resolved = CASE WHEN ? = 1 THEN 1 ELSE resolved END,
		next_ask = CASE WHEN ? = 1 THEN 0 ELSE next_ask END`
	args := []any{string(to), boolInt(resolved), boolInt(resolved)}
	if status != nil {
		q += `, status = ?, status_form = ?`
		args = append(args, status, int(form))
	}
	q += ` WHERE hop = ? AND view = ?`
	args = append(args, hop, string(from))
	res, err := s.db.ExecContext(ctx, s.d.bind(q), args...)
	if err != nil {
		return fmt.Errorf("store: set view: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return nil
	}
	h, err := s.IssuedHop(ctx, hop)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: hop is %s, not %s", store.ErrConflict, h.View, from)
}

func (s *DB) updateIssued(ctx context.Context, q string, args ...any) error {
	if err := s.open(); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.d.bind(q), args...)
	if err != nil {
		return fmt.Errorf("store: issued hop: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// ResolveHop implements store.Tracker.
func (s *DB) ResolveHop(ctx context.Context, hop string) error {
	return s.updateIssued(ctx, `UPDATE issued SET resolved = 1, next_ask = 0 WHERE hop = ?`, hop)
}

// SetAsk implements store.Tracker.
func (s *DB) SetAsk(ctx context.Context, hop string, attempts int, next time.Time) error {
	return s.updateIssued(ctx, `UPDATE issued SET attempts = ?, next_ask = ? WHERE hop = ?`, attempts, nanos(next), hop)
}

// ByPrev implements store.Tracker.
func (s *DB) ByPrev(ctx context.Context, d handoff.Digest) ([]*store.Issued, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	return s.issuedRows(ctx, `SELECT `+issuedCols+` FROM issued WHERE prev = ? AND prev_alg = ? ORDER BY created, hop`+s.d.ByteOrder, d.Val, d.Alg)
}

// Due implements store.Tracker.
func (s *DB) Due(ctx context.Context, now time.Time) ([]*store.Issued, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	return s.issuedRows(ctx, `SELECT `+issuedCols+` FROM issued WHERE resolved = 0 AND next_ask <> 0 AND next_ask <= ? ORDER BY created, hop`+s.d.ByteOrder, nanos(now))
}

var _ store.Tracker = (*DB)(nil)
