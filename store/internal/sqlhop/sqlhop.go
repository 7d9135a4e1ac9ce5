// Package sqlhop is the one SQL implementation of store.Store behind the
// SQLite and PostgreSQL stores; a Dialect carries their few differences.
package sqlhop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Dialect is what differs between the databases.
type Dialect struct {
	Name       string
	Migrations []string // migration i+1 is Migrations[i]; applied in order, once
	// LockMigrations runs in the migration transaction before the version
	// is read, so that concurrent openers apply each migration once.
	LockMigrations string
	// ForUpdate is appended to the SELECT that reads a hop inside
	// RecordOutcome's short transaction ("FOR UPDATE" in PostgreSQL;
	// SQLite transactions are IMMEDIATE and already hold the write lock).
	ForUpdate string
	Dollar    bool // placeholders are $1, $2 ... instead of ?
	// LockWork, run in the Issue transaction with the work's name, keeps
	// two concurrent issuers of one work from both passing the
	// unresolved-hop check (SQLite's IMMEDIATE transactions already do).
	LockWork string
	// ByteOrder follows a text ORDER BY so it sorts by bytes, as Go does
	// (PostgreSQL: COLLATE "C"; SQLite's default is already bytewise).
	ByteOrder string
	// GroupCommit: while one claim's commit is in progress, the claims
	// arriving wait, and are then written together in one transaction
	// (one multi-row insert-if-absent): many callers, one commit, one
	// fsync. A claim
	// still returns only after its own commit, with its own answer.
	GroupCommit bool
	// ByKey follows "hops h" in a listing's FROM to have it read the
	// primary key (SQLite: INDEXED BY; PostgreSQL's planner chooses from
	// its statistics).
	ByKey string
	// IndexedBy: the issued listing names in its FROM the index it reads
	// (SQLite, which never analyzes here, might take another; PostgreSQL's
	// planner chooses from its statistics).
	IndexedBy bool
	// GroupMoves: moves (Transition) join the group commit too. SQLite
	// has one writer, so the outcomes of concurrent offers queued behind
	// one another for an fsync each. PostgreSQL flushes concurrent
	// commits together already, and in a batch the moves would go one
	// round trip after another on the leader's connection.
	GroupMoves bool
	// LockOffer, run in Hold's transaction (after LockWork) with the
	// held cancel's iss, digest algorithm and digest, takes the offer's
	// lock exclusively; HeldAmong, run first in a group commit's
	// transaction with three arrays (iss, algorithm, digest of each offer
	// claimed), shares those offers' locks and then returns (iss,
	// offer_alg, offer) of the cancels held among them. So a claim's look
	// for a held cancel and its insert are one step with respect to Hold
	// (PostgreSQL: under READ COMMITTED a statement sees only what
	// committed before it began). Unset (SQLite, whose writes are
	// serialized), a group commit asks whether any cancel is held, then
	// looks up each offer.
	LockOffer, HeldAmong string
	// ClaimChecked, when set, is a query for a lone claim refused while a
	// cancel is held for its offer, sharing the offer's lock itself: it
	// takes the hopCols' values and returns the count of rows inserted. Unset, the claim is one INSERT ... SELECT ...
	// WHERE NOT EXISTS, which writes under SQLite's one write lock.
	ClaimChecked string
	// PrepareHot: prepare the statements every offer runs once, at Open
	// (SQLite's driver parses each unprepared statement anew). Unset
	// (PostgreSQL), the driver's own statement cache serves, which also
	// prepares again when a migration by a newer replica changes a
	// column's type, where a statement prepared here would fail until
	// its connection closed.
	PrepareHot bool
}

