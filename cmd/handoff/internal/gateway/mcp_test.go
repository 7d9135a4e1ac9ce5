package gateway

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/internal/malleate"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/trust"
)

// plainTools is an existing MCP server (the go-sdk's, over streamable
// HTTP) with no handoff code at all: its one tool does what its mode
// says, and counts its runs.
type plainTools struct {
	runs     atomic.Int32
	stopped  atomic.Int32
	metas    chan mcp.Meta // the _meta of each call it ran
	traces   chan string   // the traceparent header of each call it ran
	started  chan struct{}
	release  chan struct{}
	progress chan struct{} // the test saw the progress notification
}

type toolArgs struct {
	Mode string `json:"mode"` // ok, fail, block, progress
}

func (p *plainTools) work(ctx context.Context, req *mcp.CallToolRequest, a toolArgs) (*mcp.CallToolResult, any, error) {
	p.runs.Add(1)
	select {
	case p.metas <- req.Params.Meta:
	default:
	}
	select {
	case p.traces <- strings.Join(req.Extra.Header.Values("Traceparent"), ","):
	default:
	}
	text := func(s string) []mcp.Content { return []mcp.Content{&mcp.TextContent{Text: s}} }
	switch a.Mode {
	case "fail":
		return &mcp.CallToolResult{IsError: true, Content: text("3 tests failed")}, nil, nil
	case "block":
		p.started <- struct{}{}
		select {
		case <-ctx.Done():
			p.stopped.Add(1)
			return nil, nil, ctx.Err()
		case <-p.release:
			return &mcp.CallToolResult{Content: text("done late")}, nil, nil
		}
	case "progress":
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(),
			Progress: 1, Total: 2, Message: "half way"}); err != nil {
			return nil, nil, err
		}
		// The result waits until the caller has seen the progress: a
		// gateway that held the stream back would never let it through.
		select {
		case <-p.progress:
		case <-time.After(10 * time.Second):
			return &mcp.CallToolResult{IsError: true, Content: text("the progress notification never reached the caller")}, nil, nil
		}
	}
	return &mcp.CallToolResult{Content: text("all tests passed")}, nil, nil
}

// mcpRig is the plain MCP server, the gateway in front of it (real
// SQLite store), and the planner's delegator.
type mcpRig struct {
	tools   *plainTools
	gw      *Server
	url     string
	keys    *trust.Config
	planner *handoff.Signer
	dl      *delegator.Delegator
	logs    *lockedWriter
	res     *Resources // the gateway's key, trust and tokens
}

// newMCPRig starts the rig; keys are more keys of the route, YAML flow
// style ("without_handoff: pass, failures_effect_free: true").
func newMCPRig(t *testing.T, keys string) *mcpRig {
	t.Helper()
	return newMCPRigTop(t, keys, "")
}

// newMCPRigTop is newMCPRig with more top-level keys of the gateway's
// configuration (YAML lines).
func newMCPRigTop(t *testing.T, keys, top string) *mcpRig {
	t.Helper()
	ctx := context.Background()
	r := &mcpRig{tools: &plainTools{metas: make(chan mcp.Meta, 16), traces: make(chan string, 16), started: make(chan struct{}, 4), release: make(chan struct{}),
		progress: make(chan struct{}, 1)}, keys: trust.New(), logs: &lockedWriter{w: &bytes.Buffer{}}}
	ms := mcp.NewServer(&mcp.Implementation{Name: "tester", Version: "1"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "run-tests"}, r.tools.work)
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)

	r.planner = newSigner(t, r.keys, "https://planner.example")
	tester := newSigner(t, r.keys, "https://tester.example")
	c, err := Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://tester.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes:
  - {name: tools, protocol: mcp, path: /tools/, upstream: %q, %s}
