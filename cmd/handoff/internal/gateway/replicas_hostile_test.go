package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegator"
)

const malloryToken = "token-of-mallory-0123456789abcdef"

// hostileReplicas is newReplicas, plus a client of each replica for a second
// bearer token (another delegator, "mallory"), and wrappers around the
// upstream.
func hostileReplicas(t *testing.T, wrap ...func(http.Handler) http.Handler) (*replicas, []*a2aclient.Client) {
	t.Helper()
	rr := newReplicasWith(t, map[string]string{plannerToken: "https://planner.example", malloryToken: "https://mallory.example"}, wrap...)
	var mallory []*a2aclient.Client
	for _, u := range rr.urls {
		mc, err := a2aclient.NewFromEndpoints(context.Background(), []a2a.AgentInterface{{URL: u, Transport: a2a.TransportProtocolJSONRPC}},
			a2aclient.WithInterceptors(bearer{token: malloryToken}))
		if err != nil {
			t.Fatal(err)
		}
		mallory = append(mallory, mc)
	}
	return rr, mallory
}

// startBlocked starts a "block" task through replica 0 and waits until the
// upstream runs it and the shared task says so.
func startBlocked(t *testing.T, rr *replicas, dialog string) (a2a.TaskID, string) {
	t.Helper()
	ctx := context.Background()
	h, issued, err := rr.dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: dialog, Work: "long"})
	if err != nil {
		t.Fatal(err)
	}
	m := msg("block")
	m.ContextID = dialog
	noWait := false
	rep, err := rr.clients[0].Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: &noWait})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Task == nil {
		t.Fatalf("no task: %+v", rep)
	}
	<-rr.agent.started
	// The upstream runs the work before the gateway has written the
	// upstream's "working" into the shared task: wait for that too, so
	// that the tests start from a task every replica sees working.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := rr.raw[1].GetTask(ctx, &a2a.TaskQueryParams{ID: rep.Task.ID})
		if err == nil && got.Status.State == a2a.TaskStateWorking {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task is not working on replica 1 after 10 s: %s %v", taskState(got), err)
		}
	}
	return rep.Task.ID, issued.Hop
}

func taskState(t *a2a.Task) string {
	if t == nil {
		return "<nil>"
	}
	return string(t.Status.State)
}

// TestReplicasForeignMessageIntoRunningTask: a message naming another
// delegator's running task, sent to the replica that does not run it, is
// refused as on the replica that does: it is not appended to the task,
// and the task's run goes on (a2a-go would store it in the shared task
// and bump its version under the running replica).
func TestReplicasForeignMessageIntoRunningTask(t *testing.T) {
	rr, mallory := hostileReplicas(t)
	ctx := context.Background()
	task, _ := startBlocked(t, rr, "ctx-victim")
	for i := range 2 {
		bad := msg(fmt.Sprintf("injected by mallory through replica %d", i))
		bad.TaskID = task
		if res, err := mallory[i].SendMessage(ctx, &a2a.MessageSendParams{Message: bad}); err == nil {
			t.Errorf("replica %d took a message into a running task: %T", i, res)
		}
	}
	after, err := rr.raw[1].GetTask(ctx, &a2a.TaskQueryParams{ID: task})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range after.History {
		for _, p := range m.Parts {
			if tp, ok := p.(a2a.TextPart); ok && strings.HasPrefix(tp.Text, "injected by mallory") {
				t.Errorf("another delegator's message is in the task's history: %q", tp.Text)
			}
		}
	}
	if after.Status.State != a2a.TaskStateWorking {
		t.Errorf("the task is %s\n%s", after.Status.State, rr.logs)
	}
}

// TestReplicasFollowUpIntoRunningTaskElsewhere: the delegator's own
// message into its running task, sent to the other replica, is refused
// at once; it starts no second execution of the hop.
func TestReplicasFollowUpIntoRunningTaskElsewhere(t *testing.T) {
	rr, _ := hostileReplicas(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	task, _ := startBlocked(t, rr, "ctx-follow")
	fu := msg("complete")
	fu.TaskID = task
	if _, err := rr.raw[1].SendMessage(ctx, &a2a.MessageSendParams{Message: fu}); err == nil || ctx.Err() != nil {
		t.Fatalf("a message into a task running on the other replica: %v (context: %v)", err, ctx.Err())
	}
	if n := rr.agent.runs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
}

// TestReplicasCancelBeforeMapping: a verified cancel taken by the other
// replica before the first knew its upstream task id (the upstream was
// slow to answer) still reaches the upstream: the first sees the
// record's mark when it notes the id.
func TestReplicasCancelBeforeMapping(t *testing.T) {
	slowStart := func(h http.Handler) http.Handler {
		var n atomic.Int32
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method == http.MethodPost && n.Add(1) == 1 {
				time.Sleep(time.Second)
			}
			h.ServeHTTP(w, req)
		})
	}
	rr, _ := hostileReplicas(t, slowStart)
	ctx := context.Background()
	h, issued, err := rr.dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-early", Work: "long"})
	if err != nil {
		t.Fatal(err)
	}
	m := msg("block")
	m.ContextID = "ctx-early"
	noWait := false
	rep, err := rr.clients[0].Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: &noWait})
	if err != nil || rep.Task == nil {
		t.Fatalf("%v %+v", err, rep)
	}
	st, _, err := rr.dl.Cancel(ctx, issued.Hop)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := rr.raw[1].CancelTask(ctx, &a2a.TaskIDParams{ID: rep.Task.ID, Metadata: map[string]any{a2ahandoff.Key: st.Text()}})
	if err != nil || ct.Status.State != a2a.TaskStateCanceled {
		t.Fatalf("cancel through replica 1: %s %v", taskState(ct), err)
	}
	for deadline := time.Now().Add(10 * time.Second); rr.agent.canceled.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := rr.agent.canceled.Load(); n != 1 {
		t.Errorf("a verified cancel, but the upstream saw %d cancels: its work still runs\n%s", n, rr.logs)
	}
}
