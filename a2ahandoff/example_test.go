package a2ahandoff_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// plannerAgent is an existing a2a-go agent, unchanged.
type plannerAgent struct{}

func (plannerAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "plan: 3 steps"}))
}

func (plannerAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	return nil
}

// exampleAgent makes a key for an agent and binds it in the shared trust
// configuration (in production: each side's own trust file).
func exampleAgent(keys *trust.Config, id string) *handoff.Signer {
	k, err := trust.GenerateKey()
	if err != nil {
		log.Fatal(err)
	}
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		log.Fatal(err)
	}
	if err := keys.Add(id, tk); err != nil {
		log.Fatal(err)
	}
	s, err := handoff.NewSigner(k)
	if err != nil {
		log.Fatal(err)
	}
	return s
}

// Adding the handoff to an existing a2a-go agent, and handing it work.
//
// Server side: wrap the agent's executor in a2ahandoff.NewExecutor. The
// receiving checks run before the agent's code sees a task; the task is
// REJECTED with the signed "rejected" when a check fails, WORKING with
// "accepted" while the agent runs, and COMPLETED or FAILED with the signed
// outcome when it ends.
//
// Client side: wrap the a2aclient.Client in a2ahandoff.NewClient with the
// delegator that tracks the hops. Offer signs the offer, carries it in the
// message, and takes in the signed statuses of the reply.
func Example() {
	ctx := context.Background()
	keys := trust.New()
	assistantKey := exampleAgent(keys, "https://assistant.example")
	plannerKey := exampleAgent(keys, "https://planner.example")

	// Server side (the planner).
	x, err := a2ahandoff.NewExecutor(ctx, plannerAgent{}, a2ahandoff.ServerConfig{
		Delegate: delegate.Config{
			Options: handoff.Options{Me: "https://planner.example", Keys: keys},
			Store:   store.NewFirstMemory(), // keys made just now: no earlier memory (store/sqlite in production)
			Signer:  plannerKey,
		},
		Sender: a2ahandoff.UserName, // who the host's authentication says the caller is
	})
	if err != nil {
		log.Fatal(err)
	}
	// StrictHandler refuses a JSON Handoff that is not strict JSON
	// (duplicate members, lone surrogates) before the SDK decodes it.
	srv := httptest.NewServer(a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(a2ahandoff.NewHandler(x))))
	defer srv.Close()

	// Client side (the assistant).
	ac, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: srv.URL, Transport: a2a.TransportProtocolJSONRPC}})
	if err != nil {
		log.Fatal(err)
	}
	dl, err := delegator.New(delegator.Config{Me: "https://assistant.example", Signer: assistantKey, Keys: keys,
		Store: store.NewMemory(time.Now())})
	if err != nil {
		log.Fatal(err)
	}
	c, err := a2ahandoff.NewClient(ac, dl, a2ahandoff.ClientOptions{Encoding: handoff.JSON})
	if err != nil {
		log.Fatal(err)
	}
	r, err := c.Offer(ctx, delegator.Offer{Aud: "https://planner.example", Work: "release plan #42"},
		a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "plan the release"}), nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("task:", r.State(), "| hop:", r.Issued.View, "| resolved:", r.Issued.Resolved)
	// Output: task: completed | hop: completed | resolved: true
}
