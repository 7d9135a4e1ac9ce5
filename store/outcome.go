package store

import (
	"context"
	"database/sql"
	"time"
)

// Effect is the last part of taken work whose effect lives in a SQL store
// (sqlite, postgres: RecordOutcome): given the one short transaction that
// records the hop's outcome, and the hop's record as it stands in that
// transaction (locked against other writers), it makes the work's writes
// and returns the outcome to record. It runs while the transaction holds
// the database's write lock (SQLite) or the hop's row (PostgreSQL), so it
// must be quick: the slow part of the work runs before, outside any
// transaction, and hands its result to the Effect.
type Effect func(tx *sql.Tx, r *Record) (Outcome, error)

// SQLStore is a Store whose records live in a SQL database that the
// application's work can write too (store/sqlite, store/postgres): DB is
// that database, and RecordOutcome runs taken work and records the hop's
// outcome in the same transaction as the work's writes (see
// delegate.Delegate.RecordOutcome, which is how applications call it).
// storetest.RunOutcome checks an implementation.
type SQLStore interface {
	Store
	DB() *sql.DB
	// RecordOutcome reads the hop (ErrNotFound, or ErrConflict when it is
	// terminal: work does not run then), runs work outside any
	// transaction, and applies the Effect it returns in one short
	// transaction that reads the hop again, locked (ErrConflict if it
	// became terminal meanwhile: the Effect never runs), and records the
	// outcome the Effect returns with the Effect's writes.
	RecordOutcome(ctx context.Context, iss, hop string, now func() time.Time, work func(context.Context, *Record) (Effect, error)) error
}
