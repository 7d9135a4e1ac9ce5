package gateway

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// A caller may be authenticated by a bearer JWT (RFC 7519) that an
// identity provider signed, checked against the provider's keys (a JWKS,
// RFC 7517, from a file or a URL): its issuer, its audience (the
// gateway), its lifetime and its signature; the claim that names the
// caller (sub by default) is mapped to an AgentId by inbound.jwt.
// agents_file. Only asymmetric algorithms are taken (never "none", never
// an HMAC: the gateway holds no secret shared with the provider), a key's
// algorithm must fit its type and curve, and a header with "crit" is
// refused (no extension is understood). A token that does not verify
// identifies no one: the caller is then treated as one with no token.

// Bounds on what is read from a caller and a provider.
const (
	maxJWT        = 16 << 10
	maxJWKS       = 1 << 20
	jwksRefresh   = 10 * time.Minute // keys from a URL are fetched again after this
	jwksRetry     = 30 * time.Second // at most one fetch per this, whatever the kid
	jwksFetchTime = 5 * time.Second
)

// jwtVerifier checks bearer JWTs for one inbound.jwt configuration.
type jwtVerifier struct {
	cfg    InboundJWT
	skew   time.Duration
	agents map[string]string // claim value -> AgentId
	hc     *http.Client
	log    *slog.Logger

	mu      sync.Mutex // held across a fetch: concurrent callers wait for one
	keys    []jwk
	okAt    time.Time // the keys' fetch (URL only)
	triedAt time.Time // the last fetch tried (URL only)
}

// jwk is one verification key of a JWKS.
type jwk struct {
	kid, alg string // alg: as the JWKS gives it, "" for any that fits
	pub      crypto.PublicKey
}

// agent is the AgentId tok authenticates its bearer as.
func (v *jwtVerifier) agent(ctx context.Context, tok string, now time.Time) (string, error) {
	if len(tok) > maxJWT {
		return "", fmt.Errorf("the token is over %d octets", maxJWT)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", errors.New("not a JWS in compact serialization (three base64url parts)")
	}
	hb, err1 := b64url(parts[0])
	pb, err2 := b64url(parts[1])
	sig, err3 := b64url(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", fmt.Errorf("a part is not base64url without padding: %w", err)
	}
	var hdr struct {
		Alg  string         `json:"alg"`
		Kid  string         `json:"kid"`
		Crit jsontext.Value `json:"crit"`
	}
	if err := jsonv2.Unmarshal(hb, &hdr); err != nil {
		return "", fmt.Errorf("the header is not a JSON object with unique member names: %v", err)
	}
	if hdr.Crit != nil {
		return "", errors.New(`the header has "crit": no extension is understood`)
	}
	if !slices.Contains(jwtAlgs, hdr.Alg) {
		return "", fmt.Errorf("alg %q is not taken (asymmetric only: %s)", hdr.Alg, strings.Join(jwtAlgs, ", "))
	}
	k, err := v.key(ctx, hdr.Kid, hdr.Alg, now)
	if err != nil {
		return "", err
	}
	if err := verifyJWS(k.pub, hdr.Alg, []byte(parts[0]+"."+parts[1]), sig); err != nil {
		return "", err
	}
	var c struct {
		Iss string         `json:"iss"`
		Aud jsontext.Value `json:"aud"`
		Exp *float64       `json:"exp"`
		Nbf *float64       `json:"nbf"`
	}
	var all map[string]jsontext.Value
	if err := jsonv2.Unmarshal(pb, &all); err != nil {
		return "", fmt.Errorf("the claims are not a JSON object with unique member names: %v", err)
	}
	if err := jsonv2.Unmarshal(pb, &c); err != nil {
		return "", fmt.Errorf("the claims: %v", err)
	}
	t := float64(now.Unix())
	switch {
	case c.Iss != v.cfg.Issuer:
		return "", fmt.Errorf("iss %q is not the configured issuer", c.Iss)
	case !audHas(c.Aud, v.cfg.Audience):
		return "", fmt.Errorf("aud does not name %q", v.cfg.Audience)
	case c.Exp == nil:
		return "", errors.New("no exp: a token that never expires is not taken")
	case t >= *c.Exp+v.skew.Seconds():
		return "", errors.New("expired (exp)")
	case c.Nbf != nil && t < *c.Nbf-v.skew.Seconds():
		return "", errors.New("not yet valid (nbf)")
	}
	var name string
	if cv, ok := all[v.cfg.Claim]; !ok || jsonv2.Unmarshal(cv, &name) != nil || name == "" {
		return "", fmt.Errorf("no %q claim that is a string", v.cfg.Claim)
	}
	id := v.agents[name]
	if id == "" {
		return "", fmt.Errorf("%s %q is not in inbound.jwt.agents_file", v.cfg.Claim, name)
	}
	return id, nil
}

