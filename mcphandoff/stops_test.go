package mcphandoff_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
)

// afterClaim is the real hop store with a hook run once, right after the
// first claim that stored a hop has committed and before the delegate
// answers the middleware: the gap between the delegate's taking a hop and
// the middleware's beginning its work.
type afterClaim struct {
	store.Store
	once sync.Once
	hook func()
}

func (a *afterClaim) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	got, stored, err := a.Store.Claim(ctx, r)
	if err == nil && stored && r.State == store.Accepted {
		a.once.Do(a.hook)
	}
	return got, stored, err
}

// A verified cancel that lands between the delegate's claim and the
// middleware's beginning the work (draft "Lifecycle": a verified cancel
// stops the work) keeps the tool from running, whichever way it comes:
// through a replica sharing the store (no Stop of this Server hears it),
// or through this Server's own notifications/cancelled when the Server
// was built with NewServer and the delegate's Config.Stop does not reach
// it. The middleware reads the record once the work is registered; the
// hop is recorded "failed" with no effect, and the call is answered as
// work that never began.
func TestStopBetweenClaimAndWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		unwired bool
		replica bool
	}{
		{"a replica cancels, New", false, true},
		{"a replica cancels, NewServer", true, true},
		{"this Server's notifications/cancelled, NewServer", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ac := &afterClaim{}
			e := newEnvWith(t, handoff.FormJWS, handoff.JSON, envOptions{
				wrap:    func(s store.Store) store.Store { ac.Store = s; return ac },
				unwired: tc.unwired,
			})
			ctx := context.Background()
			h, hop := e.offer(e.dl, tester, "canceled in the gap")
			ac.hook = func() {
				st, _, err := e.dl.Cancel(ctx, hop.Hop)
				if err != nil {
					t.Error(err)
					return
				}
				if tc.replica {
					if _, err := e.replica(t).Cancel(ctx, st, planner, hop.Hop); err != nil {
						t.Errorf("the replica's cancel: %v", err)
					}
					return
				}
				note := &mcp.ServerRequest[*mcp.CancelledParams]{Params: &mcp.CancelledParams{
					Meta: mcp.Meta{mcphandoff.Key: mcphandoff.StatusValue(st)}}}
				pass := func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, nil }
				if _, err := e.srv.Middleware()(pass)(ctx, "notifications/cancelled", note); err != nil {
					t.Error(err)
				}
			}
			r, err := e.hc.Call(ctx, e.cs, call("ok"), h)
			if err != nil {
				t.Fatal(err)
			}
			e.srv.Wait()
			if n := e.runs.Load(); n != 0 {
				t.Fatalf("the tool ran %d times for a hop canceled before its work began", n)
			}
			// This Server's own cancel, in the gap, does not know the hop
			// yet (the middleware indexes the offer once the delegate has
			// answered): the delegate finds it by the offer's digest
			// (decision 66) and marks it, and the middleware's read of the
			// record before the work keeps the tool from running.
			text := "before its work began"
			if !r.Result.IsError || !strings.Contains(textOf(r.Result), text) {
				t.Fatalf("reply %q (isError %v); want the tool error saying %q", textOf(r.Result), r.Result.IsError, text)
			}
			if r.State != handoff.StateFailed || r.Hop == nil || r.Hop.View != store.ViewFailed {
				t.Fatalf("reply state %s, hop view %v; want failed", r.State, r.Hop.View)
			}
			e.wantRecord(t, hop.Hop, true, store.Failed, "")
			e.mu.Lock()
			defer e.mu.Unlock()
			if len(e.reports) != 0 {
				t.Fatalf("reports: %v", e.reports)
			}
		})
	}
}

// replica is a second delegate on the tester's SQLite store, as another
// process sharing it would be.
func (e *env) replica(t *testing.T) *delegate.Delegate {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d, err := delegate.New(ctx, delegate.Config{Options: handoff.Options{Me: tester, Keys: e.keys}, Store: st,
		Signer: e.signers[tester], StatusForm: e.form})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// D9 as amended: an offer for another agent that reaches this one is
// answered with the misdelivered "rejected" wrong-audience, signed by the
// agent it reached. The client verifies it, hands it back, and leaves the
// hop's state alone: the offer's own delegate may still answer.
func TestMisdeliveredRejectionSetsNoState(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	h, hop := e.offer(e.dl, other, "meant for another agent")
	r, err := e.hc.Call(ctx, e.cs, call("ok"), h)
	if err != nil {
		t.Fatalf("the misdelivered rejection: %v; want it verified", err)
	}
	st := statusOf(t, r)
	if st.State != handoff.StateRejected || st.Reason != handoff.ReasonWrongAudience || st.Iss != tester || st.Aud != planner {
		t.Fatalf("status %+v; want rejected wrong-audience from %s to %s", st, tester, planner)
	}
	if r.Hop == nil || r.Hop.View != hop.View || r.Hop.Resolved {
		t.Fatalf("hop after the misdelivered rejection: %+v; want it as sent (%s, unresolved)", r.Hop, hop.View)
	}
	if n := e.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times for an offer to another agent", n)
	}
}
