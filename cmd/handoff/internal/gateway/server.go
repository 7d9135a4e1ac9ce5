package gateway

import (
	"context"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

// Server is one gateway: its routes on the listen address, its admin
// endpoints, one store and one identity for every route.
type Server struct {
	log     *slog.Logger
	store   store.Store
	reg     *prometheus.Registry
	metrics *metrics
	tracing *tracing

	// What a reload (SIGHUP) may change while running: the trust file
	// and inbound (tokens, certificate names, JWT). Every other key
	// needs a restart.
	cfg     atomic.Pointer[Config]
	keys    atomic.Pointer[trust.Config]
	tokens  atomic.Pointer[map[string]string]
	certIDs atomic.Pointer[map[string]string]
	jwt     atomic.Pointer[jwtVerifier] // nil: no inbound.jwt
	// operators maps an operator token to its name (operator.tokens_file).
	operators atomic.Pointer[map[string]string]

	// links and egress: the agent's outbound calls (links.go, egress.go);
	// nil without egress routes.
	links  *links
	egress *egress

	tasksDB *sql.DB // PostgreSQL: where the A2A routes keep their tasks (shared.go); nil on SQLite

	// chains remembers the chain elements every route verified (issue 19),
	// one cache for all: a prefix that reaches several routes, or comes
	// back on the next hop of the same work, is verified once. Its key
	// holds the trust file's generation, so a reload misses everything
	// the old keys verified.
	chains *handoff.ChainCache

	routes   []*route
	handler  http.Handler
	started  time.Time
	reloadMu sync.Mutex
}

// route is one configured upstream, served under its path: an a2a
// route (x, upstream, card) or an mcp route (mcp).
type route struct {
	cfg      Route
	x        *a2ahandoff.Executor
	upstream *upstreamA2A
	card     cardCache
	mcp      *mcpRoute
}

// delegate is the route's delegate (every route's shares the store).
func (r *route) delegate() *delegate.Delegate {
	if r.mcp != nil {
		return r.mcp.d
	}
	return r.x.Delegate()
}

// New opens the store and builds every route. The caller closes the
// Server.
func New(ctx context.Context, c *Config, res *Resources, log *slog.Logger) (*Server, error) {
	s := &Server{log: log, reg: prometheus.NewRegistry(), started: time.Now(),
		chains: handoff.NewChainCache(chainCacheEntries, chainCacheBytes)}
	s.cfg.Store(c)
	s.keys.Store(res.Keys)
	s.tokens.Store(&res.Tokens)
	s.certIDs.Store(&res.CertIDs)
	s.operators.Store(&res.Operators)
	s.setJWT(res.JWT)
	s.metrics = newMetrics(s.reg)
	var err error
	if s.tracing, err = newTracing(ctx, c.Tracing); err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var st store.Store
	switch {
	case strings.HasPrefix(c.Store, "sqlite:"):
		st, err = sqlite.Open(ctx, strings.TrimPrefix(c.Store, "sqlite:"))
	default:
		st, err = postgres.Open(ctx, c.Store)
	}
	if err != nil {
		s.tracing.shutdown(ctx)
		return nil, err // "store: sqlite PATH: ..." or "store: postgres: ..."
	}
	s.store = meteredStore{Store: st, took: s.metrics.storeLatency, signed: s.metrics.signed}
	if !strings.HasPrefix(c.Store, "sqlite:") {
		// Replicas share PostgreSQL: their A2A tasks too (shared.go).
		s.tasksDB = st.(store.SQLStore).DB()
		if err := openTasks(ctx, s.tasksDB); err != nil {
			s.store.Close()
			s.tracing.shutdown(ctx)
			return nil, err
		}
	}
	mux := http.NewServeMux()
	for _, rc := range c.Routes {
		r, err := s.newRoute(ctx, c, res, rc)
		if err != nil {
			s.store.Close()
			s.tracing.shutdown(ctx)
			return nil, fmt.Errorf("route %s: %w", rc.Name, err)
		}
		s.routes = append(s.routes, r)
		h := s.instrument(rc, http.StripPrefix(strings.TrimSuffix(rc.Path, "/"), r.handler(s)))
		mux.Handle(rc.Path, h)
		if rc.Path != "/" {
			// The path without its slash too: the mux would answer it
			// with a redirect, which a POST does not follow as a POST.
			mux.Handle(strings.TrimSuffix(rc.Path, "/"), h)
		}
	}
	s.handler = withClientCert(mux)
	if len(c.Egress.Routes) > 0 {
		tr, ok := st.(delegator.Tracking)
		if !ok {
			s.store.Close()
			s.tracing.shutdown(ctx)
			return nil, fmt.Errorf("egress: the store %T does not keep a delegator's hops", st)
		}
		s.links = newLinks()
		if s.egress, err = newEgress(s, c, res, tr); err != nil {
			s.store.Close()
			s.tracing.shutdown(ctx)
			return nil, fmt.Errorf("egress: %w", err)
		}
	}
	if c.RecoverOnStart && len(s.routes) > 0 {
		// The store is shared by every route: one delegate's Recover
		// looks at all of its hops.
		n, err := s.routes[0].delegate().Recover(ctx)
		if err != nil {
			s.store.Close()
			s.tracing.shutdown(ctx)
			return nil, fmt.Errorf("recover_on_start: %w", err)
		}
		if n > 0 {
			s.log.Warn("recover_on_start: hops left accepted by the last stop are flagged 'unknown outcome' for the operator", "hops", n)
		}
	}
	s.reg.MustRegister(hopGauges{s}, chainCacheStats{s.chains})
	return s, nil
}

// stopElsewhere stops a hop's work on every route: its run (each
// route's own Executor also stops it itself), or, when it waits for
// input, its upstream task; s.routes is complete before the gateway
// takes a request.
func (s *Server) stopElsewhere(iss, hop string) {
	if s.egress != nil {
		// The hops issued for its work are canceled down the chain.
		go s.egress.cancelDown(iss, hop)
	}
	for _, r := range s.routes {
		if r.mcp != nil {
			r.mcp.stop(iss, hop)
			continue
		}
		r.x.Stop(iss, hop)
		// Stop must not block: a paused hop's upstream cancel is a call.
		go r.upstream.stopPaused(iss, hop)
	}
}

// noteA2A notes the hop whose work an A2A route's request to its
// upstream carries, and sends the upstream its link (links.go); nothing
// without an egress.
func (s *Server) noteA2A(req *http.Request, h http.Header) {
	if s.links == nil {
		return
	}
	hop := a2ahandoff.HopFrom(req.Context())
	if hop == nil || hop.Handoff == nil {
		return
	}
	cid, _ := req.Context().Value(contextIDKey{}).(string)
	if tok := s.links.note(hop.Iss, hop.ID, hop.Handoff, traceID(h), cid, s.cfg.Load().Policy.EffectiveSkew()); tok != "" {
		h.Set(LinkHeader, tok)
	}
}

// liveKeys is the trust file as last (re)loaded.
type liveKeys struct{ s *Server }

func (k liveKeys) Keys(iss, kid string) []trust.Key { return k.s.keys.Load().Keys(iss, kid) }

// The chain cache's bounds: 8192 elements, about 20 MiB of typical 1 KiB
// elements, under a 32 MiB ceiling that elements decoding to more cannot
// pass. Constants for now: a memory bound sized for one gateway, whose
// use the handoff_gateway_chain_cache_* metrics show; a configuration key
// can come when an operator needs another size.
const (
	chainCacheEntries = 8192
	chainCacheBytes   = 32 << 20
)

// Generation is the current trust file's (trust.Config.Generation): a
// reload starts a new one, so the chain cache answers nothing the old
// keys verified.
func (k liveKeys) Generation() uint64 { return k.s.keys.Load().Generation() }

func (s *Server) newRoute(ctx context.Context, c *Config, res *Resources, rc Route) (*route, error) {
	if rc.Protocol == "mcp" {
		m, err := s.newMCPRoute(ctx, c, res, rc)
		if err != nil {
			return nil, err
		}
		return &route{cfg: rc, mcp: m}, nil
	}
	base := rc.Upstream.String()
	client, card, err := upstreamClient(ctx, base, s.noteA2A)
	if err != nil {
		return nil, err
	}
	if card == nil {
		s.log.Warn("the upstream's agent card could not be read: calling it over JSON-RPC, streaming; the card is read again when asked for",
			"route", rc.Name, "upstream", base)
	}
	up := newUpstreamA2A(rc.Name, client, s.log)
	if s.tasksDB != nil {
		up.shared = &sqlTasks{db: s.tasksDB, route: rc.Name}
		up.stopped = func(ctx context.Context, iss, hop string) bool {
			r, err := s.store.Get(ctx, iss, hop)
			return err == nil && (r.Canceled || r.Equivocated)
		}
	} else {
		up.mem = newMemTasks()
	}
	up.took = s.metrics.upstreamLatency.WithLabelValues(rc.Name, "a2a")
	if len(c.Egress.Routes) > 0 {
		up.linkTask = func(h *a2ahandoff.Hop, task string) {
			s.links.noteTask(h.Iss, h.ID, h.Handoff, task, s.cfg.Load().Policy.EffectiveSkew())
		}
	}
	o := c.Policy.Options(c.Identity.ID, liveKeys{s})
	o.ChainCache, o.TrustGeneration = s.chains, liveKeys{s}.Generation
	x, err := a2ahandoff.NewExecutor(ctx, up, a2ahandoff.ServerConfig{
		Delegate: delegate.Config{Options: o, Store: s.store, Signer: res.Signer, OnAnswer: s.answered(rc.Name, c.Identity.ID),
			SenderMustBeIss: c.Policy.SenderMustBeIss,
			// One identity, one store: a cancel or an equivocation taken
			// on this route stops the hop's work on every route.
			Stop: s.stopElsewhere},
		Sender:                  a2ahandoff.UserName,
		AllowPlain:              rc.WithoutHandoff == "pass",
		NoEffectUnlessCompleted: rc.FailuresEffectFree,
		OnCancel:                up.onCancel,
	})
	if err != nil {
		return nil, err
	}
	r := &route{cfg: rc, x: x, upstream: up}
	r.card.base, r.card.card = base, card
	return r, nil
}

// upstreamClient is an a2a-go client for the upstream at base: from its
// agent card when it can be read (so that a2aclient streams only to an
// upstream that says it streams), else over JSON-RPC at base.
func upstreamClient(ctx context.Context, base string, note func(*http.Request, http.Header)) (*a2aclient.Client, *a2a.AgentCard, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// No overall timeout (a2a-go's default is 3 minutes, which would cut
	// a long task's stream and lose its outcome); an upstream that does
	// not start answering within a minute is an error.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = time.Minute
	tr.MaxIdleConnsPerHost = 64
	jsonrpc := a2aclient.WithJSONRPCTransport(&http.Client{Transport: traceTransport{base: tr, note: note}})
	if card, err := agentcard.DefaultResolver.Resolve(cctx, base); err == nil {
		// The card names where the upstream takes requests; the gateway
		// calls the URL it was configured with, over JSON-RPC.
		card := *card
		card.URL, card.PreferredTransport, card.AdditionalInterfaces = base, a2a.TransportProtocolJSONRPC, nil
		c, err := a2aclient.NewFromCard(ctx, &card, jsonrpc)
		return c, &card, err
	}
	c, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: base, Transport: a2a.TransportProtocolJSONRPC}}, jsonrpc)
	return c, nil, err
}

