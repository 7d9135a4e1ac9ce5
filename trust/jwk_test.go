package trust

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-json-experiment/json"
)

func newPriv(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// jwkMap returns the public (or private) JWK of k as a map, to be mutated.
func jwkMap(t testing.TB, k *ecdsa.PrivateKey, private bool) map[string]any {
	t.Helper()
	var b []byte
	var err error
	if private {
		b, err = MarshalPrivateJWK(k)
	} else {
		b, err = MarshalPublicJWK(&k.PublicKey)
	}
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestThumbprintMatchesGoJose(t *testing.T) {
	for range 32 {
		k := newPriv(t)
		want, err := (&jose.JSONWebKey{Key: &k.PublicKey}).Thumbprint(crypto.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		if got := Thumbprint(&k.PublicKey); got != base64.RawURLEncoding.EncodeToString(want) {
			t.Fatalf("Thumbprint = %s, go-jose says %s", got, base64.RawURLEncoding.EncodeToString(want))
		}
	}
}

// A key whose x has leading zero octets still uses 32-octet coordinates.
func TestThumbprintShortCoordinate(t *testing.T) {
	for {
		k := newPriv(t)
		if b, _ := k.PublicKey.Bytes(); b[1] != 0 && b[33] != 0 {
			continue
		}
		want, err := (&jose.JSONWebKey{Key: &k.PublicKey}).Thumbprint(crypto.SHA256)
		if err != nil {
			t.Fatal(err)
		}
		if got := Thumbprint(&k.PublicKey); got != base64.RawURLEncoding.EncodeToString(want) {
			t.Fatalf("Thumbprint = %s, go-jose says %x", got, want)
		}
		m := jwkMap(t, k, false)
		if len(m["x"].(string)) != 43 || len(m["y"].(string)) != 43 {
			t.Fatalf("coordinates not fixed-size: %v", m)
		}
		return
	}
}

func TestThumbprintInvalid(t *testing.T) {
	k := newPriv(t)
	for name, pub := range map[string]*ecdsa.PublicKey{
		"nil":      nil,
		"no curve": {X: k.X, Y: k.Y},
		"no X":     {Curve: elliptic.P256(), Y: k.Y},
		"P-384":    &newP384(t).PublicKey,
		"params":   {Curve: elliptic.P256().Params(), X: k.X, Y: k.Y},
		"off":      {Curve: elliptic.P256(), X: k.X, Y: new(big.Int).Add(k.Y, big.NewInt(1))},
	} {
		if got := Thumbprint(pub); got != "" {
			t.Errorf("%s: Thumbprint = %q, want \"\"", name, got)
		}
		if _, err := NewKey(pub); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: NewKey error = %v, want ErrInvalidKey", name, err)
		}
		if _, err := MarshalPublicJWK(pub); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: MarshalPublicJWK error = %v, want ErrInvalidKey", name, err)
		}
	}
}

func newP384(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewKey(t *testing.T) {
	k := newPriv(t)
	key, err := NewKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if key.Alg != ES256 || key.Kid != Thumbprint(&k.PublicKey) || !key.Public.Equal(&k.PublicKey) {
		t.Fatalf("NewKey = %+v", key)
	}
}

func TestPrivateJWKRoundTrip(t *testing.T) {
	k := newPriv(t)
	b, err := MarshalPrivateJWK(k)
	if err != nil {
		t.Fatal(err)
	}
	// Member order and content as SPEC.md section 4 (keygen) says.
	for _, name := range []string{`{"kty":"EC"`, `"crv":"P-256"`, `"x":"`, `"y":"`, `"d":"`, `"alg":"ES256"`, `"kid":"` + Thumbprint(&k.PublicKey) + `"}`} {
		if !strings.Contains(string(b), name) {
			t.Errorf("private JWK %s lacks %s", b, name)
		}
	}
	got, kid, err := ParsePrivateJWK(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(k) || kid != Thumbprint(&k.PublicKey) {
		t.Fatalf("round trip: got kid %q, equal %v", kid, got.Equal(k))
	}

	// The public JWK derived from it parses to the same key, with alg and kid.
	pb, err := MarshalPublicJWK(&got.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(pb), `"d"`) || !strings.Contains(string(pb), `"alg":"ES256"`) || !strings.Contains(string(pb), `"kid":"`+kid+`"`) {
		t.Fatalf("public JWK %s", pb)
	}
	key, err := ParsePublicJWK(pb)
	if err != nil {
		t.Fatal(err)
	}
	if key.Kid != kid || key.Alg != ES256 || !key.Public.Equal(&k.PublicKey) {
		t.Fatalf("ParsePublicJWK = %+v", key)
	}

	// A given kid is kept.
	m := jwkMap(t, k, true)
	m["kid"] = "signing-2025"
	if _, kid, err := ParsePrivateJWK([]byte(mustJSON(t, m))); err != nil || kid != "signing-2025" {
		t.Fatalf("ParsePrivateJWK with kid: %q, %v", kid, err)
	}
	// Without kid and alg: thumbprint and ES256.
	delete(m, "kid")
	delete(m, "alg")
	if _, kid, err := ParsePrivateJWK([]byte(mustJSON(t, m))); err != nil || kid != Thumbprint(&k.PublicKey) {
		t.Fatalf("ParsePrivateJWK without kid: %q, %v", kid, err)
	}
}

func TestParsePrivateJWKErrors(t *testing.T) {
	k, other := newPriv(t), newPriv(t)
	ko := jwkMap(t, other, true)
	n := base64.RawURLEncoding.EncodeToString(elliptic.P256().Params().N.Bytes())
	zero := base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	for _, tc := range []struct {
		name   string
		mutate func(m map[string]any)
		want   string
	}{
		{"x of another key", func(m map[string]any) { m["x"], m["y"] = ko["x"], ko["y"] }, "not the public key of d"},
		{"d of another key", func(m map[string]any) { m["d"] = ko["d"] }, "not the public key of d"},
		{"no d", func(m map[string]any) { delete(m, "d") }, "d is missing"},
		{"no x", func(m map[string]any) { delete(m, "x") }, "x is missing"},
		{"short d", func(m map[string]any) { m["d"] = m["d"].(string)[:42] }, "d is not"},
		{"d zero", func(m map[string]any) { m["d"] = zero }, "d is not a valid P-256 private scalar"},
		{"d = n", func(m map[string]any) { m["d"] = n }, "d is not a valid P-256 private scalar"},
		{"padded d", func(m map[string]any) { m["d"] = m["d"].(string) + "=" }, "d is not base64url"},
		{"alg ES384", func(m map[string]any) { m["alg"] = "ES384" }, `alg is "ES384"`},
		{"P-384", func(m map[string]any) { m["crv"] = "P-384" }, `crv is "P-384"`},
		{"key_ops verify only", func(m map[string]any) { m["key_ops"] = []any{"verify"} }, `key_ops does not include "sign"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := jwkMap(t, k, true)
			tc.mutate(m)
			_, _, err := ParsePrivateJWK([]byte(mustJSON(t, m)))
			if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want ErrInvalidKey with %q", err, tc.want)
			}
		})
	}
	for _, b := range []string{``, `null`, `[]`, `{"kty":"EC"} x`, `{"kty":"EC","kty":"EC"}`} {
		if _, _, err := ParsePrivateJWK([]byte(b)); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ParsePrivateJWK(%q) error = %v, want ErrInvalidKey", b, err)
		}
	}
}

func TestMarshalPrivateJWKInconsistent(t *testing.T) {
	k, other := newPriv(t), newPriv(t)
	bad := *k
	bad.PublicKey = other.PublicKey
	if _, err := MarshalPrivateJWK(&bad); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("mismatched key: error = %v", err)
	}
	if _, err := MarshalPrivateJWK(nil); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("nil key: error = %v", err)
	}
	if _, err := MarshalPrivateJWK(&ecdsa.PrivateKey{PublicKey: k.PublicKey}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("no D: error = %v", err)
	}
	if _, err := MarshalPrivateJWK(newP384(t)); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("P-384: error = %v", err)
	}
}

// offCurveY returns k's x with a y that is a valid 32-octet field element
// but not on the curve.
func offCurveY(k *ecdsa.PrivateKey) string {
	b, _ := k.PublicKey.Bytes()
	y := new(big.Int).SetBytes(b[33:])
	y.Add(y, big.NewInt(1))
	y.Mod(y, elliptic.P256().Params().P)
	return base64.RawURLEncoding.EncodeToString(y.FillBytes(make([]byte, 32)))
}

func TestParsePublicJWKOffCurve(t *testing.T) {
	k := newPriv(t)
	m := jwkMap(t, k, false)
	m["y"] = offCurveY(k)
	_, err := ParsePublicJWK([]byte(mustJSON(t, m)))
	if !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), "not a point on P-256") {
		t.Fatalf("off-curve: error = %v", err)
	}
	// x = p is not a field element at all.
	m = jwkMap(t, k, false)
	m["x"] = base64.RawURLEncoding.EncodeToString(elliptic.P256().Params().P.Bytes())
	if _, err := ParsePublicJWK([]byte(mustJSON(t, m))); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("x = p: error = %v", err)
	}
}

func TestParsePublicJWKPrivate(t *testing.T) {
	k := newPriv(t)
	b, _ := MarshalPrivateJWK(k)
	if _, err := ParsePublicJWK(b); !errors.Is(err, ErrInvalidKey) || !strings.Contains(err.Error(), "d is present") {
		t.Fatalf("error = %v", err)
	}
}
