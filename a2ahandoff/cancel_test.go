package a2ahandoff_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// After a verified "canceled" the hop's outcome is still recorded
// (draft "Lifecycle": a cancel does not show that the work took no
// effect; "Knowing the Outcome": the delegate never guesses), every time,
// although a2a-go cancels the execution's context once CANCELED is
// written: with NoEffectUnlessCompleted the hop ends "failed" with no
// effect; without it the hop stays "accepted" and is flagged
// unknown-outcome.
func TestCancelRecordsOutcome(t *testing.T) {
	const rounds = 20
	for _, known := range []bool{true, false} {
		t.Run(fmt.Sprintf("NoEffectUnlessCompleted=%v", known), func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = known })
			c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), handoff.JSON)
			for i := range rounds {
				r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: fmt.Sprintf("w%d", i)}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
				if err != nil {
					t.Fatal(err)
				}
				<-srv.agent.started
				if _, err := c.Cancel(ctx, r.Hop); err != nil {
					t.Fatal(err)
				}
				<-srv.agent.stopped
				deadline := time.Now().Add(5 * time.Second)
				for {
					rec, err := srv.st.Get(ctx, assistantID, r.Hop)
					if err != nil {
						t.Fatal(err)
					}
					flags, err := srv.x.Delegate().Flags(ctx, false)
					if err != nil {
						t.Fatal(err)
					}
					flagged := hasFlag(t, flags, store.FlagUnknownOutcome, r.Hop)
					if known && rec.State == store.Failed && !flagged {
						break
					}
					if !known && rec.State == store.Accepted && flagged {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("round %d: hop %s is %s, unknown-outcome flagged %v; want %s", i, r.Hop, rec.State,
							flagged, map[bool]string{true: "failed, not flagged", false: "accepted and flagged"}[known])
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
}

// A task may carry a second offer from the same delegator, sent as a
// follow-up into it; the delegator's "canceled" for that hop is verified
// against the offer it names (D9), not against the task's first offer.
// A cancel never writes CANCELED on a task that still carries another
// open hop (decision 53): the second hop is canceled and its work
// stopped, the request is refused as not cancelable, and the task waits
// again (INPUT_REQUIRED) for the first hop; once that one is canceled
// too, the task ends CANCELED.
func TestCancelOfSecondOfferInTask(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = true })
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	r1, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "first"}, say("more"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r1.State() != a2a.TaskStateInputRequired {
		t.Fatalf("first: %s, want input-required", r1.State())
	}
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "second", Dialog: r1.Task.ContextID})
	if err != nil {
		t.Fatal(err)
	}
	m := say("block")
	m.ContextID, m.TaskID = r1.Task.ContextID, r1.Task.ID
	r2, err := c.Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: new(false)})
	if err != nil {
		t.Fatal(err)
	}
	<-srv.agent.started
	if r2.Task == nil || r2.Task.ID != r1.Task.ID {
		t.Fatalf("the second offer's reply %+v is not the first task", r2.Result)
	}
	_, err = c.Cancel(ctx, issued.Hop)
	if err == nil || !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of the second hop while the first is open: %v; want the task not canceled", err)
	}
	<-srv.agent.stopped
	rec, err := srv.st.Get(ctx, assistantID, issued.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Canceled {
		t.Fatal("the second hop is not noted canceled")
	}
	first, err := srv.st.Get(ctx, assistantID, r1.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if first.Canceled || first.State != store.Accepted {
		t.Fatalf("the first hop is %s (canceled %v); want accepted, not canceled", first.State, first.Canceled)
	}
	ac := a2aClient(t, srv.url, "token-of-"+assistantID)
	waitTask(t, ac, r1.Task.ID, a2a.TaskStateInputRequired, "the task, after its second hop's cancel")

	cr, err := c.Cancel(ctx, r1.Hop)
	if err != nil || cr.State() != a2a.TaskStateCanceled {
		t.Fatalf("cancel of the first hop, the last open one: %v; want the task canceled", err)
	}
}

// A cancel that reaches a2a-go while the task's execution is resolving
// (here to INPUT_REQUIRED, its other hop canceled) is handed to that
// execution, which never reads it: a2a-go v0.3.15 then refuses the
// request as not cancelable, although the Executor verified and recorded
// the cancel. NewHandler's handler runs such a request again once the
// execution has ended (decision 53 still holds: the task's last open hop
// is canceled, so the task ends CANCELED), and OnCancel starts once.
// The task store holds the execution's last save until the cancel has
// reached the Executor, so the race is taken every time.
func TestCancelRacingTheEndOfAnExecution(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	var (
		mu        sync.Mutex
		onCancels = map[string]int{}
		stops     = map[string]int{}
		reached   = make(chan string, 8)
	)
	tasks := &heldTasks{tasks: map[a2a.TaskID]heldTask{}}
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) {
		c.NoEffectUnlessCompleted = true
		c.Delegate.Stop = func(_, hop string) { mu.Lock(); stops[hop]++; mu.Unlock() }
		c.OnCancel = func(_ context.Context, _, hop string, _ handoff.Digest) {
			mu.Lock()
			onCancels[hop]++
			mu.Unlock()
			reached <- hop
		}
	}, a2asrv.WithTaskStore(tasks))
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	r1, h, issued := offerTwo(ctx, t, c, dl)
	sendBlocking(ctx, t, c, issued.Hop, h, r1)
	<-srv.agent.started

	// The second execution's INPUT_REQUIRED is held in Save until the
	// first hop's cancel has reached the Executor (its OnCancel ran).
	done := make(chan cancelResult, 1)
	secondDone := make(chan struct{})
	missed := make(chan string, 2) // what the held Save waited for in vain
	tasks.hold(r1.Task.ID, a2a.TaskStateInputRequired, func() {
		// a2a-go joins a cancel onto one in progress for the task: the
		// first hop's cancel waits until the second's has ended.
		select {
		case <-secondDone:
		case <-time.After(10 * time.Second):
			missed <- "the second hop's cancel did not end"
			return
		}
		go func() { done <- cancelOf(ctx, c, r1.Hop) }()
		if !reachedHop(reached, r1.Hop) {
			missed <- "the first hop's cancel did not reach the Executor while the execution was resolving"
		}
	})
	_, err := c.Cancel(ctx, issued.Hop)
	close(secondDone)
	if !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of the second hop while the first is open: %v; want the task not canceled", err)
	}
	select {
	case <-srv.agent.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the second hop's work did not stop")
	}
	var r cancelResult
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the first hop's cancel did not return")
	}
	if r.err != nil || r.state != a2a.TaskStateCanceled {
		t.Fatalf("cancel of the first hop while the execution resolved: %s, %v; want the task canceled", r.state, r.err)
	}
	if !tasks.held.Load() {
		t.Fatal("the race was not taken: the execution's INPUT_REQUIRED was never held")
	}
	select {
	case m := <-missed:
		t.Fatalf("the race was not taken as planned: %s", m)
	default:
	}
	srv.x.Wait()
	mu.Lock()
	defer mu.Unlock()
	if stops[issued.Hop] != 1 {
		t.Fatalf("the refused cancel of the second hop ran %d times; want once", stops[issued.Hop])
	}
	if onCancels[r1.Hop] != 1 || onCancels[issued.Hop] != 1 {
		t.Fatalf("OnCancel ran %d times for the first hop and %d for the second; want once each", onCancels[r1.Hop], onCancels[issued.Hop])
	}
}

