package handoff_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// fleet is a set of agents with keys, a trust configuration binding them,
// and a receiver's clock: what the chain cache's tests share.
type fleet struct {
	ids     []string
	signers []*handoff.Signer
	keys    []trust.Key
	cfg     *trust.Config
}

const fleetMe = "https://receiver.example"

func newFleet(t testing.TB, n int) *fleet {
	t.Helper()
	agents, cfg := benchAgents(t, n)
	f := &fleet{cfg: cfg}
	for _, a := range agents {
		k, err := trust.NewKey(&a.key.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		f.ids, f.signers, f.keys = append(f.ids, a.id), append(f.signers, a.signer), append(f.keys, k)
	}
	return f
}

// liveHeap is the live heap after a collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// chain returns the Handoff of agents 0..n-1 in a row, the last handing
// off to fleetMe: n-1 chain elements and the offer. tag makes the hops
// (and so the elements) distinct from another call's.
func (f *fleet) chain(t testing.TB, n int, tag string) *handoff.Handoff {
	t.Helper()
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	return f.chainOf(t, order, tag)
}

// chainOf is chain with the agents in the order given (an agent may come
// twice: a cycle).
func (f *fleet) chainOf(t testing.TB, order []int, tag string) *handoff.Handoff {
	t.Helper()
	n := len(order)
	var h *handoff.Handoff
	for i, a := range order {
		aud := fleetMe
		if i+1 < n {
			aud = f.ids[order[i+1]]
		}
		o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-" + tag, Iss: f.ids[a], Aud: aud,
			Iat: benchNow.Unix() - 30 + int64(i), Exp: benchNow.Unix() + 200}
		if h != nil {
			d := h.Offer.Digest()
			o.Prev = &d
		}
		el, err := f.signers[a].SignOffer(o, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		if h == nil {
			h = &handoff.Handoff{Offer: el}
		} else {
			h = h.PassOn(el)
		}
	}
	return h
}

// next is another outer offer continuing h's chain: same prefix, new hop.
func (f *fleet) next(t testing.TB, h *handoff.Handoff) *handoff.Handoff {
	t.Helper()
	last := len(h.Chain)
	prev := h.Chain[last-1].Digest()
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-next", Iss: f.ids[last], Aud: fleetMe,
		Iat: benchNow.Unix(), Exp: benchNow.Unix() + 200, Prev: &prev}
	el, err := f.signers[last].SignOffer(o, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	return &handoff.Handoff{Offer: el, Chain: h.Chain}
}

// trustWithout is a new Config binding every agent of the fleet but one.
func (f *fleet) trustWithout(t testing.TB, skip int) *trust.Config {
	t.Helper()
	c := trust.New()
	for i, id := range f.ids {
		if i == skip {
			continue
		}
		if err := c.Add(id, f.keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (f *fleet) receiver(t testing.TB, keys handoff.KeySource, cache *handoff.ChainCache) *handoff.Receiver {
	t.Helper()
	return f.receiverWith(t, handoff.Options{Keys: keys, ChainCache: cache})
}

// receiverWith is a receiver with o, whose Me, Now and (when unset) Keys
// are the fleet's.
func (f *fleet) receiverWith(t testing.TB, o handoff.Options) *handoff.Receiver {
	t.Helper()
	o.Me, o.Now = fleetMe, func() time.Time { return benchNow }
	if o.Keys == nil {
		o.Keys = f.cfg
	}
	r, err := handoff.NewReceiver(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func receiveHandoff(t testing.TB, r *handoff.Receiver, h *handoff.Handoff) *handoff.Result {
	t.Helper()
	b, err := h.Encode(handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := r.Receive(context.Background(), b, "")
	if res == nil {
		t.Fatal("no result")
	}
	return res
}

// TestChainCacheWarm (issue 19): a prefix verified once is found again,
// by its prev links, for another offer that continues it: the verdict and
// the decoded chain are the same as without a cache. Each element is
// looked up once per receive (one hit or one miss).
func TestChainCacheWarm(t *testing.T) {
	f := newFleet(t, 5)
	cache := handoff.NewChainCache(100, 1<<20)
	r := f.receiver(t, f.cfg, cache)
	h := f.chain(t, 5, "warm")
	res := receiveHandoff(t, r, h)
	if res.Outcome != handoff.Accepted || res.ChainQuality != handoff.ChainFull {
		t.Fatalf("cold: %s %s %v", res.Outcome, res.ChainQuality, res.Err)
	}
	if s := cache.Stats(); s.Entries != 5 || s.Hits != 0 || s.Misses != 4 {
		t.Fatalf("after the cold receive: %+v, want 4 misses and the 4 elements and the offer cached", s)
	}
	res2 := receiveHandoff(t, r, f.next(t, h))
	if res2.Outcome != handoff.Accepted || res2.ChainQuality != handoff.ChainFull {
		t.Fatalf("warm: %s %s %v", res2.Outcome, res2.ChainQuality, res2.Err)
	}
	if s := cache.Stats(); s.Hits != 4 || s.Misses != 4 || s.Entries != 6 {
		t.Fatalf("after the warm receive: %+v, want 4 hits", s)
	}
	for i, c := range res2.Chain {
		if c.Key == nil || c.Offer.Hop != res.Chain[i].Offer.Hop || c.Key.Kid != f.keys[i].Kid {
			t.Fatalf("chain[%d] from the cache: %+v", i, c)
		}
	}
}

// TestChainCachePipeline: receivers of several agents in one process
// share a cache. The offer one of them verified is, at the next hop, the
// newest element of the chain another receives: the whole chain is found.
func TestChainCachePipeline(t *testing.T) {
	f := newFleet(t, 4)
	cache := handoff.NewChainCache(100, 1<<20)
	h := f.chain(t, 4, "pipeline") // agents 0 -> 1 -> 2 -> 3 -> fleetMe
	r3, err := handoff.NewReceiver(handoff.Options{Me: f.ids[3], Keys: f.cfg, ChainCache: cache,
		Now: func() time.Time { return benchNow }})
	if err != nil {
		t.Fatal(err)
	}
	// What agent 3 received: agent 2's offer, with the two before it.
	at3 := &handoff.Handoff{Offer: h.Chain[2], Chain: h.Chain[:2]}
	if res := receiveHandoff(t, r3, at3); res.Outcome != handoff.Accepted || res.ChainQuality != handoff.ChainFull {
		t.Fatalf("agent 3: %s %s %v", res.Outcome, res.ChainQuality, res.Err)
	}
	before := cache.Stats()
	if res := receiveHandoff(t, f.receiver(t, f.cfg, cache), h); res.Outcome != handoff.Accepted || res.ChainQuality != handoff.ChainFull {
		t.Fatalf("the next hop: %s %s %v", res.Outcome, res.ChainQuality, res.Err)
	}
	if s := cache.Stats(); s.Hits-before.Hits != 3 || s.Misses != before.Misses {
		t.Fatalf("the next hop: %+v after %+v, want its 3 chain elements found", s, before)
	}
}

// TestChainCacheResultsApart: a Result shares its chain's cached offers
// with the cache and other receives (read-only, documented on
// ChainElement), but the checks never read those shared copies: what a
// caller writes into one Result (the links, the parties, the times of its
// chain's offers, their keys) changes no later verdict. A chain that
// continues the prefix is still taken, and one whose continuity is truly
// broken is still refused.
func TestChainCacheResultsApart(t *testing.T) {
	f := newFleet(t, 4)
	cache := handoff.NewChainCache(100, 1<<20)
	r := f.receiver(t, f.cfg, cache)
	h := f.chain(t, 4, "apart")
	spoil := func(res *handoff.Result) {
		for _, c := range res.Chain {
			c.Offer.Iss, c.Offer.Aud, c.Offer.Iat, c.Offer.Exp = fleetMe, fleetMe, 1, 2
			if c.Offer.Prev != nil {
				c.Offer.Prev.Val[0] ^= 0xff
			}
			c.Key.Kid = "changed"
		}
		if res.Offer != nil && res.Offer.Prev != nil {
			res.Offer.Prev.Val[0] ^= 0xff
		}
	}
	for i := range 3 { // cold, warm, warm
		res := receiveHandoff(t, r, f.next(t, h))
		if res.Outcome != handoff.Accepted || res.ChainQuality != handoff.ChainFull {
			t.Fatalf("receive %d: %s %s %v", i, res.Outcome, res.ChainQuality, res.Err)
		}
		spoil(res)
	}
	if s := cache.Stats(); s.Hits == 0 {
		t.Fatalf("%+v: the cache was not used", s)
	}
	// Agent 3 hands off again, but agent 2 (who handed to 3) is named as
	// the issuer: continuity broken at the offer, whatever a Result says.
	broken := f.next(t, h)
	prev := h.Chain[len(h.Chain)-1].Digest()
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-next", Iss: f.ids[2], Aud: fleetMe,
		Iat: benchNow.Unix(), Exp: benchNow.Unix() + 200, Prev: &prev}
	el, err := f.signers[2].SignOffer(o, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	broken.Offer = el
	res := receiveHandoff(t, r, broken)
	if res.Outcome != handoff.Rejected || res.Reason != handoff.ReasonBrokenChain {
		t.Fatalf("a broken chain after the Results were written into: %s %s %v", res.Outcome, res.Reason, res.Err)
	}
}

// TestChainCacheTrustChange: an element verified under one trust is not
// taken as verified under another. A new trust file (a new Config, a
// reload) and an added key each start a new generation; a key withdrawn
// leaves the chain unverifiable at once, cache or not.
func TestChainCacheTrustChange(t *testing.T) {
	f := newFleet(t, 4)
	cache := handoff.NewChainCache(100, 1<<20)
	h := f.chain(t, 4, "trust")
	if res := receiveHandoff(t, f.receiver(t, f.cfg, cache), h); res.ChainQuality != handoff.ChainFull {
		t.Fatalf("%s %v", res.ChainQuality, res.Err)
	}
	// The same keys but agent 0's, in a new Config: C[0] has no trusted
	// key any more.
	withdrawn := f.trustWithout(t, 0)
	if withdrawn.Generation() == f.cfg.Generation() || withdrawn.Generation() == 0 {
		t.Fatal("a new Config shares a generation")
	}
	before := cache.Stats().Hits
	res := receiveHandoff(t, f.receiver(t, withdrawn, cache), f.next(t, h))
	if res.Outcome != handoff.Accepted || res.ChainQuality != handoff.ChainUnverifiable || res.Chain[0].Key != nil {
		t.Fatalf("after agent 0's key was withdrawn: %s %s, chain[0] key %v", res.Outcome, res.ChainQuality, res.Chain[0].Key)
	}
	if cache.Stats().Hits != before {
		t.Fatal("a receiver of another trust hit the cache")
	}
	// Adding a key is a new generation too.
	gen := f.cfg.Generation()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tk, _ := trust.NewKey(&k.PublicKey)
	if err := f.cfg.Add("https://newcomer.example", tk); err != nil {
		t.Fatal(err)
	}
	if f.cfg.Generation() == gen {
		t.Fatal("Add kept the generation")
	}
	before = cache.Stats().Hits
	if res := receiveHandoff(t, f.receiver(t, f.cfg, cache), f.next(t, h)); res.ChainQuality != handoff.ChainFull {
		t.Fatalf("%s %v", res.ChainQuality, res.Err)
	}
	if cache.Stats().Hits != before {
		t.Fatal("entries of the old generation were hit after Add")
	}
}

// TestChainCacheTampered: an element whose octets differ from a cached
// one in a single bit has another digest, misses, and fails as it would
// without a cache; a failure is never cached.
func TestChainCacheTampered(t *testing.T) {
	f := newFleet(t, 3)
	cache := handoff.NewChainCache(100, 1<<20)
	r := f.receiver(t, f.cfg, cache)
	h := f.chain(t, 3, "tamper")
	if res := receiveHandoff(t, r, h); res.ChainQuality != handoff.ChainFull {
		t.Fatalf("%s %v", res.ChainQuality, res.Err)
	}
	// Flip a bit of chain[0]'s signature: the offer's own prev link no
	// longer names it either, but the element is checked first (D6).
	oct := append([]byte(nil), h.Chain[0].Octets...)
	oct[len(oct)-2] ^= 0x01
	for range 2 { // a new outer offer each time: the same one would be a retransmission
		bad := f.next(t, h)
		bad.Chain = append([]handoff.Element{{Form: handoff.FormJWS, Octets: oct}}, bad.Chain[1:]...)
		res := receiveHandoff(t, r, bad)
		if res.Outcome != handoff.Rejected || res.Reason != handoff.ReasonBrokenChain || res.Err.Index != 0 {
			t.Fatalf("tampered chain[0]: %s %s: %v", res.Outcome, res.Reason, res.Err)
		}
	}
	// The two genuine elements and the three outer offers (each was
	// verified before its chain failed); never the tampered element.
	if s := cache.Stats(); s.Entries != 5 {
		t.Fatalf("cache %+v: want the two genuine elements and the three offers", s)
	}
}

// TestChainErrorsInOrder (issue 19): with the signatures verified across
// cores, the failure reported is the first in D6's order, whatever
// finished first: two bad signatures, chain[1] and chain[5], always
// report chain[1].
func TestChainErrorsInOrder(t *testing.T) {
	f := newFleet(t, 9)
	h := f.chain(t, 9, "order")
	for _, i := range []int{1, 5} {
		oct := append([]byte(nil), h.Chain[i].Octets...)
		oct[len(oct)-2] ^= 0x01
		h.Chain[i] = handoff.Element{Form: handoff.FormJWS, Octets: oct}
	}
	for _, cache := range []*handoff.ChainCache{nil, handoff.NewChainCache(100, 1<<20)} {
		for range 20 {
			res := receiveHandoff(t, f.receiver(t, f.cfg, cache), h) // a receiver of its own: no retransmission
			if res.Reason != handoff.ReasonBrokenChain || res.Err.Index != 1 {
				t.Fatalf("%s at %d, want broken-chain at chain[1]", res.Reason, res.Err.Index)
			}
		}
	}
}

// TestChainCacheConcurrent: receivers in many goroutines share one cache
// (a gateway's requests), under the race detector in scripts/test.sh.
func TestChainCacheConcurrent(t *testing.T) {
	f := newFleet(t, 6)
	cache := handoff.NewChainCache(8, 1<<20) // small: evictions race with hits
	chains := []*handoff.Handoff{f.chain(t, 6, "a"), f.chain(t, 6, "b"), f.chain(t, 4, "c")}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := f.receiver(t, f.cfg, cache)
			for i := range 10 {
				h := f.next(t, chains[(g+i)%len(chains)])
				if res := receiveHandoff(t, r, h); res.Outcome != handoff.Accepted || res.ChainQuality != handoff.ChainFull {
					t.Errorf("%s %s %v", res.Outcome, res.ChainQuality, res.Err)
				}
			}
		})
	}
	wg.Wait()
	if s := cache.Stats(); s.Entries > 8 || s.Hits == 0 {
		t.Fatalf("%+v", s)
	}
}

// TestChainCacheBounded (issue 19): 10,000 distinct chains leave the
// cache within its bound, in its own estimate and in the heap.
func TestChainCacheBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("signs and verifies 10,000 chains")
	}
	const maxBytes = 2 << 20
	f := newFleet(t, 2)
	cache := handoff.NewChainCache(1<<20, maxBytes) // the bytes bound decides
	r := f.receiver(t, f.cfg, cache)
	// Each chain is an agent-0 offer passed on by agent 1: one element,
	// distinct every time.
	for i := range 10_000 {
		h := f.chain(t, 2, fmt.Sprint(i))
		if res := receiveHandoff(t, r, h); res.ChainQuality != handoff.ChainFull {
			t.Fatalf("%d: %s %v", i, res.ChainQuality, res.Err)
		}
		r = f.receiver(t, f.cfg, cache) // a fresh replay memory: the cache alone grows
	}
	s := cache.Stats()
	// What the cache holds in the heap: the live heap with it, less the
	// live heap once it (and the receiver pointing to it) is gone.
	with := liveHeap()
	runtime.KeepAlive(cache) // live through the first reading
	runtime.KeepAlive(r)
	cache, r = nil, nil
	held := with - liveHeap()
	t.Logf("10,000 chains: %d entries, %d bytes by estimate, %d bytes in the heap, %d evictions", s.Entries, s.Bytes, held, s.Evictions)
	if s.Bytes > maxBytes || s.Evictions == 0 {
		t.Fatalf("cache %+v over its bound of %d bytes", s, maxBytes)
	}
	if held > maxBytes {
		t.Fatalf("the cache holds %d bytes of heap, over its bound of %d", held, maxBytes)
	}
}

// TestChainCacheDenseElements: an element counts by what it decoded to,
// not only by its octets. A trusted agent's elements whose unknown
// members are thousands of one-octet CBOR maps (each a Go map) leave the
// heap within a small multiple of the bound; counted by their octets
// alone, they would hold several times more than it.
func TestChainCacheDenseElements(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 200 dense elements")
	}
	f := newFleet(t, 2)
	const budget = 8 << 20
	cache := handoff.NewChainCache(1<<20, budget)
	r := f.receiver(t, f.cfg, cache)
	mk := func() *handoff.Handoff {
		items := make([]any, 4000) // a COSE element of about 4 KiB
		for i := range items {
			items[i] = map[string]any{}
		}
		o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "d", Iss: f.ids[0], Aud: f.ids[1],
			Iat: benchNow.Unix() - 30, Exp: benchNow.Unix() + 200, Extra: map[string]any{"x": items}}
		el, err := f.signers[0].SignOffer(o, handoff.FormCOSE)
		if err != nil {
			t.Fatal(err)
		}
		d := el.Digest()
		top, err := f.signers[1].SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "d", Iss: f.ids[1], Aud: fleetMe,
			Iat: benchNow.Unix() - 20, Exp: benchNow.Unix() + 200, Prev: &d}, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		return &handoff.Handoff{Offer: top, Chain: []handoff.Element{el}}
	}
	before := liveHeap()
	for range 200 {
		if res := receiveHandoff(t, r, mk()); res.Outcome != handoff.Accepted || res.ChainQuality != handoff.ChainFull {
			t.Fatalf("%s %s %v", res.Outcome, res.ChainQuality, res.Err)
		}
	}
	grew := liveHeap() - before
	runtime.KeepAlive(r)
	s := cache.Stats()
	t.Logf("200 dense elements: cache %+v, heap grew %d KiB for a bound of %d KiB", s, grew>>10, budget>>10)
	if s.Evictions == 0 {
		t.Fatalf("cache %+v: the elements were not cached, or the bound never reached", s)
	}
	if s.Bytes > budget || grew > 2*budget {
		t.Fatalf("cache %+v and heap growth %d for a bound of %d", s, grew, budget)
	}
}

