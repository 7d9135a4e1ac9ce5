package handoff

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/trust"
)

// fixture is a set of agents with keys, a trust configuration that binds
// all of them but "outsider", and a fixed clock.
type fixture struct {
	t       testing.TB
	signers map[string]*Signer
	keys    *trust.Config
	now     int64
}

var agentNames = []string{"origin", "planner", "coder", "tester", "reviewer", "me", "outsider"}

func newFixture(t testing.TB) *fixture {
	f := &fixture{t: t, signers: map[string]*Signer{}, keys: trust.New(), now: 1_800_000_000}
	for _, n := range agentNames {
		k, err := trust.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewSigner(k)
		if err != nil {
			t.Fatal(err)
		}
		f.signers[n] = s
		if n == "outsider" {
			continue
		}
		tk, err := trust.NewKey(&k.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.keys.Add(n, tk); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// offer returns a fresh offer payload from iss to aud in dialog "d".
func (f *fixture) offer(iss, aud string) *Offer {
	return &Offer{Hop: NewHop(), Dialog: "d", Iss: iss, Aud: aud, Iat: f.now - 10, Exp: f.now + 200}
}

func (f *fixture) sign(signer string, o *Offer, form Form) Element {
	el, err := f.signers[signer].SignOffer(o, form)
	if err != nil {
		f.t.Fatal(err)
	}
	return el
}

// path builds the Handoff of a chain through agents, e.g. origin -> planner
// -> coder -> me; forms gives each hop's signed form in turn (cycled).
func (f *fixture) path(forms []Form, agents ...string) *Handoff {
	var h *Handoff
	for i := 0; i+1 < len(agents); i++ {
		o := f.offer(agents[i], agents[i+1])
		if h != nil {
			d := h.Offer.Digest()
			o.Prev = &d
		}
		el := f.sign(agents[i], o, forms[i%len(forms)])
		if h == nil {
			h = &Handoff{Offer: el}
		} else {
			h = h.PassOn(el)
		}
	}
	return h
}

// resign builds a Handoff whose outer offer is o (already edited), signed by
// signer, carrying chain.
func (f *fixture) resign(signer string, o *Offer, form Form, chain []Element) *Handoff {
	return &Handoff{Offer: f.sign(signer, o, form), Chain: chain}
}

func (f *fixture) receiver(mut func(*Options)) *Receiver {
	o := Options{Me: "me", Keys: f.keys, Now: func() time.Time { return time.Unix(f.now, 0) }}
	if mut != nil {
		mut(&o)
	}
	r, err := NewReceiver(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func encode(t testing.TB, h *Handoff, enc Encoding) []byte {
	b, err := h.Encode(enc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decodeOnly returns the payload of an element for tests that edit it.
func payloadOf(t testing.TB, e Element) *Offer {
	o, _, err := UnsafeDecode(e)
	if err != nil || o == nil {
		t.Fatalf("UnsafeDecode: %v", err)
	}
	return o
}

type receiveCase struct {
	rule    string // the draft or SPEC.md rule checked
	build   func(f *fixture, forms []Form) *Handoff
	raw     func(f *fixture, forms []Form, enc Encoding) []byte // instead of build
	opts    func(*Options)
	dialog  string
	outcome Outcome
	reason  Reason
	quality ChainQuality
	index   *int // expected CheckError.Index, when it matters
}

func idx(i int) *int { return &i }

func receiveCases() []receiveCase {
	return []receiveCase{
		{rule: "Receiving an Offer: all checks pass, no chain", outcome: Accepted, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "me") }},
		{rule: "Checking a Chain: full chain verified (D7 full)", outcome: Accepted, quality: ChainFull,
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "origin", "planner", "coder", "me") }},
		{rule: "Checking a Chain check 5: C[0] has a prev (D7 partial)", outcome: Accepted, quality: ChainPartial,
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "coder", "me")
				return &Handoff{Offer: h.Offer, Chain: h.Chain[1:]}
			}},
		{rule: "Checking a Chain check 1: untrusted key for C[i].iss makes the chain unverifiable (D7)", outcome: Accepted, quality: ChainUnverifiable,
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "outsider", "planner", "me") }},
		{rule: "D7: unverifiable outranks partial", outcome: Accepted, quality: ChainUnverifiable,
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "outsider", "planner", "me")
				return &Handoff{Offer: h.Offer, Chain: h.Chain[1:]}
			}},
		{rule: "D7: an offer with a prev and no chain is absent", outcome: Accepted, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "me")
				return &Handoff{Offer: h.Offer}
			}},
		{rule: "Step 1 / D1(a): payload type must be offer", outcome: Rejected, reason: ReasonBadSignature, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff {
				st := &Status{Offer: DigestOf([]byte("x")), Iss: "planner", Aud: "me", Iat: f.now, State: StateAccepted}
				el, err := f.signers["planner"].SignStatus(st, fm[0])
				if err != nil {
					f.t.Fatal(err)
				}
				return &Handoff{Offer: el}
			}},
		{rule: "Step 1 / D1(c): signature that does not verify", outcome: Rejected, reason: ReasonBadSignature, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff {
				return &Handoff{Offer: corrupt(f.sign("planner", f.offer("planner", "me"), fm[0]))}
			}},
		{rule: "Step 1 / D1(b): no key bound to iss", outcome: Rejected, reason: ReasonUntrustedKey, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "outsider", "me") }},
		{rule: "Step 1 / D3: malformed Handoff (empty chain)", outcome: Rejected, reason: ReasonBadSignature, quality: ChainUnchecked,
			raw: func(f *fixture, fm []Form, enc Encoding) []byte {
				h := f.path(fm, "planner", "me")
				if enc == CBOR {
					b := encode(f.t, h, CBOR)
					// {"offer": x} -> {"offer": x, "chain": []}
					b[0]++
					return append(b, append([]byte{0x65}, append([]byte("chain"), 0x80)...)...)
				}
				return []byte(`{"offer":"` + h.Offer.Text() + `","chain":[]}`)
			}},
		{rule: "Step 1 / D3: not a Handoff at all", outcome: Rejected, reason: ReasonBadSignature, quality: ChainUnchecked,
			raw: func(f *fixture, fm []Form, enc Encoding) []byte { return []byte("\x00garbage") }},
		{rule: "SPEC bounds: element larger than the limit is policy", outcome: Rejected, reason: ReasonPolicy, quality: ChainAbsent,
			opts:  func(o *Options) { o.Limits.MaxElement = 200 },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "me") }},
		{rule: "Step 2: aud must be this receiver", outcome: Rejected, reason: ReasonWrongAudience, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "coder") }},
		{rule: "Freshness: exp not later than now (D4)", outcome: Rejected, reason: ReasonStale, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff {
				o := f.offer("planner", "me")
				o.Iat, o.Exp = f.now-100, f.now
				return f.resign("planner", o, fm[0], nil)
			}},
		{rule: "Freshness: iat later than now plus skew (D4)", outcome: Rejected, reason: ReasonStale, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff {
				o := f.offer("planner", "me")
				o.Iat, o.Exp = f.now+61, f.now+100
				return f.resign("planner", o, fm[0], nil)
			}},
		{rule: "Freshness: exp minus iat beyond the maximum lifetime (D4)", outcome: Rejected, reason: ReasonStale, quality: ChainAbsent,
			build: func(f *fixture, fm []Form) *Handoff {
				o := f.offer("planner", "me")
				o.Iat, o.Exp = f.now-1, f.now+300
				return f.resign("planner", o, fm[0], nil)
			}},
		{rule: "Step 5: dialog must equal the host message's dialog", outcome: Rejected, reason: ReasonPolicy, quality: ChainAbsent, dialog: "other",
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "me") }},
		{rule: "Checking a Chain check 7: too many elements (too-deep)", outcome: Rejected, reason: ReasonTooDeep, quality: ChainUnchecked,
			opts:  func(o *Options) { o.Limits.MaxChain = 2 },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "origin", "planner", "coder", "tester", "me") }},
		{rule: "Checking a Chain check 2: an intermediate hop removed", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked, index: idx(1),
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "coder", "tester", "me")
				return &Handoff{Offer: h.Offer, Chain: []Element{h.Chain[0], h.Chain[2]}}
			}},
		{rule: "Checking a Chain check 2: elements reordered", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked,
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "coder", "me")
				return &Handoff{Offer: h.Offer, Chain: []Element{h.Chain[1], h.Chain[0]}}
			}},
		{rule: "D6: a chain carried with an offer that has no prev", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked, index: idx(OfferIndex),
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "me")
				o := payloadOf(f.t, h.Offer)
				o.Prev = nil
				return f.resign("planner", o, fm[1%len(fm)], h.Chain)
			}},
		{rule: "D6: a prev whose alg is not implemented fails the link check", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked,
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "me")
				o := payloadOf(f.t, h.Offer)
				o.Prev = &Digest{Alg: "sha3-256", Val: o.Prev.Val}
				return f.resign("planner", o, fm[1%len(fm)], h.Chain)
			}},
		{rule: "Checking a Chain check 1: a chain element whose signature is wrong", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked, index: idx(0),
			build: func(f *fixture, fm []Form) *Handoff {
				o := f.offer("origin", "planner")
				bad := corrupt(f.sign("origin", o, fm[0]))
				d := bad.Digest()
				o2 := f.offer("planner", "me")
				o2.Prev = &d
				return f.resign("planner", o2, fm[1%len(fm)], []Element{bad})
			}},
		{rule: "D6: a chain element that is not a signed offer at all", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked, index: idx(0),
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "me")
				return &Handoff{Offer: h.Offer, Chain: []Element{{Form: FormInvalid, Octets: []byte("not a jws!")}}}
			}},
		{rule: "Checking a Chain check 3: continuity (C[i-1].aud = C[i].iss)", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked,
			build: func(f *fixture, fm []Form) *Handoff {
				first := f.sign("origin", f.offer("origin", "coder"), fm[0])
				d := first.Digest()
				o := f.offer("planner", "me")
				o.Prev = &d
				return f.resign("planner", o, fm[1%len(fm)], []Element{first})
			}},
		{rule: "Checking a Chain check 4: C[i-1].iat later than C[i].iat", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked,
			build: func(f *fixture, fm []Form) *Handoff {
				o1 := f.offer("origin", "planner")
				o1.Iat = f.now - 5
				first := f.sign("origin", o1, fm[0])
				d := first.Digest()
				o := f.offer("planner", "me")
				o.Iat, o.Prev = f.now-6, &d
				return f.resign("planner", o, fm[1%len(fm)], []Element{first})
			}},
		{rule: "Checking a Chain check 4: C[i].iat after C[i-1].exp plus skew", outcome: Rejected, reason: ReasonBrokenChain, quality: ChainUnchecked,
			build: func(f *fixture, fm []Form) *Handoff {
				o1 := f.offer("origin", "planner")
				o1.Iat, o1.Exp = f.now-250, f.now-200
				first := f.sign("origin", o1, fm[0])
				d := first.Digest()
				o := f.offer("planner", "me")
				o.Iat, o.Exp, o.Prev = f.now-139, f.now+100, &d
				return f.resign("planner", o, fm[1%len(fm)], []Element{first})
			}},
		{rule: "Checking a Chain check 6: an AgentId is iss twice (cycle, D8)", outcome: Rejected, reason: ReasonCycle, quality: ChainUnchecked,
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "coder", "planner", "me") }},
		{rule: "Checking a Chain check 6: the receiver already in the chain (cycle, D8)", outcome: Rejected, reason: ReasonCycle, quality: ChainUnchecked,
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "origin", "me", "planner", "me") }},
		{rule: "Checking a Chain check 6: a callback to the original requester, without the policy that admits it (cycle, D8)", outcome: Rejected, reason: ReasonCycle, quality: ChainUnchecked,
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "me", "planner", "me") }},
		{rule: "Checking a Chain check 6: local policy MAY admit a known re-entry: a callback to the original requester", outcome: Accepted, quality: ChainFull,
			opts:  func(o *Options) { o.AdmitCallback = true },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "me", "planner", "coder", "me") }},
		{rule: "Checking a Chain check 6: AdmitCallback admits no re-entry but the callback to the origin", outcome: Rejected, reason: ReasonCycle, quality: ChainUnchecked,
			opts:  func(o *Options) { o.AdmitCallback = true },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "origin", "me", "planner", "me") }},
		{rule: "Checking a Chain check 6: AdmitCallback admits only a first offer verified as this receiver's, which begins the chain", outcome: Rejected, reason: ReasonCycle, quality: ChainUnchecked,
			opts: func(o *Options) { o.AdmitCallback = true },
			build: func(f *fixture, fm []Form) *Handoff {
				// C[0] claims to be this receiver's, signed by an outsider.
				first := f.sign("outsider", f.offer("me", "planner"), fm[0])
				d := first.Digest()
				o := f.offer("planner", "me")
				o.Prev = &d
				return f.resign("planner", o, fm[1%len(fm)], []Element{first})
			}},
		{rule: "Checking a Chain check 6: AdmitCallback still rejects an AgentId that is iss twice", outcome: Rejected, reason: ReasonCycle, quality: ChainUnchecked,
			opts:  func(o *Options) { o.AdmitCallback = true },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "me", "planner", "coder", "planner", "me") }},
		{rule: "Step 6 policy: a full chain is required, the chain is partial (D7)", outcome: Rejected, reason: ReasonPolicy, quality: ChainPartial,
			opts: func(o *Options) { o.RequireFullChain = true },
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "coder", "me")
				return &Handoff{Offer: h.Offer, Chain: h.Chain[1:]}
			}},
		{rule: "Step 6 policy: a full chain is required and none is carried (D7)", outcome: Rejected, reason: ReasonPolicy, quality: ChainAbsent,
			opts: func(o *Options) { o.RequireFullChain = true },
			build: func(f *fixture, fm []Form) *Handoff {
				h := f.path(fm, "origin", "planner", "me")
				return &Handoff{Offer: h.Offer}
			}},
		{rule: "D7: an offer with no prev passes require-full-chain with quality absent", outcome: Accepted, quality: ChainAbsent,
			opts:  func(o *Options) { o.RequireFullChain = true },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "me") }},
		{rule: "Step 6 policy: a full chain is required, the chain is unverifiable", outcome: Rejected, reason: ReasonPolicy, quality: ChainUnverifiable,
			opts:  func(o *Options) { o.RequireFullChain = true },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "outsider", "planner", "me") }},
		{rule: "Truncated Chains: a full chain whose first element is signed by a trusted origin (MUST)", outcome: Accepted, quality: ChainFull,
			opts:  func(o *Options) { o.RequireFullChain, o.Origins = true, []string{"origin"} },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "origin", "planner", "me") }},
		{rule: "Truncated Chains: a full chain that starts at an agent not among the trusted origins", outcome: Rejected, reason: ReasonPolicy, quality: ChainFull, index: idx(0),
			opts:  func(o *Options) { o.RequireFullChain, o.Origins = true, []string{"origin"} },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "coder", "planner", "me") }},
		{rule: "Truncated Chains: an offer that starts its own chain, from an agent not among the trusted origins", outcome: Rejected, reason: ReasonPolicy, quality: ChainAbsent,
			opts:  func(o *Options) { o.RequireFullChain, o.Origins = true, []string{"origin"} },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "me") }},
		{rule: "Truncated Chains: a delegator that drops the chain and presents itself as the start is not an origin", outcome: Rejected, reason: ReasonPolicy, quality: ChainAbsent,
			opts: func(o *Options) { o.RequireFullChain, o.Origins = true, []string{"origin"} },
			build: func(f *fixture, fm []Form) *Handoff {
				return &Handoff{Offer: f.sign("planner", f.offer("planner", "me"), fm[0])}
			}},
		{rule: "Truncated Chains: origins without require-full-chain change nothing", outcome: Accepted, quality: ChainFull,
			opts:  func(o *Options) { o.Origins = []string{"origin"} },
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "coder", "planner", "me") }},
		{rule: "On Behalf Of: the credential presented is the one grant names", outcome: Accepted, quality: ChainAbsent,
			opts: func(o *Options) {
				o.CheckGrant = func(_ context.Context, g Digest) error { return MatchGrant(g, []byte("Bearer-token-of-the-hop")) }
			},
			build: func(f *fixture, fm []Form) *Handoff {
				o := f.offer("planner", "me")
				g := DigestOf([]byte("Bearer-token-of-the-hop"))
				o.Grant = &g
				return &Handoff{Offer: f.sign("planner", o, fm[0])}
			}},
		{rule: "On Behalf Of: a credential that is not the one grant names", outcome: Rejected, reason: ReasonPolicy, quality: ChainAbsent,
			opts: func(o *Options) {
				o.CheckGrant = func(_ context.Context, g Digest) error { return MatchGrant(g, []byte("another-token")) }
			},
			build: func(f *fixture, fm []Form) *Handoff {
				o := f.offer("planner", "me")
				g := DigestOf([]byte("Bearer-token-of-the-hop"))
				o.Grant = &g
				return &Handoff{Offer: f.sign("planner", o, fm[0])}
			}},
		{rule: "Digest: a grant whose alg is not implemented counts as failed (MUST)", outcome: Rejected, reason: ReasonPolicy, quality: ChainAbsent,
			opts: func(o *Options) {
				o.CheckGrant = func(_ context.Context, g Digest) error { return MatchGrant(g, []byte("Bearer-token-of-the-hop")) }
			},
			build: func(f *fixture, fm []Form) *Handoff {
				o := f.offer("planner", "me")
				sum := DigestOf([]byte("Bearer-token-of-the-hop"))
				o.Grant = &Digest{Alg: "sha3-256", Val: sum.Val}
				return &Handoff{Offer: f.sign("planner", o, fm[0])}
			}},
		{rule: "On Behalf Of: an offer with no grant is not given to the grant check", outcome: Accepted, quality: ChainAbsent,
			opts: func(o *Options) {
				o.CheckGrant = func(context.Context, Digest) error { return errors.New("called for an offer with no grant") }
			},
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "me") }},
		{rule: "Step 7: a required reference that does not match", outcome: Rejected, reason: ReasonRefMismatch, quality: ChainAbsent,
			opts: func(o *Options) {
				o.CheckRefs = func(context.Context, *Offer) ([]RefOutcome, error) {
					return nil, fmt.Errorf("refs[0]: %w", ErrRefMismatch)
				}
			},
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "me") }},
		{rule: "Step 7: a required reference that cannot be checked", outcome: Rejected, reason: ReasonUnverifiableRef, quality: ChainAbsent,
			opts: func(o *Options) {
				o.CheckRefs = func(context.Context, *Offer) ([]RefOutcome, error) { return nil, errors.New("octets not available") }
			},
			build: func(f *fixture, fm []Form) *Handoff { return f.path(fm, "planner", "me") }},
	}
}

