package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// ES256 is the one algorithm a trusted key carries today: ECDSA on P-256
// with SHA-256 (JWS "ES256", COSE -7).
const ES256 = "ES256"

// coordSize is the size in octets of a P-256 coordinate and private scalar.
const coordSize = 32

// ErrInvalidKey is matched (with errors.Is) by every error about a key that
// is not an acceptable ES256 P-256 key: wrong kty, crv or alg, a coordinate
// of the wrong size or encoding, a point off the curve, private material
// where a public key is expected, and so on.
var ErrInvalidKey = errors.New("trust: invalid key")

// keyError is a reason a key is invalid. Its message is the bare reason
// (callers add the context); it matches ErrInvalidKey.
type keyError string

func (e keyError) Error() string        { return string(e) }
func (e keyError) Is(target error) bool { return target == ErrInvalidKey }

func keyErrorf(format string, args ...any) error {
	return keyError(fmt.Sprintf(format, args...))
}

// jsonOptions are the strict decoding options used everywhere in this
// package. Most are the v2 defaults; they are spelled out so that the
// strictness does not depend on them.
var jsonOptions = json.JoinOptions(
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
	json.MatchCaseInsensitiveNames(false),
)

// members is a decoded JSON object: member name to raw value. Names are
// unique (duplicates are rejected while decoding).
type members map[string]jsontext.Value

// decodeValue checks that b is exactly one valid JSON value (no duplicate
// names, valid UTF-8, nothing after it) and returns it.
func decodeValue(b []byte) (jsontext.Value, error) {
	var v jsontext.Value
	if err := json.Unmarshal(b, &v, jsonOptions); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	return v, nil
}

// object decodes v, an already validated JSON value, as an object.
func object(v jsontext.Value) (members, error) {
	if v.Kind() != '{' {
		return nil, errors.New("not a JSON object")
	}
	var m members
	if err := json.Unmarshal(v, &m, jsonOptions); err != nil {
		return nil, err
	}
	return m, nil
}

// array decodes v, an already validated JSON value, as an array.
func array(v jsontext.Value) ([]jsontext.Value, error) {
	if v.Kind() != '[' {
		return nil, errors.New("not an array")
	}
	var a []jsontext.Value
	if err := json.Unmarshal(v, &a, jsonOptions); err != nil {
		return nil, err
	}
	return a, nil
}

// str returns member name as a string; present is false when the member
// is absent. A member that is present but not a string is an error.
func (m members) str(name string) (s string, present bool, err error) {
	v, ok := m[name]
	if !ok {
		return "", false, nil
	}
	if v.Kind() != '"' {
		return "", true, keyErrorf("%s is not a string", name)
	}
	if err := json.Unmarshal(v, &s, jsonOptions); err != nil {
		return "", true, keyErrorf("%s: %v", name, err)
	}
	return s, true, nil
}

// requireStr returns member name, which must be present and a string.
func (m members) requireStr(name string) (string, error) {
	s, ok, err := m.str(name)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", keyErrorf("%s is missing", name)
	}
	return s, nil
}

// unknown returns the first (in byte order) member name not in known, or
// "" when every member is known.
func (m members) unknown(known ...string) string {
	var extra []string
	for name := range m {
		if !slices.Contains(known, name) {
			extra = append(extra, name)
		}
	}
	if len(extra) == 0 {
		return ""
	}
	sort.Strings(extra)
	return extra[0]
}

// octets decodes member name as strict base64url without padding of exactly
// coordSize octets.
func (m members) octets(name string) ([]byte, error) {
	s, err := m.requireStr(name)
	if err != nil {
		return nil, err
	}
	return decodeOctets(name, s)
}

func decodeOctets(name, s string) ([]byte, error) {
	// The decoder ignores CR and LF even in strict mode, so check the
	// alphabet first: only [A-Za-z0-9_-] is base64url without padding.
	for i := 0; i < len(s); i++ {
		if !isB64u(s[i]) {
			return nil, keyErrorf("%s is not base64url without padding", name)
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, keyErrorf("%s is not canonical base64url without padding", name)
	}
	if len(b) != coordSize {
		return nil, keyErrorf("%s is not %d octets (got %d)", name, coordSize, len(b))
	}
	return b, nil
}

func isB64u(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// publicBytes returns the uncompressed SEC 1 encoding (0x04||x||y) of pub,
// or an error unless pub is a valid P-256 public key. It never panics on a
// nil or partly filled key.
func publicBytes(pub *ecdsa.PublicKey) ([]byte, error) {
	if pub == nil {
		return nil, keyError("no public key")
	}
	if pub.Curve != elliptic.P256() {
		return nil, keyError("not a P-256 key")
	}
	if pub.X == nil || pub.Y == nil {
		return nil, keyError("public key has no coordinates")
	}
	b, err := pub.Bytes() // rejects points off the curve
	if err != nil || len(b) != 1+2*coordSize {
		return nil, keyError("public key is not a point on P-256")
	}
	return b, nil
}

// cleanPublic validates pub and returns a fresh copy of it, so that a
// stored key does not share state with the caller's.
func cleanPublic(pub *ecdsa.PublicKey) (*ecdsa.PublicKey, []byte, error) {
	b, err := publicBytes(pub)
	if err != nil {
		return nil, nil, err
	}
	p, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), b)
	if err != nil {
		return nil, nil, keyError("public key is not a point on P-256")
	}
	return p, b, nil
}

