package a2ahandoff_test

import (
	"context"
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
