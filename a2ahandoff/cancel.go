package a2ahandoff

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/a2aproject/a2a-go/log"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Cancel answers a Cancel Task request. For a task taken with a handoff,
// the request's metadata must carry the delegator's signed "canceled"
// under Key; once verified (D9) the hop is noted canceled, the agent's run
// is stopped (its context is canceled), the task ends CANCELED with the
// delegate's last status when the sender is authenticated as the
// delegator, and then OnCancel starts, detached from the request (see
// ServerConfig.OnCancel). A cancel without a valid "canceled" is
// refused and the task goes on. Other tasks go to the agent's Cancel.
func (x *Executor) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	tryOf(ctx).ran.Store(true)
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
	rec, err := x.d.Cancel(ctx, el, h.Iss, h.ID)
	if err != nil {
		return fmt.Errorf("a2ahandoff: cancel of hop %s refused: %v: %w", h.ID, err, a2a.ErrTaskNotCancelable)
	}
	activate(ctx)
	if open := x.openHop(ctx, hs, h); open != nil {
		// The hop's cancel is recorded and its work stopped, but the task
		// still carries another hop whose work goes on: CANCELED would
		// end that hop's task under it (decision 53). The task is left as
		// it is, and the cancel still goes down the chain.
		x.onCancel(ctx, h)
		return fmt.Errorf("a2ahandoff: the cancel of hop %s is verified and recorded, and its work is stopped, but task %s also carries hop %s of %q, still open, so the task is not canceled: %w",
			h.ID, rc.TaskID, open.ID, open.Iss, a2a.ErrTaskNotCancelable)
	}
	// The event is made before the task is marked ending: between the
	// mark and the write below no host code runs (Sender may panic, and
	// a2a-go then calls no Cleanup to end the mark).
	var last *handoff.Element
	if rec.Status != nil && x.authenticated(ctx, h.Iss) {
		last = &handoff.Element{Form: rec.StatusForm, Octets: rec.Status}
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, statusMessage(rc, last, "canceled by the delegator; the hop's outcome is still reported when known"))
	ev.Final = true
	k, ending := x.endTask(ctx, rc, h)
	if !ending {
		// As above, for a hop being taken into the task (taskgate.go).
		x.onCancel(ctx, h)
		return fmt.Errorf("a2ahandoff: the cancel of hop %s is verified and recorded, and its work is stopped, but hop %s of %q is being taken into task %s, so the task is not canceled: %w",
			h.ID, k[1], k[0], rc.TaskID, a2a.ErrTaskNotCancelable)
	}
	tryOf(ctx).wrote.Store(true)
	werr := q.Write(ctx, ev)
	if werr != nil {
		x.releaseEnding(rc) // no CANCELED to wait for, and a2a-go may call no Cleanup
	}
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
		if c == h || c.Iss == h.Iss && c.ID == h.ID {
			continue
		}
		r, err := x.cfg.Delegate.Store.Get(ctx, c.Iss, c.ID)
		if err != nil || r.State == store.Accepted && !r.Canceled && !r.Equivocated {
			return c
		}
	}
	return nil
}

// onCancel runs OnCancel for h in its own goroutine, with the request's
// values, without its cancellation, within OnCancelTimeout. A panic in it
// is logged, not let loose on the server. Wait waits for it. A Cancel
// Task request run again (recordHandler.OnCancelTask) starts it once.
func (x *Executor) onCancel(ctx context.Context, h *Hop) {
	if x.cfg.OnCancel == nil || tryOf(ctx).sent.Swap(true) {
		return
	}
	// Not the request's cancelTry: a Cancel that OnCancel reaches in this
	// process is a request of its own.
	cctx, cancel := context.WithTimeout(context.WithValue(context.WithoutCancel(ctx), cancelTryKey{}, (*cancelTry)(nil)), x.cfg.OnCancelTimeout)
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
				log.Error(cctx, "a2ahandoff: OnCancel panicked", fmt.Errorf("%v", p), "hop", h.ID)
			}
		}()
		x.cfg.OnCancel(cctx, h.Iss, h.ID, h.Handoff.Offer.Digest())
	}()
}

// cancelTries bounds how often recordHandler.OnCancelTask runs one
// Cancel Task request; it pauses n*cancelPause after the nth run.
const (
	cancelTries = 3
	cancelPause = 10 * time.Millisecond
)

// cancelTry is what Executor.Cancel leaves for the Cancel Task request
// that ran it (recordHandler.OnCancelTask): whether it ran at all (a2a-go
// may answer the request with another one's result), whether it went on
// to write CANCELED (the task was to end), and whether OnCancel was
// started, so that a request run again starts it once.
type cancelTry struct {
	ran, wrote, sent atomic.Bool
}

type cancelTryKey struct{}

// tryOf is the cancelTry of the Cancel Task request ctx belongs to: a
// throwaway one when there is none (an Executor served without
// NewHandler, or OnCancel's context).
func tryOf(ctx context.Context) *cancelTry {
	if ctx == nil {
		return new(cancelTry) // Cancel refuses a nil ctx (callable)
	}
	if t, ok := ctx.Value(cancelTryKey{}).(*cancelTry); ok && t != nil {
		return t
	}
	return new(cancelTry)
}
