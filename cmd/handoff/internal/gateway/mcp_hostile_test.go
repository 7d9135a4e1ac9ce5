package gateway

// The MCP route (mcp.go) against a hostile caller and a hostile or broken
// upstream: each test names the attack and checks the safe behaviour.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// ---------------------------------------------------------------- helpers

// hostileRig is a gateway MCP route in front of an arbitrary upstream handler
// (served at /mcp), for hostile upstreams.
type hostileRig struct {
	gw      *Server
	url     string // the route, front + "/tools"
	planner *handoff.Signer
	dl      *delegator.Delegator
	logs    *lockedWriter
}

func newHostileRig(t *testing.T, up http.Handler, keys string) *hostileRig {
	t.Helper()
	ctx := context.Background()
	mux := http.NewServeMux()
	mux.Handle("/mcp", up)
	mux.Handle("/mcp/", up)
	srv := httptest.NewServer(mux)
	r := &hostileRig{logs: &lockedWriter{w: &bytes.Buffer{}}}
	tk := trust.New()
	r.planner = newSigner(t, tk, "https://planner.example")
	tester := newSigner(t, tk, "https://tester.example")
	c, err := Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://tester.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes:
  - {name: tools, protocol: mcp, path: /tools/, upstream: %q, %s}
`, backdatedSQLite(t), srv.URL+"/mcp", keys)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r.gw, err = New(ctx, c, &Resources{Signer: tester, Keys: tk, Tokens: map[string]string{plannerToken: "https://planner.example"}},
		slog.New(slog.NewTextHandler(r.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(r.gw.Handler())
	t.Cleanup(func() {
		// Bounded: a stuck call must not hang the test binary.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		r.gw.Drain(ctx)
		r.gw.Close()
		front.CloseClientConnections()
		srv.CloseClientConnections()
		front.Close()
		srv.Close()
	})
	r.url = front.URL + "/tools"
	if r.dl, err = delegator.New(delegator.Config{Me: "https://planner.example", Signer: r.planner, Keys: tk,
		Store: store.NewMemory(time.Now())}); err != nil {
		t.Fatal(err)
	}
	return r
}

// hostileOffer is the planner's offer for dialog, as the JSON _meta value.
func hostileOffer(t *testing.T, dl *delegator.Delegator, dialog string) (json.RawMessage, string) {
	t.Helper()
	h, hop, err := dl.Offer(context.Background(), delegator.Offer{Aud: "https://tester.example", Dialog: dialog, Work: "run the tests"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := mcphandoff.HandoffValue(h, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b, hop.Hop
}

// hostileCallBody is a tools/call with id and mode, the handoff v under _meta
// (none when v is nil), and extra members appended to the message.
func hostileCallBody(id, mode string, v json.RawMessage, extra string) string {
	meta := ""
	if v != nil {
		meta = fmt.Sprintf(`,"_meta":{%q:%s}`, mcphandoff.Key, v)
	}
	idm := ""
	if id != "" {
		idm = `"id":` + id + `,`
	}
	return `{"jsonrpc":"2.0",` + idm + `"method":"tools/call","params":{"name":"run-tests","arguments":{"mode":"` + mode + `"}` + meta + `}` + extra + `}`
}

type hostileResp struct {
	status int
	header http.Header
	body   []byte
}

// hostilePost posts body to url as an MCP client would, on session (none:
// ""), with the planner's token and more headers (name, value pairs).
func hostilePost(t *testing.T, url, session, body string, hdr ...string) hostileResp {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+plannerToken)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return hostileResp{resp.StatusCode, resp.Header, b}
}

// hostileMessages are the JSON-RPC messages of a response: the JSON body, or
// the data of each server-sent event.
func hostileMessages(b []byte) []rpcMessage {
	var out []rpcMessage
	var m rpcMessage
	if json.Unmarshal(b, &m) == nil {
		return []rpcMessage{m}
	}
	sr := newSSEReader(bytes.NewReader(b))
	for {
		ev, err := sr.next()
		if len(ev.data) > 0 && json.Unmarshal(ev.data, &m) == nil {
			out = append(out, m)
		}
		if err != nil {
			return out
		}
	}
}

// hostileStatus is the status in the last response's result _meta, and the
// result.
func hostileStatus(t *testing.T, b []byte) (*handoff.Status, map[string]json.RawMessage) {
	t.Helper()
	ms := hostileMessages(b)
	if len(ms) == 0 {
		t.Fatalf("no JSON-RPC message in %q", b)
	}
	last := ms[len(ms)-1]
	var res struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	var all map[string]json.RawMessage
	json.Unmarshal(last.Result, &res)
	json.Unmarshal(last.Result, &all)
	var s string
	if json.Unmarshal(res.Meta[mcphandoff.Key], &s) != nil {
		return nil, all
	}
	_, st, err := handoff.UnsafeDecode(handoff.ParseElement([]byte(s)))
	if err != nil {
		t.Fatalf("the status does not decode: %v", err)
	}
	return st, all
}

func hostileRecord(t *testing.T, gw *Server, hop string) *store.Record {
	t.Helper()
	rec, err := gw.routes[0].delegate().Record(context.Background(), "https://planner.example", hop)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func hostileFlagged(t *testing.T, gw *Server, hop string) bool {
	t.Helper()
	flags, err := gw.store.Flags(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flags {
		if f.Hop == hop && f.Kind == store.FlagUnknownOutcome {
			return true
		}
	}
	return false
}

// hostileSession opens a go-sdk session through the gateway (rig of
// mcp_test.go) and returns its id and protocol version.
func hostileSession(t *testing.T, r *mcpRig) (*mcphandoff.Client, *mcp.ClientSession, string) {
	t.Helper()
	hc, cs := r.connect(t, plannerToken, nil)
	return hc, cs, cs.InitializeResult().ProtocolVersion
}

// sseJSON writes one server-sent event holding v.
func hostileSSE(w http.ResponseWriter, v string) {
	fmt.Fprintf(w, "event: message\ndata: %s\n\n", v)
	w.(http.Flusher).Flush()
}

// hostileUpstream is a scripted MCP server: it records every request, and
// answers a tools/call with answer (notifications: 202).
type hostileUpstream struct {
	mu     sync.Mutex
	reqs   []hostileSeen
	calls  int
	answer func(w http.ResponseWriter, req *http.Request, id json.RawMessage)
}

type hostileSeen struct {
	method, url string
	header      http.Header
	body        string
}

func (u *hostileUpstream) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var m rpcMessage
	json.Unmarshal(b, &m)
	u.mu.Lock()
	u.reqs = append(u.reqs, hostileSeen{req.Method, req.URL.String(), req.Header.Clone(), string(b)})
	if m.Method == "tools/call" {
		u.calls++
	}
	u.mu.Unlock()
	if m.Method == "tools/call" && u.answer != nil {
		u.answer(w, req, m.ID)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func (u *hostileUpstream) seen() []hostileSeen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]hostileSeen(nil), u.reqs...)
}

func hostileResult(id json.RawMessage, result string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
}

const hostileOK = `{"content":[{"type":"text","text":"all tests passed"}]}`

// ---------------------- hostile caller: bodies two readers read two ways

// A member whose name differs from "method" only in case: a
// case-insensitive reader (encoding/json, last one wins) sees "ping",
// the go-sdk upstream (case-sensitive) a tools/call. The gateway reads
// strictly and refuses the body (decision 83); the tool never runs.
func TestMCPHostileCaseVariantMethodRefused(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	resp := hostilePost(t, r.url, cs.ID(), hostileCallBody("41", "ok", nil, `,"METHOD":"ping"`), "Mcp-Protocol-Version", proto)
	t.Logf("HTTP %d: %.300s", resp.status, resp.body)
	if n := r.tools.runs.Load(); n != 0 {
		t.Fatalf("a tools/call with no handoff ran the tool %d time(s) on a without_handoff: reject route (\"METHOD\" hid the method from the gateway)", n)
	}
}

// The same, carrying a real handoff: refused, never run unchecked.
func TestMCPHostileCaseVariantMethodWithHandoffRefused(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	v, hop := hostileOffer(t, r.dl, cs.ID())
	hostilePost(t, r.url, cs.ID(), hostileCallBody("42", "ok", v, `,"Method":"ping"`), "Mcp-Protocol-Version", proto)
	if n := r.tools.runs.Load(); n != 0 {
		rec, err := r.gw.routes[0].delegate().Record(context.Background(), "https://planner.example", hop)
		t.Fatalf("the tool ran %d time(s) for a hop the gateway never checked (record %+v, %v)", n, rec, err)
	}
}

// A member a case-insensitive reader takes for "error" ("Error": true):
// refused, not passed on unexamined.
func TestMCPHostileUndecodableMemberRefused(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	resp := hostilePost(t, r.url, cs.ID(), hostileCallBody("43", "ok", nil, `,"Error":true`), "Mcp-Protocol-Version", proto)
	t.Logf("HTTP %d: %.300s", resp.status, resp.body)
	if n := r.tools.runs.Load(); n != 0 {
		t.Fatalf("a tools/call with no handoff ran the tool %d time(s) on a reject route (a member the gateway could not decode)", n)
	}
}

// A JSON-RPC batch whose tools/call is written "tools\/call" (the go-sdk
// takes batches on a request without Mcp-Protocol-Version, 2025-03-26):
// the gateway reads each member, finds the call and refuses the batch.
func TestMCPHostileEscapedBatchCallRefused(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, _ := hostileSession(t, r)
	body := `[` + strings.Replace(hostileCallBody("44", "ok", nil, ""), `"tools/call"`, `"tools\/call"`, 1) + `]`
	resp := hostilePost(t, r.url, cs.ID(), body)
	t.Logf("HTTP %d: %.300s", resp.status, resp.body)
	if n := r.tools.runs.Load(); n != 0 {
		t.Fatalf("a batched tools/call (escaped method name) ran the tool %d time(s) on a reject route", n)
	}
}

// The same with the handoff key's name escaped, on a route that passes
// calls without a handoff: the Handoff never reaches the upstream.
func TestMCPHostileEscapedKeyInBatchRefused(t *testing.T) {
	u := &hostileUpstream{}
	r := newHostileRig(t, u, "without_handoff: pass")
	v, _ := hostileOffer(t, r.dl, "s1")
	call := strings.Replace(hostileCallBody("45", "ok", v, ""), mcphandoff.Key, strings.Replace(mcphandoff.Key, "/", `\/`, 1), 1)
	hostilePost(t, r.url, "s1", "["+call+"]")
	for _, s := range u.seen() {
		var batch []struct {
			Params struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			} `json:"params"`
		}
		if json.Unmarshal([]byte(s.body), &batch) == nil && len(batch) > 0 && batch[0].Params.Meta[mcphandoff.Key] != nil {
			t.Fatalf("the upstream received a Handoff in a batch, unchecked: %.200s", s.body)
		}
	}
}

// ------------------------- hostile caller: id and cancel equivalence

// A plain (unsigned) notifications/cancelled naming the forwarded call's
// id written differently (7.0 for 7, which the go-sdk reads as 7): ids
// are compared by value, so it is dropped, not passed on. Only a
// verified cancel may stop taken work (decision 81).
func TestMCPHostilePlainCancelEquivalentIDDropped(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	v, hop := hostileOffer(t, r.dl, cs.ID())
	done := make(chan hostileResp, 1)
	go func() {
		done <- hostilePost(t, r.url, cs.ID(), hostileCallBody("7", "block", v, ""), "Mcp-Protocol-Version", proto)
	}()
	<-r.tools.started
	hostilePost(t, r.url, cs.ID(), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7.0}}`, "Mcp-Protocol-Version", proto)
	time.Sleep(300 * time.Millisecond)
	stopped := r.tools.stopped.Load()
	close(r.tools.release)
	<-done
	r.settled(t)
	if stopped != 0 {
		rec := hostileRecord(t, r.gw, hop)
		t.Fatalf("an unsigned cancel (requestId 7.0) stopped the hop's taken work; record canceled=%v state=%s", rec.Canceled, rec.State)
	}
}

