package sqlhop

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/quantumlearningmachines/handoff/store"
)

// List implements store.Store. Each page is read from one index in the
// listing's order, hops_listed (state, received, iss, hop), so that it
// costs about a page's rows however many records there are:
//
//   - a state: that state's range of the index, a delegator and a time
//     window filters within it (iss is in the index: no row is read to
//     test it);
//   - every state: one read of each state's range, the pages merged here;
//   - a delegator with few hops (fewer than issFew): all its hops, from
//     the primary key (iss, hop), sorted here by the database: in the
//     listing index its hops would be too sparse to find a page quickly;
//   - flagged hops: the open flags first (flags_open, a partial index: open
//     flags are few), then their hops.
//
// The index's text columns sort by bytes (Dialect.ByteOrder), as the
// listing does. One index, not one per filter: each is one more page a
// claim's commit writes (decision 88).
func (s *DB) List(ctx context.Context, q store.HopQuery) ([]*store.Record, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	if q.Iss != "" && !q.Flagged {
		few, err := s.fewHops(ctx, q.Iss)
		if err != nil {
			return nil, err
		}
		if few {
			return s.listBy(ctx, q, s.d.ByKey)
		}
	}
	if q.State != "" || q.Flagged {
		return s.listOne(ctx, q)
	}
	var all []*store.Record
	for _, st := range store.States() {
		one := q
		one.State = st
		page, err := s.listOne(ctx, one)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
	}
	slices.SortFunc(all, func(a, b *store.Record) int {
		if a.Cursor().Before(*b.Cursor()) {
			return -1
		}
		return 1
	})
	return all[:min(len(all), q.Limit)], nil
}

// issFew is how many hops a delegator has at most for List to read them
// all from the primary key rather than look for them in the listing
// index: with a million records, a delegator with fewer hops is below
// half a percent of them, and a page of its hops in the listing index
// would be spread over more than ten thousand entries.
const issFew = 5000

// fewHops reports whether iss has fewer than issFew hops, counting at
// most that many entries of the primary key (the ORDER BY keeps it
// there: with LIMIT alone PostgreSQL read the table from its start).
func (s *DB) fewHops(ctx context.Context, iss string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.d.bind(`SELECT count(*) FROM (SELECT 1 FROM hops WHERE iss = ? ORDER BY hop LIMIT ?) few`), iss, s.issFew).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("store: list: %w", err)
	}
	return n < s.issFew, nil
}

// listOne reads one page with one statement.
func (s *DB) listOne(ctx context.Context, q store.HopQuery) ([]*store.Record, error) {
	return s.listBy(ctx, q, "")
}

// listBy reads one page with one statement, from the index the hint
// names (Dialect.ByKey) when it is not empty.
func (s *DB) listBy(ctx context.Context, q store.HopQuery, hint string) ([]*store.Record, error) {
	c := s.d.ByteOrder
	var where []string
	var args []any
	from := `hops h` + hint
	if q.Flagged {
		// Open flags drive the join; CROSS JOIN keeps them the outer loop
		// in SQLite (PostgreSQL plans it from its statistics).
		from = `(SELECT DISTINCT iss, hop FROM flags WHERE resolved = 0) f CROSS JOIN hops h`
		where = append(where, `h.iss = f.iss AND h.hop = f.hop`)
	}
	if q.State != "" {
		where = append(where, `h.state = ?`)
		args = append(args, string(q.State))
	}
	if q.Iss != "" {
		where = append(where, `h.iss = ?`)
		args = append(args, q.Iss)
	}
	if !q.From.IsZero() {
		where = append(where, `h.received >= ?`)
		args = append(args, nanos(q.From))
	}
	if !q.To.IsZero() {
		where = append(where, `h.received < ?`)
		args = append(args, nanos(q.To))
	}
	if a := q.After; a != nil {
		where = append(where, `(h.received, h.iss`+c+`, h.hop`+c+`) < (?, ?, ?)`)
		args = append(args, nanos(a.Received), a.Iss, a.Hop)
	}
	query := `SELECT ` + prefixed("h.", selCols) + ` FROM ` + from
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY h.received DESC, h.iss` + c + ` DESC, h.hop` + c + ` DESC LIMIT ?`
	args = append(args, q.Limit)
	rows, err := s.db.QueryContext(ctx, s.d.bind(query), args...)
	if err != nil {
		return nil, fmt.Errorf("store: list: %w", err)
	}
	defer rows.Close()
	var out []*store.Record
	for rows.Next() {
		r, err := scanHop(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list: %w", err)
	}
	return out, nil
}

// prefixed is a column list with each column qualified by p.
func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