// heldTasks is an a2asrv.TaskStore in memory whose Save of one task in
// one state runs a function first, once (hold).
type heldTasks struct {
	mu    sync.Mutex
	tasks map[a2a.TaskID]heldTask
	id    a2a.TaskID
	state a2a.TaskState
	then  func()
	held  atomic.Bool
}

type heldTask struct {
	json    []byte
	version a2a.TaskVersion
}

func (s *heldTasks) hold(id a2a.TaskID, state a2a.TaskState, then func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.state, s.then = id, state, then
}

func (s *heldTasks) Save(_ context.Context, task *a2a.Task, _ a2a.Event, _ *a2a.Task, prev a2a.TaskVersion) (a2a.TaskVersion, error) {
	s.mu.Lock()
	var then func()
	if s.then != nil && task.ID == s.id && task.Status.State == s.state {
		then, s.then = s.then, nil
	}
	s.mu.Unlock()
	if then != nil {
		s.held.Store(true)
		then()
	}
	b, err := json.Marshal(task)
	if err != nil {
		return a2a.TaskVersionMissing, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.tasks[task.ID]
	if ok && prev != a2a.TaskVersionMissing && old.version != prev {
		return a2a.TaskVersionMissing, a2a.ErrConcurrentTaskModification
	}
	s.tasks[task.ID] = heldTask{json: b, version: old.version + 1}
	return old.version + 1, nil
}

func (s *heldTasks) Get(_ context.Context, id a2a.TaskID) (*a2a.Task, a2a.TaskVersion, error) {
	s.mu.Lock()
	t, ok := s.tasks[id]
	s.mu.Unlock()
	if !ok {
		return nil, a2a.TaskVersionMissing, a2a.ErrTaskNotFound
	}
	var task a2a.Task
	if err := json.Unmarshal(t.json, &task); err != nil {
		return nil, a2a.TaskVersionMissing, err
	}
	return &task, t.version, nil
}

func (s *heldTasks) List(context.Context, *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	return nil, errors.New("heldTasks: no listing")
}

// a2a-go joins a Cancel Task request onto one already in progress for the
// task and answers both with the first's result. The delegator canceling
// both hops of a task at once would get, for the first hop, the refusal
// of the second's cancel (another hop still open: decision 53), with the
// first hop's cancel never verified nor recorded. NewHandler's handler
// runs a request that the Executor never saw again, so each cancel gets
// its own verdict: the second hop's is refused, the first hop's (the
// last open one) ends the task.
func TestCancelsOfTwoHopsAtOnce(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	var (
		mu        sync.Mutex
		onCancels = map[string]int{}
		holding   = make(chan struct{}) // the second hop's cancel is in the Executor
		release   = make(chan struct{})
		once      sync.Once
	)
	in := &cancelSeen{seen: make(chan struct{}, 1)}
	var second string
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) {
		c.NoEffectUnlessCompleted = true
		c.Delegate.Stop = func(_, hop string) {
			mu.Lock()
			hold := hop == second
			mu.Unlock()
			if hold {
				once.Do(func() {
					close(holding)
					select {
					case <-release:
					case <-time.After(10 * time.Second):
					}
				})
			}
		}
		c.OnCancel = func(_ context.Context, _, hop string, _ handoff.Digest) {
			mu.Lock()
			onCancels[hop]++
			mu.Unlock()
		}
	}, a2asrv.WithCallInterceptor(in))
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	r1, h, issued := offerTwo(ctx, t, c, dl)
	mu.Lock()
	second = issued.Hop
	mu.Unlock()
	sendBlocking(ctx, t, c, issued.Hop, h, r1)
	<-srv.agent.started

	secondErr := make(chan error, 1)
	go func() {
		_, err := c.Cancel(ctx, issued.Hop)
		secondErr <- err
	}()
	select {
	case <-holding:
	case <-time.After(10 * time.Second):
		t.Fatal("the second hop's cancel did not reach the Executor")
	}
	firstDone := make(chan cancelResult, 1)
	in.arm()
	go func() { firstDone <- cancelOf(ctx, c, r1.Hop) }()
	select {
	case <-in.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the first hop's cancel did not arrive")
	}
	// From the interceptor to a2a-go's join is a few calls; the second
	// hop's cancel is held well past that.
	time.Sleep(200 * time.Millisecond)
	close(release)

	select {
	case err := <-secondErr:
		if !errors.Is(err, a2a.ErrTaskNotCancelable) {
			t.Fatalf("cancel of the second hop while the first is open: %v; want the task not canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second hop's cancel did not return")
	}
	var r cancelResult
	select {
	case r = <-firstDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the first hop's cancel did not return")
	}
	if r.err != nil || r.state != a2a.TaskStateCanceled {
		t.Fatalf("cancel of the first hop, sent while the second's was in progress: %s, %v; want the task canceled", r.state, r.err)
	}
	first, err := srv.st.Get(ctx, assistantID, r1.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Canceled {
		t.Fatal("the first hop is not noted canceled")
	}
	if n := a2ahandoff.RerunUnseen(srv.x); n != 1 {
		t.Fatalf("%d requests were run again after a2a-go joined them onto another; want the first hop's cancel, once", n)
	}
	srv.x.Wait()
	mu.Lock()
	defer mu.Unlock()
	if onCancels[r1.Hop] != 1 || onCancels[issued.Hop] != 1 {
		t.Fatalf("OnCancel ran %d times for the first hop and %d for the second; want once each", onCancels[r1.Hop], onCancels[issued.Hop])
	}
}

// cancelSeen tells, once armed, when a Cancel Task request has passed the
// call interceptors.
type cancelSeen struct {
	a2asrv.PassthroughCallInterceptor
	armed atomic.Bool
	seen  chan struct{}
}

func (c *cancelSeen) arm() { c.armed.Store(true) }

func (c *cancelSeen) Before(ctx context.Context, cc *a2asrv.CallContext, _ *a2asrv.Request) (context.Context, error) {
	if cc.Method() == "OnCancelTask" && c.armed.CompareAndSwap(true, false) {
		c.seen <- struct{}{}
	}
	return ctx, nil
}

// A Cancel Task request that a2a-go refuses before the Executor runs
// because of what the task is (unknown, or ended with its hop completed)
// is answered once: only a request for an open task with a handoff, which
// a2a-go answered with another request's result, is run again.
func TestCancelRefusedByA2AGoRunsOnce(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	ac := a2aClient(t, srv.url, "token-of-"+assistantID)
	if _, err := ac.CancelTask(ctx, &a2a.TaskIDParams{ID: "no-such-task"}); !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("cancel of an unknown task: %v; want task not found", err)
	}
	c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), handoff.JSON)
	r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "w"}, say("complete"), nil)
	if err != nil || r.State() != a2a.TaskStateCompleted {
		t.Fatalf("offer: %v; want the task completed", err)
	}
	if _, err := c.Cancel(ctx, r.Hop); !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of a completed task: %v; want not cancelable", err)
	}
	if n := a2ahandoff.RerunUnseen(srv.x); n != 0 {
		t.Fatalf("the requests were run %d more times; want once each", n)
	}
}

