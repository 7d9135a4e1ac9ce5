package delegate_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// TestSenderMustBeIss: with Config.SenderMustBeIss a new hop is recorded
// only from a sender authenticated as the offer's iss (the first-delivery
// hijack, docs/threat-model.md sections 3 and 4). A copy of the offer
// delivered first by anyone else is refused with nothing recorded or
// signed, so the delegator's own delivery is still fresh; a recorded hop
// is answered as always (draft "Replay and Freshness": a status only to
// iss; "Forks, Concurrency, and Equivocation": a second offer is caught
// whoever brings it).
func TestSenderMustBeIss(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		sender string // the first delivery's
		dialog string // the first delivery's (the offer's is "ctx")
	}{
		{"another agent delivers first", "coder", "ctx"},
		{"an unauthenticated caller delivers first", "", "ctx"},
		{"a delivery past step 4 that would be rejected on the record", "mallory", "another-dialog"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			s := w.freshStore()
			d := w.delegate(s, func(cfg *delegate.Config) { cfg.SenderMustBeIss = true })
			b, o := w.offer("")
			a, err := d.Receive(ctx, b, c.dialog, c.sender)
			if err != nil {
				t.Fatal(err)
			}
			if a.Outcome != handoff.Rejected || a.Reason != handoff.ReasonPolicy || !errors.Is(a.Err, delegate.ErrSenderNotIss) ||
				!errors.Is(a.Err, handoff.ErrPolicy) || a.Status != nil || a.Take || a.Record != nil {
				t.Fatalf("first delivery by %q: %+v, want refused (policy, ErrSenderNotIss), no status, nothing taken", c.sender, a)
			}
			if a.Result.Outcome == handoff.Equivocation || a.Iss != o.Iss || a.Hop != o.Hop {
				t.Errorf("the receiver's verdict or the hop was changed: %+v", a)
			}
			if _, err := s.Get(ctx, o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the refused delivery was recorded: %v", err)
			}
			// The delegator's own delivery is a fresh offer.
			a, err = d.Receive(ctx, b, "ctx", "planner")
			if err != nil || !a.Take || a.Outcome != handoff.Accepted || a.Status == nil {
				t.Fatalf("the delegator's delivery after the refused one: %+v %v, want taken", a, err)
			}
			// Recorded now: the other sender gets a retransmission without
			// a status, as without the option.
			a, err = d.Receive(ctx, b, "ctx", c.sender)
			if err != nil || a.Outcome != handoff.Retransmission || a.Status != nil || a.Take {
				t.Fatalf("delivery by %q of a recorded hop: %+v %v, want a retransmission with no status", c.sender, a, err)
			}
			// A second offer for the hop is an equivocation whoever brings it.
			b2, _ := w.offer(o.Hop)
			a, err = d.Receive(ctx, b2, "ctx", c.sender)
			if err != nil || a.Outcome != handoff.Equivocation || a.Status != nil {
				t.Fatalf("second offer for the hop by %q: %+v %v, want an equivocation", c.sender, a, err)
			}
			if r, err := s.Get(ctx, o.Iss, o.Hop); err != nil || !r.Equivocated || r.State != store.Accepted {
				t.Fatalf("record after the equivocation: %+v %v", r, err)
			}
		})
	}
}

// TestSenderMustBeIssOff: without the option a fresh offer is taken from
// whoever delivers it first (the draft's default; the resend rule alone
// is keyed to the sender).
func TestSenderMustBeIssOff(t *testing.T) {
	w := newWorld(t)
	d := w.delegate(w.freshStore(), nil)
	b, _ := w.offer("")
	a, err := d.Receive(context.Background(), b, "ctx", "coder")
	if err != nil || !a.Take {
		t.Fatalf("%+v %v, want taken", a, err)
	}
}

