package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// TestLinksFind: an outbound call is linked by the link header, then the
// trace id, then the A2A contextId, in that order (issue 17); a name
// that is unknown, or whose inbound offer can no longer be passed on
// (past its exp plus the skew: draft "Chain", a later iat breaks the
// chain), links nothing, and says why.
func TestLinksFind(t *testing.T) {
	keys := trust.New()
	planner := newSigner(t, keys, "https://planner.example")
	now := time.Unix(1_800_000_000, 0)
	offer := func(hop string, exp time.Time) *handoff.Handoff {
		el, err := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Iss: "https://planner.example", Aud: "https://coder.example", Dialog: "d",
			Iat: exp.Add(-time.Minute).Unix(), Exp: exp.Unix()}, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		return &handoff.Handoff{Offer: el}
	}
	l := newLinks()
	l.now = func() time.Time { return now }
	const trace1, trace2 = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b700f067aa0ba902b7"
	tokA := l.note("https://planner.example", "hop-a", offer("hop-a", now.Add(time.Minute)), trace1, "ctx-a", 0)
	tokB := l.note("https://planner.example", "hop-b", offer("hop-b", now.Add(time.Minute)), trace2, "ctx-b", 0)
	if tokA == "" || tokB == "" || tokA == tokB {
		t.Fatalf("tokens %q %q", tokA, tokB)
	}
	if again := l.note("https://planner.example", "hop-a", offer("hop-a", now.Add(time.Minute)), "", "", 0); again != tokA {
		t.Fatalf("the same hop noted again got another token")
	}
	if tok := l.note("https://planner.example", "hop-old", offer("hop-old", now.Add(-time.Second)), "", "", 0); tok != "" {
		t.Fatalf("an offer past its exp was noted")
	}
	tp := func(id string) string { return "00-" + id + "-00f067aa0ba902b7-01" }
	for _, c := range []struct {
		name           string
		header, tparnt string
		contextID      string
		hop, how, why  string
	}{
		{"header", tokA, tp(trace2), "ctx-b", "hop-a", linkedByHeader, ""},
		{"trace when no header", "", tp(trace2), "ctx-a", "hop-b", linkedByTrace, ""},
		{"an unknown header decides alone, whatever the trace says", "nope", tp(trace1), "ctx-a", "", unlinked, "its header names no inbound hop"},
		{"context", "", "", "ctx-b", "hop-b", linkedByContext, ""},
		{"a bad traceparent is no trace", "", "00-" + strings.ToUpper(trace1) + "-00f067aa0ba902b7-01", "", "", unlinked, "no Handoff-Link header, no traceparent"},
		{"nothing", "", "", "", "", unlinked, "no Handoff-Link header, no traceparent, no contextId and no referenceTaskIds"},
		{"unknown everything", "nope", tp("11111111111111111111111111111111"), "ctx-z", "", unlinked, "its header names no inbound hop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			if c.header != "" {
				h.Set(LinkHeader, c.header)
			}
			if c.tparnt != "" {
				h.Set("Traceparent", c.tparnt)
			}
			e, how, why := l.find(h, c.contextID)
			if how != c.how || (e == nil) != (c.hop == "") || e != nil && e.key.Hop != c.hop || !strings.Contains(why, c.why) {
				t.Fatalf("got %+v %q %q", e, how, why)
			}
		})
	}
	// The upstream's task doing a hop's work, named in an outbound
	// message's referenceTaskIds.
	l.noteTask("https://planner.example", "hop-b", offer("hop-b", now.Add(time.Minute)), "upstream-task-7", 0)
	if e, how, _ := l.find(http.Header{}, "ctx-none", "other", "upstream-task-7"); e == nil || e.key.Hop != "hop-b" || how != linkedByContext {
		t.Fatalf("by referenceTaskIds: %+v %q", e, how)
	}
	// A trace another caller's hop carries too names neither: the
	// caller chose it (ambiguous), and a call linked only by it is
	// unlinked, never linked to the other's work.
	l.note("https://mallory.example", "hop-m", offer("hop-m", now.Add(time.Minute)), trace2, "", 0)
	h0 := http.Header{}
	h0.Set("Traceparent", tp(trace2))
	if e, how, why := l.find(h0, ""); e != nil || how != unlinked || !strings.Contains(why, "ambiguous") {
		t.Fatalf("an ambiguous trace: %+v %q %q", e, how, why)
	}
	l.forget("https://mallory.example", "hop-m")
	if e, _, why := l.find(h0, ""); e != nil {
		t.Fatalf("a trace once ambiguous linked again: %+v %q", e, why)
	}
	// A hop noted again under a new trace gives up the old one.
	l.note("https://planner.example", "hop-a", offer("hop-a", now.Add(time.Minute)), "22222222222222222222222222222222", "", 0)
	h1 := http.Header{}
	h1.Set("Traceparent", tp(trace1))
	if e, _, _ := l.find(h1, ""); e != nil {
		t.Fatalf("the old trace still links: %+v", e)
	}
	// A stopped hop still links (its calls are refused, not signed as
	// new chains), marked stopped.
	l.stop("https://planner.example", "hop-a")
	h2 := http.Header{}
	h2.Set(LinkHeader, tokA)
	if e, _, _ := l.find(h2, ""); e == nil || !l.isStopped(e) {
		t.Fatal("a stopped hop's link is gone or not marked")
	}

	// Past the offer's exp (plus the skew): nothing is linked, and why
	// says so.
	now = now.Add(2 * time.Minute)
	h := http.Header{}
	h.Set(LinkHeader, tokA)
	if e, how, why := l.find(h, ""); e != nil || how != unlinked || !strings.Contains(why, "expired") {
		t.Fatalf("an expired link: %+v %q %q", e, how, why)
	}
}

