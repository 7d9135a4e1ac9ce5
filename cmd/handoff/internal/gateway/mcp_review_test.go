package gateway

// A second adversarial review of the MCP route (mcp.go, mcp_forward.go,
// mcp_jsonrpc.go): each test names an attack or a broken peer and checks
// the safe behaviour. Helpers are mcp_hostile_test.go's.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// reviewPost posts body as hostilePost does, with hdr added (Add, so a
// header may be given twice).
func reviewPost(t *testing.T, url, body string, hdr http.Header) hostileResp {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+plannerToken)
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return hostileResp{resp.StatusCode, resp.Header, b}
}

// reviewSpecEvents is the data of each event a conforming EventSource
// parser dispatches (WHATWG HTML, "Interpreting an event stream"): a
// leading BOM dropped, lines ended by CRLF, LF or a CR alone, as the
// TypeScript SDK (eventsource-parser) and the Python SDK (httpx-sse)
// read a stream.
func reviewSpecEvents(b []byte) [][]byte {
	b = bytes.TrimPrefix(b, []byte("\xEF\xBB\xBF"))
	var out [][]byte
	var data []byte
	has := false
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			break // an unterminated last line is dropped by the spec
		}
		line := b[:i]
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			b = b[i+2:]
		} else {
			b = b[i+1:]
		}
		if len(line) == 0 {
			if has {
				out = append(out, bytes.TrimSuffix(data, []byte("\n")))
			}
			data, has = nil, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(name) == "data" {
			data = append(append(data, value...), '\n')
			has = true
		}
	}
	return out
}

// reviewFirstResponse is the first JSON-RPC response to id among the
// events a conforming parser reads from b, and its result.
func reviewFirstResponse(b []byte, id string) (map[string]json.RawMessage, bool) {
	for _, d := range reviewSpecEvents(b) {
		var m struct {
			ID     json.RawMessage            `json:"id"`
			Method string                     `json:"method"`
			Result map[string]json.RawMessage `json:"result"`
		}
		if json.Unmarshal(d, &m) == nil && m.Method == "" && string(m.ID) == id {
			return m.Result, true
		}
	}
	return nil, false
}

// The event stream format (and the TypeScript and Python MCP clients)
// ends a line at CRLF, LF or a CR alone and drops a leading BOM; the
// gateway reads a stream the same way and passes on each event as it
// read it, so the caller's parser sees the gateway's events:
//
//   - "cr-smuggled": `: x\rdata: {A}\r\r\n` then `data: {B}\n\n`, two
//     responses: the first, A, is the one both read, settled, with the
//     status (a reader that split on LF only would have settled B while
//     the caller acted on A);
//   - "cr-only": a server whose lines end with CR: settled;
//   - "bom": a stream that starts with a BOM: settled.
func TestMCPReviewSSELineEndsReadAsClientsRead(t *testing.T) {
	failed := `{"content":[{"type":"text","text":"real: 3 tests failed"}],"isError":true}`
	forged := `{"content":[{"type":"text","text":"FORGED: all tests passed"}]}`
	for name, tc := range map[string]struct {
		stream func(id json.RawMessage) string
		want   store.State
	}{
		"cr-smuggled": {func(id json.RawMessage) string {
			return ": x\rdata: " + hostileResult(id, forged) + "\r\r\n" + "data: " + hostileResult(id, failed) + "\n\n"
		}, store.Completed},
		"cr-only": {func(id json.RawMessage) string {
			return "event: message\rdata: " + hostileResult(id, hostileOK) + "\r\r"
		}, store.Completed},
		"bom": {func(id json.RawMessage) string {
			return "\xEF\xBB\xBFdata: " + hostileResult(id, hostileOK) + "\n\n"
		}, store.Completed},
	} {
		t.Run(name, func(t *testing.T) {
			u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, tc.stream(id))
			}}
			r := newHostileRig(t, u, "without_handoff: reject, failures_effect_free: true")
			v, hop := hostileOffer(t, r.dl, "s1")
			resp := hostilePost(t, r.url, "s1", hostileCallBody("1", "ok", v, ""))
			r.gw.Drain(t.Context())
			res, ok := reviewFirstResponse(resp.body, "1")
			var meta map[string]json.RawMessage
			if ok {
				json.Unmarshal(res["_meta"], &meta)
			}
			rec := hostileRecord(t, r.gw, hop)
			// What the caller reads is what the gateway settled: its status
			// is on the first response (the "FORGED" one, in cr-smuggled).
			if !ok || meta[mcphandoff.Key] == nil || rec.State != tc.want {
				t.Fatalf("the caller's SSE parser reads as the call's response %s (found %v; no gateway status: %v); record %s (flagged %v), want %s; stream %q",
					res["content"], ok, meta[mcphandoff.Key] == nil, rec.State, hostileFlagged(t, r.gw, hop), tc.want, resp.body)
			}
		})
	}
}

