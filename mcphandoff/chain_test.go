package mcphandoff_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// unknown is an agent whose key the tester does not trust.
const unknown = "https://unknown.example"

// chainSigner signs the offers of a chain that ends at the tester: the
// outer offer is always the coder's, sent over the coder's own MCP
// session, so that the tester's status is addressed to the coder.
type chainSigner struct {
	e       *env
	signers map[string]*handoff.Signer // the env's, plus unknown's untrusted key
	dialog  string                     // the coder's MCP session: the outer offer's dialog
}

func newChainSigner(e *env, dialog string) *chainSigner {
	e.t.Helper()
	k, err := trust.GenerateKey()
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := handoff.NewSigner(k)
	if err != nil {
		e.t.Fatal(err)
	}
	signers := map[string]*handoff.Signer{unknown: s}
	for id, s := range e.signers {
		signers[id] = s
	}
	return &chainSigner{e: e, signers: signers, dialog: dialog}
}

// offer signs an offer from iss to aud whose prev names prev (nil: it
// starts a chain). Every offer is issued now, by the env's clock, and
// lives 300 s, so the timing check holds.
func (c *chainSigner) offer(iss, aud string, prev *handoff.Element) handoff.Element {
	c.e.t.Helper()
	now := ahead().Unix()
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "a2a-context-" + iss, Iss: iss, Aud: aud, Iat: now, Exp: now + 300}
	if aud == tester {
		o.Dialog = c.dialog
	}
	if prev != nil {
		d := prev.Digest()
		o.Prev = &d
	}
	el, err := c.signers[iss].SignOffer(o, c.e.form)
	if err != nil {
		c.e.t.Fatal(err)
	}
	return el
}

// tamper changes a signed offer's payload after signing ("other" becomes
// "0ther" in its iss or aud), leaving its signature as it was: a
// signature present but wrong. A JWS payload is base64url; a COSE payload
// is a byte string, changed in place (same length).
func tamper(t *testing.T, el handoff.Element) handoff.Element {
	t.Helper()
	from, to := []byte("other.example"), []byte("0ther.example")
	if el.Form == handoff.FormCOSE {
		if !bytes.Contains(el.Octets, from) {
			t.Fatal("tamper: nothing to change")
		}
		return handoff.Element{Form: el.Form, Octets: bytes.Replace(el.Octets, from, to, 1)}
	}
	parts := strings.Split(string(el.Octets), ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !bytes.Contains(payload, from) {
		t.Fatalf("tamper: payload %q: %v", payload, err)
	}
	parts[1] = base64.RawURLEncoding.EncodeToString(bytes.Replace(payload, from, to, 1))
	return handoff.Element{Form: el.Form, Octets: []byte(strings.Join(parts, "."))}
}

// outcome is what the tester answers: the state and reason of its signed
// status, and for accepted work the chain quality the tool saw.
type outcome struct {
	state   handoff.State
	reason  handoff.Reason
	quality handoff.ChainQuality
	check   *regexp.Regexp // for a rejection: the failed check, element and member, as the reply's text names them
}

// because is o with the failed check, literally as the reply names it.
func (o outcome) because(check string) outcome {
	o.check = regexp.MustCompile(regexp.QuoteMeta(check))
	return o
}

var (
	completedFull = outcome{state: handoff.StateCompleted, quality: handoff.ChainFull}
	brokenChain   = outcome{state: handoff.StateRejected, reason: handoff.ReasonBrokenChain}
	cycle         = outcome{state: handoff.StateRejected, reason: handoff.ReasonCycle}
	policy        = outcome{state: handoff.StateRejected, reason: handoff.ReasonPolicy}
	tooDeep       = outcome{state: handoff.StateRejected, reason: handoff.ReasonTooDeep}.because(`member "chain": chain of 17 elements exceeds the limit of 16`)
)

// sigFails is how the reply names the element whose signature is present
// but wrong.
func sigFails(i int) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`chain\[%d\]: (jws|cose): signature does not verify`, i))
}

