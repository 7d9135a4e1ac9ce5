package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/a2asrv"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// The egress is the gateway's other half (issue 17): the agent behind
// the gateway calls other agents and tool servers through it, one route
// per downstream, and for each outbound A2A message or MCP tool call the
// gateway signs an offer as identity.id (the agent's key never leaves
// the gateway), with aud the downstream's AgentId and dialog the
// outbound contextId or Mcp-Session-Id. The offer passes on the inbound
// hop the call serves (links.go): prev is the inbound offer's digest and
// the chain is the inbound chain plus the inbound offer, octets
// unchanged. A call with no link starts a new chain, and is counted,
// logged and flagged for the operator (flagUnlinked).
//
// The gateway is then the delegator (package delegator, the hop in the
// shared store): it verifies the downstream's statuses and takes them
// in; when a reply is lost (the connection breaks after the request
// went, a stream ends before the answer) it asks again, sending the
// identical offer, until a final status comes or the offer expires, so
// that the work is done once and its answer still reaches the agent;
// and when the inbound hop is canceled (or its offer equivocated), it
// cancels every hop it issued for it (cancelDown), which the
// downstream's gateway passes on in turn.
//
// A request the agent already carries a handoff in (an agent that signs
// its own) passes untouched, as does everything that is not a new
// outbound task or tool call (initialize, streams, tasks/get, ...).
type egress struct {
	s      *Server
	tr     delegator.Tracking
	dl     map[handoff.Form]*delegator.Delegator // by the form of the offers signed
	routes []*egressRoute
	mux    *http.ServeMux

	mu    sync.Mutex
	out   map[string]*outbound // hop -> a call whose cancel can still be sent
	order []string             // out's hops, oldest first (some may be gone)
	tasks map[string]*outbound // route + "\x00" + downstream task id -> its A2A hop
}

// flagUnlinked is the operator's flag for an outbound call that could
// not be linked to the inbound hop it serves: its offer started a new
// chain, and the downstream cannot tell who asked for the work.
const flagUnlinked = "unlinked-egress"

// egressRoute is one downstream.
type egressRoute struct {
	cfg   EgressRoute
	e     *egress
	token string // sent as Authorization: Bearer; "" for none
	hc    *http.Client
	pass  *httputil.ReverseProxy
	card  cardCache // a2a: the downstream's card, served as the egress's
	// speaks: a verified status has come from this downstream, so it
	// is a delegate that answers a retransmission from its record;
	// until then a lost reply is not asked for again (a plain server
	// would run the work again).
	speaks atomic.Bool
	// unlinkedAt: when the route last raised an unlinked-egress flag
	// (unix nanoseconds); at most one a minute, the rest counted and
	// logged.
	unlinkedAt atomic.Int64
}

// outbound is one hop issued through the egress, while a cancel for it
// can still be sent.
type outbound struct {
	r    *egressRoute
	hop  string
	exp  time.Time
	form handoff.Form // its offer's, and so its cancel's
	url  string       // where the call went
	auth string       // the Authorization it carried ("" for none)

	mu      sync.Mutex
	session string           // mcp: the Mcp-Session-Id
	proto   string           // mcp: the Mcp-Protocol-Version
	reqID   json.RawMessage  // mcp: the id of the request downstream now
	task    string           // a2a: the downstream's task, once a reply named it
	pending *handoff.Element // a2a: a cancel to send once a reply names the task
}

// maxOutbound bounds the A2A hops kept for their cancels and follow-ups.
const maxOutbound = 1 << 16

