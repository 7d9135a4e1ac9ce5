package sqlhop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/quantumlearningmachines/handoff/store"
)

// claimReq is one write waiting for the group commit: a claim (r) or a
// move (m, store.Store.Transition).
type claimReq struct {
	ctx   context.Context
	r     *store.Record
	m     *store.Move
	reply chan claimRes
}

type claimRes struct {
	rec    *store.Record
	stored bool
	err    error
	lead   []claimReq // not an answer: lead, writing these (the first is the receiver)
}

// maxBatch bounds the claims one group commit takes.
const maxBatch = 256

// group is the group commit (leader and followers, no goroutine of its
// own), for claims and moves alike. A write arriving while no commit is
// in progress leads: it writes itself, alone, in one autocommit statement
// on its own goroutine, so a lone sender pays no hand-off to another
// goroutine (on a virtual machine, waking an idle CPU for it costs tens of
// microseconds). Writes arriving meanwhile wait; when the leader's commit
// returns, it passes the lead, with every write then waiting, to the
// first of them, which writes them all in one transaction. Each write is
// answered only after the commit that holds it. Moves share the commit
// because each fresh offer's outcome is a move: written one by one, the
// outcomes of concurrent offers queued behind one another, an fsync each
// (SQLite has one writer).
func (s *DB) group(req claimReq) claimRes {
	s.gmu.Lock()
	if s.closed.Load() {
		s.gmu.Unlock()
		return claimRes{err: store.ErrClosed}
	}
	if s.leading {
		req.reply = make(chan claimRes, 1)
		s.waiting = append(s.waiting, req)
		s.gmu.Unlock()
		// Once queued, wait for the commit even if ctx ends: the claim
		// may be written, and the caller must know.
		res := <-req.reply
		if res.lead == nil {
			return res
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
func (s *DB) lead(batch []claimReq) claimRes {
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
	return mine
}

// commitBatch writes batch and returns each claim's answer.
func (s *DB) commitBatch(batch []claimReq) []claimRes {
	if len(batch) == 1 {
		// Alone: one autocommit statement, no BEGIN and COMMIT round trips.
		return []claimRes{s.writeOne(batch[0])}
	}
	results := make([]claimRes, len(batch))
	committing, err := s.claimBatch(batch, results)
	for i, req := range batch {
		switch {
		case err == nil || results[i].err != nil && !committing:
			// Committed, or given up before the batch was written.
		case committing:
			// The commit itself failed: whether it took effect is not
			// known, so no write may be retried as if it had not (a retry
			// would find the claim's own record and call it someone
			// else's). Each caller gets the error, as from a single
			// statement whose commit failed.
			results[i] = claimRes{err: req.failed(err)}
		default:
			// A statement failed and the batch was rolled back: nothing of
			// it is written. One bad record (or a deadlock with another
			// replica's batch) must not fail its neighbours, so each write
			// is made alone and gets its own answer.
			results[i] = s.writeOne(req)
		}
	}
	return results
}

type hopKey struct{ iss, hop string }

// writeOne makes one write alone.
func (s *DB) writeOne(req claimReq) claimRes {
	if err := req.ctx.Err(); err != nil {
		return claimRes{err: req.failed(err)}
	}
	if req.m != nil {
		return claimRes{err: s.moveOne(req.ctx, *req.m)}
	}
	rec, stored, err := s.claimOne(req.ctx, req.r)
	return claimRes{rec: rec, stored: stored, err: err}
}

// failed is the error of a write that err kept from being made, or whose
// commit failed with err.
func (req claimReq) failed(err error) error {
	if req.m != nil {
		return store.AtHop(fmt.Errorf("store: transition: %w", err), req.m.Iss, req.m.Hop)
	}
	return store.AtHop(fmt.Errorf("store: claim: %w", err), req.r.Iss, req.r.Hop)
}

// moveAnswer reports whether err, from a move made in a batch, is the
// move's own answer (the hop is not where the move starts, or is not
// there), the batch going on, rather than a failed statement.
func moveAnswer(err error) bool {
	return errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)
}

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
	held, err := s.batchHeld(ctx, tx, batch)
	if err != nil {
		return false, err
	}
	first := make(map[hopKey]int, len(batch))
	ins := make([]int, 0, len(batch))
	var rest, refused, moves []int
	for i, req := range batch {
		if err := req.ctx.Err(); err != nil {
			results[i].err = req.failed(err) // given up: not written
			continue
		}
		if req.m != nil {
			moves = append(moves, i)
			continue
		}
		k := hopKey{req.r.Iss, req.r.Hop}
		if held(req.r) {
			// Not inserted (store.Store.Claim); answered below with the
			// record, if there is one, or ErrCancelHeld. A later claim
			// of the pair in the batch is judged on its own.
			refused = append(refused, i)
			continue
		}
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
	for _, i := range refused {
		r := batch[i].r
		old, err := scanHop(tx.QueryRowContext(ctx, s.q.get, r.Iss, r.Hop))
		switch {
		case err == nil:
			results[i] = claimRes{rec: old}
		case errors.Is(err, store.ErrNotFound):
			results[i] = claimRes{err: store.AtHop(store.ErrCancelHeld, r.Iss, r.Hop)}
		default:
			return false, err
		}
	}
	// The moves after the claims, in key order (a move of a hop claimed
	// in this batch cannot be among them: its caller waits for the
	// claim's commit), so that two replicas' batches lock rows in one
	// order; two moves of one hop keep their order of arrival, and the
	// second meets the first's state, as one after the other alone.
	slices.SortStableFunc(moves, func(a, b int) int {
		ma, mb := batch[a].m, batch[b].m
		if c := strings.Compare(ma.Iss, mb.Iss); c != 0 {
			return c
		}
		return strings.Compare(ma.Hop, mb.Hop)
	})
	// A move's own answer (a conflict) is given only with the commit: if a
	// later statement fails, every write is made again alone, this move
	// too, since the moves before it in the batch were rolled back.
	answers := map[int]error{}
	for _, i := range moves {
		m := batch[i].m
		if err := s.transition(ctx, tx, *m); err != nil {
			if !moveAnswer(err) {
				return false, err
			}
			answers[i] = store.AtHop(err, m.Iss, m.Hop)
		}
	}
	for i, err := range answers {
		results[i] = claimRes{err: err}
	}
	return true, tx.Commit()
}

// batchHeld looks, inside a batch's transaction, for the cancels held for
// the offers of its checked claims (store.CheckedClaim), and returns
// which claims one is held for. Where the dialect locks offers, their
// locks are shared first (so a Hold of one commits either before the
// look or after this commit), in the look's one statement; otherwise
// one read says whether any cancel is held, and only then is each offer
// looked up.
func (s *DB) batchHeld(ctx context.Context, tx *sql.Tx, batch []claimReq) (func(*store.Record) bool, error) {
	var iss, algs []string
	var digests [][]byte
	for _, q := range batch {
		if q.r != nil && store.CheckedClaim(q.r) {
			iss, algs, digests = append(iss, q.r.Iss), append(algs, q.r.Digest.Alg), append(digests, q.r.Digest.Val)
		}
	}
	if len(iss) == 0 {
		return func(*store.Record) bool { return false }, nil
	}
	held := map[string]bool{}
	key := func(iss, alg string, digest []byte) string { return iss + "\x00" + alg + "\x00" + string(digest) }
	if s.d.HeldAmong != "" {
		rows, err := tx.QueryContext(ctx, s.d.HeldAmong, iss, algs, digests)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var i, a string
			var d []byte
			if err := rows.Scan(&i, &a, &d); err != nil {
				return nil, err
			}
			held[key(i, a, d)] = true
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	} else {
		var one int
		switch err := tx.QueryRowContext(ctx, s.q.anyHeld).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			return func(*store.Record) bool { return false }, nil
		case err != nil:
			return nil, err
		}
		for j := range iss {
			k := key(iss[j], algs[j], digests[j])
			if held[k] {
				continue
			}
			var status []byte
			var form int
			var arrived, keep int64
			err := tx.QueryRowContext(ctx, s.q.heldFor, iss[j], algs[j], digests[j]).Scan(&status, &form, &arrived, &keep)
			switch {
			case err == nil:
				held[k] = true
			case !errors.Is(err, sql.ErrNoRows):
				return nil, err
			}
		}
	}
	return func(r *store.Record) bool {
		return store.CheckedClaim(r) && held[key(r.Iss, r.Digest.Alg, r.Digest.Val)]
	}, nil
}

// multiClaim returns the insert-if-absent of n records in one statement,
// returning the keys of the rows it inserted. Only the writer calls it.
func (s *DB) multiClaim(n int) string {
	if q := s.multi[n]; q != "" {
		return q
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO hops (` + hopCols + `) VALUES `)
	row := "(" + marks(hopColCount) + ")"
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