// jwtAlgs are the algorithms taken, JWA names (RFC 7518, RFC 8037).
var jwtAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

func audHas(aud jsontext.Value, want string) bool {
	var one string
	if jsonv2.Unmarshal(aud, &one) == nil {
		return one == want
	}
	var many []string
	return jsonv2.Unmarshal(aud, &many) == nil && slices.Contains(many, want)
}

func b64url(s string) ([]byte, error) { return base64.RawURLEncoding.Strict().DecodeString(s) }

// key is the key for kid (none: the one key that fits alg), fetching the
// JWKS again when it comes from a URL and is stale or lacks kid.
func (v *jwtVerifier) key(ctx context.Context, kid, alg string, now time.Time) (jwk, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	k, err := pickKey(v.keys, kid, alg)
	if v.cfg.JWKSURL == "" {
		return k, err
	}
	stale := now.Sub(v.okAt) >= jwksRefresh
	if (err != nil || stale) && now.Sub(v.triedAt) >= jwksRetry {
		v.triedAt = now
		keys, ferr := v.fetch(ctx)
		if ferr != nil {
			// The last good keys stay: a provider that is down does not
			// lock every caller out, nor let anyone in.
			v.log.Warn("inbound.jwt: the JWKS could not be fetched; the last keys stay", "jwks_url", v.cfg.JWKSURL, "err", oneLine(ferr))
		} else {
			v.keys, v.okAt = keys, now
			k, err = pickKey(v.keys, kid, alg)
		}
	}
	return k, err
}

func pickKey(keys []jwk, kid, alg string) (jwk, error) {
	var fits []jwk
	for _, k := range keys {
		if (kid == "" || k.kid == kid) && (k.alg == "" || k.alg == alg) && keyFits(k.pub, alg) {
			fits = append(fits, k)
		}
	}
	switch {
	case len(fits) == 1:
		return fits[0], nil
	case len(fits) > 1 && kid != "":
		return jwk{}, fmt.Errorf("the JWKS has %d keys with kid %q for %s: ambiguous", len(fits), kid, alg)
	case len(fits) > 1:
		return jwk{}, fmt.Errorf("the token names no kid and the JWKS has %d keys for %s", len(fits), alg)
	}
	return jwk{}, fmt.Errorf("no key in the JWKS for kid %q and alg %s", kid, alg)
}

func (v *jwtVerifier) fetch(ctx context.Context) ([]jwk, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), jwksFetchTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.JWKSURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := v.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxJWKS {
		return nil, fmt.Errorf("the JWKS is over %d octets", maxJWKS)
	}
	return parseJWKS(b)
}

