package a2ahandoff

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// NewHandler is a2asrv.NewHandler for an Executor, with the options of
// a2asrv.NewHandler, plus one thing the Executor alone cannot do: answer a
// retransmission that a2a-go would refuse before any executor runs.
//
// A delegator that asks again (draft "Asking Again") may resend the
// message exactly as it first sent it, the hop's A2A taskId included (a
// client re-sending after a lost reply does). a2a-go refuses a message
// into that task before the Executor runs: "invalid params" once the task
// is terminal, "internal error" while its execution runs. The handler
// NewHandler returns looks first: when the message's Handoff carries an
// offer whose (iss, hop) is recorded in the hop store with the same
// handoff digest, the delegate's receiving checks (delegate.Receive, the
// same call the Executor makes) decide, and a retransmission is answered
// from the record with the Executor's reply to one: a standalone agent
// Message carrying the last status sent, as its identical octets, only to
// a sender the host authenticated as the offer's iss
// (ServerConfig.Authenticated; draft "Replay and Freshness"). Neither the
// agent nor a2a-go's task machinery runs; no task changes. Everything else
// (an offer not yet recorded, a message without a Handoff or with a
// malformed one, Get Task, Cancel Task, ...) goes to a2a-go unchanged, and
// the Executor handles it as before.
//
// An equivocating offer (same (iss, hop), other octets) goes to a2a-go
// too, and the Executor handles it as any equivocation. When a2a-go
// refuses it before the Executor runs (it was sent into the first
// offer's task, now terminal or running), the delegate still sees it:
// the hop is marked and flagged, a running first offer's work is stopped
// (draft "Forks, Concurrency, and Equivocation"), and the reply is the
// Executor's refusal Message, with no status.
//
// The check runs after the options' call interceptors (the handler is
// placed inside a2asrv's InterceptedHandler), so an authentication
// interceptor has set the CallContext's User when Authenticated asks.
// Serve it as any request handler, with StrictHandler outermost:
//
//	h := a2ahandoff.NewHandler(x, a2asrv.WithCallInterceptor(auth))
//	http.Handle("/", a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(h)))
//
// For a nil x (or one not made by NewExecutor) it returns a handler that
// refuses every request with an error saying so (a JSON-RPC "internal
// error"): nothing reaches an agent unchecked.
func NewHandler(x *Executor, opts ...a2asrv.RequestHandlerOption) a2asrv.RequestHandler {
	if !x.usable() {
		return refusing{}
	}
	h := a2asrv.NewHandler(x, opts...)
	// a2a-go v0.3.15 returns its InterceptedHandler around the default
	// handler; the look-up goes between them, after the interceptors. A
	// future version that returns something else gets the look-up
	// outside, where no interceptor has authenticated anyone yet: statuses
	// are then not resent (fail safe), and TestRetransmissionIntoOwnTask
	// fails.
	if ih, ok := h.(*a2asrv.InterceptedHandler); ok {
		ih.Handler = &recordHandler{RequestHandler: ih.Handler, x: x}
		return ih
	}
	return &recordHandler{RequestHandler: h, x: x}
}

// refusing is the handler of an unusable Executor: every request gets
// errRefusing.
type refusing struct{}

var _ a2asrv.RequestHandler = refusing{}

// errRefusing is an a2a.Error so that a2a-go's transports answer with the
// code of a2a.ErrInternalError and this text as the error's message.
var errRefusing error = a2a.NewError(a2a.ErrInternalError, "a2ahandoff: NewHandler was given no usable Executor (nil, or not made by NewExecutor); every request is refused")

func (refusing) OnGetTask(context.Context, *a2a.TaskQueryParams) (*a2a.Task, error) {
	return nil, errRefusing
}

func (refusing) OnListTasks(context.Context, *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	return nil, errRefusing
}

func (refusing) OnCancelTask(context.Context, *a2a.TaskIDParams) (*a2a.Task, error) {
	return nil, errRefusing
}

func (refusing) OnSendMessage(context.Context, *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	return nil, errRefusing
}

func (refusing) OnResubscribeToTask(context.Context, *a2a.TaskIDParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) { yield(nil, errRefusing) }
}

func (refusing) OnSendMessageStream(context.Context, *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) { yield(nil, errRefusing) }
}

func (refusing) OnGetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigParams) (*a2a.TaskPushConfig, error) {
	return nil, errRefusing
}

func (refusing) OnListTaskPushConfig(context.Context, *a2a.ListTaskPushConfigParams) ([]*a2a.TaskPushConfig, error) {
	return nil, errRefusing
}

func (refusing) OnSetTaskPushConfig(context.Context, *a2a.TaskPushConfig) (*a2a.TaskPushConfig, error) {
	return nil, errRefusing
}

func (refusing) OnDeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigParams) error {
	return errRefusing
}

func (refusing) OnGetExtendedAgentCard(context.Context) (*a2a.AgentCard, error) {
	return nil, errRefusing
}

// recordHandler answers retransmissions from the hop records before the
// handler it wraps sees them; every other method is that handler's.
type recordHandler struct {
	a2asrv.RequestHandler
	x *Executor
}

