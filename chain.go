package handoff

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// checkChain is step 6 (draft "Checking a Chain", D6-D8). C[0..n-1] is the
// chain and C[n] the offer o. The first failure is reported in the order
// of D6: length, each element's form and signature, prev links,
// continuity, timing, cycle.
//
// It returns the checked chain, its quality and the iss of its first
// element. The checks read each element's payload from offers: an
// element found in the cache is read from the cache's private copy, never
// from the one a Result shares (ChainElement), so that what a caller
// writes into a Result cannot steer another receive's verdict.
func (r *Receiver) checkChain(h *Handoff, o *Offer, w *warmChain) ([]ChainElement, ChainQuality, string, *CheckError) {
	lim := r.o.Limits
	fail := func(reason Reason, i int, member string, format string, args ...any) *CheckError {
		return &CheckError{Reason: reason, Index: i, Member: member, Err: fmt.Errorf(format, args...)}
	}
	n := len(h.Chain)
	if n > lim.MaxChain {
		return nil, "", "", fail(ReasonTooDeep, OfferIndex, "chain", "chain of %d elements exceeds the limit of %d", n, lim.MaxChain)
	}

	// Check 1: each element's signed form, payload and signature. An
	// element with no trusted key leaves the chain unverifiable; it is
	// still decoded so that links, continuity, timing and cycles are
	// checked over it (D6).
	chain := make([]ChainElement, n)
	offers := make([]*Offer, n) // what the checks read: see above
	var digests []Digest        // each element's, for the prev links
	if w != nil && w.found != nil {
		digests = w.digests // filled again by checkElements if it drops w
	} else {
		digests = make([]Digest, n)
	}
	if ce := r.checkElements(h, o, chain, offers, digests, w); ce != nil {
		return nil, "", "", ce
	}
	unverifiable := false
	for i := range chain {
		if chain[i].Key == nil {
			unverifiable = true
		}
	}
	at := func(i int) *Offer {
		if i == n {
			return o
		}
		return offers[i]
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
			return nil, "", "", fail(ReasonBrokenChain, index(i), "prev", "no prev, but an earlier element precedes it")
		}
		if prev.Alg != AlgSHA256 {
			return nil, "", "", fail(ReasonBrokenChain, index(i), "prev", "digest alg %q is not implemented", prev.Alg)
		}
		if !prev.Equal(digests[i-1]) {
			return nil, "", "", fail(ReasonBrokenChain, index(i), "prev", "does not name chain[%d] (%s)", i-1, digests[i-1])
		}
	}
	// Check 3: continuity.
	for i := 1; i <= n; i++ {
		if at(i-1).Aud != at(i).Iss {
			return nil, "", "", fail(ReasonBrokenChain, index(i), "iss", "iss %q is not the audience %q of chain[%d]", at(i).Iss, at(i-1).Aud, i-1)
		}
	}
	// Check 4: timing. Each earlier offer was live when the next was issued.
	skew := int64(r.o.Skew / time.Second)
	for i := 1; i <= n; i++ {
		a, b := at(i-1), at(i)
		if a.Iat > b.Iat {
			return nil, "", "", fail(ReasonBrokenChain, index(i), "iat", "iat %s is before chain[%d].iat %s", unixAt(b.Iat), i-1, unixAt(a.Iat))
		}
		if b.Iat-skew > a.Exp { // not a.Exp+skew: a.Exp may be the largest int64

			return nil, "", "", fail(ReasonBrokenChain, index(i), "iat", "iat %s is %s after chain[%d].exp %s plus skew", unixAt(b.Iat), span(b.Iat-a.Exp), i-1, unixAt(a.Exp))
		}
	}
	// Check 6: cycles (D8).
	// Each iss against those before it: for the chains of the default
	// MaxChain, fewer comparisons than a map costs to build; a map for a
	// longer chain a receiver's Limits allow, where the pairs would grow
	// as its square.
	var seen map[string]int
	if n > 32 {
		seen = make(map[string]int, n+1)
	}
	for i := 0; i <= n; i++ {
		c := at(i)
		j, dup := -1, false
		if seen != nil {
			j, dup = seen[c.Iss]
			seen[c.Iss] = i
		} else {
			for j = 0; j < i && at(j).Iss != c.Iss; j++ {
			}
			dup = j < i
		}
		if dup {
			return nil, "", "", fail(ReasonCycle, index(i), "iss", "%q is also iss of chain[%d]", c.Iss, j)
		}
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
			return nil, "", "", fail(ReasonCycle, i, member, "this receiver %q already appears in the chain", r.o.Me)
		}
	}
	// Quality (D7); check 5: a C[0] with a prev does not reach the start.
	q := ChainFull
	switch {
	case unverifiable:
		q = ChainUnverifiable
	case offers[0].Prev != nil:
		q = ChainPartial
	}
	return chain, q, offers[0].Iss, nil
}

