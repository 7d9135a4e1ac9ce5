package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// mcpRoute is an MCP route: a reverse proxy in front of one MCP server
// over streamable HTTP. The server is any MCP server: the gateway holds
// no session of its own and re-encodes nothing it does not act on. Every
// request passes through untouched (GET streams, DELETE, Mcp-Session-Id,
// Last-Event-ID, server-sent events flushed one by one), except the
// caller's Authorization header and two JSON-RPC messages posted to it:
//
//   - a tools/call carrying a Handoff under _meta mcphandoff.Key: the
//     receiving checks run (dialog: the Mcp-Session-Id; sender: the
//     bearer token's AgentId), the hop is recorded, and the call is either
//     answered here (a rejection, a retransmission, an equivocation, as
//     package mcphandoff answers them: a CallToolResult with the status
//     in its _meta) or forwarded once, without the Handoff. Its response
//     (JSON, or the event of the response in the stream) carries the
//     signed outcome in the result's _meta; a JSON-RPC error becomes a
//     tool error result, which can carry it.
//   - a notifications/cancelled carrying a signed "canceled": verified
//     against the hop's offer (D9) and recorded; the gateway then sends
//     the upstream a notifications/cancelled of its own for the request
//     it forwarded (the caller's may name a retransmission's id, which
//     never reached the upstream). A plain notifications/cancelled for a
//     forwarded hop's request is not passed on: only a verified cancel
//     stops taken work.
//
// A forwarded call is read to its response whatever the caller does: a
// caller that goes away leaves the exchange to finish and the outcome to
// be recorded for its retransmission.
type mcpRoute struct {
	cfg    Route
	s      *Server
	d      *delegate.Delegate
	target *url.URL
	hc     *http.Client
	pass   *httputil.ReverseProxy

	mu    sync.Mutex
	calls map[store.HopKey]*mcpCall // forwarded, not yet answered
	byID  map[callKey]*mcpCall      // the same, by session and JSON-RPC id
	kept  map[store.HopKey][]byte   // results of finished hops, for retransmissions
	order []store.HopKey            // kept's keys, oldest first

	// active counts forwarded calls and cancels being sent (under mu;
	// idle signals its fall to 0); life ends those still open when the
	// gateway closes (after the store: their hops stay accepted, as
	// recorded).
	active int
	idle   *sync.Cond
	life   context.Context
	abort  context.CancelFunc
}

// callKey names a request on the upstream: its session and JSON-RPC id
// (compacted octets).
type callKey struct{ session, id string }

// mcpCall is a tools/call forwarded for a hop.
type mcpCall struct {
	k        store.HopKey
	key      callKey
	id       json.RawMessage
	proto    string // the call's MCP-Protocol-Version, for the cancel
	accepted *handoff.Element
	stopped  bool // a cancel was sent for it (under mcpRoute.mu)
}

// Bounds of what the gateway reads from an MCP server to rewrite it: a
// JSON response or one server-sent event (larger is not taken: the
// hop's outcome is then unknown), and the results kept for
// retransmissions.
const (
	maxMCPMessage = 32 << 20
	maxKept       = 1024
	maxKeptResult = 1 << 20
)

func (s *Server) newMCPRoute(ctx context.Context, c *Config, res *Resources, rc Route) (*mcpRoute, error) {
	m := &mcpRoute{cfg: rc, s: s, target: rc.Upstream, calls: map[store.HopKey]*mcpCall{}, byID: map[callKey]*mcpCall{},
		kept: map[store.HopKey][]byte{}}
	m.idle = sync.NewCond(&m.mu)
	m.life, m.abort = context.WithCancel(context.Background())
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	// No response-header timeout: a server that answers a tools/call
	// with JSON sends its headers when the tool ends, however long it
	// runs. A hung upstream leaves the hop accepted, as it is.
	m.hc = &http.Client{Transport: tr}
	m.pass = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = m.upstreamURL(pr.In.URL)
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")
		},
		Transport:     tr,
		FlushInterval: -1, // server-sent events, event by event
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	var err error
	m.d, err = delegate.New(ctx, delegate.Config{Options: c.Policy.Options(c.Identity.ID, liveKeys{s}), Store: s.store,
		Signer: res.Signer, OnAnswer: s.answered(rc.Name, c.Identity.ID), Stop: s.stopElsewhere})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// upstreamURL is where a request to the route goes: the upstream URL,
