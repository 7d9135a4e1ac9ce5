package storetest

import (
	"bytes"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- The chain the first offer came with --------------------------------

// Claim keeps the chain the first offer came with (Record.Chain and
// ChainForms) exactly: none is nil and an empty one empty, every element's
// octets byte for byte (every byte value, an empty element, one past 64
// KiB) with its own form, in order; Get, List and a later Claim of the hop
// return it, and Record.Handoff rebuilds the Handoff from it.
func testClaimKeepsTheChain(t *testing.T, s store.Store) {
	ctx := t.Context()
	every := Offer("every", 0) // every byte value
	large := bytes.Repeat(every, 300)
	cases := []struct {
		hop   string
		chain [][]byte
		forms []handoff.Form
	}{
		{"chain-none", nil, nil},
		{"chain-empty", [][]byte{}, []handoff.Form{}},
		{"chain-one", [][]byte{every}, []handoff.Form{handoff.FormCOSE}},
		{"chain-several", [][]byte{every, []byte("eyJhbGciOiJFUzI1NiJ9.e30.c2ln"), {}, large, {0}, every[:1]},
			[]handoff.Form{handoff.FormJWS, handoff.FormJWS, handoff.FormCOSE, handoff.FormCOSE, handoff.FormInvalid, handoff.FormCOSE}},
	}
	for i, c := range cases {
		r := NewRecord(c.hop, store.Accepted, 3*i)
		r.Chain, r.ChainForms = c.chain, c.forms
		mustClaim(t, s, r)
		checkGet(t, s, c.hop, r)
		got, inserted, err := s.Claim(ctx, NewRecord(c.hop, store.Received, 3*i+2))
		if err != nil || inserted {
			t.Fatalf("second Claim(%s) = inserted %v, %v; want the existing record", c.hop, inserted, err)
		}
		checkRecord(t, "second Claim("+c.hop+") result", got, r)

		h, err := mustGet(t, s, c.hop).Handoff()
		if err != nil {
			t.Fatalf("Handoff of %s: %v", c.hop, err)
		}
		if h.Offer.Form != r.OfferForm || !bytes.Equal(h.Offer.Octets, r.Offer) || (h.Chain == nil) != (c.chain == nil) || len(h.Chain) != len(c.chain) {
			t.Fatalf("Handoff of %s = offer %v, %d chain elements (nil %v); want the record's offer and %d (nil %v)",
				c.hop, h.Offer.Form, len(h.Chain), h.Chain == nil, len(c.chain), c.chain == nil)
		}
		for j, el := range h.Chain {
			if el.Form != c.forms[j] || !bytes.Equal(el.Octets, c.chain[j]) {
				t.Errorf("Handoff of %s: chain[%d] = %v, %d octets; want %v, %d octets", c.hop, j, el.Form, len(el.Octets), c.forms[j], len(c.chain[j]))
			}
		}
	}
	page, err := s.List(ctx, store.HopQuery{State: store.Accepted, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != len(cases) {
		t.Fatalf("List = %d records; want %d", len(page), len(cases))
	}
	for _, got := range page {
		checkRecord(t, "List: "+got.Hop, got, mustGet(t, s, got.Hop))
	}
}

// A claim whose chain and forms do not go together (a form missing or
// extra, forms without a chain, a form that is none of handoff's) is
// refused and stores nothing: a store never keeps a chain it could not
// give back whole.
func testClaimRefusesAChainWithoutItsForms(t *testing.T, s store.Store) {
	ctx := t.Context()
	chain, forms := Chain("x", 0, 2)
	for _, c := range []struct {
		hop   string
		chain [][]byte
		forms []handoff.Form
	}{
		{"forms-missing", chain, forms[:1]},
		{"forms-extra", chain[:1], forms},
		{"forms-nil", chain, nil},
		{"chain-nil", nil, []handoff.Form{}},
		{"form-unknown", chain, []handoff.Form{handoff.FormCOSE, handoff.FormInvalid + 1}},
		{"form-negative", chain, []handoff.Form{-1, handoff.FormJWS}},
	} {
		r := NewRecord(c.hop, store.Received, 0)
		r.Chain, r.ChainForms = c.chain, c.forms
		if got, inserted, err := s.Claim(ctx, r); err == nil || inserted {
			t.Errorf("Claim(%s) = %+v, inserted %v, %v; want an error", c.hop, got, inserted, err)
		}
		checkGone(t, s, Iss, c.hop)
	}
	put(t, s, "good", store.Received)
}
