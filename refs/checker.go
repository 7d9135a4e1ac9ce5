package refs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/quantumlearningmachines/handoff"
)

// Policy is the receiver's local policy for references (draft step 7:
// "check any references that local policy requires").
//
// A reference is required when RequireAll is set, when its kind is in
// RequireKinds, or when its loc's scheme is in RequireLocSchemes. A
// required reference is checked with everything the policy allows,
// fetching from loc if the octets were not supplied, and unless it is
// verified the offer is rejected: "ref-mismatch" for a mismatch,
// "unverifiable-ref" otherwise.
//
// A reference that is not required is checked only when what its check
// needs is already at hand (octets the host supplied, or for
// "learnlog-head" its proof and a trust configuration); it is never
// fetched, and its outcome, whatever it is, never rejects the offer. When
// nothing was at hand (a salt without its octets is not enough) it is
// "not-checked". A kind this package has no check for is "unverifiable",
// required or not.
type Policy struct {
	RequireAll        bool
	RequireKinds      []string // kinds as written: "digest", "learnlog-head", an absolute URI, ...
	RequireLocSchemes []string // loc schemes, compared case-insensitively

	// Keys is the trust configuration for the kinds that carry
	// signatures: the learnlog producers' keys and the transparency
	// services' keys.
	Keys handoff.KeySource
	// Services are the AgentIds of the transparency services whose keys
	// (in Keys) may sign a SCITT Receipt.
	Services []string
	// Producers are the AgentIds whose keys may sign a learnlog head.
	// Empty: the element's iss (for an offer, the delegator, which the
	// draft makes the record's producer).
	Producers []string

	// Fetch bounds fetching from loc; the zero value fetches nothing.
	Fetch FetchPolicy
}

// Checker checks context references under a Policy. It is safe for
// concurrent use. Its Check method is a handoff.RefCheck:
//
//	c, err := refs.NewChecker(refs.Policy{RequireAll: true})
//	r, err := handoff.NewReceiver(handoff.Options{..., CheckRefs: c.Check})
//	res, err := r.Receive(refs.WithMaterial(ctx, &refs.Material{Octets: ...}), wire, dialog)
type Checker struct {
	p     Policy
	fetch *fetcher
}

// NewChecker validates the policy and returns a Checker.
func NewChecker(p Policy) (*Checker, error) {
	for _, k := range p.RequireKinds {
		if !knownKind(k) && !handoff.IsAbsoluteURI(k) {
			return nil, fmt.Errorf("refs: required kind %q is neither a listed kind nor an absolute URI", k)
		}
	}
	p.RequireKinds = slices.Clone(p.RequireKinds)
	p.RequireLocSchemes = slices.Clone(p.RequireLocSchemes)
	for i, s := range p.RequireLocSchemes {
		p.RequireLocSchemes[i] = strings.ToLower(s)
	}
	p.Services = slices.Clone(p.Services)
	p.Producers = slices.Clone(p.Producers)
	f, err := newFetcher(p.Fetch)
	if err != nil {
		return nil, err
	}
	p.Fetch = f.p
	return &Checker{p: p, fetch: f}, nil
}

func knownKind(k string) bool {
	switch k {
	case handoff.KindDigest, handoff.KindSaltedDigest, handoff.KindSCITTReceipt, handoff.KindLearnlogHead:
		return true
	}
	return false
}

// Finding is what the check of one reference found.
type Finding struct {
	Outcome  handoff.RefOutcome
	Required bool // policy required it
	Fetched  bool // its octets came from loc
	// Err says why it is not verified (a *RefError); nil when verified
	// or not checked.
	Err error
}

// Findings hold one Finding per reference, in order.
type Findings []Finding

// Outcomes returns the outcome of each reference, in order.
func (fs Findings) Outcomes() []handoff.RefOutcome {
	out := make([]handoff.RefOutcome, len(fs))
	for i, f := range fs {
		out[i] = f.Outcome
	}
	return out
}

// Err returns the failures of the required references as RefErrors, or
// nil when every required reference is verified.
func (fs Findings) Err() error {
	var es RefErrors
	for _, f := range fs {
		var re *RefError
		if f.Required && f.Outcome != handoff.RefVerified && errors.As(f.Err, &re) {
			es = append(es, re)
		}
	}
	if es == nil {
		return nil
	}
	return es
}