// TestLinksBounded: the links never hold more than maxLinks hops; the
// expired go first, then the oldest.
func TestLinksBounded(t *testing.T) {
	keys := trust.New()
	planner := newSigner(t, keys, "https://planner.example")
	el, err := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Iss: "https://planner.example", Aud: "https://coder.example",
		Iat: time.Now().Unix(), Exp: time.Now().Add(time.Minute).Unix()}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	h := &handoff.Handoff{Offer: el}
	l := newLinks()
	first := l.note("i", "hop-0", h, "", "ctx-0", 0)
	for i := 1; i < maxLinks+10; i++ {
		l.note("i", fmt.Sprint("hop-", i), h, "", fmt.Sprint("ctx-", i), 0)
	}
	if n := len(l.byHop); n > maxLinks {
		t.Fatalf("%d links kept", n)
	}
	hd := http.Header{}
	hd.Set(LinkHeader, first)
	if e, _, _ := l.find(hd, ""); e != nil {
		t.Fatal("the oldest link survived")
	}
	if e, _, _ := l.find(http.Header{}, fmt.Sprint("ctx-", maxLinks+9)); e == nil {
		t.Fatal("the newest link is gone")
	}
}

// TestEgressLinksByTraceContext: B's agent passes no link header, but it
// propagates the trace context (as instrumented frameworks do): its call
// to C is linked by the trace id, and C still receives the whole chain.
func TestEgressLinksByTraceContext(t *testing.T) {
	r := newChainRig(t)
	r.relay.byTrace.Store(true)
	ac, err := a2aclient.NewFromEndpoints(context.Background(), []a2a.AgentInterface{{URL: r.aEgress + "/coder/", Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithInterceptors(traceparent{v: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}))
	if err != nil {
		t.Fatal(err)
	}
	r.client = ac
	task := r.wait(t, r.send(t, "ok"))
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("A's task: %s %q", task.Status.State, taskText(task))
	}
	if n := testutil.ToFloat64(r.b.metrics.egressOffers.WithLabelValues("tester", linkedByTrace)); n != 1 {
		t.Fatalf("%v offers linked by trace\n%s", n, r.bLogs)
	}
	if m := cReceived.FindStringSubmatch(r.cLogs.String()); m == nil || m[1] != "1" || m[2] != "full" {
		t.Fatalf("C's gateway: %v\n%s", m, r.cLogs)
	}
}

type traceparent struct {
	a2aclient.PassthroughInterceptor
	v string
}

func (t traceparent) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	req.Meta.Append("traceparent", t.v)
	return ctx, nil
}