// DB is a store.Store over database/sql.
type DB struct {
	db     *sql.DB
	d      Dialect
	q      queries
	cq     copyQ // copies.go
	closed atomic.Bool

	// The single insert-if-absent, prepared once (SQLite parses a
	// statement anew for every unprepared Exec): claim as it is, and
	// claimChecked unless a cancel is held for the offer
	// (store.CheckedClaim).
	claim, claimChecked *sql.Stmt
	// hot runs the statements of every offer's path (a hop's read, its
	// moves) prepared once where the dialect says so (PrepareHot):
	// SQLite parses an unprepared statement anew on every call, which
	// was half of a Get's time under load.
	hot hot
	// issFew is List's bound on a delegator's hops read from the primary
	// key (list.go); tests change it.
	issFew int
	// GroupCommit: the claims waiting for the commit in progress, and
	// whether one is in progress (a leader is writing).
	gmu     sync.Mutex
	waiting []claimReq
	leading bool
	idle    *sync.Cond           // signalled when leading ends
	multi   [maxBatch + 1]string // multi-row claims by size; only the leader uses them
}

// open reports store.ErrClosed once Close was called.
func (s *DB) open() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

type queries struct {
	claim, claimChecked, anyHeld, heldFor, get, transition, transitionKeep, transitionIf, transitionKeepIf, cancel, release, pruneFlags, equivocated, raise, flags, flagsAll, resolve, sweepEnd, sweep, sweepLast, getSince, forget, setSince, getForUpdate string
}

// hopCols are the columns a claim writes. chain (chain.go) comes after
// every column a sweep reads (only earlier and earlier_form follow it), so
// a statement that reads only the columns before it never walks the
// overflow pages of a long chain.
const hopCols = `iss, hop, digest_alg, digest, offer, offer_form, state, status, status_form, canceled, equivocated, received, keep_until, decided, chain`

const hopColCount = 15

// selCols are the columns a read returns: hopCols, then released,
// earlier and earlier_form, which a claim leaves at their defaults (a new
// hop is never released and has sent no status before its first), so the
// claim statement stays as it was.
const selCols = hopCols + `, released, earlier, earlier_form`

// claimChecked is the statement of a lone claim refused while a cancel
// is held for its offer (store.Store.Claim); see ClaimChecked.
func (d Dialect) claimChecked() string {
	if d.ClaimChecked != "" {
		return d.ClaimChecked
	}
	return d.bind(`INSERT INTO hops (` + hopCols + `) SELECT ` + marks(hopColCount) + ` WHERE NOT EXISTS (SELECT 1 FROM held_cancels WHERE iss = ? AND offer_alg = ? AND offer = ?) ON CONFLICT (iss, hop) DO NOTHING`)
}

// marks is n placeholders, "?,?,...,?".
func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