// handler serves the route: its agent card, rewritten to the gateway,
// and the JSON-RPC endpoint, checked by a2ahandoff.
func (r *route) handler(s *Server) http.Handler {
	if r.mcp != nil {
		return r.mcp.handler()
	}
	opts := []a2asrv.RequestHandlerOption{a2asrv.WithCallInterceptor(bearerAuth{s: s})}
	if r.upstream.shared != nil {
		opts = append(opts, a2asrv.WithTaskStore(r.upstream.shared))
	} else {
		opts = append(opts, a2asrv.WithTaskStore(r.upstream.mem))
	}
	h := a2ahandoff.NewHandler(r.x, opts...)
	if r.upstream.shared != nil {
		h = sharedTasksHandler{RequestHandler: h, tasks: r.upstream.shared, life: r.upstream.life, slots: make(chan struct{}, maxFollowed)}
	}
	rpc := a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(h))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case a2asrv.WellKnownAgentCardPath, "/.well-known/agent.json":
			noteMethod(req.Context(), "agent-card")
			r.serveCard(w, req)
			return
		}
		// The caller's credentials are the gateway's to check, never the
		// upstream's to see (SPEC section 6); the upstream client sends
		// none of its own.
		rpc.ServeHTTP(w, req)
	})
}

// bearerAuth authenticates a caller by its bearer token (inbound.
// bearer_tokens_file): the AgentId it maps to is the request's sender,
// whom the draft's resend rule compares with the offer's iss.
type bearerAuth struct {
	a2asrv.PassthroughCallInterceptor
	s *Server
}

