package delegate_test

import (
	"context"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// Lifecycle: a delegate "MUST NOT send "rejected" for a hop it has taken,
// except with reason "stale" or "replay" for a hop it no longer
// remembers". Once a hop is taken, nothing that reaches the delegate for
// it (the offer again, with or without an authenticated sender, a
// re-signed copy (D5), an equivocating offer, the delegator's cancel, the
// outcome and the offer after it) gets a "rejected"; once the hop is
// forgotten (swept, the offer stale), the offer again may get "rejected"
// only as "stale" or "replay".
func TestTakenHopIsNeverRejected(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.freshStore()
	d := w.delegate(s, func(c *delegate.Config) { c.Stop = func(string, string) {} })
	b, o := w.offer("")
	first, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || !first.Take {
		t.Fatalf("not taken: %+v %v", first, err)
	}
	h, err := handoff.ParseHandoff(b, handoff.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// never checks every status the delegate gives for the hop after it
	// was taken.
	never := func(what string, el *handoff.Element) {
		t.Helper()
		if el == nil {
			return
		}
		st := statusOf(t, w, el, b)
		if st.State == handoff.StateRejected {
			t.Errorf("%s: the taken hop was answered rejected (reason %q)", what, st.Reason)
		}
	}
	deliveries := []struct {
		what   string
		offer  func() []byte
		sender string
	}{
		{"the offer again, sender authenticated", func() []byte { return b }, "planner"},
		{"the offer again, sender unknown", func() []byte { return b }, ""},
		{"a same-content copy re-signed (D5)", func() []byte {
			el, err := w.signers["planner"].SignOffer(o, handoff.FormCOSE)
			if err != nil {
				t.Fatal(err)
			}
			c, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}, "planner"},
	}
	for _, dl := range deliveries {
		a, err := d.Receive(ctx, dl.offer(), "ctx", dl.sender)
		if err != nil {
			t.Fatalf("%s: %v", dl.what, err)
		}
		if a.Take {
			t.Errorf("%s: taken a second time", dl.what)
		}
		never(dl.what, a.Status)
	}
	// An equivocating offer: no status for it, none rejecting the first.
	b2, _ := w.offer(o.Hop)
	a2, err := d.Receive(ctx, b2, "ctx", "planner")
	if err != nil || a2.Take || a2.Status != nil {
		t.Fatalf("equivocation: %+v %v", a2, err)
	}
	if r, err := s.Get(ctx, o.Iss, o.Hop); err != nil || r.State != store.Accepted {
		t.Fatalf("after the equivocation the record is %+v, %v; want accepted", r, err)
	}
	// The delegator's cancel.
	cancel, err := w.signers["planner"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "planner", Aud: "coder",
		Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Cancel(ctx, cancel, o.Iss, o.Hop); err != nil {
		t.Fatal(err)
	}
	// The outcome, and the offer after it.
	done, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Failed, NoEffect: true})
	if err != nil {
		t.Fatal(err)
	}
	never("the outcome", done)
	after, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil {
		t.Fatal(err)
	}
	never("the offer after the outcome", after.Status)
	if r, _ := s.Get(ctx, o.Iss, o.Hop); r.State == store.Rejected {
		t.Fatalf("the record says rejected: %+v", r)
	}

	// Forgotten: swept past the offer's life and the retention, the offer
	// again is stale; a "rejected" may say only that.
	w.advance(time.Hour)
	if _, err := s.Sweep(ctx, w.clock(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, o.Iss, o.Hop); err == nil {
		t.Fatal("the hop is still recorded after the sweep")
	}
	late, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil {
		t.Fatal(err)
	}
	if late.Take {
		t.Fatal("a forgotten, stale offer was taken")
	}
	if late.Status == nil {
		t.Fatal("a forgotten, stale offer got no answer; want rejected, stale")
	}
	if st := statusOf(t, w, late.Status, b); st.State == handoff.StateRejected && st.Reason != handoff.ReasonStale && st.Reason != handoff.ReasonReplay {
		t.Fatalf("a forgotten hop rejected with reason %q; only stale or replay may be sent", st.Reason)
	}
}
