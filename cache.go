package handoff

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"sync"
	"sync/atomic"

	"github.com/quantumlearningmachines/handoff/internal/wire"
	"github.com/quantumlearningmachines/handoff/trust"
)

// ChainCache remembers signed elements that were verified, so that a
// chain prefix a fleet passes around (an assistant's offer checked by the
// planner, the coder, the tester...) is verified once per process, not at
// every hop. An entry is keyed by the element's handoff digest (its exact
// octets), the trust configuration's generation and the receiver's
// Limits.MaxElement and MaxRefs (receivers share entries only when those
// agree).
// A receiver caches every chain element it verifies, and the offer itself
// once its signature holds, so the offer one receiver took is found when
// it comes back as the newest element of a chain another receiver in the
// same process checks.
//
// A hit is never verified again. The elements found from the offer's prev
// link backwards (the usual case: the same prefix under a new offer) are
// not parsed or hashed either; of the elements older than the first miss,
// each is hashed to be looked up and only a miss is parsed.
//
// The warm read: when Receiver.Receive (or Receiver.ParseHandoff, for a
// carrier that reads the Handoff before it receives it) is given a JSON
// Handoff whose every chain element the cache holds (as JWS, within
// MaxChain), it does not read the chain's text at all, only compares it
// with the cached octets; in any other case the Handoff is read as the
// package's ParseHandoff reads it. delegate.Delegate's Receive and
// ParseHandoff, the A2A carrier and handoff serve read this way; a
// Handoff read by the package's ParseHandoff is received in full.
//
// What it holds is only ever a success: an element whose signed form,
// payload and signature passed with a key the trust binds to its iss. A
// failure, or an element with no trusted key (unverifiable), is never
// cached, and nothing of the offer's own checks (audience, freshness,
// replay, dialog, the links, continuity, timing and cycles between
// elements) is: those run on every receive. An element whose octets differ
// in one bit has another digest and misses.
//
// A change of trust is a new generation: every entry made before it
// misses from then on, and stays until it is the least recently used.
// The generation is Options.TrustGeneration, or that of Options.Keys when
// it is a *trust.Config itself; with any other KeySource and no
// TrustGeneration the cache is not used, since a change could not be seen.
//
// It is bounded by entries and by bytes (an estimate: twice the
// element's octets, for the copy kept and the decoded payload, plus
// 1024 for two copies of the decoded offer, and what its unknown members
// decoded to), evicting by a second-chance (CLOCK)
// rule: the oldest entry goes unless it was hit since it was last looked
// at, an approximation of least recently used in which a hit writes no
// shared list, only its entry's flag. It is safe for concurrent use by
// any number of receivers, whose look-ups share a read lock; share one
// across a process's receivers.
type ChainCache struct {
	mu         sync.RWMutex
	maxEntries int
	maxBytes   int64
	bytes      int64
	lru        list.List // of *cacheEntry, newest (or given a second chance) first
	m          map[cacheKey]*list.Element

	hits, misses, evictions atomic.Uint64
}

type cacheKey struct {
	dig [32]byte
	gen uint64
	// The bounds an element's parse applies (D3 and SPEC 4): an element
	// that passed under looser ones must not pass under tighter ones.
	maxElement, maxRefs int
}

type cacheEntry struct {
	k      cacheKey
	form   Form
	octets []byte // the element's, compared on every look-up; never handed out
	// plain: octets are base64url and periods only, a JSON string's text
	// as they stand (no escape, quote, control or non-ASCII octet), so
	// that text read unchecked and equal to them is that string (walk's
	// unread). A verified JWS always is (jws.Parse is strict); this is
	// checked once, here, rather than assumed of the parser.
	plain bool
	own   ownLinks // its decoded payload and key: what walk and the checks read; never handed out
	pub   ownLinks // a copy of own, handed out in Results (ChainElement: read-only)
	size  int64
	hit   atomic.Bool // hit since eviction last passed it: a second chance
}

// entryOverhead is the fixed part of an entry's size estimate: the map
// and list cells, and two copies of the Offer struct, its links and the
// key.
const entryOverhead = 1024

