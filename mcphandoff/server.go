package mcphandoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
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
	// Authenticated reports whether the host authenticated the sender of
	// this call as iss, the offer's iss (read before verification; the
	// answer matters only for an offer that verifies). It is
	// delegate.Receive's authenticated flag: a retransmission gets its
	// status only when it is true. Nil: never authenticated, so
	// retransmissions get no status (fail safe). TokenUser is one.
	Authenticated func(ctx context.Context, req *mcp.CallToolRequest, iss string) bool
	// Dialog returns the dialog identifier the call carries, checked
	// against the offer's dialog (step 5). Nil: the MCP session id
	// (Mcp-Session-Id), "" (no check) when the transport has no session.
	Dialog func(req *mcp.CallToolRequest) string
	// AllowPlain lets a tools/call without a handoff reach the tool
	// unchecked. Otherwise such a call is refused with a tool error.
	AllowPlain bool
	// Limits bound the Handoff read to find its iss for Authenticated;
	// the delegate applies its own (zero: handoff.DefaultLimits).
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
		return nil, errors.New("mcphandoff: ServerConfig.Delegate is required")
	}
	return newServer(cfg)
}

func newServer(cfg ServerConfig) (*Server, error) {
	if cfg.Results == 0 {
		cfg.Results = 1024
	}
	switch {
	case cfg.AwaitTTL < 0:
		return nil, errors.New("mcphandoff: ServerConfig.AwaitTTL must not be negative")
	case cfg.MaxAwaiting < 0:
		return nil, errors.New("mcphandoff: ServerConfig.MaxAwaiting must not be negative")
	case cfg.MaxAwaitingPerIssuer < 0:
		return nil, errors.New("mcphandoff: ServerConfig.MaxAwaitingPerIssuer must not be negative")
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
		return nil, errors.New("mcphandoff: New needs a context, got nil")
	}
	if cfg.Delegate != nil {
		return nil, errors.New("mcphandoff: New builds the delegate from its delegate.Config: ServerConfig.Delegate must be nil")
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
var errNilServer = errors.New("mcphandoff: the Server is nil or was not made by NewServer")

func (s *Server) usable() bool { return s != nil && s.cfg.Delegate != nil && s.idle != nil }

// Attach adds the middleware to srv: srv.AddReceivingMiddleware(s.Middleware()).
func (s *Server) Attach(srv *mcp.Server) error {
	if !s.usable() {
		return errNilServer
	}
	if srv == nil {
		return errors.New("mcphandoff: Attach needs an *mcp.Server, got nil")
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

// call handles a tools/call. The receiving checks run, and the decision is
// recorded, before the tool sees the call. Every decided call is answered
// with a CallToolResult (never a JSON-RPC error), so the status in its
// _meta reaches the caller; a rejection or refusal is a tool error
// (IsError). Only a failure of the hop store, when nothing was decided, is
// a JSON-RPC error.
func (s *Server) call(ctx context.Context, next mcp.MethodHandler, method string, r *mcp.CallToolRequest) (mcp.Result, error) {
	v, ok := r.Params.Meta[Key]
	if !ok {
		if s.cfg.AllowPlain {
			return next(ctx, method, r)
		}
		return toolError(nil, "this tool takes work only with an agent handoff under _meta %q", Key), nil
	}
	b, err := HandoffOctets(v)
	if err != nil {
		// Not a Handoff at all: step 1 (D3), bad-signature; nothing
		// verified to address a status to (decision 12).
		return toolError(nil, "handoff rejected (bad-signature, step 1): %v", err), nil
	}
	// The carrier's one parse of the Handoff: the claimed iss for the
	// authentication question, and what the delegate receives.
	iss := ""
	h, herr := handoff.ParseHandoff(b, s.cfg.Limits)
	if herr == nil {
		if o, _, err := handoff.UnsafeDecode(h.Offer); err == nil && o != nil {
			iss = o.Iss
		}
	}
	authenticated := s.cfg.Authenticated != nil && iss != "" && s.cfg.Authenticated(ctx, r, iss)
	dialog := ""
	if s.cfg.Dialog != nil {
		dialog = s.cfg.Dialog(r)
	} else if r.Session != nil {
		dialog = r.Session.ID()
	}
	// The record must be complete even if the caller goes away meanwhile:
	// a hop claimed but not answered is still answered on retransmission.
	bg := context.WithoutCancel(ctx)
	a, err := s.cfg.Delegate.ReceiveParsed(bg, h, herr, dialog, authenticated)
	if a == nil {
		return nil, fmt.Errorf("mcphandoff: the hop store failed, nothing was decided: %w", err)
	}
	if a.Iss != "" && a.Result.OfferDigest != nil {
		s.index(*a.Result.OfferDigest, hopKey{a.Iss, a.Hop})
	}
	switch a.Outcome {
	case handoff.Rejected:
		why := "handoff rejected"
		if a.Result.Err != nil {
			why = fmt.Sprintf("handoff rejected (%s): %v", a.Result.Reason, a.Result.Err)
		}
		return toolError(a.Status, "%s", why), nil
	case handoff.Equivocation:
		// The first offer's work, if running here, must stop; the second
		// gets no status (draft "Forks, Concurrency, and Equivocation").
		s.stop(hopKey{a.Iss, a.Hop})
		if err != nil {
			return nil, fmt.Errorf("mcphandoff: equivocation on hop %s not recorded: %w", a.Hop, err)
		}
		return toolError(nil, "handoff refused: equivocation (another offer for hop %s of %s was received first)", a.Hop, a.Iss), nil
	case handoff.Retransmission:
		if hop := s.nextRound(a, r); hop != nil {
			return s.run(ctx, next, method, r, hop, a.Status, true)
		}
		return s.retransmission(a), nil
	case handoff.Accepted:
		if !a.Take {
			// Config.Defer: recorded "received", no decision yet.
			return &mcp.CallToolResult{Content: text("hop %s received; not yet decided: ask again later", a.Hop)}, nil
		}
		hop := &Hop{Iss: a.Iss, ID: a.Hop, Offer: a.Result.Offer, Handoff: a.Result.Handoff,
			ChainQuality: a.Result.ChainQuality}
		if a.Result.OfferDigest != nil {
			hop.Digest = *a.Result.OfferDigest
		}
		return s.run(ctx, next, method, r, hop, a.Status, false)
	}
	return nil, fmt.Errorf("mcphandoff: unexpected outcome %q", a.Outcome)
}

// nextRound returns the hop whose tool runs again for this call, or nil
// when the call is an ordinary retransmission. A multi-round-trip tool
// call (SEP-2322, go-sdk v1.8.0) retries the same tools/call, the same
// Handoff under Key, with InputResponses or RequestState added: the
// delegate sees a retransmission. It is the next round of the same work,
// not new work, when the tool's last round here asked for input (the hop
// is awaiting), the record is still "accepted" and not canceled, the
// sender is authenticated as the offer's iss (a.Status is only given to
// such a sender), and the call carries the client's answer. Anything else
// is answered from the record and the tool does not run (fail safe).
func (s *Server) nextRound(a *delegate.Answer, r *mcp.CallToolRequest) *Hop {
	if a.Status == nil || a.Record == nil || a.Record.State != store.Accepted || a.Record.Canceled || a.Record.Equivocated {
		return nil
	}
	if r.Params.InputResponses == nil && r.Params.RequestState == "" {
		return nil
	}
	k := hopKey{a.Iss, a.Hop}
	s.mu.Lock()
	p := s.awaiting[k]
	if _, running := s.running[k]; p == nil || running {
		s.mu.Unlock()
		return nil
	}
	delete(s.awaiting, k)
	s.rorderAwait = slices.DeleteFunc(s.rorderAwait, func(x hopKey) bool { return x == k })
	s.mu.Unlock()
	if time.Now().After(p.until) {
		s.abandoned(context.Background(), []hopKey{k})
		return nil
	}
	p.hop.mu.Lock()
	p.hop.out, p.hop.isSet = delegate.Outcome{}, false // a declaration counts for the round that returns it
	p.hop.mu.Unlock()
	return p.hop
}

// run does the work of a newly taken hop exactly once. The work runs under
// its own context, detached from the request: the request's context ends
// when the caller goes away or MCP cancels the request, but only a
// verified "canceled" (or an equivocation) stops taken work; otherwise it
// runs to its outcome, which is recorded and answers the next
// retransmission.
//
// A stop that came for the hop (Stop, the delegate's Config.Stop) before
// its work was registered here means the work is not begun; one that
// comes after cancels the work's context. later says whether earlier
// rounds of a multi-round-trip call ran.
func (s *Server) run(ctx context.Context, next mcp.MethodHandler, method string, r *mcp.CallToolRequest, hop *Hop, accepted *handoff.Element, later bool) (mcp.Result, error) {
	wctx, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), hopCtxKey{}, hop))
	w := &work{hop: hop, cancel: cancel, done: make(chan struct{})}
	k := hopKey{hop.Iss, hop.ID}
	s.mu.Lock()
	s.running[k] = w
	s.active++
	_, stopped := s.stops[k]
	delete(s.stops, k)
	s.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	if !stopped {
		// A cancel or an equivocating offer may have marked the hop
		// since the delegate took it, on a path that reaches no Stop of
		// this Server (another replica sharing the store; a delegate
		// from NewServer whose Config.Stop is not wired here). The
		// record is read after the work is registered, so a mark made
		// after this read finds it running and stops it. A record that
		// cannot be read is not begun (fail safe: the work is not known
		// to be still wanted).
		rec, err := s.cfg.Delegate.Record(bg, hop.Iss, hop.ID)
		switch {
		case err != nil:
			stopped = true
			if s.cfg.Report != nil {
				s.cfg.Report(fmt.Errorf("mcphandoff: rereading hop %s of %s before its work: %w", hop.ID, hop.Iss, err))
			}
		case rec.Canceled || rec.Equivocated:
			stopped = true
		}
	}
	if stopped {
		reply, rerr := s.notBegun(bg, hop, later)
		if rerr != nil && s.cfg.Report != nil {
			s.cfg.Report(rerr)
		}
		s.done(k)
		cancel()
		return reply, nil
	}
	go func() {
		defer cancel()
		res, err := invoke(wctx, next, method, r)
		reply, rerr := s.finish(bg, hop, accepted, res, err)
		if rerr != nil && s.cfg.Report != nil {
			s.cfg.Report(rerr)
		}
		w.reply = reply
		s.done(k)
		close(w.done)
	}()
	select {
	case <-w.done:
		return w.reply, nil
	case <-ctx.Done():
		// The caller went away or canceled the request (MCP asks for no
		// response then). The work goes on; a retransmission learns its
		// outcome. The answer is the one the SDK gives a tool handler
		// that returns the context's error (a tool error result with
		// its text, never a JSON-RPC error with code 0), with the
		// "accepted" the work was taken under.
		res := &mcp.CallToolResult{Content: text("%v: the request ended; hop %s is accepted and its work goes on: ask again for its outcome", ctx.Err(), hop.ID)}
		res.IsError = true
		return withStatus(res, accepted), nil
	}
}

// done unregisters the work of k.
func (s *Server) done(k hopKey) {
	s.mu.Lock()
	delete(s.running, k)
	if s.active--; s.active == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

// notBegun settles a hop whose work was stopped (canceled, equivocated)
// before this middleware began it. A first round never ran: "failed",
// no effect (the delegate signs reason equivocation for an equivocated
// hop). After earlier rounds of a multi-round-trip call, what they did is
// not known: the hop stays "accepted" and is flagged. The reply is a tool
// error carrying the status recorded (none while the outcome is unknown).
func (s *Server) notBegun(ctx context.Context, hop *Hop, later bool) (*mcp.CallToolResult, error) {
	why := "the hop was canceled by the delegator (or its offer equivocated) before its work began here"
	if later {
		why = "the hop was canceled by the delegator (or its offer equivocated) between rounds of a multi-round-trip call"
		err := s.cfg.Delegate.Unknown(ctx, hop.Iss, hop.ID, why+"; the earlier rounds' effect is not known")
		if err != nil {
			err = fmt.Errorf("mcphandoff: flagging hop %s of %s: %w", hop.ID, hop.Iss, err)
		}
		return toolError(nil, "%s: the tool did not run again; the hop stays accepted, its outcome not known", why), err
	}
	st, err := s.cfg.Delegate.Finish(ctx, hop.Iss, hop.ID, delegate.Outcome{State: store.Failed, NoEffect: true, Reason: handoff.ReasonPolicy, Detail: why})
	if err != nil {
		uerr := s.cfg.Delegate.Unknown(ctx, hop.Iss, hop.ID, why+"; recording it failed with no effect did not succeed: "+err.Error())
		return toolError(nil, "%s: the tool did not run", why), errors.Join(fmt.Errorf("mcphandoff: hop %s of %s: %w", hop.ID, hop.Iss, err), uerr)
	}
	return toolError(st, "%s: the tool did not run", why), nil
}

// invoke calls the rest of the chain (the tool), turning a panic into an
// error so that a taken hop is never left without a decision path.
func invoke(ctx context.Context, next mcp.MethodHandler, method string, r *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("mcphandoff: the tool panicked: %v", p)
		}
	}()
	out, err := next(ctx, method, r)
	if err != nil {
		return nil, err
	}
	res, ok := out.(*mcp.CallToolResult)
	if !ok || res == nil {
		return nil, fmt.Errorf("mcphandoff: tools/call returned %T, not a CallToolResult", out)
	}
	return res, nil
}

