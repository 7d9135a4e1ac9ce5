package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
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
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

// plainAgent is an existing a2a-go agent with no handoff code at all:
// what it does is named by the message text. It counts its runs.
type plainAgent struct {
	runs     atomic.Int32
	canceled atomic.Int32
	started  chan struct{}
	saw      chan map[string]any // the metadata of each message it ran
	traces   chan string         // the traceparent header of each message it ran
}

func (a *plainAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.runs.Add(1)
	select {
	case a.saw <- rc.Message.Metadata:
	default:
	}
	if cc, ok := a2asrv.CallContextFrom(ctx); ok {
		tp, _ := cc.RequestMeta().Get("traceparent")
		select {
		case a.traces <- strings.Join(tp, ","):
		default:
		}
	}
	say := func(state a2a.TaskState, text string) error {
		ev := a2a.NewStatusUpdateEvent(rc, state, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: text}))
		ev.Final = state.Terminal()
		return q.Write(ctx, ev)
	}
	text := ""
	for _, p := range rc.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			text = tp.Text
		}
	}
	if rc.StoredTask == nil {
		if err := q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
	}
	switch text {
	case "complete":
		if err := say(a2a.TaskStateWorking, "on it"); err != nil {
			return err
		}
		if err := q.Write(ctx, a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "the tests pass"})); err != nil {
			return err
		}
		return say(a2a.TaskStateCompleted, "done")
	case "fail":
		return say(a2a.TaskStateFailed, "cannot")
	case "block":
		if err := say(a2a.TaskStateWorking, "working until canceled"); err != nil {
			return err
		}
		a.started <- struct{}{}
		<-ctx.Done()
		return nil
	}
	return say(a2a.TaskStateFailed, "unknown instruction")
}

func (a *plainAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.canceled.Add(1)
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// rig is a plain upstream agent, the gateway in front of it (on a real
// SQLite store), and a delegator calling the gateway.
type rig struct {
	agent    *plainAgent
	upstream *httptest.Server
	gw       *Server
	url      string
	keys     *trust.Config
	planner  *handoff.Signer
	coder    *handoff.Signer
	logs     *lockedWriter
}

const plannerToken = "token-of-the-planner-0123456789"

func newSigner(t *testing.T, keys *trust.Config, id string) *handoff.Signer {
	t.Helper()
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if keys != nil {
		if err := keys.Add(id, tk); err != nil {
			t.Fatal(err)
		}
	}
	s, err := handoff.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newRig(t *testing.T, withoutHandoff string) *rig {
	t.Helper()
	return newRigWith(t, withoutHandoff, true)
}

// newRigWith is newRig with an upstream whose card says whether it
// streams.
func newRigWith(t *testing.T, withoutHandoff string, streaming bool) *rig {
	t.Helper()
	return newRigTop(t, withoutHandoff, streaming, "")
}

// newRigTop is newRigWith with more top-level keys of the gateway's
// configuration (YAML lines).
func newRigTop(t *testing.T, withoutHandoff string, streaming bool, top string) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{agent: &plainAgent{started: make(chan struct{}, 4), saw: make(chan map[string]any, 16), traces: make(chan string, 16)}, keys: trust.New(), logs: &lockedWriter{w: &bytes.Buffer{}}}
	card := &a2a.AgentCard{Name: "coder", Description: "runs tests", Version: "1", ProtocolVersion: "0.3.0",
		Capabilities: a2a.AgentCapabilities{Streaming: streaming}, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "test", Name: "test", Description: "runs the tests", Tags: []string{"test"}}}}
	mux := http.NewServeMux()
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(r.agent)))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	r.upstream = httptest.NewServer(mux)
	card.URL = r.upstream.URL
	t.Cleanup(r.upstream.Close)

	r.planner = newSigner(t, r.keys, "https://planner.example")
	r.coder = newSigner(t, r.keys, "https://coder.example")
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://coder.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes:
  - {name: coder, protocol: a2a, path: /coder/, upstream: %q, without_handoff: %s}
