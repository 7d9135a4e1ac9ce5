package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// relayAgent is agent B: an unmodified a2a-go agent whose work is a tool
// call to C, an MCP server it reaches through its gateway's egress with
// the go-sdk's client. The only thing it does for the handoff is what an
// agent that can does: pass the gateway's link header (from its inbound
// request) on with its outbound calls.
type relayAgent struct {
	egress string // the egress route's URL
	runs   atomic.Int32
	links  atomic.Int32 // runs whose request carried a link
	last   atomic.Value // the last link it was given (a string)
	// byTrace: pass on the inbound traceparent instead of the link (an
	// instrumented agent that knows nothing of the link); noLink: pass
	// on neither.
	byTrace, noLink atomic.Bool
}

func (a *relayAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.runs.Add(1)
	link := ""
	if cc, ok := a2asrv.CallContextFrom(ctx); ok {
		if v, ok := cc.RequestMeta().Get(strings.ToLower(LinkHeader)); ok && len(v) == 1 {
			link = v[0]
			a.links.Add(1)
			a.last.Store(link)
		}
	}
	say := func(state a2a.TaskState, text string) error {
		ev := a2a.NewStatusUpdateEvent(rc, state, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: text}))
		ev.Final = state.Terminal()
		return q.Write(ctx, ev)
	}
	if rc.StoredTask == nil {
		if err := q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
	}
	if err := say(a2a.TaskStateWorking, "asking the tester"); err != nil {
		return err
	}
	mode := ""
	for _, p := range rc.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			mode = tp.Text
		}
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "coder", Version: "1"}, nil)
	hc := &http.Client{Transport: headerTransport{LinkHeader, link, http.DefaultTransport}}
	switch {
	case a.noLink.Load():
		hc.Transport = http.DefaultTransport
	case a.byTrace.Load():
		tp := ""
		if cc, ok := a2asrv.CallContextFrom(ctx); ok {
			if v, ok := cc.RequestMeta().Get("traceparent"); ok && len(v) == 1 {
				tp = v[0]
			}
		}
		hc.Transport = headerTransport{"Traceparent", tp, http.DefaultTransport}
	}
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.egress, HTTPClient: hc}, nil)
	if err != nil {
		return say(a2a.TaskStateFailed, "cannot reach the tester: "+err.Error())
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, call(mode))
	switch {
	case err != nil:
		return say(a2a.TaskStateFailed, "the tester failed: "+err.Error())
	case res.IsError:
		return say(a2a.TaskStateFailed, "the tester says: "+resultText(res))
	}
	return say(a2a.TaskStateCompleted, "the tester says: "+resultText(res))
}

func (a *relayAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

type headerTransport struct {
	name, value string
	base        http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.value != "" {
		r = r.Clone(r.Context())
		r.Header.Set(h.name, h.value)
	}
	return h.base.RoundTrip(r)
}

// lossy passes requests on to its target, and once armed, drops the
// reply to the next tools/call: the call reaches the target and runs,
// its answer is read whole, and the caller's connection is closed
// without it.
type lossy struct {
	armed   atomic.Bool
	dropped atomic.Int32
	proxy   *httputil.ReverseProxy
}

func (l *lossy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	if bytes.Contains(body, []byte(`"tools/call"`)) && l.armed.CompareAndSwap(true, false) {
		out := req.Clone(context.WithoutCancel(req.Context()))
		out.RequestURI = ""
		l.proxy.Rewrite(&httputil.ProxyRequest{In: req, Out: out})
		resp, err := http.DefaultTransport.RoundTrip(out)
		if err == nil {
			io.Copy(io.Discard, resp.Body) // the work is done and answered...
			resp.Body.Close()
		}
		l.dropped.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // ...and the answer never arrives
		}
		return
	}
	l.proxy.ServeHTTP(w, req)
}

const coderToken = "token-of-the-coder-0123456789"

// chainRig is three unmodified agents in a row, each behind a gateway:
// A (a plain a2a-go client) calls B through A's egress; B's gateway
// receives it and forwards it to B (relayAgent), which calls C (the
// plain MCP server) through B's egress; C's gateway receives that.
// Between B's egress and C's gateway is a link that can lose a reply.
type chainRig struct {
	tools   *plainTools
	relay   *relayAgent
	net     *lossy
	a, b, c *Server
	aLogs   *lockedWriter
	bLogs   *lockedWriter
	cLogs   *lockedWriter
	client  *a2aclient.Client // A's
	aEgress string            // A's egress
}

