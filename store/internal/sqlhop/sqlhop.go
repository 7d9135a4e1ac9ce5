// Package sqlhop is the one SQL implementation of store.Store behind the
// SQLite and PostgreSQL stores; a Dialect carries their few differences.
package sqlhop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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
}

// DB is a store.Store over database/sql.
type DB struct {
	db     *sql.DB
	d      Dialect
	q      queries
	cq     copyQ // copies.go
	closed atomic.Bool

	claim *sql.Stmt // the single insert-if-absent
	// GroupCommit: the claims waiting for the commit in progress, and
	// whether one is in progress (a leader is writing).
	gmu     sync.Mutex
	waiting []claimReq
	leading bool
	idle    *sync.Cond           // signalled when leading ends
	multi   [maxBatch + 1]string // multi-row claims by size; only the leader uses them
}

type claimReq struct {
	ctx   context.Context
	r     *store.Record
	reply chan claimRes
}

type claimRes struct {
	rec    *store.Record
	stored bool
	err    error
	lead   []claimReq // not an answer: lead, writing these (the first is the receiver)
}

// open reports store.ErrClosed once Close was called.
func (s *DB) open() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

type queries struct {
	claim, get, hops, transition, transitionKeep, transitionIf, transitionKeepIf, cancel, release, pruneFlags, equivocated, raise, flags, flagsAll, resolve, sweepEnd, sweep, sweepLast, getSince, forget, setSince, getForUpdate string
}

const hopCols = `iss, hop, digest_alg, digest, offer, offer_form, state, status, status_form, canceled, equivocated, received, keep_until, decided`

const hopColCount = 14

