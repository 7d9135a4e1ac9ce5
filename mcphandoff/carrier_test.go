package mcphandoff_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// The delegate's Config.Stop reaches running work (New chains it): a
// cancel that reaches the delegate by another way than this middleware's
// notifications/cancelled (here the application calls Delegate.Cancel,
// as another carrier sharing the delegate would) cancels the running
// tool call's context (draft "Lifecycle": a verified cancel stops the
// work).
func TestStopHookStopsRunningWork(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	h, hop := e.offer(e.dl, tester, "stopped by the delegate")
	first, release := e.startBlocking(t, e.hc, e.cs, h)
	defer close(release)
	st, _, err := e.dl.Cancel(ctx, hop.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Cancel(ctx, st, planner, hop.Hop); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, e.stopped, "the work to stop"); got != hop.Hop {
		t.Fatalf("stopped %s, want %s", got, hop.Hop)
	}
	r := waitReply(t, first, "the stopped call")
	e.srv.Wait()
	// The tool declared failed with no effect when stopped.
	if r.State != handoff.StateFailed {
		t.Fatalf("reply state %s, want failed (the tool's declaration)", r.State)
	}
	e.wantRecord(t, hop.Hop, true, store.Failed, "")
}

// bothAtClaim is the real hop store with the two deliveries of one offer
// made to reach their claims together: each waits for the other.
type bothAtClaim struct {
	store.Store
	t       *testing.T
	arrived sync.WaitGroup
	claims  atomic.Int32
}

func (b *bothAtClaim) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	// Only the first two claims meet: a delivery the held cancel refused
	// claims again (delegate.take), and that claim waits for no one.
	if store.CheckedClaim(r) && b.claims.Add(1) <= 2 {
		b.arrived.Done()
		done := make(chan struct{})
		go func() { b.arrived.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.t.Error("timed out waiting for the other delivery to reach its claim")
		}
	}
	return b.Store.Claim(ctx, r)
}

// A cancel that overtook its offer is held; the offer is then delivered
// twice at once. The store refuses both claims for the held cancel
// (store.Store.Claim), so the tool never runs: the hop is recorded
// "rejected" (policy) and canceled, and both calls are answered with a
// tool error carrying that status (the second as a retransmission, to a
// sender authenticated as the offer's iss).
func TestHeldCancelStopsBothDeliveries(t *testing.T) {
	b := &bothAtClaim{t: t}
	b.arrived.Add(2)
	e := newEnvWith(t, handoff.FormJWS, handoff.JSON, envOptions{
		wrap: func(s store.Store) store.Store { b.Store = s; return b },
	})
	ctx := context.Background()
	h, hop := e.offer(e.dl, tester, "delivered twice")
	v, err := mcphandoff.HandoffValue(h, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := e.dl.Cancel(ctx, hop.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.Cancel(ctx, st, planner, hop.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("early cancel: %v; want it held", err)
	}
	type res struct {
		r   *mcp.CallToolResult
		err error
	}
	deliver := func() chan res {
		c := make(chan res, 1)
		go func() {
			r, err := e.cs.CallTool(ctx, callCarrying("ok", v))
			c <- res{r, err}
		}()
		return c
	}
	first, second := deliver(), deliver()
	replies := []res{wait(t, first, "the first delivery"), wait(t, second, "the second delivery")}
	e.srv.Wait()
	if n := e.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times for a hop canceled before its offer arrived", n)
	}
	e.wantRecord(t, hop.Hop, true, store.Rejected, "")
	for i, x := range replies {
		if x.err != nil || !x.r.IsError {
			t.Fatalf("delivery %d: %+v, %v; want a tool error", i, x.r, x.err)
		}
		sv, ok := x.r.Meta[mcphandoff.Key]
		if !ok {
			t.Fatalf("delivery %d: the reply carries no status", i)
		}
		sel, _, err := mcphandoff.StatusFrom(map[string]any{mcphandoff.Key: sv})
		if err != nil {
			t.Fatal(err)
		}
		if _, s, _ := handoff.UnsafeDecode(sel); s == nil || s.State != handoff.StateRejected || s.Reason != handoff.ReasonPolicy {
			t.Fatalf("delivery %d: status %+v; want rejected policy", i, s)
		}
	}
}

// rawCall is a tools/call request as the SDK hands it to the middleware,
// carrying v under Key, from a sender authenticated as planner.
func rawCall(v any, responses mcp.InputResponseMap) *mcp.CallToolRequest {
	return &mcp.CallToolRequest{
		Params: &mcp.CallToolParamsRaw{Name: "run-tests", Meta: mcp.Meta{mcphandoff.Key: v}, InputResponses: responses},
		Extra:  &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: planner, Expiration: time.Now().Add(time.Hour)}},
	}
}