func newEgress(s *Server, c *Config, res *Resources, tr delegator.Tracking) (*egress, error) {
	e := &egress{s: s, tr: tr, dl: map[handoff.Form]*delegator.Delegator{}, mux: http.NewServeMux(),
		out: map[string]*outbound{}, tasks: map[string]*outbound{}}
	for _, f := range []handoff.Form{handoff.FormJWS, handoff.FormCOSE} {
		dl, err := delegator.New(delegator.Config{Me: c.Identity.ID, Signer: res.Signer, Keys: liveKeys{s}, Store: tr, Form: f,
			Skew: c.Policy.Options(c.Identity.ID, nil).Skew})
		if err != nil {
			return nil, err
		}
		e.dl[f] = dl
	}
	for _, rc := range c.Egress.Routes {
		r := &egressRoute{cfg: rc, e: e, token: res.EgressTokens[rc.Name]}
		r.speaks.Store(rc.SpeaksHandoff)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		// No redirect is followed: the offer would go elsewhere than
		// its aud's URL.
		r.hc = &http.Client{Transport: traceTransport{base: tr}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		r.pass = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL = r.downstreamURL(pr.In.URL)
				pr.Out.Host = ""
				r.authorize(pr.Out.Header)
			},
			Transport:     traceTransport{base: tr},
			FlushInterval: -1,
			ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		}
		r.card.base = rc.URL.String()
		e.routes = append(e.routes, r)
		h := s.instrument(Route{Name: "egress/" + rc.Name, Protocol: rc.Protocol}, http.StripPrefix(strings.TrimSuffix(rc.Path, "/"), http.HandlerFunc(r.serve)))
		e.mux.Handle(rc.Path, h)
		if rc.Path != "/" {
			e.mux.Handle(strings.TrimSuffix(rc.Path, "/"), h)
		}
	}
	return e, nil
}

// EgressHandler serves the egress routes (egress.listen); a gateway
// with none answers 404.
func (s *Server) EgressHandler() http.Handler {
	if s.egress == nil {
		return http.NotFoundHandler()
	}
	return s.egress.mux
}

func (r *egressRoute) downstreamURL(in *url.URL) *url.URL {
	u := *r.cfg.URL
	if p := strings.TrimPrefix(in.Path, "/"); p != "" {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/" + p
		u.RawPath = ""
	}
	u.RawQuery = in.RawQuery
	return &u
}

// authorize sets the downstream's credentials: the route's token, or
// (with none configured) whatever the agent sent. The link is the
// gateway's, never the downstream's to see.
func (r *egressRoute) authorize(h http.Header) {
	h.Del(LinkHeader)
	if r.token != "" {
		h.Set("Authorization", "Bearer "+r.token)
	}
}

