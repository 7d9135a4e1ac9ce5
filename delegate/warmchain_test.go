package delegate_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
)

// TestWarmChainThroughDelegate (issue 19): a delegate with a ChainCache
// reads a Handoff whose chain the cache holds without the chain's text
// (Delegate.ParseHandoff, then ReceiveParsed, as carriers do; and
// Receive), takes the offer, and keeps the chain as received in the hop's
// record, element by element. (Read warm, the Result's chain octets are
// the input's, as documented on Delegate.ParseHandoff.)
func TestWarmChainThroughDelegate(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.addAgent("assistant")
	w.addAgent("reviewer")
	cache := handoff.NewChainCache(100, 1<<20)
	d := w.delegate(w.freshStore(), func(c *delegate.Config) {
		c.Options.ChainCache, c.Options.TrustGeneration = cache, w.keys.Generation
	})
	n := w.clock().Unix()
	sign := func(from, to string, prev *handoff.Element) handoff.Element {
		t.Helper()
		o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: from, Aud: to, Iat: n, Exp: n + 120}
		if prev != nil {
			dg := prev.Digest()
			o.Prev = &dg
		}
		el, err := w.signers[from].SignOffer(o, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	first := sign("assistant", "reviewer", nil)
	second := sign("reviewer", "planner", &first)
	chain := []handoff.Element{first, second}
	handoffOf := func() []byte {
		b, err := (&handoff.Handoff{Offer: sign("planner", "coder", &second), Chain: chain}).Encode(handoff.JSON)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	check := func(name string, a *delegate.Answer, err error) {
		t.Helper()
		if err != nil || !a.Take || a.Result.ChainQuality != handoff.ChainFull {
			t.Fatalf("%s: %+v, %v; want taken, chain full", name, a, err)
		}
		if len(a.Record.Chain) != 2 || !bytes.Equal(a.Record.Chain[0], first.Octets) || !bytes.Equal(a.Record.Chain[1], second.Octets) {
			t.Fatalf("%s: the record's chain is not the chain received", name)
		}
	}
	a, err := d.Receive(ctx, handoffOf(), "ctx", "planner") // cold: the chain is verified, then cached
	check("cold", a, err)

	before := cache.Stats()
	b := handoffOf()
	h, herr := d.ParseHandoff(b)
	a, err = d.ReceiveParsed(ctx, h, herr, "ctx", "planner")
	check("parsed, then received", a, err)
	// Read warm, the chain's octets are the input's own (a full read
	// copies them): a write into the input shows in the Result.
	b[bytes.Index(b, first.Octets)] ^= 1
	if bytes.Equal(a.Result.Handoff.Chain[0].Octets, first.Octets) {
		t.Fatal("the chain was read in full, not found whole in the cache")
	}
	a, err = d.Receive(ctx, handoffOf(), "ctx", "planner")
	check("received", a, err)
	if s := cache.Stats(); s.Hits-before.Hits != 4 || s.Misses != before.Misses {
		t.Fatalf("the cache went from %+v to %+v: want both chains found whole", before, s)
	}
}
