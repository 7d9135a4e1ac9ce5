package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// upstreamA2A is the agent behind an a2a route, as an a2a-go
// AgentExecutor: a2ahandoff.Executor wraps it exactly as it wraps an
// agent's own code, so the receiving checks, the hop record, the signed
// statuses, retransmissions, equivocation and cancels are the carrier's,
// and this type only carries the work to the upstream and its events
// back. The upstream's task and context ids are its own; the gateway's
// client sees the gateway's, and each event is rewritten on the way.
type upstreamA2A struct {
	route  string
	client *a2aclient.Client
	log    *slog.Logger

	// The gateway's tasks that may still be continued or canceled: while
	// an Execute runs, and while the task waits for its caller. Entries
	// untouched for mappedFor are pruned (a caller that never returns).
	mu      sync.Mutex
	tasks   map[a2a.TaskID]a2a.TaskID // the gateway's task -> the upstream's
	hops    map[[2]string]a2a.TaskID  // (iss, hop) -> the gateway's task, for stops of paused hops
	hopOf   map[a2a.TaskID][2]string  // the reverse of hops
	touched map[a2a.TaskID]time.Time  // the last Execute's start, for pruning
	running map[a2a.TaskID]bool       // gateway tasks with an Execute in progress
	pruneAt int                       // prune when len(touched) reaches it

	// life ends when the gateway closes: the exchanges still open with
	// the upstream are dropped (after the store closed, so that their
	// hops stay as recorded: accepted, the outcome unknown).
	life  context.Context
	abort context.CancelFunc

	took prometheus.Observer // the exchanges' time (nil: not observed)

	// shared keeps the route's tasks and their upstream tasks in the
	// store, for the other replicas (shared.go); the maps above are this
	// replica's own, and are read first.
	shared *sqlTasks
	// mem keeps the route's tasks when nothing is shared (memtasks.go).
	mem *memTasks
	// linkTask notes the upstream's task id doing a hop's work for the
	// egress's links (links.go); nil without an egress.
	linkTask func(h *a2ahandoff.Hop, task string)
	// stopped reads whether the hop's record says canceled or
	// equivocated (nil: not asked), for a stop verified on another
	// replica before this one knew the upstream task.
	stopped func(ctx context.Context, iss, hop string) bool
}

func newUpstreamA2A(route string, client *a2aclient.Client, log *slog.Logger) *upstreamA2A {
	u := &upstreamA2A{route: route, client: client, log: log, tasks: map[a2a.TaskID]a2a.TaskID{},
		hops: map[[2]string]a2a.TaskID{}, hopOf: map[a2a.TaskID][2]string{}, touched: map[a2a.TaskID]time.Time{},
		running: map[a2a.TaskID]bool{}, pruneAt: 1024}
	u.life, u.abort = context.WithCancel(context.Background())
	return u
}

var _ a2asrv.AgentExecutor = (*upstreamA2A)(nil)

// contextIDKey holds the contextId of the message a request to the
// upstream carries on, for the links (links.go).
type contextIDKey struct{}

// cancelTimeout bounds the upstream cancel sent for a stopped hop.
const cancelTimeout = 30 * time.Second