var formSets = map[string][]Form{
	"JWS":   {FormJWS},
	"COSE":  {FormCOSE},
	"mixed": {FormJWS, FormCOSE},
}

// TestReceive runs every case for JWS, COSE and mixed chains, each carried
// in a JSON and a CBOR Handoff.
func TestReceive(t *testing.T) {
	f := newFixture(t)
	for _, c := range receiveCases() {
		for fname, forms := range formSets {
			for _, enc := range []Encoding{JSON, CBOR} {
				t.Run(fmt.Sprintf("%s/%s/%v", c.rule, fname, enc), func(t *testing.T) {
					var b []byte
					if c.raw != nil {
						b = c.raw(f, forms, enc)
					} else {
						b = encode(t, c.build(f, forms), enc)
					}
					res, err := f.receiver(c.opts).Receive(context.Background(), b, c.dialog)
					if res == nil {
						t.Fatalf("no result: %v", err)
					}
					if res.Outcome != c.outcome || res.Reason != c.reason || res.ChainQuality != c.quality {
						t.Fatalf("got %s/%q/%s, want %s/%q/%s (err %v)", res.Outcome, res.Reason, res.ChainQuality, c.outcome, c.reason, c.quality, err)
					}
					if c.outcome == Accepted {
						if err != nil || res.Offer == nil || res.Key == nil {
							t.Fatalf("accepted with err %v, offer %v, key %v", err, res.Offer, res.Key)
						}
						return
					}
					if !errors.Is(err, c.reason.Sentinel()) {
						t.Fatalf("errors.Is(%v, %s) is false", err, c.reason)
					}
					var ce *CheckError
					if !errors.As(err, &ce) {
						t.Fatalf("error %T is not a *CheckError", err)
					}
					if c.index != nil && ce.Index != *c.index {
						t.Fatalf("fault at index %d, want %d: %v", ce.Index, *c.index, ce)
					}
				})
			}
		}
	}
}

