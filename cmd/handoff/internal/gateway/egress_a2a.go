package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aext"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
)

// sendMessage signs an offer for the agent's new outbound message (a
// message that continues a task of ours, or that already carries a
// handoff, passes on untouched), sends it in the message's metadata, and
// passes the downstream's answer on, its statuses taken in.
func (r *egressRoute) sendMessage(w http.ResponseWriter, req *http.Request, body []byte, msg rpcMessage, top map[string]jsontext.Value) {
	params, err := readObject(msg.Params, `the request's "params"`, "message", "configuration", "metadata")
	if err != nil {
		writeRPCError(w, msg.ID, http.StatusOK, -32602, "handoff egress: "+err.Error())
		return
	}
	m, err := readObject(params["message"], `"params.message"`, "metadata", "contextId", "taskId", "referenceTaskIds")
	if err != nil || m == nil {
		writeRPCError(w, msg.ID, http.StatusOK, -32602, "handoff egress: params.message is not a message object")
		return
	}
	var meta map[string]jsontext.Value
	if v, ok := m["metadata"]; ok && v.Kind() != 'n' {
		if meta, err = readObject(v, `"params.message.metadata"`, a2ahandoff.Key); err != nil {
			writeRPCError(w, msg.ID, http.StatusOK, -32602, "handoff egress: "+err.Error())
			return
		}
	}
	str := func(k string) string {
		var s string
		if v, ok := m[k]; ok {
			_ = jsonv2.Unmarshal(v, &s)
		}
		return s
	}
	if _, has := meta[a2ahandoff.Key]; has {
		r.forwardA2A(w, req, body, nil, msg.ID, plain) // the agent signs its own offers
		return
	}
	if t := str("taskId"); t != "" {
		// A follow-up in a task of ours (the downstream asked for input):
		// the hop's offer already covers it (a2ahandoff takes follow-ups
		// of a task without a new offer).
		r.forwardA2A(w, req, body, r.e.taskOut(r, t), msg.ID, plain)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), r.cfg.EffectiveCallTimeout())
	defer cancel()
	contextID := str("contextId")
	var refTasks []string
	if v, ok := m["referenceTaskIds"]; ok {
		_ = jsonv2.Unmarshal(v, &refTasks)
	}
	link, how, why := r.e.s.links.find(req.Header, contextID, refTasks...)
	if contextID == "" {
		// The offer's dialog is the conversation: a new one gets its id
		// here, as the downstream would have given it one.
		// Hex: no character a secret's shape could start with (decision 95).
		var b [12]byte
		rand.Read(b[:])
		contextID = "ctx-" + hex.EncodeToString(b[:])
		m = withMember(m, "contextId", mustJSONValue(contextID))
	}
	h, iss, err := r.e.sign(ctx, r, contextID, link, how, why, msg.Method)
	if errors.Is(err, errStopped) {
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: "+err.Error())
		return
	}
	if err != nil {
		r.e.s.log.Error("signing an outbound offer failed", "route", "egress/"+r.cfg.Name, "err", oneLine(err))
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: the offer for this message could not be signed and recorded: "+err.Error())
		return
	}
	v, err := handoffMember(h)
	if err != nil {
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: the offer could not be written: "+err.Error())
		return
	}
	m = withMember(m, "metadata", marshalObj(withMember(meta, a2ahandoff.Key, v)))
	params = withMember(params, "message", marshalObj(m))
	out := withID(withMember(top, "params", marshalObj(params)), msg.ID)
	o := &outbound{r: r, hop: iss.Hop, exp: iss.Exp, form: iss.OfferForm, url: r.downstreamURL(req.URL).String(), auth: req.Header.Get("Authorization")}
	r.e.track(o)
	if r.e.canceled(ctx, o.hop) {
		r.e.forget(o.hop)
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: "+errStopped.Error())
		return
	}
	kind := offerSend
	if msg.Method == "message/stream" {
		kind = offerStream
	}
	r.forwardA2A(w, req, out, o, msg.ID, kind)
}

// How forwardA2A sends a request: plain (no offer in it: a follow-up,
// tasks/get, an agent's own handoff), an offer's message/stream, or an
// offer's message/send (asked for again when its reply is lost).
const (
	plain = iota
	offerStream
	offerSend
)

