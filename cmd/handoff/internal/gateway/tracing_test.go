package gateway

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/quantumlearningmachines/handoff/delegator"
)

// collector is an OpenTelemetry collector's OTLP/HTTP traces endpoint:
// it decodes what the gateway's exporter posts with OTLP's own protobuf
// types and keeps the spans with their resource's service.name.
type collector struct {
	url   string
	mu    sync.Mutex
	spans []collected
}

type collected struct {
	service string
	span    *tracepb.Span
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not an OTLP/HTTP protobuf export to /v1/traces", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.ResourceSpans {
			service := attr(rs.GetResource().GetAttributes(), "service.name")
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					c.spans = append(c.spans, collected{service, sp})
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func attr(kv []*commonpb.KeyValue, key string) string {
	for _, a := range kv {
		if a.Key == key {
			if v, ok := a.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(v.IntValue, 10)
			}
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// span is the one collected span whose name is name, after the
// gateway's batched spans were sent. A request's span ends after its
// answer is written, so a caller can hold the answer before the span
// has ended: the spans are flushed again until one is there (5 s).
func (c *collector) span(t *testing.T, gw *Server, name string) collected {
	t.Helper()
	var found []collected
	var names []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := gw.tracing.provider.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		found, names = c.named(name)
		if len(found) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %q; the spans: %q", len(found), name, names)
	}
	return found[0]
}

// named is the collected spans whose name is name, and every span's name.
func (c *collector) named(name string) (found []collected, names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		names = append(names, s.span.Name)
		if s.span.Name == name {
			found = append(found, s)
		}
	}
	return found, names
}

const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerParent = "00f067aa0ba902b7"
	callerTP     = "00-" + callerTrace + "-" + callerParent + "-01"
)

// traceHeader sends a fixed traceparent (and tracestate) on every
// request, as an instrumented caller does.
type traceHeader struct {
	traceparent string
	base        http.RoundTripper
}

func (h traceHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Traceparent", h.traceparent)
	r.Header.Set("Tracestate", "caller=1")
	return h.base.RoundTrip(r)
}

// traceMeta is traceHeader for an a2a-go client.
type traceMeta struct {
	a2aclient.PassthroughInterceptor
	traceparent string
}

func (m traceMeta) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	req.Meta.Append("traceparent", m.traceparent)
	return ctx, nil
}

// upstreamParent is the parent span id in the traceparent the upstream
// saw, which must be in the caller's trace.
func upstreamParent(t *testing.T, traceparent string) string {
	t.Helper()
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || parts[1] != callerTrace {
		t.Fatalf("the upstream saw traceparent %q, not one in the caller's trace %s", traceparent, callerTrace)
	}
	return parts[2]
}

// TestTracingMCP: with tracing configured, a tools/call with a handoff
// is one server span, a child of the caller's traceparent, named for its
// method and carrying the hop, iss, aud, chain length, verdict and tool;
// the upstream's call is the span's child. The collector is reached over
// OTLP/HTTP, as a real one is.
func TestTracingMCP(t *testing.T) {
	col := newCollector(t)
	r := newMCPRigTop(t, "without_handoff: reject", "tracing: {otlp_endpoint: \""+col.url+"\", service_name: tester-gateway}")
	hc, cs := r.connectWith(t, &http.Client{Transport: traceHeader{callerTP, tokenTransport{plannerToken, http.DefaultTransport}}}, nil)
	h, hop := r.offer(t, cs, "run the tests")
	if _, err := hc.Call(context.Background(), cs, call("ok"), h); err != nil {
		t.Fatal(err)
	}
	parent := upstreamParent(t, <-r.tools.traces)

	got := col.span(t, r.gw, "mcp tools/call")
	sp := got.span
	if hex.EncodeToString(sp.TraceId) != callerTrace || hex.EncodeToString(sp.ParentSpanId) != callerParent {
		t.Errorf("span trace %x parent %x, want the caller's %s / %s", sp.TraceId, sp.ParentSpanId, callerTrace, callerParent)
	}
	if hex.EncodeToString(sp.SpanId) != parent {
		t.Errorf("the upstream's parent span is %s, not the gateway's span %x", parent, sp.SpanId)
	}
	if sp.Kind != tracepb.Span_SPAN_KIND_SERVER || got.service != "tester-gateway" || sp.TraceState != "caller=1" {
		t.Errorf("span kind %v, service %q, tracestate %q", sp.Kind, got.service, sp.TraceState)
	}
	for k, want := range map[string]string{"handoff.hop": hop, "handoff.iss": "https://planner.example", "handoff.aud": "https://tester.example",
		"handoff.chain_length": "0", "handoff.verdict": "accepted", "handoff.tool": "run-tests", "handoff.route": "tools",
		"rpc.method": "tools/call", "http.response.status_code": "200"} {
		if v := attr(sp.Attributes, k); v != want {
			t.Errorf("span attribute %s = %q, want %q", k, v, want)
		}
	}
	// A request that only passes through is a span too.
	col.span(t, r.gw, "mcp initialize")
}

// TestTracingA2A: an A2A message/send is one span carrying the verdict
// and contextId, and is the parent of the upstream agent's request (sent
// by a2a-go's client, through the gateway's transport).
func TestTracingA2A(t *testing.T) {
	col := newCollector(t)
	r := newRigTop(t, "reject", false, "tracing: {otlp_endpoint: \""+col.url+"\"}")
	c, _, _ := r.clientWith(t, plannerToken, traceMeta{traceparent: callerTP})
	rep, err := c.Offer(context.Background(), delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-7", Work: "run the tests"}, msg("complete"), nil)
	if err != nil || rep.State() != a2a.TaskStateCompleted {
		t.Fatalf("offer: %v %v", rep, err)
	}
	parent := upstreamParent(t, <-r.agent.traces)
	got := col.span(t, r.gw, "a2a message/send")
	sp := got.span
	if hex.EncodeToString(sp.SpanId) != parent || hex.EncodeToString(sp.ParentSpanId) != callerParent || got.service != "handoff-gateway" {
		t.Errorf("span %x parent %x service %q; the upstream's parent %s", sp.SpanId, sp.ParentSpanId, got.service, parent)
	}
	for k, want := range map[string]string{"handoff.hop": rep.Hop, "handoff.verdict": "accepted", "handoff.context_id": "ctx-7",
		"handoff.aud": "https://coder.example", "handoff.chain_length": "0"} {
		if v := attr(sp.Attributes, k); v != want {
			t.Errorf("span attribute %s = %q, want %q", k, v, want)
		}
	}
}

// TestTraceparentPassesThrough: with tracing off the gateway is not in
// the trace: the caller's traceparent reaches the upstream unchanged, and
// one the gateway cannot read does not reach it at all (W3C Trace
// Context: the receiver starts a new trace).
func TestTraceparentPassesThrough(t *testing.T) {
	r := newRig(t, "reject")
	for _, tc := range []struct{ sent, want string }{
		{callerTP, callerTP},
		{"00-" + callerTrace + "-0000000000000000-01", ""}, // an all-zero parent is invalid
		{"not a traceparent", ""},
	} {
		c, _, _ := r.clientWith(t, plannerToken, traceMeta{traceparent: tc.sent})
		rep, err := c.Offer(context.Background(), delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-1", Work: "run"}, msg("complete"), nil)
		if err != nil || rep.State() != a2a.TaskStateCompleted {
			t.Fatalf("offer: %v %v", rep, err)
		}
		select {
		case got := <-r.agent.traces:
			if got != tc.want {
				t.Errorf("sent traceparent %q: the upstream saw %q, want %q", tc.sent, got, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the upstream did not run")
		}
	}
}
