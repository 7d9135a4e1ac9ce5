package handoff

import (
	"errors"
	"strings"
	"testing"
)

// TestNoSecretsSigned: draft "Secrets": "The element MUST NOT contain
// secrets: no access tokens, API keys, tool credentials, passwords, or
// private keys. Credentials appear only as digests in grant." The signer
// refuses the secrets it can recognize, wherever the payload would
// carry them, and says which member; ordinary text passes.
func TestNoSecretsSigned(t *testing.T) {
	f := newFixture(t)
	jwt := "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLW9mLXRoZS10b2tlbi0xMjM0NTY3ODkw"
	for _, c := range []struct {
		name   string
		mut    func(o *Offer)
		member string
	}{
		{"a bearer token in the dialog", func(o *Offer) { o.Dialog = "Bearer abcdefghijklmnopqrstuvwxyz012345" }, "dialog"},
		{"a JWT in the task", func(o *Offer) { o.Task = "run with token " + jwt }, "task"},
		{"a PEM key in an unknown member", func(o *Offer) {
			o.Extra = map[string]any{"x-note": "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE...\n-----END EC PRIVATE KEY-----"}
		}, "x-note"},
		{"a private JWK nested in an unknown member", func(o *Offer) {
			o.Extra = map[string]any{"x-cfg": map[string]any{"key": `{"kty":"EC","crv":"P-256","x":"abc","y":"def","d":"c2VjcmV0LXNjYWxhci1vZi10aGUta2V5"}`}}
		}, "x-cfg.key"},
		{"an AWS key in obo", func(o *Offer) { o.Obo = &Principal{Sub: "AKIAIOSFODNN7EXAMPLE"} }, "obo.sub"},
		{"a GitHub token in a ref's loc", func(o *Offer) {
			o.Refs = []ContextRef{{Kind: KindDigest, Dig: DigestOf([]byte("x")), Loc: "https://x.example/?t=ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}
		}, "refs[0].loc"},
		{"an API key", func(o *Offer) { o.Task = "use sk-proj-abcdefghijklmnopqrstuvwxyz" }, "task"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := f.offer("planner", "me")
			c.mut(o)
			_, err := f.signers["planner"].SignOffer(o, FormJWS)
			if !errors.Is(err, ErrSecretLike) || !strings.Contains(err.Error(), c.member) {
				t.Fatalf("got %v, want ErrSecretLike naming %s", err, c.member)
			}
		})
	}
	// Ordinary text passes: ids, sentences, digests, URLs.
	o := f.offer("planner", "me")
	o.Dialog, o.Task = "ctx-8EEJeU6U8Phk1ZdR4jULSIMs", "Run the tests of the payments service and report the failures, bearer of good news"
	o.Extra = map[string]any{"x-digest": "n4bQgYhMfWWaL-qgxVrQFaO_TxsrC4Is0V1sFbDwCgg"}
	if _, err := f.signers["planner"].SignOffer(o, FormJWS); err != nil {
		t.Fatalf("ordinary text refused: %v", err)
	}
	// A status's detail, free text that may quote an error message.
	offer := f.sign("planner", f.offer("planner", "me"), FormJWS)
	_, err := f.signers["me"].SignStatus(&Status{Offer: offer.Digest(), Iss: "me", Aud: "planner", Iat: f.now, State: StateFailed,
		Detail: "upstream said: 401 for Authorization: Bearer " + jwt}, FormJWS)
	if !errors.Is(err, ErrSecretLike) || !strings.Contains(err.Error(), "detail") {
		t.Fatalf("a detail quoting a token: %v", err)
	}
}

// TestRedactSecrets: free text that crosses a trust boundary (an
// upstream's error message in a status's detail) loses what looks like a
// secret, and nothing else; what is left signs.
func TestRedactSecrets(t *testing.T) {
	in := "upstream said 401: Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345 was refused; retry later"
	out := RedactSecrets(in)
	if strings.Contains(out, "abcdefghijklmnop") || !strings.Contains(out, "[redacted]") || !strings.HasSuffix(out, "was refused; retry later") {
		t.Fatalf("got %q", out)
	}
	if secretIn(out) != "" {
		t.Fatalf("still secret-like: %q", out)
	}
	if plain := "the tests failed: 3 of 120"; RedactSecrets(plain) != plain {
		t.Fatal("plain text changed")
	}
}