// TestRetransmissionAndEquivocation checks step 4 and D5: the same octets
// again are a retransmission (also after exp, also in the other Handoff
// encoding); a different offer for the same (iss, hop) is equivocation,
// also after exp; a stale offer is not remembered.
func TestRetransmissionAndEquivocation(t *testing.T) {
	f := newFixture(t)
	for fname, forms := range formSets {
		t.Run(fname, func(t *testing.T) {
			r := f.receiver(nil)
			ctx := context.Background()
			o := f.offer("planner", "me")
			first := f.resign("planner", o, forms[0], nil)
			res, err := r.Receive(ctx, encode(t, first, JSON), "")
			if err != nil || res.Outcome != Accepted {
				t.Fatalf("first: %v %v", res.Outcome, err)
			}
			// "Freshness and Replay": the same octets, in CBOR, after exp.
			f2 := *f
			f2.now = o.Exp + 1000
			late := f2.receiver(func(opt *Options) { opt.Memory = r.o.Memory })
			res, err = late.Receive(ctx, encode(t, first, CBOR), "")
			if err != nil || res.Outcome != Retransmission || res.ChainQuality != ChainAbsent {
				t.Fatalf("retransmission: %v %v %v", res.Outcome, res.ChainQuality, err)
			}
			// D5: same (iss, hop), new octets with the same signed content
			// (a second signature over the same payload, in the same form):
			// a retransmission, a copy.
			second := f.resign("planner", o, forms[0], nil)
			res, err = late.Receive(ctx, encode(t, second, JSON), "")
			if err != nil || res.Outcome != Retransmission || !res.Copy || !res.Remembered.Equal(first.Offer.Digest()) {
				t.Fatalf("re-signed: %v copy %v %v", res.Outcome, res.Copy, err)
			}
			// Equivocation: same (iss, hop), other signed content (another
			// task; or, in the mixed set, the same payload in the other form).
			o2 := *o
			if len(forms) == 1 {
				o2.Task = "another task"
			}
			third := f.resign("planner", &o2, forms[len(forms)-1], nil)
			res, err = late.Receive(ctx, encode(t, third, JSON), "")
			if res.Outcome != Equivocation || res.Copy || !errors.Is(err, ErrEquivocation) || !res.Remembered.Equal(first.Offer.Digest()) {
				t.Fatalf("equivocation: %v %v", res.Outcome, err)
			}
			// D5: a stale offer is not remembered; after it, a fresh one with
			// the same hop is judged afresh.
			so := f.offer("planner", "me")
			so.Iat, so.Exp = f.now-400, f.now-300
			if res, _ := r.Receive(ctx, encode(t, f.resign("planner", so, forms[0], nil), JSON), ""); res.Reason != ReasonStale {
				t.Fatalf("stale: %v", res.Reason)
			}
			so.Iat, so.Exp = f.now, f.now+100
			if res, err := r.Receive(ctx, encode(t, f.resign("planner", so, forms[0], nil), JSON), ""); res.Outcome != Accepted {
				t.Fatalf("after stale: %v %v", res.Outcome, err)
			}
		})
	}
}

