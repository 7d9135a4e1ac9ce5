package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

// advRig (from an adversarial review): a gateway in front of an arbitrary upstream handler, with
// routes given as YAML lines (each "{name: ..., path: ..., ...}" without
// upstream, which is filled in).
type advRig struct {
	gw      *Server
	front   string
	keys    *trust.Config
	planner *handoff.Signer
	coder   *handoff.Signer
	logs    *lockedWriter
}

func newAdvRig(t *testing.T, up http.Handler, routes ...string) *advRig {
	t.Helper()
	ctx := context.Background()
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	r := &advRig{keys: trust.New(), logs: &lockedWriter{w: &bytes.Buffer{}}}
	r.planner = newSigner(t, r.keys, "https://planner.example")
	r.coder = newSigner(t, r.keys, "https://coder.example")
	var rs strings.Builder
	for _, x := range routes {
		fmt.Fprintf(&rs, "  - {protocol: a2a, upstream: %q, %s}\n", srv.URL+"/", x)
	}
	doc := fmt.Sprintf("listen: 127.0.0.1:0\nidentity: {id: \"https://coder.example\", key_env: UNUSED}\ntrust_file: trust.json\nstore: sqlite:%s\nroutes:\n%s",
		filepath.Join(t.TempDir(), "hops.db"), rs.String())
	c, err := Parse([]byte(doc), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pre, err := sqlite.Open(ctx, strings.TrimPrefix(c.Store, "sqlite:"))
	if err != nil {
		t.Fatal(err)
	}
	pre.Forget(ctx, time.Now().Add(-time.Minute))
	pre.Close()
	r.gw, err = New(ctx, c, &Resources{Signer: r.coder, Keys: r.keys, Tokens: map[string]string{plannerToken: "https://planner.example"}},
		slog.New(slog.NewTextHandler(r.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(r.gw.Handler())
	t.Cleanup(func() { front.Close(); r.gw.Close() })
	r.front = front.URL
	return r
}

func (r *advRig) ac(t *testing.T, path, token string) *a2aclient.Client {
	ac, err := a2aclient.NewFromEndpoints(context.Background(),
		[]a2a.AgentInterface{{URL: r.front + path, Transport: a2a.TransportProtocolJSONRPC}}, a2aclient.WithInterceptors(bearer{token: token}))
	if err != nil {
		t.Fatal(err)
	}
	return ac
}

// offerMsg is a user message carrying a fresh offer for hop (new when "").
func (r *advRig) offerMsg(t *testing.T, hop, dialog, text string, extra map[string]any) (*a2a.Message, string) {
	t.Helper()
	if hop == "" {
		hop = handoff.NewHop()
	}
	now := time.Now().Unix()
	el, err := r.planner.SignOffer(&handoff.Offer{Hop: hop, Dialog: dialog, Iss: "https://planner.example",
		Aud: "https://coder.example", Iat: now, Exp: now + 120, Extra: extra}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	m := msg(text)
	m.ContextID = dialog
	if err := a2ahandoff.AttachHandoff(m, &handoff.Handoff{Offer: el}, handoff.JSON); err != nil {
		t.Fatal(err)
	}
	return m, hop
}

func (r *advRig) record(t *testing.T, hop string) *store.Record {
	t.Helper()
	rec, err := r.gw.store.Get(context.Background(), "https://planner.example", hop)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (r *advRig) flags(t *testing.T) []store.Flag {
	fs, err := r.gw.store.Flags(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

var streamingCard = &a2a.AgentCard{Name: "up", Description: "d", Version: "1", ProtocolVersion: "0.3.0",
	Capabilities: a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
	Skills: []a2a.AgentSkill{{ID: "s", Name: "s", Description: "s", Tags: []string{"s"}}}}

// rawUpstream answers message/stream with the SSE events sse gives it,
// tasks/get with getState, and counts tasks/cancel.
type rawUpstream struct {
	sse      func(w http.ResponseWriter, f http.Flusher)
	getState a2a.TaskState
	// doneAfter, when not 0: tasks/get says completed from this ask on.
	doneAfter int32
	gets      atomic.Int32
	cancels   atomic.Int32
	auth      atomic.Value // last Authorization header seen
	mu        sync.Mutex
	canceled  []string
}

func writeSSE(w http.ResponseWriter, f http.Flusher, ev any) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "1", "result": ev})
	fmt.Fprintf(w, "data: %s\n\n", b)
	f.Flush()
}

func (u *rawUpstream) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	u.auth.Store(req.Header.Get("Authorization") + "|")
	if req.URL.Path == a2asrv.WellKnownAgentCardPath {
		json.NewEncoder(w).Encode(streamingCard)
		return
	}
	var body struct {
		Method string          `json:"method"`
		ID     any             `json:"id"`
		Params json.RawMessage `json:"params"`
	}
	json.NewDecoder(req.Body).Decode(&body)
	switch body.Method {
	case "message/stream":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		u.sse(w, w.(http.Flusher))
	case "tasks/get":
		var p struct{ ID string }
		json.Unmarshal(body.Params, &p)
		state := u.getState
		if n := u.gets.Add(1); u.doneAfter != 0 && n >= u.doneAfter {
			state = a2a.TaskStateCompleted
		}
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": body.ID,
			"result": &a2a.Task{ID: a2a.TaskID(p.ID), ContextID: "c", Status: a2a.TaskStatus{State: state}}})
	case "tasks/cancel":
		var p struct{ ID string }
		json.Unmarshal(body.Params, &p)
		u.cancels.Add(1)
		u.mu.Lock()
		u.canceled = append(u.canceled, p.ID)
		u.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": body.ID,
			"result": &a2a.Task{ID: a2a.TaskID(p.ID), ContextID: "c", Status: a2a.TaskStatus{State: a2a.TaskStateCanceled}}})
	default:
		http.Error(w, "no", 500)
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// An upstream whose stream ends with no event at all (or with no task
// state and no reply) leaves the hop's outcome unknown: flagged, never
// left WORKING and forgotten.
func TestHostileEmptyStreamIsFlagged(t *testing.T) {
	up := &rawUpstream{sse: func(w http.ResponseWriter, f http.Flusher) {}}
	r := newAdvRig(t, up, "name: a, path: /a/, without_handoff: reject")
	m, hop := r.offerMsg(t, "", "ctx-e", "go", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := r.ac(t, "/a/", plannerToken).SendMessage(ctx, &a2a.MessageSendParams{Message: m})
	t.Logf("blocking send: after %v: %T %v", time.Since(start).Round(time.Second), res, err)
	time.Sleep(300 * time.Millisecond)
	rec := r.record(t, hop)
	t.Logf("record state %s; open flags %d", rec.State, len(r.flags(t)))
	if rec.State == store.Accepted && len(r.flags(t)) == 0 {
		t.Errorf("the upstream's exchange ended with no task state; hop %s stays %s, unflagged", hop, rec.State)
	}
	// a retransmission meanwhile: "accepted", forever
	again, err := r.ac(t, "/a/", plannerToken).SendMessage(context.Background(), &a2a.MessageSendParams{Message: m})
	t.Logf("retransmission: %T %v", again, err)
}

// A stream that drops after "working", on a route whose failures are
// declared effect-free: not a failure (the upstream's task runs on), so
// the gateway follows the task with tasks/get to its end.
func TestHostileStreamDropIsFollowed(t *testing.T) {
	up := &rawUpstream{getState: a2a.TaskStateWorking, doneAfter: 3}
	up.sse = func(w http.ResponseWriter, f http.Flusher) {
		writeSSE(w, f, &a2a.Task{ID: "up-1", ContextID: "ctx-d", Status: a2a.TaskStatus{State: a2a.TaskStateSubmitted}})
		writeSSE(w, f, &a2a.TaskStatusUpdateEvent{TaskID: "up-1", ContextID: "ctx-d", Status: a2a.TaskStatus{State: a2a.TaskStateWorking}})
		// the connection is reset mid-stream (proxy idle timeout, upstream restart of its front, ...)
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Close()
	}
	r := newAdvRig(t, up, "name: a, path: /a/, without_handoff: reject, failures_effect_free: true")
	m, hop := r.offerMsg(t, "", "ctx-d", "go", nil)
	res, err := r.ac(t, "/a/", plannerToken).SendMessage(context.Background(), &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	rec := r.record(t, hop)
	// The broken stream is not a failure: the task is followed with
	// tasks/get until the upstream says it completed.
	if task.Status.State != a2a.TaskStateCompleted || rec.State != store.Completed || up.gets.Load() < 3 {
		t.Errorf("reply %s, record %s after %d tasks/get: want completed, followed", task.Status.State, rec.State, up.gets.Load())
	}
}

// inputAgent: an upstream that asks for input, then blocks on follow-ups.
type inputAgent struct{ canceled atomic.Int32 }

func (a *inputAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if rc.StoredTask == nil {
		q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message))
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateInputRequired, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: "which branch?"}))
	ev.Final = true
	return q.Write(ctx, ev)
}

