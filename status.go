package handoff

import (
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff/trust"
)

// StatusOptions configure VerifyStatus.
type StatusOptions struct {
	Keys   KeySource // the trust configuration
	Now    func() time.Time
	Skew   time.Duration // a status issued later than now + skew is refused; 0: 60 s, NoSkew: none
	Limits Limits
	// SameOffer, when set, reports whether a digest other than the
	// offer's own names the same offer: a same-content copy of it (D5 as
	// amended: same signed content is the same offer) that the caller
	// received and recorded as such. A status naming that digest then
	// answers the offer. A delegate whose hop was taken with a malleated
	// copy uses it to honour the delegator's cancel, which names the
	// octets the delegator signed.
	SameOffer func(Digest) bool
}

// VerifiedStatus is a status that passed every check of D9.
type VerifiedStatus struct {
	Status *Status
	Key    *trust.Key
	// Misdelivered: the status is the D9 exception, a "rejected" with
	// reason wrong-audience signed by an agent the offer reached by
	// mistake (a trusted agent that is neither offer.aud nor offer.iss),
	// to offer.iss. It says the offer went astray, not what the hop's
	// delegate did: it never sets the hop's state (see SetsState).
	Misdelivered bool
}

// SetsState reports whether the status may set the hop's state (D9): not
// a "rejected" with reason stale or replay (the delegate only does not
// remember the hop) and not a misdelivered wrong-audience (it does not
// come from the hop's delegate, which may still answer). A hop tracker
// takes such a status as verified and leaves the hop as it is.
func (v *VerifiedStatus) SetsState() bool {
	if v.Misdelivered {
		return false
	}
	s := v.Status
	return !(s.State == StateRejected && (s.Reason == ReasonStale || s.Reason == ReasonReplay))
}

// VerifyStatus checks a signed status against the offer it answers (draft
// "Forks, Concurrency, and Equivocation", D9): its signed form with type
// "status", its signature with a key bound to status.iss, status.iss is
// offer.aud (offer.iss for "canceled"), status.aud is the other party, and
// status.offer is the offer's handoff digest. Statuses do not expire, but
// one issued after now plus the skew is refused.
//
// One exception to status.iss = offer.aud (D9): a "rejected" with reason
// wrong-audience may be signed by any trusted agent other than offer.iss
// (the one the offer reached by mistake), with status.aud = offer.iss. It
// verifies with Misdelivered set, and never sets the hop's state.
//
// The offer is the element the caller sent or received; its payload is
// read but its signature is not checked here.
func VerifyStatus(status, offer Element, o StatusOptions) (*VerifiedStatus, error) {
	if o.Keys == nil {
		return nil, errors.New("handoff: VerifyStatus needs a trust configuration")
	}
	if o.Skew < 0 && o.Skew != NoSkew {
		return nil, errors.New("handoff: skew must not be negative (for no skew, use NoSkew)")
	}
	o.Skew = EffectiveSkew(o.Skew)
	if o.Now == nil {
		o.Now = time.Now
	}
	lim := o.Limits.withDefaults()
	fail := func(reason Reason, member string, err error) (*VerifiedStatus, error) {
		var me *memberError
		if errors.As(err, &me) {
			reason, member, err = me.reason, me.member, me.err
		}
		return nil, &CheckError{Reason: reason, Index: OfferIndex, Member: member, Err: err}
	}
	op, err := parseElement(offer, "offer", lim)
	if err != nil {
		return fail(ReasonBadSignature, "", fmt.Errorf("the answered offer: %w", err))
	}
	p, err := parseElement(status, "status", lim)
	if err != nil {
		return fail(ReasonBadSignature, "", err)
	}
	s := p.status
	key, err := p.verifyWith(o.Keys, s.Iss)
	if err != nil {
		if errors.Is(err, errNoKey) {
			return fail(ReasonUntrustedKey, "iss", err)
		}
		return fail(ReasonBadSignature, "", err)
	}
	off := op.offer
	sender, receiver := off.Aud, off.Iss
	if s.State == StateCanceled {
		sender, receiver = off.Iss, off.Aud
	}
	// The D9 exception: an agent that is neither party, whose key the
	// trust configuration binds to its iss (checked above), says the offer
	// reached it by mistake. It answers offer.iss, like the delegate would.
	misdelivered := s.State == StateRejected && s.Reason == ReasonWrongAudience &&
		s.Iss != off.Aud && s.Iss != off.Iss
	if misdelivered {
		sender = s.Iss
	}
	if s.Iss != sender {
		return fail(ReasonPolicy, "iss", fmt.Errorf("a %q status must come from %q, not %q", s.State, sender, s.Iss))
	}
	if misdelivered && s.Aud != receiver {
		return fail(ReasonWrongAudience, "aud", fmt.Errorf("a wrong-audience rejection from %q, an agent the offer reached by mistake, must go to the offer's iss %q, not %q", s.Iss, receiver, s.Aud))
	}
	if s.Aud != receiver {
		return fail(ReasonWrongAudience, "aud", fmt.Errorf("status is for %q, the other party is %q", s.Aud, receiver))
	}
	if !s.Offer.Matches(offer.Octets) && (o.SameOffer == nil || !o.SameOffer(s.Offer)) {
		return fail(ReasonPolicy, "offer", fmt.Errorf("status answers offer %s, not %s", s.Offer, offer.Digest()))
	}
	if now := o.Now().Unix(); s.Iat > now+int64(o.Skew/time.Second) {
		return fail(ReasonStale, "iat", fmt.Errorf("issued %s in the future: iat %s is later than now %s plus skew", span(s.Iat-now), unixAt(s.Iat), unixAt(now)))
	}
	return &VerifiedStatus{Status: s, Key: key, Misdelivered: misdelivered}, nil
}

// UnsafeDecode returns the payload of a signed element without checking
// its signature: for display (inspect) and for a delegator reading back its
// own offer. Exactly one of the results is non-nil on success.
func UnsafeDecode(e Element) (*Offer, *Status, error) {
	if o, err := parseElement(e, "offer", defaultLimits); err == nil {
		return o.offer, nil, nil
	}
	p, err := parseElement(e, "status", defaultLimits)
	if err != nil {
		return nil, nil, err
	}
	return nil, p.status, nil
}

// VerifyElement checks the signed form and signature of one element (offer
// or status) against the keys bound to its iss, and returns the key that
// verified it. It checks nothing else (no freshness, audience or links).
func VerifyElement(e Element, keys KeySource) (*trust.Key, error) {
	p, err := parseElement(e, "offer", defaultLimits)
	iss := ""
	if err == nil {
		iss = p.offer.Iss
	} else if p, err = parseElement(e, "status", defaultLimits); err == nil {
		iss = p.status.Iss
	} else {
		return nil, err
	}
	return p.verifyWith(keys, iss)
}