// parseJWKS reads a JWK Set's signature keys. Keys of a type or curve
// not taken, or for encryption (use "enc"), are left out; a key whose
// material is wrong fails the whole set (fail safe: a provider's set is
// taken whole or not at all).
func parseJWKS(b []byte) ([]jwk, error) {
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Use string `json:"use"`
			Alg string `json:"alg"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
			N   string `json:"n"`
			E   string `json:"e"`
		} `json:"keys"`
	}
	if err := jsonv2.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JWK Set (a JSON object with unique member names and a keys array): %v", err)
	}
	var keys []jwk
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" || k.Alg != "" && !slices.Contains(jwtAlgs, k.Alg) {
			continue // for encryption, or an algorithm not taken
		}
		var pub crypto.PublicKey
		var err error
		switch {
		case k.Kty == "RSA":
			pub, err = rsaKey(k.N, k.E)
		case k.Kty == "EC" && (k.Crv == "P-256" || k.Crv == "P-384" || k.Crv == "P-521"):
			pub, err = ecKey(k.Crv, k.X, k.Y)
		case k.Kty == "OKP" && k.Crv == "Ed25519":
			var x []byte
			if x, err = b64url(k.X); err == nil && len(x) != ed25519.PublicKeySize {
				err = fmt.Errorf("x is %d octets, not %d", len(x), ed25519.PublicKeySize)
			}
			pub = ed25519.PublicKey(x)
		default:
			continue
		}
		if err == nil && k.Alg != "" && !keyFits(pub, k.Alg) {
			err = fmt.Errorf("alg %q does not fit a %s key", k.Alg, k.Kty)
		}
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %v", i, k.Kid, err)
		}
		keys = append(keys, jwk{kid: k.Kid, alg: k.Alg, pub: pub})
	}
	if len(keys) == 0 {
		return nil, errors.New("the JWK Set holds no signature key of a type taken (RSA of 2048 bits or more, EC P-256/P-384/P-521, Ed25519)")
	}
	return keys, nil
}

func rsaKey(n, e string) (*rsa.PublicKey, error) {
	nb, err := b64url(n)
	if err != nil {
		return nil, fmt.Errorf("n: %v", err)
	}
	eb, err := b64url(e)
	if err != nil || len(eb) == 0 || len(eb) > 4 {
		return nil, errors.New("e is not a base64url integer of at most 4 octets")
	}
	ei := new(big.Int).SetBytes(eb)
	k := &rsa.PublicKey{N: new(big.Int).SetBytes(nb), E: int(ei.Int64())}
	switch {
	case k.N.BitLen() < 2048:
		return nil, fmt.Errorf("an RSA key of %d bits: 2048 at least", k.N.BitLen())
	case k.E < 3 || k.E%2 == 0:
		return nil, fmt.Errorf("RSA exponent %d", k.E)
	}
	return k, nil
}

func ecKey(crv, x, y string) (*ecdsa.PublicKey, error) {
	c := map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}[crv]
	size := (c.Params().BitSize + 7) / 8
	xb, err1 := b64url(x)
	yb, err2 := b64url(y)
	if err1 != nil || err2 != nil || len(xb) != size || len(yb) != size {
		return nil, fmt.Errorf("x and y are not base64url of %d octets each", size)
	}
	// ParseUncompressedPublicKey refuses a point not on the curve.
	return ecdsa.ParseUncompressedPublicKey(c, append(append([]byte{4}, xb...), yb...))
}

// keyFits says whether alg is an algorithm of pub's type and curve.
func keyFits(pub crypto.PublicKey, alg string) bool {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return slices.Contains(jwtAlgs[:6], alg)
	case *ecdsa.PublicKey:
		return alg == map[int]string{256: "ES256", 384: "ES384", 521: "ES512"}[k.Curve.Params().BitSize]
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// verifyJWS checks sig over signed with pub under alg (keyFits holds).
func verifyJWS(pub crypto.PublicKey, alg string, signed, sig []byte) error {
	h := map[string]crypto.Hash{"256": crypto.SHA256, "384": crypto.SHA384, "512": crypto.SHA512}[alg[len(alg)-3:]]
	var digest []byte
	switch h {
	case crypto.SHA256:
		d := sha256.Sum256(signed)
		digest = d[:]
	case crypto.SHA384:
		d := sha512.Sum384(signed)
		digest = d[:]
	case crypto.SHA512:
		d := sha512.Sum512(signed)
		digest = d[:]
	}
	ok := false
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if strings.HasPrefix(alg, "PS") {
			ok = rsa.VerifyPSS(k, h, digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash}) == nil
		} else {
			ok = rsa.VerifyPKCS1v15(k, h, digest, sig) == nil
		}
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		if len(sig) == 2*size {
			r, s := new(big.Int).SetBytes(sig[:size]), new(big.Int).SetBytes(sig[size:])
			ok = ecdsa.Verify(k, digest, r, s)
		}
	case ed25519.PublicKey:
		ok = ed25519.Verify(k, signed, sig)
	}
	if !ok {
		return fmt.Errorf("the %s signature does not verify", alg)
	}
	return nil
}
