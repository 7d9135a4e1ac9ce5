// Package delegate is the receiving side of a hop, durable: it runs the
// receiving checks, keeps each hop's record in a store.Store, enforces the
// lifecycle, answers retransmissions from the record with the identical
// status octets, handles equivocation, records outcomes only when they are
// known, and raises flags to the operator (draft "Lifecycle", "Asking
// Again", "Knowing the Outcome", "Forks, Concurrency, and Equivocation",
// "Replay and Freshness").
//
// The flow of one offer:
//
//	a, err := d.Receive(ctx, handoffOctets, dialog, authenticatedAsIss)
//	send(a.Status)            // nil: send nothing
//	if a.Take {               // new work, recorded "accepted" before this returns
//	    ... do the work exactly once ...
//	    d.Finish(ctx, a.Iss, a.Hop, delegate.Outcome{State: store.Completed, Refs: result})
//	}
package delegate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Config configures a Delegate.
type Config struct {
	// Receiving checks. Memory and Since are set by the Delegate from
	// the store; leave them zero.
	Options handoff.Options
	Store   store.Store
	Signer  *handoff.Signer // the delegate's own key, for its statuses
	// StatusForm is the signed form of the statuses it sends (default JWS).
	StatusForm handoff.Form
	// Retention is how long a terminal hop's record is kept after its
	// last status, so a delegator may still ask again (default 24 h).
	Retention time.Duration
	// Stop, if set, is called when work already taken must stop because
	// its offer was equivocated or canceled. It must not block. It may
	// come before the work starts (the hop was just taken, and Receive or
	// Accept has not yet returned): remember it, so that work for that
	// hop not yet begun is not begun. In a fleet it reaches only the
	// process that received the cancel or the equivocating offer: work
	// running on another replica learns of it by reading the hop's record
	// (store.Record.Canceled, Equivocated) before it starts and at points
	// where it can stop.
	Stop func(iss, hop string)
	// Defer: an offer that passes every check is recorded "received" with
	// no status, and the caller decides later with Accept or Reject (a
	// person approves, say). Otherwise it is accepted at once.
	Defer bool
	// HeldCancels bounds the cancels held, in the store, for offers not
	// yet received: Total in all (default DefaultMaxHeld) and PerIss per
	// status iss (default DefaultMaxHeldPerIss). Zero takes the default.
	// See Cancel.
	HeldCancels store.HoldLimits
}

// Delegate is a durable receiver of offers. Safe for concurrent use; many
// Delegates (processes, replicas) may share one SQL store.
type Delegate struct {
	cfg Config
	// recv runs the receiving checks with the store's Since as it was
	// last read (New, then every Sweep): rebuilt when Since moves.
	recv  atomic.Pointer[handoff.Receiver]
	since atomic.Int64 // the Since recv was built with, UnixNano
	now   func() time.Time

	// Cancels that arrived before their offer are held in the store
	// (held.go).
	mu      sync.Mutex
	claimed map[string]string // hop of each offer claimed here lately, by heldKey
	order   []string          // claimed's keys, oldest first (a ring of maxClaimed)
	next    int
	// working: the hops whose RecordOutcome runs in this process (closed
	// when it ends), so that a second call for one waits, then finds the
	// outcome recorded, rather than running the work again (outcome.go).
	working map[[2]string]chan struct{}
}

// maxClaimed bounds the offers whose hop a delegate remembers for a
// cancel that names only its offer (Cancel with no hop).
const maxClaimed = 4096

