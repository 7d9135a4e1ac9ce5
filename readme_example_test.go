package handoff_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The README's library section shows the code between "// README: NAME"
// and "// README: end" in these two examples, word for word
// (TestREADMEShowsTheExamples), so that what a newcomer copies compiles
// and runs. The keys are testdata/example's.

// The delegator's side: load the signing key, sign an offer for the
// delegate, carry it in a Handoff, and check the delegate's answer.
func Example_delegator() {
	// README: delegator
	jwk, err := os.ReadFile("testdata/example/planner.jwk") // from handoff keygen
	if err != nil {
		log.Fatal(err)
	}
	key, _, err := trust.ParsePrivateJWK(jwk)
	if err != nil {
		log.Fatal(err)
	}
	signer, err := handoff.NewSigner(key)
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now().Unix()
	el, err := signer.SignOffer(&handoff.Offer{
		Hop: handoff.NewHop(), Dialog: "ctx-42", // a new hop for every offer
		Iss: "https://planner.example", Aud: "https://coder.example",
		Iat: now, Exp: now + 300,
	}, handoff.FormJWS) // or handoff.FormCOSE
	if err != nil {
		log.Fatal(err)
	}
	wire, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON) // or handoff.CBOR
	if err != nil {
		log.Fatal(err)
	}
	// Your host protocol carries wire to the delegate and brings back its
	// signed status (packages a2ahandoff and mcphandoff do both; a status
	// received as octets is handoff.ParseElement(octets)).
	var answer handoff.Element = send(wire)

	keys, err := trust.Load("testdata/example/trust.json") // the coder's public key (handoff trust add)
	if err != nil {
		log.Fatal(err)
	}
	vs, err := handoff.VerifyStatus(answer, el, handoff.StatusOptions{Keys: keys})
	if err != nil {
		log.Fatal(err) // a *handoff.CheckError: which check, which member
	}
	fmt.Println("the coder says", vs.Status.State)
	// README: end

	// Output: the coder says accepted
}

// The delegate's side: check a received Handoff before taking the work,
// and answer with a signed status.
func Example_delegate() {
	wire := offerFromPlanner()
	// README: delegate
	keys, err := trust.Load("testdata/example/trust.json") // the planner's public key, bound to its AgentId
	if err != nil {
		log.Fatal(err)
	}
	jwk, err := os.ReadFile("testdata/example/coder.jwk")
	if err != nil {
		log.Fatal(err)
	}
	key, _, err := trust.ParsePrivateJWK(jwk)
	if err != nil {
		log.Fatal(err)
	}
	signer, err := handoff.NewSigner(key)
	if err != nil {
		log.Fatal(err)
	}
	r, err := handoff.NewReceiver(handoff.Options{Me: "https://coder.example", Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	res, err := r.Receive(context.Background(), wire, "ctx-42")
	if res == nil {
		log.Fatal(err) // the replay memory failed; nothing was decided
	}
	switch res.Outcome {
	case handoff.Accepted: // take the work: res.Offer is verified, res.ChainQuality says how far back
		st, err := signer.SignStatus(&handoff.Status{Offer: *res.OfferDigest, Iss: "https://coder.example",
			Aud: res.Offer.Iss, Iat: time.Now().Unix(), State: handoff.StateAccepted}, handoff.FormJWS)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("accepted; answering with a", st.Form, "status")
	case handoff.Rejected: // res.Reason and err say why (errors.Is(err, handoff.ErrStale), ...): answer "rejected"
	case handoff.Retransmission: // answer with the status sent before; never do the work twice
	case handoff.Equivocation: // send nothing for this offer; tell the operator
	}
	// README: end

	// Output: accepted; answering with a JWS status
}

// send is the host protocol and the delegate, for Example_delegator: the
// coder checks the Handoff and answers "accepted".
func send(wire []byte) handoff.Element {
	keys := mustLoad("testdata/example/trust.json")
	r, err := handoff.NewReceiver(handoff.Options{Me: "https://coder.example", Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	res, err := r.Receive(context.Background(), wire, "ctx-42")
	if err != nil || res.Outcome != handoff.Accepted {
		log.Fatalf("the coder: %v", err)
	}
	st, err := signerOf("testdata/example/coder.jwk").SignStatus(&handoff.Status{Offer: *res.OfferDigest,
		Iss: "https://coder.example", Aud: res.Offer.Iss, Iat: time.Now().Unix(), State: handoff.StateAccepted}, handoff.FormJWS)
	if err != nil {
		log.Fatal(err)
	}
	return st
}

// offerFromPlanner is the planner's Handoff, for Example_delegate.
func offerFromPlanner() []byte {
	now := time.Now().Unix()
	el, err := signerOf("testdata/example/planner.jwk").SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300}, handoff.FormJWS)
	if err != nil {
		log.Fatal(err)
	}
	b, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func mustLoad(path string) *trust.Config {
	c, err := trust.Load(path)
	if err != nil {
		log.Fatal(err)
	}
	return c
}

func signerOf(path string) *handoff.Signer {
	jwk, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}
	k, _, err := trust.ParsePrivateJWK(jwk)
	if err != nil {
		log.Fatal(err)
	}
	s, err := handoff.NewSigner(k)
	if err != nil {
		log.Fatal(err)
	}
	return s
}

// The README shows each example's marked code, word for word (tabs as
// four spaces), so that its library section compiles.
func TestREADMEShowsTheExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("readme_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"delegator", "delegate"} {
		_, rest, ok := strings.Cut(string(src), "\t// README: "+name+"\n")
		if !ok {
			t.Fatalf("no README: %s mark", name)
		}
		body, _, ok := strings.Cut(rest, "\t// README: end\n")
		if !ok {
			t.Fatalf("no README: end after %s", name)
		}
		var b strings.Builder
		for _, line := range strings.SplitAfter(body, "\n") {
			line = strings.TrimPrefix(line, "\t")
			n := len(line) - len(strings.TrimLeft(line, "\t"))
			b.WriteString(strings.Repeat("    ", n) + line[n:])
		}
		if !strings.Contains(string(readme), "```go\n"+b.String()+"```\n") {
			t.Errorf("README.md does not show the %s example as written; its block should be:\n```go\n%s```", name, b.String())
		}
	}
}

// docs/spec.md is the project's SPEC.md, kept in the repository so that it
// is self-contained; where the shared original is at hand (../shared, as
// on the project's machines), the copy must not have drifted from it.
func TestDocsSpecIsTheSharedSpec(t *testing.T) {
	for _, c := range []struct{ copy, shared string }{
		{"docs/spec.md", "../shared/SPEC.md"},
		{"docs/draft-agent-handoff-01.txt", "../shared/spec/draft-agent-handoff-01.txt"},
	} {
		orig, err := os.ReadFile(c.shared)
		if err != nil {
			t.Logf("%s is not here (%v): nothing to compare %s with", c.shared, err, c.copy)
			continue
		}
		mine, err := os.ReadFile(c.copy)
		if err != nil {
			t.Fatal(err)
		}
		if string(mine) != string(orig) {
			t.Errorf("%s differs from %s: copy it again (cp %s %s) and read what changed", c.copy, c.shared, c.shared, c.copy)
		}
	}
}
