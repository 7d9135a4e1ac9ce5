package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// toolCall signs an offer for the agent's tools/call, sends it with the
// call, and answers the agent with the downstream's response (its
// status taken in). A reply lost on the way is asked again for with the
// identical offer (under a request id of the gateway's), until the
// downstream says what became of the work or the offer expires: the
// downstream's gateway answers a retransmission from its record, so the
// tool runs once.
func (r *egressRoute) toolCall(w http.ResponseWriter, req *http.Request, body []byte, msg rpcMessage, top map[string]jsontext.Value) {
	p, err := readParams(msg.Params)
	if err != nil {
		writeRPCError(w, msg.ID, http.StatusOK, -32602, "handoff egress: "+err.Error())
		return
	}
	if _, has := p.carries(); has {
		r.passBody(w, req, body) // the agent signs its own offers
		return
	}
	if _, ok := idKey(msg.ID); !ok {
		writeRPCError(w, msg.ID, http.StatusOK, -32600, "handoff egress: a tools/call needs a string or integer id")
		return
	}
	session := req.Header.Get("Mcp-Session-Id")
	// The call is read to its end whatever the agent does, for as long
	// as the route allows.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), r.cfg.EffectiveCallTimeout())
	defer cancel()
	link, how, why := r.e.s.links.find(req.Header, "")
	h, iss, err := r.e.sign(ctx, r, session, link, how, why, fmt.Sprintf("tools/call %q", p.Name))
	if errors.Is(err, errStopped) {
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: "+err.Error())
		return
	}
	if err != nil {
		r.e.s.log.Error("signing an outbound offer failed", "route", "egress/"+r.cfg.Name, "err", oneLine(err))
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: the offer for this call could not be signed and recorded: "+err.Error())
		return
	}
	v, err := handoffMember(h)
	if err != nil {
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: the offer could not be written: "+err.Error())
		return
	}
	params := withMember(p.obj, "_meta", marshalObj(withMember(p.Meta, mcphandoff.Key, v)))
	top = withMember(top, "params", marshalObj(params))
	o := &outbound{r: r, hop: iss.Hop, exp: iss.Exp, form: iss.OfferForm, url: r.downstreamURL(req.URL).String(), auth: req.Header.Get("Authorization"),
		session: session, proto: req.Header.Get("Mcp-Protocol-Version"), reqID: msg.ID}
	r.e.track(o)
	defer r.e.forget(o.hop)
	if r.e.canceled(ctx, o.hop) {
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: "+errStopped.Error())
		return
	}
	r.callTool(ctx, w, req, top, msg.ID, o)
}

