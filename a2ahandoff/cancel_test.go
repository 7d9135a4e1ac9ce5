package a2ahandoff_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
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
	r1, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "first"}, say("more"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "second", Dialog: r1.Task.ContextID})
	if err != nil {
		t.Fatal(err)
	}
	m := say("block")
	m.ContextID, m.TaskID = r1.Task.ContextID, r1.Task.ID
	if _, err := c.Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: new(false)}); err != nil {
		t.Fatal(err)
	}
	<-srv.agent.started

	// The second execution's INPUT_REQUIRED is held in Save until the
	// first hop's cancel has reached the Executor (its OnCancel ran).
	type result struct {
		state a2a.TaskState
		err   error
	}
	done := make(chan result, 1)
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
		go func() {
			cr, err := c.Cancel(ctx, r1.Hop)
			if err != nil {
				done <- result{err: err}
				return
			}
			done <- result{state: cr.State()}
		}()
		for {
			select {
			case hop := <-reached:
				if hop != r1.Hop {
					continue
				}
			case <-time.After(10 * time.Second):
				missed <- "the first hop's cancel did not reach the Executor while the execution was resolving"
			}
			return
		}
	})
	_, err = c.Cancel(ctx, issued.Hop)
	close(secondDone)
	if !errors.Is(err, a2a.ErrTaskNotCancelable) {
		t.Fatalf("cancel of the second hop while the first is open: %v; want the task not canceled", err)
	}
	select {
	case <-srv.agent.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the second hop's work did not stop")
	}
	var r result
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
	gets  atomic.Int64 // Get calls
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
	s.gets.Add(1)
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
	r1, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "first"}, say("more"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "second", Dialog: r1.Task.ContextID})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	second = issued.Hop
	mu.Unlock()
	m := say("block")
	m.ContextID, m.TaskID = r1.Task.ContextID, r1.Task.ID
	if _, err := c.Send(ctx, issued.Hop, h, m, &a2a.MessageSendConfig{Blocking: new(false)}); err != nil {
		t.Fatal(err)
	}
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
	type result struct {
		state a2a.TaskState
		err   error
	}
	firstDone := make(chan result, 1)
	in.arm()
	go func() {
		cr, err := c.Cancel(ctx, r1.Hop)
		if err != nil {
			firstDone <- result{err: err}
			return
		}
		firstDone <- result{state: cr.State()}
	}()
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
	var r result
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
	if n := a2ahandoff.RerunJoined(srv.x); n != 1 {
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

// A Cancel Task request that a2a-go refuses before the Executor runs (an
// unknown task here), with no other cancel of the task in progress, is
// answered once: only a request a2a-go may have joined onto another is
// run again.
func TestCancelOfUnknownTaskRunsOnce(t *testing.T) {
	w := newWorld(t)
	tasks := &heldTasks{tasks: map[a2a.TaskID]heldTask{}}
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil, a2asrv.WithTaskStore(tasks))
	ac := a2aClient(t, srv.url, "token-of-"+assistantID)
	_, err := ac.CancelTask(context.Background(), &a2a.TaskIDParams{ID: "no-such-task"})
	if !errors.Is(err, a2a.ErrTaskNotFound) {
		t.Fatalf("cancel of an unknown task: %v; want task not found", err)
	}
	if n := tasks.gets.Load(); n != 1 {
		t.Fatalf("the task was looked up %d times; want once (the request run once)", n)
	}
}