// A tools/call whose id is written in another form of the same value (a
// string with an escape; a number with a zero fraction part): the
// upstream answers with its own form of the id, which the gateway
// recognises by value; the hop completes with its signed status.
func TestMCPHostileEquivalentIDsSettle(t *testing.T) {
	for _, id := range []string{`"\u0061bc"`, `8.0`} {
		t.Run(id, func(t *testing.T) {
			r := newMCPRig(t, "without_handoff: reject")
			_, cs, proto := hostileSession(t, r)
			v, hop := hostileOffer(t, r.dl, cs.ID())
			resp := hostilePost(t, r.url, cs.ID(), hostileCallBody(id, "ok", v, ""), "Mcp-Protocol-Version", proto)
			r.settled(t)
			st, _ := hostileStatus(t, resp.body)
			rec := hostileRecord(t, r.gw, hop)
			if r.tools.runs.Load() != 1 || st == nil || st.State != handoff.StateCompleted || rec.State != store.Completed {
				t.Fatalf("id %s: tool runs %d, status %+v, record %s (flagged %v); body %.300s", id, r.tools.runs.Load(), st, rec.State,
					hostileFlagged(t, r.gw, hop), resp.body)
			}
		})
	}
}

// A tools/call with no id (a notification) carrying a Handoff, or none on
// a reject route: refused; the tool never runs without the checks.
func TestMCPHostileToolsCallWithoutID(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	v, _ := hostileOffer(t, r.dl, cs.ID())
	hostilePost(t, r.url, cs.ID(), hostileCallBody("", "ok", nil, ""), "Mcp-Protocol-Version", proto)
	hostilePost(t, r.url, cs.ID(), hostileCallBody("", "ok", v, ""), "Mcp-Protocol-Version", proto)
	time.Sleep(200 * time.Millisecond)
	if n := r.tools.runs.Load(); n != 0 {
		t.Fatalf("a tools/call notification ran the tool %d time(s) unchecked", n)
	}
}

