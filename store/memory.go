package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/quantumlearningmachines/handoff"
)

// Memory is a Store in process memory: for tests, and for a delegate that
// has no durable state (its Since is its start, so after a restart the
// delegate rejects earlier offers as "replay").
type Memory struct {
	mu     sync.Mutex
	hops   map[[2]string]*Record
	issued map[string]*Issued
	flags  []Flag // by ID, ascending
	nextID int64
	since  time.Time
	closed bool
	// held: the held cancels by heldKey, and the last order number given
	// (memory_held.go).
	held    map[string]memHeld
	heldSeq uint64

	// The statuses of same-content copies (copies.go), by hop, then by
	// the copy's digest.
	copies map[[2]string]map[string]*Copy
}

// NewMemory returns an empty store whose memory begins at now: a
// delegate on it refuses, as a possible replay, an offer issued up to
// that second that it has no record of (draft "Replay and Freshness").
// Give the time this delegate's memory really began: a process that has
// taken no offer before it started may give its own start.
func NewMemory(now time.Time) *Memory {
	return &Memory{hops: map[[2]string]*Record{}, issued: map[string]*Issued{}, since: now}
}

// NewFirstMemory returns an empty store that follows no earlier memory:
// its Since is the zero time, so a delegate on it refuses no offer under
// the restart rule, not even one signed in the second it was made. That
// is true only where no earlier memory of this delegate took an offer
// its trust verifies now: a test, an example whose keys are made as it
// starts, the first run of a new AgentId. A process that restarts with a
// NewFirstMemory may take a replayed offer twice; give it NewMemory with
// its start instead. (Forget begins a new memory, and the rule, as ever.)
func NewFirstMemory() *Memory { return NewMemory(time.Time{}) }

func clone(r *Record) *Record {
	c := *r
	c.Offer = append([]byte(nil), r.Offer...)
	c.Chain, c.ChainForms = cloneChain(r.Chain), slices.Clone(r.ChainForms)
	if r.Status != nil {
		c.Status = append([]byte(nil), r.Status...)
	}
	if r.Earlier != nil {
		c.Earlier = append([]byte(nil), r.Earlier...)
	}
	c.Digest.Val = append([]byte(nil), r.Digest.Val...)
	return &c
}

func (m *Memory) lock() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Claim implements Store.
func (m *Memory) Claim(_ context.Context, r *Record) (*Record, bool, error) {
	if err := CheckClaim(r); err != nil {
		return nil, false, err
	}
	if err := m.lock(); err != nil {
		return nil, false, err
	}
	defer m.mu.Unlock()
	k := [2]string{r.Iss, r.Hop}
	if old, ok := m.hops[k]; ok {
		return clone(old), false, nil
	}
	if _, held := m.held[heldKey(r.Iss, r.Digest)]; held && CheckedClaim(r) {
		return nil, false, AtHop(ErrCancelHeld, r.Iss, r.Hop)
	}
	m.hops[k] = clone(r)
	return clone(r), true, nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, iss, hop string) (*Record, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	r, ok := m.hops[[2]string{iss, hop}]
	if !ok {
		return nil, AtHop(ErrNotFound, iss, hop)
	}
	return clone(r), nil
}

// List implements Store.
func (m *Memory) List(_ context.Context, q HopQuery) ([]*Record, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	flagged := map[[2]string]bool{}
	for _, f := range m.flags {
		if f.Resolved.IsZero() {
			flagged[[2]string{f.Iss, f.Hop}] = true
		}
	}
	var out []*Record
	for k, r := range m.hops {
		if q.Matches(r, flagged[k]) && (q.After == nil || q.After.Before(*r.Cursor())) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cursor().Before(*out[j].Cursor()) })
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	for i, r := range out {
		out[i] = clone(r)
	}
	return out, nil
}

// Transition implements Store.
func (m *Memory) Transition(_ context.Context, mv Move) error {
	iss, hop, from, to := mv.Iss, mv.Hop, mv.From, mv.To
	if !CanMove(from, to) {
		return AtHop(fmt.Errorf("%w: the lifecycle does not allow %s -> %s", ErrConflict, from, to), iss, hop)
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	r, ok := m.hops[[2]string{iss, hop}]
	if !ok {
		return AtHop(ErrNotFound, iss, hop)
	}
	if r.State != from {
		return AtHop(fmt.Errorf("%w: hop is %s, not %s", ErrConflict, r.State, from), iss, hop)
	}
	if !mv.Mark.Meets(r.Equivocated) {
		return AtHop(fmt.Errorf("%w: hop's equivocated mark is %v, not %v", ErrConflict, r.Equivocated, !r.Equivocated), iss, hop)
	}
	r.Apply(mv)
	return nil
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, iss, hop string, now time.Time) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	r, ok := m.hops[[2]string{iss, hop}]
	if !ok {
		return AtHop(ErrNotFound, iss, hop)
	}
	if r.State != Accepted || !r.Released.IsZero() {
		return AtHop(fmt.Errorf("%w: only an accepted hop not yet released can be released; hop is %s (released %v)", ErrConflict, r.State, !r.Released.IsZero()), iss, hop)
	}
	r.Released = now
	return nil
}

