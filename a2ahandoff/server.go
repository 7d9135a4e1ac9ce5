package a2ahandoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/a2aproject/a2a-go/log"

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

	// Authenticated reports whether the host protocol authenticated the
	// sender of the current request as iss (the offer's issuer), for
	// example by the credential the request carried. A status is resent
	// for a retransmission only to such a sender (draft "Replay and
	// Freshness"). Nil means never: retransmissions are answered without
	// a status. UserIsIss reads the a2asrv CallContext's User.
	Authenticated func(ctx context.Context, iss string) bool

	// AllowPlain lets messages without a Handoff reach the agent
	// unchecked. By default such a message is refused (task REJECTED,
	// no status: there is no offer to answer).
	AllowPlain bool

	// NoEffectUnlessCompleted declares that the agent's work takes no
	// effect unless it completes (it is read-only, or it commits at the
	// end): an error, a FAILED or REJECTED state, or a stop (cancel,
	// equivocation) without a Report then becomes "failed" with no refs.
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
	running map[[2]string]*stopper // (iss, hop) -> stop the agent's run
	tasks   map[[2]string]hopTask  // (iss, hop) -> the A2A task carrying it
	pruneAt int                    // prune tasks when it grows to this

	// The detached OnCancel calls still running, for Wait. A counter and
	// a Cond rather than a sync.WaitGroup: a cancel may start one while
	// Wait waits, which a WaitGroup forbids.
	cancels int        // under mu
	idle    *sync.Cond // on mu; broadcast when cancels drops to 0
}

// hopTask is the A2A task made for a hop's offer, kept (in memory) until
// the offer is stale: a retransmission of it is refused after that, so
// nothing asks for the task id any more.
type hopTask struct {
	id   a2a.TaskID
	keep time.Time
}

var _ a2asrv.AgentExecutor = (*Executor)(nil)

var errStopped = errors.New("a2ahandoff: the hop's work was stopped (canceled by the delegator, or its offer equivocated)")