// --------------------------------------- hostile caller: properties held

// Malformed handoff values (number, null, array, bad base64url, an
// escaped key name with a bogus Handoff) are refused and the tool never
// runs; a CBOR Handoff (base64url) is taken and completes.
func TestMCPHostileMetaValues(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	for i, v := range []string{`5`, `null`, `[]`, `"!!notbase64"`, `""`, `{}`, `{"offer":5}`} {
		resp := hostilePost(t, r.url, cs.ID(), hostileCallBody(fmt.Sprint(100+i), "ok", json.RawMessage(v), ""), "Mcp-Protocol-Version", proto)
		ms := hostileMessages(resp.body)
		if len(ms) == 0 || (ms[0].Error == nil && !bytes.Contains(ms[0].Result, []byte(`"isError":true`))) {
			t.Errorf("value %s: not refused: HTTP %d %.200s", v, resp.status, resp.body)
		}
	}
	esc := strings.Replace(hostileCallBody("120", "ok", json.RawMessage(`{"offer":"a.b.c"}`), ""), mcphandoff.Key, strings.Replace(mcphandoff.Key, "/", `\/`, 1), 1)
	resp := hostilePost(t, r.url, cs.ID(), esc, "Mcp-Protocol-Version", proto)
	if !bytes.Contains(resp.body, []byte("rejected")) {
		t.Errorf("escaped key name: %.200s", resp.body)
	}
	if n := r.tools.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times for malformed handoffs", n)
	}
	h, _, err := r.dl.Offer(context.Background(), delegator.Offer{Aud: "https://tester.example", Dialog: cs.ID(), Work: "cbor"})
	if err != nil {
		t.Fatal(err)
	}
	cv, err := mcphandoff.HandoffValue(h, handoff.CBOR)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := json.Marshal(cv)
	resp = hostilePost(t, r.url, cs.ID(), hostileCallBody("130", "ok", cb, ""), "Mcp-Protocol-Version", proto)
	if st, _ := hostileStatus(t, resp.body); st == nil || st.State != handoff.StateCompleted {
		t.Fatalf("CBOR handoff: %+v %.300s", st, resp.body)
	}
}

