package refs

import (
	"bytes"
	"context"
	"testing"

	"github.com/quantumlearningmachines/handoff"
)

// FuzzParseRefFile: any input is refused with an error or read; what is
// read writes out and reads back to the same octets.
func FuzzParseRefFile(f *testing.F) {
	f.Add([]byte(`{"ref":{"kind":"digest","dig":{"alg":"sha-256","val":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},"loc":"https://x.example/"}}`))
	f.Add([]byte(`{"ref":{"kind":"salted-digest","dig":{"alg":"sha-256","val":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}},"salt":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}`))
	f.Add([]byte(`{"ref":{"kind":"urn:x:y","dig":{"alg":"sha-512","val":"AA"},"proof":[1,{"a":null}],"x":1.5}}`))
	f.Add([]byte("\xa1cref\xa2dkindfdigestcdig\xa2calggsha-256cvalx+AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rf, err := ParseRefFile(b)
		if err != nil {
			return
		}
		if rf.Salt != nil && (len(rf.Salt) != SaltSize || rf.Ref.Kind != handoff.KindSaltedDigest) {
			t.Fatalf("read a salt of %d octets beside kind %q", len(rf.Salt), rf.Ref.Kind)
		}
		out, err := rf.MarshalJSON()
		if err != nil {
			// A CBOR-only value (a byte string, a tag) in proof or an
			// unknown member cannot be written as JSON; that is an
			// error, never a change.
			if handoff.IsJSON(b) {
				t.Fatalf("read from JSON but cannot write JSON: %v", err)
			}
			return
		}
		again, err := ParseRefFile(out)
		if err != nil {
			t.Fatalf("%s does not read back: %v", out, err)
		}
		out2, err := again.MarshalJSON()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("not stable: %s -> %s (%v)", out, out2, err)
		}
	})
}

// FuzzCheckDigest: a digest or salted-digest reference is verified exactly
// when the supplied octets (and salt) are the referenced ones, and is
// never verified otherwise (draft "Context References").
func FuzzCheckDigest(f *testing.F) {
	f.Add([]byte("octets"), []byte("octets"), []byte("0123456789abcdef"), []byte("0123456789abcdef"), true)
	f.Add([]byte("octets"), []byte("other"), []byte(nil), []byte(nil), false)
	f.Add([]byte(""), []byte(""), []byte("short"), []byte("short"), true)
	c, err := NewChecker(Policy{RequireAll: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, octets, supplied, salt, suppliedSalt []byte, salted bool) {
		r := NewDigestRef(octets, "")
		m := &Material{Octets: map[int][]byte{0: supplied}}
		if salted {
			r = handoff.ContextRef{Kind: handoff.KindSaltedDigest, Dig: SaltedDigest(salt, octets)}
			m.Salts = map[int][]byte{0: suppliedSalt}
		}
		fs := c.CheckRefs(context.Background(), delegator, []handoff.ContextRef{r}, m)
		same := bytes.Equal(octets, supplied)
		if salted {
			same = same && bytes.Equal(salt, suppliedSalt) && len(salt) == SaltSize
		}
		if got := fs[0].Outcome == handoff.RefVerified; got != same {
			t.Fatalf("verified = %v, want %v (%v)", got, same, fs[0].Err)
		}
		if fs[0].Outcome != handoff.RefVerified && fs.Err() == nil {
			t.Fatal("a required failure is no error")
		}
	})
}

// FuzzParseSalt: a salt is read only from strict base64url of SaltSize
// octets, which it encodes back to.
func FuzzParseSalt(f *testing.F) {
	f.Add("AAAAAAAAAAAAAAAAAAAAAA")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("AAAAAAAAAAAAAAAAAAAAAB")
	f.Add("AAAA\nAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseSalt(s)
		if err != nil {
			return
		}
		if len(b) != SaltSize || b64.EncodeToString(b) != s {
			t.Fatalf("ParseSalt(%q) = %x", s, b)
		}
	})
}