// selCols are the columns a read returns: hopCols and released, which a
// claim leaves at its default (a new hop is never released), so the claim
// statement stays as it was.
const selCols = hopCols + `, released`

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
	s := &DB{db: db, d: d}
	if err := s.migrate(ctx, now); err != nil {
		return nil, err
	}
	b := d.bind
	s.q = queries{
		claim: b(`INSERT INTO hops (` + hopCols + `) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (iss, hop) DO NOTHING`),
		get:   b(`SELECT ` + selCols + ` FROM hops WHERE iss = ? AND hop = ?`),
		hops: b(`SELECT ` + selCols + ` FROM hops WHERE state = ? AND (iss` + d.ByteOrder + ` > ? OR (iss = ? AND hop` + d.ByteOrder + ` > ?))
			ORDER BY iss` + d.ByteOrder + `, hop` + d.ByteOrder + ` LIMIT ?`),
		transition: b(`UPDATE hops SET state = ?, status = ?, status_form = ?, decided = ?
			WHERE iss = ? AND hop = ? AND state = ?`),
		transitionKeep: b(`UPDATE hops SET state = ?, decided = ? WHERE iss = ? AND hop = ? AND state = ?`),
		// The same, for TransitionIf: also conditional on the equivocated mark.
		transitionIf: b(`UPDATE hops SET state = ?, status = ?, status_form = ?, decided = ?
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
	if d.GroupCommit {
		s.idle = sync.NewCond(&s.gmu)
	}
	return s, nil
}

// maxBatch bounds the claims one group commit takes.
const maxBatch = 256

// group is the group commit (leader and followers, no goroutine of its
// own). A claim arriving while no commit is in progress leads: it writes
// itself, alone, in one autocommit statement on its own goroutine, so a
// lone sender pays no hand-off to another goroutine (on a virtual
// machine, waking an idle CPU for it costs tens of microseconds). Claims
// arriving meanwhile wait; when the leader's commit returns, it passes
// the lead, with every claim then waiting, to the first of them, which
// writes them all in one transaction. Each claim is answered only after
// the commit that holds it.
func (s *DB) group(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	req := claimReq{ctx: ctx, r: r}
	s.gmu.Lock()
	if s.closed.Load() {
		s.gmu.Unlock()
		return nil, false, store.ErrClosed
	}
	if s.leading {
		req.reply = make(chan claimRes, 1)
		s.waiting = append(s.waiting, req)
		s.gmu.Unlock()
		// Once queued, wait for the commit even if ctx ends: the claim
		// may be written, and the caller must know.
		res := <-req.reply
		if res.lead == nil {
			return res.rec, res.stored, res.err
		}
		return s.lead(res.lead)
	}
	s.leading = true
	s.gmu.Unlock()
	return s.lead([]claimReq{req})
}

// lead commits batch, whose first claim is the caller's, answers the
// others in it, and passes the lead on to the claims that arrived
// meanwhile.
func (s *DB) lead(batch []claimReq) (*store.Record, bool, error) {
	results := s.commitBatch(batch)
	mine := results[0]
	for i := 1; i < len(batch); i++ {
		batch[i].reply <- results[i]
	}
	s.gmu.Lock()
	if len(s.waiting) == 0 {
		s.leading = false
		s.idle.Broadcast()
	} else {
		n := min(len(s.waiting), maxBatch)
		next := slices.Clone(s.waiting[:n])
		s.waiting = slices.Delete(s.waiting, 0, n)
		next[0].reply <- claimRes{lead: next}
	}
	s.gmu.Unlock()
	return mine.rec, mine.stored, mine.err
}

// commitBatch writes batch and returns each claim's answer.
func (s *DB) commitBatch(batch []claimReq) []claimRes {
	if len(batch) == 1 {
		// Alone: one autocommit statement, no BEGIN and COMMIT round trips.
		req := batch[0]
		if err := req.ctx.Err(); err != nil {
			return []claimRes{{err: store.AtHop(fmt.Errorf("store: claim: %w", err), req.r.Iss, req.r.Hop)}}
		}
		rec, stored, err := s.claimOne(req.ctx, req.r)
		return []claimRes{{rec: rec, stored: stored, err: err}}
	}
	results := make([]claimRes, len(batch))
	committing, err := s.claimBatch(batch, results)
	for i, req := range batch {
		switch {
		case err == nil || results[i].err != nil && !committing:
			// Committed, or given up before the batch was written.
		case committing:
			// The commit itself failed: whether it took effect is not
			// known, so no claim may be retried as if it had not (a retry
			// would find the claim's own record and call it someone
			// else's). Each caller gets the error, as from a single
			// statement whose commit failed.
			results[i] = claimRes{err: store.AtHop(fmt.Errorf("store: claim: %w", err), req.r.Iss, req.r.Hop)}
		default:
			// A statement failed and the batch was rolled back: nothing of
			// it is written. One bad record (or a deadlock with another
			// replica's batch) must not fail its neighbours, so each claim
			// is made alone and gets its own answer.
			rec, stored, err := s.claimOne(req.ctx, req.r)
			results[i] = claimRes{rec: rec, stored: stored, err: err}
		}
	}
	return results
}

type hopKey struct{ iss, hop string }

// claimBatch claims the batch in one transaction: one multi-row
// insert-if-absent of the distinct (iss, hop) pairs, in key order (so two
// replicas' batches take their row locks in one order), then a read of the
// existing record for every claim whose row was not inserted (a pair
// already recorded, or a second claim of a pair within the batch, which
// finds the first one's row). Each claim keeps the atomic insert-if-absent
// of a single statement; the batch shares one commit. committing reports
// that the error, if any, came from the commit.
func (s *DB) claimBatch(batch []claimReq, results []claimRes) (committing bool, err error) {
	ctx := context.Background() // each claim's context was checked; once written, it is committed
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	first := make(map[hopKey]int, len(batch))
	ins := make([]int, 0, len(batch))
	var rest []int
	for i, req := range batch {
		if err := req.ctx.Err(); err != nil {
			results[i].err = store.AtHop(fmt.Errorf("store: claim: %w", err), req.r.Iss, req.r.Hop) // given up: not written
			continue
		}
		k := hopKey{req.r.Iss, req.r.Hop}
		if _, dup := first[k]; dup {
			rest = append(rest, i)
			continue
		}
		first[k] = i
		ins = append(ins, i)
	}
	if len(ins) > 0 {
		slices.SortFunc(ins, func(a, b int) int {
			ra, rb := batch[a].r, batch[b].r
			if c := strings.Compare(ra.Iss, rb.Iss); c != 0 {
				return c
			}
			return strings.Compare(ra.Hop, rb.Hop)
		})
		args := make([]any, 0, hopColCount*len(ins))
		for _, i := range ins {
			args = append(args, claimArgs(batch[i].r)...)
		}
		rows, err := tx.QueryContext(ctx, s.multiClaim(len(ins)), args...)
		if err != nil {
			return false, err
		}
		inserted := make(map[hopKey]bool, len(ins))
		for rows.Next() {
			var k hopKey
			if err := rows.Scan(&k.iss, &k.hop); err != nil {
				rows.Close()
				return false, err
			}
			inserted[k] = true
		}
		if err := rows.Close(); err != nil {
			return false, err
		}
		if err := rows.Err(); err != nil {
			return false, err
		}
		for _, i := range ins {
			r := batch[i].r
			if inserted[hopKey{r.Iss, r.Hop}] {
				c := *r
				results[i] = claimRes{rec: &c, stored: true}
			} else {
				rest = append(rest, i)
			}
		}
	}
	for _, i := range rest {
		r := batch[i].r
		old, err := scanHop(tx.QueryRowContext(ctx, s.q.get, r.Iss, r.Hop))
		if err != nil {
			return false, err
		}
		results[i] = claimRes{rec: old}
	}
	return true, tx.Commit()
}

// multiClaim returns the insert-if-absent of n records in one statement,
// returning the keys of the rows it inserted. Only the writer calls it.
func (s *DB) multiClaim(n int) string {
	if q := s.multi[n]; q != "" {
		return q
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO hops (` + hopCols + `) VALUES `)
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", hopColCount), ",") + ")"
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
	}
	b.WriteString(` ON CONFLICT (iss, hop) DO NOTHING RETURNING iss, hop`)
	s.multi[n] = s.d.bind(b.String())
	return s.multi[n]
}