func (d Dialect) bind(q string) string {
	if !d.Dollar {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// Open wraps db, applying any migrations not yet applied. now stamps the
// store's Since when the schema is created.
func Open(ctx context.Context, db *sql.DB, d Dialect, now time.Time) (*DB, error) {
	// database/sql keeps 2 idle connections by default: under concurrent
	// offers every connection past the second was closed when released
	// and opened anew for the next (a new PostgreSQL backend; a SQLite
	// connection that reads the schema and prepares again), a fifth of a
	// gateway's CPU under load. The number open stays unbounded, as
	// before: a bound could starve a transaction that waits on a read.
	db.SetMaxIdleConns(maxIdle)
	s := &DB{db: db, d: d, issFew: issFew}
	// Processes opening a new file together race for its first lock (the
	// switch to WAL, the first write): a migration refused as busy did
	// nothing, so it is made again (retryBusy), like any other write.
	if err := retryBusy(ctx, s.d, func() error { return s.migrate(ctx, now) }); err != nil {
		return nil, err
	}
	b := d.bind
	s.q = queries{
		claim:        b(`INSERT INTO hops (` + hopCols + `) VALUES (` + marks(hopColCount) + `) ON CONFLICT (iss, hop) DO NOTHING`),
		claimChecked: d.claimChecked(),
		anyHeld:      `SELECT 1 FROM held_cancels LIMIT 1`,
		heldFor: b(`SELECT status, status_form, arrived, keep_until FROM held_cancels
			WHERE iss = ? AND offer_alg = ? AND offer = ?`),
		get: b(`SELECT ` + selCols + ` FROM hops WHERE iss = ? AND hop = ?`),
		// A move that replaces the status keeps the one it replaces as
		// earlier (store.Record.Earlier) in the same statement: the SET
		// reads the row as it was.
		transition: b(`UPDATE hops SET earlier = status, earlier_form = status_form, state = ?, status = ?, status_form = ?, decided = ?
			WHERE iss = ? AND hop = ? AND state = ?`),
		transitionKeep: b(`UPDATE hops SET state = ?, decided = ? WHERE iss = ? AND hop = ? AND state = ?`),
		// The same, for a Move with a Mark: also conditional on the equivocated mark.
		transitionIf: b(`UPDATE hops SET earlier = status, earlier_form = status_form, state = ?, status = ?, status_form = ?, decided = ?
			WHERE iss = ? AND hop = ? AND state = ? AND equivocated = ?`),
		transitionKeepIf: b(`UPDATE hops SET state = ?, decided = ? WHERE iss = ? AND hop = ? AND state = ? AND equivocated = ?`),
		cancel:           b(`UPDATE hops SET canceled = 1 WHERE iss = ? AND hop = ?`),
		release:          b(`UPDATE hops SET released = ? WHERE iss = ? AND hop = ? AND state = 'accepted' AND released = 0`),
		pruneFlags:       b(`DELETE FROM flags WHERE resolved <> 0 AND resolved < ?`),
		equivocated:      b(`UPDATE hops SET equivocated = 1 WHERE iss = ? AND hop = ?`),
		raise:            b(`INSERT INTO flags (kind, iss, hop, detail, created, dedupe) VALUES (?,?,?,?,?,?) ON CONFLICT (kind, iss, hop, dedupe) WHERE resolved = 0 AND dedupe <> '' DO NOTHING RETURNING id`),
		flags:            b(`SELECT id, kind, iss, hop, detail, created, resolved, resolution, dedupe FROM flags WHERE resolved = 0 ORDER BY id`),
		flagsAll:         b(`SELECT id, kind, iss, hop, detail, created, resolved, resolution, dedupe FROM flags ORDER BY id`),
		resolve:          b(`UPDATE flags SET resolved = ?, resolution = ? WHERE id = ? AND resolved = 0`),
		// The sweep walks the primary key in windows of sweepBatch rows:
		// sweepEnd finds a window's last key (a read), sweep and sweepLast
		// delete what may go inside it (one short write each).
		sweepEnd:     b(`SELECT iss, hop FROM hops WHERE (iss, hop) > (?, ?) ORDER BY iss, hop LIMIT 1 OFFSET ?`),
		sweep:        b(`DELETE FROM hops WHERE (iss, hop) > (?, ?) AND (iss, hop) <= (?, ?) AND ` + sweepCond),
		sweepLast:    b(`DELETE FROM hops WHERE (iss, hop) > (?, ?) AND ` + sweepCond),
		getSince:     b(`SELECT v FROM meta WHERE k = 'since'`),
		forget:       b(`DELETE FROM hops`),
		setSince:     b(`UPDATE meta SET v = ? WHERE k = 'since'`),
		getForUpdate: b(`SELECT ` + selCols + ` FROM hops WHERE iss = ? AND hop = ? ` + d.ForUpdate),
	}
	s.cq = copyQueries(d)
	var err error
	if s.claim, err = db.PrepareContext(ctx, s.q.claim); err != nil {
		return nil, fmt.Errorf("store: prepare claim: %w", err)
	}
	if s.claimChecked, err = db.PrepareContext(ctx, s.q.claimChecked); err != nil {
		s.claim.Close()
		return nil, fmt.Errorf("store: prepare claim: %w", err)
	}
	s.hot = hot{db: db, stmts: map[string]*sql.Stmt{}}
	hotQueries := []string{s.q.get, s.q.transition, s.q.transitionKeep, s.q.transitionIf, s.q.transitionKeepIf}
	if !d.PrepareHot {
		hotQueries = nil
	}
	for _, q := range hotQueries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			s.hot.close()
			s.claim.Close()
			s.claimChecked.Close()
			return nil, fmt.Errorf("store: prepare: %w", err)
		}
		s.hot.stmts[q] = st
	}
	if d.GroupCommit {
		s.idle = sync.NewCond(&s.gmu)
	}
	return s, nil
}