// decodedSize estimates what an offer's decoded members hold beyond the
// payload octets its texts alias: the trees of unknown members (Extra,
// Obo's, each reference's and its proof). Those can take far more memory
// than the octets they came from (a one-octet CBOR empty map is a Go map),
// so an element is counted by what it decoded to, and a trusted agent
// cannot fill a cache past its bound with small, dense elements.
func decodedSize(o *Offer) int64 {
	n := anySize(o.Extra)
	if o.Obo != nil {
		n += anySize(o.Obo.Extra)
	}
	for _, r := range o.Refs {
		n += 96 + anySize(r.Proof) + anySize(r.Extra)
	}
	return n
}

// anySize is a generous estimate of a decoded value's heap: a map's
// header and buckets, a slice's header and backing array, each value's
// interface cell and each text's octets (counted again, since a map key
// or a value may be copied out of the payload). Recursion is bounded by
// the decoder's MaxNesting.
func anySize(v any) int64 {
	switch v := v.(type) {
	case nil:
		return 0
	case map[string]any:
		n := int64(256)
		for k, x := range v {
			n += 48 + int64(len(k)) + anySize(x)
		}
		return n
	case []any:
		n := int64(32)
		for _, x := range v {
			n += 16 + anySize(x)
		}
		return n
	case string:
		return 16 + int64(len(v))
	case []byte:
		return 24 + int64(len(v))
	default:
		return 16
	}
}

// NewChainCache returns a cache of at most maxEntries elements and about
// maxBytes bytes. Size it for the distinct elements live at once: about
// one entry per distinct signed offer (each offer received, and each
// element of the chains it came with) within an offer's lifetime.
// An element of n octets counts 2n+1024 bytes, plus about 96 per
// reference and what its unknown members decode to: a typical 1 KiB element
// about 3 KiB, so 8192 entries need about 24 MiB (handoff serve keeps
// 8192 and 32 MiB); one at the default MaxElement (64 KiB) counts about
// 129 KiB. An element that alone exceeds maxBytes is not cached. A
// bound below 1 is taken as 1: maxBytes 1 caches nothing, maxEntries 1
// one element.
func NewChainCache(maxEntries int, maxBytes int64) *ChainCache {
	if maxEntries < 1 {
		maxEntries = 1
	}
	if maxBytes < 1 {
		maxBytes = 1
	}
	return &ChainCache{maxEntries: maxEntries, maxBytes: maxBytes, m: make(map[cacheKey]*list.Element)}
}

// CacheStats are a ChainCache's counters. Hits and Misses count look-ups
// of chain elements (a receive looks up each element at most once);
// offers are cached but never looked up. A receiver whose trust has no
// generation (see Options.TrustGeneration) adds nothing.
type CacheStats struct {
	Entries                 int
	Bytes                   int64 // the estimate the bound applies to
	Hits, Misses, Evictions uint64
}

// Stats returns the cache's counters.
func (c *ChainCache) Stats() CacheStats {
	c.mu.RLock()
	n, b := len(c.m), c.bytes
	c.mu.RUnlock()
	return CacheStats{Entries: n, Bytes: b, Hits: c.hits.Load(), Misses: c.misses.Load(), Evictions: c.evictions.Load()}
}

// get returns the entry for k when it holds el (the same form and the
// same octets, not only the same digest), or nil.
func (c *ChainCache) get(k cacheKey, el Element) *cacheEntry {
	c.mu.RLock()
	le, ok := c.m[k]
	var e *cacheEntry
	if ok {
		e = le.Value.(*cacheEntry)
		if e.form == el.Form && bytes.Equal(e.octets, el.Octets) {
			// Under the read lock, so that no flag is set while eviction
			// runs (put's loop relies on it).
			if !e.hit.Load() {
				e.hit.Store(true)
			}
		} else {
			e = nil
		}
	}
	c.mu.RUnlock()
	if e != nil {
		c.hits.Add(1)
		return e
	}
	c.misses.Add(1)
	return nil
}

