package a2ahandoff_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// The task gate (decision 103) without NewHandler: an Executor served by
// a2asrv.NewHandler alone keeps a cancel's "ending" mark until a2a-go's
// Cleanup too, so a follow-up whose execution received the CANCELED is
// refused before its claim even when it runs after Cancel returned.
func TestCancelBeforeAFollowUpWithoutNewHandler(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	reached := make(chan string, 8)
	tasks := &heldTasks{tasks: map[a2a.TaskID]heldTask{}}
	st := memStore()
	x, err := a2ahandoff.NewExecutor(ctx, newAgent(), a2ahandoff.ServerConfig{
		Delegate: delegate.Config{Options: handoff.Options{Me: plannerID, Keys: w.keys}, Store: st, Signer: w.signers[plannerID], StatusForm: handoff.FormJWS},
		Sender:   a2ahandoff.UserName, NoEffectUnlessCompleted: true,
		OnCancel: func(_ context.Context, _, hop string, _ handoff.Digest) { reached <- hop },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(
		a2asrv.NewHandler(x, a2asrv.WithCallInterceptor(bearerAuth{tokens: w.tokens}), a2asrv.WithTaskStore(tasks)))))
	defer srv.Close()
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.URL, assistantID, dl, handoff.JSON)
	r1, h, issued := offerTwo(ctx, t, c, dl)
	done := make(chan error, 1)
	tasks.hold(r1.Task.ID, a2a.TaskStateInputRequired, func() {
		go func() { _, err := c.Cancel(ctx, r1.Hop); done <- err }()
		select {
		case <-reached: // OnCancel starts after Cancel's CANCELED write
		case <-time.After(10 * time.Second):
		}
	})
	sendBlocking(ctx, t, c, issued.Hop, h, r1)
	if err := <-done; err != nil {
		t.Fatalf("cancel of the task's last open hop: %v", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := x.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	if !tasks.held.Load() {
		t.Fatal("the race was not taken: the follow-up's history update was never held")
	}
	if _, err := st.Get(ctx, assistantID, issued.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the follow-up's offer into a task being canceled: record %v; want none", err)
	}
	if n := a2ahandoff.Gates(x); n != 0 {
		t.Fatalf("%d task gates left after every request ended; want none", n)
	}
}

// A cancel's "ending" mark lasts until a2a-go is done with the cancel, not
// until its request ends: here the cancel's client gives up while the
// Executor is inside the cancel, and its CANCELED is then lost (the
// execution resolved first, decision 102, and no request is left to run
// it again). The mark still ends: no gate is left, and the task's
// delegator can go on offering into the task, which stays open.
func TestCancelMarkEndsWhenTheClientGoesAway(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	st := &slowGets{Store: memStore(), entered: make(chan struct{}), release: make(chan struct{})}
	tasks := &heldTasks{tasks: map[a2a.TaskID]heldTask{}}
	srv := w.serve(t, plannerID, st, handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = true }, a2asrv.WithTaskStore(tasks))
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	r1, h, issued := offerTwo(ctx, t, c, dl)
	sendBlocking(ctx, t, c, issued.Hop, h, r1)
	<-srv.agent.started
	firstDone := make(chan error, 1)
	tasks.hold(r1.Task.ID, a2a.TaskStateInputRequired, func() {
		// The second hop's stopped run saves INPUT_REQUIRED; meanwhile
		// the first hop's cancel, with a short deadline, enters the
		// Executor and is held in its first read of the hop's record.
		st.arm(r1.Hop)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := c.Cancel(cctx, r1.Hop)
			firstDone <- err
		}()
		select {
		case <-st.entered:
		case <-time.After(10 * time.Second):
		}
	})
	if _, err := c.Cancel(ctx, issued.Hop); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of the second hop while the first is open: %v; want not cancelable", err)
	}
	if err := <-firstDone; err == nil {
		t.Fatal("the first hop's cancel returned before its client's deadline; want the client gone")
	}
	close(st.release)
	srv.x.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for a2ahandoff.Gates(srv.x) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d task gates left after the cancel ended; want none", a2ahandoff.Gates(srv.x))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 2 {
		h3, is3, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: fmt.Sprintf("later%d", i), Dialog: r1.Task.ContextID})
		if err != nil {
			t.Fatal(err)
		}
		m3 := into(r1, "more")
		// a2a-go lets go of the cancel just after Cleanup: until then it
		// refuses a message into the task ("cancelation in progress")
		// before the Executor runs, and the offer is sent again.
		var r3 *a2ahandoff.Reply
		for try := 0; ; try++ {
			if r3, err = c.Send(ctx, is3.Hop, h3, m3, nil); err == nil {
				break
			}
			if try == 50 {
				t.Fatalf("later offer %d: %v", i, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if r3.Task == nil || r3.State() != a2a.TaskStateInputRequired {
			t.Fatalf("later offer %d into the open task: %T %q; want it taken (the task waiting again)", i, r3.Result, r3.State())
		}
	}
}

// slowGets is a hop store whose first Get of one hop, once armed, waits
// for release (after saying so on entered).
type slowGets struct {
	store.Store
	mu      sync.Mutex
	hop     string
	entered chan struct{}
	release chan struct{}
}

func (s *slowGets) arm(hop string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hop = hop
}

func (s *slowGets) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	s.mu.Lock()
	held := s.hop != "" && hop == s.hop
	if held {
		s.hop = ""
	}
	s.mu.Unlock()
	if held {
		close(s.entered)
		select {
		case <-s.release:
		case <-time.After(10 * time.Second):
		}
	}
	return s.Store.Get(ctx, iss, hop)
}