func (r *recordHandler) OnSendMessage(ctx context.Context, p *a2a.MessageSendParams) (a2a.SendMessageResult, error) {
	ctx, pm := r.x.parseOnce(ctx, p)
	if m, ok, err := r.x.fromRecord(ctx, p, pm); err != nil || ok {
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	res, err := r.RequestHandler.OnSendMessage(ctx, p)
	if err != nil {
		if m, ok := r.x.equivocationRefused(ctx, p, pm); ok {
			return m, nil
		}
	}
	return res, err
}

// OnCancelTask is the wrapped handler's, run again when a2a-go answered
// it without the Executor's verdict. a2a-go v0.3.15 (taskexec's
// localManager) does so in two ways:
//
//   - It hands a cancel to the task's running execution, if any
//     (handleCancelWithConcurrentRun). When that execution resolves (for
//     instance to INPUT_REQUIRED, as a task that still carries another
//     hop does) before it reads the cancel, the Executor's CANCELED goes
//     to a queue no one reads, or to a closed one, and the request fails
//     as not cancelable, although the hop's cancel is recorded and its
//     work stopped (a2a-go's own comment there says the cancel should
//     then start again as if no execution ran).
//   - It joins a cancel onto one already in progress for the task and
//     answers both with its result: a cancel of one hop would get the
//     refusal of another's, unverified and unrecorded.
//
// Such a request is run again, once the execution or the other cancel
// has ended: at most cancelTries times in all, not after the request
// itself ended, OnCancel started once. A cancel the Executor refused
// itself (no valid "canceled", another hop still open) is answered as it
// was; so is one a2a-go refused before the Executor ran when that answer
// stands (the task is unknown or ended) or the task carries no handoff
// (the agent's own Cancel, which a2a-go's join is right for).
func (r *recordHandler) OnCancelTask(ctx context.Context, p *a2a.TaskIDParams) (*a2a.Task, error) {
	if p == nil {
		return r.RequestHandler.OnCancelTask(ctx, p)
	}
	try := new(cancelTry)
	ctx = context.WithValue(ctx, cancelTryKey{}, try)
	for n := 1; ; n++ {
		try.ran.Store(false)
		try.wrote.Store(false)
		t, err := r.RequestHandler.OnCancelTask(ctx, p)
		if err == nil || n == cancelTries {
			return t, err
		}
		ran := try.ran.Load()
		if ran && !try.wrote.Load() || !ran && !r.unseenHandoffCancel(ctx, p.ID) {
			return t, err
		}
		if !ran {
			r.x.rerunUnseen.Add(1)
		}
		// A write to a closed queue fails at once, while a2a-go may not
		// yet have let go of the execution that closed it: a pause
		// before the next run.
		select {
		case <-ctx.Done():
			return t, err
		case <-time.After(time.Duration(n) * cancelPause):
		}
	}
}

// unseenHandoffCancel reports whether a Cancel Task request for task that
// a2a-go answered without running the Executor is worth running again:
// the task is still open and carries a handoff, so the answer was another
// request's (a2a-go joins a cancel onto one in progress for the task,
// even one whose client has gone) and this request's cancel was never
// verified.
func (r *recordHandler) unseenHandoffCancel(ctx context.Context, task a2a.TaskID) bool {
	t, err := r.RequestHandler.OnGetTask(ctx, &a2a.TaskQueryParams{ID: task})
	if err != nil || t == nil || t.Status.State.Terminal() {
		return false
	}
	hs, err := r.x.hopsOfTask(ctx, t, false)
	return err == nil && len(hs) > 0
}

func (r *recordHandler) OnSendMessageStream(ctx context.Context, p *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		ctx, pm := r.x.parseOnce(ctx, p)
		if m, ok, err := r.x.fromRecord(ctx, p, pm); err != nil || ok {
			if err != nil {
				yield(nil, err)
			} else {
				yield(m, nil)
			}
			return
		}
		first := true
		for ev, err := range r.RequestHandler.OnSendMessageStream(ctx, p) {
			if first && err != nil {
				// Refused before any event: before the Executor ran.
				if m, ok := r.x.equivocationRefused(ctx, p, pm); ok {
					yield(m, nil)
					return
				}
			}
			first = false
			if !yield(ev, err) {
				return
			}
		}
	}
}

// parsed is the carrier's one parse of a message's Handoff: its octets
// as delegate.Receive takes them, and the offer read without verifying
// it (o nil when the Handoff or its offer cannot be read), for routing
// and the authentication question only.
type parsed struct {
	msg  *a2a.Message // the message it was read from
	b    []byte
	err  error            // handoffOctets' error, when b is nil
	h    *handoff.Handoff // ParseHandoff's result for b (nil or not) ...
	herr error            // ... and its error: what the delegate receives
	o    *handoff.Offer   // nil unless h parsed and its offer decodes
}

type parsedKey struct{}

