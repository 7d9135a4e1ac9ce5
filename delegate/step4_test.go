package delegate_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// countingGets is a hop store that counts its reads on the claim path:
// of a hop, of a cancel held for an offer, of a hop by its offer.
type countingGets struct {
	store.Store
	n atomic.Int32
}

func (c *countingGets) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, iss, hop)
}

func (c *countingGets) HeldFor(ctx context.Context, iss string, dg handoff.Digest) (*store.Held, error) {
	c.n.Add(1)
	return c.Store.HeldFor(ctx, iss, dg)
}

func (c *countingGets) HopOf(ctx context.Context, iss string, dg handoff.Digest) (string, error) {
	c.n.Add(1)
	return c.Store.HopOf(ctx, iss, dg)
}

// Step 4 reads the store only when it saves work (decision 69): an offer
// with no chain, and no refs for the reference check, is claimed with no
// read, not even a look for a cancel held for it (the claim itself is
// refused while one is: store.Store.Claim, decision 76), and its
// retransmission is answered from one read.
func TestStep4ReadsOnlyWhenItSavesWork(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := &countingGets{Store: w.freshStore()}
	d := w.delegate(s, func(c *delegate.Config) {
		c.Options.CheckRefs = func(_ context.Context, o *handoff.Offer) ([]handoff.RefOutcome, error) {
			return make([]handoff.RefOutcome, len(o.Refs)), nil
		}
	})
	b, _ := w.offer("") // no chain, no refs
	if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || a.Outcome != handoff.Accepted {
		t.Fatalf("Receive: %+v, %v", a, err)
	}
	if n := s.n.Load(); n != 0 {
		t.Fatalf("%d reads for a new offer with no chain and no refs; want none", n)
	}
	s.n.Store(0)
	if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || a.Outcome != handoff.Retransmission {
		t.Fatalf("again: %+v, %v", a, err)
	}
	if got := s.n.Load(); got > 1 {
		t.Fatalf("%d reads for a retransmission; want at most one", got)
	}
}

// countingKeys counts the key look-ups of signature checks: one for the
// offer, one more for each chain element verified.
type countingKeys struct {
	handoff.KeySource
	n atomic.Int32
}

func (c *countingKeys) Keys(iss, kid string) []trust.Key {
	c.n.Add(1)
	return c.KeySource.Keys(iss, kid)
}

// Draft "Receiving an Offer", step 4, and "Freshness and Replay": a
// retransmission is not processed again. The same offer delivered three
// times to one delegate, and once more to a second one sharing the store
// (a replica, or the same records after a restart), runs step 7 (a
// reference check that counts its calls) and step 6 (the chain's
// signatures, counted by key look-ups) once: every later delivery stops
// at step 4 on the hop's record (decision 69).
func TestRecordedHopStopsAtStep4(t *testing.T) {
	for _, k := range d5Stores {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			w.addAgent("assistant")
			s, again := k.open(t, w)
			var refChecks atomic.Int32
			keys := &countingKeys{KeySource: w.keys}
			cfg := func(c *delegate.Config) {
				c.Options.Keys = keys
				c.Options.CheckRefs = func(_ context.Context, o *handoff.Offer) ([]handoff.RefOutcome, error) {
					refChecks.Add(1)
					return make([]handoff.RefOutcome, len(o.Refs)), nil
				}
			}
			d := w.delegate(s, cfg)

			// assistant -> planner -> coder: the Handoff carries the
			// assistant's offer as its chain.
			n := w.clock().Unix()
			first, err := w.signers["assistant"].SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx",
				Iss: "assistant", Aud: "planner", Iat: n, Exp: n + 120}, handoff.FormJWS)
			if err != nil {
				t.Fatal(err)
			}
			prev := first.Digest()
			next, err := w.signers["planner"].SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx",
				Iss: "planner", Aud: "coder", Iat: n, Exp: n + 120, Prev: &prev}, handoff.FormJWS)
			if err != nil {
				t.Fatal(err)
			}
			b, err := (&handoff.Handoff{Offer: first}).PassOn(next).Encode(handoff.JSON)
			if err != nil {
				t.Fatal(err)
			}

			for i, want := range []handoff.Outcome{handoff.Accepted, handoff.Retransmission, handoff.Retransmission} {
				a, err := d.Receive(ctx, b, "ctx", "planner")
				if err != nil || a.Outcome != want {
					t.Fatalf("delivery %d: %+v, %v; want %s", i+1, a, err, want)
				}
			}
			if got := refChecks.Load(); got != 1 {
				t.Errorf("step 7 ran %d times for three deliveries of one offer; want once", got)
			}
			if got := keys.n.Load(); got != 4 { // 2 for the first delivery, 1 (the offer only) for each other
				t.Errorf("%d key look-ups for three deliveries; want 4 (the chain verified once)", got)
			}

			replica := w.delegate(again(), cfg)
			a, err := replica.Receive(ctx, b, "ctx", "planner")
			if err != nil || a.Outcome != handoff.Retransmission || a.Status == nil {
				t.Fatalf("the replica's delivery: %+v, %v; want a retransmission with its status", a, err)
			}
			if got := refChecks.Load(); got != 1 {
				t.Errorf("step 7 ran %d times after a replica's delivery; want once", got)
			}
		})
	}
}

// TestResendOnlyToTheIss: a retransmission gets the recorded status only
// when the sender the host authenticated is the verified offer's iss
// (draft "Replay and Freshness"); the delegate compares the two itself,
// so a sender authenticated as another agent, or as no one, gets none.
func TestResendOnlyToTheIss(t *testing.T) {
	w := newWorld(t)
	d := w.delegate(w.freshStore(), nil)
	b, _ := w.offer(handoff.NewHop())
	ctx := context.Background()
	if a, err := d.Receive(ctx, b, "ctx", ""); err != nil || !a.Take {
		t.Fatalf("first delivery: %+v %v", a, err)
	}
	for _, c := range []struct {
		sender string
		status bool
	}{{"", false}, {"coder", false}, {"planner ", false}, {"planner", true}} {
		a, err := d.Receive(ctx, b, "ctx", c.sender)
		if err != nil || a.Outcome != handoff.Retransmission || (a.Status != nil) != c.status {
			t.Errorf("sender %q: %+v %v, want a retransmission with status %v", c.sender, a, err, c.status)
		}
	}
}

// TestConfigMustNotSetMemory: step 4 has one owner, the delegate's store:
// a Config that brings its own replay memory or Since is refused, not
// silently overridden.
func TestConfigMustNotSetMemory(t *testing.T) {
	w := newWorld(t)
	for _, mut := range []func(*delegate.Config){
		func(c *delegate.Config) { c.Options.Memory = handoff.NewMemory(nil) },
		func(c *delegate.Config) { c.Options.Since = w.clock() },
	} {
		cfg := delegate.Config{Options: handoff.Options{Me: "coder", Keys: w.keys, Now: w.clock}, Store: w.freshStore(), Signer: w.signers["coder"]}
		mut(&cfg)
		if _, err := delegate.New(context.Background(), cfg); err == nil {
			t.Error("New took a Config that sets the receiver's memory")
		}
	}
}
