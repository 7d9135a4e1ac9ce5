package delegate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Answer is what became of a received Handoff and what to send back.
type Answer struct {
	// Outcome, Reason and Err are the answer's final word: the receiver's
	// verdict (including the step-4 refusal of a new hop from a sender not
	// authenticated as its iss, Config.SenderMustBeIss: Err wraps
	// ErrSenderNotIss), or the delegate's own refusal (rejected, policy)
	// of an offer that passed the checks but that the delegator had
	// canceled before its work could begin. Result, the receiver's
	// verdict, is never rewritten.
	Outcome handoff.Outcome
	Reason  handoff.Reason // "" unless rejected or equivocated
	Err     error          // a *handoff.CheckError for a rejection or an equivocation, else nil
	Result  *handoff.Result
	// Status is the signed status to send to the delegator, or nil to send
	// nothing: an equivocating offer, a retransmission whose sender the
	// host protocol did not authenticate as offer.iss, a hop not yet
	// decided, a rejection that cannot be addressed (step 1), or the
	// refusal of a sender (Config.SenderMustBeIss). For a
	// same-content copy of the recorded offer (Result.Copy, SPEC D5) it is
	// the hop's current status signed for the copy's own digest.
	Status *handoff.Element
	// Take: this call took the work; do it exactly once, then Finish.
	Take     bool
	Iss, Hop string        // the hop, when the offer's payload was verified
	Record   *store.Record // the hop's record after this call, if any (its Chain may alias the octets received: see ParseHandoff)
}

// Receive checks a Handoff and records the decision before returning, so
// that a status (or the work) only leaves after the record it depends on
// is durable. sender is the AgentId the host protocol authenticated as the
// sender of this request, or "" when it authenticated none: a resent
// status goes only to a sender that is the verified offer's iss (draft
// "Replay and Freshness"). The delegate compares the two itself, after
// verifying, so that a caller never reads the unverified offer to ask.
func (d *Delegate) Receive(ctx context.Context, b []byte, dialog, sender string) (*Answer, error) {
	h, err := d.ParseHandoff(b)
	return d.ReceiveParsed(ctx, h, err, dialog, sender)
}

// ParseHandoff is handoff.ParseHandoff under the delegate's Limits, as its
// receiver reads it (handoff.Receiver.ParseHandoff): with a ChainCache, a
// chain the cache holds whole is not read again. A carrier that reads a
// request's Handoff to route it reads it with this, then passes it to
// ReceiveParsed. A chain read from the cache so keeps its octets in b
// (handoff.ParseHandoff copies them), and so do the Answer's Result and
// Record: keep b unchanged while they are in use; Receive is the same.
func (d *Delegate) ParseHandoff(b []byte) (*handoff.Handoff, error) {
	return d.recv.Load().ParseHandoff(b)
}

// ReceiveParsed is Receive for a Handoff the caller has already decoded
// with ParseHandoff or handoff.ParseHandoff (h and parseErr exactly as it
// returned them), so that a carrier decodes a request's Handoff once
// (handoff.Receiver.ReceiveParsed).
func (d *Delegate) ReceiveParsed(ctx context.Context, h *handoff.Handoff, parseErr error, dialog, sender string) (*Answer, error) {
	if d.cfg.OnAnswer == nil {
		return d.receiveParsed(ctx, h, parseErr, dialog, sender)
	}
	start := time.Now()
	a, err := d.receiveParsed(ctx, h, parseErr, dialog, sender)
	if err == nil && a != nil {
		d.cfg.OnAnswer(ctx, a, time.Since(start))
	}
	return a, err
}

