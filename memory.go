package handoff

import (
	"context"
	"strings"
	"sync"
	"time"
)

// ReplayMemory remembers, for each (iss, hop) that passed steps 1-3, the
// handoff digest and the signed content digest of the first offer seen
// (draft "Freshness and Replay", D5). A durable hop store implements it so
// that the memory survives a restart.
type ReplayMemory interface {
	// Lookup returns what is remembered for (iss, hop), if anything.
	Lookup(ctx context.Context, iss, hop string) (Seen, bool, error)
	// Remember stores seen for (iss, hop) unless the pair is already
	// remembered, atomically: of two callers racing on one pair, exactly
	// one stores. It returns what is now remembered and whether this call
	// stored it. keepUntil is the earliest time the pair may be forgotten
	// (exp plus skew at least). offer is the signed offer as received, for
	// stores that keep its octets (such a store may derive Seen.Content
	// from the octets it holds, see SignedContent), and seen its digests,
	// which the receiver has computed already (hashing the octets again
	// would cost about 1% of a verification). A memory that refuses to
	// remember the offer (its own local policy: the delegate's
	// SenderMustBeIss, say) returns a *CheckError, unwrapped, with a
	// rejection's Reason (not empty, not equivocation): the offer is then
	// rejected at step 4 with that reason, member and cause, and steps
	// 5-7 do not run. Any other error ends the receive with it.
	Remember(ctx context.Context, iss, hop string, offer Element, seen Seen, keepUntil time.Time) (Seen, bool, error)
}

// Seen is what a ReplayMemory keeps of the first offer for an (iss, hop):
// its handoff digest, and its signed content digest (SignedContent), which
// tells a same-content copy (a retransmission, D5) from equivocation.
type Seen struct {
	Digest  Digest
	Content Digest
}

// Memory is an in-process ReplayMemory. Entries are forgotten once their
// keepUntil has passed, so its size is bounded by the offers of one
// maximum lifetime.
type Memory struct {
	mu      sync.Mutex
	now     func() time.Time
	entries map[memKey]memEntry
	inserts int
}

type memKey struct{ iss, hop string }

type memEntry struct {
	s     Seen
	until time.Time
}

// NewMemory returns an empty in-process replay memory. now may be nil for
// time.Now.
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, entries: map[memKey]memEntry{}}
}

// Lookup implements ReplayMemory.
func (m *Memory) Lookup(_ context.Context, iss, hop string) (Seen, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[memKey{iss, hop}]
	return e.s, ok, nil
}

// Remember implements ReplayMemory.
func (m *Memory) Remember(_ context.Context, iss, hop string, _ Element, s Seen, keepUntil time.Time) (Seen, bool, error) {
	// The caller's Result holds the same slices: one allocation for both.
	buf := make([]byte, len(s.Digest.Val)+len(s.Content.Val))
	n := copy(buf, s.Digest.Val)
	copy(buf[n:], s.Content.Val)
	s.Digest.Val, s.Content.Val = buf[:n:n], buf[n:]
	m.mu.Lock()
	defer m.mu.Unlock()
	k := memKey{iss, hop}
	if e, ok := m.entries[k]; ok {
		return e.s, false, nil
	}
	// iss and hop may be texts of the decoded payload, whose buffer is the
	// whole payload: a copy keeps a remembered pair to its own octets
	// (issue 19: bytes per remembered hop).
	k = memKey{strings.Clone(iss), strings.Clone(hop)}
	m.entries[k] = memEntry{s: s, until: keepUntil}
	if m.inserts++; m.inserts >= 1024 && m.inserts >= len(m.entries)/2 {
		m.sweep()
	}
	return s, true, nil
}

// sweep drops entries past their keepUntil; amortized over inserts.
func (m *Memory) sweep() {
	now := m.now()
	for k, e := range m.entries {
		if now.After(e.until) {
			delete(m.entries, k)
		}
	}
	m.inserts = 0
}

// Len returns the number of remembered pairs.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}
