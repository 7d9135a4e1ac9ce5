package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// forward sends a taken hop's call to the upstream, once, and answers
// with its response carrying the signed outcome.
func (m *mcpRoute) forward(w http.ResponseWriter, req *http.Request, body []byte, c *mcpCall) {
	m.mu.Lock()
	m.calls[c.k] = c
	m.active++
	m.mu.Unlock()
	defer m.forget(c)
	ctx := context.WithoutCancel(req.Context())
	if m.shared != nil {
		// Noted before the record is read again (below), as the local
		// registration: a cancel on another replica marks the record,
		// then takes this note.
		nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := m.shared.noteCall(nctx, c); err != nil {
			m.s.log.Warn("noting a forwarded call in the store: a cancel on another replica will not reach it", "route", m.cfg.Name, "iss", c.k.Iss, "hop", c.k.Hop, "err", oneLine(err))
		}
		cancel()
	}
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
		writeResult(w, c.id, toolResult(st, true, why+": the tool was not called"))
		return
	}

	// The call lives as long as the route (it is read to its end even
	// after the caller went away), in the caller's trace, or until the
	// route's call_timeout: then the upstream is sent a cancel, and the
	// hop's outcome is unknown (the tool may have done its work).
	callCtx := withTraceOf(m.life, req.Context())
	if d := m.cfg.CallTimeout; d > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeoutCause(callCtx, d, callTimeout(d))
		defer cancel()
		defer func() {
			if errors.Is(callCtx.Err(), context.DeadlineExceeded) {
				m.s.log.Warn("a forwarded call got no answer within call_timeout: canceled upstream", "route", m.cfg.Name, "iss", c.k.Iss, "hop", c.k.Hop, "call_timeout", d.String())
				m.stop(c.k.Iss, c.k.Hop)
			}
		}()
	}
	if m.s.links != nil {
		// The tool's own outbound calls pass this hop on (links.go): the
		// request carries its link, and its trace id names it too.
		tid := ""
		if sc := trace.SpanContextFromContext(callCtx); sc.IsValid() {
			tid = sc.TraceID().String()
		}
		if tok := m.s.links.note(c.k.Iss, c.k.Hop, c.h, tid, "", m.s.cfg.Load().Policy.EffectiveSkew()); tok != "" {
			callCtx = context.WithValue(callCtx, linkTokenKey{}, tok)
		}
	}
	out, err := http.NewRequestWithContext(callCtx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		m.unreachable(ctx, w, c, err)
		return
	}
	copyHeaders(out.Header, req.Header)
	for _, k := range notForwarded {
		out.Header.Del(k)
	}
	start := time.Now()
	defer func() {
		m.s.metrics.upstreamLatency.WithLabelValues(m.cfg.Name, "mcp").Observe(time.Since(start).Seconds())
	}()
	resp, err := m.hc.Do(out)
	if err != nil {
		if t := callTimeout(0); errors.As(context.Cause(callCtx), &t) {
			err = t
		}
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
			writeResult(w, c.id, toolResult(c.accepted, true, why+"; the hop is accepted, its outcome not known"))
			return
		}
		r, _, err := readRPC(b)
		if key, ok := idKey(r.ID); err != nil || !ok || key != c.key.id || r.Method != "" {
			why := "the upstream answered the call with something other than its JSON-RPC response"
			m.unknown(ctx, c, why)
			writeResult(w, c.id, toolResult(c.accepted, true, why+"; the hop is accepted, its outcome not known"))
			return
		}
		writeJSON(w, http.StatusOK, m.settle(ctx, c, r))
	default:
		// The upstream's own answer (a 404 for an ended session, say)
		// goes back as it is, for the caller's MCP client to act on. A
		// 4xx says the server did not take the message (MCP, streamable
		// HTTP): nothing ran. Anything else (a 5xx, a 202 as if the call
		// were a notification) says nothing sure, on any route: only
		// the tool's own failure is "failed" on an effect-free route.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage))
		why := fmt.Sprintf("the upstream answered the call with HTTP %d", resp.StatusCode)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			m.finish(ctx, c, delegate.Outcome{State: store.Failed, NoEffect: true, Detail: why + ": it did not take the call"})
		} else {
			m.unknown(ctx, c, why)
		}
		copyHeaders(w.Header(), resp.Header)
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		w.Write(b)
	}
}

