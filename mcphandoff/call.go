package mcphandoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

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
	// The carrier's one parse of the Handoff, which the delegate receives;
	// whether the sender is the offer's iss the delegate asks itself,
	// after verifying.
	h, herr := handoff.ParseHandoff(b, s.cfg.Limits)
	sender := ""
	if s.cfg.Sender != nil {
		sender = s.cfg.Sender(ctx, r)
	}
	dialog := ""
	if s.cfg.Dialog != nil {
		dialog = s.cfg.Dialog(r)
	} else if r.Session != nil {
		dialog = r.Session.ID()
	}
	// The record must be complete even if the caller goes away meanwhile:
	// a hop claimed but not answered is still answered on retransmission.
	bg := context.WithoutCancel(ctx)
	a, err := s.cfg.Delegate.ReceiveParsed(bg, h, herr, dialog, sender)
	if a == nil {
		return nil, fmt.Errorf("mcphandoff: the hop store failed, nothing was decided: %w", err)
	}
	if a.Iss != "" && a.Result.OfferDigest != nil {
		s.index(*a.Result.OfferDigest, hopKey{a.Iss, a.Hop})
	}
	switch a.Outcome {
	case handoff.Rejected:
		why := "handoff rejected"
		if a.Err != nil {
			why = fmt.Sprintf("handoff rejected (%s): %v", a.Reason, a.Err)
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