// with the path below the route's appended (none: the upstream itself)
// and the request's query.
func (m *mcpRoute) upstreamURL(in *url.URL) *url.URL {
	u := *m.target
	if p := strings.TrimPrefix(in.Path, "/"); p != "" {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/" + p
		u.RawPath = ""
	}
	u.RawQuery = in.RawQuery
	return &u
}

// handler is the route, behind mcphandoff.StrictHandler: a body that
// carries the handoff but is not strict JSON never gets here.
func (m *mcpRoute) handler() http.Handler {
	return mcphandoff.StrictHandler(http.HandlerFunc(m.serve))
}

// rpcMessage is the part of a JSON-RPC message the gateway reads.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (m *mcpRoute) serve(w http.ResponseWriter, req *http.Request) {
	// DNS rebinding protection (MCP's security best practices), as the
	// go-sdk's streamable handler has it: a request that reached a
	// loopback address with a Host that is not loopback is refused.
	// Behind the gateway the upstream sees the gateway's Host, never the
	// caller's, so its own check cannot catch what this one does.
	if la, ok := req.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && la != nil && isLoopback(la.String()) && !isLoopback(req.Host) {
		http.Error(w, fmt.Sprintf("Forbidden: the Host header %q is not a loopback name, on a loopback address (DNS rebinding protection)", req.Host), http.StatusForbidden)
		return
	}
	if req.Method != http.MethodPost {
		m.pass.ServeHTTP(w, req)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, mcphandoff.MaxStrictBody+1))
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > mcphandoff.MaxStrictBody {
		// StrictHandler refused it if it carries the handoff: pass the
		// rest on as it comes.
		req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), req.Body))
		m.pass.ServeHTTP(w, req)
		return
	}
	replay := func() { req.Body = io.NopCloser(bytes.NewReader(body)); m.pass.ServeHTTP(w, req) }
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		// A JSON-RPC batch (MCP 2025-03-26). The gateway takes a
		// handoff, and refuses a plain tools/call, one request at a time.
		if bytes.Contains(body, []byte(mcphandoff.Key)) || m.cfg.WithoutHandoff == "reject" && bytes.Contains(body, []byte(`"tools/call"`)) {
			writeRPCError(w, nil, http.StatusBadRequest, -32600, "handoff gateway: a JSON-RPC batch with a tools/call or an agent handoff is not taken; send them one by one")
			return
		}
		replay()
		return
	}
	var msg rpcMessage
	if json.Unmarshal(body, &msg) != nil {
		replay() // the upstream's to answer
		return
	}
	var p struct {
		Name string                     `json:"name"`
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(msg.Params, &p)
	v, carries := p.Meta[mcphandoff.Key]
	switch {
	case msg.Method == "tools/call" && len(msg.ID) > 0 && carries:
		m.call(w, req, body, msg, p.Name, v)
	case msg.Method == "tools/call" && len(msg.ID) > 0 && m.cfg.WithoutHandoff == "reject":
		writeResult(w, msg.ID, toolResult(nil, true, fmt.Sprintf("this tool takes work only with an agent handoff under _meta %q", mcphandoff.Key)))
	case msg.Method == "notifications/cancelled":
		m.cancelled(w, req, msg, v, carries, replay)
	default:
		replay()
	}
}

