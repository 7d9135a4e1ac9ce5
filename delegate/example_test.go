package delegate_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
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

// stateOf is the state a signed status says.
func stateOf(el *handoff.Element) handoff.State {
	if el == nil {
		return "(none)"
	}
	_, st, err := handoff.UnsafeDecode(*el)
	if err != nil || st == nil {
		return "(not a status)"
	}
	return st.State
}

// The flow of one offer at a delegate: received and recorded "accepted"
// before Receive returns, the work done once, its outcome recorded; the
// same offer asked again is answered from the record, and the work is not
// taken again.
func Example() {
	ctx := context.Background()
	keys := trust.New()
	planner := exampleAgent(keys, "https://planner.example") // the delegator
	coder := exampleAgent(keys, "https://coder.example")     // this delegate

	d, err := delegate.New(ctx, delegate.Config{
		Options: handoff.Options{Me: "https://coder.example", Keys: keys},
		Store:   store.NewFirstMemory(), // keys made just now: no earlier memory (or store/sqlite, store/postgres)
		Signer:  coder,
	})
	if err != nil {
		log.Fatal(err)
	}

	// The planner's offer, as it arrives in a host protocol message.
	now := time.Now().Unix()
	offer, err := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300}, handoff.FormJWS)
	if err != nil {
		log.Fatal(err)
	}
	b, err := (&handoff.Handoff{Offer: offer}).Encode(handoff.JSON)
	if err != nil {
		log.Fatal(err)
	}

	// authenticated: the host protocol authenticated the sender as the
	// offer's iss (only then is a retransmission answered with a status).
	a, err := d.Receive(ctx, b, "ctx-42", "https://planner.example")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Outcome, a.Take, stateOf(a.Status)) // send a.Status back
	if a.Take {
		// ... do the work, exactly once ...
		st, err := d.Finish(ctx, a.Iss, a.Hop, delegate.Outcome{State: store.Completed})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(stateOf(st))
	}

	a, err = d.Receive(ctx, b, "ctx-42", "https://planner.example")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Outcome, a.Take, stateOf(a.Status))
	// Output:
	// accepted true accepted
	// completed
	// retransmission false completed
}
