package store

import (
	"context"
	"errors"
	"time"

	"github.com/quantumlearningmachines/handoff"
)

// Replay adapts a Store to handoff.ReplayMemory for a receiver that only
// checks (it sends no statuses): a remembered offer is claimed "received"
// with its octets, so that separate runs sharing the store detect
// retransmission and equivocation. A delegate that answers uses package
// delegate instead, which records its decision and status with the claim.
func Replay(s Store, now func() time.Time) handoff.ReplayMemory {
	if now == nil {
		now = time.Now
	}
	return replay{s, now}
}

type replay struct {
	s   Store
	now func() time.Time
}

func (r replay) Lookup(ctx context.Context, iss, hop string) (handoff.Digest, bool, error) {
	rec, err := r.s.Get(ctx, iss, hop)
	if errors.Is(err, ErrNotFound) {
		return handoff.Digest{}, false, nil
	}
	if err != nil {
		return handoff.Digest{}, false, err
	}
	return rec.Digest, true, nil
}

func (r replay) Remember(ctx context.Context, iss, hop string, offer handoff.Element, digest handoff.Digest, keepUntil time.Time) (handoff.Digest, bool, error) {
	rec, stored, err := r.s.Claim(ctx, &Record{Iss: iss, Hop: hop, Digest: digest, Offer: offer.Octets,
		OfferForm: offer.Form, State: Received, Received: r.now(), KeepUntil: keepUntil})
	if err != nil {
		return handoff.Digest{}, false, err
	}
	return rec.Digest, stored, nil
}
