package sqlhop

import (
	"context"
	"fmt"
	"strings"

	"github.com/quantumlearningmachines/handoff/store"
)

// flagCols are the columns a flag's read returns (scanFlag).
const flagCols = `id, kind, iss, hop, detail, created, resolved, resolution, dedupe`

// ListFlags implements store.Store. A page is one statement, newest
// first, reading an index in the listing's order or a few hops' entries:
//
//   - open flags: flags_open_id (id) WHERE resolved = 0, backwards from
//     the cursor (the resolved ones, which pile up until the sweep, are
//     not in it);
//   - every flag: the primary key, backwards from the cursor;
//   - some hops' flags: flags_hop (iss, hop, id), each hop's entries
//     (a hop has a few flags), sorted by id.
func (s *DB) ListFlags(ctx context.Context, q store.FlagQuery) ([]store.Flag, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	query, args := s.flagList(q)
	rows, err := s.db.QueryContext(ctx, s.d.bind(query), args...)
	if err != nil {
		return nil, fmt.Errorf("store: flags: %w", err)
	}
	defer rows.Close()
	var out []store.Flag
	for rows.Next() {
		f, err := scanFlag(rows)
		if err != nil {
			return nil, fmt.Errorf("store: flags: %w", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// flagList is ListFlags' statement for q (placeholders "?") and its
// arguments.
func (s *DB) flagList(q store.FlagQuery) (string, []any) {
	from := `flags`
	var where []string
	var args []any
	switch {
	case len(q.Hops) > 0:
		hops := make([]string, len(q.Hops))
		for i, k := range q.Hops {
			hops[i] = `(iss = ? AND hop = ?)`
			args = append(args, k.Iss, k.Hop)
		}
		where = append(where, `(`+strings.Join(hops, ` OR `)+`)`)
	case q.Open && s.d.IndexedBy:
		from += ` INDEXED BY flags_open_id`
	}
	if q.Open {
		where = append(where, `resolved = 0`)
	}
	if q.Before != 0 {
		where = append(where, `id < ?`)
		args = append(args, q.Before)
	}
	query := `SELECT ` + flagCols + ` FROM ` + from
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	return query + ` ORDER BY id DESC LIMIT ?`, append(args, q.Limit)
}

// CountOpenFlags implements store.Store: the open flags' entries of
// flags_open_id, counted up to max.
func (s *DB) CountOpenFlags(ctx context.Context, max int) (int, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	if max <= 0 {
		return 0, nil
	}
	var n int
	err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT COUNT(*) FROM (SELECT 1 FROM flags WHERE resolved = 0 LIMIT ?) f`), max).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: counting the open flags: %w", err)
	}
	return n, nil
}

// scanFlag reads a row of flagCols.
func scanFlag(row scanner) (store.Flag, error) {
	var f store.Flag
	var created, resolved int64
	if err := row.Scan(&f.ID, &f.Kind, &f.Iss, &f.Hop, &f.Detail, &created, &resolved, &f.Resolution, &f.Key); err != nil {
		return store.Flag{}, err
	}
	f.Created, f.Resolved = fromNanos(created), fromNanos(resolved)
	return f, nil
}