// put remembers a verified element. The octets are copied, and the offer
// with its own links (see ownLinks); its Refs and Extra are the decoded
// payload's, which nothing writes again. el.Form must be the form the
// element was verified in (not a caller's Handoff's, which a caller may
// have changed meanwhile), and the copy is hashed again: octets a caller
// wrote into the Handoff while it was received (a KeySource, another
// goroutine) have another digest and are not cached under the verified
// one's key (found by the third adversarial review: one hash per new
// entry, beside its signature check).
func (c *ChainCache) put(k cacheKey, el Element, o *Offer, key *trust.Key) {
	c.mu.RLock()
	_, have := c.m[k]
	c.mu.RUnlock()
	if have { // an offer received again: nothing to copy
		return
	}
	size := 2*int64(len(el.Octets)) + entryOverhead + decodedSize(o)
	if size > c.maxBytes {
		return
	}
	octets := bytes.Clone(el.Octets)
	if sha256.Sum256(octets) != k.dig {
		return
	}
	e := &cacheEntry{k: k, form: el.Form, octets: octets, size: size,
		plain: el.Form == FormJWS && wire.AllIn(&notCompact, octets)}
	e.own.copyOf(o)
	e.own.key = *key
	e.pub.copyOf(&e.own.o)
	e.pub.key = *key
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	added := c.lru.PushFront(e)
	c.m[k] = added
	c.bytes += e.size
	// Each pass clears a flag or evicts, and no look-up sets a flag while
	// the write lock is held: at most one second chance per entry. The
	// entry just added is not a candidate (it fits the bound alone).
	for len(c.m) > c.maxEntries || c.bytes > c.maxBytes {
		last := c.lru.Back()
		old := last.Value.(*cacheEntry)
		if last == added || old.hit.Load() {
			old.hit.Store(false)
			c.lru.MoveToFront(last)
			continue
		}
		c.lru.Remove(last)
		delete(c.m, old.k)
		c.bytes -= old.size
		c.evictions.Add(1)
	}
}

// cacheView is a receive's use of the ChainCache: the cache, and the
// generation and bounds its keys hold, read once before anything is
// verified.
type cacheView struct {
	r   *Receiver
	c   *ChainCache
	gen uint64
	lim Limits
}

// cacheView returns the receiver's view for one receive, or nil when it
// has no cache or no generation of its trust (a change could not be
// seen): Options.TrustGeneration when set, else the generation of Keys
// when Keys is a *trust.Config itself. Any other KeySource, a wrapper
// that embeds a *trust.Config included, has none: it may answer other
// than the Config whose generation it would inherit.
func (r *Receiver) cacheView() *cacheView {
	if r.o.ChainCache == nil {
		return nil
	}
	gen := r.generation()
	if gen == 0 {
		return nil
	}
	return &cacheView{r: r, c: r.o.ChainCache, gen: gen, lim: r.o.Limits}
}

func (r *Receiver) generation() uint64 {
	if r.o.TrustGeneration != nil {
		return r.o.TrustGeneration()
	}
	if c, ok := r.o.Keys.(*trust.Config); ok {
		return c.Generation()
	}
	return 0
}

func (v *cacheView) key(d Digest) (cacheKey, bool) {
	if d.Alg != AlgSHA256 || len(d.Val) != 32 {
		return cacheKey{}, false
	}
	return cacheKey{dig: [32]byte(d.Val), gen: v.gen, maxElement: v.lim.MaxElement, maxRefs: v.lim.MaxRefs}, true
}

// lookup returns the entry of el, verified, when the cache holds it
// under digest d (which the caller has from el's octets, or from a prev
// link that must name el: the entry's octets are compared either way).
func (v *cacheView) lookup(d Digest, el Element) *cacheEntry {
	k, ok := v.key(d)
	if !ok {
		return nil
	}
	return v.c.get(k, el)
}

