package gateway

import (
	"context"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// metrics are the gateway's Prometheus metrics, all named handoff_gateway_*,
// with fixed label sets.
type metrics struct {
	requests    *prometheus.CounterVec   // route, protocol, method, outcome
	latency     *prometheus.HistogramVec // route, protocol
	reloads     *prometheus.CounterVec   // result
	configValid prometheus.Gauge

	// The receiving checks' answers (delegate.Config.OnAnswer).
	answers      *prometheus.CounterVec   // route, outcome, reason
	retransmits  *prometheus.CounterVec   // route, resent
	checkLatency *prometheus.HistogramVec // route
	chainLength  *prometheus.HistogramVec // route

	// mcp routes: the outcomes recorded for forwarded calls, and the
	// signed cancels taken.
	outcomes *prometheus.CounterVec // route, outcome
	cancels  *prometheus.CounterVec // route, result

	jwts *prometheus.CounterVec // result: bearer JWTs checked (inbound.jwt)

	// The egress: offers signed for outbound calls, by how they were
	// linked; the downstreams' statuses taken in (by the view they set,
	// or refused, unknown, not-taken); asks after a lost reply; cancels
	// sent down.
	egressOffers   *prometheus.CounterVec // route, link
	egressStatuses *prometheus.CounterVec // route, result
	egressAsks     *prometheus.CounterVec // route
	egressCancels  *prometheus.CounterVec // route, result

	signed          *prometheus.CounterVec   // state: statuses signed (recorded before sent)
	storeLatency    *prometheus.HistogramVec // op
	upstreamLatency *prometheus.HistogramVec // route, protocol
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_requests_total",
			Help: "Requests on the listen address, by route, protocol, method (the JSON-RPC method; other for the rest) and outcome: error for HTTP 4xx/5xx, a JSON-RPC error or an MCP isError result; ok otherwise.",
		}, []string{"route", "protocol", "method", "outcome"}),
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
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_answers_total",
			Help: "Offers received, by route, outcome (accepted, rejected, retransmission, equivocation) and reason (the draft's rejection code; none when accepted).",
		}, []string{"route", "outcome", "reason"}),
		retransmits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_retransmissions_total",
			Help: "Retransmissions answered from the record, by route and whether the status was resent (true: the caller authenticated as the offer's iss).",
		}, []string{"route", "resent"}),
		checkLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "handoff_gateway_check_duration_seconds",
			Help:    "Time of the receiving checks and the hop's record (verification and store), by route.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"route"}),
		chainLength: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "handoff_gateway_chain_length",
			Help:    "Earlier offers carried with each offer received, by route.",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32},
		}, []string{"route"}),
		egressOffers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_egress_offers_total",
			Help: "Offers signed for the agent's outbound calls, by egress route and link: header, trace, context (how the inbound hop it passes on was found), origin (a new chain on a starts_chains route), or unlinked (a new chain, flagged).",
		}, []string{"route", "link"}),
		egressStatuses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_egress_statuses_total",
			Help: "What became of outbound hops, by egress route and result: the view a verified status set (accepted, rejected, completed, failed), refused (a status that did not verify, flagged), unknown (flagged), not-taken (never reached the downstream).",
		}, []string{"route", "result"}),
		egressAsks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_egress_asks_total",
			Help: "Times an outbound offer was sent again after its reply was lost, by egress route.",
		}, []string{"route"}),
		egressCancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_egress_cancels_total",
			Help: "Signed cancels sent down for outbound hops whose inbound hop was stopped, by egress route and result (sent, failed).",
		}, []string{"route", "result"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_outcomes_total",
			Help: "Outcomes of forwarded work on mcp routes, by route and outcome: completed, failed, or unknown (flagged for the operator: a JSON-RPC error or an isError result on a route whose failures may take effect, a lost response).",
		}, []string{"route", "outcome"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_cancels_total",
			Help: "Signed cancels taken on mcp routes, by route and result: applied (verified and recorded), or refused.",
		}, []string{"route", "result"}),
		jwts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_inbound_jwts_total",
			Help: "Bearer JWTs checked (inbound.jwt), by result: ok (the caller is identified), or refused (it identifies no one; the log says why).",
		}, []string{"result"}),
		signed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handoff_gateway_statuses_signed_total",
			Help: "Statuses the gateway signed, by state (each is recorded in the store before it is sent).",
		}, []string{"state"}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "handoff_gateway_store_duration_seconds",
			Help:    "Time of the hop store's operations, by operation (claim, get, transition, put_copy, hop_of, mark, raise).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}, []string{"op"}),
		upstreamLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "handoff_gateway_upstream_duration_seconds",
			Help:    "Time of forwarded work with the upstream, from the request sent to its outcome (an A2A task's end or pause, an MCP tool call's response), by route and protocol.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20),
		}, []string{"route", "protocol"}),
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
	reg.MustRegister(m.egressOffers, m.egressStatuses, m.egressAsks, m.egressCancels, m.requests, m.latency, m.reloads, m.configValid, build, m.answers, m.retransmits, m.checkLatency, m.chainLength,
		m.outcomes, m.cancels, m.jwts, m.signed, m.storeLatency, m.upstreamLatency)
	return m
}