// a2a-go registers a follow-up message's execution before it adds the
// message to the task's history, and hands a cancel arriving in between
// to that execution: the Executor reads a history without the new offer.
// One owner decides that the task ends (decision 103). When the cancel of
// the task's last open hop decides first, the task ends CANCELED and the
// new offer is refused before it is claimed: no record, no work. The
// task store holds the follow-up's history update until the cancel has
// reached the Executor, so this order is taken every time.
func TestCancelBeforeAFollowUpIsTaken(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	reached := make(chan string, 8)
	tasks := &heldTasks{tasks: map[a2a.TaskID]heldTask{}}
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) {
		c.NoEffectUnlessCompleted = true
		c.OnCancel = func(_ context.Context, _, hop string, _ handoff.Digest) { reached <- hop }
	}, a2asrv.WithTaskStore(tasks))
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	r1, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "first"}, say("more"), nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := srv.agent.runs.Load()
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "second", Dialog: r1.Task.ContextID})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan cancelResult, 1)
	missed := make(chan string, 1)
	tasks.hold(r1.Task.ID, a2a.TaskStateInputRequired, func() {
		go func() { done <- cancelOf(ctx, c, r1.Hop) }()
		if !reachedHop(reached, r1.Hop) {
			missed <- "the first hop's cancel did not reach the Executor while the follow-up was being taken"
		}
	})
	_, serr := c.Send(ctx, issued.Hop, h, into(r1, "block"), &a2a.MessageSendConfig{Blocking: new(false)})
	var r cancelResult
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the first hop's cancel did not return")
	}
	select {
	case m := <-missed:
		t.Fatalf("the race was not taken as planned: %s", m)
	default:
	}
	if !tasks.held.Load() {
		t.Fatal("the race was not taken: the follow-up's history update was never held")
	}
	if r.err != nil || r.state != a2a.TaskStateCanceled {
		t.Fatalf("cancel of the task's last open hop while a follow-up was being taken: %s, %v; want the task canceled", r.state, r.err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.x.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.st.Get(ctx, assistantID, issued.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the follow-up's offer, sent into a task being canceled: record %v; want none (not taken; the send said %v)", err, serr)
	}
	if n := srv.agent.runs.Load(); n != runs {
		t.Fatalf("the agent ran %d more times; want no run for an offer into a task being canceled", n-runs)
	}
}

// The other order: the follow-up's offer is being claimed when the cancel
// of the task's other hop arrives. The cancel is recorded and that hop's
// work stopped, but the task is not canceled under the new hop (decision
// 53). The claim is held until the cancel has been answered.
func TestCancelWhileAFollowUpIsClaimed(t *testing.T) {
	cancelWhileAFollowUpIsClaimed(t, nil, nil)
}

// cancelWhileAFollowUpIsClaimed runs TestCancelWhileAFollowUpIsClaimed
// with the server's config changed by set, and before (if not nil) run
// once the task's first hop runs and the follow-up's offer h is made,
// before it is sent.
func cancelWhileAFollowUpIsClaimed(t *testing.T, set func(*a2ahandoff.ServerConfig), before func(ctx context.Context, srv *server, r1 *a2ahandoff.Reply, h *handoff.Handoff, hop string)) {
	ctx := context.Background()
	w := newWorld(t)
	st := &heldClaims{Store: memStore(), claimed: make(chan struct{}), release: make(chan struct{})}
	srv := w.serve(t, plannerID, st, handoff.FormJWS, func(c *a2ahandoff.ServerConfig) {
		c.NoEffectUnlessCompleted = true
		if set != nil {
			set(c)
		}
	})
	dl := w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	r1, h, issued := offerTwo(ctx, t, c, dl)
	if before != nil {
		before(ctx, srv, r1, h, issued.Hop)
	}
	st.hold(issued.Hop)
	sent := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, issued.Hop, h, into(r1, "block"), &a2a.MessageSendConfig{Blocking: new(false)})
		sent <- err
	}()
	select {
	case <-st.claimed:
	case <-time.After(10 * time.Second):
		t.Fatal("the follow-up's offer was not claimed")
	}
	_, cerr := c.Cancel(ctx, r1.Hop)
	close(st.release)
	if !errors.Is(cerr, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of the first hop while the second was being claimed: %v; want the task not canceled", cerr)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	first, err := srv.st.Get(ctx, assistantID, r1.Hop)
	if err != nil || !first.Canceled {
		t.Fatalf("the first hop's cancel: record %+v, %v; want it recorded", first, err)
	}
	select {
	case <-srv.agent.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the second hop's work did not start")
	}
	if r, err := srv.st.Get(ctx, assistantID, issued.Hop); err != nil || r.State != store.Accepted || r.Canceled {
		t.Fatalf("the second hop's record: %+v %v, want accepted and running", r, err)
	}
	cr, err := c.Cancel(ctx, issued.Hop)
	if err != nil || cr.State() != a2a.TaskStateCanceled {
		t.Fatalf("cancel of the second hop, the last open one: %v; want the task canceled", err)
	}
	srv.x.Wait()
}