// A retransmission while the first call runs is answered here (not
// forwarded), and the tool runs once; afterwards the maps are empty.
func TestMCPHostileRetransmissionWhileRunning(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	v, _ := hostileOffer(t, r.dl, cs.ID())
	done := make(chan hostileResp, 1)
	go func() {
		done <- hostilePost(t, r.url, cs.ID(), hostileCallBody("1", "block", v, ""), "Mcp-Protocol-Version", proto)
	}()
	<-r.tools.started
	again := hostilePost(t, r.url, cs.ID(), hostileCallBody("2", "block", v, ""), "Mcp-Protocol-Version", proto)
	if st, _ := hostileStatus(t, again.body); st == nil || st.State != handoff.StateAccepted || !bytes.Contains(again.body, []byte("running")) {
		t.Errorf("retransmission while running: %+v %.300s", st, again.body)
	}
	close(r.tools.release)
	first := <-done
	if st, _ := hostileStatus(t, first.body); st == nil || st.State != handoff.StateCompleted {
		t.Errorf("first call: %+v %.300s", st, first.body)
	}
	r.settled(t)
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
	m := r.gw.routes[0].mcp
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.calls) != 0 || len(m.byID) != 0 || m.active != 0 {
		t.Fatalf("left behind: calls %d byID %d active %d", len(m.calls), len(m.byID), m.active)
	}
}

// ------------------------------------------------ hostile upstream