// TestChainOverMCP carries chains that are whole, broken, cyclic, partial
// and unverifiable to a delegate over real MCP (the SDK's streamable HTTP
// client and handler on loopback), under the default policy and under
// "require full chain", for each signed form and Handoff encoding. Each
// case names the draft rule it checks ("Checking a Chain", D6-D8). A
// rejection is a tool error whose _meta carries the signed "rejected"
// (verified here as the coder would, D9) with the exact reason, the hop
// store keeps those octets, asking again gets them identically, and the
// tool never runs; accepted work runs once and the tool sees the chain
// quality (D7).
func TestChainOverMCP(t *testing.T) {
	// The base path: planner -> other -> coder -> tester. A and B are the
	// chain, C (the coder's offer to the tester) the outer offer.
	cases := []struct {
		name, rule string
		build      func(c *chainSigner) *handoff.Handoff
		lax        outcome // default policy
		strict     outcome // policy "require full chain"
	}{
		{"full chain", `"Checking a Chain" checks 1-6 hold, C[0] has no prev: quality full (D7)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{a, b}}
			}, completedFull, completedFull},
		{"hop removed: the chain lacks B, which C's prev names", `"Checking a Chain" check 2 (prev links): broken-chain (D6)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{a}}
			}, brokenChain.because(`member "prev": does not name chain[0]`), brokenChain.because(`member "prev": does not name chain[0]`)},
		{"hops reordered", `"Checking a Chain" check 2 (prev links): broken-chain (D6)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{b, a}}
			}, brokenChain.because(`chain[1]: member "prev": no prev`), brokenChain.because(`chain[1]: member "prev": no prev`)},
		{"element tampered: chain[0]'s aud changed after signing", `"Checking a Chain" check 1 (signature present but wrong): broken-chain (D6)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{tamper(t, a), b}}
			}, outcome{state: handoff.StateRejected, reason: handoff.ReasonBrokenChain, check: sigFails(0)}, outcome{state: handoff.StateRejected, reason: handoff.ReasonBrokenChain, check: sigFails(0)}},
		{"element tampered: chain[1]'s iss changed after signing", `"Checking a Chain" check 1 (signature present but wrong): broken-chain (D6)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{a, tamper(t, b)}}
			}, outcome{state: handoff.StateRejected, reason: handoff.ReasonBrokenChain, check: sigFails(1)}, outcome{state: handoff.StateRejected, reason: handoff.ReasonBrokenChain, check: sigFails(1)}},
		{"a chain carried with an offer that has no prev", `D6: a chain with an offer without prev is broken-chain`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, nil), Chain: []handoff.Element{a, b}}
			}, brokenChain.because(`member "prev": no prev`), brokenChain.because(`member "prev": no prev`)},
		{"cycle: the receiver is aud of chain[0] and iss of chain[1]", `"Checking a Chain" check 6: cycle (D8, own AgentId)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, tester, nil)
				b := c.offer(tester, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{a, b}}
			}, cycle.because(`chain[0]: member "aud": this receiver`), cycle.because(`chain[0]: member "aud": this receiver`)},
		{"cycle: the coder is iss twice", `"Checking a Chain" check 6: cycle (D8, an iss twice)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(coder, planner, nil)
				b := c.offer(planner, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{a, b}}
			}, cycle.because(`member "iss": "https://coder.example" is also iss of chain[0]`), cycle.because(`member "iss": "https://coder.example" is also iss of chain[0]`)},
		{"partial: the chain starts at B, whose prev names A (not carried)", `"Checking a Chain" check 5: partial; accepted unless policy requires a full chain (D7)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{b}}
			}, outcome{state: handoff.StateCompleted, quality: handoff.ChainPartial}, policy.because("a full chain is required, the chain is partial")},
		{"prev without a chain", `D7: an offer with prev and no chain passes the default policy, not "require full chain"`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b)}
			}, outcome{state: handoff.StateCompleted, quality: handoff.ChainAbsent}, policy.because("a full chain is required and none was carried")},
		{"unverifiable: chain[0]'s iss has no trusted key", `"Checking a Chain" check 1: untrusted key is unverifiable, not a rejection; policy decides (D6, D7)`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(unknown, other, nil)
				b := c.offer(other, coder, &a)
				return &handoff.Handoff{Offer: c.offer(coder, tester, &b), Chain: []handoff.Element{a, b}}
			}, outcome{state: handoff.StateCompleted, quality: handoff.ChainUnverifiable}, policy.because("a full chain is required, the chain is unverifiable")},
		{"too deep: 17 elements", `D6: the length first, before any element is parsed: too-deep`,
			func(c *chainSigner) *handoff.Handoff {
				a := c.offer(planner, other, nil)
				chain := make([]handoff.Element, handoff.DefaultLimits().MaxChain+1)
				for i := range chain {
					chain[i] = a
				}
				return &handoff.Handoff{Offer: c.offer(coder, tester, &a), Chain: chain}
			}, tooDeep, tooDeep},
	}
	for _, m := range matrix {
		for _, strict := range []bool{false, true} {
			pol := "default policy"
			if strict {
				pol = "require full chain"
			}
			t.Run(m.name+"/"+pol, func(t *testing.T) {
				e := newEnvWith(t, m.form, m.enc, envOptions{requireFullChain: strict})
				_, cs := e.connect(e.dl, m.enc, "coder-token")
				signer := newChainSigner(e, cs.ID())
				for _, c := range cases {
					want := c.lax
					if strict {
						want = c.strict
					}
					t.Run(c.name, func(t *testing.T) {
						t.Logf("rule: %s", c.rule)
						checkChainCall(t, e, cs, m.enc, c.build(signer), want)
					})
				}
			})
		}
	}
}

