package a2ahandoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/a2aproject/a2a-go/log"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

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

// Stop stops the agent's run for the hop, if one runs in this Executor,
// as the delegate's Stop does when the hop is canceled or equivocated
// through this Executor. A host that serves several Executors on one
// store (one per agent, say) passes each Executor's stops to the others
// through delegate.Config.Stop, so that a cancel or an equivocation
// taken by one stops the work running in another. On a nil Executor (or
// one not made by NewExecutor) it does nothing.
func (x *Executor) Stop(iss, hop string) {
	if !x.usable() {
		return
	}
	x.stop(iss, hop)
}

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
	k, me := [2]string{h.Iss, h.ID}, &stopper{cancel: cancel}
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
	h.mu.Lock()
	h.run = r // Declare reaches this run
	h.mu.Unlock()
	// A cancel or an equivocation that came after the decision but before
	// this run was registered found nothing to stop: look again now that
	// it is registered (they mark the record before they stop).
	if rec, err := x.cfg.Delegate.Store.Get(ctx, h.Iss, h.ID); err != nil {
		return fmt.Errorf("a2ahandoff: reading hop %s: %w", h.ID, err)
	} else if rec.Canceled || rec.Equivocated {
		cancel(errStopped)
		h.mu.Lock()
		h.run = nil // the agent's code never runs for it
		h.mu.Unlock()
		return r.after(ctx, nil)
	}
	err := x.agent.Execute(context.WithValue(runCtx, runKey{}, r), rc, &queue{Queue: q, r: r})
	// The agent's code has returned: a Declare from now on reaches no
	// run (an error), and the Hop no longer holds the run's request.
	h.mu.Lock()
	h.run = nil
	h.mu.Unlock()
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
	rec, gerr := r.x.cfg.Delegate.Store.Get(bg, r.hop.Iss, r.hop.ID)
	if gerr != nil {
		log.Error(ctx, "a2ahandoff: reading the hop record after the agent's run", gerr, "hop", r.hop.ID)
		return err
	}
	stopped := errors.Is(context.Cause(r.runCtx), errStopped)
	ended := ctx.Err() != nil // the server ended the execution: no queue
	if rec.Canceled && (stopped || err != nil || ended) {
		// The cancel writes CANCELED; only the hop's outcome is left.
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
		r.settle(bg, err, "stopped: canceled by the delegator", "the agent's run was stopped by the delegator's cancel; its effect is not known")
		if !ended {
			if hs, herr := r.x.hopsOfTask(bg, r.rc.StoredTask, true); herr == nil {
				if open := r.x.openHop(bg, hs, r.hop); open != nil {
					// The cancel does not write CANCELED over another
					// open hop (see Cancel): the task waits for that
					// hop's delegator again instead of staying WORKING.
					ev := a2a.NewStatusUpdateEvent(r.rc, a2a.TaskStateInputRequired, statusMessage(r.rc, nil,
						fmt.Sprintf("the work of hop %s was stopped by its delegator's cancel; the task carries hop %s, still open", r.hop.ID, open.ID)))
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
		r.settle(bg, err, "stopped: the execution ended", "the agent's run ended with the execution; its effect is not known")
		return err
	}
	why := "the agent's code stopped"
	if err != nil {
		why = "the agent's code failed: " + err.Error()
	}
	r.mu.Lock()
	declared := r.reported != nil
	r.mu.Unlock()
	if errors.Is(err, ErrOutcomeUnknown) && !declared {
		// The agent's code says it cannot tell what its work did (a
		// proxy that lost its upstream): never "failed", even where
		// failures take no effect.
		r.mu.Lock()
		r.done = true
		r.mu.Unlock()
		r.unknown(bg, why)
		ev := a2a.NewStatusUpdateEvent(r.rc, a2a.TaskStateFailed, statusMessage(r.rc, nil, "ended: "+why+"; "+outcomeUnknown))
		ev.Final = true
		if werr := r.q.Write(ctx, ev); werr != nil {
			return errors.Join(err, werr)
		}
		return nil // the FAILED event says it; an error would race it as an internal error
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
func (r *run) settle(ctx context.Context, err error, detail, unknown string) {
	if errors.Is(err, ErrOutcomeUnknown) {
		// The agent says it cannot tell: only its own Declare decides.
		r.mu.Lock()
		rep := r.reported
		r.mu.Unlock()
		if rep == nil {
			r.unknown(ctx, unknown+": "+err.Error())
			return
		}
	}
	if out := r.failure(detail); out != nil {
		if _, ferr := r.x.d.Finish(ctx, r.hop.Iss, r.hop.ID, *out); ferr != nil {
			log.Error(ctx, "a2ahandoff: recording the outcome of a stopped hop", ferr, "hop", r.hop.ID)
		}
		return
	}
	r.unknown(ctx, unknown)
}

// failure is the outcome of work that did not complete: the agent's
// Declare, or "failed" with no effect when the agent declared it
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
	if err := r.x.d.Unknown(ctx, r.hop.Iss, r.hop.ID, why); err != nil {
		log.Error(ctx, "a2ahandoff: flagging an unknown outcome", err, "hop", r.hop.ID)
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
	st, err := r.x.d.Finish(ctx, r.hop.Iss, r.hop.ID, *out)
	if err != nil {
		// Not recorded: nothing is claimed. The delegator keeps asking and
		// is answered from the record.
		log.Error(ctx, "a2ahandoff: recording the hop's outcome", err, "hop", r.hop.ID)
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
