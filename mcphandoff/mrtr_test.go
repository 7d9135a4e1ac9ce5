package mcphandoff_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// connectAsking opens an MCP session for hc whose elicitation handler is
// answer (the client's side of a multi-round-trip tool, SEP-2322), over
// HTTP through Client.HTTPClient, with a recorder of the POST bodies,
// asking for protocol version ("": the SDK's latest).
func (e *env) connectAsking(t *testing.T, hc *mcphandoff.Client, version string, answer func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) (*mcp.ClientSession, *recorder) {
	t.Helper()
	cl := mcp.NewClient(&mcp.Implementation{Name: "planner", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: answer})
	if err := hc.Attach(cl); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{base: bearer{"planner-token", http.DefaultTransport}}
	cs, err := cl.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.url,
		HTTPClient: hc.HTTPClient(&http.Client{Transport: rec})},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, rec
}

// unitSuite is the client's answer to the "ask" tool's question.
func unitSuite() *mcp.ElicitResult {
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"suite": "unit"}}
}

// wantTwoRounds checks a multi-round-trip call that ended well: the client
// was asked once, the tool ran twice, both rounds under hop (the retry is
// a round, not a retransmission), and the last round's result is the
// outcome, "completed" and resolved (draft "Knowing the Outcome").
func (e *env) wantTwoRounds(t *testing.T, asked int, hop string, r *mcphandoff.Reply) {
	t.Helper()
	if asked != 1 || e.runs.Load() != 2 {
		t.Fatalf("asked %d times, tool ran %d times; want 1 and 2", asked, e.runs.Load())
	}
	if wait(t, e.entered, "round 1") != hop || wait(t, e.entered, "round 2") != hop {
		t.Fatal("a round ran under another hop")
	}
	if r.State != handoff.StateCompleted || !r.Hop.Resolved || textOf(r.Result) != "suite unit passed" {
		t.Fatalf("state %s, hop %+v, result %q", r.State, r.Hop, textOf(r.Result))
	}
}

// TestMultiRoundTrip: a tool that asks the client for input (SEP-2322,
// InputRequests in its result) is not done after its first round (draft
// "Knowing the Outcome": a result that asks for input is no outcome). The
// hop stays "accepted"; the SDK client's automatic retry, which carries
// the same Handoff, runs the tool again under the same hop instead of
// being answered as a retransmission; the last round's result is the
// outcome. Over the stateful streamable HTTP handler both sessions run at
// 2025-11-25 (a client asking for the latest version falls back to it:
// the stateful transport does not serve 2026-07-28), so the SDK's server
// runs the rounds: its multi-round-trip middleware, INSIDE this one (see
// TestMultiRoundTripClientRetries), asks the client and calls the tool
// again within the one tools/call this middleware sees. That path never
// reaches the InputRequests check in finish; TestMultiRoundTripClientRetries
// drives the path that does.
func TestMultiRoundTrip(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		name := version
		if name == "" {
			name = "latest asked, 2025-11-25 negotiated"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, handoff.FormJWS, handoff.JSON)
			ctx := context.Background()
			hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: e.dl})
			if err != nil {
				t.Fatal(err)
			}
			asked := 0
			cs, _ := e.connectAsking(t, hc, version, func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked++
				return unitSuite(), nil
			})
			if v := cs.InitializeResult().ProtocolVersion; v != "2025-11-25" {
				t.Fatalf("negotiated %q; this test is about the server-side rounds below 2026-07-28", v)
			}
			h, hop, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Dialog: cs.ID(), Work: "ask"})
			if err != nil {
				t.Fatal(err)
			}
			r, err := hc.Call(ctx, cs, call("ask"), h)
			if err != nil {
				t.Fatal(err)
			}
			e.wantTwoRounds(t, asked, hop.Hop, r)
			// Done: a retransmission is answered from the record, with the
			// identical octets, and runs nothing.
			again, err := hc.Ask(ctx, cs, hop.Hop)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.Status.Octets, r.Status.Octets) || e.runs.Load() != 2 || asked != 1 {
				t.Fatalf("retransmission after the last round: runs %d, asked %d", e.runs.Load(), asked)
			}
		})
	}
}

