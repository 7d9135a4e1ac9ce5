package delegate

import (
	"context"
	"errors"
	"fmt"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Cancel takes a signed "canceled" from the delegator for a recorded hop:
// it verifies it (D9), notes it, and asks the work to stop. A cancel does
// not show that the work took no effect; the hop's outcome is still
// recorded when known. Passing the cancel down the chain is the
// delegator's side (package delegator).
//
// A cancel for a hop not recorded (it overtook its offer) is held in the
// store (so a restart keeps it, and every replica sharing the store sees
// it), and the error wraps store.ErrNotFound: if the offer arrives, at any
// replica, while the cancel is held and the cancel verifies against it,
// the offer is rejected with reason "policy", recorded as canceled, and
// the work never starts. A cancel that cannot be held (its signature does
// not verify, or the held cancels are at Config.HeldCancels.Total: the
// error then wraps store.ErrHeldFull too) says "not held".
//
// hop may be "" when the caller knows only the offer's digest, which the
// status names (MCP's notifications/cancelled): the hop is the one
// claimed here lately for that digest, or found in the store by it
// (store.Store.HopOf), so a cancel reaching another replica, or this one
// after a restart, still applies (decision 66).
func (d *Delegate) Cancel(ctx context.Context, status handoff.Element, iss, hop string) (*store.Record, error) {
	var r *store.Record
	err := store.AtHop(store.ErrNotFound, iss, hop) // no hop named: nothing to read by it
	if hop != "" {
		r, err = d.cfg.Store.Get(ctx, iss, hop)
	}
	if errors.Is(err, store.ErrNotFound) {
		k, herr := d.hold(ctx, status)
		if herr != nil {
			return nil, fmt.Errorf("%w; the cancel is not held: %w", err, herr)
		}
		// The offer's claim may have committed since the read above,
		// before this cancel was held (a claim after the hold is refused
		// for it: store.Store.Claim): read again, by the hop the claim
		// noted when the caller knows only the offer's digest. Whichever
		// takes the held cancel out applies it.
		if h, ok := d.claimedHop(k.key()); ok && (hop == "" || hop == h) {
			hop = h
		}
		if hop == "" {
			// Not claimed here lately: perhaps by another replica sharing
			// the store, or before a restart. Looked up after holding, so
			// that a claim committing meanwhile either is refused for the
			// held cancel or is found here.
			h, lerr := d.cfg.Store.HopOf(ctx, k.iss, k.offer)
			switch {
			case lerr == nil:
				hop = h
			case !errors.Is(lerr, store.ErrNotFound):
				return nil, fmt.Errorf("%w; the cancel is held; finding the hop of offer %s failed: %w", err, k.offer, lerr)
			}
		}
		if hop == "" {
			return nil, fmt.Errorf("%w; the cancel is held until its offer arrives", err)
		}
		r, err = d.cfg.Store.Get(ctx, iss, hop)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w; the cancel is held until its offer arrives", err)
		}
		if err != nil {
			// The claim may have committed before the hold: the cancel,
			// whose signature verified, stops the work.
			if d.cfg.Stop != nil {
				d.cfg.Stop(iss, hop)
			}
			return nil, store.AtHop(fmt.Errorf("delegate: the cancel is held; reading the hop again: %w", err), iss, hop)
		}
		// Taken out below, once the hop is marked (so that a Receive
		// that finds it taken out reads the mark), or by Receive, which
		// applied it or dropped it as not verifying against the offer: a
		// record already canceled is left as it is; otherwise the checks
		// below tell.
		if r.Canceled {
			if r.Iss == k.iss {
				d.takeHeld(ctx, k) // a take that fails leaves it to be swept: only a new offer looks for it
			}
			return r, nil
		}
	} else if err != nil {
		return nil, err
	}
	// The cancel names the octets its delegator signed. The hop may have
	// been taken with a same-content copy of them (D5: anyone holding the
	// offer can malleate its signature), whose digest differs: a digest
	// recorded as a copy of the hop's offer names the same offer.
	named := handoff.Digest{}
	if _, cs, _ := handoff.UnsafeDecode(status); cs != nil {
		named = cs.Offer
	}
	var copyErr error
	sameOffer := func(dg handoff.Digest) bool {
		_, err := d.cfg.Store.CopyStatus(ctx, iss, r.Hop, dg)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			copyErr = err
		}
		return err == nil
	}
	vs, err := handoff.VerifyStatus(status, handoff.Element{Form: r.OfferForm, Octets: r.Offer},
		handoff.StatusOptions{Keys: d.cfg.Options.Keys, Now: d.now, Skew: d.cfg.Options.Skew, SameOffer: sameOffer})
	if err != nil && copyErr != nil {
		return nil, store.AtHop(fmt.Errorf("delegate: reading the copies of the hop's offer to check the cancel: %w", copyErr), iss, r.Hop)
	}
	if ce := (*handoff.CheckError)(nil); err != nil && errors.As(err, &ce) && ce.Member == "offer" && !named.Equal(r.Digest) {
		// The cancel names an offer this hop was not recorded with, nor
		// a copy of it seen yet: perhaps the octets its delegator signed,
		// of which only a malleated copy has arrived. Held like a cancel
		// that overtook its offer: should those octets arrive, as a
		// retransmission of this hop (seen) or as a new offer, it applies.
		if _, herr := d.hold(ctx, status); herr != nil {
			return nil, store.AtHop(fmt.Errorf("delegate: the cancel does not verify against the hop's offer: %w; it is not held: %w", err, herr), iss, hop)
		}
		return nil, store.AtHop(fmt.Errorf("delegate: the cancel names offer %s, not the offer (or a copy of it) recorded for the hop: %w; "+
			"it is held until an offer with that digest arrives: %w", named, err, store.ErrNotFound), iss, hop)
	}
	if err != nil {
		return nil, store.AtHop(fmt.Errorf("delegate: the cancel does not verify against the hop's offer: %w", err), iss, hop)
	}
	if vs.Status.State != handoff.StateCanceled {
		return nil, store.AtHop(fmt.Errorf("delegate: the status is %q, not canceled", vs.Status.State), iss, hop)
	}
	r, err = d.canceled(ctx, r)
	if err != nil {
		return nil, err
	}
	// Taken out after the mark, so that a caller that finds it held
	// finds the mark too. One held earlier, or
	// for a copy, is applied here.
	d.takeHeld(ctx, heldRef{vs.Status.Iss, vs.Status.Offer})
	return r, nil
}