// Execute sends the message to the upstream (streaming, when the
// upstream's card says it streams; a2aclient sends it as one request
// otherwise) and writes each event back as the gateway's task's;
// a task the upstream leaves running without a stream (or whose stream
// broke) is followed with tasks/get until it ends or waits for input.
//
// When a2ahandoff stops the run (a verified cancel, an equivocation:
// a2ahandoff.Stopped), the upstream is sent tasks/cancel for its task,
// and its answer decides the outcome: a task that completed before the
// cancel reached it is "completed", one that ended canceled or failed is
// the stop's. Whenever the exchange ends before the upstream said what
// became of the work (a broken stream with no task to follow, an
// upstream that stops answering, a stop it never answers, a gateway
// that shuts down), Execute returns an error wrapping
// a2ahandoff.ErrOutcomeUnknown: never a signed "failed". A ctx that ends
// for another reason (a2a-go ends it once the final event is processed)
// is not a stop.
func (u *upstreamA2A) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) (err error) {
	m := *rc.Message
	m.Metadata = maps.Clone(rc.Message.Metadata)
	m.TaskID = u.upstreamTask(rc.TaskID) // a follow-up continues the upstream's task
	// The handoff was checked here; the upstream, unmodified, has no use
	// for it, and an upstream that logs metadata should not keep it.
	delete(m.Metadata, a2ahandoff.Key)
	// Not blocking: an upstream that does not stream answers at once with
	// its task, whose id a cancel needs, and is followed with tasks/get
	// (a streaming upstream ignores the flag).
	noWait := false
	params := &a2a.MessageSendParams{Message: &m, Metadata: rc.Metadata, Config: &a2a.MessageSendConfig{Blocking: &noWait}}

	hop := a2ahandoff.HopFrom(ctx)
	u.began(rc.TaskID, hop)
	e := &exchange{u: u, rc: rc, q: q, ctx: ctx, hop: hop}
	start := time.Now()
	defer func() {
		took := time.Since(start)
		if u.took != nil {
			u.took.Observe(took.Seconds())
		}
		// One line per exchange with the upstream: what became of the
		// task, with the A2A fields an operator looks for.
		attrs := []any{"route", u.route, "protocol", "a2a", "task", string(rc.TaskID), "context_id", rc.ContextID,
			"task_state", string(e.last), "took", took}
		if hop != nil {
			attrs = append(attrs, "iss", hop.Iss, "hop", hop.ID)
		}
		if err != nil {
			attrs = append(attrs, "err", oneLine(err))
		}
		u.log.Info("upstream task", attrs...)
		u.ended(rc.TaskID)
		// Only a task waiting for its caller may be continued or canceled
		// later; every other end leaves nothing to map.
		if !e.paused() {
			u.forgetTask(rc.TaskID)
		}
	}()

	// The exchange with the upstream outlives ctx: a cancel can arrive
	// before the upstream's first event has (its task id is needed to
	// cancel it), and the upstream's answer to the cancel says whether
	// the work completed anyway.
	var stop context.CancelFunc
	e.sctx, stop = context.WithCancel(context.WithValue(context.WithoutCancel(ctx), contextIDKey{}, m.ContextID))
	defer stop()
	defer context.AfterFunc(u.life, stop)()
	known := make(chan struct{})
	var knowOnce sync.Once
	know := func() { knowOnce.Do(func() { close(known) }) }
	if m.TaskID != "" {
		know() // a follow-up: the upstream's task is known already
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-e.sctx.Done():
			return
		case <-ctx.Done():
		}
		if !a2ahandoff.Stopped(ctx) {
			if !e.final.Load() {
				stop() // the gateway is ending the execution: the exchange ends too
			}
			return
		}
		select {
		case <-known:
			u.cancelUpstream(rc.TaskID)
		case <-e.sctx.Done():
			return
		case <-time.After(cancelTimeout):
			u.log.Warn("the stopped hop's upstream task never said its id; not canceled", "route", u.route, "task", rc.TaskID)
			stop()
			return
		}
		// Wait for the upstream's final word on the stream (or follow's).
		select {
		case <-e.sctx.Done():
		case <-time.After(cancelTimeout):
			stop()
		}
	}()
	defer func() { stop(); <-watched }()

	for ev, serr := range u.client.SendStreamingMessage(e.sctx, params) {
		if serr != nil {
			if e.final.Load() {
				return nil // said and done; the stream's end does not matter
			}
			if u.upstreamTask(rc.TaskID) != "" && !e.sctxDone() {
				// The stream broke, the task lives on: follow it.
				u.log.Warn("the upstream's stream broke; following its task", "route", u.route, "task", rc.TaskID, "err", serr)
				return e.follow()
			}
			if e.last == "" && u.upstreamTask(rc.TaskID) == "" && dialFailed(serr) && hop != nil {
				// The request never reached the upstream: nothing ran
				// (as an MCP route says of a failed dial).
				if derr := hop.Declare(delegate.Outcome{State: store.Failed, NoEffect: true,
					Detail: "the upstream could not be called: " + oneLine(serr)}); derr != nil {
					u.log.Warn("declaring a failed call's outcome", "route", u.route, "task", rc.TaskID, "err", oneLine(derr))
				}
				return fmt.Errorf("gateway: route %s: the upstream could not be called, so the work did not start: %w", u.route, serr)
			}
			return e.lost(fmt.Errorf("the upstream: %w", serr))
		}
		if id := eventTask(ev); id != "" {
			u.noteTask(rc.TaskID, id, hop)
			know()
		}
		if done, err := e.take(ev); done || err != nil {
			return err
		}
	}
	if e.final.Load() {
		return nil
	}
	if e.last == "" && u.upstreamTask(rc.TaskID) == "" {
		return e.lost(errors.New("the upstream's answer ended without a task state or a reply"))
	}
	return e.follow()
}