// finish records the outcome of taken work and builds the reply. The
// outcome is what the tool declared (Hop.Declare); without a declaration a
// result that is not an error is "completed", an unknown tool (the SDK's
// invalid-params error, raised before any handler runs) is "failed" with
// no effect, and anything else is an outcome not known: the hop stays
// "accepted" and is flagged (draft "Knowing the Outcome": never guess).
func (s *Server) finish(ctx context.Context, hop *Hop, accepted *handoff.Element, res *mcp.CallToolResult, callErr error) (*mcp.CallToolResult, error) {
	if callErr == nil && res.InputRequests != nil {
		// A round of a multi-round-trip call (SEP-2322): the tool asks the
		// client for input and runs again when the call is retried with
		// the answers. Not an outcome: the hop stays "accepted", unflagged,
		// and the retry, which carries the same Handoff, runs the tool
		// again under this hop (nextRound) instead of being answered as a
		// retransmission.
		c := *res
		s.await(ctx, hopKey{hop.Iss, hop.ID}, &pending{hop: hop, res: &c, until: time.Now().Add(s.cfg.AwaitTTL)})
		return withStatus(res, accepted), nil
	}
	reply := res
	if reply == nil {
		reply = &mcp.CallToolResult{IsError: true, Content: text("%v", callErr)}
	}
	out, declared := hop.declared()
	var unknownWhy string
	switch {
	case declared:
	case callErr == nil && !res.IsError:
		out = delegate.Outcome{State: store.Completed}
	case isUnknownTool(callErr):
		out = delegate.Outcome{State: store.Failed, Detail: callErr.Error(), NoEffect: true}
	default:
		unknownWhy = "the tool returned an error without declaring the outcome (mcphandoff.Hop.Declare)"
		if callErr != nil {
			unknownWhy += ": " + callErr.Error()
		}
	}
	var st *handoff.Element
	var err error
	if unknownWhy == "" {
		// Kept before the record turns terminal, so that a retransmission
		// that sees the terminal status also finds the result.
		s.keep(hopKey{hop.Iss, hop.ID}, reply, out.State == store.Failed)
		st, err = s.cfg.Delegate.Finish(ctx, hop.Iss, hop.ID, out)
		if err != nil {
			unknownWhy = fmt.Sprintf("recording the outcome %s failed: %v", out.State, err)
			err = fmt.Errorf("mcphandoff: hop %s of %s: %w", hop.ID, hop.Iss, err)
		}
	}
	if unknownWhy != "" {
		if uerr := s.cfg.Delegate.Unknown(ctx, hop.Iss, hop.ID, unknownWhy); uerr != nil {
			err = errors.Join(err, fmt.Errorf("mcphandoff: flagging hop %s of %s: %w", hop.ID, hop.Iss, uerr))
		}
		st = accepted // the hop is accepted, its outcome not known
	}
	reply = withStatus(reply, st)
	if st != nil && out.State == store.Failed && unknownWhy == "" {
		reply.IsError = true
	}
	return reply, err
}

