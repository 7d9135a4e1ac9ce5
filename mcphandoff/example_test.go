package mcphandoff_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// Example adds the handoff to an existing MCP server (the delegate) and
// hands work to it from an MCP client (the delegator), over the SDK's
// streamable HTTP on loopback.
func Example() {
	ctx := context.Background()
	keys, plannerSigner, testerSigner := exampleKeys() // trust: each AgentId's public key

	// The delegate: an existing MCP server with its tools ...
	srv := mcp.NewServer(&mcp.Implementation{Name: "tester", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "run-tests"}, runTests)
	// ... gets the receiving checks, a durable hop record and signed
	// statuses (store/sqlite in production).
	d, err := delegate.New(ctx, delegate.Config{
		Options: handoff.Options{Me: "https://tester.example", Keys: keys},
		// Its keys were made just now, so no earlier memory took an offer
		// they verify: NewFirstMemory (a restarting process: NewMemory).
		Store: store.NewFirstMemory(), Signer: testerSigner,
	})
	if err != nil {
		log.Fatal(err)
	}
	hs, err := mcphandoff.NewServer(mcphandoff.ServerConfig{Delegate: d, Sender: mcphandoff.TokenUser})
	if err != nil {
		log.Fatal(err)
	}
	if err := hs.Attach(srv); err != nil {
		log.Fatal(err)
	}
	// StrictHandler refuses a body whose Handoff is not strict JSON
	// (duplicate members, lone surrogates) before the SDK decodes it.
	handler := mcphandoff.StrictHandler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	web := httptest.NewServer(auth.RequireBearerToken(verifyToken, nil)(handler))
	defer web.Close()

	// The delegator: an MCP client with the handoff client attached.
	dl, err := delegator.New(delegator.Config{Me: "https://planner.example", Signer: plannerSigner,
		Keys: keys, Store: store.NewMemory(time.Now())})
	if err != nil {
		log.Fatal(err)
	}
	hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: dl})
	if err != nil {
		log.Fatal(err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "planner", Version: "1"}, nil)
	if err := hc.Attach(cl); err != nil {
		log.Fatal(err)
	}
	cs, err := cl.Connect(ctx, hc.Transport(&mcp.StreamableClientTransport{Endpoint: web.URL,
		HTTPClient: &http.Client{Transport: withToken{"planner-token"}}}), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()

	h, hop, err := dl.Offer(ctx, delegator.Offer{Aud: "https://tester.example", Dialog: cs.ID(), Work: "test #42"})
	if err != nil {
		log.Fatal(err)
	}
	r, err := hc.Call(ctx, cs, &mcp.CallToolParams{Name: "run-tests", Arguments: map[string]any{}}, h)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.State, r.Hop.Resolved)

	// Asking again resends the identical offer: answered from the record,
	// the tool is not run again, the status octets are the same.
	again, err := hc.Ask(ctx, cs, hop.Hop)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.State, bytes.Equal(again.Status.Octets, r.Status.Octets))
	// Output:
	// completed true
	// completed true
}

// runTests is the tester's tool. HopFrom tells it who handed the work
// over; an error result would Declare what took effect.
func runTests(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	by := "nobody"
	if hop := mcphandoff.HopFrom(ctx); hop != nil {
		by = hop.Iss
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "all tests passed, for " + by}}}, nil, nil
}

// verifyToken is the host's authentication: bearer tokens naming agents.
func verifyToken(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	if token != "planner-token" {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: "https://planner.example", Expiration: time.Now().Add(time.Hour)}, nil
}

type withToken struct{ token string }

func (w withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+w.token)
	return http.DefaultTransport.RoundTrip(r)
}

func exampleKeys() (*trust.Config, *handoff.Signer, *handoff.Signer) {
	keys := trust.New()
	var signers []*handoff.Signer
	for _, id := range []string{"https://planner.example", "https://tester.example"} {
		k, err := trust.GenerateKey()
		if err != nil {
			log.Fatal(err)
		}
		pub, err := trust.NewKey(&k.PublicKey)
		if err != nil {
			log.Fatal(err)
		}
		if err := keys.Add(id, pub); err != nil {
			log.Fatal(err)
		}
		s, err := handoff.NewSigner(k)
		if err != nil {
			log.Fatal(err)
		}
		signers = append(signers, s)
	}
	return keys, signers[0], signers[1]
}
