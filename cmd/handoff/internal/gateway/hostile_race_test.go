package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// finishingAgent completes its task 500 ms after it starts, whatever
// happens (a cancel comes too late for it: it is not cancelable).
type finishingAgent struct {
	started   chan struct{}
	completed atomic.Int32
}

func (a *finishingAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message))
	q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, nil))
	a.started <- struct{}{}
	time.Sleep(500 * time.Millisecond) // the effect is being committed
	a.completed.Add(1)
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, nil)
	ev.Final = true
	return q.Write(context.WithoutCancel(ctx), ev)
}

func (a *finishingAgent) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	return a2a.ErrTaskNotCancelable
}

// A cancel that races the upstream's completion, on an effect-free route:
// the upstream's "completed" decides the outcome, not the cancel (no
// signed "failed" for work that completed upstream), whether the
// gateway reads the task from a stream or follows it with tasks/get.
func TestHostileCancelRacingCompletion(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			ag := &finishingAgent{started: make(chan struct{}, 1)}
			card := *streamingCard
			card.Capabilities.Streaming = streaming
			mux := http.NewServeMux()
			mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(ag)))
			mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(&card))
			r := newAdvRig(t, mux, "name: a, path: /a/, without_handoff: reject, failures_effect_free: true")
			ac := r.ac(t, "/a/", plannerToken)
			m, hop := r.offerMsg(t, "", "ctx-r", "go", nil)
			noWait := false
			res, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m, Config: &a2a.MessageSendConfig{Blocking: &noWait}})
			if err != nil {
				t.Fatal(err)
			}
			<-ag.started
			rec := r.record(t, hop)
			canceled, _ := r.planner.SignStatus(&handoff.Status{Offer: rec.Digest, Iss: "https://planner.example", Aud: "https://coder.example",
				State: handoff.StateCanceled, Iat: time.Now().Unix()}, handoff.FormJWS)
			if _, err := ac.CancelTask(context.Background(), &a2a.TaskIDParams{ID: res.(*a2a.Task).ID, Metadata: map[string]any{a2ahandoff.Key: canceled.Text()}}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 3*time.Second, func() bool { return ag.completed.Load() == 1 })
			if !waitFor(t, 5*time.Second, func() bool { return r.record(t, hop).State == store.Completed }) {
				t.Errorf("the upstream completed its work (%d); the hop record is %s, want completed", ag.completed.Load(), r.record(t, hop).State)
			}
		})
	}
}