func isUnknownTool(err error) bool {
	var je *jsonrpc.Error
	return errors.As(err, &je) && je.Code == jsonrpc.CodeInvalidParams && len(je.Message) > 12 && je.Message[:12] == "unknown tool"
}

// retransmission answers the same offer again from the record, never
// running the tool: the identical octets of the last status sent
// ("accepted" while the work runs), with the tool's result when it is
// still kept. No status when the sender was not authenticated as the
// offer's iss, or nothing was sent yet.
func (s *Server) retransmission(a *delegate.Answer) *mcp.CallToolResult {
	k := hopKey{a.Iss, a.Hop}
	state := store.State("")
	if a.Record != nil {
		state = a.Record.State
	}
	s.mu.Lock()
	kept := s.results[k]
	_, running := s.running[k]
	awaiting := s.awaiting[k]
	s.mu.Unlock()
	if a.Status == nil {
		// Nothing about the hop's state or outcome: the same answer
		// whatever became of the hop (draft "Replay and Freshness":
		// statuses, and what they would tell, go only to iss).
		return withStatus(&mcp.CallToolResult{Content: text("retransmission of hop %s: no status to resend (not yet decided, or the sender is not authenticated as %s)", a.Hop, a.Iss)}, nil)
	}
	var res *mcp.CallToolResult
	switch {
	case kept != nil && state.Terminal():
		res = kept.res
	case awaiting != nil && state == store.Accepted && !time.Now().After(awaiting.until):
		// Its last round asked for input: ask again, so that the
		// client's multi-round-trip loop can answer.
		res = awaiting.res
	case running:
		res = &mcp.CallToolResult{Content: text("hop %s is accepted and its work is running: ask again later", a.Hop)}
	default:
		res = &mcp.CallToolResult{Content: text("retransmission of hop %s: the hop is %s; the last status sent is in _meta %q", a.Hop, state, Key)}
	}
	res = withStatus(res, a.Status)
	res.IsError = state == store.Rejected || state == store.Failed
	return res
}

