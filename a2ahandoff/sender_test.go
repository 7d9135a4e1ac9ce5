package a2ahandoff_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// With delegate.Config.SenderMustBeIss, a copy of the delegator's
// follow-up offer delivered first, in a task of its own, by another agent
// is refused and its REJECTED task is not taken for the hop's: when the
// delegator's own follow-up is being claimed into the delegator's task, a
// cancel of that task's other hop still does not end the task under it
// (decisions 53, 103, 104). Found by review: the refused copy's task was
// noted as the hop's, and the task gate took the genuine follow-up for
// another task's hop.
func TestRefusedCopyIsNotTheHopsTask(t *testing.T) {
	cancelWhileAFollowUpIsClaimed(t, func(c *a2ahandoff.ServerConfig) { c.Delegate.SenderMustBeIss = true },
		func(ctx context.Context, srv *server, r1 *a2ahandoff.Reply, h *handoff.Handoff, hop string) {
			m := say("the copier's work")
			m.ContextID = r1.Task.ContextID
			if err := a2ahandoff.AttachHandoff(m, h, handoff.JSON); err != nil {
				t.Fatal(err)
			}
			res, err := a2aClient(t, srv.url, "token-of-"+coderID).SendMessage(ctx, &a2a.MessageSendParams{Message: m})
			if err != nil {
				t.Fatal(err)
			}
			if tk, ok := res.(*a2a.Task); !ok || tk.Status.State != a2a.TaskStateRejected {
				t.Fatalf("the copy delivered by %s: %#v, want a REJECTED task", coderID, res)
			}
			if _, err := srv.st.Get(ctx, assistantID, hop); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the refused copy was recorded: %v", err)
			}
		})
}

// heldSecondGet is a hop store whose second Get of one hop (after the
// handler's look-up, the delegate's step-4 read for a sender that may not
// bring a new hop) returns what it read only once released.
type heldSecondGet struct {
	store.Store
	mu      sync.Mutex
	hop     string
	n       int
	read    chan struct{}
	release chan struct{}
}

func (s *heldSecondGet) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	r, err := s.Store.Get(ctx, iss, hop)
	s.mu.Lock()
	hold := false
	if hop == s.hop {
		s.n++
		hold = s.n == 2
	}
	s.mu.Unlock()
	if hold {
		close(s.read)
		<-s.release
	}
	return r, err
}

// A copy refused while the delegator's own delivery of the offer is taken
// meanwhile (the refusal read "no record" just before the claim) does not
// rename the hop's task: a retransmission by the delegator names its own
// task, not the copy's REJECTED one (found by review).
func TestRefusedCopyRacingTheDelivery(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	st := &heldSecondGet{Store: memStore(), read: make(chan struct{}), release: make(chan struct{})}
	srv := w.serve(t, plannerID, st, handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.Delegate.SenderMustBeIss = true })
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "w"})
	if err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.hop = issued.Hop
	st.mu.Unlock()
	m := say("complete")
	if err := a2ahandoff.AttachHandoff(m, h, handoff.JSON); err != nil {
		t.Fatal(err)
	}
	copied := make(chan a2a.SendMessageResult, 1)
	go func() {
		r, _ := a2aClient(t, srv.url, "token-of-"+coderID).SendMessage(ctx, &a2a.MessageSendParams{Message: m})
		copied <- r
	}()
	select {
	case <-st.read:
	case <-time.After(10 * time.Second):
		t.Fatal("the copy's step-4 read did not come")
	}
	r1, err := c.Send(ctx, issued.Hop, h, say("complete"), nil)
	if err != nil || r1.Task == nil {
		t.Fatalf("the delegator's delivery: %+v %v", r1, err)
	}
	close(st.release)
	if tk, ok := (<-copied).(*a2a.Task); !ok || tk.Status.State != a2a.TaskStateRejected || tk.ID == r1.Task.ID {
		t.Fatalf("the copy: %#v, want its own REJECTED task", tk)
	}
	r2, err := c.Send(ctx, issued.Hop, h, say("complete"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rm, _ := r2.Result.(*a2a.Message); rm == nil || rm.TaskID != r1.Task.ID {
		t.Fatalf("the delegator's retransmission: %#v, want a message naming its task %s", r2.Result, r1.Task.ID)
	}
	srv.x.Wait()
}