// Check is the step 7 hook (a handoff.RefCheck): it checks o's references
// with the Material that WithMaterial put in ctx (none: nothing supplied)
// and returns one outcome per reference, and RefErrors when a required one
// is not verified. o is the verified offer; its iss is the sender for the
// fetch safeguards and the default learnlog producer.
func (c *Checker) Check(ctx context.Context, o *handoff.Offer) ([]handoff.RefOutcome, error) {
	fs := c.CheckRefs(ctx, o.Iss, o.Refs, MaterialFrom(ctx))
	return fs.Outcomes(), fs.Err()
}

// CheckRefs checks refs that sender (a verified iss) signed, with the
// material m (nil: none), under the policy.
func (c *Checker) CheckRefs(ctx context.Context, sender string, refs []handoff.ContextRef, m *Material) Findings {
	return c.check(ctx, sender, refs, m, false)
}

func (c *Checker) check(ctx context.Context, sender string, refs []handoff.ContextRef, m *Material, all bool) Findings {
	x := newIndex(m)
	fs := make(Findings, len(refs))
	b := &budget{f: c.fetch, parent: ctx}
	defer b.end()
	for i, r := range refs {
		req := all || c.required(r)
		out, fetched, err := c.checkOne(ctx, b, i, r, sender, &x, req)
		switch {
		case out == handoff.RefVerified && err != nil:
			out = handoff.RefUnverifiable // never "verified" with a doubt
		case out != handoff.RefVerified && out != handoff.RefNotChecked && err == nil:
			err = fmt.Errorf("the %s check found %q and gave no reason", r.Kind, out)
		}
		if out != handoff.RefVerified && out != handoff.RefMismatch && out != handoff.RefNotChecked {
			out = handoff.RefUnverifiable
		}
		f := Finding{Outcome: out, Required: req, Fetched: fetched}
		if err != nil {
			if out == handoff.RefNotChecked {
				out, f.Outcome = handoff.RefUnverifiable, handoff.RefUnverifiable
			}
			f.Err = &RefError{Index: i, Kind: r.Kind, Outcome: out, Err: err}
		}
		fs[i] = f
	}
	return fs
}

func (c *Checker) required(r handoff.ContextRef) bool {
	if c.p.RequireAll || slices.Contains(c.p.RequireKinds, r.Kind) {
		return true
	}
	if r.Loc != "" && len(c.p.RequireLocSchemes) > 0 {
		if u, err := url.Parse(r.Loc); err == nil && u.Scheme != "" {
			return slices.Contains(c.p.RequireLocSchemes, strings.ToLower(u.Scheme))
		}
	}
	return false
}

