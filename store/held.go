package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff"
)

// Held is a "canceled" status that arrived before its offer (draft
// "Lifecycle": offered -> canceled). Only its signature can be checked
// before the offer arrives (D9 binds the offer's digest and parties), so
// the delegate keeps it, bounded and for a limited time, in the store: a
// restart keeps it, and every replica sharing the store sees it.
//
// It is named by (Iss, Offer): the status's iss and the offer digest it
// names. By the digest alone, a cancel from another trusted issuer naming
// the same offer would replace the delegator's own; only the one whose iss
// is the offer's iss can verify against it.
type Held struct {
	Iss       string         // the status's iss
	Offer     handoff.Digest // the offer digest the status names
	Status    []byte         // the status's signed octets, exactly as received
	Form      handoff.Form
	Arrived   time.Time // when it was held
	KeepUntil time.Time // kept until then at least (unless its iss's quota pushes it out); swept after
}

// HoldLimits bound the held cancels (see HeldCancels.Hold).
type HoldLimits struct {
	Total  int // held in all
	PerIss int // held per status iss
}

// ErrHeldFull: a cancel was not held because the store holds Total
// cancels that have not expired. Cancels of other issuers are never
// pushed out to make room, so a flood from one trusted issuer (or many)
// cannot make another's early cancel silently vanish; the refused cancel
// is reported to its sender instead.
var ErrHeldFull = errors.New("store: the held cancels are at their bound")

// HeldCancels keeps the cancels that overtook their offers. It is part of
// Store.
type HeldCancels interface {
	// Hold keeps h, replacing a cancel held under the same (Iss, Offer).
	// The cancels past their KeepUntil at h.Arrived go first when a bound
	// is reached. When h.Iss holds lim.PerIss cancels, its own oldest (the
	// first this store held, a replacement counting as held anew) is
	// pushed out; when the store holds lim.Total, h is refused
	// with ErrHeldFull and nothing else changes. Bounds are checked and the
	// row written atomically, also across processes sharing the store.
	Hold(ctx context.Context, h *Held, lim HoldLimits) error
	// HeldFor returns the cancel held under (iss, offer), expired or not
	// (the caller judges with its own clock), or ErrNotFound.
	HeldFor(ctx context.Context, iss string, offer handoff.Digest) (*Held, error)
	// TakeHeld removes the cancel held under (iss, offer) and reports
	// whether this call removed it: of callers racing on one held cancel,
	// on one store or many processes sharing it, exactly one gets true.
	// With status non-nil only a cancel with exactly those octets is
	// removed (so a caller dropping the copy it judged never removes a
	// newer one held since).
	TakeHeld(ctx context.Context, iss string, offer handoff.Digest, status []byte) (bool, error)
}

// checkHold checks what every store requires of Hold's arguments.
func checkHold(h *Held, lim HoldLimits) error {
	if h.Iss == "" || h.Offer.Alg == "" || len(h.Offer.Val) == 0 || len(h.Status) == 0 {
		return errors.New("store: a held cancel needs its iss, the offer digest it names and its octets")
	}
	if h.Arrived.IsZero() || h.KeepUntil.IsZero() {
		return fmt.Errorf("store: held cancel of %q: its arrival and keep-until times are required", h.Iss)
	}
	if lim.Total <= 0 || lim.PerIss <= 0 {
		return fmt.Errorf("store: held cancels: the bounds must be positive, not total %d and per iss %d", lim.Total, lim.PerIss)
	}
	return nil
}

// CheckHold is checkHold for the SQL stores.
func CheckHold(h *Held, lim HoldLimits) error { return checkHold(h, lim) }

// HeldError says which held cancel err is about.
func HeldError(err error, iss string, offer handoff.Digest) error {
	return fmt.Errorf("%w (cancel held from %q for offer %s:%s)", err, iss, offer.Alg, offer)
}