// TestEgressUnlinkedIsFlagged: B's agent passes on neither the link nor
// the trace: its call starts a new chain, which C receives with no
// chain, and B's gateway counts, logs and flags it for the operator.
func TestEgressUnlinkedIsFlagged(t *testing.T) {
	r := newChainRig(t)
	r.relay.noLink.Store(true)
	task := r.wait(t, r.send(t, "ok"))
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("A's task: %s", task.Status.State)
	}
	if n := testutil.ToFloat64(r.b.metrics.egressOffers.WithLabelValues("tester", unlinked)); n != 1 {
		t.Fatalf("%v unlinked offers", n)
	}
	flags, err := r.b.store.Flags(context.Background(), false)
	if err != nil || len(flags) != 1 || flags[0].Kind != flagUnlinked || !strings.Contains(flags[0].Detail, "no inbound hop it serves was found") {
		t.Fatalf("B's flags: %+v %v", flags, err)
	}
	if !strings.Contains(r.bLogs.String(), "outbound offer with no link to an inbound hop") {
		t.Fatalf("not logged:\n%s", r.bLogs)
	}
	if !strings.Contains(r.cLogs.String(), "chain=0") {
		t.Fatalf("C received a chain:\n%s", r.cLogs)
	}
}

// egressOnly is a gateway (as the coder) with one MCP egress route to
// the handler down, and an MCP client session through it.
func egressOnly(t *testing.T, down http.Handler) (*Server, *mcp.ClientSession, *lockedWriter, *httptest.Server) {
	t.Helper()
	return egressOnlyWith(t, down, "")
}

