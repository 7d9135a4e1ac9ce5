package a2ahandoff

import (
	"context"
	"fmt"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

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
	return &Hop{Iss: o.Iss, ID: o.Hop, Offer: o, Handoff: h}, nil
}

// followUp runs the agent for a message without a Handoff in a task taken
// with one. The agent then works under the hop's verified offer and its
// statuses go to the sender, so the message must come from the offer's
// iss as the host authenticated it, and the hop must still be open:
// accepted, neither canceled nor equivocated (fail safe: refused, the
// task unchanged).
func (x *Executor) followUp(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue, h *Hop) error {
	if !x.authenticated(ctx, h.Iss) {
		return x.refuse(ctx, rc, q, nil, fmt.Sprintf("refused: a follow-up message in the task of hop %s is taken only from the offer's issuer %q, authenticated by the host", h.ID, h.Iss))
	}
	rec, err := x.cfg.Delegate.Store.Get(ctx, h.Iss, h.ID)
	if err != nil {
		return fmt.Errorf("a2ahandoff: reading hop %s: %w", h.ID, err)
	}
	switch {
	case rec.Equivocated:
		return x.refuse(ctx, rc, q, nil, fmt.Sprintf("refused: hop %s was equivocated; its work does not go on", h.ID))
	case rec.Canceled:
		return x.refuse(ctx, rc, q, nil, fmt.Sprintf("refused: hop %s was canceled by the delegator", h.ID))
	case rec.State != store.Accepted:
		return x.refuse(ctx, rc, q, nil, fmt.Sprintf("refused: hop %s is %s; its work does not go on", h.ID, rec.State))
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
	t, ok := x.tasks[[2]string{h.Iss, h.ID}]
	return !ok || t.id == task
}