func newChainRig(t *testing.T) *chainRig {
	t.Helper()
	ctx := context.Background()
	keys := trust.New()
	planner := newSigner(t, keys, "https://planner.example")
	coder := newSigner(t, keys, "https://coder.example")
	tester := newSigner(t, keys, "https://tester.example")
	r := &chainRig{tools: &plainTools{metas: make(chan mcp.Meta, 16), traces: make(chan string, 16), started: make(chan struct{}, 4),
		release: make(chan struct{}), progress: make(chan struct{}, 1)},
		aLogs: &lockedWriter{w: &bytes.Buffer{}}, bLogs: &lockedWriter{w: &bytes.Buffer{}}, cLogs: &lockedWriter{w: &bytes.Buffer{}}}
	start := func(doc string, signer *handoff.Signer, tokens map[string]string, logs *lockedWriter) (*Server, string, string) {
		c, err := Parse([]byte(doc), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		gw, err := New(ctx, c, &Resources{Signer: signer, Keys: keys, Tokens: tokens, EgressTokens: map[string]string{
			"coder": plannerToken, "tester": coderToken}}, slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(gw.Handler())
		egress := httptest.NewServer(gw.EgressHandler())
		t.Cleanup(func() {
			front.Close()
			egress.Close()
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			gw.Drain(dctx)
			gw.Close()
		})
		return gw, front.URL, egress.URL
	}

	// C: the plain MCP server, and its gateway.
	ms := mcp.NewServer(&mcp.Implementation{Name: "tester", Version: "1"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "run-tests"}, r.tools.work)
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
	upC := httptest.NewServer(mux)
	t.Cleanup(upC.Close)
	t.Cleanup(func() { close(r.tools.release) }) // a tool still blocked ends first
	var cFront string
	r.c, cFront, _ = start(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://tester.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes:
  - {name: tools, protocol: mcp, path: /tools/, upstream: %q}
`, backdatedSQLite(t), upC.URL+"/mcp"), tester, map[string]string{coderToken: "https://coder.example"}, r.cLogs)

	// The network between B and C.
	target, _ := url.Parse(cFront)
	r.net = &lossy{proxy: &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }, FlushInterval: -1}}
	wire := httptest.NewServer(r.net)
	t.Cleanup(wire.Close)

	// B: the relay agent, and its gateway (a2a in, mcp out). The egress
	// listens first: the agent needs its URL.
	eln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.relay = &relayAgent{egress: "http://" + eln.Addr().String() + "/tester/"}
	card := &a2a.AgentCard{Name: "coder", Description: "writes code", Version: "1", ProtocolVersion: "0.3.0",
		Capabilities: a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"}}
	bmux := http.NewServeMux()
	bmux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(r.relay)))
	bmux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	upB := httptest.NewServer(bmux)
	card.URL = upB.URL
	t.Cleanup(upB.Close)
	var bFront string
	r.b, bFront, _ = start(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://coder.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes:
  - {name: coder, protocol: a2a, path: /coder/, upstream: %q}
egress:
  listen: 127.0.0.1:0
  routes:
    - {name: tester, protocol: mcp, path: /tester/, agent_id: "https://tester.example", url: %q, bearer_token_env: UNUSED, speaks_handoff: true}
`, backdatedSQLite(t), upB.URL+"/", wire.URL+"/tools/"), coder, map[string]string{plannerToken: "https://planner.example"}, r.bLogs)
	bEgress := &http.Server{Handler: r.b.EgressHandler()}
	go bEgress.Serve(eln)
	t.Cleanup(func() { bEgress.Close() })

	// A: a gateway with only an egress, in front of a plain a2a-go client.
	r.a, _, r.aEgress = start(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://planner.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes: []
egress:
  listen: 127.0.0.1:0
  routes:
    - {name: coder, protocol: a2a, path: /coder/, agent_id: "https://coder.example", url: %q, bearer_token_env: UNUSED, starts_chains: true, speaks_handoff: true}
`, backdatedSQLite(t), bFront+"/coder/"), planner, nil, r.aLogs)
	r.client, err = a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: r.aEgress + "/coder/", Transport: a2a.TransportProtocolJSONRPC}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// send is A's message, not waiting for the work; it returns the task.
func (r *chainRig) send(t *testing.T, text string) *a2a.Task {
	t.Helper()
	noWait := false
	res, err := r.client.SendMessage(context.Background(), &a2a.MessageSendParams{
		Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text}), Config: &a2a.MessageSendConfig{Blocking: &noWait}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("A's message was answered %T, want its task: %+v", res, res)
	}
	return task
}

// wait polls A's task (through A's egress) until it ends.
func (r *chainRig) wait(t *testing.T, task *a2a.Task) *a2a.Task {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := r.client.GetTask(context.Background(), &a2a.TaskQueryParams{ID: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.State.Terminal() {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's task is still %s", got.Status.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func taskText(task *a2a.Task) string {
	if task.Status.Message == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range task.Status.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			b.WriteString(tp.Text)
		}
	}
	return b.String()
}

// cReceived is C's gateway's log line for the offer from B.
var cReceived = regexp.MustCompile(`msg=handoff route=tools verdict=accepted iss=https://coder.example aud=https://tester.example hop=\S+ chain=(\d+) \S+ chain_quality=(\w+)`)

// TestEgressThreeAgents: A calls B, and B calls C, each an unmodified
// agent behind its gateway. C's gateway receives B's offer with the
// chain that led to it: A's offer to B, octets unchanged, so two
// verified offers, full quality (draft "Chain": prev is the digest of
// the offer it passes on). The work runs once, and each gateway takes
// in the signed "completed" of the hop it issued.
func TestEgressThreeAgents(t *testing.T) {
	r := newChainRig(t)
	task := r.wait(t, r.send(t, "ok"))
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(taskText(task), "all tests passed") {
		t.Fatalf("A's task: %s %q", task.Status.State, taskText(task))
	}
	m := cReceived.FindStringSubmatch(r.cLogs.String())
	if m == nil {
		t.Fatalf("C's gateway logged no accepted offer from B:\n%s", r.cLogs)
	}
	if m[1] != "1" || m[2] != "full" {
		t.Fatalf("C received a chain of %s earlier offers, quality %s; want 1 (A's offer to B), full", m[1], m[2])
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
	if n := r.relay.links.Load(); n != 1 {
		t.Fatalf("B's agent got %d requests with a link, want 1", n)
	}
	for _, c := range []struct {
		gw          *Server
		route, link string
	}{{r.a, "coder", "origin"}, {r.b, "tester", linkedByHeader}} {
		if n := testutil.ToFloat64(c.gw.metrics.egressOffers.WithLabelValues(c.route, c.link)); n != 1 {
			t.Errorf("egress route %s: %v offers linked by %s, want 1", c.route, n, c.link)
		}
		if n := testutil.ToFloat64(c.gw.metrics.egressStatuses.WithLabelValues(c.route, "completed")); n != 1 {
			t.Errorf("egress route %s: %v verified completed statuses taken in, want 1\nA:\n%s", c.route, n, r.aLogs)
		}
	}
	flags, err := r.b.store.Flags(context.Background(), false)
	if err != nil || len(flags) != 0 {
		t.Fatalf("B's gateway has open flags %+v (%v)", flags, err)
	}
}

// TestEgressLostReplyAskedAgain: the reply from C to B's egress is lost
// after the tool ran. B's gateway asks again with the identical offer
// (draft "Asking Again"); C's gateway answers from its record, and the
// tool does not run a second time. B's agent still gets the result.
func TestEgressLostReplyAskedAgain(t *testing.T) {
	r := newChainRig(t)
	r.net.armed.Store(true)
	task := r.wait(t, r.send(t, "ok"))
	if r.net.dropped.Load() != 1 {
		t.Fatal("no reply was dropped")
	}
	if task.Status.State != a2a.TaskStateCompleted || !strings.Contains(taskText(task), "all tests passed") {
		t.Fatalf("A's task: %s %q", task.Status.State, taskText(task))
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
	if n := testutil.ToFloat64(r.b.metrics.egressAsks.WithLabelValues("tester")); n < 1 {
		t.Fatal("B's egress never asked again")
	}
	if n := testutil.ToFloat64(r.b.metrics.egressStatuses.WithLabelValues("tester", "completed")); n != 1 {
		t.Fatalf("B's egress took in %v completed statuses, want 1", n)
	}
	if !strings.Contains(r.cLogs.String(), "verdict=retransmission") {
		t.Fatalf("C's gateway saw no retransmission:\n%s", r.cLogs)
	}
}

// TestEgressCancelGoesDown: A cancels its task. A's egress signs
// "canceled" for A's hop; B's gateway verifies it, stops B's work, and
// cancels every hop it issued for it: C's gateway gets B's signed
// "canceled" and stops the tool (draft "Lifecycle": canceled follows
// the hops down).
func TestEgressCancelGoesDown(t *testing.T) {
	r := newChainRig(t)
	task := r.send(t, "block")
	select {
	case <-r.tools.started:
	case <-time.After(20 * time.Second):
		t.Fatalf("C's tool never started\nB:\n%s\nC:\n%s", r.bLogs, r.cLogs)
	}
	if _, err := r.client.CancelTask(context.Background(), &a2a.TaskIDParams{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.tools.stopped.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("C's tool was never stopped\nA:\n%s\nB:\n%s\nC:\n%s", r.aLogs, r.bLogs, r.cLogs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := testutil.ToFloat64(r.b.metrics.egressCancels.WithLabelValues("tester", "sent")); n != 1 {
		t.Fatalf("B's egress sent %v cancels, want 1", n)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// TestEgressNothingForStoppedWork: once A's hop is canceled, a call B's
// agent still makes for that work (its link in hand) gets no offer: it
// would pass on work its delegator has revoked (draft "Lifecycle").
func TestEgressNothingForStoppedWork(t *testing.T) {
	r := newChainRig(t)
	task := r.send(t, "block")
	select {
	case <-r.tools.started:
	case <-time.After(20 * time.Second):
		t.Fatal("C's tool never started")
	}
	if _, err := r.client.CancelTask(context.Background(), &a2a.TaskIDParams{ID: task.ID}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.tools.stopped.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("C's tool was never stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	link, _ := r.relay.last.Load().(string)
	cl := mcp.NewClient(&mcp.Implementation{Name: "coder", Version: "1"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: r.relay.egress,
		HTTPClient: &http.Client{Transport: headerTransport{LinkHeader, link, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), call("ok"))
	if err == nil && !res.IsError {
		t.Fatalf("a call for stopped work went out: %+v", res)
	}
	if err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("got %v", err)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}