// canceled notes a verified cancel on the hop recorded as r and asks its
// work to stop.
func (d *Delegate) canceled(ctx context.Context, r *store.Record) (*store.Record, error) {
	iss, hop := r.Iss, r.Hop
	if err := d.cfg.Store.MarkCanceled(ctx, iss, hop); err != nil {
		return nil, err
	}
	// Read the state after the mark: an Accept racing this cancel either
	// sees the mark (and does not start the work) or moved the hop to
	// "accepted" before this read (and the work is stopped here). If the
	// read fails, the hop may have been accepted since the first read:
	// Stop is asked unless that read found it terminal.
	now, err := d.cfg.Store.Get(ctx, iss, hop)
	if err == nil {
		r = now
	}
	if d.cfg.Stop != nil && (r.State == store.Accepted || err != nil && !r.State.Terminal()) {
		d.cfg.Stop(iss, hop)
	}
	if r.State.Terminal() {
		// "canceled" and the delegate's terminal status crossed in flight:
		// each side keeps its first terminal state; make it visible.
		// A cancel asked again is the same input: one open flag per hop
		// and state (Flag.Key), however often it is resent.
		if _, err := d.raiseFlag(ctx, store.Flag{Kind: store.FlagConflictingInputs, Iss: iss, Hop: hop, Key: "canceled after " + string(r.State),
			Detail: fmt.Sprintf("a valid cancel arrived for a hop already %s; the delegator may not have seen that status", r.State)}); err != nil {
			return nil, err
		}
	}
	r.Canceled = true
	return r, nil
}

// recordClaimed notes the hop of an offer (iss, digest dg) just claimed,
// so that a Cancel that names no hop (a host that knows only the digest
// the cancel names), held after the claim, finds the hop without a store
// read (store.Store.HopOf finds it too). Bounded: the oldest is forgotten
// first.
func (d *Delegate) recordClaimed(iss string, dg handoff.Digest, hop string) {
	k := heldKey(iss, dg)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.claimed[k]; ok {
		return
	}
	if len(d.order) < maxClaimed {
		d.order = append(d.order, k)
	} else {
		delete(d.claimed, d.order[d.next])
		d.order[d.next] = k
		d.next = (d.next + 1) % maxClaimed
	}
	d.claimed[k] = hop
}

// claimedHop returns the hop recorded by recordClaimed for key k.
func (d *Delegate) claimedHop(k string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	hop, ok := d.claimed[k]
	return hop, ok
}