// TestSenderMustBeIssStale: a rejection at steps 1-4 is neither recorded
// nor remembered whoever sends it, so it is answered as always, with its
// signed status (it says only that the offer is not taken).
func TestSenderMustBeIssStale(t *testing.T) {
	w := newWorld(t)
	s := w.freshStore()
	d := w.delegate(s, func(cfg *delegate.Config) { cfg.SenderMustBeIss = true })
	b, o := w.offer("")
	w.advance(5 * time.Minute) // past exp (iat + 120 s) and the skew
	a, err := d.Receive(context.Background(), b, "ctx", "")
	if err != nil || a.Outcome != handoff.Rejected || a.Reason != handoff.ReasonStale || a.Status == nil {
		t.Fatalf("%+v %v, want a signed stale rejection", a, err)
	}
	if _, err := s.Get(context.Background(), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a stale offer was recorded: %v", err)
	}
}

// TestSenderMustBeIssStopsAtStep4: a copy refused for its sender stops at
// step 4 (draft "Receiving an Offer": nothing after the replay check runs
// for it), so a captured offer delivered again and again never reaches
// the chain's signatures nor the reference checks (found by review: the
// refusal came after steps 5-7, five copies ran step 7 five times).
func TestSenderMustBeIssStopsAtStep4(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.addAgent("assistant")
	var refChecks atomic.Int32
	keys := &countingKeys{KeySource: w.keys}
	d := w.delegate(w.freshStore(), func(c *delegate.Config) {
		c.SenderMustBeIss = true
		c.Options.Keys = keys
		c.Options.CheckRefs = func(_ context.Context, o *handoff.Offer) ([]handoff.RefOutcome, error) {
			refChecks.Add(1)
			return make([]handoff.RefOutcome, len(o.Refs)), nil
		}
	})
	n := w.clock().Unix()
	first, err := w.signers["assistant"].SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: "assistant", Aud: "planner", Iat: n, Exp: n + 120}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	prev := first.Digest()
	ref := handoff.ContextRef{Kind: handoff.KindDigest, Dig: handoff.Digest{Alg: "sha-256", Val: make([]byte, 32)}}
	next, err := w.signers["planner"].SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: "planner", Aud: "coder", Iat: n, Exp: n + 120,
		Prev: &prev, Refs: []handoff.ContextRef{ref}}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&handoff.Handoff{Offer: first}).PassOn(next).Encode(handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	const copies = 5
	for range copies {
		a, err := d.Receive(ctx, b, "ctx", "")
		if err != nil || !errors.Is(a.Err, delegate.ErrSenderNotIss) {
			t.Fatalf("%+v %v, want refused for its sender", a, err)
		}
		var ce *handoff.CheckError
		if !errors.As(a.Err, &ce) || ce.Step != 4 || a.Result.ChainQuality != handoff.ChainUnchecked {
			t.Fatalf("refused at %+v (chain %s), want step 4 with the chain unchecked", ce, a.Result.ChainQuality)
		}
	}
	if n, k := refChecks.Load(), keys.n.Load(); n != 0 || k != copies {
		t.Fatalf("%d refused copies ran the reference check %d times and looked up %d keys; want none, and one key each (the offer's own)", copies, n, k)
	}
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || !a.Take || a.Result.ChainQuality != handoff.ChainFull || refChecks.Load() != 1 {
		t.Fatalf("the delegator's delivery: %+v %v (reference checks %d), want taken with its chain and refs checked", a, err, refChecks.Load())
	}
}