// egressOnlyWith is egressOnly with more keys on the route (YAML flow
// style, each with its leading comma).
func egressOnlyWith(t *testing.T, down http.Handler, routeKeys string) (*Server, *mcp.ClientSession, *lockedWriter, *httptest.Server) {
	t.Helper()
	keys := trust.New()
	coder := newSigner(t, keys, "https://coder.example")
	ds := httptest.NewServer(down)
	t.Cleanup(ds.Close)
	c, err := Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://coder.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes: []
egress:
  listen: 127.0.0.1:0
  routes:
    - {name: tester, protocol: mcp, path: /tester/, agent_id: "https://tester.example", url: %q, ttl: 3s%s}
`, backdatedSQLite(t), ds.URL+"/mcp", routeKeys)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedWriter{w: &bytes.Buffer{}}
	gw, err := New(context.Background(), c, &Resources{Signer: coder, Keys: keys}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	eg := httptest.NewServer(gw.EgressHandler())
	t.Cleanup(func() { eg.Close(); gw.Close() })
	cl := mcp.NewClient(&mcp.Implementation{Name: "coder", Version: "1"}, nil)
	cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: eg.URL + "/tester/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return gw, cs, logs, ds
}

// plainMCP is an MCP server with no handoff code, whose tool answers
// with the status statusFor gives (nil: none) in its result's _meta.
func plainMCP(t *testing.T, statusFor func(h *handoff.Handoff) *handoff.Element) http.Handler {
	ms := mcp.NewServer(&mcp.Implementation{Name: "tester", Version: "1"}, nil)
	ms.AddTool(&mcp.Tool{Name: "run-tests", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "all tests passed"}}}
		b, err := mcphandoff.HandoffOctets(req.Params.Meta[mcphandoff.Key])
		if err != nil {
			return nil, fmt.Errorf("no handoff in the call: %v", err)
		}
		h, err := handoff.ParseHandoff(b, handoff.DefaultLimits())
		if err != nil {
			return nil, err
		}
		if st := statusFor(h); st != nil {
			res.Meta = mcp.Meta{mcphandoff.Key: mcphandoff.StatusValue(*st)}
		}
		return res, nil
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
	return mux
}

// TestEgressHostileDownstream: what a downstream says is verified before
// it counts (draft "Receiving a Status", D9). A status signed by a key
// not trusted for the downstream is refused and flagged; a result with
// no status leaves the hop's outcome unknown, flagged; the agent gets
// the tool's result either way, and the hop stays unresolved. A
// downstream that cannot be reached never took the work: the hop is
// resolved (an authoritative observation), with no flag.
func TestEgressHostileDownstream(t *testing.T) {
	forger := newSigner(t, nil, "https://tester.example") // not in the trust
	for _, c := range []struct {
		name   string
		status func(h *handoff.Handoff) *handoff.Element
		flag   string
		result string
	}{
		{"forged status", func(h *handoff.Handoff) *handoff.Element {
			st, err := forger.SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "https://tester.example", Aud: "https://coder.example",
				Iat: time.Now().Unix(), State: handoff.StateCompleted}, handoff.FormJWS)
			if err != nil {
				panic(err)
			}
			return &st
		}, store.FlagConflictingInputs, "refused"},
		{"no status", func(*handoff.Handoff) *handoff.Element { return nil }, store.FlagUnknownOutcome, "unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw, cs, logs, _ := egressOnly(t, plainMCP(t, c.status))
			res, err := cs.CallTool(context.Background(), call("ok"))
			if err != nil || resultText(res) != "all tests passed" {
				t.Fatalf("the agent got %v %v", res, err)
			}
			flags, err := gw.store.Flags(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, f := range flags {
				kinds[f.Kind] = true
			}
			if !kinds[c.flag] || !kinds[flagUnlinked] {
				t.Fatalf("flags %+v, want %s and %s\n%s", flags, c.flag, flagUnlinked, logs)
			}
			if n := testutil.ToFloat64(gw.metrics.egressStatuses.WithLabelValues("tester", c.result)); n != 1 {
				t.Fatalf("%v %s results", n, c.result)
			}
			if n := testutil.ToFloat64(gw.metrics.egressStatuses.WithLabelValues("tester", "completed")); n != 0 {
				t.Fatal("a status that does not verify was taken")
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		gw, cs, logs, ds := egressOnly(t, plainMCP(t, func(*handoff.Handoff) *handoff.Element { return nil }))
		// The session is up; the call finds no one listening.
		ds.Listener.Close()
		ds.CloseClientConnections()
		// A connection kept alive and closed by the other side fails the
		// next request after it was written, which says nothing sure
		// (unknown, flagged); this test is about a dial that fails.
		gw.egress.routes[0].hc.CloseIdleConnections()
		res, err := cs.CallTool(context.Background(), call("ok"))
		if err == nil && !res.IsError {
			t.Fatalf("the call succeeded: %+v", res)
		}
		if n := testutil.ToFloat64(gw.metrics.egressStatuses.WithLabelValues("tester", "not-taken")); n != 1 {
			t.Fatalf("%v not-taken (the call: %v %v)\n%s", n, res, err, logs)
		}
	})
}

// TestEgressNotAskedOfAPlainServer: a reply lost on its way from a
// downstream never seen to speak the handoff (a plain MCP server, which
// would run the tool again) is not asked for again: the tool ran once,
// the agent is told the outcome is not known, and the hop is flagged.
func TestEgressNotAskedOfAPlainServer(t *testing.T) {
	var runs atomic.Int32
	plain := plainMCP(t, func(*handoff.Handoff) *handoff.Element { runs.Add(1); return nil })
	l := &lossy{}
	l.armed.Store(true)
	var target *url.URL
	l.proxy = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
	down := httptest.NewServer(plain)
	t.Cleanup(down.Close)
	target, _ = url.Parse(down.URL)
	gw, cs, _, _ := egressOnly(t, l)
	res, err := cs.CallTool(context.Background(), call("ok"))
	if err == nil && !res.IsError {
		t.Fatalf("the agent got a result: %+v", res)
	}
	if err == nil || !strings.Contains(err.Error(), "could run the work twice: not asked") {
		t.Fatalf("got %v", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
	if n := testutil.ToFloat64(gw.metrics.egressAsks.WithLabelValues("tester")); n != 0 {
		t.Fatalf("asked again %v times", n)
	}
	if n := testutil.ToFloat64(gw.metrics.egressStatuses.WithLabelValues("tester", "unknown")); n != 1 {
		t.Fatalf("%v unknown", n)
	}
}

// TestEgressOnlyForTheAgent: the egress signs as the agent, so it takes
// nothing a web page in a browser on the host could send it: a request
// with an Origin, a Host that is not loopback (DNS rebinding), a body
// that is not application/json (a "simple" cross-origin POST).
func TestEgressOnlyForTheAgent(t *testing.T) {
	gw, _, _, _ := egressOnly(t, plainMCP(t, func(*handoff.Handoff) *handoff.Element { return nil }))
	eg := httptest.NewServer(gw.EgressHandler())
	t.Cleanup(eg.Close)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run-tests","arguments":{}}}`
	for _, c := range []struct {
		name string
		set  func(*http.Request)
		code int
	}{
		{"origin", func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }, http.StatusForbidden},
		{"host", func(r *http.Request) { r.Host = "evil.example" }, http.StatusForbidden},
		{"text/plain", func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, http.StatusUnsupportedMediaType},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, eg.URL+"/tester/", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			c.set(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("HTTP %d, want %d", resp.StatusCode, c.code)
			}
		})
	}
	if n := testutil.ToFloat64(gw.metrics.egressOffers.WithLabelValues("tester", unlinked)); n != 0 {
		t.Fatalf("%v offers signed", n)
	}
}