func (r *egressRoute) callTool(ctx context.Context, w http.ResponseWriter, req *http.Request, top map[string]jsontext.Value, agentID json.RawMessage, o *outbound) {
	sse := &sseWriter{w: w}
	answer := func(msg []byte) {
		if sse.started {
			sse.send(sseEvent{lines: [][]byte{[]byte("event: message")}}.with(msg))
			return
		}
		writeJSON(w, http.StatusOK, msg)
	}
	ask := asking{exp: o.exp}
	why := ""
	for n := 0; ; n++ {
		id := agentID
		if n > 0 {
			id = askID(o.hop, n)
			r.e.s.metrics.egressAsks.WithLabelValues(r.cfg.Name).Inc()
			r.e.s.log.Info("asking again for an outbound hop whose reply was lost", "route", "egress/"+r.cfg.Name, "hop", o.hop, "ask", n, "why", why)
		}
		key, _ := idKey(id)
		o.mu.Lock()
		o.reqID = id
		o.mu.Unlock()
		resp, err := r.post(ctx, req, withID(top, id))
		switch {
		case err != nil && n == 0 && dialFailed(err):
			r.e.notTaken(ctx, r, o.hop, "the downstream could not be reached: "+err.Error())
			writeRPCError(w, agentID, http.StatusOK, -32603, "handoff egress: the downstream could not be reached: "+err.Error())
			return
		case err != nil && ctx.Err() != nil:
			why = fmt.Sprintf("no answer within the route's call_timeout (%s)", r.cfg.EffectiveCallTimeout())
		case err != nil:
			why = "the request or its reply was lost: " + err.Error()
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			// Never followed, never passed on: the agent's client would
			// follow it, with or without the gateway.
			resp.Body.Close()
			r.e.notTaken(ctx, r, o.hop, fmt.Sprintf("the downstream answered with a redirect (HTTP %d), which is not followed", resp.StatusCode))
			answer(rpcErrorJSON(agentID, fmt.Sprintf("handoff egress: the downstream answered with a redirect (HTTP %d), which is not followed", resp.StatusCode)))
			return
		case resp.StatusCode == http.StatusOK && mediaType(resp.Header) == "text/event-stream":
			sse.start(resp.Header)
			done := false
			why, done = r.readStream(ctx, sse, resp, o, key, agentID, n == 0)
			resp.Body.Close()
			if done {
				return
			}
		case resp.StatusCode == http.StatusOK && mediaType(resp.Header) != "text/event-stream":
			// JSON (MCP says application/json; a server that leaves the
			// type to be sniffed is read as JSON too).
			b, err := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage+1))
			resp.Body.Close()
			m, rtop, perr := readRPC(b)
			rkey, _ := idKey(m.ID)
			switch {
			case err != nil || len(b) > maxMCPMessage:
				why = fmt.Sprintf("the reply could not be read whole (%v)", err)
			case perr != nil || m.Method != "" || rkey != key:
				why = "the downstream answered with something other than the call's response"
			default:
				if final := r.takeResult(ctx, o, m, n == 0); final || n == 0 {
					answer(withID(rtop, agentID))
					return
				}
				why = "the downstream says the work is still running"
			}
		default:
			b, _ := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage))
			resp.Body.Close()
			if n == 0 && !sse.started {
				// The downstream's own answer (a 404 for an ended
				// session, say) goes back as it is. A 4xx says it did not
				// take the call (MCP, streamable HTTP); anything else
				// says nothing sure.
				if resp.StatusCode >= 400 && resp.StatusCode < 500 {
					r.e.notTaken(ctx, r, o.hop, fmt.Sprintf("the downstream answered HTTP %d", resp.StatusCode))
				} else {
					r.e.unknown(ctx, r, o.hop, fmt.Sprintf("the downstream answered the call with HTTP %d", resp.StatusCode))
				}
				copyHeaders(w.Header(), resp.Header)
				w.Header().Del("Content-Length")
				w.WriteHeader(resp.StatusCode)
				w.Write(b)
				return
			}
			r.e.unknown(ctx, r, o.hop, fmt.Sprintf("asking again was answered with HTTP %d", resp.StatusCode))
			answer(rpcErrorJSON(agentID, fmt.Sprintf("handoff egress: the reply was lost, and asking again was answered with HTTP %d: the work's outcome is not known", resp.StatusCode)))
			return
		}
		if ctx.Err() != nil || !r.speaks.Load() || !ask.next(ctx) {
			// A downstream never seen to answer with a signed status may
			// be a plain server, which would run the work again: it is
			// not asked again. Nor past the offer's exp, or the route's
			// call_timeout.
			switch {
			case ctx.Err() != nil:
			case !r.speaks.Load():
				why += "; the downstream has not answered with a signed status yet, so asking again could run the work twice: not asked"
			default:
				why += "; asking again brought no final answer before the offer expired"
			}
			r.e.unknown(ctx, r, o.hop, why)
			answer(rpcErrorJSON(agentID, "handoff egress: the work's outcome is not known: "+why))
			return
		}
	}
}