func (b bearerAuth) Before(ctx context.Context, cc *a2asrv.CallContext, req *a2asrv.Request) (context.Context, error) {
	// The request's fields for its metric and the log line of its offer.
	method := a2aMethods[cc.Method()]
	if method == "" {
		method = "other"
	}
	noteMethod(ctx, method)
	auth := ""
	if v, ok := cc.RequestMeta().Get("authorization"); ok && len(v) == 1 {
		auth = v[0]
	}
	cert, _ := ctx.Value(certKey{}).(*x509.Certificate)
	id := b.s.sender(ctx, auth, cert)
	if id != "" {
		cc.User = &a2asrv.AuthenticatedUser{UserName: id}
	}
	// sender: the AgentId inbound authenticated ("" for none), so that an
	// operator sees who brought an offer (a copy refused for its sender,
	// decision 104, say).
	attrs := []slog.Attr{slog.String("protocol", "a2a"), slog.String("method", method), slog.String("sender", id)}
	if p, ok := req.Payload.(*a2a.MessageSendParams); ok && p != nil && p.Message != nil {
		attrs = append(attrs, slog.String("context_id", p.Message.ContextID))
	}
	return withLogAttrs(ctx, attrs...), nil
}

// certKey keys a request's verified TLS client certificate in its
// context (withClientCert), for the a2a routes' interceptor, which sees
// the context but not the request.
type certKey struct{}