// DB returns the underlying database, for the caller's own tables.
func (s *DB) DB() *sql.DB { return s.db }

func (s *DB) migrate(ctx context.Context, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	defer tx.Rollback()
	if s.d.LockMigrations != "" {
		if _, err := tx.ExecContext(ctx, s.d.LockMigrations); err != nil {
			return fmt.Errorf("store: migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
	}
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("store: migrate: %w", err)
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
		return fmt.Errorf("store: migrate: %w", err)
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
	var offerForm, statusForm, canceled, equivocated int
	var received, keep, decided, released int64
	if err := row.Scan(&r.Iss, &r.Hop, &r.Digest.Alg, &r.Digest.Val, &r.Offer, &offerForm, &state, &r.Status,
		&statusForm, &canceled, &equivocated, &received, &keep, &decided, &released); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, store.ErrNotFound
		}
		return nil, err
	}
	r.OfferForm, r.StatusForm = handoff.Form(offerForm), handoff.Form(statusForm)
	r.State = store.State(state)
	r.Canceled, r.Equivocated = canceled != 0, equivocated != 0
	r.Received, r.KeepUntil, r.Decided, r.Released = fromNanos(received), fromNanos(keep), fromNanos(decided), fromNanos(released)
	if !r.State.Valid() {
		return nil, fmt.Errorf("store: hop %s of %q has an unknown state %q", r.Hop, r.Iss, state)
	}
	return &r, nil
}