// thumbprint computes the RFC 7638 thumbprint from the uncompressed point.
func thumbprint(point []byte) string {
	enc := base64.RawURLEncoding
	x := enc.EncodeToString(point[1 : 1+coordSize])
	y := enc.EncodeToString(point[1+coordSize:])
	// The required members of an EC JWK in lexicographic order, no
	// whitespace (RFC 7638 section 3.2).
	h := sha256.Sum256([]byte(`{"crv":"P-256","kty":"EC","x":"` + x + `","y":"` + y + `"}`))
	return enc.EncodeToString(h[:])
}

// Thumbprint returns the RFC 7638 JWK thumbprint of a P-256 public key:
// the base64url (no padding) SHA-256 of
// {"crv":"P-256","kty":"EC","x":"...","y":"..."} with 32-octet coordinates.
// It returns "" when pub is not a valid P-256 public key.
func Thumbprint(pub *ecdsa.PublicKey) string {
	b, err := publicBytes(pub)
	if err != nil {
		return ""
	}
	return thumbprint(b)
}

// NewKey returns pub as a trusted key: Kid is its thumbprint, Alg ES256.
// pub must be a valid P-256 public key.
func NewKey(pub *ecdsa.PublicKey) (Key, error) {
	p, b, err := cleanPublic(pub)
	if err != nil {
		return Key{}, fmt.Errorf("trust: %w", err)
	}
	return Key{Kid: thumbprint(b), Alg: ES256, Public: p}, nil
}

// GenerateKey returns a new random P-256 private key.
func GenerateKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// jwkOut is the JWK as this package writes it, members in this order.
type jwkOut struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	D   string `json:"d,omitempty"`
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

func newJWKOut(point []byte, kid string) jwkOut {
	enc := base64.RawURLEncoding
	return jwkOut{
		Kty: "EC",
		Crv: "P-256",
		X:   enc.EncodeToString(point[1 : 1+coordSize]),
		Y:   enc.EncodeToString(point[1+coordSize:]),
		Alg: ES256,
		Kid: kid,
	}
}

// MarshalPrivateJWK encodes k as a private JWK:
// {"kty":"EC","crv":"P-256","x":...,"y":...,"d":...,"alg":"ES256","kid":...}
// with 32-octet coordinates and scalar in base64url without padding, and
// the thumbprint as kid. It fails if k is not a consistent P-256 key.
func MarshalPrivateJWK(k *ecdsa.PrivateKey) ([]byte, error) {
	if k == nil || k.D == nil {
		return nil, fmt.Errorf("trust: %w", keyError("no private key"))
	}
	point, err := publicBytes(&k.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	d, err := k.Bytes()
	if err != nil || len(d) != coordSize {
		return nil, fmt.Errorf("trust: %w", keyError("d is not a valid P-256 private scalar"))
	}
	// k.Bytes does not check that the public key belongs to d.
	derived, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", keyError("d is not a valid P-256 private scalar"))
	}
	if dp, err := derived.PublicKey.Bytes(); err != nil || !bytes.Equal(dp, point) {
		return nil, fmt.Errorf("trust: %w", keyError("public key does not match d"))
	}
	out := newJWKOut(point, thumbprint(point))
	out.D = base64.RawURLEncoding.EncodeToString(d)
	return json.Marshal(out, jsonOptions)
}

// MarshalPublicJWK encodes pub as a public JWK:
// {"kty":"EC","crv":"P-256","x":...,"y":...,"alg":"ES256","kid":...}. It
// always writes alg and kid (the thumbprint), so the output can be pasted
// into a trust file.
func MarshalPublicJWK(pub *ecdsa.PublicKey) ([]byte, error) {
	point, err := publicBytes(pub)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	return json.Marshal(newJWKOut(point, thumbprint(point)), jsonOptions)
}

// ParsePublicJWK reads one public JWK, with the checks of a trust-file key:
// kty "EC", crv "P-256", x and y of 32 octets each in strict base64url
// without padding forming a point on the curve, alg absent or "ES256", no
// "d". The Key's Kid is the JWK's kid if given, else the thumbprint.
func ParsePublicJWK(b []byte) (Key, error) {
	v, err := decodeValue(b)
	if err != nil {
		return Key{}, fmt.Errorf("trust: public JWK: %w", keyError(err.Error()))
	}
	m, err := object(v)
	if err != nil {
		return Key{}, fmt.Errorf("trust: public JWK: %w", keyError(err.Error()))
	}
	p, _, kid, err := parseJWK(m, false)
	if err != nil {
		return Key{}, fmt.Errorf("trust: public JWK%s: %w", kidSuffix(kid), err)
	}
	return Key{Kid: kid, Alg: ES256, Public: p}, nil
}