// exchange is one Execute's conversation with the upstream.
type exchange struct {
	u    *upstreamA2A
	rc   *a2asrv.RequestContext
	q    eventqueue.Queue
	ctx  context.Context // the run's: a2ahandoff.Stopped(ctx) is a stop
	sctx context.Context // the exchange's: outlives ctx, ends with the gateway
	hop  *a2ahandoff.Hop // nil for a task without a handoff

	last a2a.TaskState // the last state written
	// upLast is the upstream's last state as it said it: follow asks
	// again until it changes (last may say "working" where the upstream
	// still says "submitted", and would then never match).
	upLast a2a.TaskState
	final  atomic.Bool // a final event was written: the task ended or paused
}

func (e *exchange) sctxDone() bool { return e.sctx.Err() != nil }

// paused: the last state written waits for the caller.
func (e *exchange) paused() bool {
	return e.last == a2a.TaskStateInputRequired || e.last == a2a.TaskStateAuthRequired
}

// take handles one upstream event: written as the gateway's while the
// run goes on; after a stop, read for the upstream's final word. done
// says the exchange is over (with err its result).
func (e *exchange) take(ev a2a.Event) (done bool, err error) {
	if a2ahandoff.Stopped(e.ctx) {
		return e.afterStop(ev)
	}
	if e.ctx.Err() != nil {
		// Ended, not stopped, before a final event: the gateway is
		// ending the execution; what the work did is not known.
		return true, e.lost(errors.New("the execution ended before the upstream's final event"))
	}
	// The gateway's task has a state already when a2ahandoff accepted
	// its hop ("working"), when it is a follow-up, or after the
	// upstream's first: an upstream's "submitted" then is not a step back.
	begun := e.hop != nil || e.rc.StoredTask != nil || e.last != ""
	st, err := e.u.write(e.ctx, e.rc, e.q, ev, begun)
	if err != nil {
		return true, err
	}
	if _, reply := ev.(*a2a.Message); reply {
		e.final.Store(true) // a2ahandoff made the reply the COMPLETED status
		return true, nil
	}
	if st != "" {
		e.last = st
	}
	if s := eventState(ev); s != "" {
		e.upLast = s
	}
	if e.last.Terminal() || e.paused() {
		e.final.Store(true)
		return true, nil
	}
	return false, nil
}

// afterStop reads an upstream event after a stop: a completion (a task
// COMPLETED, or a reply) is declared, since the work took effect; a
// task that ended otherwise ends the exchange as the stop; anything else
// waits for more.
func (e *exchange) afterStop(ev a2a.Event) (bool, error) {
	st := eventState(ev)
	_, reply := ev.(*a2a.Message)
	switch {
	case st == a2a.TaskStateCompleted || reply:
		if e.hop != nil {
			if derr := e.hop.Declare(delegate.Outcome{State: store.Completed}); derr != nil {
				e.u.log.Warn("the upstream completed the stopped hop's task, but that could not be declared", "route", e.u.route, "task", e.rc.TaskID, "err", derr)
			}
		}
		return true, context.Cause(e.ctx)
	case st.Terminal():
		return true, context.Cause(e.ctx) // canceled or failed upstream, as the stop asked
	}
	return false, nil
}

// lost is the error for an exchange that ended before the upstream said
// what became of the work.
// dialFailed: err is a failed dial (connection refused, no route, a
// name that does not resolve), so the request was never sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (e *exchange) lost(err error) error {
	return fmt.Errorf("gateway: route %s: %w (%w)", e.u.route, err, a2ahandoff.ErrOutcomeUnknown)
}

// mappedFor is how long a paused task's mapping is kept without a
// follow-up (the hop record outlives it: a delegator that comes back
// later is answered from the record, and its follow-up starts anew).
const mappedFor = 24 * time.Hour

