package store

import (
	"errors"
	"fmt"

	"github.com/quantumlearningmachines/handoff"
)

// SetChain sets r.Chain and r.ChainForms to the octets and forms of
// chain's elements, oldest first (a received Handoff's Chain); a nil chain
// leaves both nil. The octets are shared, not copied: a store copies
// what it keeps.
func (r *Record) SetChain(chain []handoff.Element) {
	if chain == nil {
		r.Chain, r.ChainForms = nil, nil
		return
	}
	r.Chain, r.ChainForms = make([][]byte, len(chain)), make([]handoff.Form, len(chain))
	for i, el := range chain {
		r.Chain[i], r.ChainForms[i] = el.Octets, el.Form
	}
}

// Handoff rebuilds the Handoff the hop's first offer came in: the offer
// and its chain, each element in its own form with its octets as
// received (shared with r), so that its chain can be drawn or checked
// again (handoff.UnsafeDecode, handoff.VerifyElement). Nothing is
// verified here. Its Chain is nil when the offer came with none (and for
// a record kept before records kept chains). Unknown members of the
// Handoff, if any, were not kept. It fails only for a record whose chain
// and forms do not match (see CheckClaim).
func (r *Record) Handoff() (*handoff.Handoff, error) {
	if err := checkChain(r); err != nil {
		return nil, AtHop(err, r.Iss, r.Hop)
	}
	h := &handoff.Handoff{Offer: handoff.Element{Form: r.OfferForm, Octets: r.Offer}}
	if r.Chain != nil {
		h.Chain = make([]handoff.Element, len(r.Chain))
		for i, b := range r.Chain {
			h.Chain[i] = handoff.Element{Form: r.ChainForms[i], Octets: b}
		}
	}
	return h, nil
}

// checkChain reports whether r's chain and its forms go together: one
// form per element, each a Form there is, and nil together.
func checkChain(r *Record) error {
	if len(r.ChainForms) != len(r.Chain) || (r.Chain == nil) != (r.ChainForms == nil) {
		return errors.New("store: a record's chain needs one form per element (ChainForms nil exactly when Chain is)")
	}
	for _, f := range r.ChainForms {
		if f != handoff.FormJWS && f != handoff.FormCOSE && f != handoff.FormInvalid {
			return fmt.Errorf("store: a record's chain has an element of unknown form %d", int(f))
		}
	}
	return nil
}

func cloneChain(chain [][]byte) [][]byte {
	if chain == nil {
		return nil
	}
	c := make([][]byte, len(chain))
	for i, b := range chain {
		c[i] = append([]byte{}, b...)
	}
	return c
}