%s`, backdatedSQLite(t), r.upstream.URL+"/", withoutHandoff, top)
	c, err := Parse([]byte(doc), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(r.logs, nil))
	r.gw, err = New(ctx, c, &Resources{Signer: r.coder, Keys: r.keys, Tokens: map[string]string{plannerToken: "https://planner.example"}}, log)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(r.gw.Handler())
	t.Cleanup(func() { front.Close(); r.gw.Close() })
	r.url = front.URL + "/coder/"
	return r
}

// backdatedSQLite is the path of a new SQLite store whose memory began
// a minute ago. A store made just now refuses offers signed in its first
// second (the restart rule); this one is empty, and its memory may be
// said to have begun earlier.
func backdatedSQLite(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "hops.db")
	pre, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.Forget(ctx, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	pre.Close()
	return db
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.w)
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

type bearer struct {
	a2aclient.PassthroughInterceptor
	token string
}

func (b bearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	if b.token != "" {
		req.Meta.Append("Authorization", "Bearer "+b.token)
	}
	return ctx, nil
}

// client is the planner's a2ahandoff client for the gateway.
func (r *rig) client(t *testing.T, token string) (*a2ahandoff.Client, *a2aclient.Client) {
	c, ac, _ := r.clientWith(t, token)
	return c, ac
}

// clientWith is client with the delegator, and more interceptors.
func (r *rig) clientWith(t *testing.T, token string, more ...a2aclient.CallInterceptor) (*a2ahandoff.Client, *a2aclient.Client, *delegator.Delegator) {
	t.Helper()
	ac, err := a2aclient.NewFromEndpoints(context.Background(),
		[]a2a.AgentInterface{{URL: r.url, Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithInterceptors(append([]a2aclient.CallInterceptor{bearer{token: token}}, more...)...))
	if err != nil {
		t.Fatal(err)
	}
	dl, err := delegator.New(delegator.Config{Me: "https://planner.example", Signer: r.planner, Keys: r.keys, Store: store.NewMemory(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2ahandoff.NewClient(ac, dl, a2ahandoff.ClientOptions{Encoding: handoff.JSON})
	if err != nil {
		t.Fatal(err)
	}
	return c, ac, dl
}

func msg(text string) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text})
}

// TestGatewayCompletes: an offer through the gateway reaches the plain
// agent once, without the handoff in its metadata; the upstream's
// COMPLETED becomes the gateway's signed "completed", which the
// delegator's tracker takes (signed by the gateway's identity).
func TestGatewayCompletes(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) { testGatewayCompletes(t, streaming) })
	}
}

func testGatewayCompletes(t *testing.T, streaming bool) {
	r := newRigWith(t, "reject", streaming)
	c, _ := r.client(t, plannerToken)
	ctx := context.Background()
	rep, err := c.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-1", Work: "run the tests"}, msg("complete"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.State() != a2a.TaskStateCompleted || rep.Issued == nil || rep.Issued.View != store.ViewComplete || !rep.Issued.Resolved {
		t.Fatalf("state %s, issued %+v, refused %v", rep.State(), rep.Issued, rep.Refused)
	}
	if n := r.agent.runs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
	if meta := <-r.agent.saw; meta[a2ahandoff.Key] != nil {
		t.Errorf("the upstream saw the handoff: %v", meta)
	}
	if len(rep.Task.Artifacts) != 1 {
		t.Errorf("artifacts: %+v", rep.Task.Artifacts)
	}

	// Asked again (a lost reply): answered from the record with the same
	// status octets, and the upstream does not run again.
	again, err := c.Ask(ctx, rep.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Statuses) == 0 || !bytes.Equal(again.Statuses[len(again.Statuses)-1].Octets, rep.Statuses[len(rep.Statuses)-1].Octets) {
		t.Fatalf("retransmission: %+v, want the recorded status octets", again.Statuses)
	}
	if n := r.agent.runs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times after the retransmission", n)
	}
	// The ended task's upstream id is no longer kept. The exchange forgets
	// it as it returns, which may be just after the caller has the last
	// event (a stream's): wait a little for it.
	u := r.gw.routes[0].upstream
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		u.mu.Lock()
		left := maps.Clone(u.tasks)
		u.mu.Unlock()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway still maps ended tasks: %v", left)
		}
	}
}

// TestGatewayRefuses: what the receiving checks refuse never reaches
// the upstream: an offer signed by a key not in the trust file, a
// message with no handoff on a route that rejects those, and a
// retransmission from a caller not authenticated as the offer's iss
// gets no status (draft "Replay and Freshness").
func TestGatewayRefuses(t *testing.T) {
	r := newRig(t, "reject")
	ctx := context.Background()

	forger := newSigner(t, nil, "https://planner.example")
	now := time.Now().Unix()
	el, err := forger.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-2", Iss: "https://planner.example",
		Aud: "https://coder.example", Iat: now, Exp: now + 60}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	_, ac := r.client(t, plannerToken)
	m := msg("complete")
	m.ContextID = "ctx-2"
	if err := a2ahandoff.AttachHandoff(m, &handoff.Handoff{Offer: el}, handoff.JSON); err != nil {
		t.Fatal(err)
	}
	res, err := ac.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	if task, ok := res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateRejected {
		t.Fatalf("forged offer: %#v", res)
	}

	res, err = ac.SendMessage(ctx, &a2a.MessageSendParams{Message: msg("complete")})
	if err != nil {
		t.Fatal(err)
	}
	if task, ok := res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateRejected {
		t.Fatalf("no handoff: %#v", res)
	}
	if n := r.agent.runs.Load(); n != 0 {
		t.Fatalf("the upstream ran %d times for refused requests", n)
	}

	// A real offer, then the same message from a caller with no token.
	c, _ := r.client(t, plannerToken)
	rep, err := c.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-3", Work: "run"}, msg("complete"), nil)
	if err != nil || rep.State() != a2a.TaskStateCompleted {
		t.Fatalf("%v %v", rep, err)
	}
	_, anon := r.client(t, "")
	h, err := a2ahandoff.HandoffFrom(rep.Task.History[0])
	if err != nil {
		t.Fatal(err)
	}
	re := msg("complete")
	re.ContextID = "ctx-3"
	parsed, err := handoff.ParseHandoff(h, handoff.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if err := a2ahandoff.AttachHandoff(re, parsed, handoff.JSON); err != nil {
		t.Fatal(err)
	}
	res, err = anon.SendMessage(ctx, &a2a.MessageSendParams{Message: re})
	if err != nil {
		t.Fatal(err)
	}
	if sts, _ := a2ahandoff.Statuses(res); len(sts) != 0 {
		t.Fatalf("a retransmission from an unauthenticated caller got %d statuses", len(sts))
	}
	if n := r.agent.runs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
	// Each answer counted once, by what it was (the message with no
	// handoff never reached the checks).
	m2 := r.gw.metrics
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"untrusted-key rejections", testutil.ToFloat64(m2.answers.WithLabelValues("coder", "rejected", "untrusted-key")), 1},
		{"acceptances", testutil.ToFloat64(m2.answers.WithLabelValues("coder", "accepted", "none")), 1},
		{"retransmissions not resent", testutil.ToFloat64(m2.retransmits.WithLabelValues("coder", "false")), 1},
		{"retransmissions resent", testutil.ToFloat64(m2.retransmits.WithLabelValues("coder", "true")), 0},
		{"checks timed", float64(testutil.CollectAndCount(m2.checkLatency)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if logs := r.logs.String(); !strings.Contains(logs, "verdict=rejected") || !strings.Contains(logs, "reason=untrusted-key") {
		t.Errorf("the rejection is not logged with its verdict and reason:\n%s", logs)
	}
}

// TestGatewayPassesWithoutHandoff: on a route with without_handoff:
// pass, a plain request goes to the upstream unchecked.
func TestGatewayPassesWithoutHandoff(t *testing.T) {
	r := newRig(t, "pass")
	_, ac := r.client(t, "")
	res, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: msg("complete")})
	if err != nil {
		t.Fatal(err)
	}
	if task, ok := res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("%#v", res)
	}
	if n := r.agent.runs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times", n)
	}
}

// TestGatewayStatesGoForward: a streamed offer's task goes from the
// gateway's "working" (the hop accepted) to the upstream's end without
// a step back: the upstream's "submitted", its first word on the task it
// was just given, is not written after "working" (a replica reading the
// shared task, or a client, would see the task go back).
func TestGatewayStatesGoForward(t *testing.T) {
	r := newRigWith(t, "reject", true)
	_, ac, dl := r.clientWith(t, plannerToken)
	ctx := context.Background()
	h, _, err := dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-forward", Work: "run the tests"})
	if err != nil {
		t.Fatal(err)
	}
	m := msg("complete")
	m.ContextID = "ctx-forward"
	if err := a2ahandoff.AttachHandoff(m, h, handoff.JSON); err != nil {
		t.Fatal(err)
	}
	var states []a2a.TaskState
	for ev, err := range ac.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: m}) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			states = append(states, e.Status.State)
		case *a2a.TaskStatusUpdateEvent:
			states = append(states, e.Status.State)
		}
	}
	if len(states) < 2 || states[0] != a2a.TaskStateWorking || states[len(states)-1] != a2a.TaskStateCompleted {
		t.Fatalf("states %v, want working first and completed last", states)
	}
	for i, st := range states {
		if st == a2a.TaskStateSubmitted {
			t.Errorf("state %d of %v is submitted, after working", i, states)
		}
	}
}

// TestGatewayCancel: the delegator's signed "canceled" is verified by the
// gateway and becomes the upstream's tasks/cancel.
func TestGatewayCancel(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) { testGatewayCancel(t, streaming) })
	}
}

func testGatewayCancel(t *testing.T, streaming bool) {
	r := newRigWith(t, "reject", streaming)
	c, _, dl := r.clientWith(t, plannerToken)
	ctx := context.Background()
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-4", Work: "long"})
	if err != nil {
		t.Fatal(err)
	}
	hop := issued.Hop
	m := msg("block")
	m.ContextID = "ctx-4"
	noWait := false // the reply comes with the task WORKING: its id is what a cancel names
	if _, err := c.Send(ctx, hop, h, m, &a2a.MessageSendConfig{Blocking: &noWait}); err != nil {
		t.Fatal(err)
	}
	<-r.agent.started
	deadline := time.Now().Add(5 * time.Second)
	rep, err := c.Cancel(ctx, hop)
	if err != nil {
		t.Fatal(err)
	}
	if rep.State() != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %s", rep.State())
	}
	for r.agent.canceled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r.agent.canceled.Load() != 1 {
		t.Fatalf("the upstream saw %d cancels", r.agent.canceled.Load())
	}
}

// TestGatewayCard: the agent card is the upstream's, pointing at the
// gateway and listing the handoff extension as required.
func TestGatewayCard(t *testing.T) {
	r := newRig(t, "reject")
	resp, err := http.Get(r.url + ".well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	s := string(b)
	if !strings.Contains(s, `"url":"`+r.url+`"`) || !strings.Contains(s, a2ahandoff.URI) || !strings.Contains(s, `"name":"coder"`) ||
		strings.Contains(s, r.upstream.URL) {
		t.Fatalf("card: %s", s)
	}
}

// TestGatewayCancelAfterAFlood: a flood of refused messages (each an
// ended task of the gateway's) does not push a running hop's task out of
// a one-process gateway's task store, so the delegator's signed cancel
// still reaches the upstream (a2a-go answers tasks/cancel only for a
// task it finds). The store's bound stands at 3 ended tasks here.
func TestGatewayCancelAfterAFlood(t *testing.T) {
	r := newRigWith(t, "reject", true)
	mem := r.gw.routes[0].upstream.mem
	mem.mu.Lock()
	mem.limit = 3
	mem.mu.Unlock()
	c, _, dl := r.clientWith(t, plannerToken)
	ctx := context.Background()
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-flood", Work: "long"})
	if err != nil {
		t.Fatal(err)
	}
	m := msg("block")
	m.ContextID = "ctx-flood"
	noWait := false
	if _, err := c.Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: &noWait}); err != nil {
		t.Fatal(err)
	}
	<-r.agent.started
	_, anon := r.client(t, "")
	for i := range 8 {
		anon.SendMessage(ctx, &a2a.MessageSendParams{Message: msg(fmt.Sprint("junk ", i))}) // refused: no handoff
	}
	rep, err := c.Cancel(ctx, issued.Hop)
	if err != nil {
		t.Fatalf("the signed cancel after the flood: %v", err)
	}
	if rep.State() != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %s", rep.State())
	}
	for deadline := time.Now().Add(5 * time.Second); r.agent.canceled.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := r.agent.canceled.Load(); n != 1 {
		t.Fatalf("the upstream saw %d cancels", n)
	}
}