func (a *inputAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.canceled.Add(1)
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func upstreamOf(a a2asrv.AgentExecutor) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(a)))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(streamingCard))
	return mux
}

// A verified cancel of a hop whose upstream task waits for input (no
// Execute runs for it) reaches the upstream (OnCancel), and the task's
// mapping is dropped.
func TestHostileCancelOfPausedHop(t *testing.T) {
	ag := &inputAgent{}
	r := newAdvRig(t, upstreamOf(ag), "name: a, path: /a/, without_handoff: reject")
	ac := r.ac(t, "/a/", plannerToken)
	m, hop := r.offerMsg(t, "", "ctx-p", "go", nil)
	res, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2a.Task)
	if task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("state %s", task.Status.State)
	}
	// The delegator's signed "canceled".
	rec := r.record(t, hop)
	canceled, err := r.planner.SignStatus(&handoff.Status{Offer: rec.Digest, Iss: "https://planner.example", Aud: "https://coder.example",
		State: handoff.StateCanceled, Iat: time.Now().Unix()}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	p := &a2a.TaskIDParams{ID: task.ID, Metadata: map[string]any{a2ahandoff.Key: canceled.Text()}}
	// a2a-go v0.3.15 refuses a cancel that overlaps the end of the
	// execution that paused the task (its TODO in handleCancelWithConcurrentRun):
	// a delegator sends its signed "canceled" again, as here.
	var ct *a2a.Task
	for try := 0; ; try++ {
		if ct, err = ac.CancelTask(context.Background(), p); err == nil || try == 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, r.logs.String())
	}
	time.Sleep(500 * time.Millisecond)
	u := r.gw.routes[0].upstream
	u.mu.Lock()
	n := len(u.tasks)
	u.mu.Unlock()
	t.Logf("gateway task %s; record canceled=%v; upstream cancels %d; mapped tasks %d", ct.Status.State, r.record(t, hop).Canceled, ag.canceled.Load(), n)
	if ct.Status.State == a2a.TaskStateCanceled && ag.canceled.Load() == 0 {
		t.Errorf("the verified cancel never reached the upstream (its task still waits for input); mapping kept: %d", n)
	}
}

