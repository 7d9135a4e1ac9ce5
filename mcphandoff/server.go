package mcphandoff

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
)

// MCP method names this package acts on.
const (
	methodCallTool  = "tools/call"
	methodCancelled = "notifications/cancelled"
)

// ServerConfig configures the delegate's side.
type ServerConfig struct {
	// Delegate runs the receiving checks and keeps the hop records
	// (package delegate, with its store). Required. Its Config.Stop is
	// not needed for the work this middleware runs: the middleware stops
	// that work itself on a verified cancel or an equivocation. With
	// its Config.Defer the middleware never runs the tool (the hop is
	// only recorded "received"): the application decides with
	// Accept/Reject and does the work itself.
	Delegate *delegate.Delegate
	// Sender returns the AgentId the host authenticated as the sender of
	// this call, or "" for none. It is delegate.Receive's sender: a
	// retransmission gets its status only when the sender is the verified
	// offer's iss, which the delegate checks. Nil: no one is ever
	// authenticated, so retransmissions get no status (fail safe), and a
	// delegate with delegate.Config.SenderMustBeIss refuses every offer
	// (New refuses that pair). TokenUser is one.
	Sender func(ctx context.Context, req *mcp.CallToolRequest) string
	// Dialog returns the dialog identifier the call carries, checked
	// against the offer's dialog (step 5). Nil: the MCP session id
	// (Mcp-Session-Id), "" (no check) when the transport has no session.
	Dialog func(req *mcp.CallToolRequest) string
	// AllowPlain lets a tools/call without a handoff reach the tool
	// unchecked. Otherwise such a call is refused with a tool error.
	AllowPlain bool
	// Limits bound the carrier's parse of the Handoff (the one the
	// delegate receives); the delegate applies its own (zero: handoff.DefaultLimits()).
	Limits handoff.Limits
	// Results is how many tool results of finished hops are kept in
	// memory to answer a retransmission with the result as well as the
	// status (default 1024; negative: none). The status always comes from
	// the hop store; the result only while it is kept here.
	Results int
	// AwaitTTL bounds how long a multi-round-trip call (SEP-2322) whose
	// tool asked for input is kept between rounds (with its last round's
	// result, up to the Handoff bound and more) waiting for the client's
	// retry; MaxAwaiting bounds how many are kept at once (the oldest is
	// dropped first). A call dropped this way, or found expired, is
	// abandoned: the tool does not run again for it, a retry is answered
	// from the record, and the hop stays "accepted" and is flagged
	// unknown outcome (what the earlier rounds did is not known here).
	// MaxAwaitingPerIssuer bounds how many of those one issuer (the
	// offers' iss) may hold, its own oldest dropped first, so that one
	// trusted delegator's flood of abandoned calls cannot push out
	// another's. Defaults DefaultAwaitTTL, DefaultMaxAwaiting and
	// DefaultMaxAwaitingPerIssuer; negative values are errors, and a
	// per-issuer bound above MaxAwaiting is MaxAwaiting.
	AwaitTTL             time.Duration
	MaxAwaiting          int
	MaxAwaitingPerIssuer int
	// Report receives errors that no reply can carry: recording a
	// finished work's outcome failed, a notifications/cancelled whose
	// signed status did not verify or named no known hop. Nil drops them.
	Report func(error)
}

// Server is the delegate's side of the handoff over MCP: a receiving
// middleware for an *mcp.Server. Safe for concurrent use.
type Server struct {
	cfg ServerConfig

	mu      sync.Mutex
	running map[hopKey]*work   // taken work still running, in this process
	offers  map[string]hopKey  // offer digest -> hop, for cancels (bounded)
	order   []string           // insertion order of offers, for the bound
	results map[hopKey]*result // finished results, for retransmissions (bounded)
	// awaiting: hops whose tool's last round asked for input (SEP-2322
	// InputRequests): still accepted, the next round runs the tool again.
	awaiting map[hopKey]*pending
	// rorderAwait: awaiting's keys, oldest first, for MaxAwaiting.
	rorderAwait []hopKey
	// awaitTimer drops the calls past AwaitTTL when no new call comes to
	// do it; nil while none is awaiting.
	awaitTimer *time.Timer
	rorder     []hopKey
	// stops: hops whose work was stopped (Stop) while not running here,
	// when; stopOrder is their insertion order, for the bound.
	stops     map[hopKey]time.Time
	stopOrder []stopEntry
	active    int        // work goroutines running, under mu
	idle      *sync.Cond // signaled when active drops to 0
}