// heldClaims is a hop store whose Claim of one hop waits for release
// (after saying so on claimed).
type heldClaims struct {
	store.Store
	mu      sync.Mutex
	hop     string
	claimed chan struct{}
	release chan struct{}
}

func (s *heldClaims) hold(hop string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hop = hop
}

func (s *heldClaims) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	s.mu.Lock()
	held := r.Hop == s.hop && s.hop != ""
	if held {
		s.hop = ""
	}
	s.mu.Unlock()
	if held {
		close(s.claimed)
		select {
		case <-s.release:
		case <-time.After(10 * time.Second):
		}
	}
	return s.Store.Claim(ctx, r)
}

// A task without a handoff (AllowPlain) is canceled by the agent's own
// Cancel, and a2a-go's join of two overlapping cancels is right for it:
// the agent's Cancel runs once, and the joined request is not run again
// (only a task with a handoff has verdicts of its own per request).
func TestCancelsOfAPlainTaskJoinOnce(t *testing.T) {
	w := newWorld(t)
	in := &cancelSeen{seen: make(chan struct{}, 1)}
	agent := &refusingAgent{testAgent: newAgent(), entered: make(chan struct{}, 2), release: make(chan struct{})}
	x, err := a2ahandoff.NewExecutor(context.Background(), agent, a2ahandoff.ServerConfig{
		Delegate: delegate.Config{Options: handoff.Options{Me: plannerID, Keys: w.keys}, Store: memStore(), Signer: w.signers[plannerID], StatusForm: handoff.FormJWS},
		Sender:   a2ahandoff.UserName, AllowPlain: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := a2ahandoff.NewHandler(x, a2asrv.WithCallInterceptor(bearerAuth{tokens: w.tokens}), a2asrv.WithCallInterceptor(in))
	srv := httptest.NewServer(a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(h)))
	defer srv.Close()
	ac := a2aClient(t, srv.URL, "token-of-"+assistantID)
	res, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: say("more")})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("the plain message's reply %T, want a task", res)
	}
	errs := make(chan error, 2)
	cancel := func() {
		_, err := ac.CancelTask(context.Background(), &a2a.TaskIDParams{ID: task.ID})
		errs <- err
	}
	go cancel()
	select {
	case <-agent.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first cancel did not reach the agent")
	}
	in.arm()
	go cancel()
	select {
	case <-in.seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the second cancel did not arrive")
	}
	time.Sleep(200 * time.Millisecond) // as in TestCancelsOfTwoHopsAtOnce
	close(agent.release)
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, a2a.ErrTaskNotCancelable) {
				t.Fatalf("cancel of a plain task whose agent refuses: %v; want not cancelable", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a cancel did not return")
		}
	}
	if n := agent.cancels.Load(); n != 1 {
		t.Fatalf("the agent's Cancel ran %d times for two joined requests; want once", n)
	}
	if n := a2ahandoff.RerunUnseen(x); n != 0 {
		t.Fatalf("%d requests were run again; want none for a task without a handoff", n)
	}
}

