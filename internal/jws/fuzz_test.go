package jws

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"
)

func FuzzParse(f *testing.F) {
	key := testKey(f)
	good, err := Sign(rand.Reader, key, testKid, []byte(`{"v":1,"type":"offer"}`))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, h := range []string{
		goodHeader("k"),
		`{"typ":"APPLICATION/agent-handoff+jwt","kid":"\u006b","alg":"ES256"} `,
		`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt","crit":["exp"]}`,
		`{"alg":"none","kid":"k","typ":"agent-handoff+jwt"}`,
		`{"alg":"ES256","alg":"ES256","kid":"k","typ":"agent-handoff+jwt"}`,
		`{"alg":"ES256","kid":1,"typ":"JWT","x":[{}]}`,
		`[]`,
	} {
		f.Add([]byte(forge(f, key, h, `{"v":1}`)))
	}
	for _, s := range []string{"", "..", "a.b.c", "e30.e30.", "e30=.e30.AA", "e30\n.e30.AA"} {
		f.Add([]byte(s))
	}
	pub := &key.PublicKey
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		tk, err := Parse(in)
		if !bytes.Equal(in, orig) {
			t.Fatal("Parse modified its input")
		}
		if err != nil {
			if tk != nil {
				t.Fatal("token with error")
			}
			n := 0
			for _, s := range []error{ErrMalformed, ErrCrit, ErrAlg, ErrTyp} {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %v wraps %d sentinels", err, n)
			}
			return
		}
		// Accepted: the parts re-serialize to the input octets. The header
		// is re-encoded from a lenient (non-strict) decoding, so accepting
		// non-canonical trailing bits would show here.
		hp := in[:bytes.IndexByte(in, '.')]
		hdr, err := base64.RawURLEncoding.DecodeString(string(hp))
		if err != nil {
			t.Fatalf("accepted header part does not decode: %v", err)
		}
		var re []byte
		re = enc.AppendEncode(re, hdr)
		re = append(re, '.')
		re = enc.AppendEncode(re, tk.Payload)
		if !bytes.Equal(re, tk.signingInput) {
			t.Fatalf("signing input %q does not re-serialize (%q)", tk.signingInput, re)
		}
		re = append(re, '.')
		re = enc.AppendEncode(re, tk.sig[:])
		if !bytes.Equal(re, in) {
			t.Fatalf("re-serialized %q != input %q", re, in)
		}
		var viaJSON Header
		if err := parseHeaderJSON(&viaJSON, hdr); err != nil || viaJSON != tk.Header {
			t.Fatalf("JSON path gives %+v, %v; Parse gave %+v", viaJSON, err, tk.Header)
		}
		if tk.Header.Alg != ES256 || tk.Header.Kid == "" || !typOK([]byte(tk.Header.Typ)) {
			t.Fatalf("accepted header %+v", tk.Header)
		}
		// Verify never panics; a fuzzed token verifying under a random
		// key other than the seed's would be a forgery.
		if err := tk.Verify(pub); err != nil && !errors.Is(err, ErrSignature) {
			t.Fatalf("Verify: %v", err)
		}
		if err := tk.Verify(&other.PublicKey); err == nil {
			t.Fatal("verifies under an unrelated key")
		}
	})
}

// FuzzCanonicalHeader checks that the canonical-header shortcut accepts
// only what the strict JSON path accepts, with the same result.
func FuzzCanonicalHeader(f *testing.F) {
	for _, kid := range []string{"k", testKid, "a b", `a\"b`, "é", "\x7f", "\x1f", ""} {
		f.Add([]byte(canonPrefix + kid + canonSuffix))
	}
	f.Add([]byte(goodHeader("k") + " "))
	f.Fuzz(func(t *testing.T, raw []byte) {
		kid, ok := canonicalKid(raw)
		var h Header
		err := parseHeaderJSON(&h, raw)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("shortcut accepted %q, JSON path: %v", raw, err)
		}
		if want := (Header{Alg: ES256, Kid: string(kid), Typ: Typ}); h != want {
			t.Fatalf("JSON path %+v, shortcut %+v", h, want)
		}
	})
}