// TestConcurrentReceive: of many goroutines receiving one offer at once,
// exactly one accepts it (step 4, atomic Remember).
func TestConcurrentReceive(t *testing.T) {
	f := newFixture(t)
	r := f.receiver(nil)
	b := encode(t, f.path([]Form{FormJWS}, "planner", "me"), JSON)
	const n = 32
	out := make(chan Outcome, n)
	for range n {
		go func() {
			res, _ := r.Receive(context.Background(), b, "")
			out <- res.Outcome
		}()
	}
	counts := map[Outcome]int{}
	for range n {
		counts[<-out]++
	}
	if counts[Accepted] != 1 || counts[Retransmission] != n-1 {
		t.Fatalf("outcomes %v", counts)
	}
}

// TestKidSelection checks D10: the message's kid selects among the keys
// bound to iss; a kid that names no key bound to iss is untrusted-key.
func TestKidSelection(t *testing.T) {
	f := newFixture(t)
	extra, _ := trust.GenerateKey()
	tk, _ := trust.NewKey(&extra.PublicKey)
	if err := f.keys.Add("planner", tk); err != nil {
		t.Fatal(err)
	}
	for _, form := range []Form{FormJWS, FormCOSE} {
		o := f.offer("planner", "me")
		s, _ := NewSigner(extra)
		el, err := s.SignOffer(o, form)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.receiver(nil).Receive(context.Background(), encode(t, &Handoff{Offer: el}, JSON), "")
		if res.Outcome != Accepted || res.Key.Kid != tk.Kid {
			t.Fatalf("%v: second key of planner: %v %v", form, res.Outcome, err)
		}
		// The outsider's kid is bound to nobody.
		el = f.sign("outsider", f.offer("planner", "me"), form)
		res, err = f.receiver(nil).Receive(context.Background(), encode(t, &Handoff{Offer: el}, JSON), "")
		if !errors.Is(err, ErrUntrustedKey) {
			t.Fatalf("%v: unknown kid: %v %v", form, res.Outcome, err)
		}
	}
}