// refusingAgent refuses every cancel, once release is closed.
type refusingAgent struct {
	*testAgent
	cancels atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (a *refusingAgent) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	a.cancels.Add(1)
	a.entered <- struct{}{}
	<-a.release
	return a2a.ErrTaskNotCancelable
}

// offerTwo has the assistant offer the planner a first hop whose task
// waits for more input, and sign (not send) a second offer for the same
// dialog: the first reply, and the second offer's Handoff and record.
func offerTwo(ctx context.Context, t *testing.T, c *a2ahandoff.Client, dl *delegator.Delegator) (*a2ahandoff.Reply, *handoff.Handoff, *store.Issued) {
	t.Helper()
	r1, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "first"}, say("more"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "second", Dialog: r1.Task.ContextID})
	if err != nil {
		t.Fatal(err)
	}
	return r1, h, issued
}

// sendBlocking sends the offer h for hop into the task of r with the
// text "block" (its work runs until released), not waiting for the
// task to settle.
func sendBlocking(ctx context.Context, t *testing.T, c *a2ahandoff.Client, hop string, h *handoff.Handoff, r *a2ahandoff.Reply) {
	t.Helper()
	if _, err := c.Send(ctx, hop, h, into(r, "block"), &a2a.MessageSendConfig{Blocking: new(false)}); err != nil {
		t.Fatal(err)
	}
}

// into is a user message saying text, sent into the task of r.
func into(r *a2ahandoff.Reply, text string) *a2a.Message {
	m := say(text)
	m.ContextID, m.TaskID = r.Task.ContextID, r.Task.ID
	return m
}

// cancelResult is what a Cancel Task request ended with: the task's state,
// or an error.
type cancelResult struct {
	state a2a.TaskState
	err   error
}

// cancelOf has c send the delegator's cancel of hop.
func cancelOf(ctx context.Context, c *a2ahandoff.Client, hop string) cancelResult {
	cr, err := c.Cancel(ctx, hop)
	if err != nil {
		return cancelResult{err: err}
	}
	return cancelResult{state: cr.State()}
}

// reachedHop waits until hop comes on reached, skipping other hops; false
// when it has not after 10 seconds.
func reachedHop(reached <-chan string, hop string) bool {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case h := <-reached:
			if h == hop {
				return true
			}
		case <-timeout:
			return false
		}
	}
}
