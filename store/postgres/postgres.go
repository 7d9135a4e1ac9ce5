// Package postgres is the hop store for fleets of delegate replicas that
// share one PostgreSQL database, through github.com/jackc/pgx/v5. The
// (iss, hop) claim is an INSERT ... ON CONFLICT DO NOTHING on the primary
// key, so two replicas racing on one offer can never both take it.
package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/quantumlearningmachines/handoff/store/internal/sqlhop"
)

// Store is a PostgreSQL hop store. It implements store.Store and, for work
// whose effect lives in the same database, RecordOutcome.
type Store = sqlhop.DB

var dialect = sqlhop.Dialect{
	Name:   "postgres",
	Dollar: true,
	// Concurrent claims share one transaction and one multi-row insert:
	// one round trip, one commit and one WAL flush for the lot, instead
	// of a connection, a round trip and a commit each. On a small machine
	// the server's per-statement and per-commit work competes with the
	// delegate's own CPU; batching is what keeps up with the raw
	// single-row rate under load. A claim still returns only after its
	// commit.
	GroupCommit: true,
	// One transaction-scoped advisory lock serializes replicas that open
	// the store at the same time, so each migration runs once.
	LockMigrations: `SELECT pg_advisory_xact_lock(7266616)`,
	ForUpdate:      "FOR UPDATE",
	ByteOrder:      ` COLLATE "C"`,
	// Two replicas issuing for the same work at once: one waits.
	LockWork: `SELECT pg_advisory_xact_lock(hashtext($1))`,
	// A claim that could begin work and a Hold for its offer are ordered
	// by a lock on the offer (handoff_offer_key, migration 8, in the
	// two-key space of advisory locks, apart from LockWork's): Hold takes
	// it exclusively, claims share it, so claims never wait for each
	// other nor for a Hold of another offer.
	LockOffer: `SELECT pg_advisory_xact_lock(7266617, handoff_offer_key($1, $2, $3))`,
	// A group commit shares its offers' locks and reads the cancels held
	// for them in one round trip (handoff_held_among, migration 8: the
	// read, a statement of its own inside the function, sees what
	// committed while the locks were awaited).
	HeldAmong: `SELECT o_iss, o_alg, o_offer FROM handoff_held_among($1::text[], $2::text[], $3::bytea[])`,
	// A lone checked claim takes its lock and inserts in one round trip:
	// the function (migration 8; its fifteenth parameter, the chain,
	// migration 10) runs its statements in order, each seeing
	// what committed before it began, so the insert sees any Hold that
	// committed before the lock was granted.
	ClaimChecked: `SELECT handoff_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
	Migrations: []string{`
CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE hops (
  iss TEXT NOT NULL,
  hop TEXT NOT NULL,
  digest_alg TEXT NOT NULL,
  digest BYTEA NOT NULL,
  offer BYTEA NOT NULL,
  offer_form INTEGER NOT NULL,
  state TEXT NOT NULL,
  status BYTEA,
  status_form INTEGER NOT NULL DEFAULT 0,
  canceled INTEGER NOT NULL DEFAULT 0,
  equivocated INTEGER NOT NULL DEFAULT 0,
  received BIGINT NOT NULL,
  keep_until BIGINT NOT NULL,
  decided BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (iss, hop)
);
CREATE INDEX hops_keep_until ON hops (keep_until);
CREATE TABLE flags (
  id BIGSERIAL PRIMARY KEY,
  kind TEXT NOT NULL,
  iss TEXT NOT NULL,
  hop TEXT NOT NULL,
  detail TEXT NOT NULL,
  created BIGINT NOT NULL,
  resolved BIGINT NOT NULL DEFAULT 0,
  resolution TEXT NOT NULL DEFAULT ''
)`, `
CREATE TABLE issued (
  hop TEXT PRIMARY KEY,
  aud TEXT NOT NULL,
  work TEXT NOT NULL,
  offer BYTEA NOT NULL,
  offer_form INTEGER NOT NULL,
  digest_alg TEXT NOT NULL,
  digest BYTEA NOT NULL,
  prev_alg TEXT NOT NULL DEFAULT '',
  prev BYTEA,
  exp BIGINT NOT NULL,
  view TEXT NOT NULL,
  resolved INTEGER NOT NULL DEFAULT 0,
  status BYTEA,
  status_form INTEGER NOT NULL DEFAULT 0,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_ask BIGINT NOT NULL DEFAULT 0,
  created BIGINT NOT NULL
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
		`ALTER TABLE hops ADD COLUMN released BIGINT NOT NULL DEFAULT 0`,
		// held cancels: a "canceled" that arrived before its offer
		// (store.HeldCancels), kept so that a restart keeps it and every
		// process sharing the database sees it. Small and bounded
		// (store.HoldLimits): no index beyond the key. seq is the order
		// in which the store held them (the oldest of an iss goes first).
		`CREATE TABLE held_cancels (
  iss TEXT NOT NULL,
  offer_alg TEXT NOT NULL,
  offer BYTEA NOT NULL,
  status BYTEA NOT NULL,
  status_form INTEGER NOT NULL,
  arrived BIGINT NOT NULL,
  keep_until BIGINT NOT NULL,
  seq BIGINT NOT NULL,
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
  digest BYTEA NOT NULL,
  basis BYTEA NOT NULL,
  status BYTEA NOT NULL,
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
		// 8: the lock key of an offer (iss, digest), and the claim of a
		// hop that could begin work, refused while a cancel is held for
		// its offer (store.Store.Claim), in one round trip: the offer's
		// lock shared (Hold takes it exclusively), then the
		// insert-if-absent unless held; it returns the rows inserted. (The
		// migration runner splits on a semicolon ending a line: none does
		// inside the bodies.)
		`CREATE FUNCTION handoff_offer_key(p_iss TEXT, p_alg TEXT, p_digest BYTEA) RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtext(p_iss || ' ' || p_alg || ':' || encode(p_digest, 'hex')) $$;
CREATE FUNCTION handoff_claim(p_iss TEXT, p_hop TEXT, p_digest_alg TEXT, p_digest BYTEA, p_offer BYTEA,
  p_offer_form INTEGER, p_state TEXT, p_status BYTEA, p_status_form INTEGER, p_canceled INTEGER, p_equivocated INTEGER,
  p_received BIGINT, p_keep_until BIGINT, p_decided BIGINT) RETURNS INTEGER
LANGUAGE plpgsql VOLATILE AS $$
DECLARE n INTEGER; BEGIN
  PERFORM pg_advisory_xact_lock_shared(7266617, handoff_offer_key(p_iss, p_digest_alg, p_digest)); INSERT INTO hops (iss, hop, digest_alg, digest, offer, offer_form, state, status,
    status_form, canceled, equivocated, received, keep_until, decided)
  SELECT p_iss, p_hop, p_digest_alg, p_digest, p_offer, p_offer_form, p_state, p_status, p_status_form, p_canceled,
    p_equivocated, p_received, p_keep_until, p_decided
  WHERE NOT EXISTS (SELECT 1 FROM held_cancels WHERE iss = p_iss AND offer_alg = p_digest_alg AND offer = p_digest)
  ON CONFLICT (iss, hop) DO NOTHING; GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END
$$;
CREATE FUNCTION handoff_held_among(p_iss TEXT[], p_alg TEXT[], p_digest BYTEA[])
RETURNS TABLE (o_iss TEXT, o_alg TEXT, o_offer BYTEA) LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  PERFORM pg_advisory_xact_lock_shared(7266617, handoff_offer_key(u.i, u.a, u.d)) FROM unnest(p_iss, p_alg, p_digest) AS u(i, a, d); RETURN QUERY
  SELECT h.iss, h.offer_alg, h.offer FROM held_cancels h
  JOIN unnest(p_iss, p_alg, p_digest) AS u(i, a, d) ON h.iss = u.i AND h.offer_alg = u.a AND h.offer = u.d; END
$$`,
		// 9: an operator's listing (store.Store.List), newest first, from
		// one index in its order (a delegator's hops: a filter on it, iss
		// in the index) and the open flags (few) by hop. Text sorts by
		// bytes (COLLATE "C"), as the listing does. Each index on hops is
		// one more page a claim's commit writes (decision 88). Built in
		// the migration's transaction, the index holds claims back while
		// it is built (seconds for a million records): IF NOT EXISTS lets
		// an operator build it first with CREATE INDEX CONCURRENTLY and
		// these very columns.
		`CREATE INDEX IF NOT EXISTS hops_listed ON hops (state, received, iss COLLATE "C", hop COLLATE "C");
CREATE INDEX IF NOT EXISTS flags_open ON flags (iss, hop) WHERE resolved = 0`,
		// 10: the chain the hop's first offer came with (store.Record.Chain
		// and ChainForms, in one value: sqlhop's chain.go), for an
		// operator's picture of the hop. NULL for no chain and for every
		// record kept before: a nullable column with no default is added
		// without rewriting the table. handoff_claim gains the column as
		// a fifteenth parameter (an overload: the one of migration 8
		// stays for a replica of the version before, still running, whose
		// claims keep no chain).
		`ALTER TABLE hops ADD COLUMN IF NOT EXISTS chain BYTEA;
CREATE FUNCTION handoff_claim(p_iss TEXT, p_hop TEXT, p_digest_alg TEXT, p_digest BYTEA, p_offer BYTEA,
  p_offer_form INTEGER, p_state TEXT, p_status BYTEA, p_status_form INTEGER, p_canceled INTEGER, p_equivocated INTEGER,
  p_received BIGINT, p_keep_until BIGINT, p_decided BIGINT, p_chain BYTEA) RETURNS INTEGER
LANGUAGE plpgsql VOLATILE AS $$
DECLARE n INTEGER; BEGIN
  PERFORM pg_advisory_xact_lock_shared(7266617, handoff_offer_key(p_iss, p_digest_alg, p_digest)); INSERT INTO hops (iss, hop, digest_alg, digest, offer, offer_form, state, status,
    status_form, canceled, equivocated, received, keep_until, decided, chain)
  SELECT p_iss, p_hop, p_digest_alg, p_digest, p_offer, p_offer_form, p_state, p_status, p_status_form, p_canceled,
    p_equivocated, p_received, p_keep_until, p_decided, p_chain
  WHERE NOT EXISTS (SELECT 1 FROM held_cancels WHERE iss = p_iss AND offer_alg = p_digest_alg AND offer = p_digest)
  ON CONFLICT (iss, hop) DO NOTHING; GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END
$$`,
		// 11: the status sent before the last (store.Record.Earlier: the
		// "accepted" of a hop that then completed or failed), which a move
		// keeps in the statement that replaces it. NULL for a hop with
		// none and for every record moved before: a nullable column and
		// a constant default are added without rewriting the table, and
		// the claim (handoff_claim) is as it was. A replica of the
		// version before, still running, moves hops without keeping it.
		`ALTER TABLE hops ADD COLUMN IF NOT EXISTS earlier BYTEA,
  ADD COLUMN IF NOT EXISTS earlier_form INTEGER NOT NULL DEFAULT 0`,
		// 12: an operator's listing of the hops issued onward
		// (store.Tracker.ListIssued), newest first, from an index in its
		// order: by view and resolution, and the same within a delegate's
		// hops; text by bytes (COLLATE "C"), as the listing orders it. Two
		// more index entries for each hop issued (decision 92). As for
		// hops_listed, an operator with many issued hops may build them
		// first with CREATE INDEX CONCURRENTLY and these very columns.
		`CREATE INDEX IF NOT EXISTS issued_listed ON issued (view, resolved, created, aud COLLATE "C", hop COLLATE "C");
CREATE INDEX IF NOT EXISTS issued_listed_aud ON issued (aud COLLATE "C", view, resolved, created, hop COLLATE "C")`,
		// 13: an operator's listing of the flags (store.Store.ListFlags),
		// newest first: the open ones by id (the resolved ones stay until
		// the sweep, and would otherwise be read past), and one hop's by
		// hop. Flags are few beside hops; nothing on a claim's path
		// writes these (decision 97).
		`CREATE INDEX IF NOT EXISTS flags_open_id ON flags (id) WHERE resolved = 0;
CREATE INDEX IF NOT EXISTS flags_hop ON flags (iss, hop, id)`},
}

// Open connects to the database named by dsn (a libpq connection string
// or URL) and applies any schema migrations not yet applied.
func Open(ctx context.Context, dsn string) (*Store, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	// The store's orderings (a claim against a held cancel, an Issue
	// against another: advisory locks, then statements that must see what
	// committed while they waited) hold under READ COMMITTED, where each
	// statement takes a new snapshot. Under REPEATABLE READ or
	// SERIALIZABLE the snapshot is the transaction's first, taken before
	// the lock: a claim would miss a cancel held meanwhile, and work
	// would begin under it. Refuse such a database rather than run unsafe.
	var iso string
	if err := db.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&iso); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: postgres: reading the isolation level: %w", err)
	}
	if iso != "read committed" {
		db.Close()
		return nil, fmt.Errorf("store: postgres: the default transaction isolation is %q; the hop store needs \"read committed\" "+
			"(set default_transaction_isolation for its role or in the connection string)", iso)
	}
	s, err := sqlhop.Open(ctx, db, dialect, time.Now())
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: postgres: %w", err)
	}
	return s, nil
}