// forwardA2A sends body downstream and passes its answer (JSON, or a
// stream of events) back, taking in the statuses it carries for o (nil:
// the hop of the task the answer names, if it is one of ours). For a
// request that carries an offer, what the answer says of it is
// recorded: a failed dial, a redirect, a 4xx or a pre-execution
// JSON-RPC error never took the work (resolved: not taken), a 5xx or
// another JSON-RPC error says nothing sure (flagged unknown). An
// offer's message/send whose reply is lost is asked for again
// (identical offer, id of the gateway's) when the downstream is known to
// answer from its record, and the answer (the recorded status, naming
// the task) is followed by tasks/get, so the agent still gets its task.
func (r *egressRoute) forwardA2A(w http.ResponseWriter, req *http.Request, body []byte, o *outbound, agentID json.RawMessage, kind int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), r.cfg.EffectiveCallTimeout())
	defer cancel()
	if !slices.Contains(strings.Split(strings.ReplaceAll(req.Header.Get(a2aext.CallMetaKey), " ", ""), ","), a2ahandoff.URI) {
		req.Header.Add(a2aext.CallMetaKey, a2ahandoff.URI) // lists the extension whose metadata it carries
	}
	fresh := kind != plain && o != nil
	var top map[string]jsontext.Value
	if kind == offerSend {
		_, top, _ = readRPC(body)
	}
	sched := asking{}
	if o != nil {
		sched.exp = o.exp
	}
	fail := func(status int, notTaken bool, why string) {
		if fresh {
			if notTaken {
				r.e.notTaken(ctx, r, o.hop, why)
			} else {
				r.e.unknown(ctx, r, o.hop, why)
			}
		}
		writeRPCError(w, agentID, status, -32603, "handoff egress: "+why)
	}
	why := ""
	for n := 0; ; n++ {
		id := agentID
		send := body
		if n > 0 {
			id = askID(o.hop, n)
			send = withID(top, id)
			r.e.s.metrics.egressAsks.WithLabelValues(r.cfg.Name).Inc()
			r.e.s.log.Info("asking again for an outbound hop whose reply was lost", "route", "egress/"+r.cfg.Name, "hop", o.hop, "ask", n, "why", why)
		}
		key, _ := idKey(id)
		resp, err := r.post(ctx, req, send)
		switch {
		case err != nil && n == 0 && dialFailed(err):
			fail(http.StatusBadGateway, true, "the downstream could not be reached: "+err.Error())
			return
		case err != nil && ctx.Err() != nil:
			fail(http.StatusGatewayTimeout, false, fmt.Sprintf("no answer within the route's call_timeout (%s)", r.cfg.EffectiveCallTimeout()))
			return
		case err != nil:
			why = "the request or its reply was lost: " + err.Error()
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			resp.Body.Close()
			fail(http.StatusBadGateway, true, fmt.Sprintf("the downstream answered with a redirect (HTTP %d), which is not followed", resp.StatusCode))
			return
		case resp.StatusCode == http.StatusOK && mediaType(resp.Header) == "text/event-stream":
			r.streamA2A(ctx, w, resp, o)
			resp.Body.Close()
			return
		case resp.StatusCode == http.StatusOK:
			// JSON, whatever its Content-Type says (a2a-go's server
			// leaves it to be sniffed: text/plain).
			b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage+1))
			resp.Body.Close()
			if rerr != nil || len(b) > maxMCPMessage {
				why = "the reply could not be read whole"
				break
			}
			m, rtop, perr := readRPC(b)
			rkey, _ := idKey(m.ID)
			if perr != nil || rkey != key {
				if n == 0 && !fresh {
					// Not for the egress to judge: the agent's client
					// makes of it what it can.
					copyHeaders(w.Header(), resp.Header)
					w.Header().Del("Content-Length")
					w.WriteHeader(resp.StatusCode)
					w.Write(b)
					return
				}
				why = "the downstream answered with something other than the request's response"
				break
			}
			if m.Error != nil && fresh {
				if preExecution(m.Error.Code) {
					r.e.notTaken(ctx, r, o.hop, fmt.Sprintf("the downstream refused the message: JSON-RPC error %d", m.Error.Code))
				} else {
					r.e.unknown(ctx, r, o.hop, fmt.Sprintf("the downstream answered JSON-RPC error %d (%s)", m.Error.Code, m.Error.Message))
				}
			}
			ev := r.takeA2A(ctx, m.Result, o)
			if n > 0 {
				// The answer to the ask: the recorded status, in a
				// message naming the task when the downstream knows it
				// and this gateway authenticated as the offer's iss.
				if msg, ok := ev.(*a2a.Message); ok && msg.TaskID != "" {
					if t := r.getTask(ctx, req, o, string(msg.TaskID)); t != nil {
						rtop = withMember(rtop, "result", t)
					}
				}
				rtop = withMember(rtop, "id", jsontext.Value(agentID))
				b = marshalObj(rtop)
			}
			copyHeaders(w.Header(), resp.Header)
			w.Header().Del("Content-Length")
			writeJSON(w, http.StatusOK, b) // Content-Type: application/json
			return
		default:
			b, _ := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage))
			resp.Body.Close()
			if fresh || n > 0 {
				notTaken := resp.StatusCode >= 400 && resp.StatusCode < 500
				fail(http.StatusBadGateway, notTaken && n == 0, fmt.Sprintf("the downstream answered HTTP %d", resp.StatusCode))
				return
			}
			copyHeaders(w.Header(), resp.Header)
			w.Header().Del("Content-Length")
			w.WriteHeader(resp.StatusCode)
			w.Write(b)
			return
		}
		if kind != offerSend || !r.speaks.Load() || !sched.next(ctx) {
			switch {
			case kind == offerSend && !r.speaks.Load():
				why += "; the downstream has not answered with a signed status yet, so asking again could run the work twice: not asked"
			case kind == offerSend:
				why += "; asking again brought no answer before the offer expired"
			}
			fail(http.StatusBadGateway, false, "the reply was lost: "+why)
			return
		}
	}
}