func (d *Delegate) receiveParsed(ctx context.Context, h *handoff.Handoff, parseErr error, dialog, sender string) (*Answer, error) {
	held := &readHolder{chain: h != nil && len(h.Chain) > 0, sender: sender, mustBeIss: d.cfg.SenderMustBeIss} // see lookupOnly
	res, err := d.recv.Load().ReceiveParsed(context.WithValue(ctx, costlyLater{}, held), h, parseErr, dialog)
	if res == nil {
		return nil, err
	}
	a := &Answer{Outcome: res.Outcome, Reason: res.Reason, Result: res}
	if res.Err != nil {
		a.Err = res.Err
	}
	if res.Offer == nil {
		// Step 1 failed: nothing verified to answer to.
		return a, nil
	}
	o := res.Offer
	a.Iss, a.Hop = o.Iss, o.Hop
	authenticated := sender != "" && sender == o.Iss // o is verified (steps 1-2)
	dg := *res.OfferDigest                           // computed once by the receiver; set whenever Offer is
	switch res.Outcome {
	case handoff.Retransmission, handoff.Equivocation:
		r := held.rec // read at step 4, when it was
		if r == nil {
			var err error
			if r, err = d.cfg.Store.Get(ctx, o.Iss, o.Hop); err != nil {
				return nil, err
			}
		}
		return d.seen(ctx, a, r, res.Handoff.Offer, authenticated)
	case handoff.Rejected:
		if res.Err.Step == 4 && errors.Is(res.Err, ErrSenderNotIss) {
			// Refused at step 4 (lookupOnly.Remember): nothing recorded,
			// and nothing signed, since a signed "rejected" of a hop the
			// delegate has not recorded would tell the delegator that the
			// hop is dead while its own delivery would still be taken.
			return a, nil
		}
		st, err := d.sign(o, dg, handoff.StateRejected, res.Reason, "", nil)
		if err != nil {
			return nil, err
		}
		if res.Err.Step < 5 {
			// Not past steps 1-4: not remembered (D5). A stale or replay
			// rejection says only that the hop is not remembered.
			a.Status = st
			return a, nil
		}
		return d.claim(ctx, a, o, res.Handoff.Offer, dg, store.Rejected, st, authenticated, false)
	case handoff.Accepted:
		return d.take(ctx, a, o, res.Handoff.Offer, dg, authenticated)
	}
	return nil, fmt.Errorf("delegate: unexpected outcome %q", res.Outcome)
}

// ErrSenderNotIss is the cause (Answer.Err, a *handoff.CheckError with
// reason policy at step 4) of refusing an offer for a new hop whose
// sender the host protocol did not authenticate as the offer's iss
// (Config.SenderMustBeIss). The refusal is the Answer with this cause and
// no Record (a host's hook may wrap it too: that rejection is recorded).
var ErrSenderNotIss = errors.New("delegate: a new hop is taken only from a sender authenticated as the offer's iss")

// take records an offer that passed every check: "accepted" with its
// signed status (or "received", deciding later), in one write. The store
// refuses that claim while a cancel is held for the offer
// (store.ErrCancelHeld), atomically with respect to the cancel's Hold:
// the cancel then either was held first and is checked here, or finds the
// record when Cancel reads the hop after holding it. So a fresh offer
// costs one write and no read, and a cancel that overtook its offer still
// stops it before its work begins (draft "Lifecycle": offered ->
// canceled).
func (d *Delegate) take(ctx context.Context, a *Answer, o *handoff.Offer, offer handoff.Element, dg handoff.Digest, authenticated bool) (*Answer, error) {
	state, st := store.Accepted, (*handoff.Element)(nil)
	if d.cfg.Defer {
		state = store.Received
	} else {
		var err error
		if st, err = d.sign(o, dg, handoff.StateAccepted, "", "", nil); err != nil {
			return nil, err
		}
	}
	// A held cancel that does not verify against the offer is dropped and
	// the claim made again; a few rounds at most (a cancel held anew each
	// time is a flood its holder bounds).
	for range 3 {
		a2, err := d.claim(ctx, a, o, offer, dg, state, st, authenticated, false)
		if err == nil {
			d.recordClaimed(o.Iss, dg, o.Hop)
			return a2, nil
		}
		if !errors.Is(err, store.ErrCancelHeld) {
			return a2, err
		}
		k, canceled, err := d.heldFor(ctx, o.Iss, offer, dg)
		if err != nil {
			return nil, err // not claimed: the offer asked again looks again
		}
		if canceled {
			return d.takeCanceled(ctx, a, o, offer, dg, k, authenticated)
		}
	}
	return nil, store.AtHop(fmt.Errorf("delegate: the offer was not recorded: cancels that do not verify against it keep being held for it (%w)", store.ErrCancelHeld), o.Iss, o.Hop)
}

