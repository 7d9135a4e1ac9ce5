package delegator_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// exampleAgent is a key pair bound to id in keys.
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

// The flow of one hop at a delegator: the offer signed and kept, each
// status the delegate sends checked (D9) and applied, the hop resolved by
// a verified "completed"; a second offer for the same work is refused
// while a hop for it is unresolved.
func Example() {
	ctx := context.Background()
	keys := trust.New()
	planner := exampleAgent(keys, "https://planner.example") // this delegator
	coder := exampleAgent(keys, "https://coder.example")     // the delegate

	dl, err := delegator.New(delegator.Config{Me: "https://planner.example", Signer: planner, Keys: keys,
		Store: store.NewMemory(time.Now())}) // or store/sqlite, store/postgres
	if err != nil {
		log.Fatal(err)
	}
	h, hop, err := dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-42", Work: "run the tests"})
	if err != nil {
		log.Fatal(err)
	}
	b, err := h.Encode(handoff.JSON) // carried in a host protocol message
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(hop.View)

	// A second offer for the same work while the hop is unresolved.
	_, _, err = dl.Offer(ctx, delegator.Offer{Aud: "https://coder.example", Dialog: "ctx-42", Work: "run the tests"})
	fmt.Println(err != nil)

	// The coder, on the other side (package delegate).
	d, err := delegate.New(ctx, delegate.Config{Options: handoff.Options{Me: "https://coder.example", Keys: keys},
		Store: store.NewFirstMemory(), Signer: coder}) // keys made just now: no earlier memory
	if err != nil {
		log.Fatal(err)
	}
	a, err := d.Receive(ctx, b, "ctx-42", "https://planner.example")
	if err != nil {
		log.Fatal(err)
	}
	// Each status that comes back is checked and applied.
	got, err := dl.Intake(ctx, hop.Hop, *a.Status)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.View, got.Resolved)
	done, err := d.Finish(ctx, a.Iss, a.Hop, delegate.Outcome{State: store.Completed})
	if err != nil {
		log.Fatal(err)
	}
	if got, err = dl.Intake(ctx, hop.Hop, *done); err != nil {
		log.Fatal(err)
	}
	fmt.Println(got.View, got.Resolved)
	// Output:
	// offered
	// true
	// accepted false
	// completed true
}
