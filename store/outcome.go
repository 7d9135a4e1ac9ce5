package store

import "database/sql"

// Effect is the last part of taken work whose effect lives in a SQL store
// (sqlite, postgres: RecordOutcome): given the one short transaction that
// records the hop's outcome, and the hop's record as it stands in that
// transaction (locked against other writers), it makes the work's writes
// and returns the outcome to record. It runs while the transaction holds
// the database's write lock (SQLite) or the hop's row (PostgreSQL), so it
// must be quick: the slow part of the work runs before, outside any
// transaction, and hands its result to the Effect.
type Effect func(tx *sql.Tx, r *Record) (Outcome, error)
