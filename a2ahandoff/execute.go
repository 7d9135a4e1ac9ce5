package a2ahandoff

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
)

// Execute runs the receiving checks on the Handoff in the message's
// metadata, with the task's contextId as the dialog (step 5), and runs the
// agent only for an accepted offer.
func (x *Executor) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if err := x.callable(ctx, rc, q); err != nil {
		return err
	}
	x.began()
	defer x.ended()
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
	// task's owner; delegate.Receive verifies it and asks itself whether
	// the sender is its iss.
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
		if pm.o != nil {
			// Noted before the claim, so that a cancel ending the task
			// sees it (taskgate.go).
			leave, ok := x.enterTask(rc.TaskID, pm.o.Iss, pm.o.Hop)
			if !ok {
				return x.refuse(ctx, rc, q, nil, "the task is being canceled by its delegator: no offer is taken into it")
			}
			defer leave()
		}
	}
	// The dialog is the task's contextId. When the message named none,
	// the server made one up, and the offer cannot name it: rejected
	// with "policy" rather than skipping step 5 (fail safe).
	a, err := x.d.ReceiveParsed(ctx, pm.h, pm.herr, rc.ContextID, x.sender(ctx))
	if err != nil {
		return fmt.Errorf("a2ahandoff: receiving the offer: %w", err) // nothing was decided
	}
	switch a.Outcome {
	case handoff.Rejected:
		why := "rejected"
		if a.Err != nil {
			why = "rejected: " + a.Err.Error()
		} else if a.Reason != "" {
			why = "rejected (" + string(a.Reason) + ")"
		}
		if rc.StoredTask == nil && a.Iss != "" && (a.Record != nil || !errors.Is(a.Err, delegate.ErrSenderNotIss)) {
			// The REJECTED task carries the hop; not a refused sender's
			// (delegate.Config.SenderMustBeIss): the hop is not recorded,
			// and is the delegator's own task's once it delivers it.
			x.noteTask(a, rc.TaskID)
		}
		return x.refuse(ctx, rc, q, a.Status, why)
	case handoff.Equivocation:
		// The second offer gets no status (draft "Forks, Concurrency,
		// and Equivocation"); the delegate stopped the first's run, if
		// one is running here. A first whose work is paused (its task
		// INPUT_REQUIRED, no run) has its outcome settled now.
		if rc.StoredTask != nil {
			if h, _ := x.hopOfTask(ctx, rc.StoredTask); h != nil && h.Iss == a.Iss && h.ID == a.Hop {
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
		return x.run(ctx, rc, q, &Hop{Iss: a.Iss, ID: a.Hop, Offer: a.Result.Offer, Handoff: a.Result.Handoff, Result: a.Result})
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
		return invalid("a2ahandoff: the Executor needs a context, got nil")
	case rc == nil:
		return invalid("a2ahandoff: the Executor needs the request's *a2asrv.RequestContext, got nil")
	case q == nil:
		return invalid("a2ahandoff: the Executor needs the task's eventqueue.Queue, got nil")
	}
	return nil
}

// sender is the AgentId the host authenticated as the request's sender,
// or "".
func (x *Executor) sender(ctx context.Context) string {
	if x.cfg.Sender == nil {
		return ""
	}
	return x.cfg.Sender(ctx)
}

// authenticated reports whether the request's sender is iss (from a
// record, or a verified offer).
func (x *Executor) authenticated(ctx context.Context, iss string) bool {
	return iss != "" && x.sender(ctx) == iss
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
		return fmt.Sprintf("refused: task %s belongs to hop %s of %q; an offer from %q joins it only in a task of its own (one task, one delegator)", t.ID, first.ID, first.Iss, iss)
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
