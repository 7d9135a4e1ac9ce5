package gateway

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// The identity provider of these tests: its keys, signing with go-jose
// (an implementation that shares no code with jwt.go), and its JWKS.
type idp struct {
	rsa  *rsa.PrivateKey
	ec   *ecdsa.PrivateKey
	ed   ed25519.PrivateKey
	jwks []byte
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	p := &idp{}
	var err error
	if p.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if p.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	if _, p.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
		t.Fatal(err)
	}
	p.jwks = jwksOf(t, jose.JSONWebKey{Key: p.rsa.Public(), KeyID: "rsa-1", Use: "sig"},
		jose.JSONWebKey{Key: p.ec.Public(), KeyID: "ec-1", Algorithm: "ES256", Use: "sig"},
		jose.JSONWebKey{Key: p.ed.Public(), KeyID: "ed-1", Use: "sig"})
	return p
}

func jwksOf(t *testing.T, keys ...jose.JSONWebKey) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sign is a compact JWS of payload under alg with the key kid names.
func (p *idp) sign(t *testing.T, alg jose.SignatureAlgorithm, kid string, payload []byte, hdr map[jose.HeaderKey]any) string {
	t.Helper()
	var key any
	switch {
	case strings.HasPrefix(string(alg), "RS"), strings.HasPrefix(string(alg), "PS"):
		key = p.rsa
	case alg == jose.ES256:
		key = p.ec
	case alg == jose.EdDSA:
		key = p.ed
	}
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	for k, v := range hdr {
		opts = opts.WithHeader(k, v)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func claims(sub string, exp time.Time, more string) []byte {
	return []byte(fmt.Sprintf(`{"iss":"https://idp.example","aud":"https://tester.example","sub":%q,"exp":%d%s}`, sub, exp.Unix(), more))
}

func testVerifier(t *testing.T, jwks []byte) *jwtVerifier {
	t.Helper()
	keys, err := parseJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	return &jwtVerifier{cfg: InboundJWT{JWKSFile: "jwks.json", Issuer: "https://idp.example", Audience: "https://tester.example", Claim: "sub"},
		skew: time.Minute, agents: map[string]string{"planner-svc": "https://planner.example"}, keys: keys, log: slog.New(slog.DiscardHandler)}
}

// TestJWTAgent: the bearer JWT rules of inbound.jwt (jwt.go), each a
// token that identifies its bearer or one that identifies no one.
func TestJWTAgent(t *testing.T) {
	p := newIDP(t)
	v := testVerifier(t, p.jwks)
	now := time.Now()
	later := now.Add(time.Hour)
	ok := claims("planner-svc", later, "")
	b64 := base64.RawURLEncoding.EncodeToString
	hs256 := func() string {
		// The classic confusion: an HMAC keyed with the public key's
		// octets, which a verifier that trusts alg would accept.
		pub, _ := json.Marshal(map[string]any{"n": p.rsa.N.Bytes()})
		in := b64([]byte(`{"alg":"HS256","kid":"rsa-1"}`)) + "." + b64(ok)
		m := hmac.New(sha256.New, pub)
		m.Write([]byte(in))
		return in + "." + b64(m.Sum(nil))
	}
	tampered := func() string {
		tok := p.sign(t, jose.ES256, "ec-1", ok, nil)
		parts := strings.Split(tok, ".")
		return parts[0] + "." + b64(claims("planner-svc", later.Add(time.Hour), "")) + "." + parts[2]
	}
	derSig := func() string {
		tok := p.sign(t, jose.ES256, "ec-1", ok, nil)
		parts := strings.Split(tok, ".")
		h := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		der, err := ecdsa.SignASN1(rand.Reader, p.ec, h[:])
		if err != nil {
			t.Fatal(err)
		}
		return parts[0] + "." + parts[1] + "." + b64(der)
	}
	for _, tc := range []struct {
		name string
		tok  string
		want string // "" with a reason in why
		why  string
	}{
		{"RS256", p.sign(t, jose.RS256, "rsa-1", ok, nil), "https://planner.example", ""},
		{"PS256", p.sign(t, jose.PS256, "rsa-1", ok, nil), "https://planner.example", ""},
		{"ES256", p.sign(t, jose.ES256, "ec-1", ok, nil), "https://planner.example", ""},
		{"EdDSA", p.sign(t, jose.EdDSA, "ed-1", ok, nil), "https://planner.example", ""},
		{"no kid: the one key of the type", p.sign(t, jose.ES256, "", ok, nil), "https://planner.example", ""},
		{"aud as an array", p.sign(t, jose.ES256, "ec-1", []byte(fmt.Sprintf(`{"iss":"https://idp.example","aud":["x","https://tester.example"],"sub":"planner-svc","exp":%d}`, later.Unix())), nil), "https://planner.example", ""},
		{"expired within the skew", p.sign(t, jose.ES256, "ec-1", claims("planner-svc", now.Add(-30*time.Second), ""), nil), "https://planner.example", ""},
		{"expired", p.sign(t, jose.ES256, "ec-1", claims("planner-svc", now.Add(-2*time.Minute), ""), nil), "", "expired"},
		{"not yet valid", p.sign(t, jose.ES256, "ec-1", claims("planner-svc", later, fmt.Sprintf(`,"nbf":%d`, later.Add(-time.Minute).Unix())), nil), "", "nbf"},
		{"no exp", p.sign(t, jose.ES256, "ec-1", []byte(`{"iss":"https://idp.example","aud":"https://tester.example","sub":"planner-svc"}`), nil), "", "no exp"},
		{"another issuer", p.sign(t, jose.ES256, "ec-1", []byte(strings.Replace(string(ok), "idp.example", "evil.example", 1)), nil), "", "issuer"},
		{"another audience", p.sign(t, jose.ES256, "ec-1", []byte(strings.Replace(string(ok), "tester.example", "other.example", 1)), nil), "", "aud"},
		{"a subject not mapped", p.sign(t, jose.ES256, "ec-1", claims("intruder", later, ""), nil), "", "not in inbound.jwt.agents_file"},
		{"two sub claims", p.sign(t, jose.ES256, "ec-1", []byte(strings.Replace(string(ok), `"sub":"planner-svc"`, `"sub":"x","sub":"planner-svc"`, 1)), nil), "", "unique member names"},
		{"alg none", b64([]byte(`{"alg":"none"}`)) + "." + b64(ok) + ".", "", `alg "none"`},
		{"HS256 keyed with the public key", hs256(), "", `alg "HS256"`},
		{"a key of another type", p.sign(t, jose.RS256, "ec-1", ok, nil), "", "no key"},
		{"an unknown kid", p.sign(t, jose.ES256, "ec-9", ok, nil), "", "no key"},
		{"tampered claims", tampered(), "", "does not verify"},
		{"an ECDSA signature in DER", derSig(), "", "does not verify"},
		{"crit", p.sign(t, jose.ES256, "ec-1", ok, map[jose.HeaderKey]any{"crit": []string{"exp"}, "exp": 1}), "", "crit"},
		{"padded base64", p.sign(t, jose.ES256, "ec-1", ok, nil) + "=", "", "base64url"},
		{"oversized", strings.Repeat("a", maxJWT) + ".b.c", "", "over"},
		{"not three parts", "a.b", "", "compact"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.agent(context.Background(), tc.tok, now)
			if got != tc.want || tc.want == "" && (err == nil || !strings.Contains(err.Error(), tc.why)) {
				t.Fatalf("agent = %q, %v; want %q (error containing %q)", got, err, tc.want, tc.why)
			}
		})
	}
}

// TestParseJWKS: a provider's key set is taken whole or not at all; keys
// for encryption or of a type not taken are left out.
func TestParseJWKS(t *testing.T) {
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	x, y := ec.X.FillBytes(make([]byte, 32)), ec.Y.FillBytes(make([]byte, 32))
	y[31] ^= 1 // off the curve
	b64 := base64.RawURLEncoding.EncodeToString
	for _, tc := range []struct {
		name, jwks, why string
		n               int
	}{
		{"a small RSA key", string(jwksOf(t, jose.JSONWebKey{Key: small.Public(), KeyID: "r"})), "2048", 0},
		{"a point off the curve", fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","x":%q,"y":%q}]}`, b64(x), b64(y)), "key 0", 0},
		{"an alg that does not fit", string(jwksOf(t, jose.JSONWebKey{Key: ec.Public(), KeyID: "e", Algorithm: "ES384"})), "does not fit", 0},
		{"encryption keys left out", fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","use":"enc","x":"AA","y":"AA"},{"kty":"oct","k":"AA"},%s]}`,
			strings.TrimSuffix(strings.TrimPrefix(string(jwksOf(t, jose.JSONWebKey{Key: ec.Public(), KeyID: "e"})), `{"keys":[`), `]}`)), "", 1},
		{"no key taken", `{"keys":[{"kty":"oct","k":"AA"}]}`, "no signature key", 0},
		{"two keys members", `{"keys":[],"keys":[]}`, "unique member names", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := parseJWKS([]byte(tc.jwks))
			if len(keys) != tc.n || tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)) {
				t.Fatalf("parseJWKS = %d keys, %v; want %d (%q)", len(keys), err, tc.n, tc.why)
			}
		})
	}
}

