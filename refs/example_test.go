package refs_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/refs"
	"github.com/quantumlearningmachines/handoff/trust"
)

// A delegator names a prompt with a salted reference and sends the salt
// with the prompt; the delegate requires every reference to verify
// before it takes the work.
func Example() {
	// Keys: the delegator's, trusted by the delegate.
	k, _ := trust.GenerateKey()
	tk, _ := trust.NewKey(&k.PublicKey)
	keys := trust.New()
	if err := keys.Add("https://planner.example", tk); err != nil {
		log.Fatal(err)
	}
	planner, _ := handoff.NewSigner(k)

	// The delegator: a prompt is low-entropy, so it gets a salted ref.
	prompt := []byte("Summarise the incident for the on-call engineer.")
	ref, salt, err := refs.NewSaltedRef(prompt, "")
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now().Unix()
	el, _ := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-1",
		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300,
		Refs: []handoff.ContextRef{ref}}, handoff.FormJWS)
	wire, _ := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)

	// The delegate: every reference must verify (step 7).
	checker, err := refs.NewChecker(refs.Policy{RequireAll: true, Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	r, _ := handoff.NewReceiver(handoff.Options{Me: "https://coder.example", Keys: keys, CheckRefs: checker.Check})

	// What came with the task: the prompt and its salt, for refs[0].
	m := &refs.Material{Octets: map[int][]byte{0: prompt}, Salts: map[int][]byte{0: salt}}
	res, _ := r.Receive(refs.WithMaterial(context.Background(), m), wire, "ctx-1")
	fmt.Println(res.Outcome, res.Refs)
	// Output: accepted [verified]
}

// The delegator checks a "completed" status's result ref against the
// result it received.
func ExampleChecker_CheckStatus() {
	result := []byte(`{"patch":"..."}`)
	vs := &handoff.VerifiedStatus{Status: &handoff.Status{State: handoff.StateCompleted, Iss: "https://coder.example",
		Refs: []handoff.ContextRef{refs.NewDigestRef(result, "")}}} // in real use: from handoff.VerifyStatus
	checker, _ := refs.NewChecker(refs.Policy{})
	report := checker.CheckStatus(context.Background(), vs, &refs.Material{Objects: []refs.Object{{Octets: result}}})
	fmt.Println(report.ResultVerified())
	// Output: true
}