// cancelled takes a notifications/cancelled. The SDK has already canceled
// the request's context (that ends the call, not the work). A signed
// "canceled" under Key is verified by the delegate (D9) against the hop's
// recorded offer; if it holds, the hop is recorded canceled and its work
// is stopped. The work's outcome is still recorded when known (decision
// 16): a cancel does not show that the work took no effect.
func (s *Server) cancelled(ctx context.Context, p *mcp.CancelledParams) error {
	v, ok := p.Meta[Key]
	if !ok {
		return nil // a plain MCP cancel: the request's business only
	}
	el, err := StatusElement(v)
	if err != nil {
		return err
	}
	_, st, err := handoff.UnsafeDecode(el)
	if err != nil {
		return fmt.Errorf("mcphandoff: cancel: %w", err)
	}
	if st == nil || st.State != handoff.StateCanceled {
		return fmt.Errorf("%w: notifications/cancelled carries something other than a canceled status", ErrMeta)
	}
	// The status names the offer by digest; the hop comes from the offers
	// this middleware has seen. An unknown digest goes to the delegate
	// with no hop: it holds the cancel for an offer not yet received.
	s.mu.Lock()
	k, known := s.offers[st.Offer.Alg+":"+st.Offer.String()]
	s.mu.Unlock()
	if !known {
		k = hopKey{st.Iss, ""}
	}
	rec, err := s.cfg.Delegate.Cancel(context.WithoutCancel(ctx), el, k.iss, k.hop)
	if err != nil {
		return fmt.Errorf("mcphandoff: cancel for offer %s: %w", st.Offer, err)
	}
	if k.hop == "" && rec != nil {
		k = hopKey{rec.Iss, rec.Hop} // the delegate placed it
	}
	if k.hop != "" {
		// Stop, not stop: work taken but not yet registered (between the
		// delegate's claim and run) is remembered and never begun, even
		// when the delegate's Config.Stop does not reach this Server.
		s.Stop(k.iss, k.hop)
	}
	s.mu.Lock()
	waiting := s.awaiting[k]
	delete(s.awaiting, k)
	if waiting != nil {
		s.rorderAwait = slices.DeleteFunc(s.rorderAwait, func(x hopKey) bool { return x == k })
	}
	s.mu.Unlock()
	if waiting != nil {
		// Canceled between rounds: no round will run again, and what the
		// earlier rounds did is not known here (draft "Knowing the
		// Outcome": never guess).
		if err := s.cfg.Delegate.Unknown(context.WithoutCancel(ctx), k.iss, k.hop, "canceled while the tool awaited input (multi-round-trip); the earlier rounds' effect is not known"); err != nil {
			return fmt.Errorf("mcphandoff: flagging hop %s of %s: %w", k.hop, k.iss, err)
		}
	}
	return nil
}