// TestJWKSFromURL: keys from jwks_url are fetched when first needed,
// again for an unknown kid (a rotation) but at most every jwksRetry, and
// kept when the provider fails.
func TestJWKSFromURL(t *testing.T) {
	p := newIDP(t)
	var fetches atomic.Int32
	var body atomic.Pointer[[]byte]
	fail := atomic.Bool{}
	body.Store(&p.jwks)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		if fail.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Write(*body.Load())
	}))
	defer srv.Close()
	v := testVerifier(t, p.jwks)
	v.cfg.JWKSFile, v.cfg.JWKSURL, v.keys, v.hc = "", srv.URL, nil, srv.Client()
	now := time.Now()
	ctx := context.Background()
	tok := p.sign(t, jose.ES256, "ec-1", claims("planner-svc", now.Add(time.Hour), ""), nil)
	if id, err := v.agent(ctx, tok, now); id != "https://planner.example" || fetches.Load() != 1 {
		t.Fatalf("first token: %q %v, %d fetches", id, err, fetches.Load())
	}
	v.agent(ctx, tok, now.Add(time.Second))
	if fetches.Load() != 1 {
		t.Fatalf("fresh keys fetched again: %d fetches", fetches.Load())
	}
	// The provider rotates to a new EC key.
	ec2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rotated := jwksOf(t, jose.JSONWebKey{Key: ec2.Public(), KeyID: "ec-2", Use: "sig"})
	body.Store(&rotated)
	p.ec = ec2
	tok2 := p.sign(t, jose.ES256, "ec-2", claims("planner-svc", now.Add(time.Hour), ""), nil)
	if id, _ := v.agent(ctx, tok2, now.Add(2*time.Second)); id != "" || fetches.Load() != 1 {
		t.Fatalf("an unknown kid within jwksRetry: %q, %d fetches (want no new fetch)", id, fetches.Load())
	}
	if id, err := v.agent(ctx, tok2, now.Add(jwksRetry+time.Second)); id != "https://planner.example" || fetches.Load() != 2 {
		t.Fatalf("after the rotation: %q %v, %d fetches", id, err, fetches.Load())
	}
	fail.Store(true)
	if id, err := v.agent(ctx, tok2, now.Add(jwksRefresh+time.Minute)); id != "https://planner.example" || fetches.Load() != 3 {
		t.Fatalf("the provider down: %q %v, %d fetches (the last keys should stay)", id, err, fetches.Load())
	}
}

