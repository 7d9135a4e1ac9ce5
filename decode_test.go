package handoff

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestDecodeNamesFirstFault: the one decoder names one fault per payload,
// whatever the order of its members on the wire: a syntax error anywhere
// before any fault of the data model (D3), then the first fault in the
// data model's member order (SPEC.md section 1), with the reason its rule
// gives (bad-signature for a malformed payload, policy for a bound).
func TestDecodeNamesFirstFault(t *testing.T) {
	const hop = `"hop":"AAAAAAAAAAAAAAAAAAAAAA"`
	const base = `"v":1,"type":"offer",` + hop + `,"dialog":"d","iss":"a","aud":"b","iat":1,"exp":2`
	dig := `{"alg":"sha-256","val":"47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"}`
	for _, c := range []struct {
		rule, in     string
		member, text string
		reason       Reason
	}{
		{"D3: a valid offer", `{` + base + `}`, "", "", ""},
		{"D3: a later member's fault first on the wire", `{"refs":[],"v":1,"type":"offer","hop":"x","dialog":"d","iss":"a","aud":"b","iat":1,"exp":2}`, "hop", "not strict base64url", ReasonBadSignature},
		{"D3: the wrong type named", `{` + strings.Replace(base, `"dialog":"d"`, `"dialog":[1]`, 1) + `}`, "dialog", "is array, want text", ReasonBadSignature},
		{"D3: missing, after the members present", `{"type":"offer",` + hop + `,"dialog":"d","iss":"a","aud":"b","iat":1}`, "v", "missing", ReasonBadSignature},
		{"D3: a syntax error after a fault comes first", `{"exp":"x",` + base[:len(base)-8] + `,"z":"\u0000"` + "\x01" + `}`, "", "malformed encoding", ReasonBadSignature},
		{"D3: a duplicate member is a syntax error", `{` + base + `,"iss":"a"}`, "", "duplicate object member name", ReasonBadSignature},
		{"D3: trailing octets", `{` + base + `} x`, "", "after the top-level value", ReasonBadSignature},
		{"Bounds: refs past MaxRefs are policy, before their elements' faults", `{` + base + `,"refs":[` + strings.Repeat(`{"kind":"bad kind","dig":`+dig+`},`, 64) + `{}]}`, "refs", "65 refs exceed the limit of 64", ReasonPolicy},
		{"D3: the first ref's fault, by index", `{` + base + `,"refs":[{"kind":"digest","dig":` + dig + `},{"kind":"digest"},{"dig":` + dig + `}]}`, "refs[1].dig", "missing", ReasonBadSignature},
		{"D3: a nested fault named by its path", `{` + base + `,"prev":{"alg":"sha-256","val":"AAAA"}}`, "prev.val", "is 3 octets, sha-256 is 32", ReasonBadSignature},
		{"D3: Digest is closed", `{` + base + `,"grant":{"alg":"x","val":"AA","z":1}}`, "grant.z", "Digest is closed", ReasonBadSignature},
		{"Bounds: nesting past MaxNesting is policy", `{` + base + `,"x":` + strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting) + `}`, "", "nested more deeply", ReasonPolicy},
	} {
		t.Run(c.rule, func(t *testing.T) {
			_, err := DecodeOffer([]byte(c.in), JSON)
			if c.reason == "" {
				if err != nil {
					t.Fatalf("want it decoded: %v", err)
				}
				return
			}
			var me *memberError
			if !errors.As(err, &me) {
				t.Fatalf("got %v, want a member error", err)
			}
			if me.member != c.member || me.reason != c.reason || !strings.Contains(me.err.Error(), c.text) {
				t.Fatalf("got %s %q %v, want %s %q %q", me.reason, me.member, me.err, c.reason, c.member, c.text)
			}
		})
	}
}