// MarkCanceled implements Store.
func (m *Memory) MarkCanceled(_ context.Context, iss, hop string) error {
	return m.mark(iss, hop, func(r *Record) { r.Canceled = true })
}

// MarkEquivocated implements Store.
func (m *Memory) MarkEquivocated(_ context.Context, iss, hop string) error {
	return m.mark(iss, hop, func(r *Record) { r.Equivocated = true })
}

func (m *Memory) mark(iss, hop string, set func(*Record)) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	r, ok := m.hops[[2]string{iss, hop}]
	if !ok {
		return AtHop(ErrNotFound, iss, hop)
	}
	set(r)
	return nil
}

// Raise implements Store.
func (m *Memory) Raise(_ context.Context, f Flag) (int64, error) {
	if err := m.lock(); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	if f.Key != "" {
		for _, o := range m.flags {
			if o.Resolved.IsZero() && o.Kind == f.Kind && o.Iss == f.Iss && o.Hop == f.Hop && o.Key == f.Key {
				return o.ID, nil // already open (Flag.Key)
			}
		}
	}
	m.nextID++
	f.ID = m.nextID
	f.Resolved, f.Resolution = time.Time{}, ""
	m.flags = append(m.flags, f)
	return f.ID, nil
}

// Flags implements Store.
func (m *Memory) Flags(_ context.Context, all bool) ([]Flag, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []Flag
	for _, f := range m.flags {
		if all || f.Resolved.IsZero() {
			out = append(out, f)
		}
	}
	return out, nil
}

// ListFlags implements Store.
func (m *Memory) ListFlags(_ context.Context, q FlagQuery) ([]Flag, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []Flag
	for i := len(m.flags) - 1; i >= 0 && len(out) < q.Limit; i-- {
		f := m.flags[i]
		if (q.Before == 0 || f.ID < q.Before) && q.Matches(f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// CountOpenFlags implements Store.
func (m *Memory) CountOpenFlags(_ context.Context, max int) (int, error) {
	if err := m.lock(); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	n := 0
	for _, f := range m.flags {
		if n >= max {
			break
		}
		if f.Resolved.IsZero() {
			n++
		}
	}
	return n, nil
}

// Resolve implements Store.
func (m *Memory) Resolve(_ context.Context, id int64, resolution string, now time.Time) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	i, ok := sort.Find(len(m.flags), func(i int) int { return cmp.Compare(id, m.flags[i].ID) })
	if !ok {
		return fmt.Errorf("%w: no flag %d is open (there is none with this id)", ErrConflict, id)
	}
	f := &m.flags[i]
	if !f.Resolved.IsZero() {
		return fmt.Errorf("%w: no flag %d is open (it is resolved already)", ErrConflict, id)
	}
	f.Resolved, f.Resolution = now, resolution
	return nil
}

// Sweep implements Store.
func (m *Memory) Sweep(_ context.Context, now time.Time, retention time.Duration) (int, error) {
	if err := m.lock(); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	n := 0
	for k, r := range m.hops {
		if mayGo(r, now, retention) {
			delete(m.hops, k)
			delete(m.copies, k)
			n++
		}
	}
	m.flags = slices.DeleteFunc(m.flags, func(f Flag) bool { return flagMayGo(f, now, retention) })
	m.sweepHeld(now)
	return n, nil
}

// flagMayGo: a resolved flag is kept for the retention period after its
// resolution (draft "Kept Records"); an open one until it is resolved.
func flagMayGo(f Flag, now time.Time, retention time.Duration) bool {
	return !f.Resolved.IsZero() && now.After(f.Resolved.Add(retention))
}

// mayGo is the retention rule every store applies (draft "Freshness and
// Replay", "Kept Records").
func mayGo(r *Record, now time.Time, retention time.Duration) bool {
	if !now.After(r.KeepUntil) {
		return false
	}
	switch {
	case r.State.Terminal():
		return now.After(r.Decided.Add(retention))
	case r.State == Received:
		return true
	case r.State == Accepted && !r.Released.IsZero():
		return now.After(r.Released.Add(retention))
	}
	return false // Accepted: kept until the outcome is known or the operator releases it
}

// Since implements Store.
func (m *Memory) Since(context.Context) (time.Time, error) {
	if err := m.lock(); err != nil {
		return time.Time{}, err
	}
	defer m.mu.Unlock()
	return m.since, nil
}

// Forget implements Store.
func (m *Memory) Forget(_ context.Context, now time.Time) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.hops = map[[2]string]*Record{}
	m.copies = nil
	m.since = now
	return nil
}

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// Len returns the number of hop records.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.hops)
}