// TestMCPGatewayJWTIdentity: a caller authenticated by a bearer JWT as
// the offer's iss gets the recorded status on a retransmission; one whose
// JWT names no mapped caller, or has expired, gets none (the draft's
// resend rule). The gateway reads the JWKS from inbound.jwt.jwks_url.
func TestMCPGatewayJWTIdentity(t *testing.T) {
	p := newIDP(t)
	keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(p.jwks) }))
	defer keys.Close()
	dir := t.TempDir()
	agents := filepath.Join(dir, "agents.json")
	if err := os.WriteFile(agents, []byte(`{"planner-svc": "https://planner.example"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://tester.example", key_env: UNUSED}
trust_file: trust.json
inbound:
  jwt: {jwks_url: %q, issuer: "https://idp.example", agents_file: %q}
routes:
  - {name: tools, protocol: mcp, path: /tools/, upstream: "http://127.0.0.1:1/mcp"}
`, keys.URL, agents)), dir)
	if err != nil {
		t.Fatal(err)
	}
	if j := c.Inbound.JWT; j.Audience != "https://tester.example" || j.Claim != "sub" {
		t.Fatalf("inbound.jwt defaults: %+v", j)
	}
	v, at, err := newJWTVerifier(c.Inbound.JWT, time.Minute)
	if err != nil {
		t.Fatalf("%s: %v", at, err)
	}
	r := newMCPRig(t, "without_handoff: reject")
	r.gw.setJWT(v)

	hc, cs := r.connect(t, plannerToken, nil)
	ctx := context.Background()
	h, _ := r.offer(t, cs, "run the tests")
	rep, err := hc.Call(ctx, cs, call("ok"), h)
	if err != nil || rep.State != handoff.StateCompleted {
		t.Fatalf("first call: %+v %v", rep, err)
	}
	hv, err := mcphandoff.HandoffValue(h, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		name   string
		tok    string
		resent bool
	}{
		{"the offer's iss", p.sign(t, jose.RS256, "rsa-1", claims("planner-svc", now.Add(time.Hour), ""), nil), true},
		{"a caller not mapped", p.sign(t, jose.RS256, "rsa-1", claims("someone", now.Add(time.Hour), ""), nil), false},
		{"expired", p.sign(t, jose.RS256, "rsa-1", claims("planner-svc", now.Add(-time.Hour), ""), nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, other := r.connect(t, tc.tok, nil)
			params := call("ok")
			params.Meta = mcp.Meta{mcphandoff.Key: hv}
			got, err := other.CallTool(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if resent := got.Meta[mcphandoff.Key] != nil; resent != tc.resent {
				t.Fatalf("status resent: %v, want %v (%s)", resent, tc.resent, resultText(got))
			}
		})
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times", n)
	}
	if ok, refused := testutil.ToFloat64(r.gw.metrics.jwts.WithLabelValues("ok")), testutil.ToFloat64(r.gw.metrics.jwts.WithLabelValues("refused")); ok < 1 || refused < 2 {
		t.Errorf("inbound_jwts_total: ok %v, refused %v", ok, refused)
	}
	if logs := r.logs.String(); !strings.Contains(logs, "expired (exp)") || strings.Contains(logs, "eyJ") {
		t.Errorf("the log should say why a JWT identifies no one, never quote it:\n%s", logs)
	}
}