// A call whose request is canceled (the caller went away, or MCP's
// notifications/cancelled) while the work runs is answered as the bare
// SDK answers a tool handler that returns the context's error: a
// CallToolResult with isError and the error's text, here with the
// "accepted" the work was taken under in _meta; never a JSON-RPC error
// (the SDK gave those code 0). The work goes on to its outcome (decision
// 34).
func TestCanceledCallIsToolError(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	h, hop, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Work: "request canceled"})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := mcphandoff.HandoffValue(h, handoff.JSON)
	entered, release := make(chan struct{}), make(chan struct{})
	next := func(ctx context.Context, _ string, _ mcp.Request) (mcp.Result, error) {
		close(entered)
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done anyway"}}}, nil
	}
	mw := e.srv.Middleware()(next)
	cctx, cancel := context.WithCancel(ctx)
	type out struct {
		r   mcp.Result
		err error
	}
	got := make(chan out, 1)
	go func() {
		r, err := mw(cctx, "tools/call", rawCall(v, nil))
		got <- out{r, err}
	}()
	<-entered
	cancel()
	o := wait(t, got, "the canceled call's answer")
	if o.err != nil {
		t.Fatalf("a canceled call answered with an error (%v); want a tool error result", o.err)
	}
	r, ok := o.r.(*mcp.CallToolResult)
	if !ok || !r.IsError || !strings.HasPrefix(textOf(r), context.Canceled.Error()) {
		t.Fatalf("answer %T %+v; want a CallToolResult with isError saying %q", o.r, o.r, context.Canceled)
	}
	sv, ok := r.Meta[mcphandoff.Key]
	if !ok {
		t.Fatal("no accepted status in the canceled call's answer")
	}
	if el, _, err := mcphandoff.StatusFrom(map[string]any{mcphandoff.Key: sv}); err != nil {
		t.Fatal(err)
	} else if _, s, _ := handoff.UnsafeDecode(el); s == nil || s.State != handoff.StateAccepted {
		t.Fatalf("status %+v; want accepted", s)
	}
	close(release)
	e.srv.Wait()
	e.wantRecord(t, hop.Hop, false, store.Completed, " (the work goes on after its request ends)")
}

// Multi-round-trip calls (SEP-2322) kept between rounds are bounded
// (decision 55): the oldest beyond MaxAwaiting is dropped, and one not
// retried within AwaitTTL is abandoned. An abandoned call's retry runs
// nothing and is answered from the record; the hop stays "accepted" and
// is flagged unknown outcome (draft "Knowing the Outcome": what the
// first round did is not known). A call within both bounds goes on.
func TestAbandonedRoundsBounded(t *testing.T) {
	const ttl = 300 * time.Millisecond
	e := newEnvWith(t, handoff.FormJWS, handoff.JSON, envOptions{server: func(c *mcphandoff.ServerConfig) {
		c.AwaitTTL, c.MaxAwaiting = ttl, 2
	}})
	ctx := context.Background()
	var runs atomic.Int32
	next := func(_ context.Context, _ string, req mcp.Request) (mcp.Result, error) {
		runs.Add(1)
		if req.(*mcp.CallToolRequest).Params.InputResponses == nil {
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"suite": &mcp.ElicitParams{Mode: "form", Message: "which suite?",
				RequestedSchema: map[string]any{"type": "object"}}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "passed"}}}, nil
	}
	mw := e.srv.Middleware()(next)
	answer := mcp.InputResponseMap{"suite": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"suite": "unit"}}}
	type hop struct {
		id string
		v  any
	}
	start := func(work string) hop {
		t.Helper()
		h, is, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Work: work})
		if err != nil {
			t.Fatal(err)
		}
		v, _ := mcphandoff.HandoffValue(h, handoff.JSON)
		r, err := mw(ctx, "tools/call", rawCall(v, nil))
		if err != nil || r.(*mcp.CallToolResult).InputRequests == nil {
			t.Fatalf("first round of %s: %+v, %v; want input requests", work, r, err)
		}
		return hop{is.Hop, v}
	}
	retry := func(h hop) *mcp.CallToolResult {
		t.Helper()
		r, err := mw(ctx, "tools/call", rawCall(h.v, answer))
		if err != nil {
			t.Fatal(err)
		}
		e.srv.Wait()
		return r.(*mcp.CallToolResult)
	}
	abandoned := func(h hop, r *mcp.CallToolResult, why string) {
		t.Helper()
		if r.InputRequests != nil || textOf(r) == "passed" {
			t.Fatalf("%s: the retry ran the tool (%q)", why, textOf(r))
		}
		e.wantRecord(t, h.id, false, store.Accepted, " ("+why+")")
		flags, err := e.d.Flags(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range flags {
			found = found || f.Kind == store.FlagUnknownOutcome && f.Hop == h.id
		}
		if !found {
			t.Fatalf("%s: hop not flagged unknown outcome: %+v", why, flags)
		}
	}

	a, b, c := start("a"), start("b"), start("c") // c's first round drops a (MaxAwaiting 2)
	n := runs.Load()
	abandoned(a, retry(a), "dropped beyond MaxAwaiting")
	if runs.Load() != n {
		t.Fatal("the dropped call's retry ran the tool")
	}
	if r := retry(b); textOf(r) != "passed" {
		t.Fatalf("a call within the bounds: retry answered %q; want the tool's second round", textOf(r))
	}
	e.wantRecord(t, b.id, false, store.Completed, "")

	time.Sleep(ttl + 100*time.Millisecond) // c is now past AwaitTTL
	n = runs.Load()
	abandoned(c, retry(c), "not retried within AwaitTTL")
	if runs.Load() != n {
		t.Fatal("the expired call's retry ran the tool")
	}
}

