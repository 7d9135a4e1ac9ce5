package gateway

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// What a request's metric says, beside its route, protocol and status
// code: its method (the JSON-RPC method, from a fixed list; "other" for
// the rest) and its outcome, "error" when the answer is a failure (HTTP
// 4xx or 5xx, a JSON-RPC error, an MCP result with isError) and "ok"
// otherwise. The route's handler notes the method and the failures it
// writes itself into the request's reqNote; a JSON answer is also read
// (its first 64 KiB) for a top-level "error", or a result with isError,
// so the upstream's own failures that pass through count too. A failure
// inside a stream that the gateway passes on (an A2A message/stream, an
// MCP GET stream) is not read.
type reqNote struct {
	mu     sync.Mutex
	method string
	failed bool
}

type reqNoteKey struct{}

func noteOf(ctx context.Context) *reqNote {
	n, _ := ctx.Value(reqNoteKey{}).(*reqNote)
	return n
}

// noteMethod names the request's method (the first name noted stays).
func noteMethod(ctx context.Context, method string) {
	if n := noteOf(ctx); n != nil {
		n.mu.Lock()
		if n.method == "" {
			n.method = method
		}
		n.mu.Unlock()
	}
}

// noteFailed says the request's answer is a failure.
func noteFailed(ctx context.Context) {
	if n := noteOf(ctx); n != nil {
		n.mu.Lock()
		n.failed = true
		n.mu.Unlock()
	}
}

// a2aMethods names a2a-go's handler methods by their JSON-RPC methods.
var a2aMethods = map[string]string{
	"OnSendMessage": "message/send", "OnSendMessageStream": "message/stream", "OnGetTask": "tasks/get",
	"OnCancelTask": "tasks/cancel", "OnResubscribeToTask": "tasks/resubscribe", "OnListTasks": "tasks/list",
	"OnGetTaskPushConfig": "tasks/pushNotificationConfig/get", "OnListTaskPushConfig": "tasks/pushNotificationConfig/list",
	"OnSetTaskPushConfig": "tasks/pushNotificationConfig/set", "OnDeleteTaskPushConfig": "tasks/pushNotificationConfig/delete",
	"OnGetExtendedAgentCard": "agent/getAuthenticatedExtendedCard",
}

// mcpMethods are the MCP methods named in the metric; any other is
// "other", any notification "notification", a response "response".
var mcpMethods = map[string]bool{
	"initialize": true, "ping": true, "tools/list": true, "tools/call": true, "resources/list": true, "resources/read": true,
	"resources/templates/list": true, "resources/subscribe": true, "resources/unsubscribe": true, "prompts/list": true,
	"prompts/get": true, "completion/complete": true, "logging/setLevel": true, "notifications/cancelled": true,
}

func mcpMethodLabel(method string) string {
	switch {
	case mcpMethods[method]:
		return method
	case method == "":
		return "response"
	case strings.HasPrefix(method, "notifications/"):
		return "notification"
	}
	return "other"
}

// meterWriter notes the status code and keeps the first octets of a
// JSON answer; it keeps Flush, which server-sent events need event by
// event.
type meterWriter struct {
	http.ResponseWriter
	code    int
	sniff   bool // a JSON answer: its head is kept
	head    []byte
	started bool
}

const maxSniffed = 64 << 10

func (w *meterWriter) WriteHeader(code int) {
	if !w.started {
		w.started = true
		w.code = code
		ct := w.Header().Get("Content-Type")
		w.sniff = strings.HasPrefix(ct, "application/json")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *meterWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.WriteHeader(http.StatusOK)
	}
	if w.sniff && len(w.head) < maxSniffed {
		w.head = append(w.head, b[:min(len(b), maxSniffed-len(w.head))]...)
	}
	return w.ResponseWriter.Write(b)
}