// checkElements is check 1 over the chain: it fills chain, offers and digests, or
// returns the first failure in index order (D6: the lowest index that
// fails, whatever order the work was done in).
//
// With a ChainCache, the verified prefix is found first, from the end:
// the offer's prev names the last element by digest, a cached entry with
// those exact octets is that element, verified, and its own prev names
// the one before. Those elements are neither parsed, verified nor hashed
// again (w: Receiver.warm found them all before the chain was read). The
// rest (a miss and everything before it) is taken in order:
// each element is hashed and looked up, and only a miss is parsed. The
// signatures still to check are then verified across cores.
func (r *Receiver) checkElements(h *Handoff, o *Offer, chain []ChainElement, offers []*Offer, digests []Digest, w *warmChain) *CheckError {
	var cache *cacheView
	cold := len(h.Chain) // elements [0, cold) are not known verified
	walked := false      // whether h.Chain[cold-1] was looked up by the walk, and missed
	var found []*cacheEntry
	if w != nil && w.found != nil && r.generation() == w.v.gen {
		// Found whole by Receiver.warm, and the trust has not changed
		// since (a reload while the offer was checked and remembered
		// must revoke as at any other time). Now that the offer is
		// verified, the entries are marked hit.
		cache, found, cold = w.v, w.found, 0 // and digests are w's
		cache.touch(found)
	} else if cache = r.cacheView(); cache != nil {
		found = make([]*cacheEntry, cold)
		cold, walked = cache.walk(o.Prev, h.Chain, found, digests, false)
		cache.count(len(h.Chain)-cold, walked)
	}
	for i := cold; i < len(h.Chain); i++ {
		chain[i], offers[i] = found[i].element(h.Chain[i])
	}

	// The rest, in order: look up, parse a miss (up to the first element
	// that fails to parse), and list what is left to verify.
	var todo []int
	parsedAt := make([]parsed, cold)
	var parseErr *CheckError
	for i := range cold {
		el := h.Chain[i]
		if cache != nil && !(walked && i == cold-1) {
			d := el.Digest()
			if e := cache.lookup(d, el); e != nil {
				chain[i], offers[i] = e.element(el)
				digests[i] = d
				continue
			}
		}
		p, err := parseElement(el, "offer", r.o.Limits)
		if err != nil {
			var me *memberError
			if errors.As(err, &me) {
				reason := ReasonBrokenChain
				if me.reason == ReasonPolicy {
					reason = ReasonPolicy
				}
				parseErr = &CheckError{Reason: reason, Index: i, Member: me.member, Err: me.err}
			} else {
				parseErr = &CheckError{Reason: ReasonBrokenChain, Index: i, Err: err}
			}
			break // an element after it cannot be reported before it
		}
		digests[i] = p.digest(el)
		chain[i] = ChainElement{Element: el, Offer: p.offer}
		offers[i] = p.offer // this receive's own
		parsedAt[i] = p
		todo = append(todo, i)
	}

	// Verify. Each element's result goes to its own index; the first
	// failure is then read in index order, so the report does not depend
	// on which finished first. One goroutine per core at most, and none
	// for a single signature.
	verifyErr := make([]error, cold)
	var panicked []any // a worker's panic (a KeySource's), re-raised here
	verify := func(i int) {
		key, err := parsedAt[i].verifyWith(r.o.Keys, parsedAt[i].offer.Iss)
		if err != nil && !errors.Is(err, errNoKey) {
			verifyErr[i] = err
			return
		}
		chain[i].Key = key // nil: no trusted key, unverifiable from here back
	}
	if workers := min(runtime.GOMAXPROCS(0), len(todo)); workers > 1 {
		var wg sync.WaitGroup
		next := make(chan int, len(todo))
		for _, i := range todo {
			next <- i
		}
		close(next)
		panicked = make([]any, cold)
		for range workers {
			wg.Go(func() {
				for i := range next {
					func() {
						defer func() {
							if p := recover(); p != nil {
								panicked[i] = p
							}
						}()
						verify(i)
					}()
				}
			})
		}
		wg.Wait()
		// In the caller's goroutine, where its recover (net/http's, say)
		// can catch it, as it could before the work was spread.
		for _, p := range panicked {
			if p != nil {
				panic(p)
			}
		}
	} else {
		for _, i := range todo {
			verify(i)
		}
	}
	for i := range cold {
		if verifyErr[i] != nil {
			return &CheckError{Reason: ReasonBrokenChain, Index: i, Err: verifyErr[i]}
		}
		if parseErr != nil && parseErr.Index == i {
			return parseErr
		}
	}
	if cache != nil {
		for _, i := range todo {
			el := Element{Form: parsedAt[i].form(), Octets: chain[i].Element.Octets}
			cache.remember(digests[i], el, chain[i].Offer, chain[i].Key)
		}
	}
	return nil
}
