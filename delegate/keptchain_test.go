package delegate_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// TestRecordKeepsTheChain: the hop's record keeps the chain its first
// offer came with (store.Record.Chain, ChainForms), oldest first, each
// element's octets exactly as received in its own form (this chain mixes
// COSE and JWS), so that an operator can draw it later: Record.Handoff,
// read from another handle on the store (a restart, a replica), rebuilds
// the Handoff as received, every element still readable. A later delivery
// of the offer with another chain changes nothing; an offer rejected for
// its chain (past step 4, so recorded) keeps the chain it was rejected
// for.
func TestRecordKeepsTheChain(t *testing.T) {
	for _, k := range d5Stores {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			w.addAgent("assistant")
			w.addAgent("reviewer")
			s, again := k.open(t, w)
			d := w.delegate(s, nil)

			// assistant -> reviewer -> planner -> coder: the Handoff
			// carries two offers as its chain.
			n := w.clock().Unix()
			sign := func(from, to string, f handoff.Form, prev *handoff.Element) handoff.Element {
				t.Helper()
				o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: from, Aud: to, Iat: n, Exp: n + 120}
				if prev != nil {
					dg := prev.Digest()
					o.Prev = &dg
				}
				el, err := w.signers[from].SignOffer(o, f)
				if err != nil {
					t.Fatal(err)
				}
				return el
			}
			first := sign("assistant", "reviewer", handoff.FormCOSE, nil)
			second := sign("reviewer", "planner", handoff.FormJWS, &first)
			offer := sign("planner", "coder", handoff.FormCOSE, &second)
			sent := &handoff.Handoff{Offer: offer, Chain: []handoff.Element{first, second}}
			b, err := sent.Encode(handoff.JSON)
			if err != nil {
				t.Fatal(err)
			}
			a, err := d.Receive(ctx, b, "ctx", "planner")
			if err != nil || a.Outcome != handoff.Accepted {
				t.Fatalf("Receive: %+v, %v; want accepted", a, err)
			}
			o, _, err := handoff.UnsafeDecode(offer)
			if err != nil {
				t.Fatal(err)
			}
			s = again()
			checkKept(t, s, o.Iss, o.Hop, sent)
			d = w.delegate(s, nil)

			// The same offer again with a chain of one: a retransmission;
			// the record keeps the first delivery's chain.
			b2, err := (&handoff.Handoff{Offer: offer, Chain: []handoff.Element{second}}).Encode(handoff.CBOR)
			if err != nil {
				t.Fatal(err)
			}
			if a, err := d.Receive(ctx, b2, "ctx", "planner"); err != nil || a.Outcome != handoff.Retransmission {
				t.Fatalf("the offer again: %+v, %v; want a retransmission", a, err)
			}
			checkKept(t, s, o.Iss, o.Hop, sent)

			// A chain that does not lead to its offer (its last element is
			// not the one the offer's prev names): rejected at the chain's
			// step, recorded, the chain kept as it came.
			broken := sign("planner", "coder", handoff.FormJWS, &first)
			sentBroken := &handoff.Handoff{Offer: broken, Chain: []handoff.Element{first, second}}
			b3, err := sentBroken.Encode(handoff.CBOR)
			if err != nil {
				t.Fatal(err)
			}
			a, err = d.Receive(ctx, b3, "ctx", "planner")
			if err != nil || a.Outcome != handoff.Rejected || a.Record == nil {
				t.Fatalf("a broken chain: %+v, %v; want rejected and recorded", a, err)
			}
			checkKept(t, s, a.Iss, a.Hop, sentBroken)
		})
	}
}

// checkKept checks that s's record of hop (iss, hop) rebuilds want.
func checkKept(t *testing.T, s store.Store, iss, hop string, want *handoff.Handoff) {
	t.Helper()
	r, err := s.Get(context.Background(), iss, hop)
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.Handoff()
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Chain) != len(want.Chain) {
		t.Fatalf("the record's Handoff has %d chain elements; want %d", len(h.Chain), len(want.Chain))
	}
	wants := slices.Concat(want.Chain, []handoff.Element{want.Offer})
	for i, el := range slices.Concat(h.Chain, []handoff.Element{h.Offer}) {
		w := wants[i]
		if el.Form != w.Form || !bytes.Equal(el.Octets, w.Octets) {
			t.Errorf("element %d of the record's Handoff: %v, %d octets; want %v, %d octets as received", i, el.Form, len(el.Octets), w.Form, len(w.Octets))
		}
		if _, _, err := handoff.UnsafeDecode(el); err != nil {
			t.Errorf("element %d of the record's Handoff does not decode: %v", i, err)
		}
	}
}