// withClientCert puts the request's verified client certificate, if
// any, in its context.
func withClientCert(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if c := clientCert(req); c != nil {
			req = req.WithContext(context.WithValue(req.Context(), certKey{}, c))
		}
		h.ServeHTTP(w, req)
	})
}

// clientCert is the request's client certificate once TLS verified it
// against tls.client_ca_file, nil for none.
func clientCert(req *http.Request) *x509.Certificate {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	return req.TLS.VerifiedChains[0][0]
}

// sender is the AgentId the caller is authenticated as, "" for none:
// by its bearer token (inbound.bearer_tokens_file, or a JWT checked as
// inbound.jwt says) and by its verified client certificate
// (inbound.client_certs_file). When both identify
// the caller, as two AgentIds, it is neither (fail safe: whom to resend
// a status to must not be in doubt).
func (s *Server) sender(ctx context.Context, authorization string, cert *x509.Certificate) string {
	byToken := ""
	if tok, ok := strings.CutPrefix(authorization, "Bearer "); ok && tok != "" {
		byToken = (*s.tokens.Load())[tok]
		if v := s.jwt.Load(); byToken == "" && v != nil && strings.Count(tok, ".") == 2 {
			id, err := v.agent(ctx, tok, time.Now())
			if err != nil {
				s.metrics.jwts.WithLabelValues("refused").Inc()
				s.log.Warn("a bearer JWT identifies no one", "why", oneLine(err))
			} else {
				s.metrics.jwts.WithLabelValues("ok").Inc()
			}
			byToken = id
		}
	}
	byCert := certSender(*s.certIDs.Load(), cert)
	switch {
	case byToken == "":
		return byCert
	case byCert == "" || byCert == byToken:
		return byToken
	}
	return ""
}

