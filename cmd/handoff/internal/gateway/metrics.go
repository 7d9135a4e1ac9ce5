package gateway

import (
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus metrics, all named handoff_gateway_*,
// with fixed label sets.
type metrics struct {
	requests    *prometheus.CounterVec   // route, protocol, code
	latency     *prometheus.HistogramVec // route, protocol
	reloads     *prometheus.CounterVec   // result
	configValid prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_requests_total",
			Help: "Requests on the listen address, by route, protocol and HTTP status code.",
		}, []string{"route", "protocol", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "handoff_gateway_request_duration_seconds",
			Help:    "Time to answer a request (to its last octet for a stream), by route and protocol.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route", "protocol"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_config_reloads_total",
			Help: "Configuration reloads (SIGHUP), by result: ok, or failed (the last good configuration stays).",
		}, []string{"result"}),
		configValid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "handoff_gateway_config_last_reload_ok",
			Help: "1 when the configuration file, as last read, was valid; 0 when the last reload failed.",
		}),
	}
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "handoff_gateway_build_info",
		Help:        "The gateway's version; always 1.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	m.configValid.Set(1)
	reg.MustRegister(m.requests, m.latency, m.reloads, m.configValid, build)
	return m
}

// instrument counts and times the requests of route r.
func (s *Server) instrument(r Route, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, req)
		s.metrics.requests.WithLabelValues(r.Name, r.Protocol, strconv.Itoa(sw.code)).Inc()
		s.metrics.latency.WithLabelValues(r.Name, r.Protocol).Observe(time.Since(start).Seconds())
	})
}

// statusWriter notes the status code; it keeps Flush, which server-sent
// events need event by event.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
