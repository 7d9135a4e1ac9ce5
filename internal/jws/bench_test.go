package jws

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"math/big"
	"testing"
)

// benchToken returns a ~900-octet token, its public key and a DER
// signature of the same signing input.
func benchToken(b *testing.B) (tok []byte, pub *ecdsa.PublicKey, der []byte) {
	key := testKey(b)
	payload := []byte(`{"v":1,"type":"offer","hop":"q83vEjRWeJq83vEjRWeJqw","dialog":"ctx-7f3a9c2e-4b1d-4e8a-9f6b-2c5d8e1a3b7f","task":"task-0c9e8d7f-6a5b-4c3d-2e1f-0a9b8c7d6e5f","iss":"https://agents.example.com/planner","aud":"https://agents.example.net/executor","iat":1767225600,"exp":1767225900,"obo":{"sub":"user-1234","iss":"https://idp.example.com"},"grant":{"alg":"sha-256","val":"n4bQgYhMfWWaL-qgxVrQFaO_TxsrC4Is0V1sFbDwCgg"},"prev":{"alg":"sha-256","val":"LCa0a2j_xo_5m0U8HTBBNBNCLXBkg7-g-YpeiGJm564"},"refs":[{"kind":"digest","dig":{"alg":"sha-256","val":"47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"},"loc":"https://store.example.com/ctx/1"}]}`)
	tok, err := Sign(rand.Reader, key, testKid, payload)
	if err != nil {
		b.Fatal(err)
	}
	h := sha256.Sum256(tok[:bytes.LastIndexByte(tok, '.')])
	der, err = ecdsa.SignASN1(rand.Reader, key, h[:])
	if err != nil {
		b.Fatal(err)
	}
	return tok, &key.PublicKey, der
}

// BenchmarkJWSVerify is Parse+Verify of a ~900-octet token.
func BenchmarkJWSVerify(b *testing.B) {
	tok, pub, _ := benchToken(b)
	b.SetBytes(int64(len(tok)))
	b.ReportAllocs()
	for b.Loop() {
		tk, err := Parse(tok)
		if err != nil {
			b.Fatal(err)
		}
		if err := tk.Verify(pub); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFloorVerifyASN1 is the floor: SHA-256 of the same signing input
// and ecdsa.VerifyASN1.
func BenchmarkFloorVerifyASN1(b *testing.B) {
	tok, pub, der := benchToken(b)
	input := tok[:bytes.LastIndexByte(tok, '.')]
	b.SetBytes(int64(len(tok)))
	b.ReportAllocs()
	for b.Loop() {
		h := sha256.Sum256(input)
		if !ecdsa.VerifyASN1(pub, h[:], der) {
			b.Fatal("verify failed")
		}
	}
}

// BenchmarkParse is Parse alone.
func BenchmarkParse(b *testing.B) {
	tok, _, _ := benchToken(b)
	b.SetBytes(int64(len(tok)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyRoute compares the two ways to hand R||S to crypto/ecdsa:
// a DER SEQUENCE built here and ecdsa.VerifyASN1 (what Verify does), or
// big.Ints and ecdsa.Verify.
func BenchmarkVerifyRoute(b *testing.B) {
	tok, pub, _ := benchToken(b)
	tk, err := Parse(tok)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("DER+VerifyASN1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var buf [72]byte
			der := appendDERSignature(buf[:0], tk.sig[:32], tk.sig[32:])
			h := sha256.Sum256(tk.signingInput)
			if !ecdsa.VerifyASN1(pub, h[:], der) {
				b.Fatal("verify failed")
			}
		}
	})
	b.Run("bigInt+Verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := new(big.Int).SetBytes(tk.sig[:32])
			s := new(big.Int).SetBytes(tk.sig[32:])
			h := sha256.Sum256(tk.signingInput)
			if !ecdsa.Verify(pub, h[:], r, s) {
				b.Fatal("verify failed")
			}
		}
	})
}
