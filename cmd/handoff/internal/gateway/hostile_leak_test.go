package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff/delegator"
)

// The gateway->upstream task map drops a canceled hop's entry.
func TestHostileCancelForgetsTask(t *testing.T) {
	r := newRigWith(t, "reject", true)
	c, _, dl := r.clientWith(t, plannerToken)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-l", Work: "long-" + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		m := msg("block")
		m.ContextID = "ctx-l"
		noWait := false
		if _, err := c.Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: &noWait}); err != nil {
			t.Fatal(err)
		}
		<-r.agent.started
		if _, err := c.Cancel(ctx, issued.Hop); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 3*time.Second, func() bool { return r.agent.canceled.Load() == 3 })
	time.Sleep(300 * time.Millisecond)
	u := r.gw.routes[0].upstream
	u.mu.Lock()
	n := len(u.tasks)
	u.mu.Unlock()
	if n != 0 {
		t.Errorf("%d canceled (terminal) tasks still mapped to upstream tasks; the map only grows", n)
	}
}