// hot is the database with some statements prepared: a query it has
// prepared runs as its statement, any other as given.
type hot struct {
	db    *sql.DB
	stmts map[string]*sql.Stmt // read-only once Open returns
}

func (h hot) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := h.stmts[q]; st != nil {
		return st.ExecContext(ctx, args...)
	}
	return h.db.ExecContext(ctx, q, args...)
}

func (h hot) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := h.stmts[q]; st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return h.db.QueryRowContext(ctx, q, args...)
}

func (h hot) close() {
	for _, st := range h.stmts {
		st.Close()
	}
}

// maxIdle is how many connections the store keeps open between uses.
const maxIdle = 16

// DB returns the underlying database, for the caller's own tables.
func (s *DB) DB() *sql.DB { return s.db }

func (s *DB) migrate(ctx context.Context, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if s.d.LockMigrations != "" {
		if _, err := tx.ExecContext(ctx, s.d.LockMigrations); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if v > len(s.d.Migrations) {
		return fmt.Errorf("store: the database schema is version %d, newer than this program's %d", v, len(s.d.Migrations))
	}
	for i := v; i < len(s.d.Migrations); i++ {
		for _, stmt := range strings.Split(s.d.Migrations[i], ";\n") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("store: migration %d: %w", i+1, err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.d.bind(`INSERT INTO schema_migrations (version) VALUES (?)`), i+1); err != nil {
			return fmt.Errorf("store: migration %d: %w", i+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.d.bind(`INSERT INTO meta (k, v) VALUES ('since', ?) ON CONFLICT (k) DO NOTHING`),
		strconv.FormatInt(now.UnixNano(), 10)); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return tx.Commit()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

type scanner interface{ Scan(...any) error }

func scanHop(row scanner) (*store.Record, error) {
	var r store.Record
	var state string
	var offerForm, statusForm, earlierForm, canceled, equivocated int
	var received, keep, decided, released int64
	var chain []byte
	if err := row.Scan(&r.Iss, &r.Hop, &r.Digest.Alg, &r.Digest.Val, &r.Offer, &offerForm, &state, &r.Status,
		&statusForm, &canceled, &equivocated, &received, &keep, &decided, &chain, &released, &r.Earlier, &earlierForm); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, store.ErrNotFound
		}
		return nil, err
	}
	var err error
	if r.Chain, r.ChainForms, err = parseChain(chain); err != nil {
		return nil, fmt.Errorf("store: hop %s of %q: %w", r.Hop, r.Iss, err)
	}
	r.OfferForm, r.StatusForm, r.EarlierForm = handoff.Form(offerForm), handoff.Form(statusForm), handoff.Form(earlierForm)
	r.State = store.State(state)
	r.Canceled, r.Equivocated = canceled != 0, equivocated != 0
	r.Received, r.KeepUntil, r.Decided, r.Released = fromNanos(received), fromNanos(keep), fromNanos(decided), fromNanos(released)
	if !r.State.Valid() {
		return nil, fmt.Errorf("store: hop %s of %q has an unknown state %q", r.Hop, r.Iss, state)
	}
	return &r, nil
}

// Close implements store.Store. Calling it again does nothing. Claims
// already waiting for a group commit are written and answered first;
// claims made after Close get ErrClosed.
func (s *DB) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.idle != nil {
		// Claims already waiting are written by the leader before it
		// stops; new ones see closed.
		s.gmu.Lock()
		for s.leading {
			s.idle.Wait()
		}
		s.gmu.Unlock()
	}
	s.claim.Close()
	s.claimChecked.Close()
	s.hot.close()
	return s.db.Close()
}

var _ store.Store = (*DB)(nil)
