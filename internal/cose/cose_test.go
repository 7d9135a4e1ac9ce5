package cose

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"testing"

	gocose "github.com/veraison/go-cose"
)

func key(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sign1 signs payload with a protected header edited by mut.
func sign1(t *testing.T, k *ecdsa.PrivateKey, mut func(h gocose.ProtectedHeader), payload []byte) []byte {
	s, err := gocose.NewSigner(gocose.AlgorithmES256, k)
	if err != nil {
		t.Fatal(err)
	}
	m := gocose.NewSign1Message()
	m.Headers.Protected.SetAlgorithm(gocose.AlgorithmES256)
	m.Headers.Protected[gocose.HeaderLabelContentType] = ContentType
	m.Headers.Protected[gocose.HeaderLabelKeyID] = []byte("kid-1")
	if mut != nil {
		mut(m.Headers.Protected)
	}
	m.Payload = payload
	if err := m.Sign(rand.Reader, nil, s); err != nil {
		t.Fatal(err)
	}
	b, err := m.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseAndVerify(t *testing.T) {
	k := key(t)
	b, err := Sign(rand.Reader, k, "kid-1", []byte{0xa0})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !m.HasKid || m.Kid != "kid-1" {
		t.Fatalf("kid %q", m.Kid)
	}
	if err := m.Verify(&k.PublicKey); err != nil {
		t.Fatal(err)
	}
	if err := m.Verify(&key(t).PublicKey); !errors.Is(err, ErrSignature) {
		t.Fatalf("other key: %v", err)
	}
}

// TestProfile checks the rules of draft "Signing" (COSE) and SPEC.md D1,
// D3 and D10 that go-cose leaves to its caller.
func TestProfile(t *testing.T) {
	k := key(t)
	good := sign1(t, k, nil, []byte{0xa0})
	cases := []struct {
		rule string
		msg  []byte
		want error
	}{
		{"D1: crit (label 2) is refused", sign1(t, k, func(h gocose.ProtectedHeader) { h[gocose.HeaderLabelCritical] = []any{int64(99)}; h[int64(99)] = "x" }, []byte{0xa0}), ErrCrit},
		{"D1: alg other than ES256", func() []byte {
			k384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			s, _ := gocose.NewSigner(gocose.AlgorithmES384, k384)
			m := gocose.NewSign1Message()
			m.Headers.Protected.SetAlgorithm(gocose.AlgorithmES384)
			m.Headers.Protected[gocose.HeaderLabelContentType] = ContentType
			m.Payload = []byte{0xa0}
			_ = m.Sign(rand.Reader, nil, s)
			b, _ := m.MarshalCBOR()
			return b
		}(), ErrAlg},
		{"COSE: content type must be present", sign1(t, k, func(h gocose.ProtectedHeader) { delete(h, gocose.HeaderLabelContentType) }, []byte{0xa0}), ErrContentType},
		{"D3: an integer content format is malformed", sign1(t, k, func(h gocose.ProtectedHeader) { h[gocose.HeaderLabelContentType] = int64(60) }, []byte{0xa0}), ErrContentType},
		{"COSE: wrong content type", sign1(t, k, func(h gocose.ProtectedHeader) { h[gocose.HeaderLabelContentType] = "application/cbor" }, []byte{0xa0}), ErrContentType},
		{"D3: exactly one tag 18 (two tags)", append([]byte{0xd2}, good...), ErrMalformed},
		{"D3: exactly one tag 18 (untagged)", good[1:], ErrMalformed},
		{"D3: trailing data", append(append([]byte{}, good...), 0x00), ErrMalformed},
		{"D3: truncated", good[:len(good)-1], ErrMalformed},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			if _, err := Parse(c.msg); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	// D3: the content type compares ASCII case-insensitively.
	upper := sign1(t, k, func(h gocose.ProtectedHeader) { h[gocose.HeaderLabelContentType] = "Application/Agent-Handoff+CBOR" }, []byte{0xa0})
	if _, err := Parse(upper); err != nil {
		t.Fatalf("case-insensitive content type: %v", err)
	}
	// D10: kid is read from the protected header only.
	noKid := sign1(t, k, func(h gocose.ProtectedHeader) { delete(h, gocose.HeaderLabelKeyID) }, []byte{0xa0})
	m, err := Parse(noKid)
	if err != nil || m.HasKid {
		t.Fatalf("no kid: %v %v", err, m)
	}
}

func FuzzParse(f *testing.F) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	b, _ := Sign(rand.Reader, k, "kid", []byte{0xa1, 0x61, 0x76, 0x01})
	f.Add(b)
	f.Add([]byte{0xd2, 0x84, 0x40, 0xa0, 0x40, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		_ = m.Verify(&k.PublicKey)
	})
}
