// Package sqlite is the embedded default hop store: SQLite through the
// pure-Go modernc.org/sqlite driver, in WAL mode with synchronous=FULL, so a
// record is on disk before the status that depends on it leaves. Zero
// set-up: a file path.
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/quantumlearningmachines/handoff/store/internal/sqlhop"
)

// Store is a SQLite hop store. It implements store.Store and, for work
// whose effect lives in the same database, RecordOutcome.
type Store = sqlhop.DB

var dialect = sqlhop.Dialect{
	Name:        "sqlite",
	GroupCommit: true,
	GroupMoves:  true,
	// The primary key's index, as SQLite names it (store.Store.List).
	ByKey:      ` INDEXED BY sqlite_autoindex_hops_1`,
	IndexedBy:  true,
	PrepareHot: true,
	Migrations: []string{`
CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE hops (
  iss TEXT NOT NULL,
  hop TEXT NOT NULL,
  digest_alg TEXT NOT NULL,
  digest BLOB NOT NULL,
  offer BLOB NOT NULL,
  offer_form INTEGER NOT NULL,
  state TEXT NOT NULL,
  status BLOB,
  status_form INTEGER NOT NULL DEFAULT 0,
  canceled INTEGER NOT NULL DEFAULT 0,
  equivocated INTEGER NOT NULL DEFAULT 0,
  received INTEGER NOT NULL,
  keep_until INTEGER NOT NULL,
  decided INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (iss, hop)
);
CREATE INDEX hops_keep_until ON hops (keep_until);
CREATE TABLE flags (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  iss TEXT NOT NULL,
  hop TEXT NOT NULL,
  detail TEXT NOT NULL,
  created INTEGER NOT NULL,
  resolved INTEGER NOT NULL DEFAULT 0,
  resolution TEXT NOT NULL DEFAULT ''
)`, `
CREATE TABLE issued (
  hop TEXT PRIMARY KEY,
  aud TEXT NOT NULL,
  work TEXT NOT NULL,
  offer BLOB NOT NULL,
  offer_form INTEGER NOT NULL,
  digest_alg TEXT NOT NULL,
  digest BLOB NOT NULL,
  prev_alg TEXT NOT NULL DEFAULT '',
  prev BLOB,
  exp INTEGER NOT NULL,
  view TEXT NOT NULL,
  resolved INTEGER NOT NULL DEFAULT 0,
  status BLOB,
  status_form INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_ask INTEGER NOT NULL DEFAULT 0,
  created INTEGER NOT NULL
);
CREATE INDEX issued_work ON issued (work, resolved);
CREATE INDEX issued_prev ON issued (prev);
CREATE INDEX issued_due ON issued (resolved, next_ask)`,
		// 3: the keep_until index goes. Every claim wrote it (one more page
		// per commit, a third of the hop record's writes), and it never
		// narrowed a sweep: terminal hops stay for the retention period
		// (hours) past keep_until (minutes), so nearly every row is past
		// keep_until and a sweep reads them all either way.
		`DROP INDEX IF EXISTS hops_keep_until`,
		// 4: when the operator released an accepted hop whose outcome
		// cannot be learned (store.Store.Release); 0 when not released.
		// A claim leaves it at the default: the claim statement is as
		// before.
		`ALTER TABLE hops ADD COLUMN released INTEGER NOT NULL DEFAULT 0`,
		// held cancels: a "canceled" that arrived before its offer
		// (store.HeldCancels), kept so that a restart keeps it and every
		// process sharing the database sees it. Small and bounded
		// (store.HoldLimits): no index beyond the key. seq is the order
		// in which the store held them (the oldest of an iss goes first).
		`CREATE TABLE held_cancels (
  iss TEXT NOT NULL,
  offer_alg TEXT NOT NULL,
  offer BLOB NOT NULL,
  status BLOB NOT NULL,
  status_form INTEGER NOT NULL,
  arrived INTEGER NOT NULL,
  keep_until INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  PRIMARY KEY (iss, offer_alg, offer)
)`,
		// The statuses signed for same-content copies of a hop's offer
		// (SPEC D5, store.Copy), which go with their hop (a sweep or
		// Forget deletes the hop: the cascade deletes its copies); and a
		// flag's Key, with at most one open flag per (kind, iss, hop, Key)
		// (store.Flag.Key). No absolute version number is assumed: this is
		// the migration after the held cancels.
		`CREATE TABLE copies (
  iss TEXT NOT NULL,
  hop TEXT NOT NULL,
  digest_alg TEXT NOT NULL,
  digest BLOB NOT NULL,
  basis BLOB NOT NULL,
  status BLOB NOT NULL,
  status_form INTEGER NOT NULL,
  PRIMARY KEY (iss, hop, digest_alg, digest),
  FOREIGN KEY (iss, hop) REFERENCES hops (iss, hop) ON DELETE CASCADE
);
ALTER TABLE flags ADD COLUMN dedupe TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX flags_open_dedupe ON flags (kind, iss, hop, dedupe) WHERE resolved = 0 AND dedupe <> ''`,
		// The hop of an offer by its digest (store.Store.HopOf), for a
		// cancel that names only its offer on a replica that did not take
		// the hop or after a restart. One more index entry per claim (the
		// digest alone: a SHA-256 output, shorter than (iss, digest) and
		// as selective). The copies' index covers the lookup, so that a
		// planner without statistics (SQLite never analyzes here) prefers
		// it to the primary key's, which would scan all of one iss's copies.
		`CREATE INDEX hops_digest ON hops (digest);
CREATE INDEX copies_digest ON copies (digest, digest_alg, iss, hop)`,
		// An operator's listing (store.Store.List), newest first, from one
		// index in its order (a delegator's hops: a filter on it, iss in
		// the index) and the open flags (few) by hop. Each index on hops
		// is one more page a claim's commit writes (decision 88).
		`CREATE INDEX IF NOT EXISTS hops_listed ON hops (state, received, iss, hop);
CREATE INDEX IF NOT EXISTS flags_open ON flags (iss, hop) WHERE resolved = 0`,
		// 9: the chain the hop's first offer came with (store.Record.Chain
		// and ChainForms, in one value: sqlhop's chain.go), for an
		// operator's picture of the hop. NULL for no chain and for every
		// record kept before: adding it rewrites nothing, and the claim
		// stays one statement.
		`ALTER TABLE hops ADD COLUMN chain BLOB`,
		// 10: the status sent before the last (store.Record.Earlier: the
		// "accepted" of a hop that then completed or failed), which a move
		// keeps in the statement that replaces it. NULL for a hop with
		// none and for every record moved before: adding the columns
		// rewrites nothing, and the claim is as it was.
		`ALTER TABLE hops ADD COLUMN earlier BLOB;
ALTER TABLE hops ADD COLUMN earlier_form INTEGER NOT NULL DEFAULT 0`,
		// 11: an operator's listing of the hops issued onward
		// (store.Tracker.ListIssued), newest first, from an index in its
		// order: by view and resolution, and the same within a delegate's
		// hops. Two more index entries for each hop issued (decision 92).
		`CREATE INDEX IF NOT EXISTS issued_listed ON issued (view, resolved, created, aud, hop);
CREATE INDEX IF NOT EXISTS issued_listed_aud ON issued (aud, view, resolved, created, hop)`,
		// 12: an operator's listing of the flags (store.Store.ListFlags),
		// newest first: the open ones by id (the resolved ones stay until
		// the sweep, and would otherwise be read past), and one hop's by
		// hop. Flags are few beside hops; nothing on a claim's path
		// writes these (decision 97).
		`CREATE INDEX IF NOT EXISTS flags_open_id ON flags (id) WHERE resolved = 0;
CREATE INDEX IF NOT EXISTS flags_hop ON flags (iss, hop, id)`},
}

// DSN returns the driver's data source name for a database file: WAL,
// synchronous=FULL (a commit is durable when it returns), a busy timeout
// for other processes sharing the file, and IMMEDIATE transactions so that
// a transaction that will write takes the write lock at its start.
func DSN(path string) string {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	// The path is escaped: "#", "?" and "%" in a file name are literal.
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

// Open opens (creating if needed) the hop store in the SQLite file at
// path, and applies any schema migrations not yet applied.
func Open(ctx context.Context, path string) (*Store, error) {
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	s, err := sqlhop.Open(ctx, db, dialect, time.Now())
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: sqlite %s: %w", path, err)
	}
	return s, nil
}
