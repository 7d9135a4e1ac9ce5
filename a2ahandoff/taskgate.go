package a2ahandoff

import (
	"context"

	"github.com/a2aproject/a2a-go/a2a"

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
// open hop, or marks the task ending until its request is over, and
// Execute then refuses a new offer into the task before claiming it. A
// cancel refused this way never leaves a stopped run waiting for its
// CANCELED: a2a-go runs one execution per task, so while an Execute is
// taking a hop, no other run of the task is waiting.

// taskGate is one task's notes (Executor.gates, under Executor.mu).
type taskGate struct {
	taking map[[2]string]int // (iss, hop) -> Executes taking it into the task
	ending int               // cancels ending the task, until their request is over
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
// CANCELED. It returns a hop being taken into the task that is open (or
// not yet recorded, or unreadable: fail safe), and the cancel is refused;
// or it marks the task ending and returns the function that ends the mark.
func (x *Executor) endTask(ctx context.Context, task a2a.TaskID, h *Hop) (open [2]string, release func()) {
	closed := map[[2]string]bool{}
	var last [2]string
	for range 4 {
		x.mu.Lock()
		g := x.gateOf(task)
		var others [][2]string
		for k := range g.taking {
			if k != [2]string{h.Iss, h.ID} && !closed[k] {
				others = append(others, k)
			}
		}
		if len(others) == 0 {
			g.ending++
			x.mu.Unlock()
			return [2]string{}, func() {
				x.mu.Lock()
				defer x.mu.Unlock()
				g.ending--
				x.dropGate(task, g)
			}
		}
		x.dropGate(task, g)
		x.mu.Unlock()
		// Read outside the lock; a hop taken meanwhile is read next round.
		for _, k := range others {
			r, err := x.cfg.Delegate.Store.Get(ctx, k[0], k[1])
			if err != nil || r.State == store.Accepted && !r.Canceled && !r.Equivocated {
				return k, nil // not yet recorded, open, or unreadable
			}
			closed[k] = true
			last = k
		}
	}
	// Offers keep arriving: fail safe, the task is not ended.
	return last, nil
}
