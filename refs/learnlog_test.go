package refs

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/jcs"
	"github.com/quantumlearningmachines/handoff/internal/wire"
	"github.com/quantumlearningmachines/handoff/trust"
)

const producer = "https://tutor.example/agent"

func testHead() LearnlogHead {
	return LearnlogHead{
		RecordHash: b64u.EncodeToString(sha256.New().Sum(nil)),
		Seq:        42,
		EntryHash:  b64u.EncodeToString(make([]byte, 32)),
		Time:       1767225600,
		Extra:      map[string]any{"note": "ünïcødé \U0001F600", "nested": map[string]any{"b": uint64(1), "a": []any{true, nil}}},
	}
}

func mustKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func trustFor(t testing.TB, agent string, pubs ...*ecdsa.PublicKey) *trust.Config {
	t.Helper()
	c := trust.New()
	for _, p := range pubs {
		k, err := trust.NewKey(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Add(agent, k); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// carry puts ref into an offer, encodes the offer in enc and decodes it
// again, so the proof is the value tree a real JSON or CBOR Handoff yields.
func carry(t testing.TB, ref handoff.ContextRef, enc handoff.Encoding) handoff.ContextRef {
	t.Helper()
	now := time.Now().Unix()
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "d", Iss: producer, Aud: "https://b.example", Iat: now, Exp: now + 60, Refs: []handoff.ContextRef{ref}}
	b, err := o.Encode(enc)
	if err != nil {
		t.Fatalf("encode offer in %v: %v", enc, err)
	}
	back, err := handoff.DecodeOffer(b, enc)
	if err != nil {
		t.Fatalf("decode offer in %v: %v", enc, err)
	}
	return back.Refs[0]
}

// signCompact signs payload under an arbitrary protected header.
func signCompact(t testing.TB, key *ecdsa.PrivateKey, header string, payload []byte) string {
	t.Helper()
	in := b64u.EncodeToString([]byte(header)) + "." + b64u.EncodeToString(payload)
	h := sha256.Sum256([]byte(in))
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		t.Fatal(err)
	}
	var sig [64]byte
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return in + "." + b64u.EncodeToString(sig[:])
}

func kidHeader(key *ecdsa.PrivateKey) string {
	return `{"alg":"ES256","kid":"` + trust.Thumbprint(&key.PublicKey) + `"}`
}

func headOf(sh map[string]any) map[string]any { return sh["head"].(map[string]any) }

func TestLearnlogHead(t *testing.T) {
	key := mustKey(t)
	other := mustKey(t)
	keys := trustFor(t, producer, &key.PublicKey)

	type env struct {
		sh        map[string]any // the SignedHead, mutable
		ref       *handoff.ContextRef
		producers *[]string
		keys      *handoff.KeySource
	}
	cases := []struct {
		rule   string
		mutate func(e env)
		redig  bool // recompute dig after mutate, to reach the later checks
		want   handoff.RefOutcome
		where  string // what the error must name
	}{
		{rule: "SPEC 5: dig, signature and payload all check", want: handoff.RefVerified},
		{rule: "draft Digest: dig alg not implemented is unverifiable", mutate: func(e env) { e.ref.Dig.Alg = "sha-512" }, want: handoff.RefUnverifiable, where: "dig"},
		{rule: "draft appendix: no proof, nothing to check", mutate: func(e env) { e.ref.Proof = nil }, want: handoff.RefUnverifiable, where: "proof"},
		{rule: "SPEC 5: dig is SHA-256 of JCS(SignedHead)", mutate: func(e env) { e.ref.Dig.Val[0] ^= 1 }, want: handoff.RefMismatch, where: "dig"},
		{rule: "SPEC 5: a changed head no longer matches dig", mutate: func(e env) { headOf(e.sh)["seq"] = uint64(43) }, want: handoff.RefMismatch, where: "dig"},
		{rule: "SPEC 5: signature checked (one bit flipped)", redig: true, mutate: func(e env) {
			j := []byte(e.sh["jws"].(string))
			p := strings.LastIndexByte(string(j), '.') + 5
			// Another base64url character, so the signature still decodes
			// (an XOR could leave the alphabet and fail elsewhere).
			if j[p] == 'A' {
				j[p] = 'B'
			} else {
				j[p] = 'A'
			}
			e.sh["jws"] = string(j)
		}, want: handoff.RefMismatch, where: "signature does not verify"},
		{rule: "SPEC 5: signed by another key under the trusted key's kid", redig: true, mutate: func(e env) {
			p, _ := jcs.Marshal(headOf(e.sh))
			e.sh["jws"] = signCompact(t, other, kidHeader(key), p)
		}, want: handoff.RefMismatch, where: "signature does not verify"},
		{rule: "SPEC 5 / D1 untrusted-key: producer not trusted", mutate: func(e env) { *e.producers = []string{"https://stranger.example"} }, want: handoff.RefUnverifiable, where: "no key trusted"},
		{rule: "SPEC 5: no producer given", mutate: func(e env) { *e.producers = nil }, want: handoff.RefUnverifiable, where: "producer"},
		{rule: "SPEC 5: no trust configuration", mutate: func(e env) { *e.keys = nil }, want: handoff.RefUnverifiable, where: "producer"},
		{rule: "D10: kid names no key of the producer", redig: true, mutate: func(e env) {
			p, _ := jcs.Marshal(headOf(e.sh))
			e.sh["jws"] = signCompact(t, other, kidHeader(other), p)
		}, want: handoff.RefUnverifiable, where: "kid"},
		{rule: "SPEC 5: payload must equal JCS(head) (signed non-canonical JSON)", redig: true, mutate: func(e env) {
			p, _ := wire.EncodeJSON(headOf(e.sh))
			e.sh["jws"] = signCompact(t, key, kidHeader(key), append([]byte(" "), p...))
		}, want: handoff.RefMismatch, where: "payload"},
		{rule: "SPEC 5: payload must equal JCS(head) (head changed after signing)", redig: true, mutate: func(e env) { headOf(e.sh)["seq"] = uint64(41) }, want: handoff.RefMismatch, where: "payload"},
		{rule: "SPEC 5: SignedHead is closed", redig: true, mutate: func(e env) { e.sh["kid"] = "x" }, want: handoff.RefMismatch, where: `"kid"`},
		{rule: "SPEC 5: head missing", redig: true, mutate: func(e env) { delete(e.sh, "head") }, want: handoff.RefMismatch, where: "head: missing"},
		{rule: "SPEC 5: jws missing", redig: true, mutate: func(e env) { delete(e.sh, "jws") }, want: handoff.RefMismatch, where: "jws: missing"},
		{rule: "SPEC 5: jws is text", redig: true, mutate: func(e env) { e.sh["jws"] = uint64(1) }, want: handoff.RefMismatch, where: "jws"},
		{rule: "SPEC 5: head is a map", redig: true, mutate: func(e env) { e.sh["head"] = "h" }, want: handoff.RefMismatch, where: "head"},
		{rule: "SPEC 5: proof is a map", redig: true, mutate: func(e env) { e.ref.Proof = []any{"x"} }, want: handoff.RefMismatch, where: "SignedHead"},
		{rule: "SPEC 5: record_hash required", redig: true, mutate: func(e env) { delete(headOf(e.sh), "record_hash") }, want: handoff.RefMismatch, where: "head.record_hash"},
		{rule: "SPEC 5: entry_hash is B64u", redig: true, mutate: func(e env) { headOf(e.sh)["entry_hash"] = "AA==" }, want: handoff.RefMismatch, where: "head.entry_hash"},
		{rule: "SPEC 5: record_hash is text", redig: true, mutate: func(e env) { headOf(e.sh)["record_hash"] = uint64(7) }, want: handoff.RefMismatch, where: "head.record_hash"},
		{rule: "SPEC 5: seq required", redig: true, mutate: func(e env) { delete(headOf(e.sh), "seq") }, want: handoff.RefMismatch, where: "head.seq"},
		{rule: "SPEC 5: seq is uint, not text", redig: true, mutate: func(e env) { headOf(e.sh)["seq"] = "42" }, want: handoff.RefMismatch, where: "head.seq"},
		{rule: "SPEC 5: seq is uint, not negative", redig: true, mutate: func(e env) { headOf(e.sh)["seq"] = int64(-1) }, want: handoff.RefMismatch, where: "head.seq"},
		{rule: "SPEC 5: seq is an integer, not 42.0", redig: true, mutate: func(e env) { headOf(e.sh)["seq"] = wire.Number("42.5") }, want: handoff.RefMismatch, where: "head.seq"},
		{rule: "SPEC 5: time is Time (uint)", redig: true, mutate: func(e env) { headOf(e.sh)["time"] = true }, want: handoff.RefMismatch, where: "head.time"},
		{rule: "SPEC 5: seq of 2^53 is beyond the profile", redig: true, mutate: func(e env) { headOf(e.sh)["seq"] = uint64(1 << 53) }, want: handoff.RefMismatch, where: "head.seq"},
		{rule: "JCS: seq of 2^53+1 has no exact JCS form, dig cannot match", mutate: func(e env) { headOf(e.sh)["seq"] = uint64(1<<53 + 1) }, want: handoff.RefMismatch, where: "head.seq"},
		{rule: "RFC 7515: compact JWS has three parts", redig: true, mutate: func(e env) { e.sh["jws"] = "a.b" }, want: handoff.RefMismatch, where: "proof.jws"},
		{rule: "D2: alg other than ES256 refused", redig: true, mutate: func(e env) {
			p, _ := jcs.Marshal(headOf(e.sh))
			e.sh["jws"] = signCompact(t, key, `{"alg":"ES384","kid":"`+trust.Thumbprint(&key.PublicKey)+`"}`, p)
		}, want: handoff.RefMismatch, where: "alg"},
		{rule: "D1: crit refused", redig: true, mutate: func(e env) {
			p, _ := jcs.Marshal(headOf(e.sh))
			e.sh["jws"] = signCompact(t, key, `{"alg":"ES256","kid":"`+trust.Thumbprint(&key.PublicKey)+`","crit":["x"],"x":1}`, p)
		}, want: handoff.RefMismatch, where: "crit"},
		{rule: "draft Cross-Protocol Confusion: a handoff typ is not a head", redig: true, mutate: func(e env) {
			p, _ := jcs.Marshal(headOf(e.sh))
			e.sh["jws"] = signCompact(t, key, `{"alg":"ES256","kid":"`+trust.Thumbprint(&key.PublicKey)+`","typ":"application/Agent-Handoff+JWT"}`, p)
		}, want: handoff.RefMismatch, where: "typ"},
		{rule: "SPEC 5: kid required", redig: true, mutate: func(e env) {
			p, _ := jcs.Marshal(headOf(e.sh))
			e.sh["jws"] = signCompact(t, key, `{"alg":"ES256"}`, p)
		}, want: handoff.RefMismatch, where: "kid"},
		{rule: "RFC 7515: header is one JSON object without duplicates", redig: true, mutate: func(e env) {
			p, _ := jcs.Marshal(headOf(e.sh))
			e.sh["jws"] = signCompact(t, key, `{"alg":"ES256","alg":"ES256","kid":"k"}`, p)
		}, want: handoff.RefMismatch, where: "header"},
		{rule: "SPEC 2: signature is 64 octets R||S", redig: true, mutate: func(e env) {
			j := e.sh["jws"].(string)
			e.sh["jws"] = j[:strings.LastIndexByte(j, '.')+1] + b64u.EncodeToString(make([]byte, 63))
		}, want: handoff.RefMismatch, where: "signature"},
		{rule: "SPEC 2: typ optional and other typ allowed", redig: true, mutate: func(e env) {
			p, _ := jcs.Marshal(headOf(e.sh))
			e.sh["jws"] = signCompact(t, key, `{"typ":"learnlog-head+jwt","alg":"ES256","kid":"`+trust.Thumbprint(&key.PublicKey)+`"}`, p)
		}, want: handoff.RefVerified},
	}
	for _, enc := range []handoff.Encoding{handoff.JSON, handoff.CBOR} {
		for _, c := range cases {
			t.Run(enc.String()+"/"+c.rule, func(t *testing.T) {
				ref0, err := NewLearnlogHeadRef(testHead(), key, "")
				if err != nil {
					t.Fatal(err)
				}
				ref := carry(t, ref0, enc)
				sh := ref.Proof.(map[string]any)
				producers := []string{"https://someone.example", producer}
				var ks handoff.KeySource = keys
				if c.mutate != nil {
					c.mutate(env{sh: sh, ref: &ref, producers: &producers, keys: &ks})
				}
				if c.redig {
					if ref.Dig, err = LearnlogHeadDigest(ref.Proof); err != nil {
						t.Fatalf("redig: %v", err)
					}
				}
				got, err := checkLearnlogHead(ref, ks, producers)
				if got != c.want {
					t.Fatalf("outcome %s (%v), want %s", got, err, c.want)
				}
				switch c.want {
				case handoff.RefVerified:
					if err != nil {
						t.Fatalf("verified with error %v", err)
					}
					return
				case handoff.RefMismatch:
					if !errors.Is(err, handoff.ErrRefMismatch) {
						t.Fatalf("error %v does not wrap ErrRefMismatch", err)
					}
				case handoff.RefUnverifiable:
					if !errors.Is(err, handoff.ErrUnverifiableRef) {
						t.Fatalf("error %v does not wrap ErrUnverifiableRef", err)
					}
				}
				if !strings.Contains(err.Error(), c.where) {
					t.Fatalf("error %q does not name %q", err, c.where)
				}
			})
		}
	}
}

// TestLearnlogHeadKidIsThumbprint: the head's kid is the signing key's RFC
// 7638 thumbprint (SPEC.md section 5; issue 5: "ES256, kid = thumbprint").
// A trust file may name the key by a label of its own: the thumbprint still
// selects it, but a head whose kid is that label, not the thumbprint, is
// not verified; it finds no key, so it is unverifiable (SPEC D1
// untrusted-key), and rejects with unverifiable-ref when required.
func TestLearnlogHeadKidIsThumbprint(t *testing.T) {
	const label = "tutor-2026"
	key := mustKey(t)
	c := trust.New()
	if err := c.Add(producer, trust.Key{Kid: label, Alg: "ES256", Public: &key.PublicKey}); err != nil {
		t.Fatal(err)
	}
	// A second key under a label that is the first key's thumbprint: the
	// label lookup finds it, and its thumbprint must still match.
	other := mustKey(t)
	c2 := trust.New()
	if err := c2.Add(producer, trust.Key{Kid: trust.Thumbprint(&key.PublicKey), Alg: "ES256", Public: &other.PublicKey}); err != nil {
		t.Fatal(err)
	}
	byThumbprint, err := NewLearnlogHeadRef(testHead(), key, "https://tutor.example/log/1")
	if err != nil {
		t.Fatal(err)
	}
	byLabel := byThumbprint
	sh := carry(t, byThumbprint, handoff.JSON).Proof.(map[string]any)
	p, _ := jcs.Marshal(headOf(sh))
	sh["jws"] = signCompact(t, key, `{"alg":"ES256","kid":"`+label+`"}`, p)
	byLabel.Proof = sh
	if byLabel.Dig, err = LearnlogHeadDigest(sh); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rule  string
		keys  *trust.Config
		ref   handoff.ContextRef
		want  handoff.RefOutcome
		where string
	}{
		{"SPEC 5: kid = thumbprint selects a key the trust file labels otherwise", c, byThumbprint, handoff.RefVerified, ""},
		{"SPEC 5: kid = a trust-file label, not the thumbprint: no key, untrusted", c, byLabel, handoff.RefUnverifiable, `kid "` + label + `"`},
		{"SPEC 5: a key labelled with the kid but of another thumbprint is not used", c2, byThumbprint, handoff.RefUnverifiable, "no key trusted"},
	}
	for _, tc := range tests {
		t.Run(tc.rule, func(t *testing.T) {
			ref := carry(t, tc.ref, handoff.JSON)
			got, err := checkLearnlogHead(ref, tc.keys, []string{producer})
			if got != tc.want {
				t.Fatalf("outcome %s (%v), want %s", got, err, tc.want)
			}
			if tc.want == handoff.RefVerified {
				if err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(err, handoff.ErrUnverifiableRef) || !strings.Contains(err.Error(), tc.where) {
				t.Fatalf("error %v, want unverifiable naming %q", err, tc.where)
			}
			// Through the Checker, required: only verified passes.
			fs := mustChecker(t, Policy{RequireAll: true, Keys: tc.keys, Producers: []string{producer}}).
				CheckRefs(context.Background(), producer, []handoff.ContextRef{ref}, nil)
			if fs[0].Outcome != tc.want || (fs.Err() == nil) != (tc.want == handoff.RefVerified) {
				t.Fatalf("checker: %s, %v", fs[0].Outcome, fs.Err())
			}
		})
	}
}

// The same head has one dig whether it travels in JSON or in CBOR.
func TestLearnlogHeadDigestSameInJSONAndCBOR(t *testing.T) {
	key := mustKey(t)
	ref, err := NewLearnlogHeadRef(testHead(), key, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range []handoff.Encoding{handoff.JSON, handoff.CBOR} {
		d, err := LearnlogHeadDigest(carry(t, ref, enc).Proof)
		if err != nil || !d.Equal(ref.Dig) {
			t.Fatalf("%v: dig %v, %v; want %v", enc, d, err, ref.Dig)
		}
	}
}

func TestLearnlogHeadMakeRefuses(t *testing.T) {
	key := mustKey(t)
	for _, c := range []struct {
		rule string
		h    func(*LearnlogHead)
	}{
		{"SPEC 5: record_hash is B64u", func(h *LearnlogHead) { h.RecordHash = "a+b" }},
		{"SPEC 5: entry_hash is B64u", func(h *LearnlogHead) { h.EntryHash = "" }},
		{"SPEC 5: seq within 2^53-1", func(h *LearnlogHead) { h.Seq = 1 << 53 }},
		{"SPEC 5: time is uint", func(h *LearnlogHead) { h.Time = -1 }},
		{"SPEC 5: Extra cannot redefine a member", func(h *LearnlogHead) { h.Extra = map[string]any{"seq": uint64(1)} }},
		{"JCS: Extra must have a JSON form", func(h *LearnlogHead) { h.Extra = map[string]any{"b": []byte{1}} }},
	} {
		t.Run(c.rule, func(t *testing.T) {
			h := testHead()
			c.h(&h)
			if _, err := NewLearnlogHeadRef(h, key, ""); err == nil {
				t.Fatal("made a ref from an invalid head")
			}
		})
	}
	if _, err := NewLearnlogHeadRef(testHead(), nil, ""); err == nil {
		t.Fatal("made a ref without a key")
	}
}

// FuzzLearnlogHeadJWS: the head JWS parser never panics, and whatever it
// accepts has a 64-octet signature, a kid and ES256.
func FuzzLearnlogHeadJWS(f *testing.F) {
	key := mustKey(f)
	sh, _, err := SignLearnlogHead(testHead(), key)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sh["jws"].(string))
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJFUzI1NiJ9..")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := parseHeadJWS(s)
		if err != nil {
			return
		}
		if tok.kid == "" || len(tok.signingInput) == 0 {
			t.Fatalf("accepted %q with kid %q", s, tok.kid)
		}
	})
}

// FuzzLearnlogHeadCheck: any proof decoded from JSON never panics the
// check, and only the one SignedHead verifies.
func FuzzLearnlogHeadCheck(f *testing.F) {
	key := mustKey(f)
	keys := trustFor(f, producer, &key.PublicKey)
	sh, _, err := SignLearnlogHead(testHead(), key)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := wire.EncodeJSON(sh)
	f.Add(good)
	f.Add([]byte(`{"head":{},"jws":"a.b.c"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := wire.DecodeJSON(b)
		if err != nil {
			return
		}
		ref := handoff.ContextRef{Kind: handoff.KindLearnlogHead, Proof: v}
		if d, err := LearnlogHeadDigest(v); err == nil {
			ref.Dig = d
		} else {
			ref.Dig = handoff.Digest{Alg: handoff.AlgSHA256, Val: make([]byte, 32)}
		}
		got, err := checkLearnlogHead(ref, keys, []string{producer})
		if (got == handoff.RefVerified) != (err == nil) {
			t.Fatalf("outcome %s with error %v", got, err)
		}
	})
}
