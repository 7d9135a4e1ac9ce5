package store

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"github.com/quantumlearningmachines/handoff"
)

// heldKey names a held cancel in Memory.
func heldKey(iss string, offer handoff.Digest) string {
	return strconv.Quote(iss) + " " + offer.Alg + ":" + string(offer.Val)
}

// memHeld is a held cancel and the order in which Memory held it.
type memHeld struct {
	*Held
	seq uint64
}

func cloneHeld(h *Held) *Held {
	c := *h
	c.Offer.Val = append([]byte(nil), h.Offer.Val...)
	c.Status = append([]byte(nil), h.Status...)
	return &c
}

// Hold implements HeldCancels.
func (m *Memory) Hold(_ context.Context, h *Held, lim HoldLimits) error {
	if err := checkHold(h, lim); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if m.held == nil {
		m.held = map[string]memHeld{}
	}
	m.heldSeq++
	k := heldKey(h.Iss, h.Offer)
	if _, ok := m.held[k]; ok {
		m.held[k] = memHeld{cloneHeld(h), m.heldSeq} // a replacement: the counts stay
		return nil
	}
	count := func() (all, mine int) {
		for _, o := range m.held {
			if o.Iss == h.Iss {
				mine++
			}
		}
		return len(m.held), mine
	}
	all, mine := count()
	if all >= lim.Total || mine >= lim.PerIss {
		m.sweepHeld(h.Arrived)
		all, mine = count()
	}
	for mine >= lim.PerIss {
		// The issuer's own oldest goes; never another's.
		var ok string
		var oldest memHeld
		for hk, o := range m.held {
			if o.Iss == h.Iss && (oldest.Held == nil || o.seq < oldest.seq) {
				ok, oldest = hk, o
			}
		}
		delete(m.held, ok)
		all, mine = all-1, mine-1
	}
	if all >= lim.Total {
		return HeldError(ErrHeldFull, h.Iss, h.Offer)
	}
	m.held[k] = memHeld{cloneHeld(h), m.heldSeq}
	return nil
}

// sweepHeld drops the held cancels past their KeepUntil at now; m.mu is held.
func (m *Memory) sweepHeld(now time.Time) {
	for k, o := range m.held {
		if now.After(o.KeepUntil) {
			delete(m.held, k)
		}
	}
}

// HeldFor implements HeldCancels.
func (m *Memory) HeldFor(_ context.Context, iss string, offer handoff.Digest) (*Held, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	h, ok := m.held[heldKey(iss, offer)]
	if !ok {
		return nil, HeldError(ErrNotFound, iss, offer)
	}
	return cloneHeld(h.Held), nil
}

// TakeHeld implements HeldCancels.
func (m *Memory) TakeHeld(_ context.Context, iss string, offer handoff.Digest, status []byte) (bool, error) {
	if err := m.lock(); err != nil {
		return false, err
	}
	defer m.mu.Unlock()
	k := heldKey(iss, offer)
	h, ok := m.held[k]
	if !ok || status != nil && !bytes.Equal(status, h.Status) {
		return false, nil
	}
	delete(m.held, k)
	return true, nil
}