// call takes a tools/call carrying a Handoff.
func (m *mcpRoute) call(w http.ResponseWriter, req *http.Request, body []byte, msg rpcMessage, tool string, v json.RawMessage) {
	b, err := handoffOctets(v)
	if err != nil {
		// Not a Handoff at all: step 1 (D3), bad-signature, with nothing
		// verified to address a status to.
		writeResult(w, msg.ID, toolResult(nil, true, "handoff rejected (bad-signature, step 1): "+err.Error()))
		return
	}
	h, herr := handoff.ParseHandoff(b, handoff.DefaultLimits())
	session := req.Header.Get("Mcp-Session-Id")
	// The record must be complete even if the caller goes away meanwhile.
	bg := withLogAttrs(context.WithoutCancel(req.Context()), slog.String("protocol", "mcp"), slog.String("tool", tool))
	a, err := m.d.ReceiveParsed(bg, h, herr, session, m.s.sender(req.Header.Get("Authorization"), clientCert(req)))
	if a == nil {
		m.s.log.Error("the hop store failed; nothing was decided", "route", m.cfg.Name, "err", oneLine(err))
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff gateway: the hop store failed; nothing was decided: ask again")
		return
	}
	k := store.HopKey{Iss: a.Iss, Hop: a.Hop}
	switch a.Outcome {
	case handoff.Rejected:
		why := "handoff rejected"
		if a.Err != nil {
			why = fmt.Sprintf("handoff rejected (%s): %v", a.Reason, a.Err)
		}
		writeResult(w, msg.ID, toolResult(a.Status, true, why))
	case handoff.Equivocation:
		// The delegate has stopped the first offer's work (Config.Stop);
		// the second gets no status.
		writeResult(w, msg.ID, toolResult(nil, true, fmt.Sprintf("handoff refused: equivocation (another offer for hop %s of %s was received first)", a.Hop, a.Iss)))
	case handoff.Retransmission:
		writeResult(w, msg.ID, m.retransmission(k, a))
	case handoff.Accepted:
		if !a.Take {
			writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff gateway: the hop was received but not taken")
			return
		}
		m.forward(w, req, body, msg, &mcpCall{k: k, key: callKey{session, compact(msg.ID)}, id: msg.ID,
			proto: req.Header.Get("Mcp-Protocol-Version"), accepted: a.Status})
	default:
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff gateway: unexpected outcome "+string(a.Outcome))
	}
}

// handoffOctets is mcphandoff.HandoffOctets on the raw value: the JSON
// Handoff's own octets (the body is strict JSON: StrictHandler), or the
// base64url CBOR Handoff in a string.
func handoffOctets(v json.RawMessage) ([]byte, error) {
	switch {
	case len(v) > 0 && v[0] == '{':
		return v, nil
	case len(v) > 0 && v[0] == '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, err
		}
		b, err := base64.RawURLEncoding.Strict().DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%w: the string under %q is not base64url (no padding) of a CBOR Handoff: %v", mcphandoff.ErrMeta, mcphandoff.Key, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: %q is %s, want the Handoff object or base64url CBOR", mcphandoff.ErrMeta, mcphandoff.Key, shortJSON(v))
}

