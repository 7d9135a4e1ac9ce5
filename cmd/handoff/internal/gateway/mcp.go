package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
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

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

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
	byID  map[callKey]*mcpCall      // tools/calls with a Handoff in hand, by session and JSON-RPC id
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

	// shared notes the open calls in the store, for a cancel verified on
	// another replica (shared.go); nil on SQLite.
	shared *sqlTasks
}

// callKey names a request on the upstream: its session and JSON-RPC id
// (idKey: its value).
type callKey struct{ session, id string }

// mcpCall is a tools/call forwarded for a hop.
type mcpCall struct {
	k        store.HopKey
	key      callKey
	id       json.RawMessage // as the caller wrote it
	url      string          // where it goes upstream, and its cancel
	proto    string          // the call's MCP-Protocol-Version, for the cancel
	accepted *handoff.Element
	stopped  bool             // a cancel was sent for it (under mcpRoute.mu)
	h        *handoff.Handoff // as received: the tool's outbound calls pass it on (links.go)
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
	if s.tasksDB != nil {
		m.shared = &sqlTasks{db: s.tasksDB, route: rc.Name}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	// No response-header timeout: a server that answers a tools/call
	// with JSON sends its headers when the tool ends, however long it
	// runs. A hung upstream leaves the hop accepted, as it is.
	// No redirect is followed: the call would be sent again elsewhere.
	m.hc = &http.Client{Transport: traceTransport{base: tr}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	m.pass = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = m.upstreamURL(pr.In.URL)
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization")
		},
		Transport:     traceTransport{base: tr},
		FlushInterval: -1, // server-sent events, event by event
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	var err error
	o := c.Policy.Options(c.Identity.ID, liveKeys{s})
	o.ChainCache, o.TrustGeneration = s.chains, liveKeys{s}.Generation
	m.d, err = delegate.New(ctx, delegate.Config{Options: o, Store: s.store, SenderMustBeIss: c.Policy.SenderMustBeIss,
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
	// One session, one protocol version: a request with two could be
	// checked for one session and run on another.
	for _, h := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version"} {
		if len(req.Header.Values(h)) > 1 {
			http.Error(w, fmt.Sprintf("Bad Request: more than one %s header", h), http.StatusBadRequest)
			return
		}
	}
	if req.Method != http.MethodPost {
		noteMethod(req.Context(), map[string]string{http.MethodGet: "stream", http.MethodDelete: "session/end"}[req.Method])
		m.pass.ServeHTTP(w, req)
		return
	}
	if ce := req.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// The gateway reads the body as it comes: an encoded one it
		// could not judge.
		http.Error(w, "Unsupported Media Type: a request body with a Content-Encoding is not taken", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, mcphandoff.MaxStrictBody+1))
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > mcphandoff.MaxStrictBody {
		// StrictHandler refused it if it carries the handoff. Nothing
		// larger is read here: a tools/call on a route that refuses
		// calls without a handoff is refused unread, the rest passes on
		// as it comes.
		if m.cfg.WithoutHandoff == "reject" {
			writeRPCError(w, nil, http.StatusRequestEntityTooLarge, -32600, fmt.Sprintf("handoff gateway: a request body over %d bytes is not taken on this route", mcphandoff.MaxStrictBody))
			return
		}
		req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), req.Body))
		m.pass.ServeHTTP(w, req)
		return
	}
	replay := func() { req.Body = io.NopCloser(bytes.NewReader(body)); m.pass.ServeHTTP(w, req) }
	session := req.Header.Get("Mcp-Session-Id")
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		noteMethod(req.Context(), "batch")
		m.batch(w, body, session, replay)
		return
	}
	msg, top, p, err := readRequest(body)
	if err != nil {
		writeRPCError(w, nil, http.StatusBadRequest, -32600, "handoff gateway: "+err.Error())
		return
	}
	noteMethod(req.Context(), mcpMethodLabel(msg.Method))
	switch m.classify(msg, p, session) {
	case mcpCallWithHandoff:
		if len(msg.ID) == 0 {
			writeRPCError(w, nil, http.StatusBadRequest, -32600, "handoff gateway: a tools/call carrying an agent handoff must be a request (with an id), not a notification")
			return
		}
		m.call(w, req, msg, top, p)
	case mcpRefusedCall:
		why := fmt.Sprintf("this tool takes work only with an agent handoff under _meta %q", mcphandoff.Key)
		if len(msg.ID) == 0 {
			writeRPCError(w, nil, http.StatusBadRequest, -32600, "handoff gateway: "+why)
			return
		}
		writeResult(w, msg.ID, toolResult(nil, true, why))
	case mcpCancel:
		m.cancelled(w, req, p)
	case mcpStrayHandoff:
		status := http.StatusOK
		if len(msg.ID) == 0 {
			status = http.StatusBadRequest
		}
		writeRPCError(w, msg.ID, status, -32602, fmt.Sprintf("handoff gateway: an agent handoff (_meta %q) is taken on tools/call only, and a signed canceled on notifications/cancelled; not on %q", mcphandoff.Key, msg.Method))
	default:
		replay()
	}
}