// TestMultiRoundTripCanceledBetweenRounds: a verified cancel that lands
// while the tool awaits input ends the rounds: the retry with the answer
// runs nothing, and the hop stays "accepted", flagged (the earlier round's
// effect is not known; draft "Knowing the Outcome": never guess).
func TestMultiRoundTripCanceledBetweenRounds(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: e.dl})
	if err != nil {
		t.Fatal(err)
	}
	var cs *mcp.ClientSession
	var hopID string
	cs, _ = e.connectAsking(t, hc, "", func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		// Between the rounds: the delegator cancels, and answers only
		// once the cancel has landed: recorded, the work's context
		// canceled, the hop flagged (the flag is the middleware's last
		// step). Waiting for the record's mark alone raced the middleware's
		// stop under load: the answer could reach the SDK's round loop
		// before the work's context was canceled.
		if _, err := hc.Cancel(ctx, cs, hopID); err != nil {
			t.Error(err)
		}
		for i := 0; i < 500; i++ {
			if flags, err := e.d.Flags(ctx, false); err == nil && len(flags) > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return unitSuite(), nil
	})
	h, hop, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Dialog: cs.ID(), Work: "ask-cancel"})
	if err != nil {
		t.Fatal(err)
	}
	hopID = hop.Hop
	_, _ = hc.Call(ctx, cs, call("ask"), h) // canceled by the cancel: context.Canceled
	<-e.entered
	e.srv.Wait()
	if n := e.runs.Load(); n != 1 {
		t.Fatalf("tool ran %d times; the round after the cancel must not run", n)
	}
	e.wantRecord(t, hop.Hop, true, store.Accepted, "")
	e.wantUnknownOutcome(t, hop.Hop)
}

// TestMultiRoundTripClientRetries drives the rounds of a multi-round-trip
// tool call (SEP-2322) through this package's middleware, which is the
// path where the hop must stay "accepted" between rounds (server.go,
// finish: a result with InputRequests is no outcome) and the retry must
// run the tool again under the same hop (nextRound) rather than be
// answered as a retransmission.
//
// Why this needs a stateless handler. In go-sdk v1.8.0 the server's own
// multi-round-trip middleware is installed by mcp.NewServer, before Attach
// adds this package's, so it sits INSIDE ours (AddReceivingMiddleware
// wraps the handler built so far). For a client below protocol 2026-07-28
// it asks the client and calls the tool again within the one tools/call
// this middleware sees: both rounds are one invoke, and the InputRequests
// check is never reached (TestMultiRoundTrip passes without it). Only at
// protocol >= 2026-07-28 (clientSupportsMultiRoundTrip in mcp/mrtr.go)
// does the server return the InputRequests to the client, whose own
// multi-round-trip sending middleware answers them and sends the
// tools/call again with InputResponses: a second POST, the same Handoff
// under Key. A client connecting with default options asks for that
// version with server/discover, but StreamableServerTransport serves it
// only when stateless (SupportsProtocolVersion in mcp/streamable.go); the
// stateful handler of the other tests negotiates 2025-11-25. So the
// handler here is stateless (no Mcp-Session-Id: no dialog to check).
//
// Without the InputRequests check in finish, the first round is recorded
// "completed", the retry is answered from the record with the kept
// first-round result, whose InputRequests send the SDK client round again
// until it gives up (maxMultiRoundTripRetries), and the tool never runs a
// second time: this test fails (checked by removing the check).
func TestMultiRoundTripClientRetries(t *testing.T) {
	for _, enc := range []handoff.Encoding{handoff.JSON, handoff.CBOR} {
		t.Run(enc.String(), func(t *testing.T) {
			e := newEnvWith(t, handoff.FormJWS, enc, envOptions{stateless: true})
			ctx := context.Background()
			hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: e.dl, Encoding: enc})
			if err != nil {
				t.Fatal(err)
			}
			_, stranger := e.connect(e.dl, enc, "stranger-token")
			var hopID string
			var handoffValue any
			asked := 0
			cs, rec := e.connectAsking(t, hc, "", func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				// Between the rounds, in the SDK client's own retry loop:
				// the first round's reply has come back to the client.
				asked++
				rec, err := e.dstore.Get(ctx, planner, hopID)
				if err != nil {
					t.Error(err)
				} else if rec.State != store.Accepted {
					// draft "Knowing the Outcome": asking for input is no outcome.
					t.Errorf("between rounds the hop is %s, want accepted", rec.State)
				}
				if flags, err := e.d.Flags(ctx, false); err != nil || len(flags) != 0 {
					t.Errorf("between rounds: flags %+v, %v", flags, err)
				}
				// The same Handoff with an answer, from a sender not
				// authenticated as the offer's iss: no status, no round
				// (draft "Replay and Freshness"), and the hop still
				// awaits the delegator's answer.
				res, err := stranger.CallTool(ctx, &mcp.CallToolParams{Name: "run-tests", Arguments: args{Mode: "ask"},
					Meta:           mcp.Meta{mcphandoff.Key: handoffValue},
					InputResponses: mcp.InputResponseMap{"suite": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"suite": "stolen"}}}})
				if err != nil {
					t.Error(err)
				} else if _, has := res.Meta[mcphandoff.Key]; has || e.runs.Load() != 1 {
					t.Errorf("a stranger's retry: status present %v, tool ran %d times", has, e.runs.Load())
				}
				return unitSuite(), nil
			})
			if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
				t.Fatalf("negotiated protocol %q: the client's own retry loop runs only at 2026-07-28 and later", v)
			}
			h, hop, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Dialog: "stateless", Work: "ask-client"})
			if err != nil {
				t.Fatal(err)
			}
			hopID = hop.Hop
			if handoffValue, err = mcphandoff.HandoffValue(h, enc); err != nil {
				t.Fatal(err)
			}
			r, err := hc.Call(ctx, cs, call("ask"), h)
			if err != nil {
				t.Fatal(err)
			}
			// The client retried by itself: two tools/call POSTs carrying the
			// Handoff, the second with the answer.
			if n, m := rec.count(`"method":"tools/call"`), rec.count(`"inputResponses"`); n != 2 || m != 1 {
				t.Fatalf("%d tools/call POSTs, %d with inputResponses; want 2 and 1", n, m)
			}
			e.wantTwoRounds(t, asked, hop.Hop, r)
			e.srv.Wait()
			if flags, err := e.d.Flags(ctx, false); err != nil || len(flags) != 0 {
				t.Fatalf("flags %+v, %v", flags, err)
			}
			// Done: asking again is a retransmission answered from the record
			// with the identical octets and the last round's result; nothing
			// runs and nothing is asked.
			again, err := hc.Ask(ctx, cs, hop.Hop)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.Status.Octets, r.Status.Octets) || textOf(again.Result) != "suite unit passed" || e.runs.Load() != 2 || asked != 1 {
				t.Fatalf("asking again: result %q, runs %d, asked %d", textOf(again.Result), e.runs.Load(), asked)
			}
		})
	}
}

