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
	// Whole secrets go, not their first line: redacted, then signed, the
	// key's octets are nowhere.
	f := newFixture(t)
	offer := f.sign("planner", f.offer("planner", "me"), FormJWS)
	for _, c := range []struct{ name, text, secret string }{
		{"a PEM key", "config dump:\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yBxcBBcA1WYZ0Ax3sWBWEXAMPLE\n-----END EC PRIVATE KEY-----\nend", "MHcCAQEEIBkg4LVWM9nuwNSk3yBx"},
		{"a PEM key cut off", "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg", "MIGHAgEAMBMGByqGSM49"},
		{"a JWK, kty first", `{"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","d":"jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI"}`, "jpsQnnGQmL"},
		{"basic credentials", "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l failed", "YWxhZGRpbjpvcGVuc2VzYW1l"},
		{"a token in a URL", `Get "https://api.example/v1/x?access_token=abcdef0123456789&x=1": EOF`, "abcdef0123456789"},
		{"a Stripe key", "key sk_live_4eC39HqLyjWDarjtT1zdp7dc rejected", "4eC39HqLyjWDarjtT1zdp7dc"},
	} {
		out := RedactSecrets(c.text)
		if strings.Contains(out, c.secret) {
			t.Errorf("%s: %q left in %q", c.name, c.secret, out)
		}
		if _, err := f.signers["me"].SignStatus(&Status{Offer: offer.Digest(), Iss: "me", Aud: "planner", Iat: f.now, State: StateFailed,
			Detail: out}, FormJWS); err != nil {
			t.Errorf("%s: the redacted text does not sign: %v", c.name, err)
		}
	}
	// Ordinary words and ids are not secrets.
	for _, ok := range []string{"the ring bearer responsibilities", "Bearer of bad news, sorry", "ctx-ask-sk-review", "risk-assessment of the sk-learn model",
		"n4bQgYhMfWWaL-qgxVrQFaO_TxsrC4Is0V1sFbDwCgg", `{"d":"not a key at all, just text"}`} {
		if what := secretIn(ok); what != "" {
			t.Errorf("%q taken for %s", ok, what)
		}
	}
}

// TestNoSecretsInStatusRefs: a status's refs are checked as an offer's.
func TestNoSecretsInStatusRefs(t *testing.T) {
	f := newFixture(t)
	offer := f.sign("planner", f.offer("planner", "me"), FormJWS)
	_, err := f.signers["me"].SignStatus(&Status{Offer: offer.Digest(), Iss: "me", Aud: "planner", Iat: f.now, State: StateCompleted,
		Refs: []ContextRef{{Kind: KindDigest, Dig: DigestOf([]byte("r")), Loc: "https://x.example/r?token=abcdef0123456789"}}}, FormJWS)
	if !errors.Is(err, ErrSecretLike) || !strings.Contains(err.Error(), "refs[0].loc") {
		t.Fatalf("got %v", err)
	}
}