// TestStatus checks D9 for each state and each way a status can be wrong.
func TestStatus(t *testing.T) {
	f := newFixture(t)
	offer := f.sign("planner", f.offer("planner", "me"), FormJWS)
	other := f.sign("planner", f.offer("planner", "me"), FormJWS)
	opts := StatusOptions{Keys: f.keys, Now: func() time.Time { return time.Unix(f.now, 0) }}
	mk := func(signer, iss, aud string, st State, about Element, iat int64, form Form) Element {
		el, err := f.signers[signer].SignStatus(&Status{Offer: about.Digest(), Iss: iss, Aud: aud, Iat: iat, State: st, Reason: ReasonPolicy}, form)
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	cases := []struct {
		rule string
		el   Element
		want error
	}{
		{"D9: accepted from the delegate", mk("me", "me", "planner", StateAccepted, offer, f.now, FormJWS), nil},
		{"D9: completed from the delegate, COSE", mk("me", "me", "planner", StateCompleted, offer, f.now, FormCOSE), nil},
		{"D9: canceled from the delegator", mk("planner", "planner", "me", StateCanceled, offer, f.now, FormJWS), nil},
		{"D9: status.iss must be offer.aud", mk("planner", "planner", "me", StateCompleted, offer, f.now, FormJWS), ErrPolicy},
		{"D9: canceled must come from offer.iss", mk("me", "me", "planner", StateCanceled, offer, f.now, FormJWS), ErrPolicy},
		{"D9: status.aud must be the other party", mk("me", "me", "coder", StateFailed, offer, f.now, FormJWS), ErrWrongAudience},
		{"D9: status.offer must be the offer's digest", mk("me", "me", "planner", StateAccepted, other, f.now, FormJWS), ErrPolicy},
		{"D9: signature by the key bound to status.iss", corrupt(mk("me", "me", "planner", StateAccepted, offer, f.now, FormJWS)), ErrBadSignature},
		{"D10: a kid bound to another agent is untrusted-key", mk("coder", "me", "planner", StateAccepted, offer, f.now, FormCOSE), ErrUntrustedKey},
		{"D9: untrusted sender", mk("outsider", "outsider", "planner", StateAccepted, offer, f.now, FormJWS), ErrUntrustedKey},
		{"SPEC verify-status: iat later than now plus skew", mk("me", "me", "planner", StateAccepted, offer, f.now+61, FormJWS), ErrStale},
		{"D9: signed form with type status (an offer is not a status)", offer, ErrBadSignature},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			vs, err := VerifyStatus(c.el, offer, opts)
			if c.want == nil {
				if err != nil || vs == nil {
					t.Fatalf("want verified, got %v", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// corrupt flips one bit in the middle of an element's signature, keeping
// its encoding valid.
func corrupt(e Element) Element {
	b := append([]byte(nil), e.Octets...)
	if e.Form == FormJWS {
		i := len(b) - 20 // inside the base64url signature
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
	} else {
		b[len(b)-20] ^= 0x01 // the signature is the last 64 octets
	}
	return Element{Form: e.Form, Octets: b}
}

// TestSince checks the restart rule (draft "Replay and Freshness"): an
// offer not remembered whose iat is before the memory began is "replay";
// one issued after is judged as usual.
func TestSince(t *testing.T) {
	f := newFixture(t)
	since := time.Unix(f.now-5, 0)
	r := f.receiver(func(o *Options) { o.Since = since })
	old := f.offer("planner", "me") // iat = now - 10
	res, err := r.Receive(context.Background(), encode(t, f.resign("planner", old, FormJWS, nil), JSON), "")
	if !errors.Is(err, ErrReplay) || res.Reason != ReasonReplay {
		t.Fatalf("offer from before the restart: %v %v", res.Outcome, err)
	}
	fresh := f.offer("planner", "me")
	fresh.Iat = f.now - 1
	if res, err := r.Receive(context.Background(), encode(t, f.resign("planner", fresh, FormCOSE, nil), CBOR), ""); res.Outcome != Accepted {
		t.Fatalf("offer from after the restart: %v %v", res.Outcome, err)
	}
}

// D4: iat later than now + skew is stale. Skew 0 means the default (60 s);
// NoSkew means none at all; another negative skew is refused.
func TestSkewOptions(t *testing.T) {
	f := newFixture(t)
	ahead := func(secs int64) []byte {
		o := f.offer("planner", "me")
		o.Iat, o.Exp = f.now+secs, f.now+secs+100
		return encode(t, &Handoff{Offer: f.sign("planner", o, FormJWS)}, JSON)
	}
	cases := []struct {
		name  string
		skew  time.Duration
		ahead int64
		want  Outcome
	}{
		{"default skew, iat 60 s ahead (D4)", 0, 60, Accepted},
		{"default skew, iat 61 s ahead (D4)", 0, 61, Rejected},
		{"NoSkew, iat now (D4)", NoSkew, 0, Accepted},
		{"NoSkew, iat 1 s ahead (D4)", NoSkew, 1, Rejected},
		{"skew 5 s, iat 5 s ahead (D4)", 5 * time.Second, 5, Accepted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.receiver(func(o *Options) { o.Skew = c.skew })
			res, _ := r.Receive(context.Background(), ahead(c.ahead), "d")
			if res.Outcome != c.want || (c.want == Rejected && res.Reason != ReasonStale) {
				t.Fatalf("outcome %s %s, want %s", res.Outcome, res.Reason, c.want)
			}
		})
	}
	if _, err := NewReceiver(Options{Me: "me", Keys: f.keys, Skew: -2 * time.Second}); err == nil {
		t.Error("a negative skew other than NoSkew was accepted")
	}
	if EffectiveSkew(0) != 60*time.Second || EffectiveSkew(NoSkew) != 0 || EffectiveSkew(time.Second) != time.Second {
		t.Error("EffectiveSkew")
	}
	// VerifyStatus: a status issued 1 s ahead passes the default skew, not NoSkew.
	o := f.offer("planner", "me")
	offer := f.sign("planner", o, FormJWS)
	st, err := f.signers["me"].SignStatus(&Status{Offer: offer.Digest(), Iss: "me", Aud: "planner", Iat: f.now + 1, State: StateAccepted}, FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return time.Unix(f.now, 0) }
	if _, err := VerifyStatus(st, offer, StatusOptions{Keys: f.keys, Now: now}); err != nil {
		t.Errorf("default skew: %v", err)
	}
	if _, err := VerifyStatus(st, offer, StatusOptions{Keys: f.keys, Now: now, Skew: NoSkew}); err == nil {
		t.Error("NoSkew: a status issued 1 s ahead verified")
	}
}

// refusingMemory refuses every new pair at step 4 with its own policy, as
// the delegate's memory does for a sender that may not bring a new hop.
type refusingMemory struct {
	ReplayMemory
	why error
}

func (m refusingMemory) Remember(ctx context.Context, iss, hop string, offer Element, seen Seen, keep time.Time) (Seen, bool, error) {
	return Seen{}, false, &CheckError{Reason: ReasonPolicy, Err: m.why}
}

// Step 4 (ReplayMemory.Remember): a memory that refuses to remember an
// offer returns a *CheckError, and the offer is rejected at step 4 with
// its reason and cause, before steps 5-7 (here the dialog, which would
// be a step-5 rejection); any other error of the memory ends the receive.
func TestMemoryRefusesAtStep4(t *testing.T) {
	f := newFixture(t)
	why := errors.New("not from its iss")
	r := f.receiver(func(o *Options) { o.Memory = refusingMemory{ReplayMemory: NewMemory(nil), why: why} })
	b := encode(t, &Handoff{Offer: f.sign("planner", f.offer("planner", "me"), FormJWS)}, JSON)
	res, err := r.Receive(context.Background(), b, "another dialog")
	var ce *CheckError
	if res == nil || res.Outcome != Rejected || res.Reason != ReasonPolicy || !errors.As(err, &ce) || ce.Step != 4 || !errors.Is(err, why) || res.Offer == nil {
		t.Fatalf("%+v %v, want rejected (policy) at step 4 with the memory's cause and the verified offer", res, err)
	}
	broken := errors.New("disk on fire")
	var nilCheck *CheckError
	for _, fail := range []error{broken, nilCheck, &CheckError{Err: why}, &CheckError{Reason: ReasonEquivocation, Err: why}} {
		r = f.receiver(func(o *Options) { o.Memory = failingMemory{ReplayMemory: NewMemory(nil), err: fail} })
		if res, err := r.Receive(context.Background(), b, ""); res != nil || err == nil {
			t.Fatalf("memory error %#v: %+v %v, want the receive ended with the memory's error (no rejection without a rejection's reason)", fail, res, err)
		}
	}
}

// failingMemory fails every Remember with err.
type failingMemory struct {
	ReplayMemory
	err error
}

func (m failingMemory) Remember(context.Context, string, string, Element, Seen, time.Time) (Seen, bool, error) {
	return Seen{}, false, m.err
}
