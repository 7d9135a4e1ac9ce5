package handoff

// BenchmarkDecodeOffer measures the receive path's decoding alone (no
// signature): ParseHandoff, then the offer's signed form and payload
// (parseElement) and its digest. Against the ~110 us of a P-256
// verification this is the part of BenchmarkVerifyOfferJWS that the
// decoder's bounds could make slower; measured alone, it is not drowned
// by the verification's noise on a shared machine.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
)

func benchDecodeHandoff(b *testing.B, f Form) []byte {
	b.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSigner(key)
	if err != nil {
		b.Fatal(err)
	}
	grant := DigestOf([]byte("grant"))
	o := &Offer{
		Hop: NewHop(), Dialog: "ctx-1", Task: "task-1",
		Iss: "https://planner.example/agent", Aud: "https://coder.example/agent",
		Iat: 1700000000, Exp: 1700000300,
		Obo:   &Principal{Sub: "alice@example.com", Iss: "https://idp.example"},
		Grant: &grant,
		Refs:  []ContextRef{{Kind: KindDigest, Dig: DigestOf([]byte("ref")), Loc: "https://store.example/r/1"}},
		Extra: map[string]any{"x-pad": strings.Repeat("p", 300)},
	}
	el, err := s.SignOffer(o, f)
	if err != nil {
		b.Fatal(err)
	}
	enc := JSON
	if f == FormCOSE {
		enc = CBOR
	}
	msg, err := (&Handoff{Offer: el}).Encode(enc)
	if err != nil {
		b.Fatal(err)
	}
	return msg
}

func benchDecode(b *testing.B, f Form) {
	msg := benchDecodeHandoff(b, f)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		h, err := ParseHandoff(msg, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		p, err := parseElement(h.Offer, "offer", defaultLimits)
		if err != nil {
			b.Fatal(err)
		}
		_ = p.digest(h.Offer)
	}
}

func BenchmarkDecodeOfferJWS(b *testing.B)  { benchDecode(b, FormJWS) }
func BenchmarkDecodeOfferCOSE(b *testing.B) { benchDecode(b, FormCOSE) }
