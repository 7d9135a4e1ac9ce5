package delegate

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Same signed content is the same offer (SPEC D5). An ECDSA signature can
// be rewritten as (r, N-s), and a COSE unprotected header edited, by
// anyone who holds an offer's octets, and every later hop holds them. Such
// a copy, or the issuer's own second signing of the same payload, is a
// retransmission of the recorded offer: the hop's record and work stay
// the first's (no equivocation mark, no Stop, no flag). It is answered,
// like any retransmission only to a sender authenticated as offer.iss,
// with the hop's current status signed again for the copy's own digest,
// so that whoever sent those octets can verify it (D9). That status is
// kept per copy (store.Copy), so every later delivery of the copy, after
// a restart or on another replica sharing the store, gets the same octets
// while the hop's status stands; once the status moves on (accepted, then
// completed), the copy's is signed again from it and replaces the old one
// (compare and swap on the status it was derived from), so a copy always
// learns the current state.

// classify makes a, and its Result, that of an offer (octets offer) whose
// (iss, hop) is recorded as r: a retransmission (the same octets, or a
// same-content copy, Result.Copy) or an equivocation. The receiver has
// classified it already against what its lookup read; the record read
// for the answer, or found by a lost claim, decides.
func classify(a *Answer, r *store.Record, offer handoff.Element) error {
	res := a.Result
	this := handoff.Seen{Digest: *res.OfferDigest}
	first := handoff.Seen{Digest: r.Digest}
	if !r.Digest.Equal(this.Digest) {
		// Only an offer with other octets needs the signed contents: the
		// recorded offer's octets are parsed again, this offer's too.
		var err error
		if first, err = store.RecordSeen(r); err != nil {
			return err
		}
		if this.Content, err = handoff.SignedContent(offer); err != nil {
			return store.AtHop(fmt.Errorf("delegate: the offer received: %w", err), r.Iss, r.Hop)
		}
	}
	res.Classify(first, this)
	a.Outcome = res.Outcome
	return nil
}

// copyTries bounds the reads and writes of one copy's status when other
// deliveries or the hop's own moves keep changing what it derives from.
const copyTries = 3

// copyStatus returns the status for the same-content copy (digest dg) of
// the offer recorded as r, which has a status: the one stored for the
// copy if it was signed from the hop's status as it stands, else one
// signed now from that status and stored (insert if absent, or in place
// of the one derived from an earlier status). Past store.MaxCopies copies
// of the hop, or when the hop keeps moving, it answers with a status
// signed now and not kept: the same state, reason and refs, only other
// octets (a flood of copies must not grow the store, and the honest
// sender still learns the hop's state).
func (d *Delegate) copyStatus(ctx context.Context, r *store.Record, dg handoff.Digest) (*handoff.Element, error) {
	full := false // the last PutCopy of a new copy lost with the hop's status unchanged
	for range copyTries {
		if r.Status == nil {
			return nil, nil // no status yet (received): nothing, as for any retransmission
		}
		var prev []byte
		c, err := d.cfg.Store.CopyStatus(ctx, r.Iss, r.Hop, dg)
		switch {
		case err == nil && bytes.Equal(c.Basis, r.Status):
			return &handoff.Element{Form: c.StatusForm, Octets: c.Status}, nil
		case err == nil:
			prev = c.Basis // derived from an earlier status: replace it
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		case full:
			// Still none, and the hop's status is as before: the bound.
			return d.resign(r, dg)
		}
		st, err := d.resign(r, dg)
		if err != nil {
			return nil, err
		}
		stored, err := d.cfg.Store.PutCopy(ctx, &store.Copy{Iss: r.Iss, Hop: r.Hop, Digest: dg, Basis: r.Status,
			Status: st.Octets, StatusForm: st.Form}, prev)
		if err != nil {
			return nil, err
		}
		if stored {
			return st, nil
		}
		// Another delivery of the copy stored first, the hop's status
		// moved, or the hop has its MaxCopies: read both again.
		now, err := d.cfg.Store.Get(ctx, r.Iss, r.Hop)
		if err != nil {
			return nil, err
		}
		full = prev == nil && bytes.Equal(now.Status, r.Status)
		r = now
	}
	if r.Status == nil {
		return nil, nil
	}
	return d.resign(r, dg)
}

// resign signs the hop's current status (r.Status, made by this delegate)
// again for the offer whose handoff digest is dg: the same iss, aud,
// state, reason, detail, refs and extra members, a new iat, in the form
// of the hop's status.
func (d *Delegate) resign(r *store.Record, dg handoff.Digest) (*handoff.Element, error) {
	_, st, err := handoff.UnsafeDecode(handoff.Element{Form: r.StatusForm, Octets: r.Status})
	if err == nil && st == nil {
		err = errors.New("it is not a status")
	}
	if err != nil {
		return nil, store.AtHop(fmt.Errorf("delegate: the recorded status cannot be read: %w", err), r.Iss, r.Hop)
	}
	c := *st
	c.Offer, c.Iat = dg, d.now().Unix()
	out, err := d.cfg.Signer.SignStatus(&c, r.StatusForm)
	if err != nil {
		return nil, store.AtHop(fmt.Errorf("delegate: signing the status for a copy of the offer: %w", err), r.Iss, r.Hop)
	}
	return &out, nil
}

// raiseFlag raises f (stamped now); its error names the hop.
func (d *Delegate) raiseFlag(ctx context.Context, f store.Flag) (int64, error) {
	f.Created = d.now()
	id, err := d.cfg.Store.Raise(ctx, f)
	if err != nil {
		return 0, store.AtHop(fmt.Errorf("delegate: raising a %s flag: %w", f.Kind, err), f.Iss, f.Hop)
	}
	return id, nil
}

// raiseKeyed is raiseDetached for a flag with a Key: at most one open
// flag per (kind, iss, hop, key).
func (d *Delegate) raiseKeyed(ctx context.Context, kind, iss, hop, key, detail string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reread)
	defer cancel()
	_, err := d.raiseFlag(rctx, store.Flag{Kind: kind, Iss: iss, Hop: hop, Key: key, Detail: detail})
	return err
}