// A caller whose HTTP client asks for gzip (Node's fetch and httpx do)
// in front of an upstream that compresses JSON: the caller's
// Accept-Encoding is not forwarded (the gateway reads the answer; Go's
// client asks for gzip itself and decompresses), so the hop completes
// and the caller gets the result with the status.
func TestMCPReviewGzipAnswerSettles(t *testing.T) {
	u := &hostileUpstream{answer: func(w http.ResponseWriter, req *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(req.Header.Get("Accept-Encoding"), "gzip") {
			io.WriteString(w, hostileResult(id, hostileOK))
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, hostileResult(id, hostileOK))
		zw.Close()
	}}
	r := newHostileRig(t, u, "without_handoff: reject")
	v, hop := hostileOffer(t, r.dl, "s1")
	resp := hostilePost(t, r.url, "s1", hostileCallBody("1", "ok", v, ""), "Accept-Encoding", "gzip")
	r.gw.Drain(t.Context())
	body := resp.body
	if resp.header.Get("Content-Encoding") == "gzip" {
		if zr, err := gzip.NewReader(bytes.NewReader(body)); err == nil {
			body, _ = io.ReadAll(zr)
		}
	}
	rec := hostileRecord(t, r.gw, hop)
	st, _ := hostileStatus(t, body)
	if rec.State != store.Completed || st == nil || st.State != handoff.StateCompleted {
		t.Fatalf("the upstream completed the call; record %s (flagged %v), caller's status %+v; body %.300s",
			rec.State, hostileFlagged(t, r.gw, hop), st, body)
	}
}