// TestMultiRoundTripClientRetriesCanceledBetweenRounds: at protocol
// 2026-07-28 the hop really is between rounds when the delegator cancels
// (the tool has returned its InputRequests and nothing runs): the verified
// "canceled" ends the rounds, the SDK client's retry with the answer runs
// nothing, and the hop stays "accepted", flagged, since what the first
// round did is not known (draft "Knowing the Outcome": never guess).
// Below 2026-07-28 (TestMultiRoundTripCanceledBetweenRounds) the cancel
// lands while the SDK's server middleware, inside the tool's run, waits
// for the answer, and ends that run instead.
//
// The cancel is handed to the middleware as the SDK hands a
// notifications/cancelled, not sent over HTTP: go-sdk v1.8.0 serves
// 2026-07-28 only statelessly, and its stateless handler
// (StreamableHTTPHandler.serveStateless) queues a notification-only POST,
// answers 202 and closes the per-request session at once, so the
// notification reaches no receiving middleware (observed: never in this
// test's runs; by the code, at best a race). A signed cancel over a
// stateless MCP server is therefore not delivered by this SDK version.
func TestMultiRoundTripClientRetriesCanceledBetweenRounds(t *testing.T) {
	e := newEnvWith(t, handoff.FormCOSE, handoff.CBOR, envOptions{stateless: true})
	ctx := context.Background()
	hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: e.dl, Encoding: handoff.CBOR})
	if err != nil {
		t.Fatal(err)
	}
	var hopID string
	mw := e.srv.Middleware()(func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, nil })
	cs, rec := e.connectAsking(t, hc, "", func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		// Between the rounds: the delegator signs and records its
		// "canceled", which reaches the delegate; then it answers.
		st, _, err := e.dl.Cancel(ctx, hopID)
		if err != nil {
			t.Error(err)
		}
		if _, err := mw(ctx, "notifications/cancelled", &mcp.ServerRequest[*mcp.CancelledParams]{
			Params: &mcp.CancelledParams{Meta: mcp.Meta{mcphandoff.Key: mcphandoff.StatusValue(st)}, RequestID: 2}}); err != nil {
			t.Error(err)
		}
		return unitSuite(), nil
	})
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated protocol %q, want 2026-07-28", v)
	}
	h, hop, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Dialog: "stateless", Work: "ask-cancel-client"})
	if err != nil {
		t.Fatal(err)
	}
	hopID = hop.Hop
	r, err := hc.Call(ctx, cs, call("ask"), h)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, e.entered, "round 1")
	e.srv.Wait()
	// The retry with the answer went out and was answered from the record:
	// the hop is accepted, and nothing ran.
	if n := rec.count(`"inputResponses"`); n != 1 {
		t.Fatalf("%d retries with the answer, want 1", n)
	}
	if n := e.runs.Load(); n != 1 {
		t.Fatalf("tool ran %d times; the round after the cancel must not run", n)
	}
	if r.State != handoff.StateAccepted || r.Result.InputRequests != nil {
		t.Fatalf("the retry after the cancel: state %s, input requests %v, result %q", r.State, r.Result.InputRequests, textOf(r.Result))
	}
	e.wantRecord(t, hop.Hop, true, store.Accepted, "")
	e.wantUnknownOutcome(t, hop.Hop)
}
