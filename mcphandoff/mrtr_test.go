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

// TestMultiRoundTrip: a tool that asks the client for input (SEP-2322,
// InputRequests in its result) is not done after its first round (draft
// "Knowing the Outcome": a result that asks for input is no outcome). The
// hop stays "accepted"; the SDK client's automatic retry, which carries
// the same Handoff, runs the tool again under the same hop instead of
// being answered as a retransmission; the last round's result is the
// outcome. Over the streamable HTTP handler the SDK's server runs the
// rounds (its multi-round-trip middleware, outside this one, asks the
// client and calls down again with the answers), at both protocol
// versions; the client's own retry loop would resend the same way.
func TestMultiRoundTrip(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		name := version
		if name == "" {
			name = "client retries (latest protocol)"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, handoff.FormJWS, handoff.JSON)
			ctx := context.Background()
			hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: e.dl})
			if err != nil {
				t.Fatal(err)
			}
			asked := 0
			cl := mcp.NewClient(&mcp.Implementation{Name: "planner", Version: "1"}, &mcp.ClientOptions{
				ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked++
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"suite": "unit"}}, nil
				}})
			if err := hc.Attach(cl); err != nil {
				t.Fatal(err)
			}
			rec := &recorder{base: bearer{"planner-token", http.DefaultTransport}}
			cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url,
				HTTPClient: hc.HTTPClient(&http.Client{Transport: rec})},
				&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			h, hop, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Dialog: cs.ID(), Work: "ask"})
			if err != nil {
				t.Fatal(err)
			}
			r, err := hc.Call(ctx, cs, call("ask"), h)
			if err != nil {
				t.Fatal(err)
			}
			if asked != 1 || e.runs.Load() != 2 {
				t.Fatalf("asked %d times, tool ran %d times; want 1 and 2", asked, e.runs.Load())
			}
			if wait(t, e.entered, "round 1") != hop.Hop || wait(t, e.entered, "round 2") != hop.Hop {
				t.Fatal("a round ran under another hop")
			}
			if r.State != handoff.StateCompleted || !r.Hop.Resolved || textOf(r.Result) != "suite unit passed" {
				t.Fatalf("state %s, hop %+v, result %q", r.State, r.Hop, textOf(r.Result))
			}
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
	cl := mcp.NewClient(&mcp.Implementation{Name: "planner", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			// Between the rounds: the delegator cancels, and answers only
			// once the delegate has recorded the cancel.
			if _, err := hc.Cancel(ctx, cs, hopID); err != nil {
				t.Error(err)
			}
			for i := 0; i < 500; i++ {
				if rec, err := e.dstore.Get(ctx, planner, hopID); err == nil && rec.Canceled {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"suite": "unit"}}, nil
		}})
	if err := hc.Attach(cl); err != nil {
		t.Fatal(err)
	}
	cs, err = cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url,
		HTTPClient: hc.HTTPClient(&http.Client{Transport: bearer{"planner-token", http.DefaultTransport}})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
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
	rec, err := e.dstore.Get(ctx, planner, hop.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Canceled || rec.State != store.Accepted {
		t.Fatalf("record: canceled %v, state %s", rec.Canceled, rec.State)
	}
	flags, err := e.d.Flags(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) != 1 || flags[0].Kind != store.FlagUnknownOutcome || flags[0].Hop != hop.Hop {
		t.Fatalf("flags: %+v", flags)
	}
}
