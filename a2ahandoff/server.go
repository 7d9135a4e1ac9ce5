package a2ahandoff

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// ServerConfig configures an Executor.
type ServerConfig struct {
	// Delegate configures the durable receiving side: Options.Me (this
	// agent's AgentId), Options.Keys (trust), Store, Signer, StatusForm.
	// Stop is chained: the Executor stops the agent's run itself. Defer is
	// not supported (the agent runs when the offer is accepted).
	Delegate delegate.Config

	// Sender returns the AgentId the host protocol authenticated as the
	// sender of the current request (by the credential it carried, say),
	// or "" for none. A status is resent for a retransmission only to a
	// sender that is the verified offer's iss (draft "Replay and
	// Freshness"), and a task's follow-ups, gets and cancels are taken
	// only from its delegator. Nil means no one is ever authenticated:
	// retransmissions are answered without a status (and NewExecutor
	// refuses delegate.Config.SenderMustBeIss, which would refuse every
	// offer). UserName reads the a2asrv CallContext's User.
	Sender func(ctx context.Context) string

	// AllowPlain lets messages without a Handoff reach the agent
	// unchecked. By default such a message is refused (task REJECTED,
	// no status: there is no offer to answer).
	AllowPlain bool

	// NoEffectUnlessCompleted declares that the agent's work takes no
	// effect unless it completes (it is read-only, or it commits at the
	// end): an error, a FAILED or REJECTED state, or a stop (cancel,
	// equivocation) without a Declare then becomes "failed" with no refs.
	// Without it the outcome of such a run is unknown: the hop stays
	// "accepted" and is flagged to the operator (draft "Knowing the
	// Outcome": the delegate never guesses).
	NoEffectUnlessCompleted bool

	// OnCancel, if set, is called after a verified "canceled" for a hop
	// this agent took, with the digest of that offer. An agent that
	// passed the work on cancels down there (delegator.CancelDown, then
	// Client.SendCancel).
	//
	// It runs after the hop's cancel is recorded and CANCELED is written,
	// in a goroutine of its own, so that the Cancel Task request is
	// answered without waiting for the chain below. Its ctx keeps the
	// request's values (the CallContext, say) but not its cancellation,
	// and ends after OnCancelTimeout.
	OnCancel func(ctx context.Context, iss, hop string, offer handoff.Digest)

	// OnCancelTimeout bounds each OnCancel call (its ctx is canceled
	// then); default DefaultOnCancelTimeout.
	OnCancelTimeout time.Duration
}

// DefaultOnCancelTimeout is the default ServerConfig.OnCancelTimeout.
const DefaultOnCancelTimeout = time.Minute

// Executor wraps an a2asrv.AgentExecutor so that the receiving checks of
// package delegate run before the agent's own code sees a task, and the
// A2A task states follow the draft's mapping table:
//
//	offer rejected (any check)     -> REJECTED, the signed "rejected" (none for step 1)
//	offer accepted                 -> WORKING with the signed "accepted"; the agent runs
//	agent completes                -> COMPLETED with the signed "completed"
//	agent fails, outcome known     -> FAILED with the signed "failed"
//	agent fails, outcome unknown   -> FAILED, no status, a text saying so; the hop
//	                                  stays "accepted" and is flagged (see below)
//	verified "canceled"            -> CANCELED; the agent's context is canceled
//	retransmission                 -> a Message with the last status, from the record,
//	                                  naming the hop's task in TaskID (see below)
//	                                  (NewHandler: also into the hop's own task)
//	equivocation                   -> REJECTED, no status
//	refusal in an existing task    -> a Message (no status unless one is due);
//	                                  the task is left as it was
//	offer into another's task      -> refused with a Message, before any check:
//	                                  nothing recorded or signed (one task, one
//	                                  delegator: see below)
//	cancel while another hop open  -> the hop canceled and stopped, the task not
//	                                  CANCELED (the request fails as not
//	                                  cancelable; the task waits INPUT_REQUIRED)
//	offer into a task being ended  -> refused with a Message before the claim
//	                                  (a cancel of its last open hop came first)
//
// The draft's table maps the hop's "accepted" to WORKING, and the host
// keeps its own task state. When the agent's code ended the task but the
// effect of its work is not known, the hop stays "accepted" (flagged to
// the operator, Knowing the Outcome) while the A2A task is FAILED: the
// agent is no longer working, and a task left WORKING would wait forever.
// No signed "failed" is sent, so a delegator that follows the signed
// statuses keeps the hop unresolved, which fails safe.
//
// The answer to a retransmission names in Message.TaskID the A2A task
// made for the hop's offer, so that a delegator whose first reply was
// lost can Get and Cancel it; only to a sender authenticated as the
// offer's iss (the task id opens the task, statuses included, to Get
// Task), and only while this process remembers the task: the mapping is
// in memory, kept until the offer is stale. A restarted delegate names no
// task (fail safe: the delegator cannot poll or cancel by task and keeps
// asking).
//
// A message with a new Handoff into an existing task (a second offer)
// joins the task only when its offer's iss is the iss of the task's first
// hop and the host authenticated the sender as that iss; otherwise anyone
// who learned the task id could run its own work inside the task and end
// it CANCELED under the first delegator's hop.
//
// A message without a Handoff in a task taken with one (a follow-up, after
// INPUT_REQUIRED say) runs the agent under that hop only when the host
// authenticated its sender as the offer's iss (Authenticated) and the hop
// is accepted, neither canceled nor equivocated; otherwise it is refused.
//
// Its Execute and Cancel implement a2asrv.AgentExecutor. Serve it with
// NewHandler (a2asrv.NewHandler plus the answer to a retransmission sent
// into the hop's own task, which a2a-go refuses before any executor
// runs), and put StrictHandler in front of the JSON-RPC handler: the
// Executor reads the Handoff after the SDK decoded it, and without
// StrictHandler a JSON Handoff with duplicate member names or lone
// surrogates cannot be told from a strict one:
//
//	StrictHandler(a2asrv.NewJSONRPCHandler(NewHandler(x, opts...)))
type Executor struct {
	agent a2asrv.AgentExecutor
	d     *delegate.Delegate
	cfg   ServerConfig

	mu      sync.Mutex
	running map[[2]string]*stopper   // (iss, hop) -> stop the agent's run
	tasks   map[[2]string]hopTask    // (iss, hop) -> the A2A task carrying it
	pruneAt int                      // prune tasks when it grows to this
	gates   map[a2a.TaskID]*taskGate // taskgate.go
	// A cancel's marks on tasks (taskgate.go), by its request context,
	// until a2a-go's Cleanup.
	endings map[*a2asrv.RequestContext][]a2a.TaskID
	// Cancel Task requests run again because a2a-go answered them
	// without running the Executor (recordHandler.OnCancelTask; for tests).
	rerunUnseen atomic.Int64

	// The detached OnCancel calls still running, for Wait. A counter and
	// a Cond rather than a sync.WaitGroup: a cancel may start one while
	// Wait waits, which a WaitGroup forbids.
	cancels int        // under mu
	runs    int        // Execute calls in progress, under mu, for Drain
	idle    *sync.Cond // on mu; broadcast when cancels or runs drops to 0
}