// takeCanceled records an offer whose delegator canceled it before it
// arrived (the held cancel k verified against it): the work is not taken,
// the hop is recorded "rejected" (reason policy) and canceled, and the
// held cancel is taken out.
func (d *Delegate) takeCanceled(ctx context.Context, a *Answer, o *handoff.Offer, offer handoff.Element, dg handoff.Digest, k heldRef, authenticated bool) (*Answer, error) {
	why := "canceled by the delegator before the offer arrived"
	st, err := d.sign(o, dg, handoff.StateRejected, handoff.ReasonPolicy, why, nil)
	if err != nil {
		return nil, err
	}
	a.Outcome, a.Reason = handoff.Rejected, handoff.ReasonPolicy
	a.Err = &handoff.CheckError{Reason: handoff.ReasonPolicy, Hop: o.Hop, Index: handoff.OfferIndex, Err: errors.New(why)}
	a2, err := d.claim(ctx, a, o, offer, dg, store.Rejected, st, authenticated, true)
	if err != nil {
		return a2, err // a held cancel stays held: the offer asked again finds it
	}
	d.recordClaimed(o.Iss, dg, o.Hop)
	return d.afterClaim(ctx, a2, dg, k)
}

// claim records the decision on a new hop in one insert-if-absent. If
// another process claimed the hop first, this offer is a retransmission or
// equivocation of that one.
func (d *Delegate) claim(ctx context.Context, a *Answer, o *handoff.Offer, offer handoff.Element, dg handoff.Digest, state store.State, st *handoff.Element, authenticated, canceled bool) (*Answer, error) {
	now := d.now()
	rec := &store.Record{
		Iss: o.Iss, Hop: o.Hop, Digest: dg, Offer: offer.Octets, OfferForm: offer.Form,
		State: state, Received: now, KeepUntil: time.Unix(o.Exp, 0).Add(d.skew()), Canceled: canceled,
	}
	if h := a.Result.Handoff; h != nil {
		rec.SetChain(h.Chain) // the chain as received, for the operator's picture of the hop
	}
	if st != nil {
		rec.Status, rec.StatusForm = st.Octets, st.Form
	}
	if state.Terminal() {
		rec.Decided = now
	}
	got, stored, err := d.cfg.Store.Claim(ctx, rec)
	if errors.Is(err, store.ErrCancelHeld) {
		return nil, err // nothing written: take looks at the cancel
	}
	if err != nil {
		if got, err = d.claimLost(ctx, rec, err); err != nil {
			return nil, err
		}
		stored = got == rec // claimLost returns rec itself when the record is this claim's
	}
	if !stored {
		// Another claim was first: this offer is a retransmission or
		// equivocation of that one; seen makes the Result say so too.
		return d.seen(ctx, a, got, offer, authenticated)
	}
	a.Record, a.Status, a.Take = got, st, state == store.Accepted
	return a, nil
}

// afterClaim applies the cancel held under k, which verified against the
// offer just claimed canceled (takeCanceled), and takes it out. Whichever
// caller takes it out applies it: a claim of this call's is already
// recorded canceled; a record another claim made first for the same offer
// (this offer is its retransmission) is canceled as Cancel would cancel
// it; a record of another offer (this one is its equivocation) is left
// alone, since D9 binds a cancel to the offer it names.
func (d *Delegate) afterClaim(ctx context.Context, a *Answer, dg handoff.Digest, k heldRef) (*Answer, error) {
	r := a.Record
	if took, err := d.takeHeld(ctx, k); err == nil && !took {
		return a, nil // another caller took it out, and applies it
	}
	// Taken out here, or the take failed and who took it is not known:
	// the cancel verified against this offer, so it is applied either way
	// (applied twice, the second finds the hop canceled or terminal).
	if r.Canceled || !r.Digest.Equal(dg) {
		return a, nil
	}
	r, err := d.canceled(ctx, r)
	a.Record = r
	return a, err
}

// canceledBeforeWork is the outcome of a hop accepted as it was canceled
// or equivocated: its work never began (status gives a failed
// equivocated hop reason equivocation).
func canceledBeforeWork(r *store.Record) Outcome {
	out := Outcome{State: store.Failed, Reason: handoff.ReasonPolicy, NoEffect: true,
		Detail: "canceled by the delegator before the work began"}
	if r.Equivocated {
		out.Detail = "a second, different offer for this hop arrived as the work was accepted; the work never began"
	}
	return out
}