// setJWT puts v (nil: none) in use, logging to the gateway's log.
func (s *Server) setJWT(v *jwtVerifier) {
	if v != nil {
		v.log = s.log
	}
	s.jwt.Store(v)
}

// certSender maps a verified certificate to an AgentId by its names: its
// URI SANs, DNS SANs and subject CN, each looked up in ids. Names that
// map to two AgentIds identify no one.
func certSender(ids map[string]string, cert *x509.Certificate) string {
	if cert == nil || len(ids) == 0 {
		return ""
	}
	names := append([]string(nil), cert.DNSNames...)
	for _, u := range cert.URIs {
		names = append(names, u.String())
	}
	if cert.Subject.CommonName != "" {
		names = append(names, cert.Subject.CommonName)
	}
	found := ""
	for _, n := range names {
		id, ok := ids[n]
		switch {
		case !ok:
		case found == "":
			found = id
		case found != id:
			return ""
		}
	}
	return found
}

// cardCache is the upstream's agent card, read again when it is older
// than a minute. One read at a time, outside the lock: meanwhile, and for
// ten seconds after a failed read, callers get the last card read (or
// the error), so a hanging upstream does not queue every card request.
type cardCache struct {
	base     string
	mu       sync.Mutex
	card     *a2a.AgentCard
	at       time.Time // of the last read, good or not
	err      error     // of the last read
	fetching bool
}

func (c *cardCache) get(ctx context.Context) (*a2a.AgentCard, error) {
	c.mu.Lock()
	fresh := c.card != nil && time.Since(c.at) < time.Minute || c.card == nil && c.err != nil && time.Since(c.at) < 10*time.Second
	if fresh || c.fetching {
		card, err := c.card, c.err
		c.mu.Unlock()
		if card != nil {
			return card, nil
		}
		if err == nil {
			err = errors.New("the upstream's agent card is being read")
		}
		return nil, err
	}
	c.fetching = true
	c.mu.Unlock()

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	card, err := agentcard.DefaultResolver.Resolve(cctx, c.base)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fetching, c.at, c.err = false, time.Now(), err
	if err != nil {
		if c.card != nil {
			return c.card, nil // the last one read
		}
		return nil, err
	}
	c.card = card
	return card, nil
}

// serveCard answers with the upstream's card as the gateway's: its URL
// is the gateway's route, over JSON-RPC, and it lists the handoff
// extension (required unless the route passes requests without one).
func (r *route) serveCard(w http.ResponseWriter, req *http.Request) {
	serveCardAt(w, req, &r.card, "upstream", r.cfg.Path, func(c *a2a.AgentCard) {
		c.Capabilities.Extensions = append(slices.Clone(c.Capabilities.Extensions), a2ahandoff.CardExtension(r.cfg.WithoutHandoff == "reject"))
	})
}

