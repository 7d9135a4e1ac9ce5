package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quantumlearningmachines/handoff/trust"
)

// Outcome is what became of a received offer.
type Outcome string

// The outcomes of Receive.
const (
	// Accepted: every check passed; the delegate may take the work and
	// send "accepted".
	Accepted Outcome = "accepted"
	// Rejected: a check failed; Result.Reason is the status reason.
	Rejected Outcome = "rejected"
	// Retransmission: the same offer for a remembered (iss, hop): the
	// same octets, or other octets with the same signed content
	// (Result.Copy, D5); never processed again (draft "Asking Again").
	Retransmission Outcome = "retransmission"
	// Equivocation: a different offer (other signed content, D5) for a
	// remembered (iss, hop); it is not accepted and gets no status (draft
	// "Forks, Concurrency, and Equivocation").
	Equivocation Outcome = "equivocation"
)

// ChainQuality says what the receiver learned about the path back to the
// origin (D7).
type ChainQuality string

// The chain qualities.
const (
	ChainAbsent       ChainQuality = "absent"
	ChainFull         ChainQuality = "full"
	ChainPartial      ChainQuality = "partial"
	ChainUnverifiable ChainQuality = "unverifiable"
	ChainUnchecked    ChainQuality = "unchecked"
)

// RefOutcome is what step 7 found for one reference. There are four honest
// outcomes; "verified" is never given without performing the check.
type RefOutcome string

// The reference outcomes (issue 5; reported by `handoff verify`).
const (
	RefVerified     RefOutcome = "verified"
	RefMismatch     RefOutcome = "mismatch"
	RefUnverifiable RefOutcome = "unverifiable"
	RefNotChecked   RefOutcome = "not-checked"
)

// RefCheck is the step 7 hook: it checks the offer's references and
// returns one outcome per entry of o.Refs, in order. It returns an error
// wrapping ErrRefMismatch or ErrUnverifiableRef (any other error is
// reported as unverifiable-ref) when a reference that local policy
// requires failed; the outcomes are kept in the Result either way. It is
// called only for an offer that passed steps 1-6. Package refs provides
// the checker.
type RefCheck func(ctx context.Context, o *Offer) ([]RefOutcome, error)

// NoSkew, as Options.Skew or StatusOptions.Skew, allows no clock skew at
// all; a zero Skew means the default of D4 (60 s).
const NoSkew time.Duration = -1

// EffectiveSkew is the clock skew a Skew option stands for: the default
// of D4 (60 s) for 0, none for NoSkew, else skew itself.
func EffectiveSkew(skew time.Duration) time.Duration {
	switch skew {
	case 0:
		return 60 * time.Second
	case NoSkew:
		return 0
	}
	return skew
}

