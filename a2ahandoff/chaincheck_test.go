package a2ahandoff_test

import (
	"slices"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

const reviewerID = "https://reviewer.example/agent"

// addAgent gives w one more trusted agent.
func addAgent(t testing.TB, w *world, id string) {
	t.Helper()
	k, s := newKey(t)
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.keys.Add(id, tk); err != nil {
		t.Fatal(err)
	}
	w.signers[id] = s
	w.tokens["token-of-"+id] = id
}

// flipAt changes one octet (one base64url character of a JWS) at i.
func flipAt(el handoff.Element, i int) handoff.Element {
	b := slices.Clone(el.Octets)
	if el.Form == handoff.FormJWS {
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
	} else {
		b[i] ^= 0x01
	}
	return handoff.Element{Form: el.Form, Octets: b}
}

// digest is el's digest, as an offer's prev names it.
func digest(el handoff.Element) *handoff.Digest { d := el.Digest(); return &d }

// elem is an offer from iss to aud issued at iat in the upstream dialog,
// linked to prev: one element of a chain (draft "Checking a Chain").
func elem(iss, aud string, iat int64, prev *handoff.Digest) handoff.Offer {
	return handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-upstream", Iss: iss, Aud: aud, Iat: iat, Exp: iat + 120, Prev: prev}
}

// A chain carried over A2A is checked by the delegate before the agent's
// code runs (draft "Checking a Chain", D6-D8; step 6 of "Receiving an
// Offer"). A rejected chain ends the task REJECTED (mapping table) with the
// signed "rejected" and its reason, recorded for the hop (D5: the offer
// passed steps 1-5); an accepted one runs the agent, which sees the chain
// quality (D7). The require-full-chain policy turns partial, unverifiable
// and absent (with a prev) into "policy".
//
// The path: assistant -> reviewer (C0, no prev) -> planner (C1, prev C0)
// -> coder (the offer O, prev C1), sent by the planner to the coder.
func TestChainChecksOverA2A(t *testing.T) {
	for _, f := range formats[:2] { // a JSON Handoff (JWS) and a CBOR one (COSE)
		t.Run(f.name, func(t *testing.T) {
			w := newWorld(t)
			addAgent(t, w, reviewerID)
			lax := w.serve(t, coderID, memStore(), f.form, nil)
			full := w.serve(t, coderID, memStore(), f.form, func(c *a2ahandoff.ServerConfig) { c.Delegate.Options.RequireFullChain = true })

			now := time.Now().Unix()
			sign := func(by string, o handoff.Offer) handoff.Element { t.Helper(); return w.sign(t, by, o, f.form) }
			c0 := sign(assistantID, elem(assistantID, reviewerID, now-30, nil))
			c1 := sign(reviewerID, elem(reviewerID, plannerID, now-20, digest(c0)))
			// The chain's first element from an agent nobody trusts.
			u0 := sign(malloryID, elem(malloryID, reviewerID, now-30, nil))
			u1 := sign(reviewerID, elem(reviewerID, plannerID, now-20, digest(u0)))
			// C1 whose aud is not the offer's iss (continuity).
			d1 := sign(reviewerID, elem(reviewerID, assistantID, now-20, digest(c0)))
			// A path through the planner twice (cycle).
			y0 := sign(plannerID, elem(plannerID, reviewerID, now-30, nil))
			y1 := sign(reviewerID, elem(reviewerID, plannerID, now-20, digest(y0)))

			// offer is the planner's offer to the coder, prev as given, in a
			// dialog of its own.
			offer := func(prev *handoff.Digest) (handoff.Element, string) {
				o := elem(plannerID, coderID, now-10, prev)
				o.Dialog = "ctx-" + handoff.NewHop()
				return sign(plannerID, o), o.Dialog
			}
			jws := f.form == handoff.FormJWS
			tamperSig := func(el handoff.Element) handoff.Element {
				if jws {
					return flipAt(el, len(el.Octets)-3)
				}
				return flipAt(el, len(el.Octets)-5)
			}
			tamperPayload := func(el handoff.Element) handoff.Element {
				if jws {
					return flipAt(el, slices.Index(el.Octets, '.')+8) // inside the payload segment
				}
				return flipAt(el, len(el.Octets)/2)
			}

			cases := []struct {
				name, rule string
				srv        *server
				build      func() (handoff.Element, []handoff.Element, string) // offer, chain, dialog
				reason     handoff.Reason                                      // "" : accepted
				quality    handoff.ChainQuality                                // for an accepted offer
			}{
				{"full chain", "Checking a Chain; D7 full", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{c0, c1}, d
				}, "", handoff.ChainFull},
				{"full chain, full chain required", "D7 policy", full, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{c0, c1}, d
				}, "", handoff.ChainFull},
				{"intermediate hop removed (C1 dropped)", "Checking a Chain check 2; D6 prev links", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{c0}, d
				}, handoff.ReasonBrokenChain, ""},
				{"intermediate hop removed, full chain required", "D6 before the D7 policy", full, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{c0}, d
				}, handoff.ReasonBrokenChain, ""},
				{"hops reordered", "Checking a Chain check 2", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{c1, c0}, d
				}, handoff.ReasonBrokenChain, ""},
				{"chain element's signature tampered", "Checking a Chain check 1; D6 wrong signature", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{c0, tamperSig(c1)}, d
				}, handoff.ReasonBrokenChain, ""},
				{"chain element's payload tampered", "Checking a Chain check 1; D6 wrong signature or not well-formed", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{tamperPayload(c0), c1}, d
				}, handoff.ReasonBrokenChain, ""},
				{"continuity broken (C1.aud is not the offer's iss)", "Checking a Chain check 3", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(d1))
					return o, []handoff.Element{c0, d1}, d
				}, handoff.ReasonBrokenChain, ""},
				{"chain with an offer that has no prev", "D6", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(nil)
					return o, []handoff.Element{c0, c1}, d
				}, handoff.ReasonBrokenChain, ""},
				{"the planner twice on the path", "Checking a Chain check 6; D8", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(y1))
					return o, []handoff.Element{y0, y1}, d
				}, handoff.ReasonCycle, ""},
				{"start of the chain dropped: partial, accepted", "Checking a Chain check 5; D7 partial", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{c1}, d
				}, "", handoff.ChainPartial},
				{"partial, full chain required", "Receiving an Offer step 6; D7 policy", full, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, []handoff.Element{c1}, d
				}, handoff.ReasonPolicy, ""},
				{"first element's key not trusted: unverifiable, accepted", "Checking a Chain check 1; D6, D7 unverifiable", lax, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(u1))
					return o, []handoff.Element{u0, u1}, d
				}, "", handoff.ChainUnverifiable},
				{"unverifiable, full chain required", "D7 policy", full, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(u1))
					return o, []handoff.Element{u0, u1}, d
				}, handoff.ReasonPolicy, ""},
				{"prev but no chain, full chain required", "D7 policy", full, func() (handoff.Element, []handoff.Element, string) {
					o, d := offer(digest(c1))
					return o, nil, d
				}, handoff.ReasonPolicy, ""},
			}
			for _, tc := range cases {
				t.Run(tc.name+" ("+tc.rule+")", func(t *testing.T) {
					el, chain, dialog := tc.build()
					m := offerMessage(t, "complete", dialog, &handoff.Handoff{Offer: el, Chain: chain}, f.enc)
					runs := tc.srv.agent.runs.Load()
					task, sts := sendForTask(t, a2aClient(t, tc.srv.url, "token-of-"+plannerID), m)
					o := hopOf(t, el)
					rec := recorded(t, tc.srv, o.Iss, o.Hop)

					if tc.reason != "" {
						// Mapping table: rejected -> REJECTED; the agent never ran.
						if task.Status.State != a2a.TaskStateRejected {
							t.Fatalf("task %s, want rejected", task.Status.State)
						}
						if n := tc.srv.agent.runs.Load(); n != runs {
							t.Fatalf("the agent ran on a rejected chain")
						}
						if len(sts) != 1 {
							t.Fatalf("%d statuses, want the signed rejected", len(sts))
						}
						s := w.verified(t, sts[0], el) // D9: iss coder, aud planner, offer = O's digest
						if s.State != handoff.StateRejected || s.Reason != tc.reason || s.Iss != coderID || s.Aud != plannerID || !s.Offer.Equal(el.Digest()) || len(s.Refs) != 0 {
							t.Fatalf("status %+v, want rejected/%s from %s to %s for this offer", s, tc.reason, coderID, plannerID)
						}
						// D5: past steps 1-5, the rejection is the hop's record,
						// and asking again gets these octets.
						if rec.State != store.Rejected || !slices.Equal(rec.Status, sts[0].Octets) {
							t.Fatalf("record %s, want rejected with the status sent", rec.State)
						}
						again := oneMessage(t, a2aClient(t, tc.srv.url, "token-of-"+plannerID), intoTask(m, task), false, task.ID)
						if resent, _ := a2ahandoff.Statuses(again); len(resent) != 1 || !slices.Equal(resent[0].Octets, sts[0].Octets) {
							t.Fatal("asked again into its task, the rejection is not resent as the identical octets (Asking Again)")
						}
						return
					}
					if task.Status.State != a2a.TaskStateCompleted {
						t.Fatalf("task %s (%q), want completed", task.Status.State, textOf(task.Status.Message))
					}
					if got := statesOf(t, w, sts, el); !slices.Equal(got, []string{"accepted", "completed"}) {
						t.Fatalf("statuses %v, want accepted then completed", got)
					}
					if n := tc.srv.agent.runs.Load(); n != runs+1 {
						t.Fatalf("the agent ran %d times, want once", n-runs)
					}
					tc.srv.agent.mu.Lock()
					got := tc.srv.agent.got
					tc.srv.agent.mu.Unlock()
					if got == nil || got.ID != o.Hop || got.Result == nil || got.Result.ChainQuality != tc.quality || len(got.Handoff.Chain) != len(chain) {
						t.Fatalf("the agent saw %+v, want hop %s with chain quality %s", got, o.Hop, tc.quality)
					}
					if rec.State != store.Completed {
						t.Fatalf("record %s, want completed", rec.State)
					}
				})
			}
		})
	}
}
