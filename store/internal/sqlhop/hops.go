package sqlhop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

// Claim implements store.Store.
func (s *DB) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	if err := s.open(); err != nil {
		return nil, false, err
	}
	if err := store.CheckClaim(r); err != nil {
		return nil, false, err
	}
	if s.idle == nil {
		return s.claimOne(ctx, r)
	}
	res := s.group(claimReq{ctx: ctx, r: r})
	return res.rec, res.stored, res.err
}

// claimOne inserts the record if absent, in one autocommit statement
// (a short transaction where the dialect shares the held-cancel lock),
// and returns the record now stored. A busy database is waited out
// within ctx (retryBusy): a refused insert wrote nothing.
func (s *DB) claimOne(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	checked := store.CheckedClaim(r)
	// Twice at most: a row that was not inserted is read, and may be gone
	// by then (swept, or a held cancel taken out); the second try finds
	// what is there now.
	for range 2 {
		var inserted bool
		err := retryBusy(ctx, s.d, func() (err error) {
			inserted, err = s.insertClaim(ctx, r, checked)
			return err
		})
		if err != nil {
			return nil, false, store.AtHop(fmt.Errorf("store: claim: %w", err), r.Iss, r.Hop)
		}
		if inserted {
			c := *r
			return &c, true, nil
		}
		old, err := scanHop(s.hot.QueryRowContext(ctx, s.q.get, r.Iss, r.Hop))
		if err == nil {
			return old, false, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, false, store.AtHop(fmt.Errorf("store: claim: %w", err), r.Iss, r.Hop)
		}
		if checked {
			// No record: the insert was refused for a held cancel, unless
			// it went since.
			if _, err := s.HeldFor(ctx, r.Iss, r.Digest); err == nil {
				return nil, false, store.AtHop(store.ErrCancelHeld, r.Iss, r.Hop)
			} else if !errors.Is(err, store.ErrNotFound) {
				return nil, false, store.AtHop(fmt.Errorf("store: claim: %w", err), r.Iss, r.Hop)
			}
		}
	}
	// Swept between the insert and the read: the pair was past its keep
	// time; report the conflict rather than guess.
	return nil, false, store.AtHop(errors.New("store: claim: the existing record vanished; retry"), r.Iss, r.Hop)
}

// insertClaim runs the insert-if-absent of r and reports whether it
// inserted the row: checked, it inserts nothing while a cancel is held
// for r's offer (store.Store.Claim).
func (s *DB) insertClaim(ctx context.Context, r *store.Record, checked bool) (bool, error) {
	var n int64
	switch {
	case !checked:
		res, err := s.claim.ExecContext(ctx, claimArgs(r)...)
		if err != nil {
			return false, err
		}
		n, err = res.RowsAffected()
		if err != nil {
			return false, err
		}
	case s.d.ClaimChecked != "":
		// One query that takes the held-cancel lock and inserts.
		if err := s.claimChecked.QueryRowContext(ctx, claimArgs(r)...).Scan(&n); err != nil {
			return false, err
		}
	default:
		res, err := s.claimChecked.ExecContext(ctx, append(claimArgs(r), r.Iss, r.Digest.Alg, r.Digest.Val)...)
		if err != nil {
			return false, err
		}
		n, err = res.RowsAffected()
		if err != nil {
			return false, err
		}
	}
	return n == 1, nil
}

// claimArgs are the values of hopCols for r.
func claimArgs(r *store.Record) []any {
	return []any{r.Iss, r.Hop, r.Digest.Alg, r.Digest.Val, r.Offer, int(r.OfferForm),
		string(r.State), r.Status, int(r.StatusForm), boolInt(r.Canceled), boolInt(r.Equivocated), nanos(r.Received),
		nanos(r.KeepUntil), nanos(r.Decided), chainValue(r.Chain, r.ChainForms)}
}

// Get implements store.Store.
func (s *DB) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	r, err := scanHop(s.hot.QueryRowContext(ctx, s.q.get, iss, hop))
	if err != nil {
		return nil, store.AtHop(err, iss, hop)
	}
	return r, nil
}

