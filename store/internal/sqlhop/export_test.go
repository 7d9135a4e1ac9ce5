package sqlhop

// SetIssFew changes List's bound on a delegator's hops read from the
// primary key, so that a test can take either way with a few records.
func SetIssFew(s *DB, n int) { s.issFew = n }