// Options configure a Receiver. Zero values take the defaults of D4.
type Options struct {
	Me               string        // this receiver's AgentId (step 2)
	Keys             KeySource     // the trust configuration (step 1)
	Skew             time.Duration // clock skew allowed; 0 means the default 60 s, NoSkew none
	MaxLifetime      time.Duration // max exp - iat; default 300 s
	Limits           Limits        // size bounds; MaxChain is the chain limit (default 16)
	RequireFullChain bool          // step 6 policy (D7)
	// Origins are the AgentIds this receiver trusts to start a chain,
	// for RequireFullChain (draft "Truncated Chains": a receiver that
	// needs to know the origin requires a full chain whose first element
	// is signed by an origin it trusts). With RequireFullChain and
	// Origins, an offer is accepted only when its chain's first offer
	// (the offer itself, when it has no prev) was issued by one of them;
	// empty: any agent with a trusted key may start a chain.
	Origins []string
	// AdmitCallback admits the one re-entry the draft lets local policy
	// admit (Checking a Chain, check 6: "a callback to the original
	// requester"): this receiver is the iss of the chain's first offer,
	// and the work comes back to it. Any other appearance of the
	// receiver in the chain, and any AgentId that is iss twice, is still
	// a cycle. Default false: every re-entry is a cycle (D8).
	AdmitCallback bool
	Memory        ReplayMemory // (iss, hop) memory; default an in-process Memory
	// ChainCache, when set, remembers the signed elements this receiver
	// (and any other sharing it) verified, offers and chain elements,
	// keyed by their digest, the trust's generation and the bounds, so
	// that a chain prefix is verified once. It is used only when the
	// trust has a generation: TrustGeneration, or Keys being a
	// *trust.Config itself. Nil: every element is verified on every
	// receive. A cold chain's signatures are verified across up to
	// GOMAXPROCS goroutines, cache or not.
	ChainCache *ChainCache
	// TrustGeneration, for a ChainCache with a KeySource other than a
	// *trust.Config (a reloading wrapper, say), identifies the set of keys
	// Keys answers from at the moment it is called. The contract:
	//   - 0 means "none": the cache is not used for that receive;
	//   - it changes whenever Keys could answer differently, and never
	//     returns to a value it left (trust.Config.Generation numbers
	//     every Config's states apart, process-wide: pass on the current
	//     Config's);
	//   - receivers sharing one ChainCache report the same generation
	//     only when their Keys answer alike: a wrapper that hides or adds
	//     keys must not report its inner Config's.
	// Derive it from a trust.Config's Generation (there is no other
	// source of process-wide values); an empty Config has none (0).
	// Nil: the generation of Keys when it is a *trust.Config, else none.
	TrustGeneration func() uint64
	// CheckGrant compares the credential presented with the hop (the
	// host protocol carries it) against an offer's grant; nil: grant is
	// not checked. It runs at step 7 for an offer that has a grant, and an
	// error rejects the offer with "policy". MatchGrant is the comparison.
	CheckGrant GrantCheck
	Now        func() time.Time
	CheckRefs  RefCheck // step 7; nil checks no reference
	// Since, when set, is when the replay memory begins: a delegate that
	// lost its memory (a restart without durable records, a store opened
	// fresh, records dropped) rejects an offer it does not remember whose
	// iat is not after the second of Since with reason "replay", since it cannot tell
	// whether it has seen it (draft "Replay and Freshness"). Once the
	// maximum lifetime has passed such offers are stale anyway.
	Since time.Time
}

// Receiver runs the delegate's receiving checks (draft "Receiving an
// Offer", steps 1-7, with "Checking a Chain" and "Freshness and Replay").
// It is safe for concurrent use.
type Receiver struct {
	o Options
}

// NewReceiver validates the options and returns a Receiver.
func NewReceiver(o Options) (*Receiver, error) {
	if o.Me == "" {
		return nil, errors.New("handoff: receiver needs its own AgentId (Options.Me)")
	}
	if o.Keys == nil {
		return nil, errors.New("handoff: receiver needs a trust configuration (Options.Keys)")
	}
	if (o.Skew < 0 && o.Skew != NoSkew) || o.MaxLifetime < 0 {
		return nil, errors.New("handoff: skew and max lifetime must not be negative (for no skew, use NoSkew)")
	}
	o.Skew = EffectiveSkew(o.Skew)
	if o.MaxLifetime == 0 {
		o.MaxLifetime = 300 * time.Second
	}
	o.Limits = o.Limits.withDefaults()
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Memory == nil {
		o.Memory = NewMemory(o.Now)
	}
	return &Receiver{o: o}, nil
}