func (r *egressRoute) serve(w http.ResponseWriter, req *http.Request) {
	// Only the agent beside the gateway calls out: never a web page in a
	// browser on the host (a cross-origin request carries Origin; a
	// rebound DNS name, a Host that is not loopback), whose request
	// would otherwise be signed as the agent.
	if sfs := req.Header.Get("Sec-Fetch-Site"); req.Header.Get("Origin") != "" || !isLoopback(req.Host) || sfs != "" && sfs != "none" && sfs != "same-origin" {
		http.Error(w, "Forbidden: the egress takes requests from the agent on this host only (no Origin header, no cross-site Sec-Fetch-Site, a loopback Host)", http.StatusForbidden)
		return
	}
	if r.cfg.Protocol == "a2a" {
		switch req.URL.Path {
		case a2asrv.WellKnownAgentCardPath, "/.well-known/agent.json":
			noteMethod(req.Context(), "agent-card")
			r.serveCard(w, req)
			return
		}
	}
	if req.Method != http.MethodPost {
		r.pass.ServeHTTP(w, req)
		return
	}
	if mediaType(req.Header) != "application/json" {
		http.Error(w, "Unsupported Media Type: a JSON-RPC request is application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxMCPMessage+1))
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body) > maxMCPMessage {
		http.Error(w, fmt.Sprintf("Request Entity Too Large: over %d bytes", maxMCPMessage), http.StatusRequestEntityTooLarge)
		return
	}
	msg, top, err := readRPC(body)
	if err != nil {
		r.passBody(w, req, body) // not for the egress to judge: the downstream answers it
		return
	}
	noteMethod(req.Context(), msg.Method)
	switch {
	case r.cfg.Protocol == "mcp" && msg.Method == "tools/call":
		r.toolCall(w, req, body, msg, top)
	case r.cfg.Protocol == "a2a" && (msg.Method == "message/send" || msg.Method == "message/stream"):
		r.sendMessage(w, req, body, msg, top)
	case r.cfg.Protocol == "a2a" && msg.Method == "tasks/cancel":
		r.cancelTask(w, req, body, msg, top)
	case r.cfg.Protocol == "a2a":
		// tasks/get, tasks/resubscribe, ...: passed on, and the statuses
		// their answers carry for a hop of ours taken in.
		r.forwardA2A(w, req, body, nil, msg.ID, plain)
	default:
		r.passBody(w, req, body)
	}
}

// passBody passes a request whose body was read on as it is.
func (r *egressRoute) passBody(w http.ResponseWriter, req *http.Request, body []byte) {
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	r.pass.ServeHTTP(w, req)
}

// sign issues the offer for an outbound call: linked to the inbound hop
// when one was found, else starting a new chain (counted, logged and
// flagged).
func (e *egress) sign(ctx context.Context, r *egressRoute, dialog string, link *inboundLink, how, why, what string) (*handoff.Handoff, *store.Issued, error) {
	form := handoff.FormJWS
	spec := delegator.Offer{Aud: r.cfg.AgentID, Dialog: dialog, TTL: r.cfg.EffectiveTTL(),
		// Each outbound call is new work; the agent's retry of a call is
		// its own new call (it cannot know the hop).
		Work: "egress " + r.cfg.Name + " " + newToken()}
	if link != nil {
		// The work of a stopped hop is not passed on: its downstream
		// hops were canceled with it (cancelDown).
		if e.s.links.isStopped(link) {
			return nil, nil, fmt.Errorf("%w: hop %s of %s", errStopped, link.key.Hop, link.key.Iss)
		}
		switch rec, err := e.s.store.Get(ctx, link.key.Iss, link.key.Hop); {
		case err != nil:
			// Fail safe: a hop canceled on another replica must not be
			// passed on because its record could not be read.
			return nil, nil, fmt.Errorf("the record of the inbound hop %s of %s could not be read: %w", link.key.Hop, link.key.Iss, err)
		case rec.Canceled || rec.Equivocated:
			// Stopped on another replica.
			e.s.links.stop(link.key.Iss, link.key.Hop)
			return nil, nil, fmt.Errorf("%w: hop %s of %s", errStopped, link.key.Hop, link.key.Iss)
		}
		form = link.h.Offer.Form
		spec.From = link.h
		if o, _, err := handoff.UnsafeDecode(link.h.Offer); err == nil && o != nil {
			spec.Obo = o.Obo // on whose behalf the work is done goes on with it
		}
	}
	h, iss, err := e.dl[form].Offer(ctx, spec)
	if err != nil {
		return nil, nil, err
	}
	if link == nil && r.cfg.StartsChains {
		how = "origin"
	}
	e.s.metrics.egressOffers.WithLabelValues(r.cfg.Name, how).Inc()
	attrs := []any{"route", "egress/" + r.cfg.Name, "protocol", r.cfg.Protocol, "call", what, "hop", iss.Hop, "aud", iss.Aud, "dialog", dialog, "link", how}
	switch {
	case link != nil:
		attrs = append(attrs, "inbound_iss", link.key.Iss, "inbound_hop", link.key.Hop, "chain", len(h.Chain))
		e.s.log.Info("outbound offer", attrs...)
		return h, iss, nil
	case r.cfg.StartsChains:
		e.s.log.Info("outbound offer starting a chain", attrs...)
		return h, iss, nil
	}
	e.s.log.Warn("outbound offer with no link to an inbound hop: a new chain", append(attrs, "why", why)...)
	// An agent that passes no link on makes every call unlinked: one
	// flag a minute per route says so without flooding the operator's
	// list (the metric and the log count every call).
	now := time.Now()
	if last := r.unlinkedAt.Load(); now.UnixNano()-last < int64(time.Minute) || !r.unlinkedAt.CompareAndSwap(last, now.UnixNano()) {
		return h, iss, nil
	}
	if _, err := e.s.store.Raise(ctx, store.Flag{Kind: flagUnlinked, Iss: e.s.cfg.Load().Identity.ID, Hop: iss.Hop, Created: time.Now(),
		Detail: fmt.Sprintf("egress route %s: %s to %s was signed as a new chain: no inbound hop it serves was found (%s); one flag a minute per route: handoff_gateway_egress_offers_total{link=\"unlinked\"} counts them all", r.cfg.Name, what, iss.Aud, why)}); err != nil {
		e.s.log.Error("flagging an unlinked outbound call failed", "hop", iss.Hop, "err", oneLine(err))
	}
	return h, iss, nil
}

// errStopped: the inbound hop a call serves was canceled (or its offer
// equivocated); no offer is signed for it.
var errStopped = errors.New("the work this call serves was stopped (its hop was canceled, or its offer equivocated)")

// canceled reports whether an outbound hop was canceled meanwhile (a
// cancel that came between its offer and its call being tracked).
func (e *egress) canceled(ctx context.Context, hop string) bool {
	h, err := e.tr.IssuedHop(ctx, hop)
	return err == nil && h.View == store.ViewCanceled
}

// handoffMember is h as a carrier's metadata value (mcphandoff and
// a2ahandoff write it alike): the JSON Handoff for JWS elements, the
// base64url CBOR Handoff for COSE ones.
func handoffMember(h *handoff.Handoff) (jsontext.Value, error) {
	enc := handoff.JSON
	if h.Offer.Form == handoff.FormCOSE {
		enc = handoff.CBOR
	}
	v, err := mcphandoff.HandoffValue(h, enc)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	return jsontext.Value(b), err
}

// withMember is the JSON object obj with member k set to v.
func withMember(obj map[string]jsontext.Value, k string, v jsontext.Value) map[string]jsontext.Value {
	out := maps.Clone(obj)
	if out == nil {
		out = map[string]jsontext.Value{}
	}
	out[k] = v
	return out
}

func marshalObj(obj map[string]jsontext.Value) jsontext.Value {
	b, err := jsonv2.Marshal(obj, jsonv2.Deterministic(true))
	if err != nil {
		panic("gateway: marshaling raw JSON members: " + err.Error()) // every value was read as JSON
	}
	return b
}

// track keeps o for its cancel (and, on an A2A route, its follow-ups)
// while it may need one.
func (e *egress) track(o *outbound) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(e.out) >= maxOutbound && len(e.order) > 0 {
		e.forgetLocked(e.order[0]) // the oldest first
		e.order = e.order[1:]
	}
	if len(e.order) > 2*maxOutbound {
		// Most are forgotten already: keep the live ones, in order.
		keep := make([]string, 0, len(e.out))
		for _, h := range e.order {
			if e.out[h] != nil {
				keep = append(keep, h)
			}
		}
		e.order = keep
	}
	e.out[o.hop] = o
	e.order = append(e.order, o.hop)
}

