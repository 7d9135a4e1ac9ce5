package a2ahandoff

import (
	"github.com/a2aproject/a2a-go/a2a"
)

// Follow-ups in flight. a2a-go registers a follow-up message's execution
// before it adds the message to the task's history, and hands a Cancel
// Task request that arrives in between to that execution: the Executor
// would read the task's hops from a history without the new offer, and
// end the task CANCELED under it (decision 53 says a task carrying
// another open hop is not canceled). NewHandler's handler notes each
// message that carries an offer into an existing task while a2a-go takes
// it, and a cancel counts those hops as open. The offer is unverified
// here: the worst a sender can do with one is delay a cancel of the task
// (the hop's cancel is still recorded and its work stopped) while its own
// request lasts, and failing safe is not canceling.

// followUp is one message carrying an offer (iss, hop) into a task.
type followUp struct {
	task     a2a.TaskID
	iss, hop string
}

// beginFollowUp notes pm's offer as being taken into p's task, and
// returns the function that ends the note; nil when p names no task or
// pm carries no readable offer.
func (x *Executor) beginFollowUp(p *a2a.MessageSendParams, pm *parsed) func() {
	if p == nil || p.Message == nil || p.Message.TaskID == "" || pm == nil || pm.o == nil {
		return nil
	}
	f := followUp{task: p.Message.TaskID, iss: pm.o.Iss, hop: pm.o.Hop}
	x.mu.Lock()
	x.followUps[f]++
	x.mu.Unlock()
	return func() {
		x.mu.Lock()
		if x.followUps[f]--; x.followUps[f] <= 0 {
			delete(x.followUps, f)
		}
		x.mu.Unlock()
	}
}

// followUpIn returns a follow-up in flight into task for a hop other
// than (iss, hop).
func (x *Executor) followUpIn(task a2a.TaskID, iss, hop string) (followUp, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for f := range x.followUps {
		if f.task == task && (f.iss != iss || f.hop != hop) {
			return f, true
		}
	}
	return followUp{}, false
}