// began and ended note the Execute in progress for a gateway task, and
// the hop it carries, for stops of paused hops.
func (u *upstreamA2A) began(own a2a.TaskID, h *a2ahandoff.Hop) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.running[own] = true
	u.touched[own] = time.Now()
	if h != nil {
		k := [2]string{h.Iss, h.ID}
		u.hops[k], u.hopOf[own] = own, k
	}
	if len(u.touched) >= u.pruneAt {
		for t, at := range u.touched {
			if !u.running[t] && time.Since(at) > mappedFor {
				u.forgetLocked(t)
			}
		}
		u.pruneAt = max(1024, 2*len(u.touched))
	}
}

func (u *upstreamA2A) ended(own a2a.TaskID) {
	u.mu.Lock()
	delete(u.running, own)
	u.mu.Unlock()
}

// stopPaused is a stop (a verified cancel, an equivocation) of a hop
// whose work is not running here: its task waiting for input here, or
// its task another replica's. The upstream's task is canceled too, once
// (one running here is canceled by its Execute). It serves as the
// Executor's OnCancel and in the delegate's Stop.
func (u *upstreamA2A) stopPaused(iss, hop string) {
	u.mu.Lock()
	own, ok := u.hops[[2]string{iss, hop}]
	running := u.running[own]
	up := u.tasks[own]
	if ok && !running {
		u.forgetLocked(own)
	}
	u.mu.Unlock()
	if ok && !running {
		if u.shared != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			u.shared.unmap(ctx, own) // else the sweeper's; a second stop then cancels once more, in vain
			cancel()
		}
		if up != "" {
			u.cancelTask(own, up)
		}
	}
	if ok || u.shared == nil {
		return
	}
	// Not this replica's: the task may be another's, running or paused,
	// which does not know of the stop. Its upstream task is canceled
	// from here, once (taking the mapping is the claim).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	own, up, err := u.shared.takeHop(ctx, iss, hop)
	if err != nil {
		u.log.Warn("reading the stopped hop's upstream task from the store; not canceled", "route", u.route, "iss", iss, "hop", hop, "err", oneLine(err))
		return
	}
	if up != "" {
		u.cancelTask(own, up)
	}
}

func (u *upstreamA2A) onCancel(_ context.Context, iss, hop string, _ handoff.Digest) {
	u.stopPaused(iss, hop)
}

// eventState is the task state an upstream event reports ("" for none).
func eventState(ev a2a.Event) a2a.TaskState {
	switch e := ev.(type) {
	case *a2a.Task:
		return e.Status.State
	case *a2a.TaskStatusUpdateEvent:
		return e.Status.State
	}
	return ""
}

// write translates one upstream event and writes it as the gateway's,
// and returns the task state it reports ("" when none). begun says the
// gateway's task has a state already: the upstream's "submitted" (its
// first word on a task it has just been given) is then written as
// "working", so that no client, and no replica reading the shared task,
// sees the task go back from working to submitted.
func (u *upstreamA2A) write(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue, ev a2a.Event, begun bool) (a2a.TaskState, error) {
	outs, err := u.translate(rc, ev)
	if err != nil {
		return "", err
	}
	var state a2a.TaskState
	for _, out := range outs {
		st, ok := out.(*a2a.TaskStatusUpdateEvent)
		if ok && begun && st.Status.State == a2a.TaskStateSubmitted {
			st.Status.State = a2a.TaskStateWorking
		}
		if err := q.Write(ctx, out); err != nil {
			return "", err
		}
		if ok {
			state = st.Status.State // Execute forgets an ended task's mapping as it returns
		}
	}
	return state, nil
}

// followEvery is how often a task the upstream left running, with no
// stream to say when it ends, is asked for with tasks/get; followTries
// is how many failed asks in a row end the following.
const (
	followEvery = 500 * time.Millisecond
	followTries = 20
)

