package refs

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff"
)

// TestRefFileRoundTrip: what MarshalJSON writes, ParseRefFile reads back
// (the `handoff ref` output and `handoff offer --add-ref` input).
func TestRefFileRoundTrip(t *testing.T) {
	salted, salt := mustSalted(t, []byte("be brief"), "https://store.example/p")
	for _, f := range []RefFile{
		{Ref: NewDigestRef([]byte("doc"), "")},
		{Ref: salted, Salt: salt},
		{Ref: salted},
		{Ref: handoff.ContextRef{Kind: "urn:example:k", Dig: handoff.DigestOf(nil), Proof: map[string]any{"a": []any{"b"}},
			Extra: map[string]any{"zz": "kept", "aa": uint64(7)}}},
	} {
		b, err := f.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(`{"ref":{"kind":`)) {
			t.Fatalf("%s does not start with ref.kind", b)
		}
		g, err := ParseRefFile(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		b2, err := g.MarshalJSON()
		if err != nil || !bytes.Equal(b, b2) || !bytes.Equal(g.Salt, f.Salt) || !g.Ref.Dig.Equal(f.Ref.Dig) {
			t.Fatalf("round trip: %s -> %s (%v)", b, b2, err)
		}
	}
}

// TestParseRefFileErrors: each malformed ref file is refused with a
// specific error (draft "Data Model" ContextRef; the salt rules of
// "Context References").
func TestParseRefFileErrors(t *testing.T) {
	const dig = `{"alg":"sha-256","val":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`
	for _, tc := range []struct{ in, want string }{
		{``, "ref file"},
		{`[]`, "CBOR"}, // not JSON by content (SPEC.md section 4), so CBOR, and truncated
		{"\x81\x01", "want a map"},
		{`{}`, `"ref" is missing`},
		{`{"ref":{"kind":"digest","dig":` + dig + `},"x":1}`, `unknown member "x"`},
		{`{"ref":{"kind":"digest","dig":` + dig + `},"salt":"AAAAAAAAAAAAAAAAAAAAAA"}`, `a salt beside a ref of kind "digest"`},
		{`{"ref":{"kind":"salted-digest","dig":` + dig + `},"salt":"AAAA"}`, "not 32 octets"},
		{`{"ref":{"kind":"salted-digest","dig":` + dig + `},"salt":7}`, "want base64url text"},
		{`{"ref":{"kind":"salted-digest","dig":` + dig + `},"salt":"AAAAAAAAAAAAAAAAAAAAAA=="}`, "not base64url"},
		{`{"ref":{"kind":"digest","dig":{"alg":"sha-256","val":"AAAA"}}}`, `"ref.dig`},
		{`{"ref":{"kind":"digest","dig":{"alg":"sha-256","val":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","x":1}}}`, `"ref.dig`},
		{`{"ref":{"kind":"no kind","dig":` + dig + `}}`, `"ref.kind"`},
		{`{"ref":{"dig":` + dig + `}}`, `"ref.kind"`},
		{`{"ref":{"kind":"digest","dig":` + dig + `,"loc":5}}`, `"ref.loc"`},
		{`{"ref":{"kind":"digest","dig":` + dig + `},"ref":{}}`, "duplicate"},
		{`{"ref":"x"}`, "ref"},
	} {
		_, err := ParseRefFile([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRefFile(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	if _, err := ParseRefFile(bytes.Repeat([]byte(" "), MaxRefFile+1)); err == nil {
		t.Error("an oversized ref file was read")
	}
}

func TestParseSalt(t *testing.T) {
	for _, tc := range []struct {
		in    string
		ok    bool
		short bool
	}{
		{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", true, false},
		{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB", false, false},   // non-canonical final bits
		{"AAAAAAAAAAAAAAAAAAAAAA", false, true},                         // 16 octets: the draft's minimum, not SaltSize
		{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", false, true}, // 34 octets
		{"AAAAAAAAAAAAAAAAAAAAAA==", false, false},
		{"AAAAAAAAAAA\nAAAAAAAAAAA", false, false}, // the decoder would skip the LF
		{"", false, false},
	} {
		b, err := ParseSalt(tc.in)
		if (err == nil) != tc.ok || tc.ok && len(b) != SaltSize || errors.Is(err, ErrSaltSize) != tc.short {
			t.Errorf("ParseSalt(%q) = %x, %v", tc.in, b, err)
		}
	}
}

func TestMakeRefs(t *testing.T) {
	r1, s1 := mustSalted(t, []byte("yes"), "")
	r2, s2 := mustSalted(t, []byte("yes"), "")
	if len(s1) != SaltSize || bytes.Equal(s1, s2) || r1.Dig.Equal(r2.Dig) {
		t.Fatal("two salted refs of the same octets share a salt or a digest")
	}
	if !r1.Dig.Equal(SaltedDigest(s1, []byte("yes"))) || r1.Kind != handoff.KindSaltedDigest {
		t.Fatal("salted ref is not SHA-256(salt || octets)")
	}
	d, err := DigestReader(s1, strings.NewReader("yes"))
	if err != nil || !d.Equal(r1.Dig) {
		t.Fatal("DigestReader disagrees with SaltedDigest")
	}
	if r := NewDigestRef([]byte("yes"), "https://x.example/"); !r.Dig.Matches([]byte("yes")) || r.Loc != "https://x.example/" {
		t.Fatal("digest ref is not SHA-256(octets)")
	}
}