// TestDecodeCBORKeysNotText: a CBOR map with a key that is not text is
// refused as a whole, its syntax still checked (a duplicate among its
// other keys is a syntax error).
func TestDecodeCBORKeysNotText(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		text string
	}{
		{[]byte{0xa2, 0x61, 'v', 0x01, 0x01, 0x01}, "the payload is map, want a map with text keys"},
		{[]byte{0xa3, 0x61, 'v', 0x01, 0x01, 0x01, 0x01, 0x02}, "duplicate map key"},
	} {
		_, err := DecodeOffer(c.in, CBOR)
		if err == nil || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%x: got %v, want %q", c.in, err, c.text)
		}
	}
}

// TestEncodeRefusesExtraNamingAMember: an unknown member may not carry a
// defined member's name, written or not (it would decode as that member).
func TestEncodeRefusesExtraNamingAMember(t *testing.T) {
	o := &Offer{Hop: NewHop(), Dialog: "d", Iss: "a", Aud: "b", Iat: 1, Exp: 2, Extra: map[string]any{"task": "t"}}
	if _, err := o.Encode(JSON); err == nil || !strings.Contains(err.Error(), `"task"`) {
		t.Fatalf("got %v, want a refusal naming task", err)
	}
	o.Extra = map[string]any{"x-note": "kept"}
	b, err := o.Encode(CBOR)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeOffer(b, CBOR)
	if err != nil || back.Extra["x-note"] != "kept" {
		t.Fatalf("got %v %v", back, err)
	}
}

// TestDecodeRefusedInputBounded: input the decoder refuses for a key it
// does not tell apart (a CBOR map with a key that is not text, at every
// level at once; a closed Digest with a million unknown keys) is read
// within the bound of SPEC.md section 4 (96 octets allocated per input
// octet), and a duplicate among such keys is still the syntax error it
// is (D3).
func TestDecodeRefusedInputBounded(t *testing.T) {
	o := &Offer{Hop: NewHop(), Dialog: "d", Iss: "a", Aud: "b", Iat: 1, Exp: 2,
		Refs: []ContextRef{{Kind: KindDigest, Dig: DigestOf([]byte("r"))}}}
	base, err := o.Encode(CBOR)
	if err != nil {
		t.Fatal(err)
	}
	const n = 60000
	nested := bytes.Clone(base)
	nested[0]++                                                 // the payload: one more member, 0: 0 at the end
	nested[bytes.LastIndex(nested, []byte("\xa2\x64kind"))]++   // the ref: 0: 0
	nested[bytes.LastIndex(nested, []byte("\xa2\x63alg"))] += 2 // the Digest: "x": [n empty maps], 0: 0
	nested = append(nested, 0x61, 'x', 0x9a, 0, 0, n>>8, n&0xff)
	nested = append(nested, bytes.Repeat([]byte{0xa0}, n)...)
	nested = append(nested, 0, 0, 0, 0, 0, 0)
	at := bytes.LastIndex(base, []byte("\xa2\x63alg"))
	closed := append(bytes.Clone(base[:at]), 0xba, 0, 0, (n+2)>>8, (n+2)&0xff) // a Digest of 2+n members
	closed = append(closed, base[at+1:]...)
	for i := range n {
		closed = append(closed, 0x62, byte('a'+i/26%26), byte('a'+i%26), 0xf6) // "aa": null ... (duplicates from the 677th)
	}
	for _, c := range []struct {
		name string
		in   []byte
		text string
	}{
		{"non-text keys at three levels", nested, "want a map with text keys"},
		{"a closed Digest with duplicate unknown keys", closed, "duplicate map key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			alloc := allocatedBy(func() { _, err = DecodeOffer(c.in, CBOR) })
			var me *memberError
			if !errors.As(err, &me) || me.reason != ReasonBadSignature || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("got %v, want bad-signature saying %q", err, c.text)
			}
			if per := float64(alloc) / float64(len(c.in)); per > 96 {
				t.Errorf("%d octets: %.1f octets allocated per octet, more than 96", len(c.in), per)
			}
		})
	}
}