// follow asks the upstream for its task until it ends or waits for the
// caller (input-required, auth-required), when the exchange ended with
// the task still running (an upstream that does not stream, one whose
// stream broke, or one whose blocking send gave up waiting). The asks
// use the exchange's context, so that after a stop they go on until the
// upstream's final word (the watcher in Execute sends the cancel and
// bounds the wait). An upstream that stops answering leaves the outcome
// unknown.
func (e *exchange) follow() error {
	if e.last == "" {
		e.last = a2a.TaskStateWorking
	}
	if e.upLast == "" {
		e.upLast = e.last
	}
	failed := 0
	for {
		up := e.u.upstreamTask(e.rc.TaskID)
		if up == "" {
			return e.lost(fmt.Errorf("the upstream's task is still %s and has no id to follow", e.last))
		}
		select {
		case <-e.sctx.Done():
			return e.lost(fmt.Errorf("stopped following the upstream's task %s before it ended", up))
		case <-time.After(followEvery):
		}
		t, err := e.u.client.GetTask(e.sctx, &a2a.TaskQueryParams{ID: up})
		if err != nil {
			if failed++; failed >= followTries || e.sctxDone() {
				return e.lost(fmt.Errorf("following the upstream's task %s: %w", up, err))
			}
			continue
		}
		failed = 0
		if !a2ahandoff.Stopped(e.ctx) && t.Status.State == e.upLast {
			continue // nothing new to say
		}
		if done, err := e.take(t); done || err != nil {
			return err
		}
	}
}

// eventTask is the upstream's task id an event names ("" for a message).
func eventTask(ev a2a.Event) a2a.TaskID {
	switch e := ev.(type) {
	case *a2a.Task:
		return e.ID
	case *a2a.TaskStatusUpdateEvent:
		return e.TaskID
	case *a2a.TaskArtifactUpdateEvent:
		return e.TaskID
	}
	return ""
}

// Cancel is a cancel of a task that carries no hop (one a route with
// without_handoff: pass let in): it goes to the upstream as it is.
func (u *upstreamA2A) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	up := u.upstreamTask(rc.TaskID)
	if up == "" {
		return fmt.Errorf("gateway: route %s: task %s has no upstream task: %w", u.route, rc.TaskID, a2a.ErrTaskNotCancelable)
	}
	t, err := u.client.CancelTask(ctx, &a2a.TaskIDParams{ID: up})
	if err != nil {
		return fmt.Errorf("gateway: route %s: the upstream refused the cancel: %w", u.route, err)
	}
	ev := a2a.NewStatusUpdateEvent(rc, t.Status.State, u.ownMessage(rc, t.Status.Message))
	ev.Final = t.Status.State.Terminal()
	return q.Write(ctx, ev)
}

// upstreamTask is the upstream task behind the gateway's task id: this
// replica's, else the one another replica noted in the store.
func (u *upstreamA2A) upstreamTask(id a2a.TaskID) a2a.TaskID {
	u.mu.Lock()
	up := u.tasks[id]
	u.mu.Unlock()
	if up != "" || u.shared == nil {
		return up
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	up, err := u.shared.upstreamOf(ctx, id)
	if err != nil {
		u.log.Warn("reading the upstream task of a gateway task from the store", "route", u.route, "task", id, "err", oneLine(err))
	}
	return up
}

// noteTask maps the gateway's task own to the upstream's task up, here
// and, the first time, in the store (with the hop, for a cancel that
// reaches another replica).
func (u *upstreamA2A) noteTask(own, up a2a.TaskID, h *a2ahandoff.Hop) {
	if up == "" {
		return
	}
	u.mu.Lock()
	known := u.tasks[own] == up
	u.tasks[own] = up
	u.mu.Unlock()
	if !known && h != nil && u.linkTask != nil {
		u.linkTask(h, string(up))
	}
	if known || u.shared == nil {
		return
	}
	var iss, hop string
	if h != nil {
		iss, hop = h.Iss, h.ID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := u.shared.mapUpstream(ctx, own, up, iss, hop); err != nil {
		// This replica still maps it; another could not cancel it.
		u.log.Warn("noting the upstream task in the store", "route", u.route, "task", own, "upstream_task", up, "err", oneLine(err))
		return
	}
	// A stop verified on another replica before the note found nothing
	// to cancel; it marked the record first, so it is seen here. Taking
	// the note is the claim (that replica may have taken it since).
	if hop != "" && u.stopped != nil && u.stopped(ctx, iss, hop) {
		if o, t, err := u.shared.takeHop(ctx, iss, hop); err == nil && t != "" {
			go u.cancelTask(o, t)
		}
	}
}

func (u *upstreamA2A) forgetTask(own a2a.TaskID) {
	u.mu.Lock()
	u.forgetLocked(own)
	u.mu.Unlock()
	if u.shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := u.shared.unmap(ctx, own); err != nil {
			u.log.Warn("forgetting the upstream task in the store (the sweeper will)", "route", u.route, "task", own, "err", oneLine(err))
		}
	}
}

func (u *upstreamA2A) forgetLocked(own a2a.TaskID) {
	delete(u.tasks, own)
	delete(u.touched, own)
	if k, ok := u.hopOf[own]; ok {
		delete(u.hopOf, own)
		if u.hops[k] == own {
			delete(u.hops, k)
		}
	}
}

// cancelUpstream asks the upstream to stop the task behind own: the hop
// was canceled by its delegator (verified by a2ahandoff) or equivocated.
// Detached from the request, which has ended.
func (u *upstreamA2A) cancelUpstream(own a2a.TaskID) {
	if up := u.upstreamTask(own); up != "" {
		u.cancelTask(own, up)
	}
}

func (u *upstreamA2A) cancelTask(own, up a2a.TaskID) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	if _, err := u.client.CancelTask(ctx, &a2a.TaskIDParams{ID: up}); err != nil {
		u.log.Warn("the upstream did not cancel the stopped hop's task", "route", u.route, "task", own, "upstream_task", up, "err", err)
	}
}