func cloneIssued(h *Issued) *Issued {
	c := *h
	c.Offer = append([]byte(nil), h.Offer...)
	c.Digest.Val = append([]byte(nil), h.Digest.Val...)
	if h.Status != nil {
		c.Status = append([]byte(nil), h.Status...)
	}
	if h.Prev != nil {
		c.Prev = &handoff.Digest{Alg: h.Prev.Alg, Val: append([]byte(nil), h.Prev.Val...)}
	}
	return &c
}

// Issue implements Tracker.
func (m *Memory) Issue(_ context.Context, h *Issued, safeTwice bool) error {
	if err := checkIssue(h); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if _, ok := m.issued[h.Hop]; ok {
		return fmt.Errorf("store: hop %s was already issued", h.Hop)
	}
	if !safeTwice {
		for _, o := range m.issued {
			if o.Work == h.Work && !o.Resolved {
				return fmt.Errorf("%w: hop %s", ErrUnresolvedWork, o.Hop)
			}
		}
	}
	m.issued[h.Hop] = cloneIssued(h)
	return nil
}

func checkIssue(h *Issued) error {
	if h.Hop == "" || h.Aud == "" || h.Work == "" || len(h.Offer) == 0 || len(h.Digest.Val) == 0 || h.View != Offered {
		return fmt.Errorf("store: an issued hop needs hop, aud, work, the offer and its digest, in view offered")
	}
	return nil
}

// IssuedHop implements Tracker.
func (m *Memory) IssuedHop(_ context.Context, hop string) (*Issued, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	h, ok := m.issued[hop]
	if !ok {
		return nil, ErrNotFound
	}
	return cloneIssued(h), nil
}

// SetView implements Tracker.
func (m *Memory) SetView(_ context.Context, hop string, from, to View, resolved bool, status []byte, form handoff.Form) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	h, ok := m.issued[hop]
	if !ok {
		return ErrNotFound
	}
	if h.View != from {
		return fmt.Errorf("%w: hop is %s, not %s", ErrConflict, h.View, from)
	}
	h.View, h.Resolved = to, h.Resolved || resolved
	if status != nil {
		h.Status, h.StatusForm = append([]byte(nil), status...), form
	}
	if h.Resolved {
		h.NextAsk = time.Time{}
	}
	return nil
}

// ResolveHop implements Tracker.
func (m *Memory) ResolveHop(_ context.Context, hop string) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	h, ok := m.issued[hop]
	if !ok {
		return ErrNotFound
	}
	h.Resolved, h.NextAsk = true, time.Time{}
	return nil
}

// SetAsk implements Tracker.
func (m *Memory) SetAsk(_ context.Context, hop string, attempts int, next time.Time) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	h, ok := m.issued[hop]
	if !ok {
		return ErrNotFound
	}
	h.Attempts, h.NextAsk = attempts, next
	return nil
}

// ByPrev implements Tracker.
func (m *Memory) ByPrev(_ context.Context, d handoff.Digest) ([]*Issued, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []*Issued
	for _, h := range m.issued {
		if h.Prev != nil && h.Prev.Equal(d) {
			out = append(out, cloneIssued(h))
		}
	}
	sortIssued(out)
	return out, nil
}

// Due implements Tracker.
func (m *Memory) Due(_ context.Context, now time.Time) ([]*Issued, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []*Issued
	for _, h := range m.issued {
		if !h.Resolved && !h.NextAsk.IsZero() && !h.NextAsk.After(now) {
			out = append(out, cloneIssued(h))
		}
	}
	sortIssued(out)
	return out, nil
}

// ListIssued implements Tracker.
func (m *Memory) ListIssued(_ context.Context, q IssuedQuery) ([]*Issued, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []*Issued
	for _, h := range m.issued {
		if q.Matches(h) && (q.After == nil || q.After.Before(*h.Cursor())) {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cursor().Before(*out[j].Cursor()) })
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	for i, h := range out {
		out[i] = cloneIssued(h)
	}
	return out, nil
}

func sortIssued(hs []*Issued) {
	sort.Slice(hs, func(i, j int) bool {
		if !hs[i].Created.Equal(hs[j].Created) {
			return hs[i].Created.Before(hs[j].Created)
		}
		return hs[i].Hop < hs[j].Hop
	})
}

var _ Tracker = (*Memory)(nil)