func (e *egress) forget(hop string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.forgetLocked(hop)
}

func (e *egress) forgetLocked(hop string) {
	o := e.out[hop]
	if o == nil {
		return
	}
	delete(e.out, hop)
	o.mu.Lock()
	task := o.task
	o.mu.Unlock()
	if task != "" && e.tasks[o.r.cfg.Name+"\x00"+task] == o {
		delete(e.tasks, o.r.cfg.Name+"\x00"+task)
	}
}

// take verifies a status from the downstream for hop and takes it in;
// a status that does not verify is flagged. It returns the hop as it
// now stands (nil when the status was refused).
func (e *egress) take(ctx context.Context, r *egressRoute, hop string, st handoff.Element) *store.Issued {
	iss, err := e.dl[handoff.FormJWS].Intake(ctx, hop, st) // the form of the delegator's own signatures does not matter here
	if err != nil {
		e.s.metrics.egressStatuses.WithLabelValues(r.cfg.Name, "refused").Inc()
		e.s.log.Warn("a downstream's status for an outbound hop was refused", "route", "egress/"+r.cfg.Name, "hop", hop, "err", oneLine(err))
		if _, ferr := e.s.store.Raise(ctx, store.Flag{Kind: store.FlagConflictingInputs, Iss: e.s.cfg.Load().Identity.ID, Hop: hop, Created: time.Now(),
			Key: "refused status", Detail: fmt.Sprintf("egress route %s: the downstream sent a status that was refused: %v", r.cfg.Name, err)}); ferr != nil {
			e.s.log.Error("flagging a refused status failed", "hop", hop, "err", oneLine(ferr))
		}
		return nil
	}
	e.s.metrics.egressStatuses.WithLabelValues(r.cfg.Name, string(iss.View)).Inc()
	if _, st, err := handoff.UnsafeDecode(st); err == nil && st != nil && st.Iss == r.cfg.AgentID {
		// Verified, and signed by the downstream itself (not a third
		// agent's misdelivered rejection a plain relay passed on): it
		// runs the checks, and answers a retransmission from its record.
		r.speaks.Store(true)
	}
	if iss.Resolved && r.cfg.Protocol == "a2a" {
		e.forget(hop) // nothing more to cancel or follow
	}
	return iss
}