// keysWithout is a KeySource that embeds a Config and hides one agent's
// keys: it inherits the Config's Generation method, and must not have
// the cache answer it from what the Config verified.
type keysWithout struct {
	*trust.Config
	hidden string
}

func (k keysWithout) Keys(iss, kid string) []trust.Key {
	if iss == k.hidden {
		return nil
	}
	return k.Config.Keys(iss, kid)
}

// TestChainCacheWrapper: a receiver whose KeySource is not a
// *trust.Config itself, with no TrustGeneration, does not use the cache,
// so a key its wrapper withdraws is withdrawn, whatever another receiver
// on the same cache verified with the Config.
func TestChainCacheWrapper(t *testing.T) {
	f := newFleet(t, 4)
	cache := handoff.NewChainCache(100, 1<<20)
	h := f.chain(t, 4, "wrapper")
	if res := receiveHandoff(t, f.receiver(t, f.cfg, cache), h); res.ChainQuality != handoff.ChainFull {
		t.Fatalf("%s %v", res.ChainQuality, res.Err)
	}
	before := cache.Stats()
	res := receiveHandoff(t, f.receiver(t, keysWithout{f.cfg, f.ids[0]}, cache), f.next(t, h))
	if res.Outcome != handoff.Accepted || res.ChainQuality != handoff.ChainUnverifiable || res.Chain[0].Key != nil {
		t.Fatalf("with agent 0 hidden: %s %s, chain[0] key %v", res.Outcome, res.ChainQuality, res.Chain[0].Key)
	}
	if s := cache.Stats(); s != before {
		t.Fatalf("the wrapper's receive used the cache: %+v after %+v", s, before)
	}
}