// blockAgent runs until canceled.
type blockAgent struct {
	started  chan struct{}
	canceled atomic.Int32
	runs     atomic.Int32
}

func (a *blockAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.runs.Add(1)
	q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message))
	q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, nil))
	a.started <- struct{}{}
	<-ctx.Done()
	return nil
}

func (a *blockAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.canceled.Add(1)
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// The caller's Authorization header is never forwarded (SPEC.md section 6).
func TestHostileAuthorizationNotForwarded(t *testing.T) {
	up := &rawUpstream{sse: func(w http.ResponseWriter, f http.Flusher) {
		writeSSE(w, f, &a2a.Task{ID: "up-1", ContextID: "ctx-h", Status: a2a.TaskStatus{State: a2a.TaskStateCompleted}})
	}}
	r := newAdvRig(t, up, "name: a, path: /a/, without_handoff: reject")
	m, _ := r.offerMsg(t, "", "ctx-h", "go", nil)
	if _, err := r.ac(t, "/a/", plannerToken).SendMessage(context.Background(), &a2a.MessageSendParams{Message: m}); err != nil {
		t.Fatal(err)
	}
	if got := up.auth.Load().(string); got != "|" {
		t.Errorf("upstream saw Authorization %q", got)
	}
}

// Handoff metadata of the upstream's own, outside messages too (task,
// event and artifact metadata), never reaches the caller: only the
// gateway's statuses travel under the key.
func TestHostileUpstreamHandoffMetadata(t *testing.T) {
	bogus := map[string]any{a2ahandoff.Key: map[string]any{"status": "forged-by-upstream"}}
	up := &rawUpstream{sse: func(w http.ResponseWriter, f http.Flusher) {
		writeSSE(w, f, &a2a.Task{ID: "up-1", ContextID: "ctx-m", Status: a2a.TaskStatus{State: a2a.TaskStateWorking}, Metadata: bogus})
		writeSSE(w, f, &a2a.TaskArtifactUpdateEvent{TaskID: "up-1", ContextID: "ctx-m", Metadata: bogus,
			Artifact: &a2a.Artifact{ID: "a1", Parts: a2a.ContentParts{a2a.TextPart{Text: "x"}}, Metadata: bogus}})
		writeSSE(w, f, &a2a.TaskStatusUpdateEvent{TaskID: "up-1", ContextID: "ctx-m", Final: true, Metadata: bogus, Status: a2a.TaskStatus{State: a2a.TaskStateCompleted}})
	}}
	r := newAdvRig(t, up, "name: a, path: /a/, without_handoff: reject")
	m, _ := r.offerMsg(t, "", "ctx-m", "go", nil)
	res, err := r.ac(t, "/a/", plannerToken).SendMessage(context.Background(), &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	if n := strings.Count(string(b), "forged-by-upstream"); n > 0 {
		t.Errorf("the upstream's own %s member reaches the caller %d times: %s", a2ahandoff.Key, n, b)
	}
}

// Two routes of one gateway share the store and the identity, and so the
// stop: an equivocating offer sent to route b stops the first offer's
// work running through route a, as one sent to route a does.
func TestHostileEquivocationOnOtherRoute(t *testing.T) {
	for _, second := range []string{"/a/", "/b/"} {
		t.Run(strings.Trim(second, "/"), func(t *testing.T) {
			ag := &blockAgent{started: make(chan struct{}, 4)}
			r := newAdvRig(t, upstreamOf(ag), "name: a, path: /a/, without_handoff: reject", "name: b, path: /b/, without_handoff: reject")
			noWait := false
			m, hop := r.offerMsg(t, "", "ctx-q", "go", map[string]any{"work": "one"})
			if _, err := r.ac(t, "/a/", plannerToken).SendMessage(context.Background(), &a2a.MessageSendParams{Message: m, Config: &a2a.MessageSendConfig{Blocking: &noWait}}); err != nil {
				t.Fatal(err)
			}
			<-ag.started
			m2, _ := r.offerMsg(t, hop, "ctx-q", "go", map[string]any{"work": "two"})
			if _, err := r.ac(t, second, plannerToken).SendMessage(context.Background(), &a2a.MessageSendParams{Message: m2}); err != nil {
				t.Fatal(err)
			}
			stopped := waitFor(t, 5*time.Second, func() bool { return ag.canceled.Load() > 0 })
			if !r.record(t, hop).Equivocated || !stopped {
				t.Errorf("equivocation via %s: recorded %v, the first offer's upstream work canceled %v", second, r.record(t, hop).Equivocated, stopped)
			}
		})
	}
}

// An equivocating offer for a hop whose upstream task waits for input
// (no run to stop) cancels that upstream task, once, and on any route.
func TestHostileEquivocationOfPausedHop(t *testing.T) {
	for _, second := range []string{"/a/", "/b/"} {
		t.Run(strings.Trim(second, "/"), func(t *testing.T) {
			ag := &inputAgent{}
			r := newAdvRig(t, upstreamOf(ag), "name: a, path: /a/, without_handoff: reject", "name: b, path: /b/, without_handoff: reject")
			m, hop := r.offerMsg(t, "", "ctx-pe", "go", map[string]any{"work": "one"})
			res, err := r.ac(t, "/a/", plannerToken).SendMessage(context.Background(), &a2a.MessageSendParams{Message: m})
			if err != nil {
				t.Fatal(err)
			}
			if task, ok := res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateInputRequired {
				t.Fatalf("first offer: %#v", res)
			}
			m2, _ := r.offerMsg(t, hop, "ctx-pe", "go", map[string]any{"work": "two"})
			if _, err := r.ac(t, second, plannerToken).SendMessage(context.Background(), &a2a.MessageSendParams{Message: m2}); err != nil {
				t.Fatal(err)
			}
			if !waitFor(t, 5*time.Second, func() bool { return ag.canceled.Load() > 0 }) || !r.record(t, hop).Equivocated {
				t.Fatalf("equivocation via %s: recorded %v, upstream cancels %d", second, r.record(t, hop).Equivocated, ag.canceled.Load())
			}
			time.Sleep(100 * time.Millisecond)
			if n := ag.canceled.Load(); n != 1 {
				t.Errorf("the paused upstream task was canceled %d times", n)
			}
		})
	}
}

// TestGatewayUpstreamDown: an upstream that cannot be called (its
// address refuses connections) never got the work: the hop ends "failed"
// with no effect, signed, as on an MCP route, rather than flagged
// unknown (draft "Knowing the Outcome": what is known is said).
func TestGatewayUpstreamDown(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			r := newRigWith(t, "reject", streaming)
			c, _ := r.client(t, plannerToken)
			ctx := context.Background()
			r.upstream.Close()
			rep, err := c.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-down", Work: "run the tests"}, msg("complete"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.State() != a2a.TaskStateFailed || rep.Issued == nil || !rep.Issued.Resolved {
				t.Fatalf("state %s, issued %+v, refused %v\n%s", rep.State(), rep.Issued, rep.Refused, r.logs)
			}
			last := rep.Statuses[len(rep.Statuses)-1]
			_, st, err := handoff.UnsafeDecode(last)
			if err != nil || st == nil || st.State != handoff.StateFailed {
				t.Fatalf("last status: %+v %v", st, err)
			}
			rec, err := r.gw.routes[0].delegate().Record(ctx, "https://planner.example", rep.Hop)
			if err != nil || rec.State != store.Failed {
				t.Fatalf("record %+v %v", rec, err)
			}
			flags, err := r.gw.store.Flags(ctx, false)
			if err != nil || len(flags) != 0 {
				t.Fatalf("flags %+v %v", flags, err)
			}
		})
	}
}