// forward sends a taken hop's call to the upstream, once, and answers
// with its response carrying the signed outcome.
func (m *mcpRoute) forward(w http.ResponseWriter, req *http.Request, body []byte, msg rpcMessage, c *mcpCall) {
	m.mu.Lock()
	m.calls[c.k], m.byID[c.key] = c, c
	m.active++
	m.mu.Unlock()
	defer m.forget(c)
	ctx := context.WithoutCancel(req.Context())
	// A cancel or an equivocating offer may have marked the hop since it
	// was taken, on a path that reaches no stop here (another replica).
	// The record is read after the call is registered, so a mark made
	// later finds it and sends the upstream its cancel.
	rec, err := m.d.Record(ctx, c.k.Iss, c.k.Hop)
	if err != nil || rec.Canceled || rec.Equivocated {
		why := "the hop was canceled by the delegator (or its offer equivocated) before it was forwarded"
		if err != nil {
			why = "the hop's record could not be read again before forwarding: " + err.Error()
		}
		st, ferr := m.d.Finish(ctx, c.k.Iss, c.k.Hop, delegate.Outcome{State: store.Failed, NoEffect: true, Reason: handoff.ReasonPolicy, Detail: why})
		if ferr != nil {
			m.unknown(ctx, c, why+"; recording it failed with no effect did not succeed: "+ferr.Error())
			st = c.accepted
		}
		writeResult(w, msg.ID, toolResult(st, true, why+": the tool was not called"))
		return
	}

	out, err := http.NewRequestWithContext(m.life, http.MethodPost, m.upstreamURL(req.URL).String(), bytes.NewReader(bodyWithoutHandoff(body)))
	if err != nil {
		m.unreachable(ctx, w, c, err)
		return
	}
	copyHeaders(out.Header, req.Header)
	resp, err := m.hc.Do(out)
	if err != nil {
		m.unreachable(ctx, w, c, err)
		return
	}
	defer resp.Body.Close()
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	ct = strings.TrimSpace(strings.ToLower(ct))
	switch {
	case resp.StatusCode == http.StatusOK && ct == "text/event-stream":
		m.stream(ctx, w, resp, c)
	case resp.StatusCode == http.StatusOK && ct == "application/json":
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage+1))
		if err != nil || len(b) > maxMCPMessage {
			why := fmt.Sprintf("the upstream's response could not be read whole (over %d bytes, or cut: %v)", maxMCPMessage, err)
			m.unknown(ctx, c, why)
			writeResult(w, msg.ID, toolResult(c.accepted, true, why+"; the hop is accepted, its outcome not known"))
			return
		}
		var r rpcMessage
		if json.Unmarshal(b, &r) != nil || compact(r.ID) != c.key.id {
			why := "the upstream answered the call with something other than its JSON-RPC response"
			m.unknown(ctx, c, why)
			writeResult(w, msg.ID, toolResult(c.accepted, true, why+"; the hop is accepted, its outcome not known"))
			return
		}
		writeJSON(w, http.StatusOK, m.settle(ctx, c, r))
	default:
		// The upstream's own answer (a 404 for an ended session, say)
		// goes back as it is, for the caller's MCP client to act on. A
		// 4xx says the server did not take the message (MCP, streamable
		// HTTP): nothing ran. Anything else says nothing sure.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage))
		why := fmt.Sprintf("the upstream answered the call with HTTP %d", resp.StatusCode)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			m.finish(ctx, c, delegate.Outcome{State: store.Failed, NoEffect: true, Detail: why + ": it did not take the call"})
		} else {
			m.failedOrUnknown(ctx, c, why)
		}
		copyHeaders(w.Header(), resp.Header)
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
	}
}

// unreachable answers a call the upstream did not answer at all: a
// failed dial never reached it (failed, no effect); any other error
// leaves what it did unknown.
func (m *mcpRoute) unreachable(ctx context.Context, w http.ResponseWriter, c *mcpCall, err error) {
	why := "the upstream could not be called: " + err.Error()
	var st *handoff.Element
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		st = m.finish(ctx, c, delegate.Outcome{State: store.Failed, NoEffect: true, Detail: why})
	} else {
		st = m.failedOrUnknown(ctx, c, why)
	}
	writeResult(w, c.id, toolResult(st, true, why))
}

// stream passes the upstream's server-sent events on one by one, each
// flushed; the event that holds the call's response is rewritten to
// carry the outcome. It reads to the response (or the stream's end)
// even after the caller went away.
func (m *mcpRoute) stream(ctx context.Context, w http.ResponseWriter, resp *http.Response, c *mcpCall) {
	copyHeaders(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.WriteHeader(http.StatusOK)
	gone := false
	send := func(b []byte) {
		if gone {
			return
		}
		if _, err := w.Write(b); err != nil {
			gone = true
			return
		}
		http.NewResponseController(w).Flush()
	}
	send(nil)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		ev, err := readEvent(br)
		if len(ev.raw) > 0 {
			if r, ok := ev.response(c.key.id); ok {
				send(ev.with(m.settle(ctx, c, r)))
				// The stream of a POST ends with its response (MCP).
				io.Copy(io.Discard, io.LimitReader(resp.Body, maxMCPMessage))
				return
			}
			send(ev.raw)
		}
		if err != nil {
			why := "the upstream's stream ended without the call's response"
			if !errors.Is(err, io.EOF) {
				why = "the upstream's stream broke before the call's response: " + err.Error()
			}
			m.mu.Lock()
			stopped := c.stopped
			m.mu.Unlock()
			if stopped {
				why += " (the gateway had sent it the delegator's cancel)"
			}
			m.unknown(ctx, c, why)
			return
		}
	}
}