// Result is the verdict on one received Handoff. With a ChainCache, parts
// of it are shared with the cache: see ChainElement.
type Result struct {
	Outcome Outcome
	Reason  Reason      // for Rejected; ReasonEquivocation for Equivocation
	Err     *CheckError // the failed check, for Rejected and Equivocation

	Handoff     *Handoff // as decoded; nil if it could not be
	OfferDigest *Digest  // handoff digest of the offer, when its octets are known
	Offer       *Offer   // the offer's payload, once it passed step 1 (verified)
	Key         *trust.Key

	// Remembered is the digest first remembered for (iss, hop), for
	// Retransmission and Equivocation.
	Remembered *Digest
	// Copy: a Retransmission whose octets differ from the remembered
	// offer's (Remembered is not OfferDigest) but whose signed content is
	// the same (D5): a malleated signature, an edited COSE unprotected
	// header, or the issuer's own second signing of the same payload. The
	// hop is the first offer's; an answer to this copy names OfferDigest.
	Copy bool

	Chain        []ChainElement // the checked chain, oldest first, once step 6 ran to the end
	ChainQuality ChainQuality

	// Refs holds one outcome per reference of the offer, in order, once
	// the offer reached step 7 (all RefNotChecked without a CheckRefs
	// hook); nil before that.
	Refs []RefOutcome
}

// ChainElement is one checked chain element: its decoded payload, and the
// key that verified it, or nil when no trusted key was found (unverifiable).
//
// With a ChainCache, treat every decoded payload in a Result as read-only:
// an element found in the cache shares its Offer (and all it points to)
// and its Key with the cache and other Results, and an offer the receive
// verified (Result.Offer, a chain element verified in that receive)
// shares its Refs, Extra and Obo.Extra with the entry it became. The
// cache's look-ups and the checks between elements read private copies,
// so what a caller writes into a Result changes no other receive's
// verdict, only what other Results show. The element octets of a chain
// read warm (see ChainCache) alias the octets the Handoff was read from,
// which the caller owns: they change if those do.
type ChainElement struct {
	Element Element
	Offer   *Offer
	Key     *trust.Key
}

// Receive runs the checks on a Handoff as received (JSON or CBOR), with the
// dialog identifier the host protocol message carries ("" when it carries
// none). The Result is always returned; err is its *CheckError when the
// outcome is Rejected or Equivocation, or an error of the replay memory
// (then the Result is nil and nothing was decided). With a ChainCache, the
// Result's chain octets may alias b (see ParseHandoff): keep b unchanged
// while the Result is in use.
func (r *Receiver) Receive(ctx context.Context, b []byte, dialog string) (*Result, error) {
	h, err := r.ParseHandoff(b)
	return r.ReceiveParsed(ctx, h, err, dialog)
}

// ParseHandoff is ParseHandoff under this receiver's Limits, for a
// carrier that reads a request's Handoff before it passes it to
// ReceiveParsed: with a ChainCache, a JSON Handoff whose whole chain the
// cache holds is read without its chain's text (the warm read, see
// ChainCache), and the Handoff carries what was found, for this
// receiver's ReceiveParsed: what was found is used once, and only when the
// Handoff's offer and chain still hold the octets read (another receiver,
// a second receive of it, or a Handoff whose offer or elements were
// replaced or written into since is received in full). A chain read so
// keeps its octets in b, where they were read (ParseHandoff copies them):
// keep b unchanged while the Handoff, or the Result it is received into,
// is in use. It returns what ParseHandoff returns for b.
func (r *Receiver) ParseHandoff(b []byte) (*Handoff, error) {
	h, w := r.warm(b)
	if h == nil {
		var err error
		if h, err = ParseHandoff(b, r.o.Limits); err != nil {
			return h, err
		}
	}
	if w != nil { // the chain found whole, or only the offer's parse to keep
		h.warm = &warmBox{}
		h.warm.w.Store(w)
	}
	return h, nil
}

// ReceiveParsed is Receive for a Handoff the caller has already decoded:
// h and parseErr are exactly what ParseHandoff returned for the octets
// received (h nil or not, with its error), so that a carrier that reads
// the Handoff to route a request decodes it once per request (issue 13).
// A Handoff decoded from more octets than this receiver's Handoff bound
// is rejected with "policy", as Receive would have; one built in memory
// (not by ParseHandoff) is taken as it is.
func (r *Receiver) ReceiveParsed(ctx context.Context, h *Handoff, parseErr error, dialog string) (*Result, error) {
	var w *warmChain
	if h != nil && parseErr == nil {
		w = h.warm.take(r, h)
	}
	return r.receive(ctx, h, parseErr, dialog, w)
}