// TestEncodeRefusesWhatDoesNotDecode: Encode never writes what the
// decoder refuses, and refuses with an error, never a crash: a negative
// Time (which would be written as a huge one), an unknown member that
// holds itself, a Handoff with an element of no octets.
func TestEncodeRefusesWhatDoesNotDecode(t *testing.T) {
	good := func() *Offer { return &Offer{Hop: NewHop(), Dialog: "d", Iss: "a", Aud: "b", Iat: 1, Exp: 2} }
	self := map[string]any{}
	self["self"] = self
	deep := any("leaf")
	for range MaxNesting + 1 {
		deep = []any{deep}
	}
	for _, c := range []struct {
		name string
		mut  func(*Offer)
	}{
		{"negative iat", func(o *Offer) { o.Iat = -1 }},
		{"negative exp", func(o *Offer) { o.Exp = -5 }},
		{"an unknown member that holds itself", func(o *Offer) { o.Extra = map[string]any{"x": self} }},
		{"an unknown member nested past MaxNesting", func(o *Offer) { o.Extra = map[string]any{"x": deep} }},
	} {
		for _, enc := range []Encoding{JSON, CBOR} {
			o := good()
			c.mut(o)
			if b, err := o.Encode(enc); err == nil {
				t.Errorf("%s, %v: encoded %q", c.name, enc, b)
			}
		}
	}
	if st := (&Status{Offer: DigestOf(nil), Iss: "a", Aud: "b", Iat: -1, State: StateAccepted}); true {
		if _, err := st.Encode(JSON); err == nil {
			t.Error("a status with a negative iat encoded")
		}
	}
	for _, enc := range []Encoding{JSON, CBOR} {
		if b, err := (&Handoff{}).Encode(enc); err == nil {
			t.Errorf("%v: a Handoff with an empty offer element encoded: %q", enc, b)
		}
	}
}

// TestCompactTextIsJWSCompact: the one-pass scan that carried uses agrees
// with the CDDL's JwsCompact (three non-empty base64url runs between two
// periods) on every short text over an alphabet that has each case.
func TestCompactTextIsJWSCompact(t *testing.T) {
	jwsCompact := func(s []byte) bool { // the CDDL, written plainly
		parts := bytes.Split(s, []byte("."))
		if len(parts) != 3 {
			return false
		}
		for _, p := range parts {
			if len(p) == 0 {
				return false
			}
			for _, c := range p {
				if !isB64uChar(c) {
					return false
				}
			}
		}
		return true
	}
	alphabet := []byte("A_.-=é")
	var walk func(b []byte)
	walk = func(b []byte) {
		dots, ok := compactText(b)
		got := ok && dots == 2 && len(b) > 0 && b[0] != '.' && b[len(b)-1] != '.' && !bytes.Contains(b, dotdot)
		if got != jwsCompact(b) {
			t.Fatalf("%q: scan says %v", b, got)
		}
		if ok != !bytes.ContainsFunc(b, func(r rune) bool { return r == '=' || r == 'é' || r == utf8.RuneError }) {
			t.Fatalf("%q: compact %v", b, ok)
		}
		if len(b) == 6 {
			return
		}
		for _, c := range alphabet {
			walk(append(b, c))
		}
	}
	walk(nil)
	long := bytes.Repeat([]byte("abcdefgh"), 40)
	if _, ok := compactText(append(bytes.Clone(long), '+')); ok {
		t.Fatal("a '+' after eight-octet words passed")
	}
}

// TestNotCompactForTextIn: wire.Reader.TextIn takes the octets of a
// string whose octets all have a zero entry in its table as the string's
// text; that is sound only when the table refuses quotes, backslashes,
// control octets and those of 0x80 and above, as notCompact must.
func TestNotCompactForTextIn(t *testing.T) {
	for c := range 256 {
		if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) && notCompact[c] == 0 {
			t.Errorf("notCompact[%#x] is 0: TextIn would take it raw", c)
		}
	}
}
