package store

import (
	"bytes"
	"context"

	"github.com/quantumlearningmachines/handoff"
)

// Copy is the status a delegate signed for a same-content copy of a hop's
// offer (SPEC D5): octets other than the recorded offer's (a malleated
// ECDSA signature, an edited COSE unprotected header, the issuer's own
// second signing of the same payload) that verify as the same offer. The
// hop's record and work stay the first offer's; the copy's sender gets
// the hop's current status signed again with offer = the copy's own
// digest, so that it verifies against the octets it sent (D9). It is kept
// so that every later delivery of that copy, after a restart or on
// another replica, gets the same octets while the hop's status stands.
type Copy struct {
	Iss, Hop string
	Digest   handoff.Digest // the copy's own handoff digest
	// Basis is the octets of the hop's status (Record.Status) that Status
	// was signed from: when the hop's status moves on (accepted, then
	// completed), the copy's is signed again and replaces this one.
	Basis      []byte
	Status     []byte
	StatusForm handoff.Form
}

// MaxCopies bounds the copies' statuses a store keeps per hop. Anyone who
// holds an offer's octets can make new copies without the key (every
// unprotected header is one), so their number is the sender's choice; a
// copy past the bound is still answered, with a status signed for it
// afresh each time and not kept (the same state, only other octets).
const MaxCopies = 16

func cloneCopy(c *Copy) *Copy {
	o := *c
	o.Digest.Val = bytes.Clone(c.Digest.Val)
	o.Basis = bytes.Clone(c.Basis)
	o.Status = bytes.Clone(c.Status)
	return &o
}

// CopyStatus implements Store.
func (m *Memory) CopyStatus(_ context.Context, iss, hop string, d handoff.Digest) (*Copy, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	c, ok := m.copies[[2]string{iss, hop}][copyKey(d)]
	if !ok {
		return nil, AtHop(ErrNotFound, iss, hop)
	}
	return cloneCopy(c), nil
}

// HopOf implements Store. The memory store reads every record: it has no
// index by digest, and a cancel that names only its offer is rare.
func (m *Memory) HopOf(_ context.Context, iss string, d handoff.Digest) (string, error) {
	if err := m.lock(); err != nil {
		return "", err
	}
	defer m.mu.Unlock()
	for k, r := range m.hops {
		if k[0] == iss && r.Digest.Equal(d) {
			return k[1], nil
		}
	}
	for k, cs := range m.copies {
		if _, ok := cs[copyKey(d)]; ok && k[0] == iss {
			return k[1], nil
		}
	}
	return "", ErrNotFound
}

// PutCopy implements Store.
func (m *Memory) PutCopy(_ context.Context, c *Copy, prev []byte) (bool, error) {
	if err := m.lock(); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	k := [2]string{c.Iss, c.Hop}
	r, ok := m.hops[k]
	if !ok || r.Status == nil || !bytes.Equal(r.Status, c.Basis) {
		return false, nil
	}
	cs := m.copies[k]
	old, ok := cs[copyKey(c.Digest)]
	switch {
	case prev == nil && (ok || len(cs) >= MaxCopies):
		return false, nil
	case prev != nil && (!ok || !bytes.Equal(old.Basis, prev)):
		return false, nil
	}
	if cs == nil {
		if m.copies == nil {
			m.copies = map[[2]string]map[string]*Copy{}
		}
		cs = map[string]*Copy{}
		m.copies[k] = cs
	}
	cs[copyKey(c.Digest)] = cloneCopy(c)
	return true, nil
}

func copyKey(d handoff.Digest) string { return d.Alg + ":" + string(d.Val) }