// NewExecutor builds the delegate from cfg.Delegate and wraps agent.
func NewExecutor(ctx context.Context, agent a2asrv.AgentExecutor, cfg ServerConfig) (*Executor, error) {
	if ctx == nil {
		return nil, errors.New("a2ahandoff: NewExecutor needs a context, got nil")
	}
	if agent == nil {
		return nil, errors.New("a2ahandoff: NewExecutor needs the agent's executor")
	}
	if cfg.Delegate.Defer {
		return nil, errors.New("a2ahandoff: delegate.Config.Defer is not supported: the A2A executor runs the agent when the offer is accepted")
	}
	if cfg.OnCancelTimeout < 0 {
		return nil, errors.New("a2ahandoff: ServerConfig.OnCancelTimeout must not be negative")
	}
	if cfg.OnCancelTimeout == 0 {
		cfg.OnCancelTimeout = DefaultOnCancelTimeout
	}
	x := &Executor{agent: agent, cfg: cfg, running: map[[2]string]*stopper{}, tasks: map[[2]string]hopTask{}}
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
var errNilExecutor = errors.New("a2ahandoff: the Executor is nil or was not made by NewExecutor")

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

// UserIsIss is an Authenticated function for servers whose
// authentication sets the a2asrv CallContext's User (a CallInterceptor,
// say): the sender is iss when the user is authenticated and its name is
// iss.
func UserIsIss(ctx context.Context, iss string) bool {
	if ctx == nil || iss == "" {
		return false
	}
	cc, ok := a2asrv.CallContextFrom(ctx)
	return ok && cc.User != nil && cc.User.Authenticated() && cc.User.Name() == iss
}

// Hop is the verified offer whose work the agent's code is doing.
type Hop struct {
	Iss, Hop string
	Offer    *handoff.Offer   // the verified payload
	Handoff  *handoff.Handoff // as received; pass it on with delegator.Offer{From: Handoff}
	// Result is the verdict of the receiving checks (chain quality,
	// reference outcomes); nil for a follow-up message of the task.
	Result *handoff.Result
}

type runKey struct{}

// Received returns the hop whose work the current Execute is doing; nil,
// false outside one (or for a nil ctx).
func Received(ctx context.Context) (*Hop, bool) {
	if ctx == nil {
		return nil, false
	}
	r, ok := ctx.Value(runKey{}).(*run)
	if !ok {
		return nil, false
	}
	return r.hop, true
}

// Report states the outcome of the hop's work, from the agent's code,
// before it ends the task: refs of the result for "completed", and for
// "failed" every part that took effect (or NoEffect). The Executor signs
// and records it when the task ends (COMPLETED, FAILED, an error, or a
// stop); the last Report wins. Without a Report a completed task is
// "completed" with no refs.
func Report(ctx context.Context, out delegate.Outcome) error {
	if ctx == nil {
		return errors.New("a2ahandoff: Report needs the context of a handoff task's Execute, got nil")
	}
	r, ok := ctx.Value(runKey{}).(*run)
	if !ok {
		return errors.New("a2ahandoff: Report outside a handoff task's Execute")
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

// Execute runs the receiving checks on the Handoff in the message's
// metadata, with the task's contextId as the dialog (step 5), and runs the
// agent only for an accepted offer.
func (x *Executor) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if err := x.callable(ctx, rc, q); err != nil {
		return err
	}
	var v any
	has := false
	if rc.Message != nil {
		v, has = rc.Message.Metadata[Key]
	}
	if !has {
		if rc.StoredTask != nil {
			h, err := x.hopOfTask(ctx, rc.StoredTask)
			if err != nil {
				return x.refuse(ctx, rc, q, nil, err.Error())
			}
			if h != nil { // a follow-up message of a task taken with a handoff
				return x.followUp(ctx, rc, q, h)
			}
		}
		if x.cfg.AllowPlain {
			return x.agent.Execute(ctx, rc, q)
		}
		return x.refuse(ctx, rc, q, nil, "this agent takes work only with a handoff: metadata "+Key+" is missing")
	}
	activate(ctx)
	// The carrier's one parse of the Handoff (made by NewHandler's
	// handler for this message, else here): the claimed iss, for the
	// authentication question and the task's owner; delegate.Receive
	// parses and verifies the octets itself.
	pm := x.parsedFor(ctx, rc.Message, v)
	if pm.err != nil {
		// A malformed Handoff is bad-signature (D3) at step 1: nothing
		// verified to address a status to.
		return x.refuse(ctx, rc, q, nil, "rejected (bad-signature): "+pm.err.Error())
	}
	iss := ""
	if pm.o != nil {
		iss = pm.o.Iss
	}
	if rc.StoredTask != nil {
		// One task, one delegator: an offer joins an existing task only
		// from the delegator of the task's first hop.
		if why := x.joinRefusal(ctx, rc.StoredTask, rc.Message, iss); why != "" {
			return x.refuse(ctx, rc, q, nil, why)
		}
	}
	// The dialog is the task's contextId. When the message named none,
	// the server made one up, and the offer cannot name it: rejected
	// with "policy" rather than skipping step 5 (fail safe).
	a, err := x.d.ReceiveParsed(ctx, pm.h, pm.herr, rc.ContextID, x.authenticated(ctx, iss))
	if err != nil {
		return fmt.Errorf("a2ahandoff: receiving the offer: %w", err) // nothing was decided
	}
	switch a.Outcome {
	case handoff.Rejected:
		why := "rejected"
		if a.Result != nil && a.Result.Err != nil {
			why = "rejected: " + a.Result.Err.Error()
		} else if a.Result != nil {
			why = "rejected (" + string(a.Result.Reason) + ")"
		}
		if rc.StoredTask == nil && a.Iss != "" {
			x.noteTask(a, rc.TaskID) // the REJECTED task carries the hop
		}
		return x.refuse(ctx, rc, q, a.Status, why)
	case handoff.Equivocation:
		// The second offer gets no status (draft "Forks, Concurrency,
		// and Equivocation"); the delegate stopped the first's run, if
		// one is running here. A first whose work is paused (its task
		// INPUT_REQUIRED, no run) has its outcome settled now.
		if rc.StoredTask != nil {
			if h, _ := x.hopOfTask(ctx, rc.StoredTask); h != nil && h.Iss == a.Iss && h.Hop == a.Hop {
				// The equivocating offer came into the first offer's own
				// task: that task ends with the first offer's outcome.
				if ev := x.settlePaused(ctx, rc, a.Iss, a.Hop, stoppedByEquivocation); ev != nil {
					return q.Write(ctx, ev)
				}
			}
		}
		return x.refuse(ctx, rc, q, nil, x.equivocation(ctx, a.Iss, a.Hop))
	case handoff.Retransmission:
		// Reached when the offer was not yet recorded as the request came
		// in (a copy racing its original, or an Executor served without
		// NewHandler); NewHandler answers the others before a2a-go runs.
		return q.Write(ctx, retransmitted(a, rc.ContextID, x.taskFor(ctx, a.Iss, a.Hop)))
	case handoff.Accepted:
		if !a.Take || a.Status == nil {
			return fmt.Errorf("a2ahandoff: hop %s accepted without taking the work", a.Hop)
		}
		x.noteTask(a, rc.TaskID)
		ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking, statusMessage(rc, a.Status, "accepted: working"))
		if err := q.Write(ctx, ev); err != nil {
			return err
		}
		return x.run(ctx, rc, q, &Hop{Iss: a.Iss, Hop: a.Hop, Offer: a.Result.Offer, Handoff: a.Result.Handoff, Result: a.Result})
	}
	return fmt.Errorf("a2ahandoff: unexpected outcome %q", a.Outcome)
}

// callable checks what a2asrv always passes to Execute and Cancel, for
// other callers: the agent does not run without them.
func (x *Executor) callable(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	switch {
	case !x.usable():
		return errNilExecutor
	case ctx == nil:
		return errors.New("a2ahandoff: the Executor needs a context, got nil")
	case rc == nil:
		return errors.New("a2ahandoff: the Executor needs the request's *a2asrv.RequestContext, got nil")
	case q == nil:
		return errors.New("a2ahandoff: the Executor needs the task's eventqueue.Queue, got nil")
	}
	return nil
}

func (x *Executor) authenticated(ctx context.Context, iss string) bool {
	return iss != "" && x.cfg.Authenticated != nil && x.cfg.Authenticated(ctx, iss)
}

// joinRefusal says why an offer claiming iss may not join the existing
// task t, "" when it may: only the delegator of the task's first hop
// runs work in it, as the host authenticated it (as for a follow-up
// message). Anyone else who learned the task id would otherwise run its
// own work inside the task, see its history, and, by canceling its own
// hop, end the task CANCELED under the first delegator's hop. The offer
// is refused before the delegate sees it (decision 53): nothing is
// recorded or signed and no work is taken, so the offer, sent in a task
// of its own, is processed as new. A task whose first Handoff was not
// taken, or cannot be read, takes no offer (fail safe); a task with no
// Handoff before this message (one AllowPlain let in) is nobody's hop.
func (x *Executor) joinRefusal(ctx context.Context, t *a2a.Task, m *a2a.Message, iss string) string {
	// a2a-go has appended the message itself (this very pointer) to the
	// stored task's history: the task's hops are those before it. Only
	// that entry goes. A message reusing the id of one already in the
	// history is not appended (a2a-go takes it for a retried execution),
	// and the entry with its id is someone's earlier message, the first
	// hop's perhaps: it stays, so that reusing the first message's id
	// cannot make the task look like nobody's.
	before := *t
	before.History = slices.DeleteFunc(slices.Clone(t.History), func(h *a2a.Message) bool { return h == m })
	first, err := x.hopOfTask(ctx, &before)
	switch {
	case err != nil:
		return "refused: an offer joins an existing task only from the delegator of its first hop: " + err.Error()
	case first == nil:
		return ""
	case iss != first.Iss:
		return fmt.Sprintf("refused: task %s belongs to hop %s of %q; an offer from %q joins it only in a task of its own (one task, one delegator)", t.ID, first.Hop, first.Iss, iss)
	case !x.authenticated(ctx, first.Iss):
		return fmt.Sprintf("refused: an offer joins task %s only from the offer's issuer %q, authenticated by the host", t.ID, first.Iss)
	}
	return ""
}

// refuse ends a new task REJECTED, with the signed status when there is
// one to send. A message into an existing task is refused with a
// standalone agent Message instead (as a retransmission is answered): a
// refusal never writes onto a task that someone else's offer started,
// whoever sent the message.
func (x *Executor) refuse(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue, st *handoff.Element, why string) error {
	if rc.StoredTask != nil {
		return q.Write(ctx, refusal(rc.ContextID, rc.TaskID, st, why))
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateRejected, statusMessage(rc, st, why))
	ev.Final = true
	return q.Write(ctx, ev)
}

// refusal is the standalone agent Message that refuses a message sent
// into an existing task, with st when one is due; task is left as it was.
func refusal(contextID string, task a2a.TaskID, st *handoff.Element, why string) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "handoff: " + why + "; task " + string(task) + " is unchanged"})
	m.ContextID = contextID
	m.Extensions = withURI(nil)
	if st != nil {
		AttachStatus(m, *st)
	}
	return m
}

