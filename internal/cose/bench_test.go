package cose

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	gocose "github.com/veraison/go-cose"
)

// --- benchmarks ------------------------------------------------------------

// benchMessage is a ~900-octet message signed by Sign.
func benchMessage(b *testing.B) (*ecdsa.PrivateKey, []byte) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	payload := []byte(strings.Repeat("x", 780))
	msg, err := Sign(rand.Reader, k, "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs", payload)
	if err != nil {
		b.Fatal(err)
	}
	return k, msg
}

// BenchmarkReceive is the receive of a COSE offer: Parse, then Verify.
func BenchmarkReceive(b *testing.B) {
	k, msg := benchMessage(b)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := Parse(msg)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Verify(&k.PublicKey); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceiveGoCose is the receive as go-cose does it:
// go-cose decoding, then go-cose verification with a cached verifier (the
// profile checks, a few map look-ups, are left out).
func BenchmarkReceiveGoCose(b *testing.B) {
	k, msg := benchMessage(b)
	v, err := gocose.NewVerifier(gocose.AlgorithmES256, &k.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		var m gocose.Sign1Message
		if err := m.UnmarshalCBOR(msg); err != nil {
			b.Fatal(err)
		}
		if err := m.Verify(nil, v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReceiveVsFloor alternates the receive (Parse + Verify) and the
// floor (SHA-256 + ecdsa.VerifyASN1 of the same octets) in one loop, so
// that both see the same machine load, and reports their ratio.
func BenchmarkReceiveVsFloor(b *testing.B) {
	k, msg := benchMessage(b)
	benchVsFloor(b, k, msg, func() {
		m, err := Parse(msg)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Verify(&k.PublicKey); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkReceiveGoCoseVsFloor is BenchmarkReceiveVsFloor for the receive
// as BenchmarkReceiveGoCose does it.
func BenchmarkReceiveGoCoseVsFloor(b *testing.B) {
	k, msg := benchMessage(b)
	v, err := gocose.NewVerifier(gocose.AlgorithmES256, &k.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	benchVsFloor(b, k, msg, func() {
		var m gocose.Sign1Message
		if err := m.UnmarshalCBOR(msg); err != nil {
			b.Fatal(err)
		}
		if err := m.Verify(nil, v); err != nil {
			b.Fatal(err)
		}
	})
}

func benchVsFloor(b *testing.B, k *ecdsa.PrivateKey, msg []byte, receive func()) {
	m0, err := Parse(msg)
	if err != nil {
		b.Fatal(err)
	}
	tbs := toBeSigned(m0)
	der := appendDERSignature(nil, m0.sig[:32], m0.sig[32:])
	bare := func() {
		h := sha256.Sum256(tbs)
		if !ecdsa.VerifyASN1(&k.PublicKey, h[:], der) {
			b.Fatal("verify")
		}
	}
	var recv, floor time.Duration
	odd := false
	for b.Loop() {
		// Alternate which goes first, so that neither gains from order.
		odd = !odd
		if odd {
			t0 := time.Now()
			receive()
			t1 := time.Now()
			bare()
			recv, floor = recv+t1.Sub(t0), floor+time.Since(t1)
		} else {
			t0 := time.Now()
			bare()
			t1 := time.Now()
			receive()
			floor, recv = floor+t1.Sub(t0), recv+time.Since(t1)
		}
	}
	b.ReportMetric(float64(recv)/float64(b.N), "receive-ns/op")
	b.ReportMetric(float64(floor)/float64(b.N), "floor-ns/op")
	b.ReportMetric(float64(recv)/float64(floor), "ratio")
}

// BenchmarkFloor is a bare ES256 verify of the same octets: SHA-256 of the
// ToBeSigned octets and ecdsa.VerifyASN1 with a ready DER signature.
func BenchmarkFloor(b *testing.B) {
	k, msg := benchMessage(b)
	m, err := Parse(msg)
	if err != nil {
		b.Fatal(err)
	}
	tbs := toBeSigned(m)
	der := appendDERSignature(nil, m.sig[:32], m.sig[32:])
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		h := sha256.Sum256(tbs)
		if !ecdsa.VerifyASN1(&k.PublicKey, h[:], der) {
			b.Fatal("verify")
		}
	}
}

// BenchmarkParse is Parse alone.
func BenchmarkParse(b *testing.B) {
	_, msg := benchMessage(b)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseGoCose is the go-cose oracle's parse, for comparison.
func BenchmarkParseGoCose(b *testing.B) {
	_, msg := benchMessage(b)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := oracleParse(msg); err != nil {
			b.Fatal(err)
		}
	}
}