// notBegun is the error for a hop recorded "accepted" whose work must not
// begin (canceled or equivocated as it was taken) but whose "failed" could
// not be recorded: it stays "accepted" with nobody working on it, so it is
// flagged for the operator to settle with Finish (failed, NoEffect).
func (d *Delegate) notBegun(ctx context.Context, r *store.Record, err error) error {
	detail := fmt.Sprintf("the hop was recorded accepted as it was canceled or equivocated, so its work never began, but recording "+
		"it failed with no effect did not succeed (%v): settle it with Finish (failed, NoEffect)", err)
	ferr := d.raiseDetached(ctx, store.FlagUnknownOutcome, r.Iss, r.Hop, detail)
	return errors.Join(notTaken(r, "it stays accepted, flagged unknown outcome: recording it failed did not succeed", r.Iss, r.Hop), err, ferr)
}

// reread bounds the re-read of a hop after its claim reported an error.
const reread = 5 * time.Second

// claimLost finds out what became of a claim that reported an error: the
// insert may have committed with its acknowledgement lost (ctx canceled,
// connection reset). It re-reads the hop with a fresh bounded context.
// It returns rec itself when the record is this claim's (same digest, state,
// status octets and time: an ECDSA signature is never made twice), the
// record found when another claim made it, or an error when there is none
// (nothing committed) or it cannot be read.
//
// If this claim took the work but the caller's ctx has ended, the caller
// is gone and cannot do it: returning Take to no one would leave the hop
// "accepted" with nobody working on it and nothing flagged. The hop is
// flagged "unknown outcome" instead, and an error returned: the work was
// not started, so the operator can settle it (Finish, failed with
// NoEffect, or Release). Where ctx is live (a reset connection), the claim
// is answered as if it had returned normally.
func (d *Delegate) claimLost(ctx context.Context, rec *store.Record, claimErr error) (*store.Record, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reread)
	defer cancel()
	got, err := d.cfg.Store.Get(rctx, rec.Iss, rec.Hop)
	if err != nil {
		err = fmt.Errorf("delegate: claim of hop %s of %q: %w (re-reading it: %v)", rec.Hop, rec.Iss, claimErr, err)
		if rec.State != store.Accepted || errors.Is(claimErr, store.ErrClosed) {
			return nil, err // nothing was written, or the record would say it
		}
		// Nothing found (or nothing readable), but the claim's commit may
		// still land (a statement in flight, a commit whose reply was
		// lost): the hop could then sit "accepted" with nobody working on
		// it and nothing flagged. Flag it now; if the hop never appears,
		// the operator resolves the flag. Only on this error path: a
		// claim that answered normally raises nothing.
		detail := fmt.Sprintf("the claim of this hop as accepted reported %v, and its re-read found no record; the claim may still "+
			"commit later, and if it does nobody works on the hop: settle it with Finish (failed, NoEffect) or Release; "+
			"if the hop has no record, resolve this flag", claimErr)
		if ferr := d.raiseDetached(ctx, store.FlagUnknownOutcome, rec.Iss, rec.Hop, detail); ferr != nil {
			return nil, errors.Join(err, ferr)
		}
		return nil, err
	}
	mine := got.Digest.Equal(rec.Digest) && got.State == rec.State && bytes.Equal(got.Status, rec.Status) &&
		got.Received.Equal(rec.Received)
	if !mine {
		return got, nil // another claim's record: a retransmission or equivocation of it
	}
	if rec.State == store.Accepted && ctx.Err() != nil {
		detail := fmt.Sprintf("the hop was recorded accepted, but its claim reported %v and the caller had gone (%v): "+
			"the work was never started; settle it with Finish (failed, NoEffect) or Release", claimErr, ctx.Err())
		if ferr := d.raiseDetached(ctx, store.FlagUnknownOutcome, rec.Iss, rec.Hop, detail); ferr != nil {
			return nil, errors.Join(fmt.Errorf("delegate: hop %s of %q: %s: %w", rec.Hop, rec.Iss, detail, claimErr), ferr)
		}
		return nil, fmt.Errorf("delegate: hop %s of %q: %s: %w", rec.Hop, rec.Iss, detail, claimErr)
	}
	return rec, nil
}