// serveCardAt answers with the card cards holds (the card of the agent
// behind: whose, for the error) as this listener's at path, over
// JSON-RPC, edited by edit (nil: as it is).
func serveCardAt(w http.ResponseWriter, req *http.Request, cards *cardCache, whose, path string, edit func(*a2a.AgentCard)) {
	card, err := cards.get(req.Context())
	if err != nil {
		http.Error(w, "the "+whose+"'s agent card could not be read", http.StatusBadGateway)
		return
	}
	c := *card
	scheme := "http"
	if req.TLS != nil {
		scheme = "https"
	}
	c.URL = scheme + "://" + req.Host + path
	c.PreferredTransport = a2a.TransportProtocolJSONRPC
	c.AdditionalInterfaces = []a2a.AgentInterface{{URL: c.URL, Transport: a2a.TransportProtocolJSONRPC}}
	if edit != nil {
		edit(&c)
	}
	a2asrv.NewStaticAgentCardHandler(&c).ServeHTTP(w, req)
}

// Handler serves the routes (the listen address).
func (s *Server) Handler() http.Handler { return s.handler }

// AdminHandler serves /metrics, /healthz, /readyz, /config and, with
// operator.tokens_file set, the operator console at /console/ (console.go).
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	// A slow or failing store costs its gauges, not the whole scrape.
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Ready(r.Context()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		b, err := s.cfg.Load().Redacted()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
	if s.cfg.Load().Operator.TokensFile != "" {
		// The operator console (console.go), only when
		// operator.tokens_file names its operators: 404 otherwise.
		mux.Handle("/console/", http.StripPrefix("/console", newConsole(s)))
		mux.HandleFunc("GET /console", func(w http.ResponseWriter, _ *http.Request) {
			consoleRedirect(w, "console/") // relative: a proxy's prefix stays
		})
	}
	return mux
}

// Ready reports whether the gateway can take offers: its store answers
// (within two seconds).
func (s *Server) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.store.Since(ctx); err != nil {
		return fmt.Errorf("the store does not answer: %w", err)
	}
	return nil
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// Close waits for detached cancels to finish, closes the store, and
// then drops the exchanges still open with upstreams; call it after the
// HTTP servers have shut down and Drain has returned. A hop whose work
// was still running stays as its record says (accepted): its outcome is
// unknown, and a gateway started again answers a retransmission with
// the recorded "accepted" without sending the work again.
func (s *Server) Close() error {
	for _, r := range s.routes {
		if r.x != nil {
			r.x.Wait()
		}
	}
	err := s.store.Close()
	// The spans still batched are sent, for at most five seconds.
	tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if terr := s.tracing.shutdown(tctx); terr != nil {
		s.log.Warn("tracing: the last spans could not be sent", "err", terr)
	}
	for _, r := range s.routes {
		if r.mcp != nil {
			r.mcp.abort()
		} else {
			r.upstream.abort()
		}
	}
	return err
}

// Drain waits, until ctx ends, for every route's runs and detached
// cancels to finish (a2ahandoff.Executor.Drain; an mcp route's
// forwarded calls and the cancels it sends).
func (s *Server) Drain(ctx context.Context) error {
	var errs []error
	for _, r := range s.routes {
		var err error
		if r.mcp != nil {
			err = r.mcp.wait(ctx)
		} else {
			err = r.x.Drain(ctx)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", r.cfg.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Sweep runs every delegate's sweeper, and the shared tables' (shared.go),
// until ctx ends.
func (s *Server) Sweep(ctx context.Context, every time.Duration) {
	go func() {
		if s.tasksDB == nil {
			return
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := sweepTasks(ctx, s.tasksDB, time.Now().Add(-taskRetention)); err != nil && ctx.Err() == nil {
				s.log.Error("sweep", "what", "a2a tasks", "err", err)
			}
		}
	}()
	for _, r := range s.routes {
		go r.delegate().RunSweeper(ctx, every, func(err error) {
			if !errors.Is(err, context.Canceled) {
				s.log.Error("sweep", "route", r.cfg.Name, "err", err)
			}
		})
	}
}

var _ handoff.KeySource = liveKeys{}