// New validates cfg and returns a Delegate. The store's Since turns on the
// restart rule: offers issued before the store's memory begins are refused
// as "replay" until they would be stale anyway.
func New(ctx context.Context, cfg Config) (*Delegate, error) {
	if cfg.Store == nil || cfg.Signer == nil {
		return nil, errors.New("delegate: a store and a signer are required")
	}
	if cfg.Retention < 0 {
		return nil, errors.New("delegate: retention must not be negative")
	}
	if cfg.Retention == 0 {
		cfg.Retention = 24 * time.Hour
	}
	since, err := cfg.Store.Since(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.HeldCancels.Total < 0 || cfg.HeldCancels.PerIss < 0 {
		return nil, errors.New("delegate: the bounds of the held cancels must not be negative")
	}
	if cfg.HeldCancels.Total == 0 {
		cfg.HeldCancels.Total = DefaultMaxHeld
	}
	if cfg.HeldCancels.PerIss == 0 {
		cfg.HeldCancels.PerIss = DefaultMaxHeldPerIss
	}
	d := &Delegate{cfg: cfg, claimed: map[string]string{}, working: map[[2]string]chan struct{}{}}
	if err := d.setSince(since); err != nil {
		return nil, err
	}
	d.now = cfg.Options.Now
	if d.now == nil {
		d.now = time.Now
	}
	return d, nil
}

// setSince builds the receiver for the store's Since.
func (d *Delegate) setSince(since time.Time) error {
	o := d.cfg.Options
	o.Memory = lookupOnly{s: d.cfg.Store, refs: o.CheckRefs != nil}
	o.Since = since
	r, err := handoff.NewReceiver(o)
	if err != nil {
		return err
	}
	d.recv.Store(r)
	d.since.Store(since.UnixNano())
	return nil
}

// refreshSince re-reads the store's Since (one small read) and rebuilds
// the receiver when it moved: in a fleet sharing one store, a Forget on
// one replica moves every replica's restart rule. Sweep calls it, so a
// replica running RunSweeper follows within one interval.
func (d *Delegate) refreshSince(ctx context.Context) error {
	since, err := d.cfg.Store.Since(ctx)
	if err != nil {
		return err
	}
	if since.UnixNano() == d.since.Load() {
		return nil
	}
	return d.setSince(since)
}

// lookupOnly is the receiver's view of the store: Lookup reads the record;
// Remember does not write, because the Delegate claims the hop once, with
// its decision and the status it sends, in one atomic insert (see
// Receive), which also settles a race between two deliveries.
//
// Remember reads the record, so that a recorded hop stops at step 4 as
// the draft orders (a retransmission is not processed again), when the
// steps after it cost more than the read: the Handoff carries a chain
// (step 6 verifies each element) or references are checked (step 7 may
// fetch them). Otherwise steps 5-7 are a few comparisons, and the claim
// finds the record as a read would, for one write and no read (decision
// 69).
type lookupOnly struct {
	s    store.Store
	refs bool // step 7 runs a reference check
}

// costlyLater marks a Receive whose Handoff carries a chain.
type costlyLater struct{}

func (l lookupOnly) Lookup(ctx context.Context, iss, hop string) (handoff.Seen, bool, error) {
	r, err := l.s.Get(ctx, iss, hop)
	if errors.Is(err, store.ErrNotFound) {
		return handoff.Seen{}, false, nil
	}
	if err != nil {
		return handoff.Seen{}, false, err
	}
	seen, err := store.RecordSeen(r)
	return seen, err == nil, err
}

func (l lookupOnly) Remember(ctx context.Context, iss, hop string, _ handoff.Element, seen handoff.Seen, _ time.Time) (handoff.Seen, bool, error) {
	if !l.refs && ctx.Value(costlyLater{}) == nil {
		return seen, true, nil
	}
	first, ok, err := l.Lookup(ctx, iss, hop)
	if err != nil || ok {
		return first, false, err
	}
	return seen, true, nil
}

// Answer is what became of a received Handoff and what to send back.
type Answer struct {
	Outcome handoff.Outcome
	Result  *handoff.Result
	// Status is the signed status to send to the delegator, or nil to send
	// nothing: an equivocating offer, a retransmission whose sender the
	// host protocol did not authenticate as offer.iss, a hop not yet
	// decided, or a rejection that cannot be addressed (step 1). For a
	// same-content copy of the recorded offer (Result.Copy, SPEC D5) it is
	// the hop's current status signed for the copy's own digest.
	Status *handoff.Element
	// Take: this call took the work; do it exactly once, then Finish.
	Take     bool
	Iss, Hop string        // the hop, when the offer's payload was verified
	Record   *store.Record // the hop's record after this call, if any
}

// Receive checks a Handoff and records the decision before returning, so
// that a status (or the work) only leaves after the record it depends on
// is durable. authenticated says whether the host protocol authenticated
// the sender of this request as the offer's iss; a resent status goes
// only to such a sender (draft "Replay and Freshness").
func (d *Delegate) Receive(ctx context.Context, b []byte, dialog string, authenticated bool) (*Answer, error) {
	h, err := handoff.ParseHandoff(b, d.cfg.Options.Limits)
	return d.ReceiveParsed(ctx, h, err, dialog, authenticated)
}

// ReceiveParsed is Receive for a Handoff the caller has already decoded
// with handoff.ParseHandoff (h and parseErr exactly as it returned them),
// so that a carrier decodes a request's Handoff once
// (handoff.Receiver.ReceiveParsed).
func (d *Delegate) ReceiveParsed(ctx context.Context, h *handoff.Handoff, parseErr error, dialog string, authenticated bool) (*Answer, error) {
	rctx := ctx
	if h != nil && len(h.Chain) > 0 {
		rctx = context.WithValue(ctx, costlyLater{}, true) // see lookupOnly
	}
	res, err := d.recv.Load().ReceiveParsed(rctx, h, parseErr, dialog)
	if res == nil {
		return nil, err
	}
	a := &Answer{Outcome: res.Outcome, Result: res}
	if res.Offer == nil {
		// Step 1 failed: nothing verified to answer to.
		return a, nil
	}
	o := res.Offer
	a.Iss, a.Hop = o.Iss, o.Hop
	dg := *res.OfferDigest // computed once by the receiver; set whenever Offer is
	switch res.Outcome {
	case handoff.Retransmission, handoff.Equivocation:
		r, err := d.cfg.Store.Get(ctx, o.Iss, o.Hop)
		if err != nil {
			return nil, err
		}
		return d.seen(ctx, a, r, res.Handoff.Offer, authenticated)
	case handoff.Rejected:
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
		offer := res.Handoff.Offer
		k, canceled, err := d.heldFor(ctx, o.Iss, offer, dg)
		if err != nil {
			return nil, err // not claimed: the offer asked again looks again
		}
		state, st := store.Accepted, (*handoff.Element)(nil)
		switch {
		case canceled:
			// The delegator canceled this hop before its offer arrived:
			// the work is not taken (Lifecycle: offered -> canceled).
			state = store.Rejected
			if st, err = d.sign(o, dg, handoff.StateRejected, handoff.ReasonPolicy, "canceled by the delegator before the offer arrived", nil); err != nil {
				return nil, err
			}
			a.Outcome = handoff.Rejected
			res.Outcome, res.Reason = handoff.Rejected, handoff.ReasonPolicy
			res.Err = &handoff.CheckError{Reason: handoff.ReasonPolicy, Hop: o.Hop, Index: handoff.OfferIndex,
				Err: errors.New("canceled by the delegator before the offer arrived")}
		case d.cfg.Defer:
			state = store.Received
		default:
			if st, err = d.sign(o, dg, handoff.StateAccepted, "", "", nil); err != nil {
				return nil, err
			}
		}
		a2, err := d.claim(ctx, a, o, offer, dg, state, st, authenticated, canceled)
		if err != nil {
			return a2, err // a held cancel stays held: the offer asked again finds it
		}
		d.recordClaimed(o.Iss, dg, o.Hop)
		return d.afterClaim(ctx, a2, offer, dg, k, canceled)
	}
	return nil, fmt.Errorf("delegate: unexpected outcome %q", res.Outcome)
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
	if st != nil {
		rec.Status, rec.StatusForm = st.Octets, st.Form
	}
	if state.Terminal() {
		rec.Decided = now
	}
	got, stored, err := d.cfg.Store.Claim(ctx, rec)
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

// afterClaim applies a cancel held for the offer just claimed (draft
// "Lifecycle": offered -> canceled). A claim and a cancel that overtook
// its offer race: Receive looks for a held cancel before and after its
// claim, and Cancel, having found no record and held the cancel, reads
// the hop again; each looks after its own write, so one sees the other,
// and whichever takes the held cancel out (takeHeld) applies it. k and
// found are what Receive's first look gave.
//
// A hop this call just took (Take) has not begun its work: it is recorded
// "failed" with no effect and not taken. Any other record (received, or
// made by another claim of the hop) gets the cancel as Cancel would give
// it.
func (d *Delegate) afterClaim(ctx context.Context, a *Answer, offer handoff.Element, dg handoff.Digest, k heldRef, found bool) (*Answer, error) {
	if !found {
		var err error
		if k, found, err = d.heldFor(ctx, a.Iss, offer, dg); err != nil {
			return d.heldLookFailed(ctx, a, err)
		}
		if !found {
			return a, nil
		}
	}
	r := a.Record
	if took, err := d.takeHeld(ctx, k); err == nil && !took {
		// Cancel took it out, here or on another replica, and applies it:
		// it marks the hop before it takes the held cancel out, so the
		// record read now shows the mark. A hop this call just took must
		// then not begin its work, as if this call had applied it.
		if !a.Take {
			return a, nil
		}
		now, err := d.cfg.Store.Get(ctx, r.Iss, r.Hop)
		if err != nil || !now.Canceled || !now.Digest.Equal(dg) {
			// Not readable: the mark, if made, is there for the host's
			// own read before the work (the carriers make one).
			return a, nil
		}
		r = now
		r.Canceled = false // applied below as this call's own
	}
	// Taken out here, or the take failed and who took it is not known:
	// the cancel verified against this offer, so it is applied either way
	// (applied twice, the second finds the hop canceled or terminal).
	switch {
	case r.Canceled:
		return a, nil // recorded with the cancel (this claim's rejection, or one before it)
	case !r.Digest.Equal(dg):
		// The hop is recorded with another offer (this one is its
		// equivocation): the cancel names this one, and D9 binds a cancel
		// to the offer it names, so it does not apply to that record.
		return a, nil
	case a.Take:
		r.Canceled = true // this record copy, for notBegun's error too
		if err := d.cfg.Store.MarkCanceled(ctx, r.Iss, r.Hop); err != nil {
			return nil, d.notBegun(ctx, r, err)
		}
		failed, r, err := d.conclude(ctx, r, canceledBeforeWork)
		if err != nil {
			return nil, d.notBegun(ctx, r, err)
		}
		// Answered as a refusal, so that a host sends the status and
		// runs nothing: the offer passed its checks, but the delegator
		// had canceled it before its work could begin.
		why := errors.New("canceled by the delegator as the offer was recorded; the work never began")
		a.Outcome, a.Take, a.Status, a.Record = handoff.Rejected, false, failed, r
		a.Result.Outcome, a.Result.Reason = handoff.Rejected, handoff.ReasonPolicy
		a.Result.Err = &handoff.CheckError{Reason: handoff.ReasonPolicy, Hop: r.Hop, Index: handoff.OfferIndex, Err: why}
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
		now := d.now()
		err = d.cfg.Store.Transition(ctx, r.Iss, r.Hop, store.Received, store.Rejected, st.Octets, st.Form, now)
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
		r.State, r.Status, r.StatusForm, r.Decided = store.Rejected, st.Octets, st.Form, now
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

func (d *Delegate) skew() time.Duration { return handoff.EffectiveSkew(d.cfg.Options.Skew) }

// raise flags the hop to the operator; its error names the hop.
func (d *Delegate) raise(ctx context.Context, kind, iss, hop, detail string) (int64, error) {
	id, err := d.cfg.Store.Raise(ctx, store.Flag{Kind: kind, Iss: iss, Hop: hop, Detail: detail, Created: d.now()})
	if err != nil {
		return 0, store.AtHop(fmt.Errorf("delegate: raising a %s flag: %w", kind, err), iss, hop)
	}
	return id, nil
}

// raiseDetached is raise on a fresh bounded context, for a flag that must
// be raised although the caller's ctx has ended or timed out.
func (d *Delegate) raiseDetached(ctx context.Context, kind, iss, hop, detail string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reread)
	defer cancel()
	_, err := d.raise(rctx, kind, iss, hop, detail)
	return err
}

// sign makes a status for offer o (whose handoff digest is dg), from this
// delegate to the delegator.
func (d *Delegate) sign(o *handoff.Offer, dg handoff.Digest, state handoff.State, reason handoff.Reason, detail string, refs []handoff.ContextRef) (*handoff.Element, error) {
	// iss is this delegate. It equals offer.aud for every offer that passed
	// step 2; for a wrong-audience rejection it is the one honest signer:
	// naming offer.aud there would claim to speak for another agent. D9 as
	// amended verifies it, from a trusted agent, as the misdelivered
	// rejection, which never sets the hop's state.
	st := &handoff.Status{Offer: dg, Iss: d.cfg.Options.Me, Aud: o.Iss, Iat: d.now().Unix(), State: state,
		Reason: reason, Detail: detail, Refs: refs}
	s, err := d.cfg.Signer.SignStatus(st, d.cfg.StatusForm)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// ErrCanceled: the delegator canceled the hop before its work was
// accepted, so the work must not start (or, from RecordOutcome, while it
// ran, so its effect was not applied).
var ErrCanceled = errors.New("delegate: the delegator canceled this hop")

// ErrEquivocated: a second, different offer for the hop was seen before
// its work was accepted or began, so the work must not start (or, from
// RecordOutcome, while it ran, so its effect was not applied).
var ErrEquivocated = errors.New("delegate: the hop's offer was equivocated")

// Accept takes the work of a hop recorded "received" (Config.Defer) and
// returns the "accepted" status to send. Do the work only if it returns no
// error: another process may have decided first (store.ErrConflict), the
// delegator canceled the hop (ErrCanceled), or a second offer for it
// was seen (ErrEquivocated).
//
// A canceled hop is never accepted (Lifecycle: offered -> canceled). It
// is rejected with reason "policy", as an offer whose cancel overtook it
// is; if the cancel arrives between the check and the acceptance, the
// hop, whose work has not begun, is recorded "failed" with no refs (it
// took no effect). An equivocated hop is handled the same way with
// reason "equivocation" (draft "Forks, Concurrency, and Equivocation").
// Either way Accept returns that status, to send, with an error wrapping
// ErrCanceled or ErrEquivocated (both when both happened).
func (d *Delegate) Accept(ctx context.Context, iss, hop string) (*handoff.Element, error) {
	return d.decide(ctx, iss, hop, store.Accepted, "")
}

// Reject declines a hop recorded "received" (Config.Defer) with a reason
// and returns the "rejected" status to send. The reason is required, and
// is not "stale" or "replay": those say only that the delegate does not
// remember the offer, never true of a hop it records (draft "Lifecycle").
func (d *Delegate) Reject(ctx context.Context, iss, hop string, reason handoff.Reason) (*handoff.Element, error) {
	switch reason {
	case "":
		return nil, fmt.Errorf("delegate: rejecting hop %s of %q needs a reason", hop, iss)
	case handoff.ReasonStale, handoff.ReasonReplay:
		return nil, fmt.Errorf("delegate: hop %s of %q cannot be rejected %q: that reason is only for an offer the delegate does not remember", hop, iss, reason)
	}
	return d.decide(ctx, iss, hop, store.Rejected, reason)
}

func (d *Delegate) decide(ctx context.Context, iss, hop string, to store.State, reason handoff.Reason) (*handoff.Element, error) {
	r, err := d.cfg.Store.Get(ctx, iss, hop)
	if err != nil {
		return nil, err
	}
	if r.State != store.Received {
		return nil, store.AtHop(fmt.Errorf("%w: the hop is already %s", store.ErrConflict, r.State), iss, hop)
	}
	var target store.State
	var rsn handoff.Reason
	st, r, err := d.moveIf(ctx, r, func(r *store.Record) (store.State, *handoff.Element, error) {
		o, err := recordedOffer(r)
		if err != nil {
			return "", nil, err
		}
		var detail string
		target, rsn = to, reason
		switch {
		case r.Equivocated:
			// Neither taken nor answered: "rejected" with reason
			// equivocation (draft "Forks, Concurrency, and Equivocation"),
			// whatever was asked; it comes first when canceled too.
			target, rsn = store.Rejected, handoff.ReasonEquivocation
			detail = "a second, different offer for this hop was seen before the work was accepted"
		case to == store.Accepted && r.Canceled:
			// Never accepted once canceled (Lifecycle: offered -> canceled).
			target, rsn, detail = store.Rejected, handoff.ReasonPolicy, "canceled by the delegator before the work was accepted"
		}
		st, err := d.sign(o, r.Digest, handoff.State(target), rsn, detail, nil)
		return target, st, err
	})
	if err != nil {
		return nil, err
	}
	if to == store.Accepted && target != to {
		return st, notTaken(r, fmt.Sprintf("it is rejected with reason %s", rsn), iss, hop)
	}
	if to != store.Accepted {
		return st, nil
	}
	// A cancel or an equivocating offer that arrived between the read
	// above and the transition found the hop "received" and stopped
	// nothing (or found it "accepted" and called Stop before the work
	// began): the work has not begun (this call has not returned), so it
	// took no effect. (Cancel and the equivocation handler mark the hop
	// before reading its state, so one of the two sees the other.) If the
	// re-read fails, their Stop stops the work.
	if r, err = d.cfg.Store.Get(ctx, iss, hop); err != nil || !(r.Canceled || r.Equivocated) || r.State != store.Accepted {
		return st, nil
	}
	failed, r, err := d.conclude(ctx, r, canceledBeforeWork)
	if err != nil {
		return nil, d.notBegun(ctx, r, err)
	}
	return failed, notTaken(r, "it was recorded failed as it was accepted (no effect)", iss, hop)
}

// notTaken is Accept's error for a hop whose work must not start: it
// wraps ErrEquivocated, ErrCanceled, or both, as the record r shows.
func notTaken(r *store.Record, what, iss, hop string) error {
	var errs []error
	if r.Equivocated {
		errs = append(errs, ErrEquivocated)
	}
	if r.Canceled {
		errs = append(errs, ErrCanceled)
	}
	return store.AtHop(fmt.Errorf("%w: %s; do not do the work", errors.Join(errs...), what), iss, hop)
}

// recordedOffer decodes the offer a hop's record holds.
func recordedOffer(r *store.Record) (*handoff.Offer, error) {
	o, _, err := handoff.UnsafeDecode(handoff.Element{Form: r.OfferForm, Octets: r.Offer})
	if err == nil && o == nil {
		err = errors.New("it is not an offer")
	}
	if err != nil {
		return nil, store.AtHop(fmt.Errorf("delegate: the recorded offer cannot be read: %w", err), r.Iss, r.Hop)
	}
	return o, nil
}

// moveIf moves the hop from the state r shows to the state sign(r)
// names, storing the status sign(r) made, with TransitionIf: conditional
// on r's equivocation mark, so that a status signed before a mark is never
// stored after it. Refused because an equivocation was marked after r was
// read, it signs again for the hop as it now stands; the mark is only ever
// set, so once is enough. It returns the status and the record as moved,
// or, with an error, the record last signed for.
func (d *Delegate) moveIf(ctx context.Context, r *store.Record, sign func(*store.Record) (store.State, *handoff.Element, error)) (*handoff.Element, *store.Record, error) {
	for retried := false; ; retried = true {
		to, st, err := sign(r)
		if err != nil {
			return nil, r, err
		}
		now := d.now()
		err = d.cfg.Store.TransitionIf(ctx, r.Iss, r.Hop, r.State, to, r.Equivocated, st.Octets, st.Form, now)
		if err == nil {
			moved := *r
			moved.State, moved.Status, moved.StatusForm, moved.Decided = to, st.Octets, st.Form, now
			if !to.Terminal() {
				moved.Decided = r.Decided
			}
			return st, &moved, nil
		}
		if retried || r.Equivocated || !errors.Is(err, store.ErrConflict) {
			return nil, r, err
		}
		cur, gerr := d.cfg.Store.Get(ctx, r.Iss, r.Hop)
		if gerr != nil {
			return nil, r, errors.Join(err, gerr)
		}
		if cur.State != r.State || !cur.Equivocated {
			return nil, r, err // decided by another caller meanwhile
		}
		r = cur
	}
}

// conclude records the terminal outcome out(r) of the hop as r shows it
// (moveIf: a "failed" signed again after an equivocation mark carries
// reason "equivocation", draft "Forks, Concurrency, and Equivocation").
func (d *Delegate) conclude(ctx context.Context, r *store.Record, out func(*store.Record) Outcome) (*handoff.Element, *store.Record, error) {
	return d.moveIf(ctx, r, func(r *store.Record) (store.State, *handoff.Element, error) {
		o := out(r)
		st, err := d.status(r, o)
		return o.State, st, err
	})
}

// Outcome is a known outcome of taken work (draft "Knowing the Outcome").
type Outcome struct {
	State  store.State // store.Completed or store.Failed
	Reason handoff.Reason
	Detail string
	// Refs: for completed, the result; for failed, every part of the work
	// that took effect.
	Refs []handoff.ContextRef
	// NoEffect must be set on a failed outcome without refs: it says the
	// work took no effect at all (a failed status without refs says so to
	// the delegator). It guards against forgetting to list what took effect.
	NoEffect bool
}

func (o Outcome) check() error {
	switch o.State {
	case store.Completed:
		if o.NoEffect {
			return errors.New(`delegate: a "completed" outcome took effect; NoEffect is for "failed" only`)
		}
	case store.Failed:
		if len(o.Refs) == 0 && !o.NoEffect {
			return errors.New(`delegate: a "failed" outcome lists in Refs what took effect, or sets NoEffect when nothing did`)
		}
		if len(o.Refs) > 0 && o.NoEffect {
			return errors.New(`delegate: a "failed" outcome with NoEffect says nothing took effect, yet lists Refs of what did`)
		}
	default:
		return fmt.Errorf("delegate: an outcome is completed or failed, not %q", o.State)
	}
	return nil
}

// status signs the terminal status for a recorded hop. An equivocated hop
// that failed says so with reason "equivocation".
func (d *Delegate) status(r *store.Record, out Outcome) (*handoff.Element, error) {
	o, err := recordedOffer(r)
	if err != nil {
		return nil, err
	}
	reason := out.Reason
	if r.Equivocated && out.State == store.Failed {
		reason = handoff.ReasonEquivocation
	}
	return d.sign(o, r.Digest, handoff.State(out.State), reason, out.Detail, out.Refs)
}

// Finish records a known outcome of work whose effect is outside the
// store: call it only with an authoritative observation of this attempt's
// effect (another system's record of the request, found by an identifier
// derived from (iss, hop)). A lookup that timed out proves nothing: then
// call Unknown instead. It returns the status to send.
func (d *Delegate) Finish(ctx context.Context, iss, hop string, out Outcome) (*handoff.Element, error) {
	if err := out.check(); err != nil {
		return nil, store.AtHop(err, iss, hop)
	}
	r, err := d.cfg.Store.Get(ctx, iss, hop)
	if err != nil {
		return nil, err
	}
	// The move is conditional on the equivocated mark as read: an
	// equivocation marked meanwhile makes it sign again, so a "failed"
	// never goes out without reason equivocation on an equivocated hop.
	st, _, err := d.conclude(ctx, r, func(*store.Record) Outcome { return out })
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Unknown keeps a taken hop "accepted" because its outcome cannot be
// learned now (a lookup timed out, the record of the effect was lost) and
// flags it to the operator. The delegate never guesses: the hop stays
// accepted until Finish is called with an authoritative observation, or
// the operator releases it (Release).
func (d *Delegate) Unknown(ctx context.Context, iss, hop, why string) error {
	r, err := d.cfg.Store.Get(ctx, iss, hop)
	if err != nil {
		return err
	}
	if r.State != store.Accepted {
		return store.AtHop(fmt.Errorf("%w: an unknown outcome is for an accepted hop; the hop is %s", store.ErrConflict, r.State), iss, hop)
	}
	_, err = d.raise(ctx, store.FlagUnknownOutcome, iss, hop, why)
	return err
}

// recoverPage is how many accepted hops Recover reads at a time.
const recoverPage = 500

// Recover is meant for start-up, before this delegate takes work: every
// hop recorded "accepted" that has no outcome was taken by a process that
// is gone (it crashed between the claim and the outcome, or its claim's
// acknowledgement was lost), and nobody is working on it. Its outcome is
// not known, so the hop stays "accepted" (draft "Knowing the Outcome":
// until an authoritative observation) and is flagged "unknown outcome"
// for the operator, who settles it with Finish or Release. A canceled hop
// is flagged too: a cancel does not show that the work took no effect.
// A hop that already has an open unknown-outcome flag is not flagged
// again, so running Recover twice raises no duplicate. It returns how
// many hops it flagged.
//
// In a fleet sharing one store, other replicas may be working on some of
// these hops: run Recover when none is, or read its flags as "check
// whether this is still running".
func (d *Delegate) Recover(ctx context.Context) (int, error) {
	open, err := d.cfg.Store.Flags(ctx, false)
	if err != nil {
		return 0, err
	}
	flagged := map[store.HopKey]bool{}
	for _, f := range open {
		if f.Kind == store.FlagUnknownOutcome {
			flagged[store.HopKey{Iss: f.Iss, Hop: f.Hop}] = true
		}
	}
	n := 0
	var after store.HopKey
	for {
		page, err := d.cfg.Store.Hops(ctx, store.Accepted, after, recoverPage)
		if err != nil {
			return n, err
		}
		for _, r := range page {
			k := store.HopKey{Iss: r.Iss, Hop: r.Hop}
			after = k
			if flagged[k] || !r.Released.IsZero() {
				continue
			}
			// Re-read just before raising: an operator's Release (or an
			// outcome) landing since the page was read would otherwise
			// leave an open flag on a hop already settled.
			now, err := d.cfg.Store.Get(ctx, r.Iss, r.Hop)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return n, err
			}
			if now.State != store.Accepted || !now.Released.IsZero() {
				continue
			}
			r = now
			detail := "found accepted at start-up with no outcome: the process that took the work is gone, and whether it took effect is not known"
			if r.Canceled {
				detail += " (the delegator canceled it; a cancel does not show the work took no effect)"
			}
			if _, err := d.raise(ctx, store.FlagUnknownOutcome, r.Iss, r.Hop, detail); err != nil {
				return n, err
			}
			flagged[k] = true
			n++
		}
		if len(page) < recoverPage {
			return n, nil
		}
	}
}

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
	r, err := d.cfg.Store.Get(ctx, iss, hop)
	if errors.Is(err, store.ErrNotFound) {
		k, herr := d.hold(ctx, status)
		if herr != nil {
			return nil, fmt.Errorf("%w; the cancel is not held: %w", err, herr)
		}
		// The offer's claim may have committed since the read above, and
		// looked for held cancels before this one was held: read again
		// (see afterClaim), by the hop the claim noted when the caller
		// knows only the offer's digest. Whichever takes the held cancel
		// out applies it.
		if h, ok := d.claimedHop(k.key()); ok && (hop == "" || hop == h) {
			hop = h
		}
		if hop == "" {
			// Not claimed here lately: perhaps by another replica sharing
			// the store, or before a restart. Looked up after holding, so
			// that a claim committing meanwhile either finds the held
			// cancel (Receive looks after its claim) or is found here.
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
			// The claim may have committed past afterClaim's look: the
			// cancel, whose signature verified, stops the work.
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
	// Taken out after the mark: a Receive of the offer that finds it
	// already taken out reads the mark (afterClaim). One held earlier, or
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
// before afterClaim looks for a held cancel, so that a Cancel that names
// no hop (a host that knows only the digest the cancel names) and held
// its cancel after that look still finds the hop. Bounded: the oldest is
// forgotten first.
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

// Sweep removes the records that may go now (see store.Store.Sweep). It
// first re-reads the store's Since, so that a Forget made by another
// process sharing the store (a replica, an operator's tool) turns on this
// delegate's restart rule too: run RunSweeper, or call Sweep, on every
// replica.
func (d *Delegate) Sweep(ctx context.Context) (int, error) {
	if err := d.refreshSince(ctx); err != nil {
		return 0, err
	}
	return d.cfg.Store.Sweep(ctx, d.now(), d.cfg.Retention)
}

// RunSweeper sweeps every interval until ctx is done, so that memory and
// disk stay bounded under a steady stream of offers. Errors are passed to
// report (which may be nil) and the sweeper goes on.
func (d *Delegate) RunSweeper(ctx context.Context, every time.Duration, report func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := d.Sweep(ctx); err != nil && report != nil {
				report(err)
			}
		}
	}
}

// Record reads the hop's record from the store (store.ErrNotFound when
// there is none): what a carrier checks just before it begins taken work,
// since a cancel or an equivocating offer may have marked the hop in
// between on a path that does not reach its Config.Stop (another replica
// sharing the store, another process).
func (d *Delegate) Record(ctx context.Context, iss, hop string) (*store.Record, error) {
	return d.cfg.Store.Get(ctx, iss, hop)
}

// Flags lists the operator's flags: equivocation, conflicting inputs and
// unknown outcomes; open ones only unless all.
func (d *Delegate) Flags(ctx context.Context, all bool) ([]store.Flag, error) {
	return d.cfg.Store.Flags(ctx, all)
}

// Resolve closes a flag with the operator's note. Resolving an unknown
// outcome does not decide it, nor does it let the hop go: Finish records
// the outcome the operator observed, and Release gives up on learning it.
func (d *Delegate) Resolve(ctx context.Context, id int64, resolution string) error {
	return d.cfg.Store.Resolve(ctx, id, resolution, d.now())
}

// Release settles a hop left "accepted" whose outcome the operator has
// found cannot be learned (draft "Knowing the Outcome": the delegate must
// not guess). No "completed" or "failed" is signed: the hop stays
// accepted, a retransmission still gets "accepted", and the delegator's
// hop stays unresolved, as the draft says. What changes is retention: the
// record may be swept once the retention period has passed (draft
// "Freshness and Replay": kept until its operator resolves it). why, the
// operator's reason, is required; it closes the hop's open unknown-outcome
// flags (or, when none is open, is recorded as a resolved one). If the
// outcome is learned later, Finish still records it.
func (d *Delegate) Release(ctx context.Context, iss, hop, why string) error {
	if why == "" {
		return fmt.Errorf("delegate: releasing hop %s of %q needs the operator's reason", hop, iss)
	}
	now := d.now()
	if err := d.cfg.Store.Release(ctx, iss, hop, now); err != nil {
		return err
	}
	flags, err := d.cfg.Store.Flags(ctx, false)
	if err != nil {
		return err
	}
	note := "released by the operator, outcome not known: " + why
	closed := false
	for _, f := range flags {
		if f.Kind == store.FlagUnknownOutcome && f.Iss == iss && f.Hop == hop {
			if err := d.cfg.Store.Resolve(ctx, f.ID, note, now); err != nil {
				return err
			}
			closed = true
		}
	}
	if closed {
		return nil
	}
	id, err := d.raise(ctx, store.FlagUnknownOutcome, iss, hop, "released by the operator with no open flag")
	if err != nil {
		return err
	}
	return d.cfg.Store.Resolve(ctx, id, note, now)
}