// settle records the outcome a JSON-RPC response to the call shows and
// returns the response to send: a CallToolResult whose _meta carries the
// status (the recorded "accepted" while the outcome is unknown).
func (m *mcpRoute) settle(ctx context.Context, c *mcpCall, r rpcMessage) []byte {
	var res map[string]json.RawMessage
	var isError bool
	switch {
	case r.Error != nil:
		res = toolResult(nil, true, fmt.Sprintf("the tool call failed: JSON-RPC error %d: %s", r.Error.Code, r.Error.Message))
		isError = true
	case json.Unmarshal(r.Result, &res) != nil || res == nil:
		res = toolResult(nil, true, "the upstream's result is not a JSON object")
		m.unknown(ctx, c, "the upstream's result for the call is not a JSON object")
		return rpcResponse(c.id, withStatus(res, c.accepted))
	default:
		_ = json.Unmarshal(res["isError"], &isError)
	}
	var st *handoff.Element
	_, rounds := res["inputRequests"]
	switch {
	case rounds:
		// A multi-round-trip call (SEP-2322): its next round would be a
		// retransmission here, which is answered, not forwarded.
		st = m.unknownStatus(ctx, c, "the tool asked for input (multi-round-trip, SEP-2322), which the gateway does not carry; the round's effect is not known")
	case r.Error != nil && preExecution(r.Error.Code):
		// The JSON-RPC codes of a request refused before it ran.
		st = m.finish(ctx, c, delegate.Outcome{State: store.Failed, NoEffect: true,
			Detail: fmt.Sprintf("the upstream refused the call: JSON-RPC error %d: %s", r.Error.Code, r.Error.Message)})
	case r.Error != nil:
		st = m.failedOrUnknown(ctx, c, fmt.Sprintf("the tool call ended with JSON-RPC error %d: %s", r.Error.Code, r.Error.Message))
	case isError:
		st = m.failedOrUnknown(ctx, c, "the tool returned an error result (isError)")
	default:
		st = m.finish(ctx, c, delegate.Outcome{State: store.Completed})
	}
	if st != nil && st != c.accepted {
		m.keep(c.k, res)
	}
	return rpcResponse(c.id, withStatus(res, st))
}

// preExecution: JSON-RPC's parse error, invalid request, method not
// found and invalid params are answered before the method runs.
func preExecution(code int) bool { return code >= -32602 && code <= -32600 || code == -32700 }

// finish records a known outcome and returns its status; when that
// fails the hop is flagged and the status is the recorded "accepted".
func (m *mcpRoute) finish(ctx context.Context, c *mcpCall, out delegate.Outcome) *handoff.Element {
	st, err := m.d.Finish(ctx, c.k.Iss, c.k.Hop, out)
	if err != nil {
		m.s.log.Error("recording a hop's outcome failed", "route", m.cfg.Name, "iss", c.k.Iss, "hop", c.k.Hop, "outcome", string(out.State), "err", oneLine(err))
		return m.unknownStatus(ctx, c, fmt.Sprintf("recording the outcome %s failed: %v", out.State, err))
	}
	m.s.metrics.outcomes.WithLabelValues(m.cfg.Name, string(out.State)).Inc()
	return st
}

// failedOrUnknown: on a route whose upstream's failures take no effect
// (failures_effect_free), a signed "failed" with no refs; otherwise the
// outcome is unknown (draft "Knowing the Outcome": never guess).
func (m *mcpRoute) failedOrUnknown(ctx context.Context, c *mcpCall, why string) *handoff.Element {
	if m.cfg.FailuresEffectFree {
		return m.finish(ctx, c, delegate.Outcome{State: store.Failed, NoEffect: true, Detail: why})
	}
	return m.unknownStatus(ctx, c, why)
}

func (m *mcpRoute) unknownStatus(ctx context.Context, c *mcpCall, why string) *handoff.Element {
	m.unknown(ctx, c, why)
	return c.accepted
}