// await keeps p, a multi-round-trip call between rounds, for its next
// round. Calls abandoned past AwaitTTL, and the oldest beyond
// MaxAwaiting, are dropped on the way (and flagged).
func (s *Server) await(ctx context.Context, k hopKey, p *pending) {
	now := time.Now()
	var dropped []hopKey
	s.mu.Lock()
	if _, ok := s.awaiting[k]; ok {
		s.rorderAwait = slices.DeleteFunc(s.rorderAwait, func(x hopKey) bool { return x == k })
	}
	for len(s.rorderAwait) > 0 {
		old := s.rorderAwait[0]
		if len(s.rorderAwait) < s.cfg.MaxAwaiting && !now.After(s.awaiting[old].until) {
			break
		}
		delete(s.awaiting, old)
		s.rorderAwait = s.rorderAwait[1:]
		dropped = append(dropped, old)
	}
	// The issuer's own quota: beyond it, its own oldest call goes, never
	// another issuer's. The scan is linear in the calls kept (at most
	// MaxAwaiting), like the removal above.
	mine, oldest := 0, -1
	for i, x := range s.rorderAwait {
		if x.iss == k.iss {
			if mine++; oldest < 0 {
				oldest = i
			}
		}
	}
	if mine >= s.cfg.MaxAwaitingPerIssuer {
		old := s.rorderAwait[oldest]
		delete(s.awaiting, old)
		s.rorderAwait = slices.Delete(s.rorderAwait, oldest, oldest+1)
		dropped = append(dropped, old)
	}
	s.awaiting[k] = p
	s.rorderAwait = append(s.rorderAwait, k)
	if s.awaitTimer == nil {
		s.awaitTimer = time.AfterFunc(time.Until(s.awaiting[s.rorderAwait[0]].until)+time.Millisecond, s.expireAwaiting)
	}
	s.mu.Unlock()
	s.abandoned(ctx, dropped)
}

