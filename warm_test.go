package handoff_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// warmSetup is a receiver's cache holding a chain of 4 (agents 0..3 and
// their offers), and the JSON Handoff of a fresh offer continuing it, as
// the encoder writes it: the chain's text is what Receiver.warm leaves
// unread.
type warmSetup struct {
	f     *fleet
	cache *handoff.ChainCache
	h     *handoff.Handoff
	msg   []byte
}

func newWarmSetup(t testing.TB) *warmSetup {
	t.Helper()
	f := newFleet(t, 5)
	cache := handoff.NewChainCache(100, 1<<20)
	first := f.chain(t, 5, "warm-read")
	if res := receiveHandoff(t, f.receiver(t, f.cfg, cache), first); res.Outcome != handoff.Accepted {
		t.Fatalf("cold: %s %v", res.Outcome, res.Err)
	}
	h := f.next(t, first)
	msg, err := h.Encode(handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	return &warmSetup{f: f, cache: cache, h: h, msg: msg}
}

// receiver is a fresh receiver (a memory of its own) with the warm cache.
func (w *warmSetup) receiver(t testing.TB, lim handoff.Limits) *handoff.Receiver {
	return w.f.receiverWith(t, handoff.Options{Limits: lim, ChainCache: w.cache})
}

// both receives in on two fresh receivers, one with the warm cache and
// one with none, and fails unless their Results are the same in every
// member: what the warm read takes from the cache must be exactly what
// reading the whole Handoff gives.
func (w *warmSetup) both(t testing.TB, in []byte, lim handoff.Limits) (warm, plain *handoff.Result) {
	t.Helper()
	warm, werr := w.receiver(t, lim).Receive(context.Background(), in, "")
	plain, perr := w.f.receiverWith(t, handoff.Options{Limits: lim}).Receive(context.Background(), in, "")
	if warm == nil || plain == nil {
		t.Fatalf("no result: %v / %v", werr, perr)
	}
	if fmt.Sprint(werr) != fmt.Sprint(perr) {
		t.Fatalf("with the cache: %v\nwithout: %v", werr, perr)
	}
	if d := firstDiff("Result", reflect.ValueOf(warm), reflect.ValueOf(plain)); d != "" {
		t.Fatalf("the Results differ in %s (with the cache: %s %v; without: %s %v)", d, warm.Outcome, werr, plain.Outcome, perr)
	}
	return warm, plain
}

// TestWarmReadIsAFullRead (issue 19): a Receive whose chain the cache
// holds leaves the chain's text unread, and its Result is the one a
// receiver without a cache gives, for the Handoff as encoded and for
// every way its text can differ from what the cache holds: an escape in
// an element (the same octets once read), an escaped quote, a control or
// non-ASCII octet, a syntax error after the chain, a member twice, a
// chain over the receiver's bound, an element that is not a string, a
// broken offer, one whose payload does not decode, one whose signature
// fails. The warm read is taken (the chain's elements counted as hits
// once the offer is verified, no look-up missed) exactly where the text
// is what the cache holds.
func TestWarmReadIsAFullRead(t *testing.T) {
	w := newWarmSetup(t)
	el0 := string(w.h.Chain[0].Octets)
	el3 := string(w.h.Chain[3].Octets)
	offer := string(w.h.Offer.Octets)
	dot := bytes.IndexByte(w.h.Chain[0].Octets, '.')
	odot := bytes.IndexByte(w.h.Offer.Octets, '.')
	flip := func(c byte) string { // another base64url character
		if c == 'A' {
			return "B"
		}
		return "A"
	}
	edit := func(old, new string) []byte {
		if !bytes.Contains(w.msg, []byte(old)) {
			t.Fatalf("%.20q is not in the Handoff", old)
		}
		return bytes.Replace(w.msg, []byte(old), []byte(new), 1)
	}
	syntaxAfter := append(bytes.TrimSuffix(bytes.TrimSpace(bytes.Clone(w.msg)), []byte("}")), ",}"...)
	for _, c := range []struct {
		name    string
		in      []byte
		lim     handoff.Limits
		warm    bool // the chain's text is left unread
		outcome handoff.Outcome
	}{
		{"as encoded", w.msg, handoff.Limits{}, true, handoff.Accepted},
		{"white space between elements", edit(`","`, "\" ,\n\t\""), handoff.Limits{}, true, handoff.Accepted},
		{"an element's period escaped", edit(el0, el0[:dot]+`\u002e`+el0[dot+1:]), handoff.Limits{}, false, handoff.Accepted},
		{"an escaped quote in an element", edit(el3, el3[:10]+`\"`+el3[10:]), handoff.Limits{}, false, handoff.Rejected},
		{"an escaped quote ending an element", edit(el3+`"`, el3+`\""`), handoff.Limits{}, false, handoff.Rejected},
		{"a control octet in an element", edit(el0, el0[:5]+"\x01"+el0[5:]), handoff.Limits{}, false, handoff.Rejected},
		{"a non-ASCII octet in an element", edit(el0, el0[:5]+"é"+el0[5:]), handoff.Limits{}, false, handoff.Rejected},
		{"an element cut short", edit(el0, el0[:len(el0)-1]), handoff.Limits{}, false, handoff.Rejected},
		{"a syntax error after the chain", syntaxAfter, handoff.Limits{}, false, handoff.Rejected},
		{"the chain member twice", edit(`{`, `{"chain":["x"],`), handoff.Limits{}, false, handoff.Rejected},
		{"a chain over the bound", w.msg, handoff.Limits{MaxChain: 3}, false, handoff.Rejected},
		{"an element that is not a string", edit(`"`+el3+`"`, `"`+el3+`",7`), handoff.Limits{}, false, handoff.Rejected},
		{"a broken offer", edit(offer, offer[:20]+"!"+offer[21:]), handoff.Limits{}, false, handoff.Rejected},
		{"an offer whose payload does not decode", edit(offer, offer[:odot+3]+flip(offer[odot+3])+offer[odot+4:]), handoff.Limits{}, false, handoff.Rejected},
		{"an offer with a bad signature", edit(offer, offer[:len(offer)-3]+flip(offer[len(offer)-3])+offer[len(offer)-2:]), handoff.Limits{}, true, handoff.Rejected},
	} {
		t.Run(c.name, func(t *testing.T) {
			if warm := w.receiver(t, c.lim).ReadsWarm(c.in); warm != c.warm {
				t.Fatalf("chain text left unread: %v, want %v", warm, c.warm)
			}
			before := w.cache.Stats()
			res, _ := w.both(t, c.in, c.lim)
			if res.Outcome != c.outcome {
				t.Fatalf("outcome %s (%v), want %s", res.Outcome, res.Err, c.outcome)
			}
			// A warm read counts its hits once the offer is verified (and
			// past steps 2-5): an offer anyone could forge counts none.
			hits := uint64(0)
			if res.Outcome == handoff.Accepted {
				hits = 4
			}
			if s := w.cache.Stats(); c.warm && (s.Hits-before.Hits != hits || s.Misses != before.Misses) {
				t.Fatalf("the cache went from %+v to %+v: want %d hits and no miss", before, s, hits)
			}
		})
	}
}

// TestWarmReadAliasesInput: the chain octets of a Handoff read warm alias
// the octets it was read from, which the caller owns (documented on
// ChainElement), and what was found is used only for the octets as they
// still are: a write into the input between ParseHandoff and
// ReceiveParsed has the Handoff received in full, and refused when the
// written element no longer verifies. A write into one Result's chain
// octets changes nothing for another receive, nor for the cache.
func TestWarmReadAliasesInput(t *testing.T) {
	w := newWarmSetup(t)
	ctx := context.Background()
	in := bytes.Clone(w.msg)
	r := w.receiver(t, handoff.Limits{})
	h, err := r.ParseHandoff(in)
	if err != nil {
		t.Fatal(err)
	}
	el := h.Chain[2].Octets
	if !bytes.Contains(in, el) || &el[0] != &in[bytes.Index(in, el)] {
		t.Fatal("the chain's octets do not alias the input")
	}
	el[len(el)-5] ^= 'A' ^ 'B' // in the signature: still base64url
	res, _ := r.ReceiveParsed(ctx, h, nil, "")
	if res.Outcome != handoff.Rejected || res.Reason != handoff.ReasonBrokenChain || res.Err.Index != 2 {
		t.Fatalf("written between the parse and the receive: %s %s %v, want rejected broken-chain at chain[2]", res.Outcome, res.Reason, res.Err)
	}

	res, _ = w.both(t, w.msg, handoff.Limits{})
	spoiled := res.Chain[2].Element.Octets
	spoiled[len(spoiled)-5] ^= 'A' ^ 'B'
	again := receiveHandoff(t, w.receiver(t, handoff.Limits{}), w.f.next(t, w.h))
	if again.Outcome != handoff.Accepted || again.ChainQuality != handoff.ChainFull {
		t.Fatalf("after a caller's write: %s %s %v", again.Outcome, again.ChainQuality, again.Err)
	}
	forged := *w.f.next(t, w.h)
	forged.Chain = append([]handoff.Element(nil), forged.Chain...)
	forged.Chain[2] = handoff.Element{Form: handoff.FormJWS, Octets: bytes.Clone(spoiled)}
	res, _ = w.both(t, mustJSON(t, &forged), handoff.Limits{})
	if res.Outcome != handoff.Rejected || res.Reason != handoff.ReasonBrokenChain || res.Err.Index != 2 {
		t.Fatalf("the written octets: %s %s %v, want rejected broken-chain at chain[2]", res.Outcome, res.Reason, res.Err)
	}
}

func mustJSON(t testing.TB, h *handoff.Handoff) []byte {
	t.Helper()
	b, err := h.Encode(handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzReceiveWarm holds the warm read (a chain found in the cache, its
// text left unread) to the full one: any octets, received by a receiver
// whose cache holds a chain and by one with no cache, give the same
// Result in every member. The seeds are the warm Handoff and the edits
// of TestWarmReadIsAFullRead.
func FuzzReceiveWarm(f *testing.F) {
	w := newWarmSetup(f)
	f.Add(w.msg)
	f.Add(bytes.Replace(w.msg, []byte(`","`), []byte("\" , \""), -1))
	f.Add(bytes.Replace(w.msg, []byte(`.`), []byte(`\u002e`), 1))
	f.Add(bytes.Replace(w.msg, []byte(`","`), []byte(`\",\"`), 1))
	f.Fuzz(func(t *testing.T, in []byte) {
		w.both(t, in, handoff.Limits{})
	})
}

// firstDiff names the first member in which a and b differ ("" when
// none), following pointers, structs, slices and maps; a Handoff's
// record of what the cache found while it was read is not compared.
func firstDiff(path string, a, b reflect.Value) string {
	if a.IsValid() != b.IsValid() || a.IsValid() && a.Type() != b.Type() {
		return path
	}
	if !a.IsValid() {
		return ""
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return path
			}
			return ""
		}
		return firstDiff(path, a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type() == reflect.TypeFor[handoff.Handoff]() && a.Type().Field(i).Name == "warm" {
				continue // what the cache found while reading it, by design only on one side
			}
			if d := firstDiff(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && (a.IsNil() != b.IsNil()) || a.Len() != b.Len() {
			return path
		}
		for i := range a.Len() {
			if d := firstDiff(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return path
		}
		for _, k := range a.MapKeys() {
			if d := firstDiff(fmt.Sprintf("%s[%v]", path, k), a.MapIndex(k), b.MapIndex(k)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		if a.Pointer() != b.Pointer() {
			return path
		}
		return ""
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		if x != y && !(math.IsNaN(x) && math.IsNaN(y)) {
			return path
		}
		return ""
	default: // the comparable kinds left
		if !a.Equal(b) {
			return path
		}
		return ""
	}
}

// TestResultKeyIsNotTheTrusts: the Key of a Result, and of its chain's
// elements verified in that receive, is a copy: writing into it (its kid,
// its alg) does not change the trust configuration every receiver reads,
// so the next offer from the same issuer still verifies.
func TestResultKeyIsNotTheTrusts(t *testing.T) {
	f := newFleet(t, 3)
	r := f.receiverWith(t, handoff.Options{})
	for i := range 2 {
		res := receiveHandoff(t, r, f.chain(t, 3, fmt.Sprint("key-", i)))
		if res.Outcome != handoff.Accepted {
			t.Fatalf("receive %d: %s %v", i, res.Outcome, res.Err)
		}
		res.Key.Kid, res.Key.Alg = "changed", "none"
		for _, c := range res.Chain {
			c.Key.Kid, c.Key.Alg = "changed", "none"
		}
	}
	if ks := f.cfg.Keys(f.ids[0], ""); len(ks) != 1 || ks[0].Kid == "changed" || ks[0].Alg != "ES256" {
		t.Fatalf("the trust's key: %+v", ks)
	}
}

// swapKeys is a reloading trust: the Config it answers from can be
// replaced at any time, and its generation is that Config's.
type swapKeys struct{ p atomic.Pointer[trust.Config] }

func (s *swapKeys) Keys(iss, kid string) []trust.Key { return s.p.Load().Keys(iss, kid) }
func (s *swapKeys) generation() uint64               { return s.p.Load().Generation() }

// hookMemory runs hook when a pair is remembered (step 4), then
// remembers it.
type hookMemory struct {
	handoff.ReplayMemory
	hook func()
}

func (m *hookMemory) Remember(ctx context.Context, iss, hop string, o handoff.Element, s handoff.Seen, keep time.Time) (handoff.Seen, bool, error) {
	m.hook()
	return m.ReplayMemory.Remember(ctx, iss, hop, o, s, keep)
}

// TestWarmReadSeesTrustChange: a trust reload while an offer whose chain
// the cache holds is checked (here, while step 4 remembers it: a round
// trip to a store) revokes as at any other time. The chain found before
// the reload is looked up again under the new trust, where the key the
// reload withdrew is gone: the chain is unverifiable, and a receiver that
// requires a full chain refuses it, as one without a cache does (found by
// the adversarial review).
func TestWarmReadSeesTrustChange(t *testing.T) {
	w := newWarmSetup(t)
	revoked := w.f.trustWithout(t, 0) // agent 0 issued chain[0]
	receive := func(cache *handoff.ChainCache) *handoff.Result {
		keys := &swapKeys{}
		keys.p.Store(w.f.cfg)
		mem := &hookMemory{handoff.NewMemory(func() time.Time { return benchNow }), func() { keys.p.Store(revoked) }}
		r := w.f.receiverWith(t, handoff.Options{Keys: keys, TrustGeneration: keys.generation, ChainCache: cache,
			Memory: mem, RequireFullChain: true})
		if cache != nil && !r.ReadsWarm(w.msg) {
			t.Fatal("the chain is not read warm")
		}
		res, _ := r.Receive(context.Background(), w.msg, "")
		return res
	}
	for _, cache := range []*handoff.ChainCache{nil, w.cache} {
		res := receive(cache)
		if res.Outcome != handoff.Rejected || res.Reason != handoff.ReasonPolicy || res.Err.Step != 6 || res.ChainQuality != handoff.ChainUnverifiable {
			t.Fatalf("cache %v: %s %s %s %v, want rejected at step 6, policy, the chain unverifiable", cache != nil, res.Outcome, res.Reason, res.ChainQuality, res.Err)
		}
	}
}

// TestParseHandoffCarriesWarmRead: a carrier that reads the Handoff first
// (Receiver.ParseHandoff) and then receives it (ReceiveParsed) has the
// warm read too, with the Result a receiver without a cache gives. What
// the parse found is used only by the receiver that parsed, and only for
// the Handoff as it was read: another receiver, or a chain whose element
// a caller swapped since, is checked in full.
func TestParseHandoffCarriesWarmRead(t *testing.T) {
	w := newWarmSetup(t)
	ctx := context.Background()
	plain, _ := w.f.receiverWith(t, handoff.Options{}).Receive(ctx, w.msg, "")

	r := w.receiver(t, handoff.Limits{})
	h, err := r.ParseHandoff(w.msg)
	if err != nil {
		t.Fatal(err)
	}
	before := w.cache.Stats()
	res, _ := r.ReceiveParsed(ctx, h, nil, "")
	if d := firstDiff("Result", reflect.ValueOf(res), reflect.ValueOf(plain)); d != "" {
		t.Fatalf("parsed, then received: the Results differ in %s", d)
	}
	if s := w.cache.Stats(); s.Hits-before.Hits != 4 || s.Misses != before.Misses {
		t.Fatalf("the cache went from %+v to %+v: want the 4 elements found", before, s)
	}

	// Another receiver sharing the cache: the Handoff is received, found
	// by its own walk (4 more hits), not by the first receiver's read.
	h, _ = r.ParseHandoff(w.msg)
	other := w.receiver(t, handoff.Limits{})
	if res, _ := other.ReceiveParsed(ctx, h, nil, ""); firstDiff("Result", reflect.ValueOf(res), reflect.ValueOf(plain)) != "" {
		t.Fatalf("another receiver: %s %v", res.Outcome, res.Err)
	}

	// A chain element swapped after the parse: an element of another,
	// verified chain, whose octets the cache holds too, but not the one
	// the offer's links name.
	r = w.receiver(t, handoff.Limits{}) // a memory that has not seen the offer
	h, _ = r.ParseHandoff(w.msg)
	elsewhere := w.f.chain(t, 5, "elsewhere")
	if res := receiveHandoff(t, w.receiver(t, handoff.Limits{}), elsewhere); res.Outcome != handoff.Accepted {
		t.Fatalf("the other chain: %s %v", res.Outcome, res.Err)
	}
	h.Chain = append([]handoff.Element(nil), h.Chain...)
	h.Chain[1] = elsewhere.Chain[1]
	res, _ = r.ReceiveParsed(ctx, h, nil, "")
	if res.Outcome != handoff.Rejected || res.Reason != handoff.ReasonBrokenChain || res.Err.Index != 1 || res.Err.Member != "prev" {
		t.Fatalf("a swapped element: %s %s %v, want rejected broken-chain at chain[1]'s prev", res.Outcome, res.Reason, res.Err)
	}
}

// TestParsedHandoffTakenOnce: what Receiver.ParseHandoff found is taken by
// one receive, for the Handoff as it then is (found by the second
// adversarial review). A second receive of the same Handoff, or two at
// once, get parses of their own (a write into one Result's offer cannot
// steer the other's replay check); an offer whose form or octets a caller
// changed after the parse is received in full, with the verdict a
// receiver without a cache gives, and nothing of it is cached under the
// wrong form.
func TestParsedHandoffTakenOnce(t *testing.T) {
	w := newWarmSetup(t)
	ctx := context.Background()

	r := w.receiver(t, handoff.Limits{})
	h, _ := r.ParseHandoff(w.msg)
	res1, _ := r.ReceiveParsed(ctx, h, nil, "")
	if res1.Outcome != handoff.Accepted {
		t.Fatalf("first: %s %v", res1.Outcome, res1.Err)
	}
	res1.Offer.Hop = handoff.NewHop()
	res2, _ := r.ReceiveParsed(ctx, h, nil, "")
	if res2.Outcome != handoff.Retransmission || res2.Offer == res1.Offer {
		t.Fatalf("the same Handoff again: %s, shares the first's offer: %v", res2.Outcome, res2.Offer == res1.Offer)
	}

	edits := map[string]func(h *handoff.Handoff){
		"the offer's form": func(h *handoff.Handoff) { h.Offer.Form = handoff.FormCOSE },
		"the offer's octets, in place": func(h *handoff.Handoff) {
			o := h.Offer.Octets
			o[bytes.IndexByte(o, '.')+5] ^= 'A' ^ 'B'
		},
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			r := w.receiver(t, handoff.Limits{})
			h, _ := r.ParseHandoff(bytes.Clone(w.msg))
			edit(h)
			got, _ := r.ReceiveParsed(ctx, h, nil, "")
			ph, perr := handoff.ParseHandoff(w.msg, handoff.Limits{})
			edit(ph)
			want, _ := w.f.receiverWith(t, handoff.Options{}).ReceiveParsed(ctx, ph, perr, "")
			if d := firstDiff("Result", reflect.ValueOf(got), reflect.ValueOf(want)); d != "" || got.Outcome != handoff.Rejected {
				t.Fatalf("%s, want rejected as without a cache (%s); the Results differ in %q", got.Outcome, want.Outcome, d)
			}
		})
	}

	// Two receives of one parsed Handoff at once (go test -race): one
	// takes what was found, the other reads in full; each has its verdict.
	r = w.receiver(t, handoff.Limits{})
	h, _ = r.ParseHandoff(w.msg)
	outs := make(chan handoff.Outcome, 2)
	for range 2 {
		go func() {
			res, _ := r.ReceiveParsed(ctx, h, nil, "")
			outs <- res.Outcome
		}()
	}
	a, b := <-outs, <-outs
	if !(a == handoff.Accepted && b == handoff.Retransmission || a == handoff.Retransmission && b == handoff.Accepted) {
		t.Fatalf("two at once: %s and %s, want one accepted and one retransmission", a, b)
	}
}

// writingKeys is a trust that, the first time it is asked, runs write: a
// caller's code that changes a Handoff while it is being received.
type writingKeys struct {
	*trust.Config
	write func()
	once  sync.Once
}

func (k *writingKeys) Keys(iss, kid string) []trust.Key {
	k.once.Do(k.write)
	return k.Config.Keys(iss, kid)
}

// TestWriteDuringReceiveIsNotCached: octets written into a Handoff while
// it is received (here by the KeySource, between the offer's parse and
// its caching) are not cached as the offer that was verified, so no other
// receiver sharing the cache takes them for it (found by the third
// adversarial review).
func TestWriteDuringReceiveIsNotCached(t *testing.T) {
	f := newFleet(t, 5)
	cache := handoff.NewChainCache(100, 1<<20)
	h := f.chain(t, 5, "written")
	y := h.Chain[3]
	ph := &handoff.Handoff{Offer: y, Chain: h.Chain[:3]}
	keys := &writingKeys{Config: f.cfg, write: func() { ph.Offer = h.Chain[2] }}
	r := f.receiverWith(t, handoff.Options{Keys: keys, TrustGeneration: f.cfg.Generation, ChainCache: cache})
	if res, _ := r.ReceiveParsed(context.Background(), ph, nil, ""); res.Outcome != handoff.Rejected || res.Reason != handoff.ReasonWrongAudience {
		t.Fatalf("the offer for agent 4: %s %s %v", res.Outcome, res.Reason, res.Err)
	}
	forged := *h
	forged.Chain = append([]handoff.Element(nil), h.Chain...)
	forged.Chain[3] = h.Chain[2]
	for _, c := range []*handoff.ChainCache{cache, nil} {
		res := receiveHandoff(t, f.receiver(t, f.cfg, c), &forged)
		if res.Outcome != handoff.Rejected || res.Reason != handoff.ReasonBrokenChain {
			t.Fatalf("cache %v: chain[3] the octets written: %s %s %v, want rejected broken-chain", c != nil, res.Outcome, res.Reason, res.Err)
		}
	}
}