// parse reads m's Handoff once.
func (x *Executor) parse(m *a2a.Message, v any) *parsed {
	pm := &parsed{msg: m}
	if pm.b, pm.err = handoffOctets(v); pm.err != nil {
		return pm
	}
	pm.h, pm.herr = x.d.ParseHandoff(pm.b) // with the delegate's cache, if any
	if pm.herr == nil {
		if o, _, err := handoff.UnsafeDecode(pm.h.Offer); err == nil && o != nil {
			pm.o = o
		}
	}
	return pm
}

// parseOnce parses the Handoff of p's message, if it carries one, and
// puts the parse in the returned context, where the Executor finds it
// (a2a-go runs Execute under a context with the request's values), so
// that a request's Handoff is parsed once by the carrier.
func (x *Executor) parseOnce(ctx context.Context, p *a2a.MessageSendParams) (context.Context, *parsed) {
	if p == nil || p.Message == nil {
		return ctx, nil
	}
	v, has := p.Message.Metadata[Key]
	if !has {
		return ctx, nil
	}
	pm := x.parse(p.Message, v)
	return context.WithValue(ctx, parsedKey{}, pm), pm
}

// parsedFor is the parse of m's Handoff v: the one parseOnce made for
// this very message, or a new one.
func (x *Executor) parsedFor(ctx context.Context, m *a2a.Message, v any) *parsed {
	if pm, ok := ctx.Value(parsedKey{}).(*parsed); ok && pm.msg == m {
		return pm
	}
	return x.parse(m, v)
}

// recorded reads the hop's record for the offer pm read without verifying
// it. ok is false when the message is not one a2a-go would take (it
// answers those itself), carries no readable Handoff, or names a hop with
// no record: those go on unchanged. A store failure is an error: nothing
// was decided.
func (x *Executor) recorded(ctx context.Context, p *a2a.MessageSendParams, pm *parsed) (rec *store.Record, ok bool, err error) {
	if pm == nil || pm.o == nil {
		return nil, false, nil
	}
	m := p.Message
	if m.ID == "" || m.Role == "" || len(m.Parts) == 0 {
		return nil, false, nil
	}
	rec, err = x.cfg.Delegate.Store.Get(ctx, pm.o.Iss, pm.o.Hop)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("a2ahandoff: reading hop %s of %q: %w", pm.o.Hop, pm.o.Iss, err)
	}
	return rec, true, nil
}

// sameOffer reports whether the offer pm carries is the recorded one by
// D5: the same octets, or a copy with the same signed content (a
// malleated signature, an edited COSE unprotected header, a re-signing).
func sameOffer(rec *store.Record, pm *parsed) bool {
	if rec.Digest.Equal(pm.h.Offer.Digest()) {
		return true
	}
	same, err := handoff.SameContent(handoff.Element{Form: rec.OfferForm, Octets: rec.Offer}, pm.h.Offer)
	return err == nil && same
}

// fromRecord answers a retransmission of a recorded offer (the record's
// offer, or a same-content copy of it: D5) from the record. ok is false
// for anything else, which goes on to a2a-go and the Executor.
func (x *Executor) fromRecord(ctx context.Context, p *a2a.MessageSendParams, pm *parsed) (*a2a.Message, bool, error) {
	rec, ok, err := x.recorded(ctx, p, pm)
	if !ok || err != nil || !sameOffer(rec, pm) {
		return nil, false, err
	}
	// The delegate decides, exactly as for a retransmission in a new
	// task: step 1 and 2 on the octets, step 4 finds the record (D5), and
	// the last status is resent only to an authenticated iss. The record
	// cannot go between the look-up and this call in a way that takes the
	// work: a record is swept only after exp plus the skew, when step 3
	// refuses the offer as stale.
	a, err := x.d.ReceiveParsed(ctx, pm.h, pm.herr, p.Message.ContextID, x.sender(ctx))
	if err != nil {
		return nil, false, fmt.Errorf("a2ahandoff: receiving the offer: %w", err)
	}
	if a.Outcome != handoff.Retransmission {
		// Not answerable from the record (its key is no longer trusted,
		// say): the Executor decides as for any message. a.Take cannot
		// be set here (see above).
		return nil, false, nil
	}
	activate(ctx)
	return retransmitted(a, p.Message.ContextID, x.taskFor(ctx, a.Iss, a.Hop)), true, nil
}

// equivocationRefused handles a message a2a-go refused before the
// Executor ran whose offer equivocates a recorded hop: the delegate
// handles the equivocation as the Executor does for one in another task,
// and the reply is the Executor's refusal. ok is false for anything else:
// a2a-go's error stands.
func (x *Executor) equivocationRefused(ctx context.Context, p *a2a.MessageSendParams, pm *parsed) (*a2a.Message, bool) {
	rec, ok, err := x.recorded(ctx, p, pm)
	if !ok || err != nil || sameOffer(rec, pm) {
		return nil, false
	}
	a, err := x.d.ReceiveParsed(ctx, pm.h, pm.herr, p.Message.ContextID, x.sender(ctx))
	if err != nil || a.Outcome != handoff.Equivocation {
		return nil, false
	}
	activate(ctx)
	return refusal(p.Message.ContextID, p.Message.TaskID, nil, x.equivocation(ctx, a.Iss, a.Hop)), true
}