// retransmitted is the reply to a retransmission (draft "Asking Again"):
// a standalone agent Message, never an event of a task, carrying the last
// status sent when the delegate resends it (a.Status: only to a sender
// authenticated as the offer's iss), and naming in TaskID the A2A task
// that carries the hop (task, "" when none is known: see taskFor), so
// that a delegator whose first reply was lost learns the task it polls
// and cancels. The message is not added to that task: a2a-go returns a
// Message result as it is, and the task's history does not change.
func retransmitted(a *delegate.Answer, contextID string, task a2a.TaskID) *a2a.Message {
	text := fmt.Sprintf("retransmission of hop %s: answered from the record, not processed again", a.Hop)
	if a.Status == nil {
		text += "; no status resent (none sent yet, or the sender is not authenticated as the offer's iss)"
	}
	m := a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: text})
	m.ContextID, m.TaskID = contextID, task
	m.Extensions = withURI(nil)
	if a.Status != nil {
		AttachStatus(m, *a.Status)
	}
	return m
}

const stoppedByEquivocation = "stopped: the delegator equivocated"

// equivocation settles the first offer of an equivocated hop when its
// work is paused here (not running: a running one was stopped by the
// delegate), and says why the second offer is refused. The second offer
// gets no status (draft "Forks, Concurrency, and Equivocation").
func (x *Executor) equivocation(ctx context.Context, iss, hop string) string {
	x.settlePaused(ctx, nil, iss, hop, stoppedByEquivocation)
	return fmt.Sprintf("refused: equivocation: another offer for hop %s of %q is recorded", hop, iss)
}

