package a2ahandoff

import (
	"context"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff/store"
)

// The task gate gives the decision "this task ends now" one owner
// (decision 103). a2a-go registers a follow-up message's execution before
// it adds the message to the task's history, and hands a cancel arriving
// in between to that execution; the Executor then reads the task's hops
// from a history without the new offer. Without the gate, a cancel of the
// task's last other open hop ended the task CANCELED while the new offer
// was then taken (decision 53 says the task waits for an open hop).
//
// Execute notes, under the Executor's lock, each hop it takes into an
// existing task, before the claim and until it returns; a cancel that is
// about to end the task reads those notes under the same lock, and either
// finds one that is (or may become) open, and refuses as for any other
// open hop, or marks the task ending, and Execute then refuses a new
// offer into the task before claiming it. The mark lasts until a2a-go is
// done with the cancel (it calls Cleanup with the cancel's request
// context after the execution that carried the CANCELED resolved, which
// is after that execution's Execute returned), whether or not the
// cancel's client is still there.
//
// A cancel refused this way never leaves a stopped run waiting for its
// CANCELED: a2a-go's local task manager (a2asrv.NewHandler's default) runs
// one execution per task, so while an Execute is taking a hop, no other
// run of the task is waiting. The Executor is meant to be served by one
// NewHandler with that manager; a2a-go's work-queue manager runs cancels
// and executions apart, which the gate does not cover.

// taskGate is one task's notes (Executor.gates, under Executor.mu).
type taskGate struct {
	taking map[[2]string]int // (iss, hop) -> Executes taking it into the task
	ending int               // cancels ending the task, until a2a-go's Cleanup
}

// gateOf returns task's gate, made if missing. x.mu is held.
func (x *Executor) gateOf(task a2a.TaskID) *taskGate {
	g := x.gates[task]
	if g == nil {
		g = &taskGate{taking: map[[2]string]int{}}
		x.gates[task] = g
	}
	return g
}

// dropGate forgets task's gate when it notes nothing. x.mu is held.
func (x *Executor) dropGate(task a2a.TaskID, g *taskGate) {
	if len(g.taking) == 0 && g.ending == 0 {
		delete(x.gates, task)
	}
}

// enterTask notes that Execute takes (iss, hop) into task, and returns the
// function that ends the note; ok is false (and nothing noted) when a
// cancel is ending the task.
func (x *Executor) enterTask(task a2a.TaskID, iss, hop string) (leave func(), ok bool) {
	k := [2]string{iss, hop}
	x.mu.Lock()
	defer x.mu.Unlock()
	g := x.gateOf(task)
	if g.ending > 0 {
		x.dropGate(task, g)
		return nil, false
	}
	g.taking[k]++
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if g.taking[k]--; g.taking[k] <= 0 {
			delete(g.taking, k)
		}
		x.dropGate(task, g)
	}, true
}

// endTask is asked by a cancel of hop h that is about to end task
// CANCELED, in the cancel's request context rc. It returns a hop being
// taken into the task that is open (or not yet recorded, or unreadable:
// fail safe), and the cancel is refused; or it marks the task ending
// until releaseEnding(rc), and ending is true.
func (x *Executor) endTask(ctx context.Context, rc *a2asrv.RequestContext, h *Hop) (open [2]string, ending bool) {
	task := rc.TaskID
	closed := map[[2]string]bool{}
	var last [2]string
	for range 4 {
		x.mu.Lock()
		g := x.gateOf(task)
		var others [][2]string
		for k := range g.taking {
			if k == [2]string{h.Iss, h.ID} || closed[k] {
				continue
			}
			if t, ok := x.tasks[k]; ok && t.id != task {
				// Another task's hop, sent into this one: Execute answers
				// it (a retransmission, an equivocation) without taking it.
				continue
			}
			others = append(others, k)
		}
		if len(others) == 0 {
			g.ending++
			x.endings[rc] = append(x.endings[rc], task)
			x.mu.Unlock()
			return [2]string{}, true
		}
		x.dropGate(task, g)
		x.mu.Unlock()
		// Read outside the lock; a hop taken meanwhile is read next round.
		for _, k := range others {
			r, err := x.cfg.Delegate.Store.Get(ctx, k[0], k[1])
			if err != nil || r.State == store.Accepted && !r.Canceled && !r.Equivocated {
				return k, false // not yet recorded, open, or unreadable
			}
			closed[k] = true
			last = k
		}
	}
	// Offers keep arriving: fail safe, the task is not ended.
	return last, false
}

// releaseEnding ends the marks endTask made for the cancel of request
// context rc.
func (x *Executor) releaseEnding(rc *a2asrv.RequestContext) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, task := range x.endings[rc] {
		if g := x.gates[task]; g != nil {
			g.ending--
			x.dropGate(task, g)
		}
	}
	delete(x.endings, rc)
}

// Cleanup is called by a2a-go when an execution or a cancel of the
// Executor's is over (a2asrv.AgentExecutionCleaner): it ends a cancel's
// mark on its task (taskgate.go). The agent's own Cleanup, if it has one,
// is not called.
func (x *Executor) Cleanup(_ context.Context, rc *a2asrv.RequestContext, _ a2a.SendMessageResult, _ error) {
	if !x.usable() || rc == nil {
		return
	}
	x.releaseEnding(rc)
}