// Transition implements store.Store.
func (s *DB) Transition(ctx context.Context, m store.Move) error {
	if err := s.open(); err != nil {
		return err
	}
	if s.idle == nil || !s.d.GroupMoves {
		return s.moveOne(ctx, m)
	}
	return s.group(claimReq{ctx: ctx, m: &m}).err
}

// moveOne makes the move alone, in one autocommit statement.
func (s *DB) moveOne(ctx context.Context, m store.Move) error {
	if err := s.transition(ctx, s.hot, m); err != nil {
		return store.AtHop(err, m.Iss, m.Hop)
	}
	return nil
}

type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// transition makes the move with ex.
func (s *DB) transition(ctx context.Context, ex execer, m store.Move) error {
	iss, hop, from, to, status, form, now := m.Iss, m.Hop, m.From, m.To, m.Status, m.Form, m.Now
	if !store.CanMove(from, to) {
		return fmt.Errorf("%w: the lifecycle does not allow %s -> %s", store.ErrConflict, from, to)
	}
	var decided int64
	if to.Terminal() {
		decided = nanos(now)
	}
	q, qKeep, where := s.q.transition, s.q.transitionKeep, []any{iss, hop, string(from)}
	if m.Mark != store.MarkAny {
		q, qKeep, where = s.q.transitionIf, s.q.transitionKeepIf, append(where, boolInt(m.Mark == store.MarkSet))
	}
	var res sql.Result
	var err error
	switch {
	case status != nil:
		res, err = ex.ExecContext(ctx, q, append([]any{string(to), status, int(form), decided}, where...)...)
	case to.Terminal():
		// No status for a terminal state: the record must not go on
		// answering with the status before it (say "accepted").
		res, err = ex.ExecContext(ctx, q, append([]any{string(to), nil, 0, decided}, where...)...)
	default:
		res, err = ex.ExecContext(ctx, qKeep, append([]any{string(to), decided}, where...)...)
	}
	if err != nil {
		return fmt.Errorf("store: transition: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return nil
	}
	r, err := scanHop(ex.QueryRowContext(ctx, s.q.get, iss, hop))
	if err != nil {
		return err
	}
	if r.State == from && !m.Mark.Meets(r.Equivocated) {
		return fmt.Errorf("%w: hop's equivocated mark is %v, not %v", store.ErrConflict, r.Equivocated, !r.Equivocated)
	}
	return fmt.Errorf("%w: hop is %s, not %s", store.ErrConflict, r.State, from)
}

// Release implements store.Store.
func (s *DB) Release(ctx context.Context, iss, hop string, now time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.q.release, nanos(now), iss, hop)
	if err != nil {
		return store.AtHop(fmt.Errorf("store: release: %w", err), iss, hop)
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.AtHop(fmt.Errorf("store: release: %w", err), iss, hop)
	} else if n == 1 {
		return nil
	}
	r, err := scanHop(s.hot.QueryRowContext(ctx, s.q.get, iss, hop))
	if err != nil {
		return store.AtHop(err, iss, hop)
	}
	return store.AtHop(fmt.Errorf("%w: only an accepted hop not yet released can be released; hop is %s (released %v)", store.ErrConflict, r.State, !r.Released.IsZero()), iss, hop)
}

// MarkCanceled implements store.Store.
func (s *DB) MarkCanceled(ctx context.Context, iss, hop string) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.mark(ctx, s.q.cancel, iss, hop)
}

// MarkEquivocated implements store.Store.
func (s *DB) MarkEquivocated(ctx context.Context, iss, hop string) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.mark(ctx, s.q.equivocated, iss, hop)
}

func (s *DB) mark(ctx context.Context, q, iss, hop string) error {
	res, err := s.db.ExecContext(ctx, q, iss, hop)
	if err != nil {
		return store.AtHop(fmt.Errorf("store: mark hop: %w", err), iss, hop)
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.AtHop(fmt.Errorf("store: mark hop: %w", err), iss, hop)
	} else if n == 0 {
		return store.AtHop(store.ErrNotFound, iss, hop)
	}
	return nil
}

