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

// TestHeaderRules checks Parse's header rules (RFC 9052 sections 1.4 and
// 3.1 as go-cose applies them, and SPEC D1) on hand-built headers: which
// are accepted, which refused as malformed, and which refused as a value
// no handoff uses (errUnused, the only refusal go-cose would not make).
// Each case also goes through the go-cose oracle.
func TestHeaderRules(t *testing.T) {
	w := cw{}
	alg := kv{w.int(nil, 1), w.int(nil, -7)}
	ct := kv{w.int(nil, 3), w.tstr(nil, ContentType)}
	nest := func(depth int) []byte {
		var b []byte
		for range depth {
			b = append(b, 0x81)
		}
		return append(b, 0x00)
	}
	many := func(n int, dupLast bool) []kv {
		es := []kv{alg, ct}
		for i := range n {
			es = append(es, kv{w.int(nil, int64(100+i)), w.int(nil, 0)})
		}
		if dupLast {
			es = append(es, kv{w.int(nil, 100), w.int(nil, 1)})
		}
		return es
	}
	const ok, bad, unused = 0, 1, 2
	cases := []struct {
		rule string
		p, u []kv
		want int
	}{
		{"a float value is accepted", []kv{alg, ct, {w.int(nil, -8), []byte{0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}}}, nil, ok},
		{"false, true, null, undefined are accepted", []kv{alg, ct, {w.int(nil, -8), []byte{0x84, 0xf4, 0xf5, 0xf6, 0xf7}}}, nil, ok},
		{"a nested map with integer and text keys is accepted", []kv{alg, ct, {w.int(nil, -8), []byte{0xa2, 0x01, 0x02, 0x61, 'a', 0x03}}}, nil, ok},
		{"RFC 9052 3: a nested map key twice is malformed", []kv{alg, ct, {w.int(nil, -8), []byte{0xa2, 0x01, 0x02, 0x01, 0x03}}}, nil, bad},
		{"RFC 9052 3: 40 distinct labels are accepted", many(40, false), nil, ok},
		{"RFC 9052 3: the 43rd label repeating the 3rd is malformed", many(40, true), nil, bad},
		{"RFC 9052 1.4: a byte-string label is malformed", []kv{alg, ct, {w.bstr(nil, []byte("l")), w.int(nil, 1)}}, nil, bad},
		{"RFC 9052 3.1: IV protected and Partial IV unprotected is malformed", []kv{alg, ct, {w.int(nil, 5), w.bstr(nil, nil)}}, []kv{{w.int(nil, 6), w.bstr(nil, nil)}}, bad},
		{"RFC 9052 3.1: a countersignature in the protected header is malformed", []kv{alg, ct, {w.int(nil, 9), w.bstr(nil, nil)}}, nil, bad},
		{"RFC 8949: an indefinite-length value is malformed", []kv{alg, ct, {w.int(nil, -8), []byte{0x9f, 0xff}}}, nil, bad},
		{"RFC 8949: a two-octet simple value below 32 is malformed", []kv{alg, ct, {w.int(nil, -8), []byte{0xf8, 0x10}}}, nil, bad},
		{"unused: a tag in the protected header", []kv{alg, ct, {w.int(nil, -8), []byte{0xc1, 0x01}}}, nil, unused},
		{"unused: a simple value other than false/true/null/undefined", []kv{alg, ct, {w.int(nil, -8), []byte{0xe0}}}, nil, unused},
		{"unused: an integer below -2^63", []kv{alg, ct, {w.int(nil, -8), []byte{0x3b, 0xff, 0, 0, 0, 0, 0, 0, 0}}}, nil, unused},
		{"unused: a byte-string key in a nested map", []kv{alg, ct, {w.int(nil, -8), []byte{0xa1, 0x41, 0x00, 0x00}}}, nil, unused},
		{"unused: nesting deeper than maxDepth", []kv{alg, ct, {w.int(nil, -8), nest(maxDepth)}}, nil, unused},
		{"nesting up to maxDepth is accepted", []kv{alg, ct, {w.int(nil, -8), nest(maxDepth - 1)}}, nil, ok},
		{"unused: a COSE_Countersignature", []kv{alg, ct}, []kv{{w.int(nil, 7), []byte{0x83, 0x40, 0xa0, 0x40}}}, unused},
	}
	k := key(t)
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			item := w.bstr(nil, w.hmap(c.p))
			b := w.assemble(item, w.hmap(c.u), []byte{0xa0}, goCoseSignOrZero(t, k, item))
			_, err := Parse(b)
			got := ok
			if err != nil {
				got = bad
				if errors.Is(err, errUnused) {
					got = unused
				}
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%v: not ErrMalformed", err)
				}
			}
			if got != c.want {
				t.Fatalf("got %d (%v), want %d", got, err, c.want)
			}
			checkOracle(t, b, &k.PublicKey)
		})
	}
}

// goCoseSignOrZero signs over protectedItem and the payload {} with
// go-cose where go-cose can (it refuses some headers), else returns 64
// zero octets.
func goCoseSignOrZero(t *testing.T, k *ecdsa.PrivateKey, protectedItem []byte) []byte {
	s, err := gocose.NewSigner(gocose.AlgorithmES256, k)
	if err != nil {
		t.Fatal(err)
	}
	m := gocose.NewSign1Message()
	m.Headers.RawProtected = protectedItem
	m.Headers.Protected.SetAlgorithm(gocose.AlgorithmES256)
	m.Payload = []byte{0xa0}
	if err := m.Sign(rand.Reader, nil, s); err != nil {
		return make([]byte, 64)
	}
	return m.Signature
}