// receive is ReceiveParsed, with what this receiver's ParseHandoff found
// when it read h (w nil when it found nothing, or read another Handoff).
func (r *Receiver) receive(ctx context.Context, h *Handoff, parseErr error, dialog string, w *warmChain) (*Result, error) {
	res := &Result{ChainQuality: ChainUnchecked}
	now := r.o.Now()
	lim := r.o.Limits

	reject := func(reason Reason, step, index int, member string, err error) (*Result, error) {
		ce := &CheckError{Reason: reason, Step: step, Index: index, Member: member, Err: err}
		if res.Offer != nil {
			ce.Hop = res.Offer.Hop
		}
		res.Outcome, res.Reason, res.Err = Rejected, reason, ce
		return res, ce
	}
	fromMember := func(step, index int, err error) (*Result, error) {
		var me *memberError
		if errors.As(err, &me) {
			return reject(me.reason, step, index, me.member, me.err)
		}
		return reject(ReasonBadSignature, step, index, "", err)
	}

	// Step 1: the Handoff, then the offer's signed form (D1 (a), D3).
	err := parseErr
	if h != nil && h.size > lim.MaxHandoff {
		// Parsed under a larger bound than this receiver's: as ParseHandoff
		// would have refused it, read nothing of it (D7: unchecked).
		return fromMember(1, OfferIndex, overBound("", "Handoff of %d octets exceeds the limit of %d", h.size, lim.MaxHandoff))
	}
	res.Handoff = h
	// The offer's digest is known whenever its octets are, even when the
	// checks fail; a parsed element shares its hashing with the signature
	// check (parsed.digest).
	digestOnly := func() {
		if h != nil && h.Offer.Form != FormInvalid && h.Offer.Octets != nil {
			d := h.Offer.Digest()
			res.OfferDigest = &d
		}
	}
	if h != nil && (h.Chain == nil || len(h.Chain) == 0 && parseErr == nil) { // an empty chain built in memory is none
		// The input decoded as a map with no chain member: "absent",
		// whatever else is wrong with it (D7).
		res.ChainQuality = ChainAbsent
	}
	if err != nil {
		digestOnly()
		return fromMember(1, OfferIndex, err)
	}
	var p parsed
	var cache *cacheView
	if w != nil {
		// Receiver.warm parsed this offer (from the same octets: see there).
		p, err, cache = w.p, w.perr, w.v
	} else {
		p, err = parseElement(h.Offer, "offer", lim)
		cache = r.cacheView()
	}
	if err != nil {
		digestOnly()
		return fromMember(1, OfferIndex, err)
	}
	od, content := p.digests(h.Offer) // D5: the signed content too, for step 4
	res.OfferDigest = &od
	o := p.offer
	// D1 (b), (c): a key bound to iss, then the signature.
	key, err := p.verifyWith(r.o.Keys, o.Iss)
	if err != nil {
		if errors.Is(err, errNoKey) {
			return reject(ReasonUntrustedKey, 1, OfferIndex, "iss", err)
		}
		return reject(ReasonBadSignature, 1, OfferIndex, "", err)
	}
	res.Offer, res.Key = o, key
	if cache != nil {
		// The offer is verified: when the next hop of the same work comes
		// back here with it in its chain, it is found. Only the element's
		// signature and form are remembered; the checks below run on
		// every receive.
		cache.remember(od, Element{Form: p.form(), Octets: h.Offer.Octets}, o, key)
	}

	// Step 2: audience.
	if o.Aud != r.o.Me {
		return reject(ReasonWrongAudience, 2, OfferIndex, "aud", fmt.Errorf("offer is for %q, this receiver is %q", o.Aud, r.o.Me))
	}

	// A remembered (iss, hop) skips step 3 (draft step 3, D4) and is a
	// retransmission or equivocation (step 4, D5). The memory is read only
	// when it can change the verdict: a fresh offer issued after the
	// memory began goes straight to the atomic Remember of step 4, which
	// finds a remembered pair just as a lookup would, so the common case
	// costs one write and no read.
	digest := *res.OfferDigest
	seen := Seen{Digest: digest, Content: content}
	stale := r.fresh(o, now)
	// iat has whole seconds: an offer issued in the second the memory
	// began may have been seen just before, so that second counts as lost.
	lost := !r.o.Since.IsZero() && o.Iat <= r.o.Since.Unix()
	if stale != nil || lost {
		if first, ok, err := r.o.Memory.Lookup(ctx, o.Iss, o.Hop); err != nil {
			return nil, fmt.Errorf("handoff: replay memory: %w", err)
		} else if ok {
			return r.seen(res, first, seen)
		}
	}

	// Step 3: freshness (D4).
	if stale != nil {
		return reject(ReasonStale, 3, OfferIndex, stale.member, stale)
	}

	// Step 4: an offer the memory may have lost cannot be told from a
	// replay; then remember the pair (D5), atomically.
	if lost {
		return reject(ReasonReplay, 4, OfferIndex, "iat", fmt.Errorf("iat %s is not after the second this receiver's memory began (%s): it may have seen the offer before it "+
			"began (a new memory, or one that lost its records, refuses offers issued up to the end of its first second); a new offer signed now is taken", unixAt(o.Iat), unixAt(r.o.Since.Unix())))
	}
	keep := time.Unix(o.Exp, 0).Add(r.o.Skew)
	first, stored, err := r.o.Memory.Remember(ctx, o.Iss, o.Hop, h.Offer, seen, keep)
	if ce, ok := err.(*CheckError); ok && ce != nil && ce.Reason != "" && ce.Reason != ReasonEquivocation {
		// The memory's refusal (ReplayMemory.Remember): a rejection here,
		// not a failure of the receive.
		return reject(ce.Reason, 4, OfferIndex, ce.Member, ce.Err)
	}
	if err != nil {
		return nil, fmt.Errorf("handoff: replay memory: %w", err)
	}
	if !stored {
		return r.seen(res, first, seen)
	}

	// Step 5: dialog.
	if dialog != "" && o.Dialog != dialog {
		return reject(ReasonPolicy, 5, OfferIndex, "dialog", fmt.Errorf("offer is for dialog %q, the host message is in %q", o.Dialog, dialog))
	}

	// Step 6: the chain (draft "Checking a Chain", D6-D8).
	var origin string     // the iss of the chain's first offer
	if len(h.Chain) > 0 { // an empty chain built in memory is none (the parser refuses one)
		chain, q, first, ce := r.checkChain(h, o, w)
		if ce != nil {
			return reject(ce.Reason, 6, ce.Index, ce.Member, ce.Err)
		}
		res.Chain, res.ChainQuality, origin = chain, q, first
	} else if o.Prev != nil && r.o.RequireFullChain {
		return reject(ReasonPolicy, 6, OfferIndex, "chain", errors.New("a full chain is required and none was carried"))
	}
	if r.o.RequireFullChain && o.Prev != nil && res.ChainQuality != ChainFull {
		return reject(ReasonPolicy, 6, OfferIndex, "chain", fmt.Errorf("a full chain is required, the chain is %s", res.ChainQuality))
	}
	if r.o.RequireFullChain && len(r.o.Origins) > 0 {
		// The chain is full here (or the offer starts it): its first
		// offer's iss is the origin.
		at := OfferIndex
		if o.Prev != nil && len(res.Chain) > 0 {
			at = 0 // origin is chain[0]'s iss, as checked
		} else {
			origin = o.Iss
		}
		if !slices.Contains(r.o.Origins, origin) {
			return reject(ReasonPolicy, 6, at, "iss", fmt.Errorf("the chain starts at %q, which is not an origin this receiver trusts", origin))
		}
	}

	// Step 7: the credential the grant names, and the references that
	// local policy requires.
	if o.Grant != nil && r.o.CheckGrant != nil {
		if err := r.o.CheckGrant(ctx, *o.Grant); err != nil {
			return reject(ReasonPolicy, 7, OfferIndex, "grant", err)
		}
	}
	res.Refs = make([]RefOutcome, len(o.Refs))
	for i := range res.Refs {
		res.Refs[i] = RefNotChecked
	}
	if r.o.CheckRefs != nil {
		outs, err := r.o.CheckRefs(ctx, o)
		if len(outs) == len(res.Refs) {
			res.Refs = outs
		} else if err == nil {
			err = fmt.Errorf("%w: the reference check returned %d outcomes for %d refs", ErrUnverifiableRef, len(outs), len(o.Refs))
		}
		if err != nil {
			reason := ReasonUnverifiableRef
			if errors.Is(err, ErrRefMismatch) {
				reason = ReasonRefMismatch
			}
			return reject(reason, 7, OfferIndex, "refs", err)
		}
	}
	res.Outcome = Accepted
	return res, nil
}