// Raise implements store.Store.
func (s *DB) Raise(ctx context.Context, f store.Flag) (int64, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	return s.raiseKeyed(ctx, f)
}

// Flags implements store.Store.
func (s *DB) Flags(ctx context.Context, all bool) ([]store.Flag, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	q := s.q.flags
	if all {
		q = s.q.flagsAll
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("store: flags: %w", err)
	}
	defer rows.Close()
	var out []store.Flag
	for rows.Next() {
		f, err := scanFlag(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// Resolve implements store.Store.
func (s *DB) Resolve(ctx context.Context, id int64, resolution string, now time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.q.resolve, nanos(now), resolution, id)
	if err != nil {
		return fmt.Errorf("store: resolve: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: no flag %d is open (resolved already, or none has this id)", store.ErrConflict, id)
	}
	return nil
}

// sweepCond is the retention rule (store.Store.Sweep) in SQL; its
// parameters are now and now minus the retention.
const sweepCond = `keep_until < ? AND ((state IN ('rejected', 'completed', 'failed') AND decided < ?) OR state = 'received'
	OR (state = 'accepted' AND released <> 0 AND released < ?))`

// sweepBatch is how many rows one sweep statement examines.
const sweepBatch = 500

// Sweep implements store.Store. There is no index on keep_until (decision
// 37: it cost a page write per claim), so a sweep reads the whole table;
// one DELETE over it would hold SQLite's write lock for the whole scan
// and make concurrent claims wait out the busy timeout. Instead it walks
// the primary key in windows of sweepBatch rows: finding a window's end
// is a read (no write lock in WAL mode), and each window's DELETE is its
// own short transaction, so claims get the lock between them. On
// PostgreSQL a DELETE does not block inserts, but the windows keep each
// transaction short there too. Rows inserted behind the walk are new and
// may not go yet; the next sweep sees them.
func (s *DB) Sweep(ctx context.Context, now time.Time, retention time.Duration) (int, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	cut, old := nanos(now), nanos(now.Add(-retention))
	total := 0
	var lo store.HopKey // the zero key is before every hop (iss is never empty)
	for {
		var hi store.HopKey
		err := s.db.QueryRowContext(ctx, s.q.sweepEnd, lo.Iss, lo.Hop, sweepBatch-1).Scan(&hi.Iss, &hi.Hop)
		last := errors.Is(err, sql.ErrNoRows)
		if err != nil && !last {
			return total, fmt.Errorf("store: sweep: %w", err)
		}
		var res sql.Result
		if last {
			res, err = s.db.ExecContext(ctx, s.q.sweepLast, lo.Iss, lo.Hop, cut, old, old)
		} else {
			res, err = s.db.ExecContext(ctx, s.q.sweep, lo.Iss, lo.Hop, hi.Iss, hi.Hop, cut, old, old)
		}
		if err != nil {
			return total, fmt.Errorf("store: sweep: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("store: sweep: %w", err)
		}
		total += int(n)
		if last {
			break
		}
		lo = hi
	}
	if _, err := s.db.ExecContext(ctx, s.q.pruneFlags, old); err != nil {
		return total, fmt.Errorf("store: sweep: flags: %w", err)
	}
	if err := s.sweepHeld(ctx, cut); err != nil {
		return total, fmt.Errorf("store: sweep: held cancels: %w", err)
	}
	return total, nil
}

// Since implements store.Store.
func (s *DB) Since(ctx context.Context) (time.Time, error) {
	if err := s.open(); err != nil {
		return time.Time{}, err
	}
	var v string
	if err := s.db.QueryRowContext(ctx, s.q.getSince).Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("store: since: %w", err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: since: corrupt value %q", v)
	}
	return time.Unix(0, n), nil
}

// Forget implements store.Store.
func (s *DB) Forget(ctx context.Context, now time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.q.forget); err != nil {
		return fmt.Errorf("store: forget: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q.setSince, strconv.FormatInt(now.UnixNano(), 10)); err != nil {
		return fmt.Errorf("store: forget: %w", err)
	}
	return tx.Commit()
}
