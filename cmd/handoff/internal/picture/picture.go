// Package picture is the chain of a Handoff as a picture: what `handoff
// inspect` draws as text in a terminal and an operator's page draws as
// SVG, decided once here (which agents, which offers between them, and
// what each offer's link and signature say) and drawn by each medium.
package picture

import (
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// Chain is a Handoff's chain, oldest offer first.
type Chain struct {
	Offers []Offer
}

// Offer is one offer of the chain: the work handed from one agent to the
// next.
type Offer struct {
	// Unreadable: the element does not decode (its other fields are
	// empty); the picture goes on with the next.
	Unreadable bool
	From, To   string // iss and aud
	// Start says how the chain begins, on the first offer: Started (it has
	// no prev) or Partial (its prev names an offer not carried).
	Start Start
	// Discontinuous: the offer before went to another agent than this
	// one's iss (drawn with its From again).
	Discontinuous bool
	Hop           string
	Form          handoff.Form
	Iat           time.Time
	Link          Link
	Signature     Signature
	// Expired: the offer's exp has come, ExpiredFor ago.
	Expired    bool
	ExpiredFor time.Duration
	OnBehalfOf *handoff.Principal
}

// Start is how a chain begins.
type Start int

const (
	NotFirst Start = iota
	Started        // the first offer has no prev
	Partial        // the first offer's prev names an offer not carried
)

// Link is what an offer's prev says of the offer before it.
type Link string

const (
	LinkStart    Link = "starts the chain" // the first offer, with no prev
	LinkNotHere  Link = "prev not carried" // the first offer of a partial chain
	LinkNone     Link = "NO PREV"
	LinkMismatch Link = "PREV DOES NOT MATCH"
	LinkOK       Link = "prev ok"
)

// Signature is what the trust configuration says of an offer's signature.
type Signature int

const (
	NotChecked   Signature = iota // no trust configuration given
	Verified                      // a key trusted for its iss verified it
	Unverifiable                  // no trusted key of its iss verifies it
)

// Of draws h's chain: its elements oldest first, each checked against
// keys (nil: not checked) and now.
func Of(h *handoff.Handoff, keys *trust.Config, now time.Time) Chain {
	els := append(append([]handoff.Element{}, h.Chain...), h.Offer)
	var c Chain
	var before *handoff.Offer
	for i, el := range els {
		o, _, err := handoff.UnsafeDecode(el)
		if err != nil || o == nil {
			c.Offers = append(c.Offers, Offer{Unreadable: true})
			before = nil
			continue
		}
		p := Offer{From: o.Iss, To: o.Aud, Hop: o.Hop, Form: el.Form, Iat: time.Unix(o.Iat, 0).UTC(), OnBehalfOf: o.Obo}
		switch {
		case i == 0 && o.Prev != nil:
			p.Start, p.Link = Partial, LinkNotHere
		case i == 0:
			p.Start, p.Link = Started, LinkStart
		case o.Prev == nil:
			p.Link = LinkNone
		case !o.Prev.Matches(els[i-1].Octets):
			p.Link = LinkMismatch
		default:
			p.Link = LinkOK
		}
		if i > 0 && (before == nil || before.Aud != o.Iss) {
			p.Discontinuous = true
		}
		if keys != nil {
			p.Signature = Unverifiable
			if _, err := handoff.VerifyElement(el, keys); err == nil {
				p.Signature = Verified
			}
		}
		if n := now.Unix(); o.Exp <= n {
			p.Expired, p.ExpiredFor = true, time.Duration(min(n-o.Exp, maxSeconds))*time.Second
		}
		c.Offers = append(c.Offers, p)
		before = o
	}
	return c
}

// maxSeconds bounds a duration drawn (a hundred years), so that no
// timestamp overflows it.
const maxSeconds = 100 * 366 * 24 * 3600
