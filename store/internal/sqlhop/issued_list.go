package sqlhop

import (
	"context"
	"strconv"
	"strings"

	"github.com/quantumlearningmachines/handoff/store"
)

// ListIssued implements store.Tracker. Each page is one statement (one
// snapshot), reading one of two indexes in the listing's order, so that it
// costs about a page's rows however many hops were issued:
//
//   - no delegate asked for: issued_listed (view, resolved, created, aud,
//     hop), one range per view and resolution asked for (six views,
//     resolved or not: twelve ranges at most), each read for a page
//     (UNION ALL) and the pages merged by the database;
//   - a delegate: issued_listed_aud (aud, view, resolved, created, hop),
//     the same ranges within the delegate's, so that a delegate issued
//     one hop in a million is found as fast as one issued every other.
//
// A time window and the cursor bound each range. Text is kept and
// compared by bytes (Dialect.ByteOrder), as the listing orders it.
func (s *DB) ListIssued(ctx context.Context, q store.IssuedQuery) ([]*store.Issued, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	query, args := s.issuedList(q)
	return s.issuedRows(ctx, query, args...)
}

// issuedList is the statement of ListIssued's page and its arguments.
func (s *DB) issuedList(q store.IssuedQuery) (string, []any) {
	c := s.d.ByteOrder
	order := func(t string) string {
		return ` ORDER BY ` + t + `created DESC, ` + t + `aud` + c + ` DESC, ` + t + `hop` + c + ` DESC LIMIT ?`
	}
	views := store.Views()
	if q.View != "" {
		views = []store.View{q.View}
	}
	resolved := []bool{false, true}
	if q.Resolved != nil {
		resolved = []bool{*q.Resolved}
	}
	var query string
	var args []any
	if len(views) == 1 && len(resolved) == 1 {
		query, args = s.issuedSelect(q, views[0], resolved[0])
		query += order("i.")
	} else {
		var parts []string
		for _, v := range views {
			for _, r := range resolved {
				part, a := s.issuedSelect(q, v, r)
				parts = append(parts, `SELECT * FROM (`+part+order("i.")+`) s`+strconv.Itoa(len(parts)))
				args = append(append(args, a...), q.Limit)
			}
		}
		query = `SELECT * FROM (` + strings.Join(parts, ` UNION ALL `) + `) u` + order("u.")
	}
	return query, append(args, q.Limit)
}

// issuedSelect is the SELECT of q's hops in view v, resolved or not (no
// ORDER BY, no LIMIT), and its arguments.
func (s *DB) issuedSelect(q store.IssuedQuery, v store.View, resolved bool) (string, []any) {
	c := s.d.ByteOrder
	from := `issued i`
	var where []string
	var args []any
	if q.Aud != "" {
		// As the index keeps it: by bytes.
		where, args = append(where, `i.aud`+c+` = ?`), append(args, q.Aud)
		if s.d.IndexedBy {
			from += ` INDEXED BY issued_listed_aud`
		}
	} else if s.d.IndexedBy {
		from += ` INDEXED BY issued_listed`
	}
	where = append(where, `i.view = ?`, `i.resolved = ?`)
	args = append(args, string(v), boolInt(resolved))
	if !q.From.IsZero() {
		where = append(where, `i.created >= ?`)
		args = append(args, nanos(q.From))
	}
	if !q.To.IsZero() {
		where = append(where, `i.created < ?`)
		args = append(args, nanos(q.To))
	}
	if a := q.After; a != nil {
		where = append(where, `(i.created, i.aud`+c+`, i.hop`+c+`) < (?, ?, ?)`)
		args = append(args, nanos(a.Created), a.Aud, a.Hop)
	}
	return `SELECT ` + prefixed("i.", issuedCols) + ` FROM ` + from + ` WHERE ` + strings.Join(where, ` AND `), args
}