// expireAwaiting drops (and flags) the calls kept past AwaitTTL, and runs
// again at the next one's end: an abandoned call is not kept, nor left
// unflagged, for want of other traffic. The calls are kept oldest first,
// each for AwaitTTL, so the first is the next to end.
func (s *Server) expireAwaiting() {
	now := time.Now()
	var dropped []hopKey
	s.mu.Lock()
	for len(s.rorderAwait) > 0 {
		old := s.rorderAwait[0]
		if p := s.awaiting[old]; p != nil && !now.After(p.until) {
			break
		}
		delete(s.awaiting, old)
		s.rorderAwait = s.rorderAwait[1:]
		dropped = append(dropped, old)
	}
	if len(s.rorderAwait) > 0 {
		s.awaitTimer.Reset(time.Until(s.awaiting[s.rorderAwait[0]].until) + time.Millisecond)
	} else {
		s.awaitTimer = nil
	}
	s.mu.Unlock()
	s.abandoned(context.Background(), dropped)
}

// abandoned flags the hops of multi-round-trip calls dropped between
// rounds: each stays "accepted", and what its earlier rounds did is not
// known here (draft "Knowing the Outcome": never guess).
func (s *Server) abandoned(ctx context.Context, ks []hopKey) {
	for _, k := range ks {
		err := s.cfg.Delegate.Unknown(context.WithoutCancel(ctx), k.iss, k.hop,
			"a multi-round-trip call was abandoned between rounds (no retry within the bound); the earlier rounds' effect is not known")
		if err != nil && s.cfg.Report != nil {
			s.cfg.Report(fmt.Errorf("mcphandoff: flagging abandoned hop %s of %s: %w", k.hop, k.iss, err))
		}
	}
}

