package a2ahandoff_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// After a verified "canceled" the hop's outcome is still recorded
// (draft "Lifecycle": a cancel does not show that the work took no
// effect; "Knowing the Outcome": the delegate never guesses), every time,
// although a2a-go cancels the execution's context once CANCELED is
// written: with NoEffectUnlessCompleted the hop ends "failed" with no
// effect; without it the hop stays "accepted" and is flagged
// unknown-outcome.
func TestCancelRecordsOutcome(t *testing.T) {
	const rounds = 20
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("NoEffectUnlessCompleted=%v", known), func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = known })
			c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), handoff.JSON)
			for i := range rounds {
				r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: fmt.Sprintf("w%d", i)}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
				if err != nil {
					t.Fatal(err)
				}
				<-srv.agent.started
				if _, err := c.Cancel(ctx, r.Hop); err != nil {
					t.Fatal(err)
				}
				<-srv.agent.stopped
				deadline := time.Now().Add(5 * time.Second)
				for {
					rec, err := srv.st.Get(ctx, assistantID, r.Hop)
					if err != nil {
						t.Fatal(err)
					}
					flags, err := srv.x.Delegate().Flags(ctx, false)
					if err != nil {
						t.Fatal(err)
					}
					flagged := hasFlag(t, flags, store.FlagUnknownOutcome, r.Hop)
					if known && rec.State == store.Failed && !flagged {
						break
					}
					if !known && rec.State == store.Accepted && flagged {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("round %d: hop %s is %s, unknown-outcome flagged %v; want %s", i, r.Hop, rec.State,
							flagged, map[bool]string{true: "failed, not flagged", false: "accepted and flagged"}[known])
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// A task may carry a second offer from the same delegator, sent as a
// follow-up into it; the delegator's "canceled" for that hop is verified
// against the offer it names (D9), not against the task's first offer.
// A cancel never writes CANCELED on a task that still carries another
// open hop (decision 53): the second hop is canceled and its work
// stopped, the request is refused as not cancelable, and the task waits
// again (INPUT_REQUIRED) for the first hop; once that one is canceled
// too, the task ends CANCELED.
func TestCancelOfSecondOfferInTask(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = true })
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	r1, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "first"}, say("more"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r1.State() != a2a.TaskStateInputRequired {
		t.Fatalf("first: %s, want input-required", r1.State())
	}
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "second", Dialog: r1.Task.ContextID})
	if err != nil {
		t.Fatal(err)
	}
	m := say("block")
	m.ContextID, m.TaskID = r1.Task.ContextID, r1.Task.ID
	r2, err := c.Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: new(false)})
	if err != nil {
		t.Fatal(err)
	}
	<-srv.agent.started
	if r2.Task == nil || r2.Task.ID != r1.Task.ID {
		t.Fatalf("the second offer's reply %+v is not the first task", r2.Result)
	}
	_, err = c.Cancel(ctx, issued.Hop)
	if err == nil || !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of the second hop while the first is open: %v; want the task not canceled", err)
	}
	<-srv.agent.stopped
	rec, err := srv.st.Get(ctx, assistantID, issued.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Canceled {
		t.Fatal("the second hop is not noted canceled")
	}
	first, err := srv.st.Get(ctx, assistantID, r1.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if first.Canceled || first.State != store.Accepted {
		t.Fatalf("the first hop is %s (canceled %v); want accepted, not canceled", first.State, first.Canceled)
	}
	ac := a2aClient(t, srv.url, "token-of-"+assistantID)
	waitTask(t, ac, r1.Task.ID, a2a.TaskStateInputRequired, "the task, after its second hop's cancel")

	cr, err := c.Cancel(ctx, r1.Hop)
	if err != nil || cr.State() != a2a.TaskStateCanceled {
		t.Fatalf("cancel of the first hop, the last open one: %v; want the task canceled", err)
	}
}
