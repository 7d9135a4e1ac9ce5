package store

import (
	"context"
	"errors"
	"fmt"
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

func (r replay) Lookup(ctx context.Context, iss, hop string) (handoff.Seen, bool, error) {
	rec, err := r.s.Get(ctx, iss, hop)
	if errors.Is(err, ErrNotFound) {
		return handoff.Seen{}, false, nil
	}
	if err != nil {
		return handoff.Seen{}, false, err
	}
	seen, err := RecordSeen(rec)
	return seen, err == nil, err
}

func (r replay) Remember(ctx context.Context, iss, hop string, offer handoff.Element, seen handoff.Seen, keepUntil time.Time) (handoff.Seen, bool, error) {
	rec, stored, err := r.s.Claim(ctx, &Record{Iss: iss, Hop: hop, Digest: seen.Digest, Offer: offer.Octets,
		OfferForm: offer.Form, State: Received, Received: r.now(), KeepUntil: keepUntil})
	if err != nil {
		return handoff.Seen{}, false, err
	}
	if stored {
		return seen, true, nil
	}
	first, err := RecordSeen(rec)
	return first, false, err
}

// RecordSeen is what a record tells a receiver of its hop's first offer
// (handoff.ReplayMemory): its digest, and its signed content digest (D5),
// derived from the octets the record keeps (no column of its own: only a
// second offer for a recorded hop needs it).
func RecordSeen(r *Record) (handoff.Seen, error) {
	c, err := handoff.SignedContent(handoff.Element{Form: r.OfferForm, Octets: r.Offer})
	if err != nil {
		return handoff.Seen{}, AtHop(fmt.Errorf("store: the recorded offer: %w", err), r.Iss, r.Hop)
	}
	return handoff.Seen{Digest: r.Digest, Content: c}, nil
}