// TestSenderMustBeIssOtherPaths: a refused copy leaves a held cancel held
// (the delegator's delivery is then refused and recorded canceled), a
// deferring delegate records the delegator's delivery "received", and a
// same-content copy (SPEC D5) delivered first by anyone is refused, the
// delegator's offer then taken, the copy after it a retransmission (a
// status only to iss). Found holding by review.
func TestSenderMustBeIssOtherPaths(t *testing.T) {
	ctx := context.Background()
	t.Run("a held cancel", func(t *testing.T) {
		w := newWorld(t)
		s := w.freshStore()
		d := w.delegate(s, func(c *delegate.Config) { c.SenderMustBeIss = true })
		b, o := w.offer("")
		if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); err == nil {
			t.Fatal("the cancel was not held")
		}
		a, err := d.Receive(ctx, b, "ctx", "coder")
		if err != nil || a.Record != nil || a.Status != nil || !errors.Is(a.Err, delegate.ErrSenderNotIss) {
			t.Fatalf("the copy: %+v %v", a, err)
		}
		a, err = d.Receive(ctx, b, "ctx", "planner")
		wantRefusedCanceled(t, w, s, a, err, b, o)
	})
	t.Run("deferred", func(t *testing.T) {
		w := newWorld(t)
		d := w.delegate(w.freshStore(), func(c *delegate.Config) { c.SenderMustBeIss, c.Defer = true, true })
		b, _ := w.offer("")
		a, err := d.Receive(ctx, b, "ctx", "coder")
		if err != nil || a.Record != nil || !errors.Is(a.Err, delegate.ErrSenderNotIss) {
			t.Fatalf("the copy: %+v %v", a, err)
		}
		a, err = d.Receive(ctx, b, "ctx", "planner")
		if err != nil || a.Outcome != handoff.Accepted || a.Record == nil || a.Record.State != store.Received {
			t.Fatalf("the delegator's delivery: %+v %v, want recorded received", a, err)
		}
	})
	for _, c := range d5Copies {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			d := w.delegate(w.freshStore(), func(cfg *delegate.Config) { cfg.SenderMustBeIss = true })
			b, o := w.offer("")
			h, err := handoff.ParseHandoff(b, handoff.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			first := h.Offer
			if c.form == handoff.FormCOSE {
				if first, err = w.signers["planner"].SignOffer(o, handoff.FormCOSE); err != nil {
					t.Fatal(err)
				}
				if b, err = (&handoff.Handoff{Offer: first}).Encode(handoff.JSON); err != nil {
					t.Fatal(err)
				}
			}
			cb, err := (&handoff.Handoff{Offer: c.make(t, w, first, o)}).Encode(handoff.JSON)
			if err != nil {
				t.Fatal(err)
			}
			if a, err := d.Receive(ctx, cb, "ctx", ""); err != nil || a.Record != nil || !errors.Is(a.Err, delegate.ErrSenderNotIss) {
				t.Fatalf("the copy first: %+v %v", a, err)
			}
			if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
				t.Fatalf("the delegator's delivery: %+v %v", a, err)
			}
			for _, sender := range []string{"", "planner"} {
				a, err := d.Receive(ctx, cb, "ctx", sender)
				if err != nil || a.Outcome != handoff.Retransmission || (a.Status != nil) != (sender == "planner") {
					t.Fatalf("the copy after, from %q: %+v %v, want a retransmission with a status only for iss", sender, a, err)
				}
			}
		})
	}
}

// TestSenderNotIssOnlyFromTheMemory: ErrSenderNotIss is exported, so a
// host's hook may wrap it; only the memory's step-4 refusal is answered
// unsigned and unrecorded. A grant check failing with it, the option off
// and the sender the iss, is a step-7 rejection like any other: signed
// and recorded (found by review).
func TestSenderNotIssOnlyFromTheMemory(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.freshStore()
	d := w.delegate(s, func(c *delegate.Config) {
		c.Options.CheckGrant = func(context.Context, handoff.Digest) error {
			return fmt.Errorf("the host says: %w", delegate.ErrSenderNotIss)
		}
	})
	n := w.clock().Unix()
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: "planner", Aud: "coder", Iat: n, Exp: n + 120,
		Grant: &handoff.Digest{Alg: "sha-256", Val: make([]byte, 32)}}
	el, err := w.signers["planner"].SignOffer(o, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || a.Outcome != handoff.Rejected || a.Status == nil || a.Record == nil {
		t.Fatalf("%+v %v, want a signed and recorded rejection", a, err)
	}
	if r, err := s.Get(ctx, o.Iss, o.Hop); err != nil || r.State != store.Rejected {
		t.Fatalf("record %+v %v, want rejected", r, err)
	}
}
