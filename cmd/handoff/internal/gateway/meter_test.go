package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
)

// TestGatewayMetricsA2A: issue 16's metrics and log fields for an A2A
// route: requests by method and outcome, statuses signed by state, the
// store's and the upstream's latency, and the A2A method, contextId and
// task state in the logs.
func TestGatewayMetricsA2A(t *testing.T) {
	r := newRigWith(t, "reject", false)
	c, _ := r.client(t, plannerToken)
	ctx := context.Background()
	if _, err := c.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-metrics", Work: "run the tests"}, msg("complete"), nil); err != nil {
		t.Fatal(err)
	}
	m := r.gw.metrics
	waitFor(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(m.requests.WithLabelValues("coder", "a2a", "message/send", "ok")) == 1 &&
			testutil.CollectAndCount(m.upstreamLatency) == 1 && strings.Contains(r.logs.String(), `msg="upstream task"`)
	})
	if n := testutil.ToFloat64(m.requests.WithLabelValues("coder", "a2a", "message/send", "ok")); n != 1 {
		t.Errorf("requests_total{method=message/send,outcome=ok} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(m.signed.WithLabelValues("accepted")) + testutil.ToFloat64(m.signed.WithLabelValues("completed")); n < 2 {
		t.Errorf("statuses_signed_total accepted+completed = %v, want 2", n)
	}
	if n := testutil.CollectAndCount(m.storeLatency); n == 0 {
		t.Error("no store latency observed")
	}
	if n := testutil.CollectAndCount(m.upstreamLatency); n != 1 {
		t.Errorf("upstream latency series: %d, want 1", n)
	}
	logs := r.logs.String()
	for _, want := range []string{"method=message/send", "context_id=ctx-metrics", "task_state=completed", `msg="upstream task"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs do not hold %s:\n%s", want, logs)
		}
	}
}

// TestGatewayMetricsMCP: on an mcp route a tool call's method is named,
// and a refused call (a tool error result) counts as an error outcome.
func TestGatewayMetricsMCP(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	hc, cs := r.connect(t, plannerToken, nil)
	ctx := context.Background()
	if _, err := cs.CallTool(ctx, call("ok")); err != nil { // no handoff: refused
		t.Fatal(err)
	}
	h, _ := r.offer(t, cs, "run the tests")
	if rep, err := hc.Call(ctx, cs, call("ok"), h); err != nil || rep.State != handoff.StateCompleted {
		t.Fatalf("%+v %v", rep, err)
	}
	m := r.gw.metrics
	// The caller has its answer before the gateway's handler returns
	// (the answer is flushed as an event): wait for the count.
	waitFor(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(m.requests.WithLabelValues("tools", "mcp", "tools/call", "ok")) == 1 && testutil.CollectAndCount(m.upstreamLatency) == 1
	})
	if n := testutil.ToFloat64(m.requests.WithLabelValues("tools", "mcp", "tools/call", "error")); n != 1 {
		t.Errorf("requests_total{tools/call,error} = %v, want 1 (the call with no handoff)", n)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues("tools", "mcp", "tools/call", "ok")); n != 1 {
		t.Errorf("requests_total{tools/call,ok} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues("tools", "mcp", "initialize", "ok")); n != 1 {
		t.Errorf("requests_total{initialize,ok} = %v, want 1", n)
	}
	if n := testutil.ToFloat64(m.signed.WithLabelValues("completed")); n != 1 {
		t.Errorf("statuses_signed_total{completed} = %v", n)
	}
	if n := testutil.CollectAndCount(m.upstreamLatency); n != 1 {
		t.Errorf("upstream latency series: %d, want 1", n)
	}
}

// TestJSONFailure: what the request metric reads as a failed answer.
func TestJSONFailure(t *testing.T) {
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"x"}}`, true},
		{`{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}`, true},
		{`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"\"isError\":true"}]}}`, false},
		{`{"jsonrpc":"2.0","id":1,"result":{"kind":"task","status":{"state":"failed"}}}`, false},
		{`{"jsonrpc":"2.0","id":1,"error":null,"result":{}}`, false},
		{`{"jsonrpc":"2.0","id":1,"result":{"content":[` + strings.Repeat(" ", maxSniffed), false},
		{`[{"error":{}}]`, false},
		{`not json`, false},
	} {
		if got := jsonFailure([]byte(tc.body)); got != tc.want {
			t.Errorf("jsonFailure(%.60q) = %v, want %v", tc.body, got, tc.want)
		}
	}
}