// hopTask is the A2A task made for a hop's offer, kept (in memory) until
// the offer is stale: a retransmission of it is refused after that, so
// nothing asks for the task id any more.
type hopTask struct {
	id   a2a.TaskID
	keep time.Time
}

var (
	_ a2asrv.AgentExecutor         = (*Executor)(nil)
	_ a2asrv.AgentExecutionCleaner = (*Executor)(nil)
)

// Stopped reports whether the run that ctx belongs to (the ctx an
// agent's Execute is given) was stopped by a verified cancel or an
// equivocation, rather than ended for another reason: a2a-go ends an
// execution's ctx once it has processed the final event, and a server
// that shuts down ends it too. Only a stop calls for stopping the work.
func Stopped(ctx context.Context) bool {
	return ctx != nil && errors.Is(context.Cause(ctx), errStopped)
}

var errStopped = errors.New("a2ahandoff: the hop's work was stopped (canceled by the delegator, or its offer equivocated)")

// NewExecutor builds the delegate from cfg.Delegate and wraps agent.
func NewExecutor(ctx context.Context, agent a2asrv.AgentExecutor, cfg ServerConfig) (*Executor, error) {
	if ctx == nil {
		return nil, invalid("a2ahandoff: NewExecutor needs a context, got nil")
	}
	if agent == nil {
		return nil, invalid("a2ahandoff: NewExecutor needs the agent's executor")
	}
	if cfg.Delegate.Defer {
		return nil, invalid("a2ahandoff: delegate.Config.Defer is not supported: the A2A executor runs the agent when the offer is accepted")
	}
	if cfg.OnCancelTimeout < 0 {
		return nil, invalid("a2ahandoff: ServerConfig.OnCancelTimeout must not be negative")
	}
	if cfg.Delegate.SenderMustBeIss && cfg.Sender == nil {
		return nil, invalid("a2ahandoff: delegate.Config.SenderMustBeIss needs ServerConfig.Sender: with no sender ever authenticated, every offer would be refused")
	}
	if cfg.OnCancelTimeout == 0 {
		cfg.OnCancelTimeout = DefaultOnCancelTimeout
	}
	x := &Executor{agent: agent, cfg: cfg, running: map[[2]string]*stopper{}, tasks: map[[2]string]hopTask{},
		gates: map[a2a.TaskID]*taskGate{}, endings: map[*a2asrv.RequestContext][]a2a.TaskID{}}
	x.idle = sync.NewCond(&x.mu)
	userStop := cfg.Delegate.Stop
	cfg.Delegate.Stop = func(iss, hop string) {
		x.stop(iss, hop)
		if userStop != nil {
			userStop(iss, hop)
		}
	}
	d, err := delegate.New(ctx, cfg.Delegate)
	if err != nil {
		return nil, err
	}
	x.d, x.cfg = d, cfg
	return x, nil
}