// ParsePrivateJWK reads a private JWK as MarshalPrivateJWK writes it. kty,
// crv, x, y and d are required; d must be a valid 32-octet P-256 scalar,
// and x and y must be the public key it derives. The returned kid is the
// JWK's kid if given, else the thumbprint.
func ParsePrivateJWK(b []byte) (*ecdsa.PrivateKey, string, error) {
	v, err := decodeValue(b)
	if err != nil {
		return nil, "", fmt.Errorf("trust: private JWK: %w", keyError(err.Error()))
	}
	m, err := object(v)
	if err != nil {
		return nil, "", fmt.Errorf("trust: private JWK: %w", keyError(err.Error()))
	}
	_, priv, kid, err := parseJWK(m, true)
	if err != nil {
		return nil, "", fmt.Errorf("trust: private JWK%s: %w", kidSuffix(kid), err)
	}
	return priv, kid, nil
}

func kidSuffix(kid string) string {
	if kid == "" {
		return ""
	}
	return fmt.Sprintf(" (kid %q)", kid)
}

// parseJWK validates one JWK object and returns its public key, its private
// key when private is true, and its kid (given, else the thumbprint). On
// failure, kid is the best name known for the key ("" if none) so that the
// caller can name it in the error.
//
// On "use" and "key_ops" (RFC 7517 sections 4.2, 4.3): a key here only ever
// verifies (or, private, signs) ES256 signatures, so a key whose declared
// use contradicts that is rejected rather than silently used for something
// its owner said it is not for: "use", when present, must be "sig";
// "key_ops", when present, must be an array of distinct strings that
// includes "verify" (public) or "sign" (private). Other unknown members
// (x5c, ext, ...) are ignored, as RFC 7517 asks.
func parseJWK(m members, private bool) (pub *ecdsa.PublicKey, priv *ecdsa.PrivateKey, kid string, err error) {
	// The given kid names the key in errors, even before it is checked.
	given, hasKid, kidErr := m.str("kid")
	if kidErr == nil && hasKid {
		kid = given
	}
	fail := func(err error) (*ecdsa.PublicKey, *ecdsa.PrivateKey, string, error) {
		return nil, nil, kid, err
	}

	kty, err := m.requireStr("kty")
	if err != nil {
		return fail(err)
	}
	if kty != "EC" {
		return fail(keyErrorf("kty is %q, want \"EC\"", kty))
	}
	crv, err := m.requireStr("crv")
	if err != nil {
		return fail(err)
	}
	if crv != "P-256" {
		return fail(keyErrorf("crv is %q, want \"P-256\"", crv))
	}
	x, err := m.octets("x")
	if err != nil {
		return fail(err)
	}
	y, err := m.octets("y")
	if err != nil {
		return fail(err)
	}
	point := make([]byte, 0, 1+2*coordSize)
	point = append(append(append(point, 4), x...), y...)
	pub, err = ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return fail(keyError("x and y are not a point on P-256"))
	}
	if !hasKid {
		kid = thumbprint(point)
	}

	if private {
		d, err := m.octets("d")
		if err != nil {
			return fail(err)
		}
		priv, err = ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
		if err != nil {
			return fail(keyError("d is not a valid P-256 private scalar"))
		}
		if dp, err := priv.PublicKey.Bytes(); err != nil || !bytes.Equal(dp, point) {
			return fail(keyError("x and y are not the public key of d"))
		}
	} else if _, ok := m["d"]; ok {
		return fail(keyError("d is present: private key material where only a public key belongs"))
	}

	alg, hasAlg, err := m.str("alg")
	if err != nil {
		return fail(err)
	}
	if hasAlg && alg != ES256 {
		return fail(keyErrorf("alg is %q, want %q", alg, ES256))
	}
	use, hasUse, err := m.str("use")
	if err != nil {
		return fail(err)
	}
	if hasUse && use != "sig" {
		return fail(keyErrorf("use is %q, want \"sig\"", use))
	}
	if v, ok := m["key_ops"]; ok {
		op := "verify"
		if private {
			op = "sign"
		}
		if err := checkKeyOps(v, op); err != nil {
			return fail(err)
		}
	}
	if kidErr != nil {
		return fail(kidErr)
	}
	if hasKid && given == "" {
		return fail(keyError("kid is empty"))
	}
	return pub, priv, kid, nil
}

func checkKeyOps(v jsontext.Value, want string) error {
	a, err := array(v)
	if err != nil {
		return keyError("key_ops is not an array")
	}
	found := false
	seen := make([]string, 0, len(a))
	for _, e := range a {
		if e.Kind() != '"' {
			return keyError("key_ops holds a value that is not a string")
		}
		var s string
		if err := json.Unmarshal(e, &s, jsonOptions); err != nil {
			return keyErrorf("key_ops: %v", err)
		}
		if slices.Contains(seen, s) {
			return keyErrorf("key_ops lists %q twice", s)
		}
		seen = append(seen, s)
		found = found || s == want
	}
	if !found {
		return keyErrorf("key_ops does not include %q", want)
	}
	return nil
}