// On a failures_effect_free route, only the upstream's own failure (a
// tool error result, a JSON-RPC error) is "failed" with no effect (SPEC
// section 6; docs/gateway.md's table and decision 81: HTTP 5xx, a broken
// stream, no response are an unknown outcome, flagged). An upstream that
// answers the tools/call POST with 500/502, with 202 (it took the call),
// or cuts the connection after reading it, did not show that nothing ran:
// the hop stays accepted, flagged.
func TestMCPHostileEffectFreeRouteTransportFailureUnknown(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter, req *http.Request, id json.RawMessage){
		"http-500": func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) { w.WriteHeader(500) },
		"http-502": func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) { w.WriteHeader(502) },
		"http-202": func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) { w.WriteHeader(202) },
		"cut-after-request": func(w http.ResponseWriter, _ *http.Request, _ json.RawMessage) {
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		},
	}
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			u := &hostileUpstream{answer: answer}
			r := newHostileRig(t, u, "failures_effect_free: true")
			v, hop := hostileOffer(t, r.dl, "s1")
			resp := hostilePost(t, r.url, "s1", hostileCallBody("1", "ok", v, ""))
			r.gw.Drain(context.Background())
			rec := hostileRecord(t, r.gw, hop)
			if rec.State != store.Accepted || !hostileFlagged(t, r.gw, hop) {
				t.Fatalf("the upstream may have run the call (%s) and the gateway recorded %s (a signed %q with no refs), not an unknown outcome; caller got HTTP %d %.200s",
					name, rec.State, rec.State, resp.status, resp.body)
			}
		})
	}
}

// An upstream that sends the call's response on the POST's stream but
// keeps the stream open (MCP says SHOULD close, not MUST): the caller
// gets its response, the gateway stops reading there, and Drain
// returns.
func TestMCPHostileStreamOpenAfterResponseDrains(t *testing.T) {
	hold := make(chan struct{})
	u := &hostileUpstream{answer: func(w http.ResponseWriter, req *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		hostileSSE(w, hostileResult(id, hostileOK))
		select {
		case <-hold:
		case <-req.Context().Done():
		}
	}}
	r := newHostileRig(t, u, "without_handoff: reject")
	defer close(hold)
	v, hop := hostileOffer(t, r.dl, "s1")
	got := make(chan *handoff.Status, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(hostileCallBody("1", "ok", v, "")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+plannerToken)
		req.Header.Set("Mcp-Session-Id", "s1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- nil
			return
		}
		defer resp.Body.Close()
		ev, _ := newSSEReader(resp.Body).next()
		var m rpcMessage
		json.Unmarshal(ev.data, &m)
		var res struct {
			Meta map[string]string `json:"_meta"`
		}
		json.Unmarshal(m.Result, &res)
		_, st, _ := handoff.UnsafeDecode(handoff.ParseElement([]byte(res.Meta[mcphandoff.Key])))
		got <- st
	}()
	select {
	case st := <-got:
		if st == nil || st.State != handoff.StateCompleted {
			t.Fatalf("the caller's response: %+v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller never got its response")
	}
	if rec := hostileRecord(t, r.gw, hop); rec.State != store.Completed {
		t.Fatalf("record %s", rec.State)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := r.gw.Drain(ctx); err != nil {
		m := r.gw.routes[0].mcp
		m.mu.Lock()
		n, a := len(m.calls), m.active
		m.mu.Unlock()
		t.Fatalf("Drain after the call's outcome was recorded: %v (calls %d, active %d: the gateway still reads the answered stream)", err, n, a)
	}
}

// The gateway's own cancel for a forwarded call goes to the upstream
// endpoint the call went to (the route's path below and the query).
func TestMCPHostileCancelGoesWhereTheCallWent(t *testing.T) {
	started := make(chan struct{}, 1)
	stop := make(chan struct{})
	u := &hostileUpstream{answer: func(w http.ResponseWriter, req *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		started <- struct{}{}
		select {
		case <-stop:
		case <-time.After(3 * time.Second):
		}
		hostileSSE(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"error":{"code":-32800,"message":"canceled"}}`)
	}}
	r := newHostileRig(t, u, "without_handoff: reject")
	defer close(stop)
	v, hop := hostileOffer(t, r.dl, "s1")
	target := r.url + "/tenant-a?workspace=7"
	done := make(chan struct{})
	go func() { hostilePost(t, target, "s1", hostileCallBody("1", "ok", v, "")); close(done) }()
	<-started
	st, _, err := r.dl.Cancel(context.Background(), hop)
	if err != nil {
		t.Fatal(err)
	}
	hostilePost(t, target, "s1", fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"_meta":{%q:%q}}}`,
		mcphandoff.Key, st.Text()))
	var call, cancel string
	waitFor(t, 3*time.Second, func() bool {
		call, cancel = "", ""
		for _, s := range u.seen() {
			switch {
			case strings.Contains(s.body, `"tools/call"`):
				call = s.url
			case strings.Contains(s.body, `"notifications/cancelled"`):
				cancel = s.url
			}
		}
		return cancel != ""
	})
	if cancel == "" || cancel != call {
		t.Fatalf("the call went to %q, the gateway's cancel to %q", call, cancel)
	}
}

// An upstream that writes a status under the handoff key in its result
// (plainly, or with the key's name escaped, or in a duplicate _meta)
// cannot make the caller see it: the result carries the gateway's own
// status only, signed by the gateway.
func TestMCPHostileUpstreamCannotForgeStatus(t *testing.T) {
	fake := handoff.ParseElement([]byte("eyJhbGciOiJFUzI1NiJ9.eyJmb3JnZWQiOnRydWV9.Zm9yZ2Vk"))
	esc := strings.Replace(mcphandoff.Key, "/", `\/`, 1)
	for name, result := range map[string]string{
		"plain":     fmt.Sprintf(`{"content":[],"isError":true,"_meta":{%q:%q}}`, mcphandoff.Key, fake.Text()),
		"escaped":   fmt.Sprintf(`{"content":[],"isError":true,"_meta":{"%s":%q}}`, esc, fake.Text()),
		"duplicate": fmt.Sprintf(`{"content":[],"isError":true,"_meta":{},"_meta":{%q:%q}}`, mcphandoff.Key, fake.Text()),
	} {
		t.Run(name, func(t *testing.T) {
			u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, hostileResult(id, result))
			}}
			r := newHostileRig(t, u, "without_handoff: reject")
			v, _ := hostileOffer(t, r.dl, "s1")
			resp := hostilePost(t, r.url, "s1", hostileCallBody("1", "ok", v, ""))
			if bytes.Contains(resp.body, []byte(fake.Text())) {
				t.Fatalf("the upstream's forged status reached the caller: %.400s", resp.body)
			}
			if st, _ := hostileStatus(t, resp.body); st == nil || st.State == handoff.StateCompleted {
				t.Fatalf("status %+v for an isError result", st)
			}
		})
	}
}

