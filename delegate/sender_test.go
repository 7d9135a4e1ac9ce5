package delegate_test

import (
	"context"
	"errors"
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
