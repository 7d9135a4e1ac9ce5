package handoff_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// agent is a key pair with its trust binding, for the examples.
func agent(tc *trust.Config, id string) *handoff.Signer {
	k, err := trust.GenerateKey()
	if err != nil {
		log.Fatal(err)
	}
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		log.Fatal(err)
	}
	if err := tc.Add(id, tk); err != nil {
		log.Fatal(err)
	}
	s, err := handoff.NewSigner(k)
	if err != nil {
		log.Fatal(err)
	}
	return s
}

// A delegator signs an offer and carries it in a Handoff.
func ExampleSigner_SignOffer() {
	assistant := agent(trust.New(), "https://assistant.example")
	now := time.Now().Unix()
	offer := &handoff.Offer{
		Hop:    handoff.NewHop(), // a new hop for every offer; never sign a hop twice
		Dialog: "ctx-42",         // the host protocol's dialog id (A2A contextId)
		Iss:    "https://assistant.example",
		Aud:    "https://planner.example",
		Iat:    now,
		Exp:    now + 300,
		Obo:    &handoff.Principal{Sub: "user-7f3a"},
	}
	el, err := assistant.SignOffer(offer, handoff.FormJWS) // or handoff.FormCOSE
	if err != nil {
		log.Fatal(err)
	}
	h := &handoff.Handoff{Offer: el}
	b, err := h.Encode(handoff.JSON) // or handoff.CBOR
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(el.Form, len(b) > 0)
	// Output: JWS true
}

// A delegate that received a Handoff passes the work on: the new offer's
// prev names the received offer, and the received offer joins the chain
// with its octets unchanged.
func ExampleHandoff_PassOn() {
	tc := trust.New()
	assistant, planner := agent(tc, "https://assistant.example"), agent(tc, "https://planner.example")
	now := time.Now().Unix()
	first, _ := assistant.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://assistant.example", Aud: "https://planner.example", Iat: now, Exp: now + 300}, handoff.FormJWS)
	received := &handoff.Handoff{Offer: first}

	prev := received.Offer.Digest()
	next, err := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300, Prev: &prev}, handoff.FormCOSE)
	if err != nil {
		log.Fatal(err)
	}
	h := received.PassOn(next)
	fmt.Println(len(h.Chain), h.Chain[0].Digest().Equal(prev))
	// Output: 1 true
}

// The delegate runs the receiving checks before it takes the work.
func ExampleReceiver_Receive() {
	tc := trust.New()
	assistant, planner := agent(tc, "https://assistant.example"), agent(tc, "https://planner.example")
	now := time.Now().Unix()
	first, _ := assistant.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://assistant.example", Aud: "https://planner.example", Iat: now, Exp: now + 300}, handoff.FormJWS)
	prev := first.Digest()
	next, _ := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300, Prev: &prev}, handoff.FormJWS)
	wire, _ := (&handoff.Handoff{Offer: first}).PassOn(next).Encode(handoff.CBOR)

	coder, err := handoff.NewReceiver(handoff.Options{Me: "https://coder.example", Keys: tc, RequireFullChain: true})
	if err != nil {
		log.Fatal(err)
	}
	res, err := coder.Receive(context.Background(), wire, "ctx-42")
	fmt.Println(res.Outcome, res.ChainQuality, err)

	// The same octets again: answered from memory, never processed again.
	res, _ = coder.Receive(context.Background(), wire, "ctx-42")
	fmt.Println(res.Outcome)
	// Output:
	// accepted full <nil>
	// retransmission
}

// A delegator checks the status the delegate sends back.
func ExampleVerifyStatus() {
	tc := trust.New()
	planner, coder := agent(tc, "https://planner.example"), agent(tc, "https://coder.example")
	now := time.Now().Unix()
	offer, _ := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300}, handoff.FormJWS)
	status, _ := coder.SignStatus(&handoff.Status{Offer: offer.Digest(), Iss: "https://coder.example",
		Aud: "https://planner.example", Iat: now, State: handoff.StateCompleted}, handoff.FormJWS)

	vs, err := handoff.VerifyStatus(status, offer, handoff.StatusOptions{Keys: tc})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(vs.Status.State)
	// Output: completed
}

// reloading is a trust configuration swapped whole on a reload, as a
// server reloads its trust file. Its Generation, the current Config's,
// is the receivers' Options.TrustGeneration, so that a shared ChainCache
// sees every reload; a wrapper that hid or added keys must not pass on
// its Config's.
type reloading struct{ cur atomic.Pointer[trust.Config] }

func (r *reloading) Keys(iss, kid string) []trust.Key { return r.cur.Load().Keys(iss, kid) }
func (r *reloading) Generation() uint64               { return r.cur.Load().Generation() }

// Receivers in one process share a ChainCache: the offer the planner took
// is, at the next hop, the chain element the coder finds verified.
func ExampleChainCache() {
	tc := trust.New()
	assistant, planner := agent(tc, "https://assistant.example"), agent(tc, "https://planner.example")
	keys := new(reloading)
	keys.cur.Store(tc)
	cache := handoff.NewChainCache(8192, 32<<20)
	receiver := func(me string) *handoff.Receiver {
		r, err := handoff.NewReceiver(handoff.Options{Me: me, Keys: keys, ChainCache: cache, TrustGeneration: keys.Generation})
		if err != nil {
			log.Fatal(err)
		}
		return r
	}

	now := time.Now().Unix()
	first, _ := assistant.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://assistant.example", Aud: "https://planner.example", Iat: now, Exp: now + 300}, handoff.FormJWS)
	wire, _ := (&handoff.Handoff{Offer: first}).Encode(handoff.JSON)
	res, _ := receiver("https://planner.example").Receive(context.Background(), wire, "ctx-42")
	fmt.Println("planner:", res.Outcome)

	prev := first.Digest()
	next, _ := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300, Prev: &prev}, handoff.FormJWS)
	wire, _ = (&handoff.Handoff{Offer: first}).PassOn(next).Encode(handoff.JSON)
	res, _ = receiver("https://coder.example").Receive(context.Background(), wire, "ctx-42")
	fmt.Println("coder:", res.Outcome, res.ChainQuality, "hits:", cache.Stats().Hits)

	// A reload is a new generation: nothing the old keys verified is
	// found again.
	b, _ := json.Marshal(tc)
	reloaded, err := trust.Parse(b)
	if err != nil {
		log.Fatal(err)
	}
	keys.cur.Store(reloaded)
	again, _ := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300, Prev: &prev}, handoff.FormJWS)
	wire, _ = (&handoff.Handoff{Offer: first}).PassOn(again).Encode(handoff.JSON)
	res, _ = receiver("https://coder.example").Receive(context.Background(), wire, "ctx-42")
	fmt.Println("after a reload:", res.Outcome, res.ChainQuality, "hits:", cache.Stats().Hits)
	// Output:
	// planner: accepted
	// coder: accepted full hits: 1
	// after a reload: accepted full hits: 1
}