// translate makes an upstream event the gateway task's events. Every
// handoff member the upstream put in metadata (a task's, an event's, an
// artifact's, a message's) is dropped: only the gateway's own signed
// statuses travel there, and an upstream must not be able to forge one.
func (u *upstreamA2A) translate(rc *a2asrv.RequestContext, ev a2a.Event) ([]a2a.Event, error) {
	switch e := ev.(type) {
	case *a2a.Message:
		// A reply with no task: a2ahandoff makes it the COMPLETED status.
		return []a2a.Event{u.ownMessage(rc, e)}, nil
	case *a2a.Task:
		// The upstream's task as the gateway's: its artifacts, then its
		// status, which may end the task (its history is the messages the
		// gateway's task already has).
		var outs []a2a.Event
		for _, art := range e.Artifacts {
			outs = append(outs, &a2a.TaskArtifactUpdateEvent{TaskID: rc.TaskID, ContextID: rc.ContextID, Artifact: ownArtifact(art)})
		}
		st := a2a.NewStatusUpdateEvent(rc, e.Status.State, u.ownMessage(rc, e.Status.Message))
		st.Final = endsExchange(e.Status.State)
		st.Metadata = withoutHandoff(e.Metadata)
		return append(outs, st), nil
	case *a2a.TaskStatusUpdateEvent:
		out := *e
		out.TaskID, out.ContextID = rc.TaskID, rc.ContextID
		out.Status.Message = u.ownMessage(rc, e.Status.Message)
		out.Metadata = withoutHandoff(e.Metadata)
		out.Final = out.Final || endsExchange(out.Status.State)
		return []a2a.Event{&out}, nil
	case *a2a.TaskArtifactUpdateEvent:
		out := *e
		out.TaskID, out.ContextID = rc.TaskID, rc.ContextID
		out.Artifact = ownArtifact(e.Artifact)
		out.Metadata = withoutHandoff(e.Metadata)
		return []a2a.Event{&out}, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("gateway: route %s: the upstream sent an event of type %T", u.route, ev)
}

// endsExchange: a state after which a2a-go expects no more events for
// this request (the task ended, or waits for its caller).
func endsExchange(s a2a.TaskState) bool {
	return s.Terminal() || s == a2a.TaskStateInputRequired || s == a2a.TaskStateAuthRequired
}

// withoutHandoff is metadata without the handoff member (nil stays nil).
func withoutHandoff(md map[string]any) map[string]any {
	if _, ok := md[a2ahandoff.Key]; !ok {
		return md
	}
	c := maps.Clone(md)
	delete(c, a2ahandoff.Key)
	return c
}

func ownArtifact(a *a2a.Artifact) *a2a.Artifact {
	if a == nil {
		return nil
	}
	c := *a
	c.Metadata = withoutHandoff(a.Metadata)
	return &c
}

// ownMessage is an upstream message as one of the gateway's task.
func (u *upstreamA2A) ownMessage(rc *a2asrv.RequestContext, m *a2a.Message) *a2a.Message {
	if m == nil {
		return nil
	}
	c := *m
	c.TaskID, c.ContextID = rc.TaskID, rc.ContextID
	c.Metadata = withoutHandoff(m.Metadata)
	if c.Role == "" {
		c.Role = a2a.MessageRoleAgent
	}
	return &c
}