type hopKey struct{ iss, hop string }

// stopEntry is one remembered stop, in stopOrder.
type stopEntry struct {
	k  hopKey
	at time.Time
}

type work struct {
	hop    *Hop
	cancel context.CancelFunc
	done   chan struct{}
	reply  *mcp.CallToolResult // set before done is closed
}

type result struct{ res *mcp.CallToolResult }

// pending is a hop between rounds of a multi-round-trip tool call: the hop
// the rounds share, and the last round's result (its InputRequests), sent
// again to a retransmission without input responses.
type pending struct {
	hop   *Hop
	res   *mcp.CallToolResult
	until time.Time // abandoned after this (AwaitTTL)
}

// maxOffers bounds the digest -> hop index used to route cancels.
const maxOffers = 1 << 16

// Defaults of ServerConfig.AwaitTTL, MaxAwaiting and MaxAwaitingPerIssuer.
const (
	DefaultAwaitTTL             = 10 * time.Minute
	DefaultMaxAwaiting          = 1024
	DefaultMaxAwaitingPerIssuer = 128
)

// maxStops and stopTTL bound the memory of stops (Stop) that came for work
// not running here: a hop just taken whose work has not started yet is
// stopped before it starts. The gap between the delegate's decision and
// the start is short; a stop for a hop that never starts here (its work
// runs on another replica) is forgotten after stopTTL, the oldest first
// beyond maxStops.
const (
	maxStops = 4096
	stopTTL  = time.Minute
)

// NewServer validates cfg. The delegate's Config.Stop should call the
// Server's Stop (New arranges it): the delegate asks it to stop taken work
// when a cancel or an equivocating offer reaches the delegate by another
// way than this middleware's own calls (a duplicate delivery of the offer
// that applies a held cancel, another carrier sharing the delegate).
// Without it, such work is still not begun when its hop was marked before
// it starts (the middleware reads the record just before it begins the
// work), but work already running goes on.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Delegate == nil {
		return nil, invalid("mcphandoff: ServerConfig.Delegate is required")
	}
	return newServer(cfg)
}

func newServer(cfg ServerConfig) (*Server, error) {
	if cfg.Results == 0 {
		cfg.Results = 1024
	}
	switch {
	case cfg.AwaitTTL < 0:
		return nil, invalid("mcphandoff: ServerConfig.AwaitTTL must not be negative")
	case cfg.MaxAwaiting < 0:
		return nil, invalid("mcphandoff: ServerConfig.MaxAwaiting must not be negative")
	case cfg.MaxAwaitingPerIssuer < 0:
		return nil, invalid("mcphandoff: ServerConfig.MaxAwaitingPerIssuer must not be negative")
	}
	if cfg.AwaitTTL == 0 {
		cfg.AwaitTTL = DefaultAwaitTTL
	}
	if cfg.MaxAwaiting == 0 {
		cfg.MaxAwaiting = DefaultMaxAwaiting
	}
	if cfg.MaxAwaitingPerIssuer == 0 {
		cfg.MaxAwaitingPerIssuer = DefaultMaxAwaitingPerIssuer
	}
	cfg.MaxAwaitingPerIssuer = min(cfg.MaxAwaitingPerIssuer, cfg.MaxAwaiting)
	s := &Server{cfg: cfg, running: map[hopKey]*work{}, offers: map[string]hopKey{}, results: map[hopKey]*result{},
		awaiting: map[hopKey]*pending{}, stops: map[hopKey]time.Time{}}
	s.idle = sync.NewCond(&s.mu)
	return s, nil
}