// readStream passes the downstream's events on to the agent until the
// call's response, which it takes in and passes on with the agent's id
// (done); without it, why the stream ended. first: the stream is the
// first attempt's, whose response is the agent's whatever it says.
func (r *egressRoute) readStream(ctx context.Context, sse *sseWriter, resp *http.Response, o *outbound, key string, agentID json.RawMessage, first bool) (why string, done bool) {
	sr := newSSEReader(resp.Body)
	for {
		ev, err := sr.next()
		if len(ev.lines) > 0 {
			if m, ok := ev.response(key); ok {
				if final := r.takeResult(ctx, o, m, first); final || first {
					_, rtop, _ := readRPC(ev.data)
					sse.send(ev.with(withID(rtop, agentID)))
					return "", true
				}
				return "the downstream says the work is still running", false
			}
			sse.send(ev.bytes()) // progress, the server's requests: the agent's
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return "the stream ended without the call's response", false
			}
			return "the stream broke before the call's response: " + err.Error(), false
		}
	}
}

// takeResult takes in the status a tools/call response carries, and
// says whether it is final: the hop resolved, or nothing more can be
// learned by asking again (an answer with no status, a refused one, a
// "rejected" that does not settle the hop: stale or replay, a
// delegate that does not remember it). A response with no status, or
// one that leaves the hop unresolved, is flagged when it is what the
// agent gets (answered).
func (r *egressRoute) takeResult(ctx context.Context, o *outbound, m rpcMessage, answered bool) (final bool) {
	var res struct {
		Meta map[string]any `json:"_meta"`
	}
	if m.Error != nil {
		switch {
		case answered && preExecution(m.Error.Code):
			r.e.notTaken(ctx, r, o.hop, fmt.Sprintf("the downstream refused the call: JSON-RPC error %d", m.Error.Code))
		default:
			r.e.unknown(ctx, r, o.hop, fmt.Sprintf("the downstream answered JSON-RPC error %d (%s) with no status", m.Error.Code, m.Error.Message))
		}
		return true
	}
	_ = json.Unmarshal(m.Result, &res)
	st, ok, err := mcphandoff.StatusFrom(res.Meta)
	if !ok || err != nil {
		why := "the downstream's result carries no status"
		if err != nil {
			why = "the downstream's result carries a status that cannot be read: " + err.Error()
		}
		r.e.unknown(ctx, r, o.hop, why)
		return true
	}
	iss := r.e.take(ctx, r, o.hop, st)
	if iss == nil {
		return true // refused and flagged: the agent gets the answer
	}
	if iss.Resolved {
		return true
	}
	if _, s, err := handoff.UnsafeDecode(st); err == nil && s != nil && s.State == handoff.StateRejected {
		// Verified, yet it does not settle the hop (stale, replay: the
		// delegate does not remember it). Asking again cannot help.
		r.e.unknown(ctx, r, o.hop, fmt.Sprintf("the downstream answered \"rejected\" (%s) without settling the hop: its outcome is not known", s.Reason))
		return true
	}
	if answered {
		r.e.unknown(ctx, r, o.hop, fmt.Sprintf("the downstream's answer leaves the hop %s: its outcome is not known", iss.View))
	}
	return false
}

// rpcErrorJSON is a JSON-RPC error response.
func rpcErrorJSON(id json.RawMessage, msg string) []byte {
	return mustJSON(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32603, "message": msg}})
}

// cancelCall sends the downstream a notifications/cancelled for the
// request in flight, carrying the signed "canceled".
func (r *egressRoute) cancelCall(ctx context.Context, o *outbound, st handoff.Element) error {
	o.mu.Lock()
	id, session, proto := o.reqID, o.session, o.proto
	o.mu.Unlock()
	body := mustJSON(map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": map[string]any{
		"requestId": id, "reason": "the work this call serves was canceled",
		"_meta": map[string]any{mcphandoff.Key: mcphandoff.StatusValue(st)}}})
	in, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, nil)
	if err != nil {
		return err
	}
	if o.auth != "" {
		in.Header.Set("Authorization", o.auth) // the call's own credentials (the route's token replaces them)
	}
	in.Header.Set("Content-Type", "application/json")
	in.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		in.Header.Set("Mcp-Session-Id", session)
	}
	if proto != "" {
		in.Header.Set("Mcp-Protocol-Version", proto)
	}
	resp, err := r.postTo(ctx, o.url, in, body)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the downstream answered the cancel with HTTP %d", resp.StatusCode)
	}
	return nil
}