// seen answers an offer whose (iss, hop) is recorded as r (D5), first
// classifying it against r (classify): the same offer (the same octets, or
// a same-content copy) gets the hop's status and is never processed
// again; a different one is equivocation, handled as the draft says.
func (d *Delegate) seen(ctx context.Context, a *Answer, r *store.Record, offer handoff.Element, authenticated bool) (*Answer, error) {
	a.Record = r
	if err := classify(a, r, offer); err != nil {
		return nil, err
	}
	if a.Outcome == handoff.Equivocation {
		var err error
		a.Record, err = d.equivocation(ctx, r, offer)
		return a, err
	}
	if a.Result.Copy && !r.Canceled {
		// A cancel held for the copy's digest (one that overtook these
		// octets, or one that named them when the hop had been taken with
		// another copy, see Cancel) verifies against them: it cancels the
		// hop, the same offer (D5).
		if err := d.heldForCopy(ctx, a, r, offer); err != nil {
			return nil, err
		}
		r = a.Record
	}
	switch {
	case !authenticated || r.Status == nil:
		return a, nil // a resent status goes only to offer.iss
	case a.Result.Copy:
		st, err := d.copyStatus(ctx, r, *a.Result.OfferDigest)
		if err != nil {
			return nil, err
		}
		a.Status = st
		return a, nil
	}
	a.Status = &handoff.Element{Form: r.StatusForm, Octets: r.Status}
	return a, nil
}

// equivocation handles a second offer for a recorded hop. The second offer
// never gets a status. The first: not yet decided -> "rejected" with
// reason equivocation; taken and running -> stop if possible, and the
// outcome, once known, says so; terminal -> no new status. Every case is
// flagged to the operator. It returns the hop's record as it now stands.
func (d *Delegate) equivocation(ctx context.Context, r *store.Record, second handoff.Element) (_ *store.Record, err error) {
	if err := d.cfg.Store.MarkEquivocated(ctx, r.Iss, r.Hop); err != nil {
		return r, err
	}
	r.Equivocated = true
	iss, hop := r.Iss, r.Hop
	detail := fmt.Sprintf("second offer %s for a hop first seen as offer %s (state %s)", second.Digest(), r.Digest, r.State)
	// One open flag per conflicting content (Flag.Key): the same second
	// offer resent, or its copies, add nothing to it.
	key := "offer " + second.Digest().String()
	if c, err := handoff.SignedContent(second); err == nil {
		key = "content " + c.String()
	}
	// Flagged on every path once marked: a failure below (signing, the
	// store) must not leave an equivocation nobody was told of.
	defer func() {
		if err != nil {
			detail += fmt.Sprintf("; handling it failed: %v", err)
		}
		if ferr := d.raiseKeyed(ctx, store.FlagEquivocation, iss, hop, key, detail); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}()
	rejected := false
	// Twice at most: a Received hop that another caller decided meanwhile
	// (Accept, Reject, an outcome) is handled in the state it reached.
	for range 2 {
		if r.State != store.Received {
			break
		}
		first, err := recordedOffer(r)
		if err != nil {
			return r, err
		}
		st, err := d.sign(first, r.Digest, handoff.StateRejected, handoff.ReasonEquivocation, "", nil)
		if err != nil {
			return r, err
		}
		m := store.Move{Iss: r.Iss, Hop: r.Hop, From: store.Received, To: store.Rejected, Status: st.Octets, Form: st.Form, Now: d.now()}
		err = d.cfg.Store.Transition(ctx, m)
		if errors.Is(err, store.ErrConflict) {
			if r, err = d.cfg.Store.Get(ctx, iss, hop); err != nil {
				return nil, err
			}
			detail += fmt.Sprintf("; decided meanwhile: %s", r.State)
			continue
		}
		if err != nil {
			return r, err
		}
		r.Apply(m)
		detail += "; the first is rejected with reason equivocation"
		rejected = true
		break
	}
	switch {
	case r.State == store.Accepted:
		if d.cfg.Stop != nil {
			d.cfg.Stop(r.Iss, r.Hop)
		}
		detail += "; the work was taken: stop it if possible, and record its outcome (failed with reason equivocation unless it took full effect)"
	case !rejected:
		detail += "; the first already has its terminal status"
	}
	return r, nil
}