// walk finds the verified end of a chain, under one read lock: prev (the
// offer's) names the last element by digest, a cached entry with that
// element's exact octets and form is that element, verified, and its own
// prev names the one before. It sets found[i] and digests[i] for each
// element found and returns how many elements come before them (cold),
// and whether the walk ended at a look-up that missed (the element at
// cold-1, then not worth looking up again) rather than at a missing prev.
// The caller counts the hits and the miss (count): a walk whose result
// is dropped counts nothing. With unread (chain's octets are text read
// unchecked, before the offer's signature is checked: Receiver.warm),
// only a plain entry is that element, and no entry is marked hit: touch
// does that once the offer is verified, so that an offer anyone can forge
// neither counts nor keeps entries from eviction.
func (v *cacheView) walk(prev *Digest, chain []Element, found []*cacheEntry, digests []Digest, unread bool) (cold int, missed bool) {
	c := v.c
	cold = len(chain)
	c.mu.RLock()
	defer c.mu.RUnlock()
	for want := prev; cold > 0 && want != nil; cold-- {
		el := chain[cold-1]
		k, ok := v.key(*want)
		var e *cacheEntry
		if ok {
			if le, in := c.m[k]; in {
				e = le.Value.(*cacheEntry)
			}
		}
		if e == nil || e.form != el.Form || unread && !e.plain || !bytes.Equal(e.octets, el.Octets) {
			return cold, true
		}
		if !unread && !e.hit.Load() { // under the read lock, as in get
			e.hit.Store(true)
		}
		found[cold-1], digests[cold-1] = e, *want
		want = e.own.o.Prev
	}
	return cold, false
}

// touch marks the entries found by an unread walk as hit, and counts
// them, under the read lock as get does (an entry evicted since is
// marked for nothing).
func (v *cacheView) touch(found []*cacheEntry) {
	v.c.mu.RLock()
	for _, e := range found {
		if !e.hit.Load() {
			e.hit.Store(true)
		}
	}
	v.c.mu.RUnlock()
	v.count(len(found), false)
}

// count adds a walk's look-ups to the counters.
func (v *cacheView) count(hits int, missed bool) {
	v.c.hits.Add(uint64(hits))
	if missed {
		v.c.misses.Add(1)
	}
}

// warmChain is what Receiver.warm learned before the chain's text was
// read: the offer's parse (or its fault), and, when the whole chain was
// found, the cache's entry and digest of each chain element (found nil
// otherwise: the Handoff is read again, the offer is not).
type warmChain struct {
	v       *cacheView
	form    Form
	offer   []byte // a private copy of the offer's octets, which p was parsed from (p aliases it)
	p       parsed
	perr    error
	found   []*cacheEntry
	digests []Digest
}

// warmBox hands a warmChain to one receive: a Handoff passed to
// ReceiveParsed again, or to two at once, is received in full after the
// first, so that no two Results share the offer's parse and nothing of
// the cache stays reachable from a Handoff a caller keeps.
type warmBox struct{ w atomic.Pointer[warmChain] }

// take returns what the box holds for r and h as h now is (see of), at
// most once.
func (b *warmBox) take(r *Receiver, h *Handoff) *warmChain {
	if b == nil {
		return nil
	}
	return b.w.Swap(nil).of(r, h)
}

// of returns w when it is what r's ParseHandoff found for h as h now is:
// the same receiver (its cache and generation view), and the offer and
// each chain element of the same form and the same octets as the ones
// read, compared with private copies that no caller holds (a caller may
// have built another Handoff, swapped an element, or written into one
// since). Otherwise nil: h is received in full.
func (w *warmChain) of(r *Receiver, h *Handoff) *warmChain {
	if w == nil || w.v.r != r || h.Offer.Form != w.form || !bytes.Equal(h.Offer.Octets, w.offer) {
		return nil
	}
	if w.found != nil {
		if len(h.Chain) != len(w.found) {
			return nil
		}
		for i, e := range w.found {
			if h.Chain[i].Form != FormJWS || !bytes.Equal(h.Chain[i].Octets, e.octets) {
				return nil
			}
		}
	}
	return w
}