// readRequest reads a message posted to the route and its params.
func readRequest(b []byte) (rpcMessage, map[string]jsontext.Value, rpcParams, error) {
	msg, top, err := readRPC(b)
	if err != nil {
		return rpcMessage{}, nil, rpcParams{}, err
	}
	p, err := readParams(msg.Params)
	return msg, top, p, err
}

// mcpAction is what the gateway does with a message posted to it.
type mcpAction int

const (
	mcpPass            mcpAction = iota // to the upstream, as it is
	mcpCallWithHandoff                  // checked, then answered here or forwarded once
	mcpRefusedCall                      // a tools/call with no handoff on a route that refuses those
	mcpCancel                           // a signed cancel, or the caller's cancel of a hop's call
	mcpStrayHandoff                     // a handoff where none is taken: refused
)

func (m *mcpRoute) classify(msg rpcMessage, p rpcParams, session string) mcpAction {
	_, carries := p.carries()
	switch {
	case msg.Method == "tools/call" && carries:
		return mcpCallWithHandoff
	case msg.Method == "tools/call" && m.cfg.WithoutHandoff == "reject":
		return mcpRefusedCall
	case msg.Method == "notifications/cancelled" && (carries || m.tracked(session, p.RequestID)):
		return mcpCancel
	case carries:
		return mcpStrayHandoff
	}
	return mcpPass
}

// batch takes a JSON-RPC batch (MCP 2025-03-26): passed on whole when
// the gateway has nothing to do with any of its members, refused
// otherwise (the gateway takes a handoff one request at a time).
func (m *mcpRoute) batch(w http.ResponseWriter, body []byte, session string, replay func()) {
	var members []jsontext.Value
	if err := jsonv2.Unmarshal(body, &members); err != nil {
		writeRPCError(w, nil, http.StatusBadRequest, -32600, "handoff gateway: the batch is not a JSON array with unique member names and valid UTF-8: "+err.Error())
		return
	}
	for i, b := range members {
		msg, _, p, err := readRequest(b)
		if err != nil {
			writeRPCError(w, nil, http.StatusBadRequest, -32600, fmt.Sprintf("handoff gateway: batch member %d: %v", i, err))
			return
		}
		if m.classify(msg, p, session) != mcpPass {
			writeRPCError(w, nil, http.StatusBadRequest, -32600, fmt.Sprintf("handoff gateway: batch member %d is a tools/call, an agent handoff or a cancel the gateway acts on, which it takes only one by one, outside a batch", i))
			return
		}
	}
	replay()
}

// tracked says whether id names a tools/call with a Handoff in hand on
// the session: here, or forwarded by another replica.
func (m *mcpRoute) tracked(session string, id json.RawMessage) bool {
	key, ok := idKey(id)
	if !ok {
		return false
	}
	m.mu.Lock()
	here := m.byID[callKey{session, key}] != nil
	m.mu.Unlock()
	if here || m.shared == nil {
		return here
	}
	// Forwarded by another replica? An error reads as yes: the caller's
	// unsigned cancel is then not passed on, which stops no work.
	ctx, cancel := context.WithTimeout(m.life, 5*time.Second)
	defer cancel()
	open, err := m.shared.callOpen(ctx, callKey{session, key})
	if err != nil {
		m.s.log.Warn("looking for a forwarded call in the store; the caller's cancel is not passed on", "route", m.cfg.Name, "err", oneLine(err))
		return true
	}
	return open
}

// call takes a tools/call carrying a Handoff.
func (m *mcpRoute) call(w http.ResponseWriter, req *http.Request, msg rpcMessage, top map[string]jsontext.Value, p rpcParams) {
	key, ok := idKey(msg.ID)
	if !ok {
		writeRPCError(w, msg.ID, http.StatusOK, -32600, fmt.Sprintf("handoff gateway: a tools/call carrying an agent handoff needs an id that is a string or an integer below 2^53 in magnitude, which every JSON reader takes alike, not %s", shortJSON(msg.ID)))
		return
	}
	session := req.Header.Get("Mcp-Session-Id")
	c := &mcpCall{key: callKey{session, key}, id: msg.ID, url: m.upstreamURL(req.URL).String(), proto: req.Header.Get("Mcp-Protocol-Version")}
	// The id is held from here: a cancel naming it is the gateway's to
	// judge, and a second call with the same id in flight is refused.
	if !m.reserve(c) {
		writeRPCError(w, msg.ID, http.StatusOK, -32600, fmt.Sprintf("handoff gateway: the request id %s is in use by another tools/call in flight on this session", shortJSON(msg.ID)))
		return
	}
	defer m.release(c)
	body, err := p.withoutHandoff(top)
	if err != nil {
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff gateway: the call could not be written without its handoff: "+err.Error())
		return
	}
	v, _ := p.carries()
	b, err := handoffOctets(v)
	if err != nil {
		// Not a Handoff at all: step 1 (D3), bad-signature, with nothing
		// verified to address a status to.
		writeResult(w, msg.ID, toolResult(nil, true, "handoff rejected (bad-signature, step 1): "+err.Error()))
		return
	}
	h, herr := m.d.ParseHandoff(b) // the route's receiver: its bounds, and the shared cache's warm read
	// The record must be complete even if the caller goes away meanwhile.
	bg := context.WithoutCancel(req.Context())
	sender := m.s.sender(bg, req.Header.Get("Authorization"), clientCert(req))
	bg = withLogAttrs(bg, slog.String("protocol", "mcp"), slog.String("tool", p.Name), slog.String("sender", sender))
	a, err := m.d.ReceiveParsed(bg, h, herr, session, sender)
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
		c.k, c.accepted, c.h = k, a.Status, h
		m.forward(w, req, body, c)
	default:
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff gateway: unexpected outcome "+string(a.Outcome))
	}
}