// unknown flags the hop: it stays accepted, its outcome not known.
func (m *mcpRoute) unknown(ctx context.Context, c *mcpCall, why string) {
	m.s.metrics.outcomes.WithLabelValues(m.cfg.Name, "unknown").Inc()
	if err := m.d.Unknown(ctx, c.k.Iss, c.k.Hop, why); err != nil {
		m.s.log.Error("flagging a hop's unknown outcome failed", "route", m.cfg.Name, "iss", c.k.Iss, "hop", c.k.Hop, "why", why, "err", oneLine(err))
		return
	}
	m.s.log.Warn("hop outcome unknown: flagged for the operator", "route", m.cfg.Name, "iss", c.k.Iss, "hop", c.k.Hop, "why", why)
}

// retransmission answers the same offer again from the record, never
// calling the upstream: the last status sent, with the tool's result
// while it is kept here.
func (m *mcpRoute) retransmission(k store.HopKey, a *delegate.Answer) map[string]json.RawMessage {
	if a.Status == nil {
		// Nothing about the hop: the same answer whatever became of it
		// (draft "Replay and Freshness").
		return toolResult(nil, false, fmt.Sprintf("retransmission of hop %s: no status to resend (not yet decided, or the sender is not authenticated as %s)", a.Hop, a.Iss))
	}
	state := store.State("")
	if a.Record != nil {
		state = a.Record.State
	}
	m.mu.Lock()
	kept := m.kept[k]
	_, running := m.calls[k]
	m.mu.Unlock()
	failed := state == store.Rejected || state == store.Failed
	var res map[string]json.RawMessage
	switch {
	case kept != nil && state.Terminal() && json.Unmarshal(kept, &res) == nil:
	case running:
		res = toolResult(nil, false, fmt.Sprintf("hop %s is accepted and its work is running: ask again later", a.Hop))
	default:
		res = toolResult(nil, failed, fmt.Sprintf("retransmission of hop %s: the hop is %s; the last status sent is in _meta %q", a.Hop, state, mcphandoff.Key))
	}
	return withStatus(res, a.Status)
}

// keep holds a finished hop's result (without the status) for its
// retransmissions: the last maxKept, each up to maxKeptResult.
func (m *mcpRoute) keep(k store.HopKey, res map[string]json.RawMessage) {
	b, err := json.Marshal(withStatus(res, nil))
	if err != nil || len(b) > maxKeptResult {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.kept[k]; !ok {
		if len(m.order) >= maxKept {
			delete(m.kept, m.order[0])
			m.order = m.order[1:]
		}
		m.order = append(m.order, k)
	}
	m.kept[k] = b
}

// forget unregisters a forwarded call that has ended.
func (m *mcpRoute) forget(c *mcpCall) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls[c.k] == c {
		delete(m.calls, c.k)
	}
	if m.byID[c.key] == c {
		delete(m.byID, c.key)
	}
	m.ended()
}

// ended counts one forwarded call or cancel ended (under mu).
func (m *mcpRoute) ended() {
	if m.active--; m.active == 0 {
		m.idle.Broadcast()
	}
}