// warm reads b, a JSON Handoff, for a receiver with a cache, without
// reading its chain's text: the text of a chain of 16 elements is about
// 20 KB, and checking each octet of it was most of what a chain found in
// the cache cost beyond the offer's own checks. The offer is parsed
// first; a walk from its prev (walk) must then find every chain element
// in the cache, form JWS and octets equal to the unread text's. Those
// octets were checked when the element was cached (plain: base64url and
// periods, no escape, quote or control octet), so the unread text is
// exactly what ParseHandoff would have read there, and the rest of b is
// read by the same decoder: the Handoff is the one ParseHandoff returns,
// except that its chain's octets alias b (ParseHandoff copies them): a
// chain of 16 is 20 KB, whose copy was a third of what was left.
//
// A Handoff with no chain is returned as read, with no warmChain: nothing
// of it was left unread. When the chain is not found whole, or the offer
// fails to parse, it returns no Handoff (Receive reads b again, so the
// faults and their order are ParseHandoff's and checkChain's) but the
// offer's parse or fault, which that read would only repeat. In any other
// case (CBOR, a fault anywhere) it returns nothing and Receive reads b as
// always.
func (r *Receiver) warm(b []byte) (*Handoff, *warmChain) {
	v := r.cacheView()
	lim := r.o.Limits
	if v == nil || len(b) > lim.MaxHandoff || !IsJSON(b) {
		return nil, nil
	}
	d := decoder{raw: true}
	d.r.Reset(b, false, false)
	h, fault := d.handoff(JSON)
	if d.r.End(); d.r.Err() != nil || fault != nil || len(h.Chain) > lim.MaxChain {
		return nil, nil
	}
	h.size = len(b)
	if h.Chain == nil { // nothing was left unread: this is ParseHandoff's
		return h, nil
	}
	// The offer's member was read by the checked path: its parse is the
	// one the Handoff read again would give, whatever the chain's fate.
	// It is parsed from a private copy, which the parse aliases and of
	// compares: what a caller writes into the Handoff's own cannot reach
	// it.
	offer := Element{Form: h.Offer.Form, Octets: bytes.Clone(h.Offer.Octets)}
	p, err := parseElement(offer, "offer", lim)
	if err != nil {
		return nil, &warmChain{v: v, form: offer.Form, offer: offer.Octets, perr: err}
	}
	n := len(h.Chain)
	for i := range h.Chain {
		h.Chain[i].Form = FormJWS // as the entries must hold them
	}
	found, digests := make([]*cacheEntry, n), make([]Digest, n)
	if cold, _ := v.walk(p.offer.Prev, h.Chain, found, digests, true); cold > 0 {
		return nil, &warmChain{v: v, form: offer.Form, offer: offer.Octets, p: p}
	}
	return h, &warmChain{v: v, form: offer.Form, offer: offer.Octets, p: p, found: found, digests: digests}
}

// element is el as the entry holds it, verified: for a Result, with the
// entry's shared payload and key, and the private payload for the checks.
func (e *cacheEntry) element(el Element) (ChainElement, *Offer) {
	return ChainElement{Element: el, Offer: &e.pub.o, Key: &e.pub.key}, &e.own.o
}

// remember caches an element verified with key, unless the trust changed
// since the view was taken (a reload between the look-up and the
// verification: the key found may not be the new generation's).
func (v *cacheView) remember(d Digest, el Element, o *Offer, key *trust.Key) {
	if key == nil || v.r.generation() != v.gen {
		return
	}
	if k, ok := v.key(d); ok {
		v.c.put(k, el, o, key)
	}
}

// ownLinks holds a copy of an offer whose Prev, Grant and Obo are its
// own, and the key that verified it. The checks between elements read
// those links through pointers: an entry keeps a private copy for them
// and walk, and hands out another (pub), so that what a caller does to a
// Result cannot change what the cache answers. Refs and Extra are the
// decoded payload's in both (see ChainElement).
type ownLinks struct {
	o           Offer
	prev, grant Digest
	pv, gv      [32]byte
	obo         Principal
	key         trust.Key
}

func (c *ownLinks) copyOf(o *Offer) *Offer {
	c.o = *o
	if o.Prev != nil {
		c.prev = c.own(o.Prev, &c.pv)
		c.o.Prev = &c.prev
	}
	if o.Grant != nil {
		c.grant = c.own(o.Grant, &c.gv)
		c.o.Grant = &c.grant
	}
	if o.Obo != nil {
		c.obo = *o.Obo
		c.o.Obo = &c.obo
	}
	return &c.o
}

// own copies d, its value into buf when it fits (a SHA-256 digest).
func (*ownLinks) own(d *Digest, buf *[32]byte) Digest {
	if len(d.Val) == len(buf) {
		copy(buf[:], d.Val)
		return Digest{Alg: d.Alg, Val: buf[:]}
	}
	return Digest{Alg: d.Alg, Val: bytes.Clone(d.Val)}
}
