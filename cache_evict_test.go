package handoff

import (
	"testing"

	"github.com/quantumlearningmachines/handoff/trust"
)

// TestChainCacheSecondChance: eviction takes the oldest entry not hit
// since eviction last passed it (CLOCK), so an element in use outlives
// newer ones that were not, and every entry is evicted in time.
func TestChainCacheSecondChance(t *testing.T) {
	c := NewChainCache(2, 1<<20)
	el := func(b byte) (cacheKey, Element) {
		e := Element{Form: FormJWS, Octets: []byte{'a', b}}
		return cacheKey{dig: [32]byte(e.Digest().Val)}, e
	}
	put := func(b byte) {
		k, e := el(b)
		c.put(k, e, &Offer{}, &trust.Key{})
	}
	has := func(b byte) bool {
		k, e := el(b)
		return c.get(k, e) != nil
	}
	put(1)
	put(2)
	if !has(1) { // 1 is hit: a second chance
		t.Fatal("1 missing")
	}
	put(3) // evicts 2, the oldest not hit
	if !has(1) || has(2) || !has(3) {
		t.Fatalf("after 3: 1 %v, 2 %v, 3 %v; want 1 and 3", has(1), has(2), has(3))
	}
	// Both 1 and 3 were hit; each has its second chance, then the first
	// of them the hand reaches again, 3, goes. The entry just added is
	// never the one evicted.
	put(4)
	if !has(1) || has(3) || !has(4) {
		t.Fatalf("after 4: 1 %v, 3 %v, 4 %v; want 1 and 4", has(1), has(3), has(4))
	}
	if s := c.Stats(); s.Entries != 2 || s.Evictions != 2 {
		t.Fatalf("%+v", s)
	}
	// A different form or octets under a cached key is a miss.
	k, e := el(4)
	e.Octets = []byte{'b', 4}
	if c.get(k, e) != nil {
		t.Fatal("other octets under a cached digest hit")
	}
	e.Octets, e.Form = []byte{'a', 4}, FormCOSE
	if c.get(k, e) != nil {
		t.Fatal("another form under a cached digest hit")
	}
}

// TestWalkUnreadTakesOnlyPlainEntries: text read unchecked (Receiver.warm)
// is taken as an entry's element only when the entry's octets are plain,
// a JSON string's text as they stand; a checked element is taken either
// way. A verified JWS is always plain (jws.Parse is strict): the guard
// holds the warm read's premise in the cache itself.
func TestWalkUnreadTakesOnlyPlainEntries(t *testing.T) {
	c := NewChainCache(8, 1<<20)
	v := &cacheView{c: c, gen: 1, lim: defaultLimits}
	for _, tc := range []struct {
		octets string
		plain  bool
	}{
		{"eyJh.eyJi.c2ln", true},
		{`eyJh\u002e.eyJi.c2ln`, false},
		{"eyJh.eyJi\n.c2ln", false},
		{"eyJh.eyJi.c2ln\"", false},
	} {
		el := Element{Form: FormJWS, Octets: []byte(tc.octets)}
		d := el.Digest()
		k, _ := v.key(d)
		c.put(k, el, &Offer{}, &trust.Key{})
		for _, unread := range []bool{false, true} {
			found, digests := make([]*cacheEntry, 1), make([]Digest, 1)
			cold, _ := v.walk(&d, []Element{el}, found, digests, unread)
			if want := !unread || tc.plain; (cold == 0) != want {
				t.Errorf("%q, unread %v: found %v, want %v", tc.octets, unread, cold == 0, want)
			}
		}
	}
}

// TestPutTakesOnlyTheVerifiedOctets: put caches an element only under the
// digest of the octets it copies, so octets a caller wrote into a
// Handoff while it was received (after its signature was checked under
// the digest of others) are not cached as that element.
func TestPutTakesOnlyTheVerifiedOctets(t *testing.T) {
	c := NewChainCache(8, 1<<20)
	verified := Element{Form: FormJWS, Octets: []byte("eyJh.eyJi.c2ln")}
	k := cacheKey{dig: [32]byte(verified.Digest().Val)}
	written := Element{Form: FormJWS, Octets: []byte("eyJh.eyJi.c2lo")}
	c.put(k, written, &Offer{}, &trust.Key{})
	if s := c.Stats(); s.Entries != 0 {
		t.Fatalf("other octets cached under the verified element's digest: %+v", s)
	}
	c.put(k, verified, &Offer{}, &trust.Key{})
	if c.get(k, verified) == nil {
		t.Fatal("the verified octets are not cached")
	}
}