// Claim implements store.Store.
func (s *DB) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	if err := s.open(); err != nil {
		return nil, false, err
	}
	switch r.State {
	case store.Received, store.Accepted, store.Rejected:
	default:
		return nil, false, fmt.Errorf("store: a hop is claimed as received, accepted or rejected, not %q", r.State)
	}
	if r.Iss == "" || r.Hop == "" || len(r.Offer) == 0 || len(r.Digest.Val) == 0 {
		return nil, false, errors.New("store: a claim needs iss, hop, the offer and its digest")
	}
	if !r.Released.IsZero() {
		return nil, false, errors.New("store: a new hop is not released")
	}
	if s.idle == nil {
		return s.claimOne(ctx, r)
	}
	return s.group(ctx, r)
}

// claimOne inserts the record if absent, in one autocommit statement
// (prepared once: SQLite parses a statement anew for every unprepared
// Exec), and returns the record now stored. A busy database is waited
// out within ctx (retryBusy): a refused insert wrote nothing.
func (s *DB) claimOne(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	var res sql.Result
	err := retryBusy(ctx, s.d, func() (err error) {
		res, err = s.claim.ExecContext(ctx, claimArgs(r)...)
		return err
	})
	if err != nil {
		return nil, false, store.AtHop(fmt.Errorf("store: claim: %w", err), r.Iss, r.Hop)
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, false, store.AtHop(fmt.Errorf("store: claim: %w", err), r.Iss, r.Hop)
	} else if n == 1 {
		c := *r
		return &c, true, nil
	}
	old, err := scanHop(s.db.QueryRowContext(ctx, s.q.get, r.Iss, r.Hop))
	if errors.Is(err, store.ErrNotFound) {
		// Swept between the insert and the read: the pair was past its
		// keep time; report the conflict rather than guess.
		return nil, false, store.AtHop(errors.New("store: claim: the existing record vanished; retry"), r.Iss, r.Hop)
	}
	if err != nil {
		return nil, false, store.AtHop(fmt.Errorf("store: claim: %w", err), r.Iss, r.Hop)
	}
	return old, false, nil
}

// claimArgs are the values of hopCols for r.
func claimArgs(r *store.Record) []any {
	return []any{r.Iss, r.Hop, r.Digest.Alg, r.Digest.Val, r.Offer, int(r.OfferForm),
		string(r.State), r.Status, int(r.StatusForm), boolInt(r.Canceled), boolInt(r.Equivocated), nanos(r.Received),
		nanos(r.KeepUntil), nanos(r.Decided)}
}

// Get implements store.Store.
func (s *DB) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	r, err := scanHop(s.db.QueryRowContext(ctx, s.q.get, iss, hop))
	if err != nil {
		return nil, store.AtHop(err, iss, hop)
	}
	return r, nil
}

// Hops implements store.Store.
func (s *DB) Hops(ctx context.Context, state store.State, after store.HopKey, limit int) ([]*store.Record, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("store: hops: limit must be positive, not %d", limit)
	}
	rows, err := s.db.QueryContext(ctx, s.q.hops, string(state), after.Iss, after.Iss, after.Hop, limit)
	if err != nil {
		return nil, fmt.Errorf("store: hops: %w", err)
	}
	defer rows.Close()
	var out []*store.Record
	for rows.Next() {
		r, err := scanHop(rows)
		if err != nil {
			return nil, fmt.Errorf("store: hops: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: hops: %w", err)
	}
	return out, nil
}

// Transition implements store.Store.
func (s *DB) Transition(ctx context.Context, iss, hop string, from, to store.State, status []byte, form handoff.Form, now time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := s.transition(ctx, s.db, iss, hop, from, to, nil, status, form, now); err != nil {
		return store.AtHop(err, iss, hop)
	}
	return nil
}

// TransitionIf implements store.Store.
func (s *DB) TransitionIf(ctx context.Context, iss, hop string, from, to store.State, equivocated bool, status []byte, form handoff.Form, now time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	if err := s.transition(ctx, s.db, iss, hop, from, to, &equivocated, status, form, now); err != nil {
		return store.AtHop(err, iss, hop)
	}
	return nil
}