// TestChainPanicReachesCaller: a KeySource's panic during the parallel
// verification of a chain reaches the goroutine that called Receive,
// where its recover (net/http's, say) can catch it, rather than killing
// the process from a worker.
func TestChainPanicReachesCaller(t *testing.T) {
	f := newFleet(t, 5)
	h := f.chain(t, 5, "panic")
	b, err := h.Encode(handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	// The outer offer's key must be found for the chain to be reached:
	// panic only on the chain's elements.
	r2, err := handoff.NewReceiver(handoff.Options{Me: fleetMe, Keys: chainPanics{f.cfg, f.ids[4]},
		Now: func() time.Time { return benchNow }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if p := recover(); p != "keysource fault" {
			t.Fatalf("recovered %v, want the KeySource's panic", p)
		}
	}()
	r2.Receive(context.Background(), b, "")
	t.Fatal("no panic")
}

// chainPanics panics for every agent but the outer offer's.
type chainPanics struct {
	*trust.Config
	outer string
}

func (k chainPanics) Keys(iss, kid string) []trust.Key {
	if iss != k.outer {
		panic("keysource fault")
	}
	return k.Config.Keys(iss, kid)
}

// TestCycleLongChain (draft "Checking a Chain", check 6; D8): a cycle is
// found, and named by both indexes, in a short chain (compared pairwise)
// and in one longer than 32 elements a receiver's MaxChain allows (a map).
func TestCycleLongChain(t *testing.T) {
	f := newFleet(t, 48)
	for _, n := range []int{10, 45} {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		order[n-3] = 3 // agent 3 again, three from the end
		h := f.chainOf(t, order, fmt.Sprint("cycle", n))
		r, err := handoff.NewReceiver(handoff.Options{Me: fleetMe, Keys: f.cfg, Limits: handoff.Limits{MaxChain: 64, MaxHandoff: 4 << 20},
			Now: func() time.Time { return benchNow }})
		if err != nil {
			t.Fatal(err)
		}
		res := receiveHandoff(t, r, h)
		if res.Reason != handoff.ReasonCycle || res.Err.Index != n-3 || !strings.Contains(res.Err.Error(), "chain[3]") {
			t.Fatalf("chain of %d with agent 3 at %d: %s %v", n, n-3, res.Reason, res.Err)
		}
	}
}
