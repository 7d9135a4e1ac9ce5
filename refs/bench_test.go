package refs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/quantumlearningmachines/handoff"
)

// The sizes scripts/bench-refs.sh compares reference checking at.
var benchSizes = []int{1 << 10, 64 << 10, 1 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

func benchOctets(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// BenchmarkSHA256 is the floor: one SHA-256 over the octets.
func BenchmarkSHA256(b *testing.B) {
	for _, n := range benchSizes {
		octets := benchOctets(n)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				sha256.Sum256(octets)
			}
		})
	}
}

func benchCheck(b *testing.B, ref handoff.ContextRef, m *Material, n int) {
	c, err := NewChecker(Policy{RequireAll: true})
	if err != nil {
		b.Fatal(err)
	}
	refs := []handoff.ContextRef{ref}
	ctx := context.Background()
	b.SetBytes(int64(n))
	for b.Loop() {
		fs := c.CheckRefs(ctx, delegator, refs, m)
		if fs[0].Outcome != handoff.RefVerified {
			b.Fatal(fs[0].Err)
		}
	}
}

// BenchmarkCheckDigest checks one required "digest" reference against
// octets supplied by index: the cost of step 7 for it.
func BenchmarkCheckDigest(b *testing.B) {
	for _, n := range benchSizes {
		octets := benchOctets(n)
		b.Run(sizeName(n), func(b *testing.B) {
			benchCheck(b, NewDigestRef(octets, ""), &Material{Octets: map[int][]byte{0: octets}}, n)
		})
	}
}

// BenchmarkCheckSalted checks one required "salted-digest" reference.
func BenchmarkCheckSalted(b *testing.B) {
	for _, n := range benchSizes {
		octets := benchOctets(n)
		r, salt, err := NewSaltedRef(octets, "")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(sizeName(n), func(b *testing.B) {
			benchCheck(b, r, &Material{Octets: map[int][]byte{0: octets}, Salts: map[int][]byte{0: salt}}, n)
		})
	}
}

// BenchmarkCheckByObject checks one required "digest" reference against an
// object found by digest (the material indexed on each check).
func BenchmarkCheckByObject(b *testing.B) {
	for _, n := range benchSizes {
		octets := benchOctets(n)
		b.Run(sizeName(n), func(b *testing.B) {
			benchCheck(b, NewDigestRef(octets, ""), &Material{Objects: []Object{{Octets: octets}}}, n)
		})
	}
}

// BenchmarkP256Verify is the floor for the signed kinds: one bare ES256
// (P-256, SHA-256) signature verification over a short message, which a
// learnlog-head check and a SCITT receipt check each perform once.
func BenchmarkP256Verify(b *testing.B) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	h := sha256.Sum256([]byte("a short signing input, as a head's or a receipt's is"))
	sig, err := ecdsa.SignASN1(rand.Reader, key, h[:])
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if !ecdsa.VerifyASN1(&key.PublicKey, h[:], sig) {
			b.Fatal("does not verify")
		}
	}
}

// BenchmarkLearnlogHeadCheck checks one "learnlog-head" reference as it
// arrives in a JSON Handoff: JCS of the proof and its SHA-256, the
// SignedHead's shape, the JWS header, one ES256 verification and JCS of
// the head.
func BenchmarkLearnlogHeadCheck(b *testing.B) {
	key := mustKey(b)
	keys := trustFor(b, producer, &key.PublicKey)
	r, err := NewLearnlogHeadRef(testHead(), key, "")
	if err != nil {
		b.Fatal(err)
	}
	ref := carry(b, r, handoff.JSON)
	producers := []string{producer}
	for b.Loop() {
		if got, err := checkLearnlogHead(ref, keys, producers); got != handoff.RefVerified {
			b.Fatal(err)
		}
	}
}