type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// transition moves the hop; equivocated, if set, is the mark it must have.
func (s *DB) transition(ctx context.Context, ex execer, iss, hop string, from, to store.State, equivocated *bool, status []byte, form handoff.Form, now time.Time) error {
	if !store.CanMove(from, to) {
		return fmt.Errorf("%w: the lifecycle does not allow %s -> %s", store.ErrConflict, from, to)
	}
	var decided int64
	if to.Terminal() {
		decided = nanos(now)
	}
	q, qKeep, where := s.q.transition, s.q.transitionKeep, []any{iss, hop, string(from)}
	if equivocated != nil {
		q, qKeep, where = s.q.transitionIf, s.q.transitionKeepIf, append(where, boolInt(*equivocated))
	}
	var res sql.Result
	var err error
	switch {
	case status != nil:
		res, err = ex.ExecContext(ctx, q, append([]any{string(to), status, int(form), decided}, where...)...)
	case to.Terminal():
		// No status for a terminal state: the record must not go on
		// answering with the status before it (say "accepted").
		res, err = ex.ExecContext(ctx, q, append([]any{string(to), nil, 0, decided}, where...)...)
	default:
		res, err = ex.ExecContext(ctx, qKeep, append([]any{string(to), decided}, where...)...)
	}
	if err != nil {
		return fmt.Errorf("store: transition: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return nil
	}
	r, err := scanHop(ex.QueryRowContext(ctx, s.q.get, iss, hop))
	if err != nil {
		return err
	}
	if r.State == from && equivocated != nil && r.Equivocated != *equivocated {
		return fmt.Errorf("%w: hop's equivocated mark is %v, not %v", store.ErrConflict, r.Equivocated, *equivocated)
	}
	return fmt.Errorf("%w: hop is %s, not %s", store.ErrConflict, r.State, from)
}

// Release implements store.Store.
func (s *DB) Release(ctx context.Context, iss, hop string, now time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.q.release, nanos(now), iss, hop)
	if err != nil {
		return store.AtHop(fmt.Errorf("store: release: %w", err), iss, hop)
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.AtHop(fmt.Errorf("store: release: %w", err), iss, hop)
	} else if n == 1 {
		return nil
	}
	r, err := scanHop(s.db.QueryRowContext(ctx, s.q.get, iss, hop))
	if err != nil {
		return store.AtHop(err, iss, hop)
	}
	return store.AtHop(fmt.Errorf("%w: only an accepted hop not yet released can be released; hop is %s (released %v)", store.ErrConflict, r.State, !r.Released.IsZero()), iss, hop)
}

// MarkCanceled implements store.Store.
func (s *DB) MarkCanceled(ctx context.Context, iss, hop string) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.mark(ctx, s.q.cancel, iss, hop)
}

// MarkEquivocated implements store.Store.
func (s *DB) MarkEquivocated(ctx context.Context, iss, hop string) error {
	if err := s.open(); err != nil {
		return err
	}
	return s.mark(ctx, s.q.equivocated, iss, hop)
}

func (s *DB) mark(ctx context.Context, q, iss, hop string) error {
	res, err := s.db.ExecContext(ctx, q, iss, hop)
	if err != nil {
		return store.AtHop(fmt.Errorf("store: mark hop: %w", err), iss, hop)
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.AtHop(fmt.Errorf("store: mark hop: %w", err), iss, hop)
	} else if n == 0 {
		return store.AtHop(store.ErrNotFound, iss, hop)
	}
	return nil
}

// Raise implements store.Store.
func (s *DB) Raise(ctx context.Context, f store.Flag) (int64, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	return s.raiseKeyed(ctx, f)
}

// Flags implements store.Store.
func (s *DB) Flags(ctx context.Context, all bool) ([]store.Flag, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	q := s.q.flags
	if all {
		q = s.q.flagsAll
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("store: flags: %w", err)
	}
	defer rows.Close()
	var out []store.Flag
	for rows.Next() {
		var f store.Flag
		var created, resolved int64
		if err := rows.Scan(&f.ID, &f.Kind, &f.Iss, &f.Hop, &f.Detail, &created, &resolved, &f.Resolution, &f.Key); err != nil {
			return nil, err
		}
		f.Created, f.Resolved = fromNanos(created), fromNanos(resolved)
		out = append(out, f)
	}
	return out, rows.Err()
}