// streamA2A passes the downstream's events on, taking in their statuses.
func (r *egressRoute) streamA2A(ctx context.Context, w http.ResponseWriter, resp *http.Response, o *outbound) {
	sse := &sseWriter{w: w}
	sse.start(resp.Header)
	sr := newSSEReader(resp.Body)
	for read := 0; ; read++ {
		ev, err := sr.next()
		if len(ev.lines) > 0 {
			// The events a task's work makes are few; a stream of more
			// is passed on, and not read for statuses (each costs a
			// verification).
			if m, _, perr := readRPC(ev.data); perr == nil && m.Result != nil && read < maxStreamEvents {
				r.takeA2A(ctx, m.Result, o)
			}
			sse.send(ev.bytes())
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && o != nil {
				r.e.s.log.Warn("an outbound stream broke; the hop is followed when the agent asks for its task", "route", "egress/"+r.cfg.Name, "hop", o.hop, "err", oneLine(err))
			}
			return
		}
	}
}

// maxStreamEvents bounds the events of one stream read for statuses,
// and maxAnswerStatuses the statuses of one answer taken in.
const (
	maxStreamEvents   = 256
	maxAnswerStatuses = 8
)

// takeA2A reads an answer's result (a task, a message, an event), notes
// the task it names for o, and takes in the statuses it carries for
// their hop. It returns the result as read (nil when it is none).
func (r *egressRoute) takeA2A(ctx context.Context, result json.RawMessage, o *outbound) a2a.Event {
	if len(result) == 0 {
		return nil
	}
	ev, err := a2a.UnmarshalEventJSON(result)
	if err != nil {
		return nil
	}
	var sts []handoff.Element
	var task a2a.TaskID
	switch v := ev.(type) {
	case *a2a.Task:
		task = v.ID
		sts, _ = a2ahandoff.Statuses(v)
	case *a2a.Message:
		task = v.TaskID
		sts, _ = a2ahandoff.Statuses(v)
	case *a2a.TaskStatusUpdateEvent:
		task = v.TaskID
		if v.Status.Message != nil {
			if st, ok, err := a2ahandoff.StatusFrom(v.Status.Message.Metadata); ok && err == nil {
				sts = append(sts, st)
			}
		}
	}
	if task != "" {
		if o == nil {
			o = r.e.taskOut(r, string(task))
		} else {
			r.e.noteTask(o, string(task))
		}
	}
	if o == nil {
		return ev
	}
	if len(sts) > maxAnswerStatuses {
		sts = sts[len(sts)-maxAnswerStatuses:] // the latest say most
	}
	for _, st := range sts {
		r.e.take(ctx, r, o.hop, st)
	}
	return ev
}

// getTask reads a task of o's from the downstream (the JSON of the
// result, nil when it cannot be had).
func (r *egressRoute) getTask(ctx context.Context, in *http.Request, o *outbound, task string) jsontext.Value {
	body := mustJSON(map[string]any{"jsonrpc": "2.0", "id": "handoff-get-" + o.hop, "method": "tasks/get", "params": map[string]any{"id": task}})
	resp, err := r.post(ctx, in, body)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage+1))
	if err != nil || len(b) > maxMCPMessage || resp.StatusCode != http.StatusOK {
		return nil
	}
	m, _, err := readRPC(b)
	if err != nil || m.Result == nil {
		return nil
	}
	r.takeA2A(ctx, m.Result, o)
	return jsontext.Value(m.Result)
}