// stop cancels the context of running work.
func (s *Server) stop(k hopKey) {
	s.mu.Lock()
	w := s.running[k]
	s.mu.Unlock()
	if w != nil {
		w.cancel()
	}
}

func (s *Server) index(d handoff.Digest, k hopKey) {
	id := d.Alg + ":" + d.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.offers[id]; ok {
		return
	}
	if len(s.order) >= maxOffers {
		delete(s.offers, s.order[0])
		s.order = s.order[1:]
	}
	s.offers[id] = k
	s.order = append(s.order, id)
}

// keep stores a finished result for retransmissions, without its _meta
// status (that always comes from the record).
func (s *Server) keep(k hopKey, res *mcp.CallToolResult, failed bool) {
	if s.cfg.Results < 0 {
		return
	}
	c := *res
	c.IsError = c.IsError || failed
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.results[k]; !ok {
		if len(s.rorder) >= s.cfg.Results {
			delete(s.results, s.rorder[0])
			s.rorder = s.rorder[1:]
		}
		s.rorder = append(s.rorder, k)
	}
	s.results[k] = &result{res: &c}
}

// withStatus returns a copy of res whose _meta carries st under Key (and
// no status when st is nil).
func withStatus(res *mcp.CallToolResult, st *handoff.Element) *mcp.CallToolResult {
	c := *res
	if st != nil {
		c.Meta = withMeta(res.Meta, Key, StatusValue(*st))
	} else if _, ok := res.Meta[Key]; ok {
		c.Meta = withMeta(res.Meta, Key, nil)
		delete(c.Meta, Key)
	}
	if c.Content == nil {
		c.Content = []mcp.Content{}
	}
	return &c
}

func toolError(st *handoff.Element, format string, args ...any) *mcp.CallToolResult {
	res := withStatus(&mcp.CallToolResult{Content: text(format, args...)}, st)
	res.IsError = true
	return res
}

func text(format string, args ...any) []mcp.Content {
	return []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}
}

// TokenUser is an Authenticated function for hosts that authenticate
// callers with bearer tokens (the SDK's auth.RequireBearerToken): the
// sender is authenticated as iss when its token's UserID is iss.
func TokenUser(_ context.Context, req *mcp.CallToolRequest, iss string) bool {
	return req != nil && req.Extra != nil && req.Extra.TokenInfo != nil && req.Extra.TokenInfo.UserID != "" && req.Extra.TokenInfo.UserID == iss
}
