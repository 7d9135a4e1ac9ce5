package jws

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"math/big"
	"strings"
	"testing"
)

const testKid = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"

var enc = base64.RawURLEncoding

func testKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rawSig returns R||S over input, independent of Sign.
func rawSig(t testing.TB, key *ecdsa.PrivateKey, input string) []byte {
	t.Helper()
	h := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return sig
}

// forge builds a validly signed token with an arbitrary header JSON, so a
// test case fails for its one intended defect only.
func forge(t testing.TB, key *ecdsa.PrivateKey, header string, payload string) string {
	t.Helper()
	in := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload))
	return in + "." + enc.EncodeToString(rawSig(t, key, in))
}

func goodHeader(kid string) string {
	return `{"alg":"ES256","kid":"` + kid + `","typ":"agent-handoff+jwt"}`
}

func parts(tok string) (h, p, s string) {
	ps := strings.Split(tok, ".")
	return ps[0], ps[1], ps[2]
}

// withNonCanonicalTail sets a padding bit in the last character of a
// base64url part whose length is not a multiple of 4.
func withNonCanonicalTail(t *testing.T, part string) string {
	t.Helper()
	if len(part)%4 == 0 {
		t.Fatalf("part length %d has no trailing bits", len(part))
	}
	const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	v := strings.IndexByte(alpha, part[len(part)-1])
	return part[:len(part)-1] + string(alpha[v|1])
}

func TestSignParseVerify(t *testing.T) {
	key := testKey(t)
	payload := []byte(`{"v":1,"type":"offer"}`)
	tok, err := Sign(rand.Reader, key, testKid, payload)
	if err != nil {
		t.Fatal(err)
	}
	h, _, s := parts(string(tok))
	if got, want := mustDecode(t, h), goodHeader(testKid); got != want {
		t.Errorf("header = %s, want %s", got, want)
	}
	if len(s) != 86 {
		t.Errorf("signature part has %d chars", len(s))
	}
	tk, err := Parse(tok)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Header != (Header{Alg: ES256, Kid: testKid, Typ: Typ}) {
		t.Errorf("header = %+v", tk.Header)
	}
	if !bytes.Equal(tk.Payload, payload) {
		t.Errorf("payload = %q", tk.Payload)
	}
	if err := tk.Verify(&key.PublicKey); err != nil {
		t.Fatal(err)
	}
	// Digest is the handoff digest (draft "Handoff Digest": SHA-256 of the
	// whole compact serialization), and Verify after it uses the signing
	// input's hash taken on the way.
	if got, want := tk.Digest(), sha256.Sum256(tok); got != want {
		t.Errorf("Digest = %x, want %x", got, want)
	}
	if got, want := tk.inputHash, sha256.Sum256(tok[:bytes.LastIndexByte(tok, '.')]); got != want {
		t.Errorf("signing input hash = %x, want %x", got, want)
	}
	if err := tk.Verify(&key.PublicKey); err != nil {
		t.Fatal(err)
	}
	// A kid that needs JSON escaping round-trips.
	odd := "k\"\\é\u2028\x01"
	tok, err = Sign(rand.Reader, key, odd, payload)
	if err != nil {
		t.Fatal(err)
	}
	if tk, err = Parse(tok); err != nil || tk.Header.Kid != odd {
		t.Fatalf("Parse = %+v, %v", tk, err)
	}
	if err := tk.Verify(&key.PublicKey); err != nil {
		t.Fatal(err)
	}
}