// activate lists URI among the extensions the response activated.
func activate(ctx context.Context) {
	if ext, ok := a2asrv.ExtensionsFrom(ctx); ok {
		e := CardExtension(false)
		ext.Activate(&e)
	}
}

// statusMessage is an agent message for a TaskStatus, carrying st.
func statusMessage(rc *a2asrv.RequestContext, st *handoff.Element, text string) *a2a.Message {
	m := a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: "handoff: " + text})
	m.Extensions = withURI(nil)
	if st != nil {
		AttachStatus(m, *st)
	}
	return m
}

// hopOfTask finds the hop of a stored task: the Handoff of the first user
// message carrying one, whose record shows it was taken. nil, nil: not a
// handoff task.
func (x *Executor) hopOfTask(ctx context.Context, t *a2a.Task) (*Hop, error) {
	hs, err := x.hopsOfTask(ctx, t, false)
	if err != nil || len(hs) == 0 {
		return nil, err
	}
	return hs[0], nil
}

// hopsOfTask finds the hops a stored task carries: the first Handoff in
// its history must have been taken (else an error), and with all, every
// later Handoff from the first hop's iss whose offer was taken is listed
// too (a second offer sent as a follow-up into the task); later ones not
// taken are skipped. So are those of another iss (one task, one
// delegator: such an offer was refused here, and may have been taken in
// a task of its own since) and those this process remembers taken in
// another task: a hop is listed only in the task that carries it, and
// cannot hold up the cancel of a task it was never part of.
func (x *Executor) hopsOfTask(ctx context.Context, t *a2a.Task, all bool) ([]*Hop, error) {
	if t == nil {
		return nil, nil
	}
	var hs []*Hop
	for _, m := range t.History {
		if m == nil || m.Role != a2a.MessageRoleUser {
			continue
		}
		v, ok := m.Metadata[Key]
		if !ok {
			continue
		}
		h, err := x.takenHop(ctx, t, v)
		if len(hs) > 0 {
			if err == nil && h.Iss == hs[0].Iss && x.inTask(h, t.ID) {
				hs = append(hs, h)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
		if !all {
			break
		}
	}
	return hs, nil
}

// takenHop reads a Handoff of a task's history and checks in the record
// that its offer was taken.
func (x *Executor) takenHop(ctx context.Context, t *a2a.Task, v any) (*Hop, error) {
	b, err := handoffOctets(v)
	if err != nil {
		return nil, fmt.Errorf("task %s: its Handoff cannot be read: %v", t.ID, err)
	}
	h, err := handoff.ParseHandoff(b, x.cfg.Delegate.Options.Limits)
	if err != nil {
		return nil, fmt.Errorf("task %s: its Handoff cannot be read: %v", t.ID, err)
	}
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil || o == nil {
		return nil, fmt.Errorf("task %s: its offer cannot be read: %v", t.ID, err)
	}
	// The payload was verified when the task was taken; the record
	// (same offer digest, taken) shows that it was.
	r, err := x.cfg.Delegate.Store.Get(ctx, o.Iss, o.Hop)
	if err != nil {
		return nil, fmt.Errorf("task %s: hop %s of %q: %w", t.ID, o.Hop, o.Iss, err)
	}
	if !r.Digest.Equal(h.Offer.Digest()) || r.State == store.Received || r.State == store.Rejected {
		return nil, fmt.Errorf("task %s: hop %s of %q was not taken with this offer", t.ID, o.Hop, o.Iss)
	}
	return &Hop{Iss: o.Iss, Hop: o.Hop, Offer: o, Handoff: h}, nil
}

// followUp runs the agent for a message without a Handoff in a task taken
// with one. The agent then works under the hop's verified offer and its
// statuses go to the sender, so the message must come from the offer's
// iss as the host authenticated it, and the hop must still be open:
// accepted, neither canceled nor equivocated (fail safe: refused, the
// task unchanged).
func (x *Executor) followUp(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue, h *Hop) error {
	if !x.authenticated(ctx, h.Iss) {
		return x.refuse(ctx, rc, q, nil, fmt.Sprintf("refused: a follow-up message in the task of hop %s is taken only from the offer's issuer %q, authenticated by the host", h.Hop, h.Iss))
	}
	rec, err := x.cfg.Delegate.Store.Get(ctx, h.Iss, h.Hop)
	if err != nil {
		return fmt.Errorf("a2ahandoff: reading hop %s: %w", h.Hop, err)
	}
	switch {
	case rec.Equivocated:
		return x.refuse(ctx, rc, q, nil, fmt.Sprintf("refused: hop %s was equivocated; its work does not go on", h.Hop))
	case rec.Canceled:
		return x.refuse(ctx, rc, q, nil, fmt.Sprintf("refused: hop %s was canceled by the delegator", h.Hop))
	case rec.State != store.Accepted:
		return x.refuse(ctx, rc, q, nil, fmt.Sprintf("refused: hop %s is %s; its work does not go on", h.Hop, rec.State))
	}
	return x.run(ctx, rc, q, h)
}

// running reports whether the agent's code runs for the hop in this
// process.
func (x *Executor) isRunning(iss, hop string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.running[[2]string{iss, hop}] != nil
}

// noteTask remembers task as the A2A task that carries the hop of a (an
// offer verified and recorded with a task made for it), until the offer
// is stale. Expired entries are pruned when the map has doubled since the
// last pruning, so the work stays constant per hop.
func (x *Executor) noteTask(a *delegate.Answer, task a2a.TaskID) {
	if a.Result == nil || a.Result.Offer == nil || task == "" {
		return
	}
	keep := time.Unix(a.Result.Offer.Exp, 0).Add(handoff.EffectiveSkew(x.cfg.Delegate.Options.Skew))
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tasks[[2]string{a.Iss, a.Hop}] = hopTask{id: task, keep: keep}
	if len(x.tasks) >= x.pruneAt {
		now := time.Now()
		for k, t := range x.tasks {
			if now.After(t.keep) {
				delete(x.tasks, k)
			}
		}
		x.pruneAt = max(2*len(x.tasks), 64)
	}
}

// taskFor is the A2A task carrying the hop, for the reply to a
// retransmission of its offer: only to a sender the host authenticated as
// the offer's iss (whoever knows the task id can read the task, statuses
// included, with Get Task; draft "Replay and Freshness" resends statuses
// only to iss), and only while this process remembers it. The map is in
// memory: a restarted delegate names no task (fail safe: the delegator
// cannot poll or cancel by task, keeps the hop unresolved and asks again;
// with a2a-go's default in-memory task store the task itself is gone
// too). The entry is dropped once the offer is stale, when the
// retransmission is refused anyway.
func (x *Executor) taskFor(ctx context.Context, iss, hop string) a2a.TaskID {
	if !x.authenticated(ctx, iss) {
		return ""
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	t, ok := x.tasks[[2]string{iss, hop}]
	if !ok || time.Now().After(t.keep) {
		return ""
	}
	return t.id
}

// inTask reports whether the hop may be carried by task: true unless this
// process remembers it taken in another task (after a restart it
// remembers none, and a hop listed in the task's history counts: fail
// safe, an open hop keeps the task from being canceled under it).
func (x *Executor) inTask(h *Hop, task a2a.TaskID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	t, ok := x.tasks[[2]string{h.Iss, h.Hop}]
	return !ok || t.id == task
}

// settlePaused records the outcome of an accepted hop whose work was
// stopped (equivocation) while no run of the agent's code was going on
// here: "failed" with no effect when the agent declared it
// (NoEffectUnlessCompleted), else the hop stays accepted and is flagged.
// A running hop is left to its run, which the delegate stopped. With rc,
// it returns the event that ends the hop's task FAILED (the signed
// status attached only for a sender authenticated as iss; otherwise the
// delegator asks again); nil when there is nothing to end.
func (x *Executor) settlePaused(ctx context.Context, rc *a2asrv.RequestContext, iss, hop, why string) a2a.Event {
	if x.isRunning(iss, hop) {
		return nil
	}
	rec, err := x.cfg.Delegate.Store.Get(ctx, iss, hop)
	if err != nil || rec.State != store.Accepted {
		return nil
	}
	text := "failed: " + why
	var st *handoff.Element
	if x.cfg.NoEffectUnlessCompleted {
		st, err = x.d.Finish(ctx, iss, hop, delegate.Outcome{State: store.Failed, NoEffect: true, Detail: why})
		if err != nil {
			log.Error(ctx, "a2ahandoff: recording the outcome of a stopped hop", err, "hop", hop)
			st = nil
		}
	} else {
		if err := x.d.Unknown(ctx, iss, hop, why+"; the effect of the work done so far is not known"); err != nil {
			log.Error(ctx, "a2ahandoff: flagging an unknown outcome", err, "hop", hop)
		}
		text = "ended: " + why + "; " + outcomeUnknown
	}
	if rc == nil {
		return nil
	}
	if st != nil && !x.authenticated(ctx, iss) {
		st = nil
		text += " (the signed status is sent only to the offer's issuer: ask again)"
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateFailed, statusMessage(rc, st, text))
	ev.Final = true
	return ev
}

// outcomeUnknown is the text of a task that ended while the hop's outcome
// is not known (decision: the A2A task is FAILED, since the agent's code
// is no longer working, but no signed "failed" is sent: the hop stays
// "accepted", flagged to the operator, and the delegator's tracker keeps
// it unresolved).
const outcomeUnknown = "the outcome of the hop's work is not known: the hop stays accepted and is flagged to the operator; no failed status is sent until the outcome is known"

// stopper cancels one run of the agent's code.
type stopper struct{ cancel context.CancelCauseFunc }

func (x *Executor) stop(iss, hop string) {
	x.mu.Lock()
	s := x.running[[2]string{iss, hop}]
	x.mu.Unlock()
	if s != nil {
		s.cancel(errStopped)
	}
}

// run is one execution of the agent's code for a taken hop.
type run struct {
	x      *Executor
	hop    *Hop
	rc     *a2asrv.RequestContext
	q      eventqueue.Queue
	runCtx context.Context

	mu       sync.Mutex
	done     bool // a terminal event went out
	reported *delegate.Outcome
}

func (x *Executor) run(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue, h *Hop) error {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	k, me := [2]string{h.Iss, h.Hop}, &stopper{cancel: cancel}
	x.mu.Lock()
	x.running[k] = me // a follow-up message's run of the same hop replaces it
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		if x.running[k] == me {
			delete(x.running, k)
		}
		x.mu.Unlock()
	}()
	r := &run{x: x, hop: h, rc: rc, q: q, runCtx: runCtx}
	// A cancel or an equivocation that came after the decision but before
	// this run was registered found nothing to stop: look again now that
	// it is registered (they mark the record before they stop).
	if rec, err := x.cfg.Delegate.Store.Get(ctx, h.Iss, h.Hop); err != nil {
		return fmt.Errorf("a2ahandoff: reading hop %s: %w", h.Hop, err)
	} else if rec.Canceled || rec.Equivocated {
		cancel(errStopped)
		return r.after(ctx, nil)
	}
	err := x.agent.Execute(context.WithValue(runCtx, runKey{}, r), rc, &queue{Queue: q, r: r})
	return r.after(ctx, err)
}

// after handles the end of the agent's code when it wrote no terminal
// state: an error or a stop ends the task FAILED (or, after a cancel, the
// CANCELED the cancel writes), with "failed" only when the outcome is
// known; a plain return leaves the task where the agent left it
// (INPUT_REQUIRED, say) and the hop "accepted".
func (r *run) after(ctx context.Context, err error) error {
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done {
		return err
	}
	// The hop's outcome is recorded even when the server has ended the
	// execution: a verified cancel writes CANCELED, and a2a-go then
	// cancels ctx, so the record is written without ctx's cancellation;
	// only the queue writes are skipped.
	bg := context.WithoutCancel(ctx)
	rec, gerr := r.x.cfg.Delegate.Store.Get(bg, r.hop.Iss, r.hop.Hop)
	if gerr != nil {
		log.Error(ctx, "a2ahandoff: reading the hop record after the agent's run", gerr, "hop", r.hop.Hop)
		return err
	}
	stopped := errors.Is(context.Cause(r.runCtx), errStopped)
	ended := ctx.Err() != nil // the server ended the execution: no queue
	if rec.Canceled && (stopped || err != nil || ended) {
		// The cancel writes CANCELED; only the hop's outcome is left.
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
		r.settle(bg, "stopped: canceled by the delegator", "the agent's run was stopped by the delegator's cancel; its effect is not known")
		if !ended {
			if hs, herr := r.x.hopsOfTask(bg, r.rc.StoredTask, true); herr == nil {
				if open := r.x.openHop(bg, hs, r.hop); open != nil {
					// The cancel does not write CANCELED over another
					// open hop (see Cancel): the task waits for that
					// hop's delegator again instead of staying WORKING.
					ev := a2a.NewStatusUpdateEvent(r.rc, a2a.TaskStateInputRequired, statusMessage(r.rc, nil,
						fmt.Sprintf("the work of hop %s was stopped by its delegator's cancel; the task carries hop %s, still open", r.hop.Hop, open.Hop)))
					ev.Final = true
					return r.q.Write(ctx, ev)
				}
			}
		}
		return nil
	}
	if err == nil && !stopped {
		return nil
	}
	if ended {
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
		r.settle(bg, "stopped: the execution ended", "the agent's run ended with the execution; its effect is not known")
		return err
	}
	why := "the agent's code stopped"
	if err != nil {
		why = "the agent's code failed: " + err.Error()
	}
	ev := a2a.NewStatusUpdateEvent(r.rc, a2a.TaskStateFailed, nil)
	ev.Final = true
	out, werr := r.terminal(ctx, ev, &ev.Status, why)
	if werr != nil {
		return werr
	}
	if werr := r.q.Write(ctx, out); werr != nil {
		return errors.Join(err, werr)
	}
	return nil
}

// settle records the outcome of a run that ended without a terminal
// event: the known failure, or the hop stays accepted and is flagged.
func (r *run) settle(ctx context.Context, detail, unknown string) {
	if out := r.failure(detail); out != nil {
		if _, ferr := r.x.d.Finish(ctx, r.hop.Iss, r.hop.Hop, *out); ferr != nil {
			log.Error(ctx, "a2ahandoff: recording the outcome of a stopped hop", ferr, "hop", r.hop.Hop)
		}
		return
	}
	r.unknown(ctx, unknown)
}

// failure is the outcome of work that did not complete: the agent's
// Report, or "failed" with no effect when the agent declared it
// (NoEffectUnlessCompleted), or nil: unknown.
func (r *run) failure(detail string) *delegate.Outcome {
	r.mu.Lock()
	rep := r.reported
	r.mu.Unlock()
	if rep != nil {
		return rep
	}
	if r.x.cfg.NoEffectUnlessCompleted {
		return &delegate.Outcome{State: store.Failed, NoEffect: true, Detail: detail}
	}
	return nil
}

func (r *run) unknown(ctx context.Context, why string) {
	if err := r.x.d.Unknown(ctx, r.hop.Iss, r.hop.Hop, why); err != nil {
		log.Error(ctx, "a2ahandoff: flagging an unknown outcome", err, "hop", r.hop.Hop)
	}
}

// terminal records the hop's outcome for an event that ends the task and
// attaches the signed status to its status message; the task state
// follows the status (mapping table). Only the first terminal event does
// this. The record is written before the event leaves, so the status is
// durable before anyone sees it.
func (r *run) terminal(ctx context.Context, ev a2a.Event, status *a2a.TaskStatus, why string) (a2a.Event, error) {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return ev, nil
	}
	r.done = true
	rep := r.reported
	r.mu.Unlock()

	var out *delegate.Outcome
	switch status.State {
	case a2a.TaskStateCompleted:
		out = rep
		if out == nil {
			out = &delegate.Outcome{State: store.Completed}
		}
	case a2a.TaskStateRejected:
		// A2A's REJECTED means "rejected by the agent and not started":
		// after "accepted" the hop cannot be rejected (draft
		// "Lifecycle"), so it is "failed" with no effect unless reported.
		out = rep
		if out == nil {
			out = &delegate.Outcome{State: store.Failed, NoEffect: true, Reason: handoff.ReasonPolicy, Detail: "the agent rejected the task before starting it"}
		}
	default: // FAILED, or CANCELED by the agent itself
		out = r.failure(why)
	}
	if out == nil {
		r.unknown(ctx, fmt.Sprintf("the task ended %s and the effect of the work is not known (%s)", status.State, why))
		// The task keeps the state the agent gave it (the agent's code
		// no longer works, so not WORKING), and says why no signed
		// status came with it.
		note := a2a.TextPart{Text: "handoff: " + outcomeUnknown}
		if status.Message == nil {
			status.Message = statusMessage(r.rc, nil, outcomeUnknown)
		} else {
			m := *status.Message
			m.Parts = append(slices.Clone(m.Parts), note)
			m.Extensions = withURI(m.Extensions)
			status.Message = &m
		}
		return ev, nil
	}
	st, err := r.x.d.Finish(ctx, r.hop.Iss, r.hop.Hop, *out)
	if err != nil {
		// Not recorded: nothing is claimed. The delegator keeps asking and
		// is answered from the record.
		log.Error(ctx, "a2ahandoff: recording the hop's outcome", err, "hop", r.hop.Hop)
		return ev, nil
	}
	if out.State == store.Completed {
		status.State = a2a.TaskStateCompleted
	} else {
		status.State = a2a.TaskStateFailed
	}
	if status.Message == nil {
		status.Message = statusMessage(r.rc, st, string(out.State))
	} else {
		AttachStatus(status.Message, *st)
	}
	return ev, nil
}

// queue is the agent's view of the event queue: events that end the task
// get the hop's signed outcome.
type queue struct {
	eventqueue.Queue
	r *run
}

func (w *queue) Write(ctx context.Context, ev a2a.Event) error {
	ev, err := w.intercept(ctx, ev)
	if err != nil {
		return err
	}
	return w.Queue.Write(ctx, ev)
}

func (w *queue) WriteVersioned(ctx context.Context, ev a2a.Event, v a2a.TaskVersion) error {
	ev, err := w.intercept(ctx, ev)
	if err != nil {
		return err
	}
	return w.Queue.WriteVersioned(ctx, ev, v)
}

func (w *queue) intercept(ctx context.Context, ev a2a.Event) (a2a.Event, error) {
	r := w.r
	switch e := ev.(type) {
	case *a2a.Message:
		// An agent that answers with a Message is done: for a handoff
		// task (already WORKING) its reply becomes the COMPLETED status
		// message, so the task does not stay WORKING.
		m := *e
		m.TaskID, m.ContextID = r.rc.TaskID, r.rc.ContextID
		if m.Role == "" {
			m.Role = a2a.MessageRoleAgent
		}
		st := a2a.NewStatusUpdateEvent(r.rc, a2a.TaskStateCompleted, &m)
		st.Final = true
		return r.terminal(ctx, st, &st.Status, "the agent replied")
	case *a2a.TaskStatusUpdateEvent:
		if e.Status.State.Terminal() {
			e.Final = true
			return r.terminal(ctx, e, &e.Status, "the agent ended the task "+string(e.Status.State))
		}
	case *a2a.Task:
		if e.Status.State.Terminal() {
			return r.terminal(ctx, e, &e.Status, "the agent ended the task "+string(e.Status.State))
		}
	}
	return ev, nil
}

// Cancel answers a Cancel Task request. For a task taken with a handoff,
// the request's metadata must carry the delegator's signed "canceled"
// under Key; once verified (D9) the hop is noted canceled, the agent's run
// is stopped (its context is canceled), the task ends CANCELED with the
// delegate's last status when the sender is authenticated as the
// delegator, and then OnCancel starts, detached from the request (see
// ServerConfig.OnCancel). A cancel without a valid "canceled" is
// refused and the task goes on. Other tasks go to the agent's Cancel.
func (x *Executor) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if err := x.callable(ctx, rc, q); err != nil {
		return err
	}
	hs, err := x.hopsOfTask(ctx, rc.StoredTask, true)
	if err != nil {
		return fmt.Errorf("a2ahandoff: %v: %w", err, a2a.ErrTaskNotCancelable)
	}
	if len(hs) == 0 {
		return x.agent.Cancel(ctx, rc, q)
	}
	v, ok := rc.Metadata[Key]
	if !ok {
		return fmt.Errorf("a2ahandoff: task %s was taken with a handoff and is canceled only with the delegator's signed \"canceled\" under metadata %s: %w", rc.TaskID, Key, a2a.ErrTaskNotCancelable)
	}
	el, err := statusValue(v)
	if err != nil {
		return fmt.Errorf("%v: %w", err, a2a.ErrInvalidParams)
	}
	// The cancel is for the hop whose offer it names (a task may carry a
	// second offer sent as a follow-up); it is verified against that
	// offer (D9). One naming none of them is checked against the first,
	// and refused.
	h := hs[0]
	if _, cs, _ := handoff.UnsafeDecode(el); cs != nil {
		for _, c := range hs {
			if cs.Offer.Equal(c.Handoff.Offer.Digest()) {
				h = c
				break
			}
		}
	}
	rec, err := x.d.Cancel(ctx, el, h.Iss, h.Hop)
	if err != nil {
		return fmt.Errorf("a2ahandoff: cancel of hop %s refused: %v: %w", h.Hop, err, a2a.ErrTaskNotCancelable)
	}
	activate(ctx)
	if open := x.openHop(ctx, hs, h); open != nil {
		// The hop's cancel is recorded and its work stopped, but the task
		// still carries another hop whose work goes on: CANCELED would
		// end that hop's task under it (decision 53). The task is left as
		// it is, and the cancel still goes down the chain.
		x.onCancel(ctx, h)
		return fmt.Errorf("a2ahandoff: the cancel of hop %s is verified and recorded, and its work is stopped, but task %s also carries hop %s of %q, still open, so the task is not canceled: %w",
			h.Hop, rc.TaskID, open.Hop, open.Iss, a2a.ErrTaskNotCancelable)
	}
	var last *handoff.Element
	if rec.Status != nil && x.authenticated(ctx, h.Iss) {
		last = &handoff.Element{Form: rec.StatusForm, Octets: rec.Status}
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, statusMessage(rc, last, "canceled by the delegator; the hop's outcome is still reported when known"))
	ev.Final = true
	werr := q.Write(ctx, ev)
	// The cancel is recorded (x.d.Cancel) whether or not CANCELED could be
	// written, so the cancel goes down the chain either way; it does so
	// after the write, detached, so that the upstream request does not
	// wait on every hop below (a delegate there may be slow or gone).
	x.onCancel(ctx, h)
	return werr
}