// cancelTask is the agent's tasks/cancel: for a task of ours, the
// gateway signs "canceled" for its hop and sends it with the cancel.
func (r *egressRoute) cancelTask(w http.ResponseWriter, req *http.Request, body []byte, msg rpcMessage, top map[string]jsontext.Value) {
	params, err := readObject(msg.Params, `the request's "params"`, "id", "metadata")
	var task string
	if err == nil {
		_ = jsonv2.Unmarshal(params["id"], &task)
	}
	o := r.e.taskOut(r, task)
	if o == nil {
		r.forwardA2A(w, req, body, nil, msg.ID, plain)
		return
	}
	st, _, err := r.e.dl[o.form].Cancel(context.WithoutCancel(req.Context()), o.hop)
	if err != nil {
		writeRPCError(w, msg.ID, http.StatusOK, -32603, "handoff egress: the cancel could not be signed and recorded: "+err.Error())
		return
	}
	var meta map[string]jsontext.Value
	if v, ok := params["metadata"]; ok && v.Kind() != 'n' {
		meta, _ = readObject(v, "metadata")
	}
	params = withMember(params, "metadata", marshalObj(withMember(meta, a2ahandoff.Key, mustJSONValue(st.Text()))))
	r.forwardA2A(w, req, withID(withMember(top, "params", marshalObj(params)), msg.ID), o, msg.ID, plain)
}

// cancelDownTask sends the downstream tasks/cancel for o's task with the
// signed "canceled".
func (r *egressRoute) cancelDownTask(ctx context.Context, o *outbound, st handoff.Element) error {
	o.mu.Lock()
	task := o.task
	if task == "" {
		// Sent as soon as a reply names the task (noteTask).
		o.pending = &st
	}
	o.mu.Unlock()
	if task == "" {
		r.e.s.log.Info("an outbound hop's cancel waits for a reply to name its task", "route", "egress/"+r.cfg.Name, "hop", o.hop)
		return nil
	}
	body := mustJSON(map[string]any{"jsonrpc": "2.0", "id": "handoff-cancel-" + o.hop, "method": "tasks/cancel",
		"params": map[string]any{"id": task, "metadata": map[string]any{a2ahandoff.Key: st.Text()}}})
	in, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, nil)
	if err != nil {
		return err
	}
	if o.auth != "" {
		in.Header.Set("Authorization", o.auth)
	}
	in.Header.Set("Content-Type", "application/json")
	in.Header.Set(a2aext.CallMetaKey, a2ahandoff.URI)
	resp, err := r.postTo(ctx, o.url, in, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage))
	m, _, err := readRPC(b)
	if err != nil {
		return fmt.Errorf("the downstream's answer to the cancel is not JSON-RPC (HTTP %d)", resp.StatusCode)
	}
	r.takeA2A(ctx, m.Result, o)
	if m.Error != nil {
		return fmt.Errorf("the downstream refused the cancel: JSON-RPC error %d: %s", m.Error.Code, m.Error.Message)
	}
	return nil
}

// noteTask notes the downstream's task of o (the first a reply names:
// a hop has one task), and sends a cancel that waited for it.
func (e *egress) noteTask(o *outbound, task string) {
	o.mu.Lock()
	if o.task != "" {
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	e.mu.Lock()
	k := o.r.cfg.Name + "\x00" + task
	if held := e.tasks[k]; held != nil && held != o {
		// A task id another live hop holds stays that hop's: a reply
		// cannot move it, nor send this hop's cancel to that task.
		e.mu.Unlock()
		return
	}
	if e.out[o.hop] == o {
		e.tasks[k] = o
	}
	e.mu.Unlock()
	o.mu.Lock()
	o.task = task
	pending := o.pending
	o.pending = nil
	o.mu.Unlock()
	if pending != nil {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
			defer cancel()
			result := "sent"
			if err := o.r.cancelDownTask(ctx, o, *pending); err != nil {
				result = "failed"
				e.s.log.Warn("sending an outbound hop its cancel failed", "route", "egress/"+o.r.cfg.Name, "hop", o.hop, "err", oneLine(err))
			}
			e.s.metrics.egressCancels.WithLabelValues(o.r.cfg.Name, result).Inc()
		}()
	}
}

func (e *egress) taskOut(r *egressRoute, task string) *outbound {
	if task == "" {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tasks[r.cfg.Name+"\x00"+task]
}

// serveCard answers with the downstream's card as the egress route's: the
// agent's a2a-go client then sends its requests here.
func (r *egressRoute) serveCard(w http.ResponseWriter, req *http.Request) {
	serveCardAt(w, req, &r.card, "downstream", r.cfg.Path, nil)
}

func mustJSONValue(v any) jsontext.Value { return jsontext.Value(mustJSON(v)) }
