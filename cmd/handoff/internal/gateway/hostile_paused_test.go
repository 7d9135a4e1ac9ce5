package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
)

// From a review of the gateway's lifecycle: a2a-go ends an execution's
// ctx once its final event is processed, which is not a stop; a hop that
// waits for input keeps its upstream task and its mapping, and is never
// signed "failed"; a non-streaming upstream that asks for input answers
// a blocking send.

func pausedProbe(t *testing.T, r *advRig, ag *inputAgent, hop string) {
	u := r.gw.routes[0].upstream
	u.mu.Lock()
	nt, nh := len(u.tasks), len(u.hops)
	u.mu.Unlock()
	rec := r.record(t, hop)
	t.Logf("upstream cancels %d; tasks %d hops %d; record %s flags %d", ag.canceled.Load(), nt, nh, rec.State, len(r.flags(t)))
	if ag.canceled.Load() != 0 || nt != 1 || nh != 1 || len(r.flags(t)) != 0 {
		t.Errorf("paused hop disturbed: cancels %d tasks %d hops %d flags %+v", ag.canceled.Load(), nt, nh, r.flags(t))
	}
}

func TestHostileInputRequiredStreaming(t *testing.T) {
	ag := &inputAgent{}
	r := newAdvRig(t, upstreamOf(ag), "name: a, path: /a/, without_handoff: reject")
	ac := r.ac(t, "/a/", plannerToken)
	m, hop := r.offerMsg(t, "", "ctx-p", "go", nil)
	res, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("state %s", res.(*a2a.Task).Status.State)
	time.Sleep(300 * time.Millisecond)
	pausedProbe(t, r, ag, hop)
}

func TestHostileInputRequiredNonStreaming(t *testing.T) {
	ag := &inputAgent{}
	card := *streamingCard
	card.Capabilities.Streaming = false
	mux := http.NewServeMux()
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(ag)))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(&card))
	r := newAdvRig(t, mux, "name: a, path: /a/, without_handoff: reject")
	ac := r.ac(t, "/a/", plannerToken)
	m, hop := r.offerMsg(t, "", "ctx-p", "go", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := ac.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatalf("blocking send: %v", err)
	}
	t.Logf("state %s", res.(*a2a.Task).Status.State)
	time.Sleep(300 * time.Millisecond)
	pausedProbe(t, r, ag, hop)
}

func TestHostileInputRequiredEffectFree(t *testing.T) {
	ag := &inputAgent{}
	r := newAdvRig(t, upstreamOf(ag), "name: a, path: /a/, without_handoff: reject, failures_effect_free: true")
	ac := r.ac(t, "/a/", plannerToken)
	m, hop := r.offerMsg(t, "", "ctx-p", "go", nil)
	if _, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if rec := r.record(t, hop); rec.State != "accepted" {
		t.Errorf("a hop waiting for input is %s (%+v)", rec.State, rec)
	}
}