// checkChainCall sends h over cs as the coder and checks the tester's
// answer against want.
func checkChainCall(t *testing.T, e *env, cs *mcp.ClientSession, enc handoff.Encoding, h *handoff.Handoff, want outcome) {
	t.Helper()
	ctx := context.Background()
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil {
		t.Fatal(err)
	}
	v, err := mcphandoff.HandoffValue(h, enc)
	if err != nil {
		t.Fatal(err)
	}
	params := callCarrying("ok", v)
	runs := e.runs.Load()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	st := verifiedStatus(t, e, res, h.Offer)
	if st.State != want.state || st.Reason != want.reason {
		t.Fatalf("status %s/%s, want %s/%s; result %q", st.State, st.Reason, want.state, want.reason, textOf(res))
	}
	rec, err := e.dstore.Get(ctx, coder, o.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rec.Status, verifiedOctets(t, res)) {
		t.Fatal("the status in _meta is not the one the hop store keeps")
	}
	if want.state != handoff.StateRejected {
		if res.IsError || e.runs.Load() != runs+1 || textOf(res) != "all tests passed" {
			t.Fatalf("accepted work: IsError %v, runs %d (was %d), result %q", res.IsError, e.runs.Load(), runs, textOf(res))
		}
		if hop := wait(t, e.entered, "the tool to run"); hop != o.Hop {
			t.Fatalf("the tool ran under hop %s, want %s", hop, o.Hop)
		}
		e.mu.Lock()
		q := e.quality[o.Hop]
		e.mu.Unlock()
		if q != want.quality {
			t.Fatalf("the tool saw chain quality %s, want %s", q, want.quality)
		}
		return
	}
	// A rejection, as this package maps it: a tool error, the reason in
	// its text, the tool not run, the hop recorded rejected.
	if !res.IsError {
		t.Fatal("a rejection is not a tool error")
	}
	if !strings.HasPrefix(textOf(res), "handoff rejected ("+string(want.reason)+"): ") || want.check == nil || !want.check.MatchString(textOf(res)) {
		t.Fatalf("the rejection's text does not name %s and %q: %q", want.reason, want.check, textOf(res))
	}
	if e.runs.Load() != runs {
		t.Fatal("the tool ran for a rejected offer")
	}
	if rec.State != store.Rejected {
		t.Fatalf("record state %s, want rejected", rec.State)
	}
	// draft "Asking Again": the same call again is a retransmission, never
	// processed again: the identical octets, still a tool error, no run.
	again, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(verifiedOctets(t, again), verifiedOctets(t, res)) || !again.IsError || e.runs.Load() != runs {
		t.Fatalf("asking again: IsError %v, runs %d, identical octets %v", again.IsError, e.runs.Load(),
			bytes.Equal(verifiedOctets(t, again), verifiedOctets(t, res)))
	}
}

// verifiedStatus reads the status in res's _meta and verifies it as the
// coder would (D9): signed by the tester, to the coder, naming the offer.
func verifiedStatus(t *testing.T, e *env, res *mcp.CallToolResult, offer handoff.Element) *handoff.Status {
	t.Helper()
	sv, ok := res.Meta[mcphandoff.Key]
	if !ok {
		t.Fatalf("no status in the result's _meta: %q", textOf(res))
	}
	el, _, err := mcphandoff.StatusFrom(map[string]any{mcphandoff.Key: sv})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := handoff.VerifyStatus(el, offer, handoff.StatusOptions{Keys: e.keys})
	if err != nil {
		t.Fatalf("the status does not verify: %v", err)
	}
	if st := vs.Status; st.Iss != tester || st.Aud != coder || !st.Offer.Equal(offer.Digest()) || el.Form != e.form {
		t.Fatalf("status iss %s aud %s offer %s form %v", st.Iss, st.Aud, st.Offer, el.Form)
	}
	return vs.Status
}

func verifiedOctets(t *testing.T, res *mcp.CallToolResult) []byte {
	t.Helper()
	el, _, err := mcphandoff.StatusFrom(res.Meta)
	if err != nil {
		t.Fatal(err)
	}
	return el.Octets
}