// cancelled takes a notifications/cancelled.
func (m *mcpRoute) cancelled(w http.ResponseWriter, req *http.Request, msg rpcMessage, v json.RawMessage, signed bool, replay func()) {
	if !signed {
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		m.mu.Lock()
		c := m.byID[callKey{req.Header.Get("Mcp-Session-Id"), compact(p.RequestID)}]
		m.mu.Unlock()
		if c == nil {
			replay() // not a hop's request: the upstream's business
			return
		}
		// The caller's own end of the request (its SDK sends one when a
		// call's context ends): it does not stop taken work.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.WriteHeader(http.StatusAccepted) // a notification has no answer
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		m.s.log.Warn("a cancel's _meta value is not a string (compact JWS or base64url COSE): ignored", "route", m.cfg.Name)
		return
	}
	el := handoff.ParseElement([]byte(s))
	_, st, err := handoff.UnsafeDecode(el)
	if err != nil || st == nil || st.State != handoff.StateCanceled {
		m.s.log.Warn("a notifications/cancelled carries no signed canceled status: ignored", "route", m.cfg.Name)
		return
	}
	// The status names the offer by digest: the delegate finds the hop
	// (claimed here, or in the store by another replica), verifies the
	// cancel against its offer, records it and stops the work
	// (Config.Stop, which reaches this route's forwarded call).
	rec, err := m.d.Cancel(context.WithoutCancel(req.Context()), el, st.Iss, "")
	if err != nil {
		m.s.metrics.cancels.WithLabelValues(m.cfg.Name, "refused").Inc()
		m.s.log.Warn("cancel not applied", "route", m.cfg.Name, "iss", st.Iss, "offer", st.Offer.String(), "err", oneLine(err))
		return
	}
	m.s.metrics.cancels.WithLabelValues(m.cfg.Name, "applied").Inc()
	if rec != nil {
		m.s.log.Info("cancel applied", "route", m.cfg.Name, "iss", rec.Iss, "hop", rec.Hop)
	}
}

// stop sends the upstream a notifications/cancelled for the hop's
// forwarded call, if one is open here; it does not block.
func (m *mcpRoute) stop(iss, hop string) {
	m.mu.Lock()
	c := m.calls[store.HopKey{Iss: iss, Hop: hop}]
	if c == nil || c.stopped {
		m.mu.Unlock()
		return
	}
	c.stopped = true
	m.active++
	m.mu.Unlock()
	go func() {
		defer func() { m.mu.Lock(); m.ended(); m.mu.Unlock() }()
		if err := m.sendCancel(c); err != nil {
			m.s.log.Error("the upstream cancel could not be sent", "route", m.cfg.Name, "iss", iss, "hop", hop, "err", oneLine(err))
		}
	}()
}

func (m *mcpRoute) sendCancel(c *mcpCall) error {
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": map[string]any{"requestId": c.id, "reason": "the delegator canceled the hop (a signed, verified cancel), or its offer equivocated"}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(m.life, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.target.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.key.session != "" {
		req.Header.Set("Mcp-Session-Id", c.key.session)
	}
	if c.proto != "" {
		req.Header.Set("Mcp-Protocol-Version", c.proto)
	}
	resp, err := m.hc.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the upstream answered HTTP %d", resp.StatusCode)
	}
	return nil
}

// wait returns when the forwarded calls and cancels have ended, or ctx.
func (m *mcpRoute) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		m.mu.Lock()
		for m.active > 0 {
			m.idle.Wait()
		}
		m.mu.Unlock()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sseEvent is one server-sent event as read: its octets, to pass on
// unchanged, and its data.
type sseEvent struct {
	raw  []byte
	data []byte
}

// readEvent reads one event: its lines up to a blank line (or the
// end). A blank line alone is an event with no fields, passed on as it
// is. An event over maxMCPMessage is an error.
func readEvent(br *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	var data [][]byte
	for {
		start := len(ev.raw) // of this line, which may come in pieces
		line, err := br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) && len(ev.raw)+len(line) <= maxMCPMessage {
			ev.raw = append(ev.raw, line...)
			line, err = br.ReadSlice('\n')
		}
		if len(ev.raw)+len(line) > maxMCPMessage {
			return sseEvent{}, fmt.Errorf("a server-sent event over %d bytes", maxMCPMessage)
		}
		ev.raw = append(ev.raw, line...)
		full := bytes.TrimRight(ev.raw[start:], "\r\n")
		if d, ok := bytes.CutPrefix(full, []byte("data:")); ok {
			data = append(data, bytes.TrimPrefix(d, []byte(" ")))
		}
		if err != nil || len(full) == 0 {
			ev.data = bytes.Join(data, []byte("\n"))
			return ev, err
		}
	}
}

// response is the event's JSON-RPC response to the request id, if it
// holds one.
func (ev sseEvent) response(id string) (rpcMessage, bool) {
	if len(ev.data) == 0 || !bytes.Contains(ev.data, []byte(`"id"`)) {
		return rpcMessage{}, false
	}
	var r rpcMessage
	if json.Unmarshal(ev.data, &r) != nil || r.Method != "" || compact(r.ID) != id || r.Result == nil && r.Error == nil {
		return rpcMessage{}, false
	}
	return r, true
}

