package handoff

import (
	"errors"
	"fmt"
	"time"
)

// checkChain is step 6 (draft "Checking a Chain", D6-D8). C[0..n-1] is the
// chain and C[n] the offer o. The first failure is reported in the order
// of D6: length, each element's form and signature, prev links,
// continuity, timing, cycle.
func (r *Receiver) checkChain(h *Handoff, o *Offer) ([]ChainElement, ChainQuality, *CheckError) {
	lim := r.o.Limits
	fail := func(reason Reason, i int, member string, format string, args ...any) *CheckError {
		return &CheckError{Reason: reason, Index: i, Member: member, Err: fmt.Errorf(format, args...)}
	}
	n := len(h.Chain)
	if n > lim.MaxChain {
		return nil, "", fail(ReasonTooDeep, OfferIndex, "chain", "chain of %d elements exceeds the limit of %d", n, lim.MaxChain)
	}

	// Check 1: each element's signed form, payload and signature. An
	// element with no trusted key leaves the chain unverifiable; it is
	// still decoded so that links, continuity, timing and cycles are
	// checked over it (D6).
	chain := make([]ChainElement, n)
	digests := make([]Digest, n) // each element's, for the prev links
	unverifiable := false
	for i, el := range h.Chain {
		p, err := parseElement(el, "offer", lim)
		if err != nil {
			var me *memberError
			if errors.As(err, &me) {
				reason := ReasonBrokenChain
				if me.reason == ReasonPolicy {
					reason = ReasonPolicy
				}
				return nil, "", &CheckError{Reason: reason, Index: i, Member: me.member, Err: me.err}
			}
			return nil, "", &CheckError{Reason: ReasonBrokenChain, Index: i, Err: err}
		}
		digests[i] = p.digest(el)
		key, err := p.verifyWith(r.o.Keys, p.offer.Iss)
		if err != nil && !errors.Is(err, errNoKey) {
			return nil, "", &CheckError{Reason: ReasonBrokenChain, Index: i, Err: err}
		}
		if key == nil {
			unverifiable = true
		}
		chain[i] = ChainElement{Element: el, Offer: p.offer, Key: key}
	}
	at := func(i int) *Offer {
		if i == n {
			return o
		}
		return chain[i].Offer
	}
	index := func(i int) int {
		if i == n {
			return OfferIndex
		}
		return i
	}

	// Check 2: prev links. A prev whose alg is not implemented fails.
	for i := 1; i <= n; i++ {
		prev := at(i).Prev
		if prev == nil {
			return nil, "", fail(ReasonBrokenChain, index(i), "prev", "no prev, but an earlier element precedes it")
		}
		if prev.Alg != AlgSHA256 {
			return nil, "", fail(ReasonBrokenChain, index(i), "prev", "digest alg %q is not implemented", prev.Alg)
		}
		if !prev.Equal(digests[i-1]) {
			return nil, "", fail(ReasonBrokenChain, index(i), "prev", "does not name chain[%d] (%s)", i-1, digests[i-1])
		}
	}
	// Check 3: continuity.
	for i := 1; i <= n; i++ {
		if at(i-1).Aud != at(i).Iss {
			return nil, "", fail(ReasonBrokenChain, index(i), "iss", "iss %q is not the audience %q of chain[%d]", at(i).Iss, at(i-1).Aud, i-1)
		}
	}
	// Check 4: timing. Each earlier offer was live when the next was issued.
	skew := int64(r.o.Skew / time.Second)
	for i := 1; i <= n; i++ {
		a, b := at(i-1), at(i)
		if a.Iat > b.Iat {
			return nil, "", fail(ReasonBrokenChain, index(i), "iat", "iat %s is before chain[%d].iat %s", unixAt(b.Iat), i-1, unixAt(a.Iat))
		}
		if b.Iat-skew > a.Exp { // not a.Exp+skew: a.Exp may be the largest int64

			return nil, "", fail(ReasonBrokenChain, index(i), "iat", "iat %s is %s after chain[%d].exp %s plus skew", unixAt(b.Iat), span(b.Iat-a.Exp), i-1, unixAt(a.Exp))
		}
	}
	// Check 6: cycles (D8).
	seen := make(map[string]int, n+1)
	for i := 0; i <= n; i++ {
		c := at(i)
		if j, dup := seen[c.Iss]; dup {
			return nil, "", fail(ReasonCycle, index(i), "iss", "%q is also iss of chain[%d]", c.Iss, j)
		}
		seen[c.Iss] = i
		if i == 0 && n > 0 && r.o.AdmitCallback && c.Iss == r.o.Me && c.Aud != r.o.Me && c.Prev == nil && chain[0].Key != nil {
			// The one re-entry local policy admits (draft, check 6: "a
			// callback to the original requester"): this receiver began
			// the chain, and the work comes back to it.
			continue
		}
		if i < n && (c.Iss == r.o.Me || c.Aud == r.o.Me) {
			member := "aud"
			if c.Iss == r.o.Me {
				member = "iss"
			}
			return nil, "", fail(ReasonCycle, i, member, "this receiver %q already appears in the chain", r.o.Me)
		}
	}
	// Quality (D7); check 5: a C[0] with a prev does not reach the start.
	q := ChainFull
	switch {
	case unverifiable:
		q = ChainUnverifiable
	case chain[0].Offer.Prev != nil:
		q = ChainPartial
	}
	return chain, q, nil
}