func (e *egress) outOf(hop string) *outbound {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out[hop]
}

// unknown flags an outbound hop whose outcome the gateway could not
// learn: it stays unresolved (draft "Knowing the Outcome": never guess).
func (e *egress) unknown(ctx context.Context, r *egressRoute, hop, why string) {
	if r.cfg.Protocol == "a2a" {
		e.forget(hop)
	}
	e.s.metrics.egressStatuses.WithLabelValues(r.cfg.Name, "unknown").Inc()
	e.s.log.Warn("outbound hop outcome unknown: flagged for the operator", "route", "egress/"+r.cfg.Name, "hop", hop, "why", why)
	if _, err := e.s.store.Raise(ctx, store.Flag{Kind: store.FlagUnknownOutcome, Iss: e.s.cfg.Load().Identity.ID, Hop: hop, Created: time.Now(),
		Key: "egress", Detail: fmt.Sprintf("egress route %s: %s", r.cfg.Name, why)}); err != nil {
		e.s.log.Error("flagging an outbound hop's unknown outcome failed", "hop", hop, "err", oneLine(err))
	}
}

// notTaken resolves an outbound hop whose offer never reached the
// downstream, or that it refused before reading (a failed dial, a 4xx):
// an authoritative observation that the work took no effect.
func (e *egress) notTaken(ctx context.Context, r *egressRoute, hop, why string) {
	e.forget(hop)
	if err := e.dl[handoff.FormJWS].Observe(ctx, hop); err != nil {
		e.s.log.Error("resolving an outbound hop that was not taken failed", "hop", hop, "err", oneLine(err))
		return
	}
	e.s.metrics.egressStatuses.WithLabelValues(r.cfg.Name, "not-taken").Inc()
	e.s.log.Info("outbound hop not taken by the downstream: resolved", "route", "egress/"+r.cfg.Name, "hop", hop, "why", why)
}