// openHop returns a hop of hs other than h whose work may still go on
// (accepted, neither canceled nor equivocated), or nil. A record that
// cannot be read counts as open (fail safe: the task is not canceled).
func (x *Executor) openHop(ctx context.Context, hs []*Hop, h *Hop) *Hop {
	for _, c := range hs {
		if c == h || c.Iss == h.Iss && c.Hop == h.Hop {
			continue
		}
		r, err := x.cfg.Delegate.Store.Get(ctx, c.Iss, c.Hop)
		if err != nil || r.State == store.Accepted && !r.Canceled && !r.Equivocated {
			return c
		}
	}
	return nil
}

// onCancel runs OnCancel for h in its own goroutine, with the request's
// values, without its cancellation, within OnCancelTimeout. A panic in it
// is logged, not let loose on the server. Wait waits for it.
func (x *Executor) onCancel(ctx context.Context, h *Hop) {
	if x.cfg.OnCancel == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), x.cfg.OnCancelTimeout)
	x.mu.Lock()
	x.cancels++
	x.mu.Unlock()
	go func() {
		defer func() {
			x.mu.Lock()
			if x.cancels--; x.cancels == 0 {
				x.idle.Broadcast()
			}
			x.mu.Unlock()
		}()
		defer cancel()
		defer func() {
			if p := recover(); p != nil {
				log.Error(cctx, "a2ahandoff: OnCancel panicked", fmt.Errorf("%v", p), "hop", h.Hop)
			}
		}()
		x.cfg.OnCancel(cctx, h.Iss, h.Hop, h.Handoff.Offer.Digest())
	}()
}
