package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Trace context. Every request on the listen address is one span: a
// child of the caller's W3C traceparent when it sent a valid one, named
// for its protocol and method, carrying the route, the JSON-RPC method,
// the response's status code and, for a request with a handoff, the
// hop, iss, aud, chain length and verdict (tracing.answered). Every call
// the gateway makes to an upstream for a request carries the request's
// trace context (traceTransport): with tracing configured, the
// gateway's span is the upstream's parent; without it the tracer is a
// no-op whose spans are the caller's own context, so the caller's
// traceparent and tracestate reach the upstream unchanged (the gateway
// is then invisible in the trace, as a plain proxy is). A traceparent
// the gateway cannot read is not passed on (W3C Trace Context: the
// receiver then starts a new trace).
var traceContext = propagation.TraceContext{}

// tracing is the gateway's tracer; provider is nil when tracing is off.
type tracing struct {
	tracer   trace.Tracer
	provider *sdktrace.TracerProvider
}

// newTracing starts the OTLP exporter that c (tracing) names, or a no-op
// tracer when it names none. The exporter sends over HTTP (OTLP/HTTP,
// protobuf) in batches; OTEL_EXPORTER_OTLP_HEADERS and the other
// OTEL_EXPORTER_OTLP_* variables apply as the OpenTelemetry SDK reads
// them (a collector's API key belongs there, not in the file); the
// endpoint is the file's.
func newTracing(ctx context.Context, c Tracing) (*tracing, error) {
	if c.Endpoint == nil {
		return &tracing{tracer: noop.NewTracerProvider().Tracer("")}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.Endpoint.String()))
	if err != nil {
		return nil, err
	}
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	// The resource is the gateway's alone (no OTEL_RESOURCE_ATTRIBUTES
	// merged in): its schema URL is the one semconv here names.
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(c.ServiceName), semconv.ServiceVersion(version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		// A caller's sampling decision stands; a request that starts a
		// trace is sampled at the configured ratio.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))))
	return &tracing{tracer: tp.Tracer("github.com/quantumlearningmachines/handoff/cmd/handoff/internal/gateway"), provider: tp}, nil
}

// shutdown sends the spans still batched, until ctx ends.
func (t *tracing) shutdown(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// start begins the span of a request of route r, under the caller's
// trace context.
func (t *tracing) start(req *http.Request, r Route) (context.Context, trace.Span) {
	ctx := traceContext.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
	return t.tracer.Start(ctx, r.Protocol+" "+r.Name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("handoff.route", r.Name), attribute.String("handoff.protocol", r.Protocol),
			semconv.HTTPRequestMethodKey.String(req.Method), semconv.URLPath(req.URL.Path)))
}

// end names the span for its method and closes it.
func endSpan(span trace.Span, r Route, method string, code int, failed bool) {
	span.SetName(r.Protocol + " " + method)
	span.SetAttributes(semconv.RPCMethod(method), semconv.HTTPResponseStatusCode(code))
	if failed {
		span.SetStatus(codes.Error, "the answer is a failure (HTTP error, JSON-RPC error or isError result)")
	}
	span.End()
}

// spanAnswer puts an offer's verdict on the request's span.
func spanAnswer(ctx context.Context, route, verdict, reason, iss, aud, hop string, chain int, attrs []slog.Attr) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	kv := []attribute.KeyValue{attribute.String("handoff.verdict", verdict), attribute.String("handoff.iss", iss),
		attribute.String("handoff.aud", aud), attribute.String("handoff.hop", hop), attribute.Int("handoff.chain_length", chain)}
	if reason != "" {
		kv = append(kv, attribute.String("handoff.reason", reason))
	}
	for _, a := range attrs {
		// The protocol's fields of the log line (the A2A contextId, the
		// MCP tool), as strings.
		if a.Key != "protocol" && a.Key != "method" {
			kv = append(kv, attribute.String("handoff."+a.Key, a.Value.String()))
		}
	}
	span.SetAttributes(kv...)
}

// traceTransport sends each request with the trace context of its
// context in place of any traceparent and tracestate it had (a
// forwarded caller's, say).
// With note set, each request is also given to it (with its headers
// as sent, trace context included) before it goes: the A2A routes note
// the hop whose work it carries, for the agent's outbound calls (links.go).
type traceTransport struct {
	base http.RoundTripper
	note func(*http.Request, http.Header)
}

func (t traceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.Header.Del("Traceparent")
	out.Header.Del("Tracestate")
	out.Header.Del(LinkHeader) // the gateway's own, never a caller's
	if tok, _ := req.Context().Value(linkTokenKey{}).(string); tok != "" {
		out.Header.Set(LinkHeader, tok)
	}
	traceContext.Inject(req.Context(), propagation.HeaderCarrier(out.Header))
	if t.note != nil {
		t.note(req, out.Header)
	}
	return t.base.RoundTrip(out)
}

// linkTokenKey holds the LinkHeader value a request to an upstream
// carries (links.go).
type linkTokenKey struct{}

// withTraceOf is ctx (its deadline and cancel) carrying the trace
// context of from.
func withTraceOf(ctx, from context.Context) context.Context {
	return trace.ContextWithSpanContext(ctx, trace.SpanContextFromContext(from))
}

// tracesURL is the OTLP/HTTP traces URL for endpoint: as given, or with
// /v1/traces when it names no path (as OTEL_EXPORTER_OTLP_ENDPOINT is
// read).
func tracesURL(u *url.URL) *url.URL {
	if u.Path == "" || u.Path == "/" {
		v := *u
		v.Path = "/v1/traces"
		return &v
	}
	return u
}