func (w *meterWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *meterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts and times the requests of route r.
func (s *Server) instrument(r Route, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		n := &reqNote{}
		mw := &meterWriter{ResponseWriter: w, code: http.StatusOK}
		ctx, span := s.tracing.start(req, r)
		h.ServeHTTP(mw, req.WithContext(context.WithValue(ctx, reqNoteKey{}, n)))
		n.mu.Lock()
		method, failed := n.method, n.failed
		n.mu.Unlock()
		if method == "" {
			method = "other"
		}
		outcome := "ok"
		if failed || mw.code >= 400 || mw.sniff && jsonFailure(mw.head) {
			outcome = "error"
		}
		endSpan(span, r, method, mw.code, outcome == "error")
		s.metrics.requests.WithLabelValues(r.Name, r.Protocol, method, outcome).Inc()
		s.metrics.latency.WithLabelValues(r.Name, r.Protocol).Observe(time.Since(start).Seconds())
	})
}

// jsonFailure says whether b, the head of a JSON-RPC answer, is an
// error or a result with isError true (false when it cannot tell).
func jsonFailure(b []byte) bool {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	if t, err := d.ReadToken(); err != nil || t.Kind() != '{' {
		return false
	}
	for d.PeekKind() == '"' {
		name, err := d.ReadToken()
		if err != nil {
			return false
		}
		switch name.String() {
		case "error":
			return d.PeekKind() == '{'
		case "result":
			v, err := d.ReadValue()
			if err != nil || v.Kind() != '{' {
				return false
			}
			var r struct {
				IsError bool `json:"isError"`
			}
			return jsonv2.Unmarshal(v, &r) == nil && r.IsError
		}
		if d.SkipValue() != nil {
			return false
		}
	}
	return false
}

// meteredStore is the gateway's store, timed by operation; it counts the
// statuses recorded, by state. The gateway records every status it signs
// before it sends it (a delegate's rule), so these are the statuses
// signed.
type meteredStore struct {
	store.Store
	took   *prometheus.HistogramVec // op
	signed *prometheus.CounterVec   // state
}

func (s meteredStore) time(op string, start time.Time) {
	s.took.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func (s meteredStore) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	defer s.time("claim", time.Now())
	got, stored, err := s.Store.Claim(ctx, r)
	if err == nil && stored && len(r.Status) > 0 {
		s.signed.WithLabelValues(string(r.State)).Inc()
	}
	return got, stored, err
}

func (s meteredStore) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	defer s.time("get", time.Now())
	return s.Store.Get(ctx, iss, hop)
}

func (s meteredStore) Transition(ctx context.Context, m store.Move) error {
	defer s.time("transition", time.Now())
	err := s.Store.Transition(ctx, m)
	if err == nil && len(m.Status) > 0 {
		s.signed.WithLabelValues(string(m.To)).Inc()
	}
	return err
}

func (s meteredStore) PutCopy(ctx context.Context, c *store.Copy, prev []byte) (bool, error) {
	defer s.time("put_copy", time.Now())
	ok, err := s.Store.PutCopy(ctx, c, prev)
	if err == nil && ok {
		state := "unknown"
		if _, st, derr := handoff.UnsafeDecode(handoff.ParseElement(c.Status)); derr == nil && st != nil {
			state = string(st.State)
		}
		s.signed.WithLabelValues(state).Inc()
	}
	return ok, err
}

func (s meteredStore) HopOf(ctx context.Context, iss string, d handoff.Digest) (string, error) {
	defer s.time("hop_of", time.Now())
	return s.Store.HopOf(ctx, iss, d)
}

func (s meteredStore) MarkCanceled(ctx context.Context, iss, hop string) error {
	defer s.time("mark", time.Now())
	return s.Store.MarkCanceled(ctx, iss, hop)
}

func (s meteredStore) MarkEquivocated(ctx context.Context, iss, hop string) error {
	defer s.time("mark", time.Now())
	return s.Store.MarkEquivocated(ctx, iss, hop)
}

func (s meteredStore) Raise(ctx context.Context, f store.Flag) (int64, error) {
	defer s.time("raise", time.Now())
	return s.Store.Raise(ctx, f)
}
