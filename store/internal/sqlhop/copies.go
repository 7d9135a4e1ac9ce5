package sqlhop

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// copyQ are the statements of the copies' statuses (store.Copy, SPEC D5)
// and of keyed flags.
type copyQ struct {
	get, hopStatus, count, insert, update, openFlag, hopOf string
}

func copyQueries(d Dialect) copyQ {
	b := d.bind
	return copyQ{
		get: b(`SELECT basis, status, status_form FROM copies WHERE iss = ? AND hop = ? AND digest_alg = ? AND digest = ?`),
		// Read in PutCopy's transaction: FOR UPDATE (PostgreSQL) holds the
		// hop's row, so its status cannot move, and no other PutCopy of
		// the hop can count its copies, until the commit; SQLite's
		// IMMEDIATE transaction holds the write lock already.
		hopStatus: b(`SELECT status FROM hops WHERE iss = ? AND hop = ? ` + d.ForUpdate),
		count:     b(`SELECT COUNT(*) FROM copies WHERE iss = ? AND hop = ?`),
		insert: b(`INSERT INTO copies (iss, hop, digest_alg, digest, basis, status, status_form) VALUES (?,?,?,?,?,?,?)
			ON CONFLICT (iss, hop, digest_alg, digest) DO NOTHING`),
		update: b(`UPDATE copies SET basis = ?, status = ?, status_form = ?
			WHERE iss = ? AND hop = ? AND digest_alg = ? AND digest = ? AND basis = ?`),
		openFlag: b(`SELECT id FROM flags WHERE kind = ? AND iss = ? AND hop = ? AND dedupe = ? AND resolved = 0`),
		// By the digest indexes (the migration after the copies).
		hopOf: b(`SELECT hop FROM hops WHERE digest = ? AND digest_alg = ? AND iss = ?
			UNION ALL SELECT hop FROM copies WHERE digest = ? AND digest_alg = ? AND iss = ? LIMIT 1`),
	}
}

// HopOf implements store.Store.
func (s *DB) HopOf(ctx context.Context, iss string, d handoff.Digest) (string, error) {
	if err := s.open(); err != nil {
		return "", err
	}
	var hop string
	err := s.db.QueryRowContext(ctx, s.cq.hopOf, d.Val, d.Alg, iss, d.Val, d.Alg, iss).Scan(&hop)
	if errors.Is(err, sql.ErrNoRows) {
		return "", store.ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store: the hop of offer %s: %w", d, err)
	}
	return hop, nil
}

// CopyStatus implements store.Store.
func (s *DB) CopyStatus(ctx context.Context, iss, hop string, d handoff.Digest) (*store.Copy, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	c := &store.Copy{Iss: iss, Hop: hop, Digest: handoff.Digest{Alg: d.Alg, Val: bytes.Clone(d.Val)}}
	err := s.db.QueryRowContext(ctx, s.cq.get, iss, hop, d.Alg, d.Val).Scan(&c.Basis, &c.Status, &c.StatusForm)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.AtHop(store.ErrNotFound, iss, hop)
	}
	if err != nil {
		return nil, store.AtHop(fmt.Errorf("store: copy status: %w", err), iss, hop)
	}
	return c, nil
}

// PutCopy implements store.Store, in one transaction that reads the hop's
// status first (see copyQ.hopStatus).
func (s *DB) PutCopy(ctx context.Context, c *store.Copy, prev []byte) (bool, error) {
	if err := s.open(); err != nil {
		return false, err
	}
	fail := func(err error) (bool, error) {
		return false, store.AtHop(fmt.Errorf("store: put copy status: %w", err), c.Iss, c.Hop)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	var status []byte
	err = tx.QueryRowContext(ctx, s.cq.hopStatus, c.Iss, c.Hop).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return fail(err)
	}
	if status == nil || !bytes.Equal(status, c.Basis) {
		return false, nil
	}
	var res sql.Result
	if prev == nil {
		var n int
		if err := tx.QueryRowContext(ctx, s.cq.count, c.Iss, c.Hop).Scan(&n); err != nil {
			return fail(err)
		}
		if n >= store.MaxCopies {
			return false, nil
		}
		res, err = tx.ExecContext(ctx, s.cq.insert, c.Iss, c.Hop, c.Digest.Alg, c.Digest.Val, c.Basis, c.Status, c.StatusForm)
	} else {
		res, err = tx.ExecContext(ctx, s.cq.update, c.Basis, c.Status, c.StatusForm, c.Iss, c.Hop, c.Digest.Alg, c.Digest.Val, prev)
	}
	if err != nil {
		return fail(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fail(err)
	}
	if n == 0 {
		return false, nil
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return true, nil
}

// raiseKeyed is Raise: an insert, which for a flag with a Key does
// nothing when an open flag has its kind, hop and key; that flag's id is
// then read. If it was resolved in between, the insert is tried again.
func (s *DB) raiseKeyed(ctx context.Context, f store.Flag) (int64, error) {
	for range 3 {
		var id int64
		err := s.db.QueryRowContext(ctx, s.q.raise, f.Kind, f.Iss, f.Hop, f.Detail, nanos(f.Created), f.Key).Scan(&id)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, sql.ErrNoRows) || f.Key == "" {
			return 0, fmt.Errorf("store: raise flag: %w", err)
		}
		err = s.db.QueryRowContext(ctx, s.cq.openFlag, f.Kind, f.Iss, f.Hop, f.Key).Scan(&id)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("store: raise flag: %w", err)
		}
	}
	return 0, store.AtHop(errors.New("store: raise flag: the open flag with this key kept being resolved"), f.Iss, f.Hop)
}
