package trust_test

import (
	"fmt"

	"github.com/quantumlearningmachines/handoff/trust"
)

// A receiver looks up the keys its trust file binds to a message's iss,
// narrowed by the message's kid. The key's algorithm comes from the trust
// configuration, never from the message.
func Example() {
	priv, err := trust.GenerateKey()
	if err != nil {
		panic(err)
	}
	pub, err := trust.MarshalPublicJWK(&priv.PublicKey) // what `handoff pubkey` prints
	if err != nil {
		panic(err)
	}
	file := `{"agents": [{"id": "https://planner.example/agent", "keys": [` + string(pub) + `]}]}`
	cfg, err := trust.Parse([]byte(file))
	if err != nil {
		panic(err)
	}

	kid := trust.Thumbprint(&priv.PublicKey)
	for _, k := range cfg.Keys("https://planner.example/agent", kid) {
		fmt.Println(k.Alg, k.Kid == kid)
	}
	fmt.Println(len(cfg.Keys("https://intruder.example/agent", kid)))
	// Output:
	// ES256 true
	// 0
}

func ExampleParse_error() {
	_, err := trust.Parse([]byte(`{"agents": [{"id": "https://planner.example/agent",
	  "keys": [{"kty": "EC", "crv": "P-384", "kid": "p384", "x": "", "y": ""}]}]}`))
	fmt.Println(err)
	// Output:
	// trust: agent "https://planner.example/agent" key 1 (kid "p384"): crv is "P-384", want "P-256"
}