// Server-sent events as any server may write them: data over several
// lines, CRLF line ends, comments and a last event with no blank line
// after it. The response is found and carries the status.
func TestMCPHostileSSEForms(t *testing.T) {
	forms := map[string]func(id json.RawMessage) string{
		"multi-line data": func(id json.RawMessage) string {
			return "id: e1\ndata: {\"jsonrpc\":\"2.0\",\ndata: \"id\":" + string(id) + ",\ndata: \"result\":" + hostileOK + "}\n\n"
		},
		"crlf": func(id json.RawMessage) string {
			return ": hi\r\n\r\nevent: message\r\ndata: " + hostileResult(id, hostileOK) + "\r\n\r\n"
		},
		"no trailing blank line": func(id json.RawMessage) string {
			return "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\ndata:" + hostileResult(id, hostileOK)
		},
		"request with the same id first": func(id json.RawMessage) string {
			return "data: {\"jsonrpc\":\"2.0\",\"id\":" + string(id) + ",\"method\":\"sampling/createMessage\",\"params\":{}}\n\ndata: " + hostileResult(id, hostileOK) + "\n\n"
		},
	}
	for name, form := range forms {
		t.Run(name, func(t *testing.T) {
			u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, form(id))
			}}
			r := newHostileRig(t, u, "without_handoff: reject")
			v, hop := hostileOffer(t, r.dl, "s1")
			resp := hostilePost(t, r.url, "s1", hostileCallBody("1", "ok", v, ""))
			r.gw.Drain(context.Background())
			st, _ := hostileStatus(t, resp.body)
			if st == nil || st.State != handoff.StateCompleted || hostileRecord(t, r.gw, hop).State != store.Completed {
				t.Fatalf("status %+v; body %q", st, resp.body)
			}
		})
	}
}

// An upstream that answers with another id, or a result that is not an
// object: the outcome is unknown, flagged, and the caller's answer has
// the caller's id with "accepted".
func TestMCPHostileUpstreamWrongAnswer(t *testing.T) {
	for name, answer := range map[string]func(id json.RawMessage) string{
		"other id":   func(json.RawMessage) string { return hostileResult(json.RawMessage("999"), hostileOK) },
		"array":      func(id json.RawMessage) string { return hostileResult(id, `[1]`) },
		"null":       func(id json.RawMessage) string { return hostileResult(id, `null`) },
		"not json":   func(json.RawMessage) string { return `{"jsonrpc"` },
		"empty body": func(json.RawMessage) string { return `` },
	} {
		t.Run(name, func(t *testing.T) {
			u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, answer(id))
			}}
			r := newHostileRig(t, u, "failures_effect_free: true")
			v, hop := hostileOffer(t, r.dl, "s1")
			resp := hostilePost(t, r.url, "s1", hostileCallBody("77", "ok", v, ""))
			r.gw.Drain(context.Background())
			ms := hostileMessages(resp.body)
			st, _ := hostileStatus(t, resp.body)
			if len(ms) != 1 || string(ms[0].ID) != "77" || st == nil || st.State != handoff.StateAccepted ||
				hostileRecord(t, r.gw, hop).State != store.Accepted || !hostileFlagged(t, r.gw, hop) {
				t.Fatalf("%s: status %+v; body %.300s", name, st, resp.body)
			}
		})
	}
}