%s`, backdatedSQLite(t), up.URL+"/mcp", keys, top)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r.res = &Resources{Signer: tester, Keys: r.keys, Tokens: map[string]string{plannerToken: "https://planner.example"}}
	r.gw, err = New(ctx, c, r.res, slog.New(slog.NewTextHandler(r.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(r.gw.Handler())
	t.Cleanup(func() { front.Close(); r.gw.Drain(ctx); r.gw.Close() })
	r.url = front.URL + "/tools"
	if r.dl, err = delegator.New(delegator.Config{Me: "https://planner.example", Signer: r.planner, Keys: r.keys,
		Store: store.NewMemory(time.Now())}); err != nil {
		t.Fatal(err)
	}
	return r
}

// settled waits until the gateway has no forwarded call or cancel open.
func (r *mcpRig) settled(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.gw.Drain(ctx); err != nil {
		t.Fatal(err)
	}
}

// flagged asserts that hop has an open flag of kind.
func (r *mcpRig) flagged(t *testing.T, hop, kind string) {
	t.Helper()
	flags, err := r.gw.store.Flags(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flags {
		if f.Hop == hop && f.Kind == kind {
			return
		}
	}
	t.Fatalf("no open %s flag for hop %s: %+v", kind, hop, flags)
}

type tokenTransport struct {
	token string
	base  http.RoundTripper
}

func (b tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.base.RoundTrip(r)
}

// connect opens an MCP session to the gateway with the go-sdk's
// streamable HTTP client and the planner's handoff client.
func (r *mcpRig) connect(t *testing.T, token string, opts *mcp.ClientOptions) (*mcphandoff.Client, *mcp.ClientSession) {
	t.Helper()
	return r.connectWith(t, &http.Client{Transport: tokenTransport{token, http.DefaultTransport}}, opts)
}

// connectWith is connect over the HTTP client base.
func (r *mcpRig) connectWith(t *testing.T, base *http.Client, opts *mcp.ClientOptions) (*mcphandoff.Client, *mcp.ClientSession) {
	t.Helper()
	hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: r.dl, Encoding: handoff.JSON})
	if err != nil {
		t.Fatal(err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "planner", Version: "1"}, opts)
	if err := hc.Attach(cl); err != nil {
		t.Fatal(err)
	}
	cs, err := cl.Connect(context.Background(), hc.Transport(&mcp.StreamableClientTransport{Endpoint: r.url, HTTPClient: base}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return hc, cs
}

// offer is the planner's offer for work on the session cs (its dialog,
// checked at step 5, is the Mcp-Session-Id).
func (r *mcpRig) offer(t *testing.T, cs *mcp.ClientSession, work string) (*handoff.Handoff, string) {
	t.Helper()
	h, hop, err := r.dl.Offer(context.Background(), delegator.Offer{Aud: "https://tester.example", Dialog: cs.ID(), Work: work})
	if err != nil {
		t.Fatal(err)
	}
	return h, hop.Hop
}

// post sends body to the gateway's route in the MCP session, as a raw
// POST with no credential.
func (r *mcpRig) post(t *testing.T, session, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func call(mode string) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: "run-tests", Arguments: map[string]any{"mode": mode}}
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPGatewayCompletes: a tools/call with a Handoff, through the
// gateway, runs the plain server's tool once, without the Handoff in its
// _meta, and comes back with the gateway's signed "completed", which the
// planner's tracker takes. Asked again (the same offer: a
// retransmission), the gateway answers from its record with the
// identical status octets and the kept result, and the tool does not
// run again; asked by a caller not authenticated as the offer's iss, it
// gets no status (draft "Replay and Freshness"). tools/list passes.
func TestMCPGatewayCompletes(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	hc, cs := r.connect(t, plannerToken, nil)
	ctx := context.Background()
	if tools, err := cs.ListTools(ctx, nil); err != nil || len(tools.Tools) != 1 {
		t.Fatalf("tools/list through the gateway: %v %v", tools, err)
	}
	h, hop := r.offer(t, cs, "run the tests")
	rep, err := hc.Call(ctx, cs, call("ok"), h)
	if err != nil {
		t.Fatal(err)
	}
	if rep.State != handoff.StateCompleted || rep.Hop == nil || !rep.Hop.Resolved || resultText(rep.Result) != "all tests passed" {
		t.Fatalf("reply: state %q hop %+v text %q", rep.State, rep.Hop, resultText(rep.Result))
	}
	if meta := <-r.tools.metas; meta[mcphandoff.Key] != nil {
		t.Fatalf("the upstream saw the Handoff in _meta: %v", meta)
	}
	again, err := hc.Ask(ctx, cs, hop)
	if err != nil {
		t.Fatal(err)
	}
	if again.Status == nil || !bytes.Equal(again.Status.Octets, rep.Status.Octets) || resultText(again.Result) != "all tests passed" {
		t.Fatalf("retransmission: status %v, text %q", again.Status, resultText(again.Result))
	}
	_, anon := r.connect(t, "", nil)
	v, err := mcphandoff.HandoffValue(h, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	p := call("ok")
	p.Meta = mcp.Meta{mcphandoff.Key: v}
	res, err := anon.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta[mcphandoff.Key] != nil {
		t.Fatalf("a retransmission from an unauthenticated caller got a status: %v", res.Meta)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
	if got := testutil.ToFloat64(r.gw.metrics.outcomes.WithLabelValues("tools", "completed")); got != 1 {
		t.Errorf("completed outcomes counted: %v", got)
	}
	if logs := r.logs.String(); !strings.Contains(logs, "tool=run-tests") || !strings.Contains(logs, "protocol=mcp") {
		t.Errorf("the offer's log line does not name the protocol and tool:\n%s", logs)
	}
}

// TestMCPGatewayStreamsEventByEvent: the tool's progress notification
// reaches the caller while the tool still runs (the gateway flushes each
// server-sent event as it comes); the result that follows carries the
// status.
func TestMCPGatewayStreamsEventByEvent(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	hc, cs := r.connect(t, plannerToken, &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
		r.tools.progress <- struct{}{}
	}})
	h, _ := r.offer(t, cs, "run the tests, saying how far")
	p := call("progress")
	p.Meta = mcp.Meta{"progressToken": "p-1"}
	rep, err := hc.Call(context.Background(), cs, p, h)
	if err != nil {
		t.Fatal(err)
	}
	if rep.State != handoff.StateCompleted || resultText(rep.Result) != "all tests passed" {
		t.Fatalf("state %q, text %q", rep.State, resultText(rep.Result))
	}
}

// TestMCPGatewayRefuses: what the checks refuse never reaches the tool
// (draft "Receiving an Offer"): an offer signed by a key not in the
// trust file (untrusted-key), one long expired (stale), a tools/call
// with no Handoff on a route that rejects those, and a body carrying the
// Handoff that is not strict JSON (a duplicate member).
func TestMCPGatewayRefuses(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs := r.connect(t, plannerToken, nil)
	ctx := context.Background()
	forger := newSigner(t, nil, "https://planner.example")
	now := time.Now().Unix()
	for _, c := range []struct {
		name   string
		signer *handoff.Signer
		iat    int64
		reason handoff.Reason
	}{
		{"forged", forger, now, handoff.ReasonUntrustedKey},
		{"stale", r.planner, now - 600, handoff.ReasonStale},
	} {
		el, err := c.signer.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: cs.ID(), Iss: "https://planner.example",
			Aud: "https://tester.example", Iat: c.iat, Exp: c.iat + 60}, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		v, err := mcphandoff.HandoffValue(&handoff.Handoff{Offer: el}, handoff.JSON)
		if err != nil {
			t.Fatal(err)
		}
		p := call("ok")
		p.Meta = mcp.Meta{mcphandoff.Key: v}
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError || !strings.Contains(resultText(res), string(c.reason)) {
			t.Errorf("%s: %+v %q", c.name, res, resultText(res))
		}
		if got := testutil.ToFloat64(r.gw.metrics.answers.WithLabelValues("tools", "rejected", string(c.reason))); got != 1 {
			t.Errorf("%s: rejections counted %v", c.name, got)
		}
	}
	res, err := cs.CallTool(ctx, call("ok"))
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "only with an agent handoff") {
		t.Fatalf("no handoff: %+v %v", res, err)
	}
	// A raw POST: the SDK's client would not send a duplicate member.
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run-tests","arguments":{"mode":"ok"},` +
		`"_meta":{"` + mcphandoff.Key + `":{"offer":"a.b.c","offer":"d.e.f"}}}}`
	resp := r.post(t, cs.ID(), body)
	var answer rpcMessage
	json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if answer.Error == nil || answer.Error.Code != mcphandoff.CodeNotStrict || !strings.Contains(answer.Error.Message, "duplicate") {
		t.Fatalf("a duplicate member: %+v", answer)
	}
	if n := r.tools.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times for refused calls", n)
	}
}