// handoffOctets is mcphandoff.HandoffOctets on the raw value: the JSON
// Handoff's own octets (the body is strict JSON: StrictHandler), or the
// base64url CBOR Handoff in a string.
func handoffOctets(v jsontext.Value) ([]byte, error) {
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
	return nil, fmt.Errorf("%w: %q is %s, want the Handoff object or base64url CBOR", mcphandoff.ErrMeta, mcphandoff.Key, shortJSON(json.RawMessage(v)))
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

// reserve holds the call's id on its session, if no other call holds it.
func (m *mcpRoute) reserve(c *mcpCall) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byID[c.key] != nil {
		return false
	}
	m.byID[c.key] = c
	return true
}

// release lets the call's id go, when its tools/call has been answered.
func (m *mcpRoute) release(c *mcpCall) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byID[c.key] == c {
		delete(m.byID, c.key)
	}
}

// forget unregisters a forwarded call that has ended.
func (m *mcpRoute) forget(c *mcpCall) {
	m.dropShared(c.k)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls[c.k] == c {
		delete(m.calls, c.k)
	}
	m.ended()
}

// dropShared forgets the hop's call in the store (the sweeper would).
func (m *mcpRoute) dropShared(k store.HopKey) {
	if m.shared == nil {
		return
	}
	ctx, cancel := context.WithTimeout(m.life, 5*time.Second)
	defer cancel()
	if err := m.shared.dropCall(ctx, k); err != nil {
		m.s.log.Warn("forgetting a forwarded call in the store (the sweeper will)", "route", m.cfg.Name, "iss", k.Iss, "hop", k.Hop, "err", oneLine(err))
	}
}

// ended counts one forwarded call or cancel ended (under mu).
func (m *mcpRoute) ended() {
	if m.active--; m.active == 0 {
		m.idle.Broadcast()
	}
}

// cancelled takes a notifications/cancelled that carries a signed
// cancel, or names a tools/call with a Handoff in hand. The caller's
// own, unsigned end of such a request (its SDK sends one when a call's
// context ends) is not passed on: it does not stop taken work.
func (m *mcpRoute) cancelled(w http.ResponseWriter, req *http.Request, p rpcParams) {
	v, signed := p.carries()
	w.WriteHeader(http.StatusAccepted) // a notification has no answer
	if !signed {
		return
	}
	var s string
	if err := jsonv2.Unmarshal(v, &s); err != nil {
		m.s.log.Warn("a cancel's _meta value is not a string (compact JWS or base64url COSE): ignored", "route", m.cfg.Name)
		return
	}
	el := handoff.ParseElementText(s)
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
// forwarded call, if one is open here, or else open on another replica
// (noted in the store); it does not block.
func (m *mcpRoute) stop(iss, hop string) {
	k := store.HopKey{Iss: iss, Hop: hop}
	m.mu.Lock()
	c := m.calls[k]
	if c != nil && c.stopped || c == nil && m.shared == nil {
		m.mu.Unlock()
		return
	}
	if c != nil {
		c.stopped = true
	}
	m.active++
	m.mu.Unlock()
	go func() {
		defer func() { m.mu.Lock(); m.ended(); m.mu.Unlock() }()
		if c == nil {
			// Another replica's call, if any: taking it is the claim.
			ctx, cancel := context.WithTimeout(m.life, 5*time.Second)
			taken, err := m.shared.takeCall(ctx, k)
			cancel()
			if err != nil {
				m.s.log.Error("reading the stopped hop's forwarded call from the store; no upstream cancel", "route", m.cfg.Name, "iss", iss, "hop", hop, "err", oneLine(err))
			}
			if c = taken; c == nil {
				return
			}
		} else {
			m.dropShared(k) // canceled from here: no other replica sends it
		}
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
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
