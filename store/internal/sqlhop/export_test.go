package sqlhop

import "github.com/quantumlearningmachines/handoff/store"

// SetIssFew changes List's bound on a delegator's hops read from the
// primary key, so that a test can take either way with a few records.
func SetIssFew(s *DB, n int) { s.issFew = n }

// IssuedList is ListIssued's statement for q, with its arguments, bound
// to the dialect's placeholders.
func IssuedList(s *DB, q store.IssuedQuery) (string, []any) {
	query, args := s.issuedList(q)
	return s.d.bind(query), args
}

// FlagList is ListFlags' statement for q, with its arguments, bound to
// the dialect's placeholders.
func FlagList(s *DB, q store.FlagQuery) (string, []any) {
	query, args := s.flagList(q)
	return s.d.bind(query), args
}