// queuedAgent takes the work and leaves it queued ("submitted"), as a
// busy upstream does.
type queuedAgent struct{}

func (queuedAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	t := a2a.NewSubmittedTask(rc, rc.Message)
	t.Status.Message = a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: "queued"})
	return q.Write(ctx, t)
}

func (queuedAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// TestGatewayFollowsAQueuedTaskQuietly: a non-streaming upstream whose
// task stays "submitted" is followed with tasks/get, and the gateway
// writes its state once ("working": the hop was accepted), not again at
// every look (each write would add a message to the task's history and
// an event to every stream).
func TestGatewayFollowsAQueuedTaskQuietly(t *testing.T) {
	card := *streamingCard
	card.Capabilities.Streaming = false
	mux := http.NewServeMux()
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(queuedAgent{})))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(&card))
	r := newAdvRig(t, mux, "name: a, path: /a/, without_handoff: reject")
	ac := r.ac(t, "/a/", plannerToken)
	m, _ := r.offerMsg(t, "", "ctx-q", "go", nil)
	noWait := false
	res, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m, Config: &a2a.MessageSendConfig{Blocking: &noWait}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("answer %T", res)
	}
	var history []int
	for range 2 {
		time.Sleep(3 * followEvery)
		got, err := ac.GetTask(context.Background(), &a2a.TaskQueryParams{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.State != a2a.TaskStateWorking {
			t.Fatalf("the task is %s, want working", got.Status.State)
		}
		history = append(history, len(got.History))
	}
	if history[1] != history[0] {
		t.Fatalf("the task's history grew from %d to %d messages while the upstream said nothing new", history[0], history[1])
	}
}