// An unauthenticated retransmission learns nothing about the hop's
// outcome (draft "Replay and Freshness", "Asking Again"; SPEC section 6):
// whatever became of the hop (running, completed, failed, rejected), the
// answer to a sender not authenticated as offer.iss is the same tool
// result, no status in _meta, isError false, the same text.
func TestUnauthenticatedRetransmissionRevealsNothing(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	_, stranger := e.connect(e.dl, handoff.JSON, "stranger-token")
	answer := func(h *handoff.Handoff, hop string) (bool, string) {
		t.Helper()
		v, _ := mcphandoff.HandoffValue(h, handoff.JSON)
		res, err := stranger.CallTool(ctx, callCarrying("ok", v))
		if err != nil {
			t.Fatal(err)
		}
		if _, has := res.Meta[mcphandoff.Key]; has {
			t.Fatalf("hop %s: the unauthenticated retransmission got a status: %q %v", hop, textOf(res), res.Meta[mcphandoff.Key])
		}
		return res.IsError, strings.ReplaceAll(textOf(res), hop, "HOP")
	}
	type seen struct {
		isError bool
		text    string
	}
	var answers = map[string]seen{}

	// Each run's start is taken off e.entered, so that startBlocking below
	// waits for the running hop's own start (its claim recorded), not for
	// an earlier run's: else the stranger's delivery could be the running
	// hop's first, rejected at step 5 with a status of its own.
	hc, _ := e.offer(e.dl, tester, "completed")
	if _, err := e.hc.Call(ctx, e.cs, call("ok"), hc); err != nil {
		t.Fatal(err)
	}
	wait(t, e.entered, "the completed hop's run")
	hf, _ := e.offer(e.dl, tester, "failed")
	if _, err := e.hc.Call(ctx, e.cs, call("fail"), hf); err != nil {
		t.Fatal(err)
	}
	wait(t, e.entered, "the failed hop's run")
	// A rejection recorded at step 5 (the dialog is not the session's).
	hr, _, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Dialog: "another dialog", Work: "rejected"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := e.hc.Call(ctx, e.cs, call("ok"), hr); err != nil || r.State != handoff.StateRejected {
		t.Fatalf("rejected offer: %+v, %v", r, err)
	}
	hb, _ := e.offer(e.dl, tester, "running")
	first, release := e.startBlocking(t, e.hc, e.cs, hb)
	for name, h := range map[string]*handoff.Handoff{"completed": hc, "failed": hf, "rejected": hr, "running": hb} {
		o, _, _ := handoff.UnsafeDecode(h.Offer)
		isErr, text := answer(h, o.Hop)
		answers[name] = seen{isErr, text}
	}
	close(release)
	waitReply(t, first, "the running call")
	want := answers["running"]
	for name, a := range answers {
		if a != want {
			t.Errorf("%s hop: answered %+v; want the same as for a running hop, %+v", name, a, want)
		}
	}
	if want.isError {
		t.Error("the answer says isError: it tells a failure from a success")
	}
}

// New and NewServer refuse configurations they cannot honour, each with
// an error naming the field.
func TestServerBoundsConfig(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	for _, tc := range []struct {
		name, want string
		build      func() error
	}{
		{"negative AwaitTTL", "AwaitTTL", func() error {
			_, err := mcphandoff.NewServer(mcphandoff.ServerConfig{Delegate: e.d, AwaitTTL: -time.Second})
			return err
		}},
		{"negative MaxAwaiting", "MaxAwaiting", func() error {
			_, err := mcphandoff.NewServer(mcphandoff.ServerConfig{Delegate: e.d, MaxAwaiting: -1})
			return err
		}},
		{"New given a Delegate too", "ServerConfig.Delegate must be nil", func() error {
			_, err := mcphandoff.New(ctx, delegate.Config{}, mcphandoff.ServerConfig{Delegate: e.d})
			return err
		}},
		{"SenderMustBeIss with no Sender", "needs ServerConfig.Sender", func() error {
			_, err := mcphandoff.New(ctx, delegate.Config{SenderMustBeIss: true}, mcphandoff.ServerConfig{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.build(); !errors.Is(err, mcphandoff.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	// The delegate's own refusal of its config comes back as it is.
	if _, err := mcphandoff.New(ctx, delegate.Config{}, mcphandoff.ServerConfig{}); err == nil {
		t.Fatal("New with an invalid delegate config succeeded")
	}
}