// New builds the delegate from dc, with its Config.Stop chained so that
// the delegate's stops reach this Server's work (then dc.Stop, if set),
// and the Server from cfg, whose Delegate must be nil: New sets it.
func New(ctx context.Context, dc delegate.Config, cfg ServerConfig) (*Server, error) {
	if ctx == nil {
		return nil, invalid("mcphandoff: New needs a context, got nil")
	}
	if cfg.Delegate != nil {
		return nil, invalid("mcphandoff: New builds the delegate from its delegate.Config: ServerConfig.Delegate must be nil")
	}
	if dc.SenderMustBeIss && cfg.Sender == nil {
		return nil, invalid("mcphandoff: delegate.Config.SenderMustBeIss needs ServerConfig.Sender: with no sender ever authenticated, every offer would be refused")
	}
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	userStop := dc.Stop
	dc.Stop = func(iss, hop string) {
		s.Stop(iss, hop)
		if userStop != nil {
			userStop(iss, hop)
		}
	}
	if s.cfg.Delegate, err = delegate.New(ctx, dc); err != nil {
		return nil, err
	}
	return s, nil
}

// Delegate is the delegate the Server records hops with; nil for a nil
// Server (or one not made by NewServer or New).
func (s *Server) Delegate() *delegate.Delegate {
	if !s.usable() {
		return nil
	}
	return s.cfg.Delegate
}

// Stop stops the work of hop (iss, hop) taken here: a running tool call's
// context is canceled; work not yet started is remembered (bounded: the
// last 4,096 stops, each for a minute) and never started. It is the
// delegate's Config.Stop (New sets it): it does not block.
func (s *Server) Stop(iss, hop string) {
	if !s.usable() {
		return
	}
	k := hopKey{iss, hop}
	s.mu.Lock()
	w := s.running[k]
	if w == nil {
		now := time.Now()
		for len(s.stopOrder) > 0 && (len(s.stopOrder) >= maxStops || now.Sub(s.stopOrder[0].at) > stopTTL) {
			if e := s.stopOrder[0]; s.stops[e.k].Equal(e.at) {
				delete(s.stops, e.k)
			}
			s.stopOrder = s.stopOrder[1:]
		}
		s.stops[k] = now
		s.stopOrder = append(s.stopOrder, stopEntry{k, now})
	}
	s.mu.Unlock()
	if w != nil {
		w.cancel()
	}
}

// errNilServer: a Server not made by NewServer.
var errNilServer = invalid("mcphandoff: the Server is nil or was not made by NewServer")

func (s *Server) usable() bool { return s != nil && s.cfg.Delegate != nil && s.idle != nil }

// Attach adds the middleware to srv: srv.AddReceivingMiddleware(s.Middleware()).
func (s *Server) Attach(srv *mcp.Server) error {
	if !s.usable() {
		return errNilServer
	}
	if srv == nil {
		return invalid("mcphandoff: Attach needs an *mcp.Server, got nil")
	}
	srv.AddReceivingMiddleware(s.Middleware())
	return nil
}

// Middleware is the receiving middleware. It acts on tools/call carrying a
// handoff under Key and on notifications/cancelled carrying a signed
// "canceled"; every other message passes through untouched. The
// middleware of a nil Server (or one not made by NewServer) answers every
// request with an error, so nothing reaches a tool unchecked.
func (s *Server) Middleware() mcp.Middleware {
	if !s.usable() {
		return func(mcp.MethodHandler) mcp.MethodHandler {
			return func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, errNilServer }
		}
	}
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case methodCallTool:
				if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
					return s.call(ctx, next, method, r)
				}
			case methodCancelled:
				if r, ok := req.(*mcp.ServerRequest[*mcp.CancelledParams]); ok && r.Params != nil {
					if err := s.cancelled(ctx, r.Params); err != nil && s.cfg.Report != nil {
						s.cfg.Report(err)
					}
				}
			}
			return next(ctx, method, req)
		}
	}
}

// Wait blocks until all work started by this middleware has finished and
// its outcome is recorded (for shutdown and tests). Work may start again
// afterwards; a sync.WaitGroup would forbid that while Wait runs.
func (s *Server) Wait() {
	if !s.usable() {
		return // nothing started
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.active > 0 {
		s.idle.Wait()
	}
}

// TokenUser is a Sender function for hosts that authenticate callers with
// bearer tokens (the SDK's auth.RequireBearerToken): the sender is its
// token's UserID.
func TokenUser(_ context.Context, req *mcp.CallToolRequest) string {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil {
		return ""
	}
	return req.Extra.TokenInfo.UserID
}