// cancelDown cancels every hop this gateway issued for the inbound hop
// (iss, hop), which was canceled or whose offer equivocated, and sends
// each downstream its signed "canceled".
func (e *egress) cancelDown(iss, hop string) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	rec, err := e.s.store.Get(ctx, iss, hop)
	if err != nil {
		e.s.log.Error("canceling the hops issued for a stopped hop: its record could not be read", "iss", iss, "hop", hop, "err", oneLine(err))
		return
	}
	e.s.links.stop(iss, hop) // a call for its work gets no offer any more
	// delegator.CancelDown, with each hop's cancel in its offer's form.
	issued, err := e.tr.ByPrev(ctx, rec.Digest)
	if err != nil {
		e.s.log.Error("canceling the hops issued for a stopped hop failed", "iss", iss, "hop", hop, "err", oneLine(err))
	}
	for _, h := range issued {
		st, h2, err := e.dl[h.OfferForm].Cancel(ctx, h.Hop)
		if err != nil {
			e.s.log.Error("canceling an outbound hop failed", "hop", h.Hop, "err", oneLine(err))
			continue
		}
		o := e.outOf(h.Hop)
		if o == nil {
			if !h2.Resolved {
				e.s.log.Warn("an outbound hop was canceled, but its call is not known here (ended, or on another replica): no cancel sent",
					"inbound_hop", hop, "hop", h.Hop, "aud", h.Aud)
			}
			continue
		}
		if o.r.cfg.Protocol == "mcp" {
			err = o.r.cancelCall(ctx, o, st)
		} else {
			err = o.r.cancelDownTask(ctx, o, st)
		}
		result := "sent"
		if err != nil {
			result = "failed"
			e.s.log.Warn("sending an outbound hop its cancel failed", "route", "egress/"+o.r.cfg.Name, "hop", o.hop, "err", oneLine(err))
		} else {
			e.s.log.Info("outbound hop canceled: the inbound hop it serves was stopped", "route", "egress/"+o.r.cfg.Name, "hop", o.hop, "inbound_iss", iss, "inbound_hop", hop)
		}
		e.s.metrics.egressCancels.WithLabelValues(o.r.cfg.Name, result).Inc()
	}
}

// post sends body downstream with the agent's headers (its credentials
// replaced by the route's), in ctx.
func (r *egressRoute) post(ctx context.Context, in *http.Request, body []byte) (*http.Response, error) {
	return r.postTo(ctx, r.downstreamURL(in.URL).String(), in, body)
}

// postTo is post to the downstream URL u.
func (r *egressRoute) postTo(ctx context.Context, u string, in *http.Request, body []byte) (*http.Response, error) {
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	auth := in.Header.Get("Authorization")
	copyHeaders(out.Header, in.Header)
	for _, k := range notForwarded {
		out.Header.Del(k)
	}
	if auth != "" {
		out.Header.Set("Authorization", auth)
	}
	r.authorize(out.Header)
	return r.hc.Do(out)
}

// asking is the schedule of asking again after a lost reply: soon, then
// less often, until the offer's exp.
type asking struct {
	wait time.Duration
	exp  time.Time
}

// next waits before the next ask; false when the offer has expired (or
// ctx ended) first.
func (a *asking) next(ctx context.Context) bool {
	if a.wait == 0 {
		a.wait = 200 * time.Millisecond
	}
	if !time.Now().Add(a.wait).Before(a.exp) {
		return false
	}
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	a.wait = min(2*a.wait, 5*time.Second)
	return true
}

func mediaType(h http.Header) string {
	ct, _, _ := strings.Cut(h.Get("Content-Type"), ";")
	return strings.TrimSpace(strings.ToLower(ct))
}

// sseWriter writes server-sent events to the agent, each flushed, and
// stops writing (but never blocks the exchange) once the agent is gone.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	gone    bool
}

func (s *sseWriter) start(h http.Header) {
	if s.started {
		return
	}
	s.started = true
	s.rc = http.NewResponseController(s.w)
	copyHeaders(s.w.Header(), h)
	s.w.Header().Del("Content-Length")
	s.w.Header().Set("Content-Type", "text/event-stream")
	s.w.WriteHeader(http.StatusOK)
	s.send(nil)
}

func (s *sseWriter) send(b []byte) {
	if s.gone {
		return
	}
	s.rc.SetWriteDeadline(time.Now().Add(writeAllowance(len(b))))
	if _, err := s.w.Write(b); err != nil || s.rc.Flush() != nil {
		s.gone = true
	}
}

// withID is the JSON-RPC message top with its id set to id.
func withID(top map[string]jsontext.Value, id json.RawMessage) []byte {
	return marshalObj(withMember(top, "id", jsontext.Value(id)))
}

// askID is the id of the n-th ask for hop: the agent's id stays its own
// call's, and an ask never collides with it on the session.
func askID(hop string, n int) json.RawMessage {
	return mustJSON(fmt.Sprintf("handoff-ask-%d-%s", n, hop))
}