// The caller's Authorization never reaches the upstream, whatever the
// Connection header lists and whichever way the request goes (forwarded
// call, passed POST, GET, DELETE, the gateway's own cancel).
func TestMCPHostileAuthorizationNeverForwarded(t *testing.T) {
	u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, hostileResult(id, hostileOK))
	}}
	r := newHostileRig(t, u, "without_handoff: pass")
	v, _ := hostileOffer(t, r.dl, "s1")
	for _, conn := range []string{"", "Authorization", "keep-alive, Mcp-Session-Id"} {
		hostilePost(t, r.url, "s1", hostileCallBody("1", "ok", v, ""), "Connection", conn, "Proxy-Authorization", "Basic eA==")
		hostilePost(t, r.url, "s1", hostileCallBody("2", "ok", nil, ""), "Connection", conn)
		hostilePost(t, r.url, "s1", `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, "Connection", conn)
		for _, m := range []string{http.MethodGet, http.MethodDelete} {
			req, _ := http.NewRequest(m, r.url, nil)
			req.Header.Set("Authorization", "Bearer "+plannerToken)
			req.Header.Set("Connection", conn)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	seen := u.seen()
	if len(seen) < 10 {
		t.Fatalf("only %d requests reached the upstream", len(seen))
	}
	for _, s := range seen {
		if s.header.Get("Authorization") != "" || s.header.Get("Proxy-Authorization") != "" || strings.Contains(s.body, plannerToken) {
			t.Fatalf("the caller's credentials reached the upstream: %s %s %v", s.method, s.url, s.header)
		}
	}
}

// A case variant of "_meta" or "params" (a case-insensitive reader
// takes it, the go-sdk does not): with "PARAMS" beside "params" a
// checked Handoff could authorize another call than the one logged, and
// with "_META" the Handoff could reach the upstream. Refused: the
// Handoff never reaches it.
func TestMCPHostileCaseVariantMembersRefused(t *testing.T) {
	for name, mk := range map[string]func(v json.RawMessage) string{
		"_META": func(v json.RawMessage) string {
			return strings.Replace(hostileCallBody("1", "ok", v, ""), `"_meta"`, `"_META"`, 1)
		},
		"PARAMS": func(v json.RawMessage) string {
			return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"other-tool","arguments":{}},` +
				fmt.Sprintf(`"PARAMS":{"name":"run-tests","arguments":{"mode":"ok"},"_meta":{%q:%s}}}`, mcphandoff.Key, v)
		},
	} {
		t.Run(name, func(t *testing.T) {
			u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, hostileResult(id, hostileOK))
			}}
			r := newHostileRig(t, u, "without_handoff: reject")
			v, _ := hostileOffer(t, r.dl, "s1")
			var h struct {
				Offer string `json:"offer"`
			}
			json.Unmarshal(v, &h)
			hostilePost(t, r.url, "s1", mk(v))
			for _, s := range u.seen() {
				if h.Offer != "" && strings.Contains(s.body, h.Offer) {
					t.Fatalf("the forwarded call still holds the Handoff: %.300s", s.body)
				}
			}
		})
	}
}