func mustDecode(t *testing.T, s string) string {
	t.Helper()
	b, err := enc.Strict().DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSignRejects(t *testing.T) {
	key := testKey(t)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		key     *ecdsa.PrivateKey
		kid     string
		payload string
		want    error
	}{
		{"nil key", nil, "k", "p", ErrAlg},
		{"P-384 key", p384, "k", "p", ErrAlg},
		{"empty kid", key, "", "p", ErrMalformed},
		{"invalid UTF-8 kid", key, "k\xff", "p", ErrMalformed},
		{"empty payload", key, "k", "", ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Sign(rand.Reader, tc.key, tc.kid, []byte(tc.payload)); !errors.Is(err, tc.want) {
				t.Fatalf("Sign error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	key := testKey(t)
	good := forge(t, key, goodHeader(testKid), `{"v":1}`)
	gh, gp, gs := parts(good)
	sig := mustDecode(t, gs)
	input := gh + "." + gp
	derSig, err := ecdsa.SignASN1(rand.Reader, key, sha256Sum(input))
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(h string) string { return forge(t, key, h, `{"v":1}`) }

	// Header parts whose length leaves trailing bits: 2 or 3 mod 4.
	tailHdr := `{"alg":"ES256","kid":"kk","typ":"agent-handoff+jwt"}` // 52 octets -> 70 chars
	if l := len(enc.EncodeToString([]byte(tailHdr))); l%4 == 0 {
		t.Fatalf("tailHdr encodes to %d chars", l)
	}
	th := enc.EncodeToString([]byte(tailHdr))
	stdHdr := base64.RawStdEncoding.EncodeToString([]byte(`{"alg":"ES256","kid":"???>>>???>>>","typ":"agent-handoff+jwt"}`))
	if !strings.ContainsAny(stdHdr, "+/") {
		t.Fatalf("stdHdr %s has neither + nor /", stdHdr)
	}

	for _, tc := range []struct {
		name string
		tok  string
		want error
	}{
		// Structure.
		{"two parts", gh + "." + gp, ErrMalformed},
		{"four parts", good + "." + gs, ErrMalformed},
		{"one part", gh, ErrMalformed},
		{"empty input", "", ErrMalformed},
		{"only dots", "..", ErrMalformed},
		{"empty header part", "." + gp + "." + gs, ErrMalformed},
		{"empty payload part", gh + ".." + gs, ErrMalformed},
		{"empty signature part", input + ".", ErrMalformed},
		{"leading space", " " + good, ErrMalformed},
		{"trailing newline", good + "\n", ErrMalformed},
		{"CR alone", gh + "\r." + gp + "." + gs, ErrMalformed},
		{"padding inside signature", input + "." + gs[:84] + "==", ErrMalformed},
		{"CR inside signature", input + "." + gs[:40] + "\r\n" + gs[40:], ErrMalformed},

		// Base64url strictness.
		{"padding on signature", good + "==", ErrMalformed},
		{"padded header", base64.URLEncoding.EncodeToString([]byte(tailHdr)) + "." + gp + "." + gs, ErrMalformed},
		{"non-canonical header bits", withNonCanonicalTail(t, th) + "." + gp + "." + gs, ErrMalformed},
		{"non-canonical signature bits", input + "." + withNonCanonicalTail(t, gs), ErrMalformed},
		{"plus in payload", gh + ".+" + gp[1:] + "." + gs, ErrMalformed},
		{"slash in signature", input + "./" + gs[1:], ErrMalformed},
		{"std alphabet header", stdHdr + "." + gp + "." + gs, ErrMalformed},
		{"header length 1 mod 4", gh + "A." + gp + "." + gs, ErrMalformed},
		{"payload length 1 mod 4", gh + "." + gp[:len(gp)-len(gp)%4] + "A." + gs, ErrMalformed},

		// Header JSON.
		{"header not JSON", hdr(`hello`), ErrMalformed},
		{"header JSON array", hdr(`["alg","ES256","kid","k","typ","agent-handoff+jwt"]`), ErrMalformed},
		{"header JSON string", hdr(`"ES256"`), ErrMalformed},
		{"header empty object", hdr(`{}`), ErrMalformed},
		{"duplicate alg", hdr(`{"alg":"ES256","alg":"ES256","kid":"k","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"duplicate alg via escape", hdr(`{"alg":"ES256","\u0061lg":"ES256","kid":"k","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"trailing garbage", hdr(goodHeader("k") + `x`), ErrMalformed},
		{"trailing second object", hdr(goodHeader("k") + `{}`), ErrMalformed},
		{"trailing comma", hdr(`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt",}`), ErrMalformed},
		{"truncated object", hdr(`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt"`), ErrMalformed},
		{"invalid UTF-8 in kid", hdr("{\"alg\":\"ES256\",\"kid\":\"k\xff\",\"typ\":\"agent-handoff+jwt\"}"), ErrMalformed},
		{"invalid UTF-8 in name", hdr("{\"alg\":\"ES256\",\"kid\":\"k\",\"typ\":\"agent-handoff+jwt\",\"\xff\":1}"), ErrMalformed},
		{"BOM", hdr("\ufeff" + goodHeader("k")), ErrMalformed},
		{"crit with extra bad JSON", hdr(`{"crit":["exp"],"alg":"ES256","alg":"ES256"}`), ErrMalformed},

		// crit wins over every other member problem.
		{"crit", hdr(`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt","crit":["exp"],"exp":1}`), ErrCrit},
		{"crit first", hdr(`{"crit":[],"alg":"ES256","kid":"k","typ":"agent-handoff+jwt"}`), ErrCrit},
		{"crit with alg none", hdr(`{"alg":"none","kid":"k","typ":"agent-handoff+jwt","crit":["b64"],"b64":false}`), ErrCrit},
		{"crit with no alg", hdr(`{"crit":["x"]}`), ErrCrit},
		{"crit null", hdr(`{"alg":"HS256","crit":null,"typ":"JWT"}`), ErrCrit},

		// alg.
		{"alg none", hdr(`{"alg":"none","kid":"k","typ":"agent-handoff+jwt"}`), ErrAlg},
		{"alg HS256", hdr(`{"alg":"HS256","kid":"k","typ":"agent-handoff+jwt"}`), ErrAlg},
		{"alg RS256", hdr(`{"alg":"RS256","kid":"k","typ":"agent-handoff+jwt"}`), ErrAlg},
		{"alg ES384", hdr(`{"alg":"ES384","kid":"k","typ":"agent-handoff+jwt"}`), ErrAlg},
		{"alg es256", hdr(`{"alg":"es256","kid":"k","typ":"agent-handoff+jwt"}`), ErrAlg},
		{"alg ES256 with space", hdr(`{"alg":"ES256 ","kid":"k","typ":"agent-handoff+jwt"}`), ErrAlg},
		{"alg empty", hdr(`{"alg":"","kid":"k","typ":"agent-handoff+jwt"}`), ErrAlg},
		{"alg missing", hdr(`{"kid":"k","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"alg not a string", hdr(`{"alg":-7,"kid":"k","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"alg null", hdr(`{"alg":null,"kid":"k","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"alg array", hdr(`{"alg":["ES256"],"kid":"k","typ":"agent-handoff+jwt"}`), ErrMalformed},

		// typ.
		{"typ missing", hdr(`{"alg":"ES256","kid":"k"}`), ErrMalformed},
		{"typ JWT", hdr(`{"alg":"ES256","kid":"k","typ":"JWT"}`), ErrTyp},
		{"typ wrong", hdr(`{"alg":"ES256","kid":"k","typ":"agent-handoff+json"}`), ErrTyp},
		{"typ application/JWT", hdr(`{"alg":"ES256","kid":"k","typ":"application/jwt"}`), ErrTyp},
		{"typ other prefix", hdr(`{"alg":"ES256","kid":"k","typ":"applicatioX/agent-handoff+jwt"}`), ErrTyp},
		{"typ double prefix", hdr(`{"alg":"ES256","kid":"k","typ":"application/application/agent-handoff+jwt"}`), ErrTyp},
		{"typ cose", hdr(`{"alg":"ES256","kid":"k","typ":"application/agent-handoff+cbor"}`), ErrTyp},
		{"typ Kelvin sign", hdr(`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt\u212a"}`), ErrTyp},
		{"typ not a string", hdr(`{"alg":"ES256","kid":"k","typ":1}`), ErrMalformed},

		// kid.
		{"kid missing", hdr(`{"alg":"ES256","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"kid empty", hdr(`{"alg":"ES256","kid":"","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"kid number", hdr(`{"alg":"ES256","kid":42,"typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"kid null", hdr(`{"alg":"ES256","kid":null,"typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"kid object", hdr(`{"alg":"ES256","kid":{"a":"b"},"typ":"agent-handoff+jwt"}`), ErrMalformed},

		// Extra members.
		{"extra x5c", hdr(`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt","x5c":["MII"]}`), ErrMalformed},
		{"extra jwk", hdr(`{"jwk":{"kty":"EC"},"alg":"ES256","kid":"k","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"extra b64", hdr(`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt","b64":false}`), ErrMalformed},
		{"name case Alg", hdr(`{"Alg":"ES256","kid":"k","typ":"agent-handoff+jwt"}`), ErrMalformed},
		{"name case Crit", hdr(`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt","Crit":[]}`), ErrMalformed},
		{"extra member beats bad alg", hdr(`{"alg":"none","kid":"k","typ":"agent-handoff+jwt","cty":"x"}`), ErrMalformed},

		// Signature length and form.
		{"DER signature", input + "." + enc.EncodeToString(derSig), ErrMalformed},
		{"63-octet signature", input + "." + enc.EncodeToString([]byte(sig[:63])), ErrMalformed},
		{"65-octet signature", input + "." + enc.EncodeToString([]byte(sig+"\x00")), ErrMalformed},
		{"65-octet signature, leading zero", input + "." + enc.EncodeToString([]byte("\x00"+sig)), ErrMalformed},
		{"128-octet signature", input + "." + enc.EncodeToString([]byte(sig+sig)), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk, err := Parse([]byte(tc.tok))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse error = %v, want %v", err, tc.want)
			}
			t.Log(err)
			if tk != nil {
				t.Fatalf("Parse returned a token with error %v", err)
			}
			for _, s := range []error{ErrMalformed, ErrCrit, ErrAlg, ErrTyp, ErrSignature} {
				if s != tc.want && errors.Is(err, s) {
					t.Fatalf("error %v also wraps %v", err, s)
				}
			}
		})
	}
}

func sha256Sum(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func TestParseAccepts(t *testing.T) {
	key := testKey(t)
	for _, tc := range []struct {
		name, header, typ string
	}{
		{"canonical", goodHeader("k"), Typ},
		{"typ upper", `{"alg":"ES256","kid":"k","typ":"AGENT-HANDOFF+JWT"}`, "AGENT-HANDOFF+JWT"},
		{"typ application/", `{"alg":"ES256","kid":"k","typ":"application/agent-handoff+jwt"}`, "application/agent-handoff+jwt"},
		{"typ mixed case prefix", `{"alg":"ES256","kid":"k","typ":"Application/Agent-Handoff+JWT"}`, "Application/Agent-Handoff+JWT"},
		{"member order", `{"typ":"agent-handoff+jwt","kid":"k","alg":"ES256"}`, Typ},
		{"whitespace", " {\n\t\"alg\" : \"ES256\" ,\r\n\"kid\":\"k\", \"typ\":\"agent-handoff+jwt\" } \n", Typ},
		{"escaped values", `{"alg":"ES\u0032\u00356","kid":"\u006b","typ":"agent-handoff\u002bjwt"}`, Typ},
		{"escaped names", `{"\u0061lg":"ES256","ki\u0064":"k","typ":"agent-handoff+jwt"}`, Typ},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := forge(t, key, tc.header, `{"v":1}`)
			tk, err := Parse([]byte(tok))
			if err != nil {
				t.Fatal(err)
			}
			if want := (Header{Alg: ES256, Kid: "k", Typ: tc.typ}); tk.Header != want {
				t.Errorf("header = %+v, want %+v", tk.Header, want)
			}
			if string(tk.Payload) != `{"v":1}` {
				t.Errorf("payload = %q", tk.Payload)
			}
			if err := tk.Verify(&key.PublicKey); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFlips changes each character of a valid token in turn; every change
// must fail Parse or Verify.
func TestFlips(t *testing.T) {
	key := testKey(t)
	tok, err := Sign(rand.Reader, key, testKid, []byte(`{"v":1,"type":"offer","hop":"abc"}`))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, c := range tok {
		if c == '.' {
			continue
		}
		part := "header"
		if d := bytes.Count(tok[:i], []byte(".")); d == 1 {
			part = "payload"
		} else if d == 2 {
			part = "signature"
		}
		for _, repl := range []byte{'A', 'B', '_', '0'} {
			if repl == c {
				continue
			}
			m := bytes.Clone(tok)
			m[i] = repl
			// Both ways to Verify: hashing the signing input itself, and
			// reusing the hash Digest took.
			for _, digestFirst := range []bool{false, true} {
				tk, err := Parse(m)
				if err == nil {
					if digestFirst {
						tk.Digest()
					}
					err = tk.Verify(&key.PublicKey)
				}
				if err == nil {
					t.Fatalf("%s: flipping offset %d to %q still verifies (digest first: %v)", part, i, repl, digestFirst)
				}
			}
			seen[part]++
		}
	}
	if len(seen) != 3 {
		t.Fatalf("flipped parts %v", seen)
	}
}

func TestVerifyRejects(t *testing.T) {
	key := testKey(t)
	tok, err := Sign(rand.Reader, key, testKid, []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	tk, err := Parse(tok)
	if err != nil {
		t.Fatal(err)
	}
	n := p256N[:]
	nPlus1 := new(big.Int).Add(new(big.Int).SetBytes(n), big.NewInt(1)).FillBytes(make([]byte, 32))
	nMinus1 := new(big.Int).Sub(new(big.Int).SetBytes(n), big.NewInt(1)).FillBytes(make([]byte, 32))
	ff := bytes.Repeat([]byte{0xff}, 32)
	zero := make([]byte, 32)
	r, s := tk.sig[:32], tk.sig[32:]

	other := testKey(t)
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	offCurve := &ecdsa.PublicKey{Curve: elliptic.P256(), X: big.NewInt(1), Y: big.NewInt(1)}
	noXY := &ecdsa.PublicKey{Curve: elliptic.P256()}

	cat := func(a, b []byte) []byte { return append(bytes.Clone(a), b...) }
	for _, tc := range []struct {
		name string
		sig  []byte
		pub  *ecdsa.PublicKey
		want error
	}{
		{"r=0", cat(zero, s), &key.PublicKey, ErrSignature},
		{"s=0", cat(r, zero), &key.PublicKey, ErrSignature},
		{"r=N", cat(n, s), &key.PublicKey, ErrSignature},
		{"s=N", cat(r, n), &key.PublicKey, ErrSignature},
		{"r=N+1", cat(nPlus1, s), &key.PublicKey, ErrSignature},
		{"r=2^256-1", cat(ff, s), &key.PublicKey, ErrSignature},
		{"s=2^256-1", cat(r, ff), &key.PublicKey, ErrSignature},
		{"r=N-1", cat(nMinus1, s), &key.PublicKey, ErrSignature},
		{"swapped", cat(s, r), &key.PublicKey, ErrSignature},
		{"wrong key", cat(r, s), &other.PublicKey, ErrSignature},
		{"off-curve key", cat(r, s), offCurve, ErrSignature},
		{"key without point", cat(r, s), noXY, ErrSignature},
		{"P-384 key", cat(r, s), &p384.PublicKey, ErrAlg},
		{"nil key", cat(r, s), nil, ErrAlg},
		{"nil curve", cat(r, s), &ecdsa.PublicKey{}, ErrAlg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case goes through Parse: R||S out of range is
			// structurally fine and fails in Verify.
			m := append(bytes.Clone(tk.signingInput), '.')
			m = enc.AppendEncode(m, tc.sig)
			tk2, err := Parse(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := tk2.Verify(tc.pub); !errors.Is(err, tc.want) {
				t.Fatalf("Verify error = %v, want %v", err, tc.want)
			}
		})
	}

	t.Run("nil token", func(t *testing.T) {
		var nt *Token
		if err := nt.Verify(&key.PublicKey); !errors.Is(err, ErrSignature) {
			t.Fatal(err)
		}
		if err := new(Token).Verify(&key.PublicKey); !errors.Is(err, ErrSignature) {
			t.Fatal(err)
		}
	})
}

// TestHighS: (r, N-s) is also a valid ECDSA signature. It is accepted, as
// by every JWS implementation; its octets, and so its handoff digest,
// differ from the original's.
func TestHighS(t *testing.T) {
	key := testKey(t)
	tok, err := Sign(rand.Reader, key, testKid, []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	tk, _ := Parse(tok)
	N := new(big.Int).SetBytes(p256N[:])
	s := new(big.Int).SetBytes(tk.sig[32:])
	sig := append(bytes.Clone(tk.sig[:32]), new(big.Int).Sub(N, s).FillBytes(make([]byte, 32))...)
	m := enc.AppendEncode(append(bytes.Clone(tk.signingInput), '.'), sig)
	tk2, err := Parse(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := tk2.Verify(&key.PublicKey); err != nil {
		t.Fatalf("Verify(r, N-s) = %v", err)
	}
}

func TestDEREncoding(t *testing.T) {
	// Every (r, s) maps to the one DER encoding encoding/asn1 produces.
	one := make([]byte, 32)
	one[31] = 1
	high := make([]byte, 32)
	high[0] = 0x80
	mid := make([]byte, 32)
	mid[1] = 0x80 // leading zero octet, then high bit set
	small := make([]byte, 32)
	small[5] = 0x7f
	nm1 := new(big.Int).Sub(new(big.Int).SetBytes(p256N[:]), big.NewInt(1)).FillBytes(make([]byte, 32))
	vals := [][]byte{one, high, mid, small, nm1}
	for i := 0; i < 50; i++ {
		v := make([]byte, 32)
		rand.Read(v)
		vals = append(vals, v)
	}
	for _, r := range vals {
		for _, s := range vals {
			got := appendDERSignature(nil, r, s)
			want := asn1Sig(t, r, s)
			if !bytes.Equal(got, want) {
				t.Fatalf("DER(%x, %x) = %x, want %x", r, s, got, want)
			}
		}
	}
}

func TestParseDoesNotRetainPoolState(t *testing.T) {
	key := testKey(t)
	a := forge(t, key, `{"alg":"ES256","kid":"first","typ":"agent-handoff+jwt"}`, "a")
	b := forge(t, key, `{"alg":"ES256","kid":"second-kid-value","typ":"agent-handoff+jwt"}`, "b")
	ta, err := Parse([]byte(a))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse([]byte(b)); err != nil {
		t.Fatal(err)
	}
	if ta.Header.Kid != "first" {
		t.Fatalf("kid changed to %q", ta.Header.Kid)
	}
	// A large header is parsed and not pooled.
	big := forge(t, key, `{"alg":"ES256","kid":"`+strings.Repeat("k", 10000)+`","typ":"agent-handoff+jwt"}`, "c")
	tk, err := Parse([]byte(big))
	if err != nil || len(tk.Header.Kid) != 10000 {
		t.Fatalf("Parse large header: %v", err)
	}
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	key := testKey(t)
	tok, err := Sign(rand.Reader, key, testKid, bytes.Repeat([]byte("x"), 600))
	if err != nil {
		t.Fatal(err)
	}
	Parse(tok) // warm the pool
	n := testing.AllocsPerRun(100, func() {
		if _, err := Parse(tok); err != nil {
			t.Fatal(err)
		}
	})
	// Token, payload, kid.
	if n > 3 {
		t.Errorf("Parse allocates %v times", n)
	}
	// The JSON path adds only error-free pooled work and the kid.
	tok = []byte(forge(t, key, `{"typ":"agent-handoff+jwt","kid":"k","alg":"ES256"}`, "p"))
	Parse(tok)
	n = testing.AllocsPerRun(100, func() {
		if _, err := Parse(tok); err != nil {
			t.Fatal(err)
		}
	})
	if n > 3 {
		t.Errorf("Parse allocates %v times", n)
	}
}

func asn1Sig(t *testing.T, r, s []byte) []byte {
	t.Helper()
	b, err := asn1.Marshal(struct{ R, S *big.Int }{new(big.Int).SetBytes(r), new(big.Int).SetBytes(s)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}
