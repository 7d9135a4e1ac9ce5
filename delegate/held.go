package delegate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Cancels that overtake their offers. Only a cancel's signature can be
// checked before its offer arrives (D9 binds the offer's digest and
// parties), so it is held, bounded and for a limited time, in the store
// (store.HeldCancels): a restart keeps it, and every replica sharing the
// store finds it when the offer reaches that replica.

// The default bounds of the held cancels (Config.HeldCancels): one
// (trusted, but flooding) delegator pushes out only its own oldest at
// DefaultMaxHeldPerIss, and at DefaultMaxHeld a new cancel is refused
// (reported to its sender) rather than another issuer's pushed out.
const (
	DefaultMaxHeld       = 4096
	DefaultMaxHeldPerIss = 256
)

// heldRef names a held cancel: its iss and the offer digest it names.
type heldRef struct {
	iss   string
	offer handoff.Digest
}

// key is heldKey of r, for the process's own maps.
func (r heldRef) key() string { return heldKey(r.iss, r.offer) }

// heldKey names an offer (iss, digest) in the process's own maps: by the
// digest alone, another trusted issuer naming the same offer would share
// the entry.
func heldKey(iss string, offer handoff.Digest) string {
	return strconv.Quote(iss) + " " + offer.Alg + ":" + offer.String()
}

// hold keeps a cancel for an offer not yet received, until that offer
// would be stale anyway. Only a cancel whose signature verifies with a
// key bound to its iss is held (the rest of D9 waits for the offer),
// within Config.HeldCancels (see store.HeldCancels.Hold: the expired go
// first, then that iss's own oldest; at the total bound it is refused).
// It returns the held cancel's name, or why it is not held.
func (d *Delegate) hold(ctx context.Context, status handoff.Element) (heldRef, error) {
	_, st, err := handoff.UnsafeDecode(status)
	if err != nil || st == nil || st.State != handoff.StateCanceled {
		return heldRef{}, fmt.Errorf("not a canceled status: %v", err)
	}
	if _, err := handoff.VerifyElement(status, d.cfg.Options.Keys); err != nil {
		return heldRef{}, err
	}
	life := d.cfg.Options.MaxLifetime
	if life <= 0 {
		life = 300 * time.Second
	}
	now := d.now()
	k := heldRef{st.Iss, st.Offer}
	h := &store.Held{Iss: st.Iss, Offer: st.Offer, Status: status.Octets, Form: status.Form,
		Arrived: now, KeepUntil: now.Add(life + 2*d.skew())}
	if err := d.cfg.Store.Hold(ctx, h, d.cfg.HeldCancels); err != nil {
		return heldRef{}, err
	}
	return k, nil
}

// heldFor looks in the store for a held cancel from iss, the offer's iss,
// that verifies against offer (D9: signed by offer.iss, addressed to
// offer.aud, naming this offer, whose handoff digest is dg). It returns
// its name and whether there is one, and leaves it held: it is taken out
// (takeHeld) only once the hop's record says so, so that a claim that
// fails, or an offer delivered twice at once (to one replica or two),
// does not lose it. One that has expired or does not verify is dropped
// (that copy only: a newer one held since stays). An error reading the
// store is returned: whether a cancel is held is then not known.
func (d *Delegate) heldFor(ctx context.Context, iss string, offer handoff.Element, dg handoff.Digest) (heldRef, bool, error) {
	k := heldRef{iss, dg}
	h, err := d.cfg.Store.HeldFor(ctx, iss, dg)
	if errors.Is(err, store.ErrNotFound) {
		return k, false, nil
	}
	if err != nil {
		return k, false, fmt.Errorf("delegate: looking for a cancel held for offer %s of %q: %w", dg, iss, err)
	}
	if !d.now().After(h.KeepUntil) {
		vs, err := handoff.VerifyStatus(handoff.Element{Form: h.Form, Octets: h.Status}, offer,
			handoff.StatusOptions{Keys: d.cfg.Options.Keys, Now: d.now, Skew: d.cfg.Options.Skew})
		if err == nil && vs.Status.State == handoff.StateCanceled {
			return k, true, nil
		}
	}
	// Dropped on a best effort: left behind, it is swept at its keep-until
	// and found (and dropped) again by the next look.
	d.cfg.Store.TakeHeld(ctx, iss, dg, h.Status)
	return k, false, nil
}

// takeHeld takes the cancel held under k out of the store, and reports
// whether this call did: of the callers racing on one held cancel, in
// this process or another sharing the store, exactly one applies it.
func (d *Delegate) takeHeld(ctx context.Context, k heldRef) (bool, error) {
	return d.cfg.Store.TakeHeld(ctx, k.iss, k.offer, nil)
}

// heldForCopy applies a cancel held for the digest of offer, a
// same-content copy of the offer the hop is recorded with as r (D5: the
// same offer): the cancel verifies against the copy's own octets. The
// record, canceled or not, is left in a.Record.
func (d *Delegate) heldForCopy(ctx context.Context, a *Answer, r *store.Record, offer handoff.Element) error {
	k, found, err := d.heldFor(ctx, r.Iss, offer, *a.Result.OfferDigest)
	if err != nil || !found {
		return err
	}
	if took, err := d.takeHeld(ctx, k); err == nil && !took {
		return nil // another caller took it, and applies it
	}
	r, err = d.canceled(ctx, r)
	if err != nil {
		return err
	}
	a.Record = r
	return nil
}