// TestEgressRedirectNotFollowed: a downstream that answers a call with a
// redirect is not followed, and the redirect is not passed to the agent
// (whose client would follow it, around the gateway or back through it
// for another offer): the hop was not taken.
func TestEgressRedirectNotFollowed(t *testing.T) {
	plain := plainMCP(t, func(*handoff.Handoff) *handoff.Element { return nil })
	down := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		if bytes.Contains(b, []byte(`"tools/call"`)) {
			http.Redirect(w, req, "http://elsewhere.example/mcp", http.StatusTemporaryRedirect)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		plain.ServeHTTP(w, req)
	})
	gw, cs, _, _ := egressOnly(t, down)
	res, err := cs.CallTool(context.Background(), call("ok"))
	if err == nil && !res.IsError {
		t.Fatalf("got %+v", res)
	}
	if err == nil || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("got %v", err)
	}
	if n := testutil.ToFloat64(gw.metrics.egressStatuses.WithLabelValues("tester", "not-taken")); n != 1 {
		t.Fatalf("%v not-taken", n)
	}
}

// TestEgressOutboundBounded: the hops kept for their cancels are at
// most maxOutbound, the oldest forgotten first, with their task ids.
func TestEgressOutboundBounded(t *testing.T) {
	e := &egress{out: map[string]*outbound{}, tasks: map[string]*outbound{}}
	r := &egressRoute{cfg: EgressRoute{Name: "x", Protocol: "a2a"}, e: e}
	for i := 0; i < maxOutbound+100; i++ {
		o := &outbound{r: r, hop: fmt.Sprint("hop-", i)}
		e.track(o)
		e.noteTask(o, fmt.Sprint("task-", i))
	}
	if len(e.out) != maxOutbound || len(e.tasks) != maxOutbound {
		t.Fatalf("%d hops, %d tasks kept", len(e.out), len(e.tasks))
	}
	if e.out["hop-0"] != nil || e.tasks["x\x00task-0"] != nil || e.out[fmt.Sprint("hop-", maxOutbound+99)] == nil {
		t.Fatal("not the oldest forgotten")
	}
}

// TestEgressCallTimeout: a downstream that never answers holds the
// call no longer than the route's call_timeout: the agent is told, the
// hop's outcome is flagged unknown, and no exchange is left open.
func TestEgressCallTimeout(t *testing.T) {
	plain := plainMCP(t, func(*handoff.Handoff) *handoff.Element { return nil })
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	down := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		if bytes.Contains(b, []byte(`"tools/call"`)) {
			select {
			case <-hang:
			case <-req.Context().Done():
			}
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		plain.ServeHTTP(w, req)
	})
	gw, cs, _, _ := egressOnlyWith(t, down, ", call_timeout: 1s")
	start := time.Now()
	res, err := cs.CallTool(context.Background(), call("ok"))
	if err == nil && !res.IsError {
		t.Fatalf("got %+v", res)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the call took %v", took)
	}
	if err == nil || !strings.Contains(err.Error(), "call_timeout") {
		t.Fatalf("got %v", err)
	}
	if n := testutil.ToFloat64(gw.metrics.egressStatuses.WithLabelValues("tester", "unknown")); n != 1 {
		t.Fatalf("%v unknown", n)
	}
}

// TestEgressSpeaksOnlyForItself: a route learns that its downstream
// answers a retransmission from its record only from a status the
// downstream itself signed; a third agent's misdelivered "rejected"
// (wrong-audience, D9), which a plain relay may pass on, teaches it
// nothing, so a lost reply is still never sent again to a plain server.
func TestEgressSpeaksOnlyForItself(t *testing.T) {
	var third *handoff.Signer
	gw, cs, _, _ := egressOnly(t, plainMCP(t, func(h *handoff.Handoff) *handoff.Element {
		st, err := third.SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "https://third.example", Aud: "https://coder.example",
			Iat: time.Now().Unix(), State: handoff.StateRejected, Reason: handoff.ReasonWrongAudience}, handoff.FormJWS)
		if err != nil {
			panic(err)
		}
		return &st
	}))
	third = newSigner(t, gw.keys.Load(), "https://third.example")
	if _, err := cs.CallTool(context.Background(), call("ok")); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(gw.metrics.egressStatuses.WithLabelValues("tester", "refused")); n != 0 {
		t.Fatal("the misdelivered status did not verify: the test proves nothing")
	}
	if gw.egress.routes[0].speaks.Load() {
		t.Fatal("a third agent's status taught the route that its downstream speaks the handoff")
	}
}