// TestMCPGatewayMalleatedCopy: the accepted offer with its ECDSA
// signature malleated ((r, N-s) verifies too) is the same offer (SPEC
// D5): answered as a retransmission with the hop's status signed again
// for the copy's digest, and the tool does not run again.
func TestMCPGatewayMalleatedCopy(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	hc, cs := r.connect(t, plannerToken, nil)
	ctx := context.Background()
	h, _ := r.offer(t, cs, "run the tests")
	rep, err := hc.Call(ctx, cs, call("ok"), h)
	if err != nil || rep.State != handoff.StateCompleted {
		t.Fatalf("%+v %v", rep, err)
	}
	b, err := malleate.JWS(h.Offer.Octets)
	if err != nil {
		t.Fatal(err)
	}
	copyEl := handoff.Element{Form: handoff.FormJWS, Octets: b}
	v, err := mcphandoff.HandoffValue(&handoff.Handoff{Offer: copyEl, Chain: h.Chain}, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	p := call("ok")
	p.Meta = mcp.Meta{mcphandoff.Key: v}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	el, ok, err := mcphandoff.StatusFrom(res.Meta)
	if !ok || err != nil {
		t.Fatalf("no status for the malleated copy: %v %v", res.Meta, err)
	}
	_, st, err := handoff.UnsafeDecode(el)
	if err != nil || st.State != handoff.StateCompleted || !st.Offer.Matches(copyEl.Octets) {
		t.Fatalf("the copy's status: %+v %v", st, err)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// TestMCPGatewayCancel: the planner's signed "canceled" (in
// notifications/cancelled) is verified by the gateway (D9) and becomes
// the upstream's cancel of the forwarded call: the tool's context ends.
// The hop is recorded canceled; the tool's error leaves its outcome
// unknown, flagged (a cancel does not show that the work took no
// effect).
func TestMCPGatewayCancel(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	hc, cs := r.connect(t, plannerToken, nil)
	ctx := context.Background()
	h, hop := r.offer(t, cs, "run the long tests")
	done := make(chan error, 1)
	go func() {
		_, err := hc.Call(ctx, cs, call("block"), h)
		done <- err
	}()
	<-r.tools.started
	if _, err := hc.Cancel(ctx, cs, hop); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.tools.stopped.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the upstream's tool was never canceled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-done
	r.settled(t)
	rec, err := r.gw.routes[0].delegate().Record(ctx, "https://planner.example", hop)
	if err != nil || !rec.Canceled || rec.State != store.Accepted {
		t.Fatalf("record %+v %v", rec, err)
	}
	r.flagged(t, hop, store.FlagUnknownOutcome)
	if got := testutil.ToFloat64(r.gw.metrics.cancels.WithLabelValues("tools", "applied")); got != 1 {
		t.Errorf("cancels applied: %v", got)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// TestMCPGatewayEquivocation: a second, different offer for a hop whose
// work runs is equivocation: it gets no status, and the first offer's
// work is stopped upstream (draft "Forks, Concurrency, and
// Equivocation").
func TestMCPGatewayEquivocation(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	hc, cs := r.connect(t, plannerToken, nil)
	ctx := context.Background()
	h, hop := r.offer(t, cs, "run the long tests")
	go hc.Call(ctx, cs, call("block"), h)
	<-r.tools.started
	now := time.Now().Unix()
	el, err := r.planner.SignOffer(&handoff.Offer{Hop: hop, Dialog: cs.ID(), Iss: "https://planner.example", Aud: "https://tester.example",
		Iat: now, Exp: now + 60}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	v, err := mcphandoff.HandoffValue(&handoff.Handoff{Offer: el}, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	p := call("ok")
	p.Meta = mcp.Meta{mcphandoff.Key: v}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || res.Meta[mcphandoff.Key] != nil || !strings.Contains(resultText(res), "equivocation") {
		t.Fatalf("equivocation answer: %+v %q", res, resultText(res))
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.tools.stopped.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first offer's work was not stopped upstream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The stopped tool's error shows nothing sure about its effect: the
	// first offer's hop stays accepted, flagged, equivocated.
	r.settled(t)
	rec, err := r.gw.routes[0].delegate().Record(ctx, "https://planner.example", hop)
	if err != nil || !rec.Equivocated || rec.State != store.Accepted {
		t.Fatalf("record %+v %v", rec, err)
	}
	r.flagged(t, hop, store.FlagUnknownOutcome)
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// TestMCPGatewayPass: on a route with without_handoff: pass, a plain
// tools/call reaches the tool unchecked.
func TestMCPGatewayPass(t *testing.T) {
	r := newMCPRig(t, "without_handoff: pass")
	_, cs := r.connect(t, "", nil)
	res, err := cs.CallTool(context.Background(), call("ok"))
	if err != nil || res.IsError || resultText(res) != "all tests passed" {
		t.Fatalf("%+v %v", res, err)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// TestMCPGatewayToolError: a tool error result (isError) is a signed
// "failed" with no refs only on a route that declares its upstream's
// failures effect-free; otherwise it shows nothing sure about the
// effect, and the hop stays accepted, flagged (draft "Knowing the
// Outcome"). The caller gets the tool's own result either way.
func TestMCPGatewayToolError(t *testing.T) {
	for _, c := range []struct {
		keys string
		want handoff.State
	}{
		{"failures_effect_free: true", handoff.StateFailed},
		{"failures_effect_free: false", handoff.StateAccepted},
	} {
		t.Run(c.keys, func(t *testing.T) {
			r := newMCPRig(t, c.keys)
			hc, cs := r.connect(t, plannerToken, nil)
			h, hop := r.offer(t, cs, "run the failing tests")
			rep, err := hc.Call(context.Background(), cs, call("fail"), h)
			if err != nil {
				t.Fatal(err)
			}
			if rep.State != c.want || !rep.Result.IsError || resultText(rep.Result) != "3 tests failed" {
				t.Fatalf("state %q, isError %v, text %q", rep.State, rep.Result.IsError, resultText(rep.Result))
			}
			if c.want == handoff.StateAccepted {
				r.flagged(t, hop, store.FlagUnknownOutcome)
			}
		})
	}
}

// TestMCPGatewayCallerGoesAway: a caller that goes away while the tool
// runs does not end the work or lose its outcome: the gateway reads the
// upstream's response to the end and records it, and the caller's
// retransmission gets the signed "completed" with the result.
func TestMCPGatewayCallerGoesAway(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	hc, cs := r.connect(t, plannerToken, nil)
	h, hop := r.offer(t, cs, "run the long tests")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := hc.Call(ctx, cs, call("block"), h)
		done <- err
	}()
	<-r.tools.started
	cancel() // the SDK also sends its plain notifications/cancelled: not passed on
	if err := <-done; err == nil {
		t.Fatal("the call returned no error after its context ended")
	}
	time.Sleep(50 * time.Millisecond) // the plain cancel, if it were passed on, would reach the tool now
	close(r.tools.release)
	r.settled(t)
	rep, err := hc.Ask(context.Background(), cs, hop)
	if err != nil {
		t.Fatal(err)
	}
	if rep.State != handoff.StateCompleted || resultText(rep.Result) != "done late" {
		t.Fatalf("state %q, text %q", rep.State, resultText(rep.Result))
	}
	if n, s := r.tools.runs.Load(), r.tools.stopped.Load(); n != 1 || s != 0 {
		t.Fatalf("the tool ran %d times, was stopped %d times", n, s)
	}
}

// TestMCPGatewayReplicas (SPEC.md section 6: "Several gateways on one
// PostgreSQL store behave as one delegate"): two gateways on one
// database behind one address that sends each request to the next
// replica (no sticky sessions; the MCP session is the upstream's). The
// same offer sent twice at once runs the tool once; retransmissions,
// which reach both replicas, get the identical status octets.
func TestMCPGatewayReplicas(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject") // its upstream, keys and planner; its own gateway is not used
	ctx := context.Background()
	gws, _ := r.replicas(t, nil)
	hc, cs := r.connect(t, plannerToken, nil)
	h, hop := r.offer(t, cs, "run the tests once")
	v, err := mcphandoff.HandoffValue(h, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]*mcp.CallToolResult, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 0 {
				// Through the handoff client, so that it may ask again.
				var rep *mcphandoff.Reply
				if rep, errs[i] = hc.Call(ctx, cs, call("ok"), h); rep != nil {
					results[i] = rep.Result
				}
				return
			}
			p := call("ok")
			p.Meta = mcp.Meta{mcphandoff.Key: v}
			results[i], errs[i] = cs.CallTool(ctx, p)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the same offer through two replicas ran the tool %d times", n)
	}
	for _, gw := range gws {
		if err := gw.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var final []byte
	for i := range 6 {
		rep, err := hc.Ask(ctx, cs, hop)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Status == nil || rep.State != handoff.StateCompleted {
			t.Fatalf("retransmission %d: state %q, status %v", i, rep.State, rep.Status)
		}
		if final == nil {
			final = rep.Status.Octets
		} else if !bytes.Equal(final, rep.Status.Octets) {
			t.Fatalf("retransmission %d: other octets than the recorded status", i)
		}
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// replicas puts two gateways on one fresh PostgreSQL database behind one
// address (r.url then points there), which sends each request to the
// next replica, or to replica *to when to is not nil and *to >= 0.
func (r *mcpRig) replicas(t *testing.T, to *atomic.Int32) ([]*Server, string) {
	t.Helper()
	dsn := postgresDatabase(t)
	ctx := context.Background()
	pre, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := pre.Forget(ctx, time.Now().Add(-time.Minute)); err != nil { // see backdatedSQLite
		t.Fatal(err)
	}
	pre.Close()
	var gws []*Server
	for i := range 2 {
		c := *r.gw.cfg.Load()
		c.Store = dsn
		gw, err := New(ctx, &c, r.res, slog.New(slog.NewTextHandler(r.logs, nil)).With("replica", i))
		if err != nil {
			t.Fatal(err)
		}
		gws = append(gws, gw)
	}
	var next atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		i := int(next.Add(1)) % 2
		if to != nil && to.Load() >= 0 {
			i = int(to.Load())
		}
		gws[i].Handler().ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		front.Close()
		// Bounded: a test that failed may leave a tool blocked.
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		for _, gw := range gws {
			gw.Drain(dctx)
			gw.Close()
		}
	})
	r.url = front.URL + "/tools"
	return gws, dsn
}

// TestMCPGatewayReplicasCancel: a tools/call forwarded by one replica is
// canceled through the other: the replica that verifies the signed
// "canceled" sends the upstream its notifications/cancelled for the call
// the first one forwarded (decision 86), and the hop ends as on one
// gateway (accepted, canceled, flagged unknown outcome).
func TestMCPGatewayReplicasCancel(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	ctx := context.Background()
	var to atomic.Int32
	to.Store(0)
	gws, dsn := r.replicas(t, &to)
	hc, cs := r.connect(t, plannerToken, nil)
	t.Cleanup(func() { close(r.tools.release) }) // first: a failed run leaves the tool blocked, and the session's close waits for it
	h, hop := r.offer(t, cs, "run the long tests")
	done := make(chan error, 1)
	go func() {
		_, err := hc.Call(ctx, cs, call("block"), h)
		done <- err
	}()
	<-r.tools.started
	to.Store(1)

	// The caller's own unsigned notifications/cancelled for the call,
	// sent to the other replica, is not passed on: it stops no work.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var id string
	if err := db.QueryRowContext(ctx, `SELECT id FROM gateway_mcp_calls WHERE hop = $1`, hop).Scan(&id); err != nil {
		t.Fatalf("the forwarded call is not noted in the store: %v", err)
	}
	req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+id+`}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", cs.ID())
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+plannerToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	time.Sleep(300 * time.Millisecond)
	if n := r.tools.stopped.Load(); n != 0 {
		t.Fatalf("an unsigned cancel through the other replica stopped the tool:\n%s", r.logs)
	}

	// The signed one does, from the replica that verifies it.
	if _, err := hc.Cancel(ctx, cs, hop); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.tools.stopped.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the upstream's tool was never canceled:\n%s", r.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-done
	rec, err := gws[1].routes[0].delegate().Record(ctx, "https://planner.example", hop)
	if err != nil || !rec.Canceled || rec.State != store.Accepted {
		t.Fatalf("record %+v %v", rec, err)
	}
	if got := testutil.ToFloat64(gws[1].metrics.cancels.WithLabelValues("tools", "applied")); got != 1 {
		t.Errorf("cancels applied on the replica that took the cancel: %v", got)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
}
