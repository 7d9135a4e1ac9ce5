package jws_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/quantumlearningmachines/handoff/internal/jws"
)

// thumbprint is the RFC 7638 JWK thumbprint of pub as go-jose computes it.
func thumbprint(t *testing.T, pub *ecdsa.PublicKey) string {
	t.Helper()
	tp, err := (&jose.JSONWebKey{Key: pub}).Thumbprint(crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(tp)
}

var interopPayloads = [][]byte{
	[]byte(`{"v":1,"type":"offer","hop":"q83vEjRWeJq83vEjRWeJqw","dialog":"d1","iss":"https://a.example","aud":"https://b.example","iat":1700000000,"exp":1700000300}`),
	[]byte("x"),
	{0x00, 0xff, 0xfe, 0x80},
	bytes.Repeat([]byte("é"), 700),
}

// TestInteropFromGoJose: what go-jose signs, we parse and verify.
func TestInteropFromGoJose(t *testing.T) {
	for i := 0; i < 8; i++ { // several keys and signatures: R or S with high bits / leading zeros
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		kid := thumbprint(t, &key.PublicKey)
		opts := (&jose.SignerOptions{}).WithType(jws.Typ).WithHeader("kid", kid)
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range interopPayloads {
			obj, err := signer.Sign(p)
			if err != nil {
				t.Fatal(err)
			}
			compact, err := obj.CompactSerialize()
			if err != nil {
				t.Fatal(err)
			}
			tk, err := jws.Parse([]byte(compact))
			if err != nil {
				t.Fatalf("Parse(go-jose token %s): %v", compact, err)
			}
			if tk.Header != (jws.Header{Alg: jws.ES256, Kid: kid, Typ: jws.Typ}) {
				t.Errorf("header = %+v", tk.Header)
			}
			if !bytes.Equal(tk.Payload, p) {
				t.Errorf("payload = %q, want %q", tk.Payload, p)
			}
			if err := tk.Verify(&key.PublicKey); err != nil {
				t.Fatalf("Verify(go-jose token): %v", err)
			}
		}
	}
}

// TestInteropFromGoJoseRejected: go-jose tokens outside the profile are
// rejected with the right error.
func TestInteropFromGoJoseRejected(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	key384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k jose.SigningKey, opts *jose.SignerOptions) []byte {
		s, err := jose.NewSigner(k, opts)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := s.Sign([]byte(`{"v":1}`))
		if err != nil {
			t.Fatal(err)
		}
		c, err := obj.CompactSerialize()
		if err != nil {
			t.Fatal(err)
		}
		return []byte(c)
	}
	es256 := jose.SigningKey{Algorithm: jose.ES256, Key: key}
	base := func() *jose.SignerOptions { return (&jose.SignerOptions{}).WithType(jws.Typ).WithHeader("kid", "k") }
	for _, tc := range []struct {
		name string
		tok  []byte
		want error
	}{
		{"no typ", sign(es256, (&jose.SignerOptions{}).WithHeader("kid", "k")), jws.ErrMalformed},
		{"typ JWT", sign(es256, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k")), jws.ErrTyp},
		{"no kid", sign(es256, (&jose.SignerOptions{}).WithType(jws.Typ)), jws.ErrMalformed},
		{"crit", sign(es256, base().WithCritical("exp").WithHeader("exp", 1)), jws.ErrCrit},
		{"ES384", sign(jose.SigningKey{Algorithm: jose.ES384, Key: key384}, base()), jws.ErrAlg},
		{"HS256", sign(jose.SigningKey{Algorithm: jose.HS256, Key: bytes.Repeat([]byte("k"), 32)}, base()), jws.ErrAlg},
		{"cty", sign(es256, base().WithContentType("x")), jws.ErrMalformed},
		{"embedded jwk", sign(es256, &jose.SignerOptions{EmbedJWK: true, ExtraHeaders: map[jose.HeaderKey]any{"typ": jws.Typ, "kid": "k"}}), jws.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := jws.Parse(tc.tok); !errors.Is(err, tc.want) {
				t.Fatalf("Parse error = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestInteropToGoJose: what Sign produces, go-jose parses and verifies.
func TestInteropToGoJose(t *testing.T) {
	for i := 0; i < 8; i++ {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		kid := thumbprint(t, &key.PublicKey)
		for _, p := range interopPayloads {
			tok, err := jws.Sign(rand.Reader, key, kid, p)
			if err != nil {
				t.Fatal(err)
			}
			obj, err := jose.ParseSigned(string(tok), []jose.SignatureAlgorithm{jose.ES256})
			if err != nil {
				t.Fatalf("go-jose ParseSigned: %v", err)
			}
			got, err := obj.Verify(&key.PublicKey)
			if err != nil {
				t.Fatalf("go-jose Verify: %v", err)
			}
			if !bytes.Equal(got, p) {
				t.Errorf("go-jose payload = %q, want %q", got, p)
			}
			h := obj.Signatures[0].Protected
			if h.Algorithm != "ES256" || h.KeyID != kid || h.ExtraHeaders["typ"] != jws.Typ {
				t.Errorf("go-jose header = %+v", h)
			}
			if !bytes.Equal(tok, []byte(mustCompact(t, obj))) {
				t.Errorf("go-jose re-serializes differently")
			}
		}
	}
}

func mustCompact(t *testing.T, obj *jose.JSONWebSignature) string {
	t.Helper()
	c, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
