package sqlhop

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/quantumlearningmachines/handoff/store"
)

// List implements store.Store. Each page is one statement (one snapshot:
// a hop that moves on while the page is read is listed once), reading
// one index in the listing's order, hops_listed (state, received, iss,
// hop), so that it costs about a page's rows however many records there
// are:
//
//   - a state: that state's range of the index, a delegator and a time
//     window filters within it (iss is in the index, compared by bytes
//     as it is kept there: no row is read to test it);
//   - every state: each state's range read for a page (UNION ALL), the
//     pages merged by the database;
//   - a delegator with few hops (fewer than issFew): all its hops, from
//     the primary key (iss, hop), sorted by the database: in the listing
//     index its hops would be too sparse to find a page quickly;
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
	byKey := false
	if q.Iss != "" && !q.Flagged {
		few, err := s.fewHops(ctx, q.Iss)
		if err != nil {
			return nil, err
		}
		byKey = few
	}
	c := s.d.ByteOrder
	order := func(t string) string {
		return ` ORDER BY ` + t + `received DESC, ` + t + `iss` + c + ` DESC, ` + t + `hop` + c + ` DESC LIMIT ?`
	}
	var query string
	var args []any
	if q.State != "" || q.Flagged || byKey {
		query, args = s.listSelect(q, byKey)
		query += order("h.")
	} else {
		var parts []string
		for _, st := range store.States() {
			one := q
			one.State = st
			part, a := s.listSelect(one, false)
			parts = append(parts, `SELECT * FROM (`+part+order("h.")+`) s`+strconv.Itoa(len(parts)))
			args = append(append(args, a...), q.Limit)
		}
		query = `SELECT * FROM (` + strings.Join(parts, ` UNION ALL `) + `) u` + order("u.")
	}
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

// listSelect is the SELECT of q's records (no ORDER BY, no LIMIT) and its
// arguments: from the primary key when byKey (Dialect.ByKey), from the
// listing index otherwise.
func (s *DB) listSelect(q store.HopQuery, byKey bool) (string, []any) {
	c := s.d.ByteOrder
	var where []string
	var args []any
	from := `hops h`
	if byKey {
		from += s.d.ByKey
	}
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
		// As the index it is read from keeps it: the primary key in the
		// column's own collation, the listing index by bytes.
		if byKey {
			where = append(where, `h.iss = ?`)
		} else {
			where = append(where, `h.iss`+c+` = ?`)
		}
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
	return query, args
}

// prefixed is a column list with each column qualified by p.
func prefixed(p, cols string) string {
	parts := strings.Split(cols, ",")
	for i, c := range parts {
		parts[i] = p + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}