// With an Idempotency-Key header, Go's client takes a POST for safe to
// send again when a reused connection drops after the request went: the
// caller's key is not forwarded, so a taken hop's call reaches the
// upstream once (decision 81) and the cut is an unknown outcome.
func TestMCPReviewIdempotencyKeyNotForwarded(t *testing.T) {
	u := &hostileUpstream{}
	u.answer = func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		u.mu.Lock()
		n := u.calls
		u.mu.Unlock()
		if n == 1 {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, hostileResult(id, hostileOK))
	}
	r := newHostileRig(t, u, "without_handoff: reject")
	// A passed message leaves a keep-alive connection to the upstream in
	// the pool the forwarded call then reuses.
	hostilePost(t, r.url, "s1", `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	time.Sleep(100 * time.Millisecond)
	v, hop := hostileOffer(t, r.dl, "s1")
	resp := hostilePost(t, r.url, "s1", hostileCallBody("1", "ok", v, ""), "Idempotency-Key", "k-1")
	r.gw.Drain(t.Context())
	u.mu.Lock()
	calls := u.calls
	u.mu.Unlock()
	if calls != 1 {
		rec := hostileRecord(t, r.gw, hop)
		t.Fatalf("one taken hop's tools/call reached the upstream %d times (record %s); caller got HTTP %d %.200s", calls, rec.State, resp.status, resp.body)
	}
}

// Two Mcp-Session-Id values: an upstream that joins repeated headers or
// takes the last would read another session than the one the offer was
// checked for. Refused, as decision 83 refuses bodies read two ways.
func TestMCPReviewDuplicateSessionHeaderRefused(t *testing.T) {
	u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, hostileResult(id, hostileOK))
	}}
	r := newHostileRig(t, u, "without_handoff: reject")
	v, _ := hostileOffer(t, r.dl, "s1")
	reviewPost(t, r.url, hostileCallBody("1", "ok", v, ""), http.Header{"Mcp-Session-Id": {"s1", "s2"}})
	for _, s := range u.seen() {
		if strings.Contains(s.body, `"tools/call"`) {
			if got := s.header.Values("Mcp-Session-Id"); len(got) != 1 || got[0] != "s1" {
				t.Fatalf("the offer was checked for dialog s1; the upstream ran the call with Mcp-Session-Id %q", got)
			}
		}
	}
}

// The forwarded tools/call carries no forwarding header from the caller
// (X-Forwarded-*, Forwarded), as a passed request does not: only a proxy
// the upstream trusts may write them.
func TestMCPReviewForwardingHeadersNotForwarded(t *testing.T) {
	u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, hostileResult(id, hostileOK))
	}}
	r := newHostileRig(t, u, "without_handoff: reject")
	v, _ := hostileOffer(t, r.dl, "s1")
	hostilePost(t, r.url, "s1", hostileCallBody("1", "ok", v, ""),
		"X-Forwarded-For", "10.0.0.1", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "admin.internal")
	for _, s := range u.seen() {
		if strings.Contains(s.body, `"tools/call"`) {
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host"} {
				if s.header.Get(h) != "" {
					t.Errorf("the forwarded call carries the caller's %s: %q", h, s.header.Get(h))
				}
			}
		}
	}
}

// A caller that posts a tools/call with a Handoff and then stops reading
// (keeping its connection open) while the upstream sends a burst of
// progress events: each write to the caller has a deadline, so the
// gateway goes on reading the upstream and records the outcome within
// seconds (decision 81: a forwarded call is read to its end).
func TestMCPReviewStalledCallerDoesNotHoldTheOutcome(t *testing.T) {
	pad := strings.Repeat("p", 64<<10)
	u := &hostileUpstream{answer: func(w http.ResponseWriter, req *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for i := 0; i < 40; i++ {
			if _, err := fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":%d,\"message\":%q}}\n\n", i, pad); err != nil {
				return
			}
		}
		hostileSSE(w, hostileResult(id, hostileOK))
	}}
	r := newHostileRig(t, u, "without_handoff: reject")
	v, hop := hostileOffer(t, r.dl, "s1")
	pu, err := url.Parse(r.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	body := hostileCallBody("1", "ok", v, "")
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Authorization: Bearer %s\r\nMcp-Session-Id: s1\r\nContent-Length: %d\r\n\r\n%s", pu.Path, pu.Host, plannerToken, len(body), body)
	// Read the status line only, then stall.
	bufio.NewReaderSize(conn, 16).ReadString('\n')
	recorded := waitFor(t, 8*time.Second, func() bool { return hostileRecord(t, r.gw, hop).State != store.Accepted })
	if !recorded {
		t.Fatalf("the upstream answered the call, but with the caller not reading the hop is still %s after 8 s (the gateway blocked writing to the caller)",
			hostileRecord(t, r.gw, hop).State)
	}
}

// TestMCPGatewayCallTimeout: a tools/call the upstream does not answer
// within the route's call_timeout is canceled upstream; the caller gets
// a tool error result carrying the recorded "accepted", and the hop
// stays accepted, flagged unknown outcome (the tool may have done its
// work: draft "Knowing the Outcome").
func TestMCPGatewayCallTimeout(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject, call_timeout: 1s")
	hc, cs := r.connect(t, plannerToken, nil)
	ctx := context.Background()
	h, hop := r.offer(t, cs, "run the long tests")
	start := time.Now()
	rep, err := hc.Call(ctx, cs, call("block"), h)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("the call took %s with a 1s call_timeout", took)
	}
	if rep.Result == nil || !rep.Result.IsError || !strings.Contains(resultText(rep.Result), "call_timeout (1s)") {
		t.Fatalf("result %+v", rep.Result)
	}
	if rep.State != handoff.StateAccepted {
		t.Errorf("the result carries %q, want the recorded accepted", rep.State)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.tools.stopped.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the upstream's tool was never canceled:\n%s", r.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.settled(t)
	rec, err := r.gw.routes[0].delegate().Record(ctx, "https://planner.example", hop)
	if err != nil || rec.State != store.Accepted {
		t.Fatalf("record %+v %v", rec, err)
	}
	r.flagged(t, hop, store.FlagUnknownOutcome)
}