// callTimeout is the cause of a forwarded call's end at the route's
// call_timeout.
type callTimeout time.Duration

func (t callTimeout) Error() string {
	return fmt.Sprintf("no answer within the route's call_timeout (%s)", time.Duration(t))
}

// notForwarded are the caller's headers a forwarded call goes without:
// Accept-Encoding (the gateway reads the answer: Go's client then asks
// for gzip itself and decompresses it), the idempotency keys (with one,
// Go's client takes a POST for safe to send again on a dropped
// connection, and the tool could run twice), and the forwarding
// headers, which only a proxy the upstream trusts may write.
var notForwarded = []string{"Accept-Encoding", "Idempotency-Key", "X-Idempotency-Key",
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"}

// unreachable answers a call the upstream did not answer at all: a
// failed dial never reached it (failed, no effect); any other error (a
// connection cut after the request went) leaves what it did unknown,
// on any route.
func (m *mcpRoute) unreachable(ctx context.Context, w http.ResponseWriter, c *mcpCall, err error) {
	why := "the upstream could not be called: " + err.Error()
	if t := callTimeout(0); errors.As(err, &t) {
		why = "the upstream did not answer: " + t.Error()
	}
	var st *handoff.Element
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		st = m.finish(ctx, c, delegate.Outcome{State: store.Failed, NoEffect: true, Detail: why})
	} else {
		st = m.unknownStatus(ctx, c, why)
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
	// A caller that stops reading must not hold the upstream's answer:
	// each write has a deadline (writeAllowance), and a caller that
	// misses it is gone (the exchange goes on to the response, which is
	// recorded, for the caller's retransmission).
	rc := http.NewResponseController(w)
	gone := false
	send := func(b []byte) {
		if gone {
			return
		}
		rc.SetWriteDeadline(time.Now().Add(writeAllowance(len(b))))
		if _, err := w.Write(b); err != nil {
			gone = true
			return
		}
		if rc.Flush() != nil {
			gone = true
		}
	}
	defer func() {
		if !gone {
			rc.SetWriteDeadline(time.Time{})
		}
	}()
	send(nil)
	sr := newSSEReader(resp.Body)
	for {
		ev, err := sr.next()
		if len(ev.lines) > 0 {
			// Every event is passed on as the gateway read it (its lines
			// ending in LF), never as the upstream wrote it: the caller's
			// parser then sees the events the gateway saw.
			if r, ok := ev.response(c.key.id); ok {
				send(ev.with(m.settle(ctx, c, r)))
				// The stream of a POST ends with its response (MCP says
				// the server SHOULD close it): whatever follows is not
				// read, and closing the body ends the exchange.
				return
			}
			send(ev.bytes())
		}
		if err != nil {
			why := "the upstream's stream ended without the call's response"
			if t := callTimeout(0); errors.As(context.Cause(resp.Request.Context()), &t) {
				why = "the upstream's stream gave no response to the call: " + t.Error()
				// The caller is told, as on every other end without the
				// tool's answer, rather than left waiting on a stream
				// that will not carry it.
				send(sseEvent{lines: [][]byte{[]byte("event: message")}}.with(
					rpcResponse(c.id, toolResult(c.accepted, true, why+"; the call is canceled upstream, the hop is accepted, its outcome not known"))))
			} else if !errors.Is(err, io.EOF) {
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
		noteFailed(ctx)
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
	out := withStatus(res, st)
	if string(out["isError"]) == "true" {
		noteFailed(ctx) // the answer may go in a stream, which the metric does not read
	}
	return rpcResponse(c.id, out)
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