// Resolve implements store.Store.
func (s *DB) Resolve(ctx context.Context, id int64, resolution string, now time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, s.q.resolve, nanos(now), resolution, id)
	if err != nil {
		return fmt.Errorf("store: resolve: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("store: no open flag %d", id)
	}
	return nil
}

// sweepCond is the retention rule (store.Store.Sweep) in SQL; its
// parameters are now and now minus the retention.
const sweepCond = `keep_until < ? AND ((state IN ('rejected', 'completed', 'failed') AND decided < ?) OR state = 'received'
	OR (state = 'accepted' AND released <> 0 AND released < ?))`

// sweepBatch is how many rows one sweep statement examines.
const sweepBatch = 500

// Sweep implements store.Store. There is no index on keep_until (decision
// 37: it cost a page write per claim), so a sweep reads the whole table;
// one DELETE over it would hold SQLite's write lock for the whole scan
// and make concurrent claims wait out the busy timeout. Instead it walks
// the primary key in windows of sweepBatch rows: finding a window's end
// is a read (no write lock in WAL mode), and each window's DELETE is its
// own short transaction, so claims get the lock between them. On
// PostgreSQL a DELETE does not block inserts, but the windows keep each
// transaction short there too. Rows inserted behind the walk are new and
// may not go yet; the next sweep sees them.
func (s *DB) Sweep(ctx context.Context, now time.Time, retention time.Duration) (int, error) {
	if err := s.open(); err != nil {
		return 0, err
	}
	cut, old := nanos(now), nanos(now.Add(-retention))
	total := 0
	var lo store.HopKey // the zero key is before every hop (iss is never empty)
	for {
		var hi store.HopKey
		err := s.db.QueryRowContext(ctx, s.q.sweepEnd, lo.Iss, lo.Hop, sweepBatch-1).Scan(&hi.Iss, &hi.Hop)
		last := errors.Is(err, sql.ErrNoRows)
		if err != nil && !last {
			return total, fmt.Errorf("store: sweep: %w", err)
		}
		var res sql.Result
		if last {
			res, err = s.db.ExecContext(ctx, s.q.sweepLast, lo.Iss, lo.Hop, cut, old, old)
		} else {
			res, err = s.db.ExecContext(ctx, s.q.sweep, lo.Iss, lo.Hop, hi.Iss, hi.Hop, cut, old, old)
		}
		if err != nil {
			return total, fmt.Errorf("store: sweep: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("store: sweep: %w", err)
		}
		total += int(n)
		if last {
			break
		}
		lo = hi
	}
	if _, err := s.db.ExecContext(ctx, s.q.pruneFlags, old); err != nil {
		return total, fmt.Errorf("store: sweep: flags: %w", err)
	}
	if err := s.sweepHeld(ctx, cut); err != nil {
		return total, fmt.Errorf("store: sweep: held cancels: %w", err)
	}
	return total, nil
}

// Since implements store.Store.
func (s *DB) Since(ctx context.Context) (time.Time, error) {
	if err := s.open(); err != nil {
		return time.Time{}, err
	}
	var v string
	if err := s.db.QueryRowContext(ctx, s.q.getSince).Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("store: since: %w", err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: since: corrupt value %q", v)
	}
	return time.Unix(0, n), nil
}

// Forget implements store.Store.
func (s *DB) Forget(ctx context.Context, now time.Time) error {
	if err := s.open(); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.q.forget); err != nil {
		return fmt.Errorf("store: forget: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q.setSince, strconv.FormatInt(now.UnixNano(), 10)); err != nil {
		return fmt.Errorf("store: forget: %w", err)
	}
	return tx.Commit()
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
	return s.db.Close()
}

var _ store.Store = (*DB)(nil)