// Odd JSON-RPC ids on a reject route, with no handoff: answered, never a
// panic (mustJSON) or a dropped connection.
func TestMCPHostileOddIDsAnswered(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	for _, id := range []string{"null", `"\xff"`, "1e400", `{"a":[1,2]}`, `[]`, `"` + strings.Repeat("x", 1<<16) + `"`, "\"\xff\xfe\""} {
		req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(hostileCallBody(id, "ok", nil, "")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Mcp-Protocol-Version", proto)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("id %.20q: %v", id, err)
		}
		resp.Body.Close()
	}
	if n := r.tools.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// Two members of one name, at any depth, are read differently by
// readers that keep the first and the last: refused before anything is
// decided, with or without a handoff.
func TestMCPHostileDuplicateNamesRefused(t *testing.T) {
	u := &hostileUpstream{}
	r := newHostileRig(t, u, "without_handoff: pass")
	v, hop := hostileOffer(t, r.dl, "s1")
	for name, body := range map[string]string{
		"method":    hostileCallBody("1", "ok", nil, `,"method":"ping"`),
		"arguments": strings.Replace(hostileCallBody("2", "ok", v, ""), `"arguments":{"mode":"ok"}`, `"arguments":{"mode":"ok","mode":"rm"}`, 1),
	} {
		resp := hostilePost(t, r.url, "s1", body)
		// Refused here, or by mcphandoff.StrictHandler before.
		if ms := hostileMessages(resp.body); len(ms) != 1 || ms[0].Error == nil || !bytes.Contains(resp.body, []byte("member name")) {
			t.Errorf("%s: HTTP %d %.300s", name, resp.status, resp.body)
		}
	}
	if n := len(u.seen()); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
	if _, err := r.gw.routes[0].delegate().Record(context.Background(), "https://planner.example", hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused body left a record: %v", err)
	}
}

// A second tools/call with the id of one in flight on the same session
// (7 and 7.0 are one id) is refused: the response and a cancel could not
// tell them apart. The first completes; the tool runs once.
func TestMCPHostileIDInUseRefused(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	v, _ := hostileOffer(t, r.dl, cs.ID())
	h2, hop2, err := r.dl.Offer(context.Background(), delegator.Offer{Aud: "https://tester.example", Dialog: cs.ID(), Work: "other work"})
	if err != nil {
		t.Fatal(err)
	}
	hv, err := mcphandoff.HandoffValue(h2, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := json.Marshal(hv)
	done := make(chan hostileResp, 1)
	go func() {
		done <- hostilePost(t, r.url, cs.ID(), hostileCallBody("7", "block", v, ""), "Mcp-Protocol-Version", proto)
	}()
	<-r.tools.started
	second := hostilePost(t, r.url, cs.ID(), hostileCallBody("7.0", "ok", v2, ""), "Mcp-Protocol-Version", proto)
	if ms := hostileMessages(second.body); len(ms) != 1 || ms[0].Error == nil || !strings.Contains(ms[0].Error.Message, "in use") {
		t.Errorf("second call: HTTP %d %.300s", second.status, second.body)
	}
	close(r.tools.release)
	if st, _ := hostileStatus(t, (<-done).body); st == nil || st.State != handoff.StateCompleted {
		t.Errorf("first call: %+v", st)
	}
	r.settled(t)
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
	if _, err := r.gw.routes[0].delegate().Record(context.Background(), "https://planner.example", hop2.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused call left a record: %v", err)
	}
}

// A handoff on a method that takes none (it would reach the upstream
// with the Handoff in it) is refused; so is a batch holding an unsigned
// cancel of a hop's call, which would stop taken work.
func TestMCPHostileStrayHandoffAndBatchedCancel(t *testing.T) {
	r := newMCPRig(t, "without_handoff: reject")
	_, cs, proto := hostileSession(t, r)
	v, _ := hostileOffer(t, r.dl, cs.ID())
	stray := fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{%q:%s}}}`, mcphandoff.Key, v)
	resp := hostilePost(t, r.url, cs.ID(), stray, "Mcp-Protocol-Version", proto)
	if ms := hostileMessages(resp.body); len(ms) != 1 || ms[0].Error == nil || ms[0].Error.Code != -32602 {
		t.Errorf("handoff on tools/list: HTTP %d %.300s", resp.status, resp.body)
	}
	done := make(chan hostileResp, 1)
	go func() {
		done <- hostilePost(t, r.url, cs.ID(), hostileCallBody("9", "block", v, ""), "Mcp-Protocol-Version", proto)
	}()
	<-r.tools.started
	batch := `[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}]`
	if resp := hostilePost(t, r.url, cs.ID(), batch); resp.status != http.StatusBadRequest {
		t.Errorf("batched cancel: HTTP %d %.300s", resp.status, resp.body)
	}
	time.Sleep(100 * time.Millisecond)
	stopped := r.tools.stopped.Load()
	close(r.tools.release)
	<-done
	r.settled(t)
	if stopped != 0 {
		t.Fatal("a batched unsigned cancel stopped the hop's taken work")
	}
}

// On a route that refuses calls without a handoff, a body too large to
// read (over mcphandoff.MaxStrictBody) is refused unread, not passed on:
// it could hold a tools/call.
func TestMCPHostileOversizedBodyOnRejectRoute(t *testing.T) {
	u := &hostileUpstream{answer: func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, hostileResult(id, hostileOK))
	}}
	r := newHostileRig(t, u, "without_handoff: reject")
	pad := strings.Repeat("x", mcphandoff.MaxStrictBody)
	resp := hostilePost(t, r.url, "s1", hostileCallBody("1", pad, nil, ""))
	if resp.status != http.StatusRequestEntityTooLarge {
		t.Errorf("HTTP %d %.200s", resp.status, resp.body)
	}
	if u.calls != 0 {
		t.Fatalf("the upstream ran %d calls", u.calls)
	}
}