// seen classifies an offer whose (iss, hop) is remembered (D5).
func (r *Receiver) seen(res *Result, first, this Seen) (*Result, error) {
	return res.Classify(first, this)
}

// Classify makes res, the Result of a verified offer whose (iss, hop) is
// remembered as first, a Retransmission or an Equivocation by D5: the
// same handoff digest is a retransmission; other octets with the same
// signed content are a retransmission too (Copy); other signed content is
// equivocation, returned as its *CheckError too. this is the offer's own
// digests; a first.Content that is zero (unknown) never matches. Receive calls it; so may a delegate that finds the hop claimed
// by another process after Receive (a lost race).
func (res *Result) Classify(first, this Seen) (*Result, error) {
	d := first.Digest
	res.Remembered = &d
	res.Copy = false
	// A memory that knows no content digest (zero) proves no copy.
	same := len(first.Content.Val) > 0 && first.Content.Equal(this.Content)
	if first.Digest.Equal(this.Digest) || same {
		res.Outcome, res.Reason, res.Err = Retransmission, "", nil
		res.Copy = !first.Digest.Equal(this.Digest)
		return res, nil
	}
	ce := &CheckError{Reason: ReasonEquivocation, Step: 4, Hop: res.Offer.Hop, Index: OfferIndex, Member: "hop",
		Err: fmt.Errorf("(iss %q, hop %s) was first seen with offer %s, this is offer %s, whose signed content differs", res.Offer.Iss, res.Offer.Hop, first.Digest, this.Digest)}
	res.Outcome, res.Reason, res.Err = Equivocation, ReasonEquivocation, ce
	return res, ce
}