// checkOne checks reference i. It returns RefNotChecked with a nil error
// only when the reference is not required and nothing was at hand; every
// other outcome other than RefVerified comes with its reason.
func (c *Checker) checkOne(ctx context.Context, b *budget, i int, r handoff.ContextRef, sender string, x *index, required bool) (handoff.RefOutcome, bool, error) {
	_, haveOctets := x.octets(i)
	_, haveSalt := x.salt(i)
	atHand := haveOctets || haveSalt
	switch r.Kind {
	case handoff.KindDigest, handoff.KindSaltedDigest:
		salted := r.Kind == handoff.KindSaltedDigest
		if !required && !atHand && !(r.Dig.Alg == handoff.AlgSHA256 && x.byDigest(salted, r.Dig.Val)) {
			return handoff.RefNotChecked, false, nil
		}
		if r.Dig.Alg != handoff.AlgSHA256 {
			return handoff.RefUnverifiable, false, fmt.Errorf("%w: %q", ErrUnsupportedAlg, r.Dig.Alg)
		}
		return c.checkDigest(ctx, b, i, r, sender, x, salted, required)
	case handoff.KindLearnlogHead:
		if !required && (r.Proof == nil || c.p.Keys == nil) {
			return handoff.RefNotChecked, false, nil
		}
		if r.Dig.Alg != handoff.AlgSHA256 {
			return handoff.RefUnverifiable, false, fmt.Errorf("%w: %q", ErrUnsupportedAlg, r.Dig.Alg)
		}
		if c.p.Keys == nil {
			return handoff.RefUnverifiable, false, fmt.Errorf("%w: a learnlog head is signed by its producer", ErrNoTrust)
		}
		producers := c.p.Producers
		if len(producers) == 0 {
			producers = []string{sender}
		}
		out, err := checkLearnlogHead(r, c.p.Keys, producers)
		return out, false, err
	case handoff.KindSCITTReceipt:
		if !required && !haveOctets {
			return handoff.RefNotChecked, false, nil
		}
		if r.Dig.Alg != handoff.AlgSHA256 {
			return handoff.RefUnverifiable, false, fmt.Errorf("%w: %q", ErrUnsupportedAlg, r.Dig.Alg)
		}
		if c.p.Keys == nil {
			return handoff.RefUnverifiable, false, fmt.Errorf("%w: a receipt is signed by a transparency service", ErrNoTrust)
		}
		statement, ok := x.octets(i)
		fetched := false
		var ferr error
		if !ok {
			// Fetched like a digest reference's octets; nil when not obtained.
			if statement, ferr = b.fetch(r.Loc, sender); ferr == nil {
				fetched = true
			}
		}
		out, err := checkSCITTReceipt(r, statement, c.p.Keys, c.p.Services)
		if ferr != nil && out != handoff.RefVerified {
			// The statement's absence is the first reason; say which safeguard.
			return handoff.RefUnverifiable, false, ferr
		}
		return out, fetched, err
	}
	// Any other kind: this package has no check for it, so it is
	// "unverifiable" (issue 5: "unknown kinds are 'unverifiable' and
	// reported as such") whether or not policy requires it; only a
	// required one rejects (Findings.Err).
	if !handoff.IsAbsoluteURI(r.Kind) {
		return handoff.RefUnverifiable, false, fmt.Errorf("%w: %q is neither a listed kind nor an absolute URI", ErrUnsupportedKind, r.Kind)
	}
	return handoff.RefUnverifiable, false, fmt.Errorf("%w: %q", ErrUnsupportedKind, r.Kind)
}

// checkDigest checks a "digest" or "salted-digest" reference with a sha-256
// dig: octets by index, else an Object by digest, else, only when required,
// fetched from loc. A reference that is not required is never fetched: with
// only its salt at hand (no octets) it is not checked.
func (c *Checker) checkDigest(ctx context.Context, b *budget, i int, r handoff.ContextRef, sender string, x *index, salted, required bool) (handoff.RefOutcome, bool, error) {
	salt, haveSalt := x.salt(i)
	switch {
	case salted && haveSalt && len(salt) != SaltSize:
		return handoff.RefUnverifiable, false, fmt.Errorf("%w: it is %d octets", ErrSaltSize, len(salt))
	case !salted && haveSalt:
		return handoff.RefUnverifiable, false, ErrSaltForDigest
	}
	octets, ok := x.octets(i)
	fetched := false
	if !ok {
		if x.byDigest(salted, r.Dig.Val) {
			// The object's hash was computed when the material was indexed
			// and equals dig: that is the check.
			return handoff.RefVerified, false, nil
		}
		if !required {
			// Policy does not require it: never fetched (FetchPolicy),
			// so with no octets at hand there is nothing to check.
			return handoff.RefNotChecked, false, nil
		}
		if salted && !haveSalt {
			// Without the salt no octets can be checked; do not fetch.
			return handoff.RefUnverifiable, false, fmt.Errorf("%w (octets: %v)", ErrNoSalt, ErrNoOctets)
		}
		var err error
		if octets, err = b.fetch(r.Loc, sender); err != nil {
			return handoff.RefUnverifiable, false, err
		}
		fetched = true
	}
	if salted && !haveSalt {
		return handoff.RefUnverifiable, fetched, ErrNoSalt
	}
	var sum [32]byte
	if salted {
		sum = [32]byte(SaltedDigest(salt, octets).Val)
	} else {
		sum = sha256.Sum256(octets)
	}
	if !bytes.Equal(sum[:], r.Dig.Val) {
		got := handoff.Digest{Alg: handoff.AlgSHA256, Val: sum[:]}
		return handoff.RefMismatch, fetched, fmt.Errorf("dig is %s, the %s octets hash to %s", r.Dig, map[bool]string{false: "supplied", true: "fetched"}[fetched], got)
	}
	return handoff.RefVerified, fetched, nil
}
