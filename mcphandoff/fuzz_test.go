package mcphandoff_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// FuzzMeta feeds arbitrary JSON, decoded as the SDK decodes _meta (into
// any), to the readers of this package: they never panic, a value they
// refuse wraps ErrMeta, and a string they accept decodes back to itself.
func FuzzMeta(f *testing.F) {
	f.Add([]byte(`{"offer":"eyJhbGciOiJFUzI1NiJ9.e30.AA"}`))
	f.Add([]byte(`"2BKEQ6EBJqBA9g"`))
	f.Add([]byte(`"eyJhbGciOiJFUzI1NiJ9.e30.AA"`))
	f.Add([]byte(`42`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"offer":{"x":[1,2.5,"a"]},"chain":[]}`))
	f.Add([]byte(`"a="`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		if json.Unmarshal(data, &v) != nil {
			return
		}
		b, err := mcphandoff.HandoffOctets(v)
		if err != nil {
			if !errors.Is(err, mcphandoff.ErrMeta) {
				t.Fatalf("HandoffOctets error not ErrMeta: %v", err)
			}
		} else {
			if s, ok := v.(string); ok && base64.RawURLEncoding.EncodeToString(b) != s {
				t.Fatalf("base64url round trip: %q -> %x", s, b)
			}
			_, _ = handoff.ParseHandoff(b, handoff.Limits{})
		}
		el, _, err := mcphandoff.StatusFrom(map[string]any{mcphandoff.Key: v})
		if err != nil {
			if !errors.Is(err, mcphandoff.ErrMeta) {
				t.Fatalf("StatusFrom error not ErrMeta: %v", err)
			}
			return
		}
		if mcphandoff.StatusValue(el) != v.(string) && !bytes.ContainsAny([]byte(v.(string)), " \t\r\n") {
			t.Fatalf("status text round trip: %q -> %q", v, mcphandoff.StatusValue(el))
		}
	})
}

// FuzzHandoffValue: a Handoff written with HandoffValue and sent through
// JSON (as the SDK does) reads back, by HandoffOctets, to a Handoff with
// the same element octets, in both encodings.
func FuzzHandoffValue(f *testing.F) {
	f.Add([]byte("eyJhbGciOiJFUzI1NiJ9.e30.AA"), []byte("x.y.z"), false)
	f.Add([]byte{0xd2, 0x84, 0x40, 0xa0, 0x40, 0x40}, []byte(nil), true)
	f.Fuzz(func(t *testing.T, offer, chain []byte, cose bool) {
		el := handoff.ParseElement(offer)
		if cose {
			el = handoff.Element{Form: handoff.FormCOSE, Octets: offer}
		}
		if el.Form == handoff.FormInvalid || len(el.Octets) == 0 {
			return
		}
		h := &handoff.Handoff{Offer: el}
		if c := handoff.ParseElement(chain); len(chain) > 0 && c.Form != handoff.FormInvalid {
			h.Chain = []handoff.Element{c}
		}
		for _, enc := range []handoff.Encoding{handoff.JSON, handoff.CBOR} {
			v, err := mcphandoff.HandoffValue(h, enc)
			if err != nil {
				continue // not representable (a JWS that is not text, say)
			}
			wire, err := json.Marshal(map[string]any{mcphandoff.Key: v})
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(wire, &m); err != nil {
				t.Fatal(err)
			}
			b, err := mcphandoff.HandoffOctets(m[mcphandoff.Key])
			if err != nil {
				t.Fatalf("%v: %v", enc, err)
			}
			got, err := handoff.ParseHandoff(b, handoff.Limits{})
			if err != nil {
				continue // the element is not a well-formed signed element
			}
			if !bytes.Equal(got.Offer.Octets, h.Offer.Octets) {
				t.Fatalf("%v: offer octets changed on the way", enc)
			}
			if len(got.Chain) != len(h.Chain) || (len(h.Chain) == 1 && !bytes.Equal(got.Chain[0].Octets, h.Chain[0].Octets)) {
				t.Fatalf("%v: chain changed on the way", enc)
			}
		}
	})
}