// with is the event with its data replaced by msg (one data line; the
// other fields, such as its id for Last-Event-ID, as they were).
func (ev sseEvent) with(msg []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(ev.raw, []byte("\n")) {
		t := bytes.TrimRight(line, "\r\n")
		if len(t) == 0 || bytes.HasPrefix(t, []byte("data:")) {
			continue
		}
		out = append(out, line...)
		if !bytes.HasSuffix(line, []byte("\n")) {
			out = append(out, '\n')
		}
	}
	out = append(out, "data: "...)
	out = append(out, msg...)
	return append(out, "\n\n"...)
}

// bodyWithoutHandoff is the tools/call body without the Handoff in its
// _meta (the upstream takes work, not the gateway's checks). A body
// that cannot be rewritten goes as it is.
func bodyWithoutHandoff(body []byte) []byte {
	var msg map[string]json.RawMessage
	var params map[string]json.RawMessage
	var meta map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || json.Unmarshal(msg["params"], &params) != nil || json.Unmarshal(params["_meta"], &meta) != nil {
		return body
	}
	delete(meta, mcphandoff.Key)
	if len(meta) == 0 {
		delete(params, "_meta")
	} else {
		params["_meta"] = mustJSON(meta)
	}
	msg["params"] = mustJSON(params)
	return mustJSON(msg)
}

// withStatus is res with st under _meta mcphandoff.Key (none when st is
// nil), and isError set for a "failed" or "rejected" st.
func withStatus(res map[string]json.RawMessage, st *handoff.Element) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(res)+1)
	for k, v := range res {
		out[k] = v
	}
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(res["_meta"], &meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	delete(meta, mcphandoff.Key)
	if st != nil {
		meta[mcphandoff.Key] = mustJSON(mcphandoff.StatusValue(*st))
		if _, s, err := handoff.UnsafeDecode(*st); err == nil && s != nil && (s.State == handoff.StateFailed || s.State == handoff.StateRejected) {
			out["isError"] = json.RawMessage("true")
		}
	}
	if len(meta) == 0 {
		delete(out, "_meta")
	} else {
		out["_meta"] = mustJSON(meta)
	}
	if _, ok := out["content"]; !ok {
		out["content"] = json.RawMessage("[]")
	}
	return out
}

// toolResult is a CallToolResult with one text content and st in _meta.
func toolResult(st *handoff.Element, isError bool, text string) map[string]json.RawMessage {
	res := map[string]json.RawMessage{"content": mustJSON([]map[string]string{{"type": "text", "text": text}})}
	if isError {
		res["isError"] = json.RawMessage("true")
	}
	return withStatus(res, st)
}

func rpcResponse(id json.RawMessage, result any) []byte {
	return mustJSON(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func writeResult(w http.ResponseWriter, id json.RawMessage, result any) {
	writeJSON(w, http.StatusOK, rpcResponse(id, result))
}

// writeRPCError answers a JSON-RPC error (id null when the request had
// none to answer).
func writeRPCError(w http.ResponseWriter, id json.RawMessage, status, code int, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	writeJSON(w, status, mustJSON(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}}))
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// mustJSON marshals values that always marshal (maps of raw JSON,
// strings).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("gateway: marshaling %T: %v", v, err))
	}
	return b
}

// compact is a JSON value's compact octets, to compare ids ("" for none).
func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

func shortJSON(v json.RawMessage) string {
	if len(v) > 32 {
		return string(v[:32]) + "..."
	}
	return string(v)
}

// isLoopback says whether a host or host:port names the loopback
// interface: localhost, or a loopback IP.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// hopByHop are the headers a proxy does not pass on (RFC 9110 7.6.1),
// with the caller's credentials, which are the gateway's to check.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization", "Content-Length", "Host"}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, f := range src.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			dst.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopByHop {
		dst.Del(k)
	}
}