// answered counts and logs one answer of the receiving checks on route.
func (s *Server) answered(route, me string) func(context.Context, *delegate.Answer, time.Duration) {
	return func(ctx context.Context, a *delegate.Answer, took time.Duration) {
		reason := string(a.Reason)
		if reason == "" {
			reason = "none"
		}
		s.metrics.answers.WithLabelValues(route, string(a.Outcome), reason).Inc()
		s.metrics.checkLatency.WithLabelValues(route).Observe(took.Seconds())
		chain := 0
		if a.Result != nil && a.Result.Handoff != nil {
			chain = len(a.Result.Handoff.Chain)
			s.metrics.chainLength.WithLabelValues(route).Observe(float64(chain))
		}
		if a.Outcome == handoff.Retransmission {
			s.metrics.retransmits.WithLabelValues(route, strconv.FormatBool(a.Status != nil)).Inc()
		}
		level := slog.LevelInfo
		if a.Outcome == handoff.Rejected || a.Outcome == handoff.Equivocation {
			level = slog.LevelWarn
		}
		attrs := []slog.Attr{slog.String("route", route), slog.String("verdict", string(a.Outcome)),
			slog.String("iss", a.Iss), slog.String("aud", me), slog.String("hop", a.Hop), slog.Int("chain", chain),
			slog.Duration("took", took)}
		if a.Result != nil && a.Result.ChainQuality != handoff.ChainUnchecked {
			attrs = append(attrs, slog.String("chain_quality", string(a.Result.ChainQuality)))
		}
		if a.Reason != "" {
			attrs = append(attrs, slog.String("reason", string(a.Reason)))
		}
		if a.Err != nil {
			attrs = append(attrs, slog.String("why", oneLine(a.Err)))
		}
		spanAnswer(ctx, route, string(a.Outcome), string(a.Reason), a.Iss, me, a.Hop, chain, logAttrsFrom(ctx))
		attrs = append(attrs, logAttrsFrom(ctx)...)
		s.log.LogAttrs(context.Background(), level, "handoff", attrs...)
	}
}

// logAttrsKey keys the protocol's fields for the log line of an offer
// (the MCP tool, say) in the context the checks run under.
type logAttrsKey struct{}

func withLogAttrs(ctx context.Context, attrs ...slog.Attr) context.Context {
	return context.WithValue(ctx, logAttrsKey{}, attrs)
}

func logAttrsFrom(ctx context.Context) []slog.Attr {
	attrs, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	return attrs
}

// hopGauges reads the store at each scrape: the open flags (by kind) and
// the hops accepted with no outcome yet. Counting reads pages of the
// store, bounded by maxCounted; the read is bounded by two seconds.
type hopGauges struct{ s *Server }

var (
	flagsDesc = prometheus.NewDesc("handoff_gateway_open_flags",
		"Flags open for the operator in the store, by kind (unknown-outcome, equivocation, ...).", []string{"kind"}, nil)
	unresolvedDesc = prometheus.NewDesc("handoff_gateway_unresolved_hops",
		"Hops the store has as accepted with no outcome yet (counted up to 100000).", nil, nil)
)

const maxCounted = 100000

func (g hopGauges) Describe(ch chan<- *prometheus.Desc) { ch <- flagsDesc; ch <- unresolvedDesc }

func (g hopGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if flags, err := g.s.store.Flags(ctx, false); err == nil {
		by := map[string]int{}
		for _, f := range flags {
			by[f.Kind]++
		}
		for k, n := range by {
			ch <- prometheus.MustNewConstMetric(flagsDesc, prometheus.GaugeValue, float64(n), k)
		}
	} else {
		ch <- prometheus.NewInvalidMetric(flagsDesc, err)
	}
	n := 0
	q := store.HopQuery{State: store.Accepted, Limit: store.MaxListLimit}
	for n < maxCounted {
		page, err := g.s.store.List(ctx, q)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(unresolvedDesc, err)
			return
		}
		n += len(page)
		if len(page) < q.Limit {
			break
		}
		q.After = page[len(page)-1].Cursor()
	}
	ch <- prometheus.MustNewConstMetric(unresolvedDesc, prometheus.GaugeValue, float64(n))
}

// chainCacheStats reads the chain cache's counters at each scrape
// (handoff.ChainCache.Stats): lookups of chain elements by result, the
// entries and bytes held against the bounds, and evictions.
type chainCacheStats struct{ c *handoff.ChainCache }

var (
	cacheLookupsDesc = prometheus.NewDesc("handoff_gateway_chain_cache_lookups_total",
		"Chain elements looked up in the cache of verified elements, by result (hit: not verified again).", []string{"result"}, nil)
	cacheEntriesDesc = prometheus.NewDesc("handoff_gateway_chain_cache_entries",
		"Verified elements the chain cache holds.", nil, nil)
	cacheBytesDesc = prometheus.NewDesc("handoff_gateway_chain_cache_bytes",
		"The chain cache's estimate of the memory it holds, which its bound applies to.", nil, nil)
	cacheEvictionsDesc = prometheus.NewDesc("handoff_gateway_chain_cache_evictions_total",
		"Elements evicted from the chain cache to keep it within its bounds.", nil, nil)
)

func (c chainCacheStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- cacheLookupsDesc
	ch <- cacheEntriesDesc
	ch <- cacheBytesDesc
	ch <- cacheEvictionsDesc
}

func (c chainCacheStats) Collect(ch chan<- prometheus.Metric) {
	s := c.c.Stats()
	ch <- prometheus.MustNewConstMetric(cacheLookupsDesc, prometheus.CounterValue, float64(s.Hits), "hit")
	ch <- prometheus.MustNewConstMetric(cacheLookupsDesc, prometheus.CounterValue, float64(s.Misses), "miss")
	ch <- prometheus.MustNewConstMetric(cacheEntriesDesc, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(cacheBytesDesc, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(cacheEvictionsDesc, prometheus.CounterValue, float64(s.Evictions))
}