// errNilExecutor: a nil Executor, or one not made by NewExecutor.
var errNilExecutor = invalid("a2ahandoff: the Executor is nil or was not made by NewExecutor")

// usable reports whether x was made by NewExecutor.
func (x *Executor) usable() bool {
	return x != nil && x.d != nil && x.agent != nil && x.running != nil && x.idle != nil
}

// Delegate is the durable receiving side the Executor uses: its flags,
// sweeper, and Finish for outcomes learned after the run. It is nil for a
// nil Executor (or one not made by NewExecutor).
func (x *Executor) Delegate() *delegate.Delegate {
	if !x.usable() {
		return nil
	}
	return x.d
}

// Wait returns when no detached OnCancel call (ServerConfig.OnCancel) is
// running: call it on shutdown, after the server stopped taking requests
// and before the stores that OnCancel uses are closed. A cancel that
// arrives while Wait waits starts another call, which Wait also waits
// for. Each call ends within OnCancelTimeout only if OnCancel heeds its
// ctx. On a nil Executor (or one not made by NewExecutor) it returns at
// once: nothing was started.
func (x *Executor) Wait() {
	if !x.usable() {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for x.cancels > 0 {
		x.idle.Wait()
	}
}

// Drain is Wait for the agent's runs too: it returns nil when no Execute
// (the checks, the agent's run and the recording of its outcome) and no
// detached OnCancel call is in progress, or an error saying how many are
// when ctx ends first. a2a-go runs a non-blocking request's task after
// the request is answered, so an HTTP server's Shutdown does not wait
// for it: call Drain after Shutdown and before closing the store, so
// that an outcome is not lost to a closed store.
func (x *Executor) Drain(ctx context.Context) error {
	if !x.usable() {
		return nil
	}
	stop := context.AfterFunc(ctx, func() {
		x.mu.Lock()
		x.idle.Broadcast()
		x.mu.Unlock()
	})
	defer stop()
	x.mu.Lock()
	defer x.mu.Unlock()
	for x.cancels > 0 || x.runs > 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("a2ahandoff: %d runs and %d cancels still in progress: %w", x.runs, x.cancels, context.Cause(ctx))
		}
		x.idle.Wait()
	}
	return nil
}

// began and ended count an Execute in progress, for Drain.
func (x *Executor) began() {
	x.mu.Lock()
	x.runs++
	x.mu.Unlock()
}

func (x *Executor) ended() {
	x.mu.Lock()
	if x.runs--; x.runs == 0 {
		x.idle.Broadcast()
	}
	x.mu.Unlock()
}

// UserName is a Sender function for servers whose authentication sets
// the a2asrv CallContext's User (a CallInterceptor, say): the sender is
// the user's name when the user is authenticated.
func UserName(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	cc, ok := a2asrv.CallContextFrom(ctx)
	if !ok || cc.User == nil || !cc.User.Authenticated() {
		return ""
	}
	return cc.User.Name()
}

// Hop is the verified offer whose work the agent's code is doing (the
// same names as mcphandoff.Hop: ID, HopFrom, Declare).
type Hop struct {
	Iss, ID string
	Offer   *handoff.Offer   // the verified payload
	Handoff *handoff.Handoff // as received; pass it on with delegator.Offer{From: Handoff}
	// Result is the verdict of the receiving checks (chain quality,
	// reference outcomes); nil for a follow-up message of the task.
	Result *handoff.Result

	mu  sync.Mutex
	run *run // the run doing its work while the agent's code runs; nil before and after
}

type runKey struct{}

// HopFrom returns the hop whose work the current Execute is doing; nil
// outside one (or for a nil ctx).
func HopFrom(ctx context.Context) *Hop {
	if ctx == nil {
		return nil
	}
	r, ok := ctx.Value(runKey{}).(*run)
	if !ok {
		return nil
	}
	return r.hop
}

// Declare states the outcome of the hop's work, from the agent's code,
// before it ends the task: refs of the result for "completed", and for
// "failed" every part that took effect (or NoEffect). The Executor signs
// and records it when the task ends (COMPLETED, FAILED, an error, or a
// stop); the last Declare wins. Without one a completed task is
// "completed" with no refs.
func (h *Hop) Declare(out delegate.Outcome) error {
	if h == nil {
		return invalid("a2ahandoff: Declare on a nil Hop (HopFrom outside a handoff task's Execute)")
	}
	h.mu.Lock()
	r := h.run
	h.mu.Unlock()
	if r == nil {
		return invalid("a2ahandoff: Declare on a Hop whose work is not running")
	}
	if out.State != store.Completed && out.State != store.Failed {
		return fmt.Errorf("a2ahandoff: an outcome is completed or failed, not %q", out.State)
	}
	if out.State == store.Failed && len(out.Refs) == 0 && !out.NoEffect {
		return errors.New(`a2ahandoff: a "failed" outcome lists in Refs what took effect, or sets NoEffect`)
	}
	r.mu.Lock()
	r.reported = &out
	r.mu.Unlock()
	return nil
}