type freshErr struct {
	member string
	msg    string
}

func (e *freshErr) Error() string { return e.msg }

// fresh is step 3 (D4).
func (r *Receiver) fresh(o *Offer, now time.Time) *freshErr {
	n := now.Unix()
	switch {
	case o.Exp <= o.Iat:
		return &freshErr{"exp", fmt.Sprintf("exp %s is not later than iat %s", unixAt(o.Exp), unixAt(o.Iat))}
	case o.Iat-int64(r.o.Skew/time.Second) > n: // not n + skew, which a far --now overflows
		return &freshErr{"iat", fmt.Sprintf("issued %s in the future: iat %s is later than now %s plus skew %v", span(o.Iat-n), unixAt(o.Iat), unixAt(n), r.o.Skew)}
	case o.Exp <= n:
		return &freshErr{"exp", fmt.Sprintf("expired %s ago: exp %s is not later than now %s", span(n-o.Exp), unixAt(o.Exp), unixAt(n))}
	case o.Exp-o.Iat > int64(r.o.MaxLifetime/time.Second):
		return &freshErr{"exp", fmt.Sprintf("lifetime %d s (%s) exceeds the maximum of %v", o.Exp-o.Iat, span(o.Exp-o.Iat), r.o.MaxLifetime)}
	}
	return nil
}
