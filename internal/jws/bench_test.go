package jws

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"math/big"
	"sync"
	"testing"
	"time"
)

var bench struct {
	once sync.Once
	tok  []byte
	pub  *ecdsa.PublicKey
	der  []byte
}

// benchToken returns a ~900-octet token, its public key and a DER
// signature of the same signing input, the same for every benchmark.
func benchToken(b *testing.B) (tok []byte, pub *ecdsa.PublicKey, der []byte) {
	bench.once.Do(func() { bench.tok, bench.pub, bench.der = makeBenchToken(b) })
	return bench.tok, bench.pub, bench.der
}

func makeBenchToken(b *testing.B) (tok []byte, pub *ecdsa.PublicKey, der []byte) {
	key := testKey(b)
	payload := []byte(`{"v":1,"type":"offer","hop":"q83vEjRWeJq83vEjRWeJqw","dialog":"ctx-7f3a9c2e-4b1d-4e8a-9f6b-2c5d8e1a3b7f","iss":"https://agents.example.com/planner","aud":"https://agents.example.net/executor","iat":1767225600,"exp":1767225900,"obo":{"sub":"user-1234","iss":"https://idp.example.com"},"grant":{"alg":"sha-256","val":"n4bQgYhMfWWaL-qgxVrQFaO_TxsrC4Is0V1sFbDwCgg"},"prev":{"alg":"sha-256","val":"LCa0a2j_xo_5m0U8HTBBNBNCLXBkg7-g-YpeiGJm564"},"refs":[{"kind":"digest","dig":{"alg":"sha-256","val":"47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"}}]}`)
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

// BenchmarkJWSOverFloor runs the work of BenchmarkJWSVerify and of
// BenchmarkFloorVerifyASN1 in alternating batches, so that drift in the
// machine's speed hits both alike, and reports their ratio as x-floor.
// ns/op covers one of each.
func BenchmarkJWSOverFloor(b *testing.B) {
	tok, pub, der := benchToken(b)
	input := tok[:bytes.LastIndexByte(tok, '.')]
	jwsBatch := func(n int) {
		for range n {
			tk, err := Parse(tok)
			if err != nil {
				b.Fatal(err)
			}
			if err := tk.Verify(pub); err != nil {
				b.Fatal(err)
			}
		}
	}
	floorBatch := func(n int) {
		for range n {
			h := sha256.Sum256(input)
			if !ecdsa.VerifyASN1(pub, h[:], der) {
				b.Fatal("verify failed")
			}
		}
	}
	const batch = 4
	var tj, tf time.Duration
	for i := 0; i < b.N; i += batch {
		n := min(batch, b.N-i)
		if i/batch%2 == 0 {
			t0 := time.Now()
			jwsBatch(n)
			t1 := time.Now()
			floorBatch(n)
			tj, tf = tj+t1.Sub(t0), tf+time.Since(t1)
		} else {
			t0 := time.Now()
			floorBatch(n)
			t1 := time.Now()
			jwsBatch(n)
			tf, tj = tf+t1.Sub(t0), tj+time.Since(t1)
		}
	}
	b.ReportMetric(float64(tj)/float64(tf), "x-floor")
}
