package handoff

// Issue 13 (bounded decoding) and D7 as amended, through Receive: hostile
// inputs of about the Handoff bound are refused as malformed
// (bad-signature, D3) or as an exceeded bound (policy, SPEC.md section 4)
// with memory a small constant times their size; and chain quality is
// "absent" exactly when the input decoded as a map without a chain member.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// d7Case is one input and the verdict D7 gives it.
type d7Case struct {
	name    string
	rule    string
	in      func(f *fixture) []byte
	outcome Outcome
	reason  Reason
	quality ChainQuality
}

func jsonText(s string) func(*fixture) []byte { return func(*fixture) []byte { return []byte(s) } }

func hexIn(b ...byte) func(*fixture) []byte { return func(*fixture) []byte { return b } }

// TestReceiveChainQualityD7 checks D7 as amended: "absent" exactly when the
// input decoded as a Handoff map (JSON object or CBOR map, within the size
// bound) with no chain member, whatever else is wrong; "unchecked" when it
// never decoded as such a map, and when a chain was carried but not
// checked to the end.
func TestReceiveChainQualityD7(t *testing.T) {
	valid := func(form Form, enc Encoding, mut func(*Offer), edit func(Element) Element) func(*fixture) []byte {
		return func(f *fixture) []byte {
			o := f.offer("planner", "me")
			if mut != nil {
				mut(o)
			}
			el := f.sign("planner", o, form)
			if edit != nil {
				el = edit(el)
			}
			return encode(f.t, &Handoff{Offer: el}, enc)
		}
	}
	deep := func(n int) any {
		var v any = uint64(0)
		for range n {
			v = []any{v}
		}
		return v
	}
	cases := []d7Case{
		{"valid JWS", "D7 absent: no chain carried", valid(FormJWS, JSON, nil, nil), Accepted, "", ChainAbsent},
		{"valid COSE in CBOR", "D7 absent", valid(FormCOSE, CBOR, nil, nil), Accepted, "", ChainAbsent},
		{"bad signature", "D7 absent whatever else is wrong: a bad signature", valid(FormJWS, JSON, nil, corrupt), Rejected, ReasonBadSignature, ChainAbsent},
		{"bad signature COSE", "D7 absent: a bad signature", valid(FormCOSE, CBOR, nil, corrupt), Rejected, ReasonBadSignature, ChainAbsent},
		{"untrusted key", "D7 absent: an offer that fails step 1 (b)", func(f *fixture) []byte {
			return encode(t, &Handoff{Offer: f.sign("outsider", f.offer("outsider", "me"), FormJWS)}, JSON)
		}, Rejected, ReasonUntrustedKey, ChainAbsent},
		{"wrong audience", "D7 absent: a rejection before step 6", valid(FormJWS, JSON, func(o *Offer) { o.Aud = "else" }, nil), Rejected, ReasonWrongAudience, ChainAbsent},
		{"payload too deep", "D7 absent; issue 13: nesting past MaxNesting is policy", deepPayload(MaxNesting), Rejected, ReasonPolicy, ChainAbsent},
		{"payload as deep as allowed", "issue 13: MaxNesting levels are decoded", valid(FormCOSE, CBOR, func(o *Offer) { o.Extra = map[string]any{"x": deep(MaxNesting - 1)} }, nil), Accepted, "", ChainAbsent},
		{"no offer", "D7 absent: a map with no offer (D3 malformed)", jsonText(`{}`), Rejected, ReasonBadSignature, ChainAbsent},
		{"no offer, other members", "D7 absent: no offer", jsonText(`{"x":[1,2]}`), Rejected, ReasonBadSignature, ChainAbsent},
		{"offer a number", "D7 absent: an offer of the wrong type", jsonText(`{"offer":5}`), Rejected, ReasonBadSignature, ChainAbsent},
		{"offer not a JWS", "D7 absent: an offer that is not JwsCompact", jsonText(`{"offer":"a.b"}`), Rejected, ReasonBadSignature, ChainAbsent},
		{"offer a malformed JWS", "D7 absent: an offer that fails step 1 (a)", jsonText(`{"offer":"a.b.c"}`), Rejected, ReasonBadSignature, ChainAbsent},
		{"CBOR no offer", "D7 absent: a CBOR map without offer", hexIn(0xa0), Rejected, ReasonBadSignature, ChainAbsent},
		{"CBOR integer key", "D7 absent: a CBOR map (non-text keys break the CDDL)", hexIn(0xa1, 0x01, 0x01), Rejected, ReasonBadSignature, ChainAbsent},
		{"CBOR integer key and chain", "D7 unchecked: a chain member, not checked", hexIn(0xa2, 0x01, 0x01, 0x65, 'c', 'h', 'a', 'i', 'n', 0x80), Rejected, ReasonBadSignature, ChainUnchecked},
		{"chain without offer", "D7 unchecked: a chain member, not checked", jsonText(`{"chain":["a.b.c"]}`), Rejected, ReasonBadSignature, ChainUnchecked},
		{"chain not an array", "D7 unchecked: a chain member, not checked", jsonText(`{"offer":"a.b.c","chain":5}`), Rejected, ReasonBadSignature, ChainUnchecked},
		{"empty chain", "D7 unchecked: a chain member, not checked", jsonText(`{"offer":"a.b.c","chain":[]}`), Rejected, ReasonBadSignature, ChainUnchecked},
		{"empty input", "D7 unchecked: never decoded", jsonText(``), Rejected, ReasonBadSignature, ChainUnchecked},
		{"random octets", "D7 unchecked: neither JSON nor CBOR", hexIn(0xff, 0x00, 0x13, 0x37), Rejected, ReasonBadSignature, ChainUnchecked},
		{"text", "D7 unchecked: neither JSON nor CBOR", jsonText("this is not a Handoff"), Rejected, ReasonBadSignature, ChainUnchecked},
		{"BOM before JSON", "D7 unchecked: a BOM is not JSON white space (SPEC 4), and not CBOR", jsonText("\ufeff{\"offer\":\"a.b.c\"}"), Rejected, ReasonBadSignature, ChainUnchecked},
		{"JSON array", "D7 unchecked: a top-level value that is not a map", jsonText(`["a.b.c"]`), Rejected, ReasonBadSignature, ChainUnchecked},
		{"CBOR array", "D7 unchecked: a top-level value that is not a map", hexIn(0x81, 0x00), Rejected, ReasonBadSignature, ChainUnchecked},
		{"CBOR text", "D7 unchecked: a top-level value that is not a map", hexIn(0x61, 'a'), Rejected, ReasonBadSignature, ChainUnchecked},
		{"duplicate member", "D7 unchecked: not well-formed (D3), never decoded", jsonText(`{"offer":"a.b.c","offer":"a.b.c"}`), Rejected, ReasonBadSignature, ChainUnchecked},
		{"trailing data", "D7 unchecked: never decoded", jsonText(`{"offer":"a.b.c"} {}`), Rejected, ReasonBadSignature, ChainUnchecked},
		{"truncated CBOR map", "D7 unchecked: never decoded", hexIn(0xa2, 0x65, 'o', 'f', 'f', 'e', 'r'), Rejected, ReasonBadSignature, ChainUnchecked},
		{"Handoff too deep", "D7 unchecked: never decoded; issue 13: policy", jsonText(`{"offer":"a.b.c","x":` + strings.Repeat("[", MaxNesting) + strings.Repeat("]", MaxNesting) + `}`), Rejected, ReasonPolicy, ChainUnchecked},
		{"over the size bound", "D7 unchecked: over the Handoff size bound (SPEC 4: policy)", func(*fixture) []byte {
			return []byte(`{"offer":"` + strings.Repeat("a", defaultLimits.MaxHandoff) + `"}`)
		}, Rejected, ReasonPolicy, ChainUnchecked},
		{"full chain", "D7 full", func(f *fixture) []byte {
			return encode(t, f.path([]Form{FormJWS}, "origin", "planner", "me"), JSON)
		}, Accepted, "", ChainFull},
	}
	f := newFixture(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := f.receiver(nil).Receive(context.Background(), c.in(f), "")
			if res == nil {
				t.Fatalf("%s: no result: %v", c.rule, err)
			}
			if res.Outcome != c.outcome || res.Reason != c.reason || res.ChainQuality != c.quality {
				t.Errorf("%s: got %s %q chain %s (%v), want %s %q chain %s", c.rule, res.Outcome, res.Reason, res.ChainQuality, err, c.outcome, c.reason, c.quality)
			}
		})
	}
}

// deepPayload is a JSON Handoff whose JWS offer's payload has an unknown
// member of n nested arrays: the payload map and n arrays, n+1 levels.
func deepPayload(n int) func(*fixture) []byte {
	return func(f *fixture) []byte {
		p, err := f.offer("planner", "me").Encode(JSON)
		if err != nil {
			f.t.Fatal(err)
		}
		p = append(p[:len(p)-1], `,"x":`+strings.Repeat("[", n)+strings.Repeat("]", n)+"}"...)
		el, err := f.signers["planner"].sign(p, FormJWS)
		if err != nil {
			f.t.Fatal(err)
		}
		return encode(f.t, &Handoff{Offer: el}, JSON)
	}
}

// hostileHandoff is a hostile input of about the Handoff bound.
type hostileHandoff struct {
	name   string
	in     []byte
	reason Reason
}

const hostileSize = 1 << 20

func padTo(b []byte, c byte, n int) []byte {
	return append(b, bytes.Repeat([]byte{c}, n-len(b))...)
}

// cborHead appends a CBOR head with a 4-octet argument.
func cborHead(b []byte, major byte, n uint32) []byte {
	return binary.BigEndian.AppendUint32(append(b, major<<5|26), n)
}

func hostileHandoffs(t testing.TB, f *fixture) []hostileHandoff {
	offer := []byte{0xa2, 0x65, 'o', 'f', 'f', 'e', 'r', 0x41, 0x00, 0x61, 'x'} // {"offer": h'00', "x": ...}
	nested := func(major byte, per int) []byte {
		b := append([]byte(nil), offer...)
		for range 128 {
			b = cborHead(b, major, uint32((hostileSize-len(b)-5)/per))
		}
		return padTo(b, 0, hostileSize)
	}
	var keys strings.Builder
	keys.WriteString(`{"offer":"a.b.c"`)
	for i := range 90000 {
		fmt.Fprintf(&keys, `,"k%05d":0`, i)
	}
	keys.WriteString("}")
	signed := encode(t, &Handoff{Offer: corrupt(f.sign("planner", f.offer("planner", "me"), FormJWS))}, JSON)
	signedKeys := append(signed[:len(signed)-1:len(signed)-1], keys.String()[len(`{"offer":"a.b.c"`):]...)
	// A COSE offer (within its 64 KiB bound) whose unprotected header is
	// nested maps, and one whose payload claims more than it holds.
	cose := func(unprotected, payload []byte) []byte {
		b := []byte{0xd2, 0x84, 0x58, 0x24, 0xa2, 0x01, 0x26, 0x03, 0x78, 0x1e}
		b = append(b, "application/agent-handoff+cbor"...)
		b = append(b, unprotected...)
		b = cborHead(b, 2, uint32(len(payload)))
		b = append(b, payload...)
		b = append(b, 0x58, 0x40)
		b = append(b, make([]byte, 64)...)
		h := []byte{0xa1, 0x65, 'o', 'f', 'f', 'e', 'r'}
		h = cborHead(h, 2, uint32(len(b)))
		return append(h, b...)
	}
	var deepHeader []byte
	for range 20000 {
		deepHeader = append(deepHeader, 0xa1, 0x00)
	}
	deepHeader = append(deepHeader, 0x00)
	// A chain of as many empty byte strings as fit, and a JSON chain of
	// as many one-character texts, with an offer that fails step 1 (the
	// chain is decoded all the same, before any check).
	emptyChain := cborHead([]byte{0xa2, 0x65, 'o', 'f', 'f', 'e', 'r', 0x41, 0x00, 0x65, 'c', 'h', 'a', 'i', 'n'}, 4, uint32(hostileSize-20))
	emptyChain = padTo(emptyChain, 0x40, len(emptyChain)+hostileSize-20)
	textChain := `{"offer":"a.b.c","chain":["a"` + strings.Repeat(`,"a"`, (hostileSize-40)/4) + "]}"
	return []hostileHandoff{
		{"CBOR chain of empty byte strings", emptyChain, ReasonBadSignature},
		{"JSON chain of one-character texts", []byte(textChain), ReasonBadSignature},
		{"JWS header of nested arrays", func() []byte {
			b64 := base64.RawURLEncoding.EncodeToString
			hdr := `{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt","x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "}"
			return []byte(`{"offer":"` + b64([]byte(hdr)) + "." + b64([]byte(`{"v":1}`)) + "." + strings.Repeat("A", 86) + `"}`)
		}(), ReasonBadSignature},
		{"CBOR nested map heads", nested(5, 2), ReasonBadSignature},
		{"CBOR nested array heads", nested(4, 1), ReasonBadSignature},
		{"CBOR offer byte string head claiming 2^62", padTo([]byte{0xa1, 0x65, 'o', 'f', 'f', 'e', 'r', 0x5b, 0x40, 0, 0, 0, 0, 0, 0, 0}, 0, hostileSize), ReasonBadSignature},
		{"CBOR text head claiming 2^62", padTo(append(offer, 0x7b, 0x40, 0, 0, 0, 0, 0, 0, 0), 'a', hostileSize), ReasonBadSignature},
		{"JSON 200,000 nested arrays", []byte(`{"offer":"a.b.c","x":` + strings.Repeat("[", 200000) + strings.Repeat("]", 200000) + "}"), ReasonPolicy},
		{"JSON 90,000 keys, malformed offer", []byte(keys.String()), ReasonBadSignature},
		{"JSON 90,000 keys, offer with a bad signature", signedKeys, ReasonBadSignature},
		{"COSE unprotected header of nested maps", cose(deepHeader, []byte{0xa0}), ReasonBadSignature},
		{"COSE payload of nested map heads", cose([]byte{0xa0}, func() []byte {
			var p []byte
			for range 128 {
				p = cborHead(p, 5, 30000)
			}
			return padTo(p, 0, 60000)
		}()), ReasonBadSignature},
		{"JWS payload of nested arrays", func() []byte {
			payload := []byte(`{"v":1,"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "}")
			b64 := base64.RawURLEncoding.EncodeToString
			jws := b64([]byte(`{"alg":"ES256","kid":"k","typ":"agent-handoff+jwt"}`)) + "." +
				b64(payload) + "." + strings.Repeat("A", 86)
			return []byte(`{"offer":"` + jws + `"}`)
		}(), ReasonPolicy},
	}
}

// TestReceiveHostileBounded: each hostile shape is rejected, with the
// reason its rule gives, by Receive, allocating at most
// wire's bound per input octet (96; see internal/wire's bounds_test.go)
// plus a constant for the receiver itself.
func TestReceiveHostileBounded(t *testing.T) {
	f := newFixture(t)
	r := f.receiver(nil)
	for _, h := range hostileHandoffs(t, f) {
		t.Run(h.name, func(t *testing.T) {
			var res *Result
			n := allocatedBy(func() { res, _ = r.Receive(context.Background(), h.in, "") })
			if res.Outcome != Rejected || res.Reason != h.reason {
				t.Fatalf("got %s %q (%v), want rejected %q", res.Outcome, res.Reason, res.Err, h.reason)
			}
			per := float64(n) / float64(len(h.in))
			t.Logf("%d octets: %.2f B/octet: %v", len(h.in), per, res.Err)
			if n > 96*uint64(len(h.in))+64<<10 {
				t.Errorf("Receive allocated %d octets for %d (%.1f per octet)", n, len(h.in), per)
			}
		})
	}
}

// allocatedBy returns the octets f allocates, the less of two runs.
func allocatedBy(f func()) uint64 {
	var best uint64
	for i := range 2 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; i == 0 || n < best {
			best = n
		}
	}
	return best
}

// BenchmarkReceiveHostile reports time and octets allocated per input
// octet (B/octet) of Receive for each hostile shape.
func BenchmarkReceiveHostile(b *testing.B) {
	f := newFixture(b)
	r := f.receiver(nil)
	for _, h := range hostileHandoffs(b, f) {
		b.Run(h.name, func(b *testing.B) {
			b.SetBytes(int64(len(h.in)))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				r.Receive(context.Background(), h.in, "")
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(len(h.in)), "B/octet")
		})
	}
}

// TestParseHandoffLongChain: ParseHandoff returns a chain longer than the
// limit whole, octets unchanged (within the Handoff's own bound), for
// Receive to reject as too-deep (D6) and for callers that show it.
func TestParseHandoffLongChain(t *testing.T) {
	f := newFixture(t)
	h := &Handoff{Offer: f.sign("planner", f.offer("planner", "me"), FormJWS)}
	for range 20 {
		h.Chain = append(h.Chain, h.Offer)
	}
	for _, enc := range []Encoding{JSON, CBOR} {
		b := encode(t, h, enc)
		got, err := ParseHandoff(b, Limits{})
		if err != nil || len(got.Chain) != 20 || !bytes.Equal(got.Chain[19].Octets, h.Offer.Octets) {
			t.Fatalf("%v: ParseHandoff: %v, chain of %d", enc, err, len(got.Chain))
		}
		res, _ := f.receiver(nil).Receive(context.Background(), b, "")
		if res.Reason != ReasonTooDeep || res.ChainQuality != ChainUnchecked {
			t.Errorf("%v: Receive: %s %q chain %s, want too-deep, unchecked (D6, D7)", enc, res.Outcome, res.Reason, res.ChainQuality)
		}
	}
}

// TestReceiveParsed: a carrier's own parse, handed down, gets the verdict
// Receive gives the octets (issue 13: one parse per request), and a parse
// made under a larger Handoff bound than the receiver's is held to the
// receiver's (SPEC 4 Bounds: policy, D7 unchecked).
func TestReceiveParsed(t *testing.T) {
	f := newFixture(t)
	h := f.path([]Form{FormJWS, FormCOSE}, "origin", "planner", "me")
	b := encode(t, h, JSON)
	for _, c := range []struct {
		name string
		in   []byte
	}{
		{"accepted", b},
		{"malformed", []byte(`{"offer": 5}`)},
		{"not a map", []byte("random octets")},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, _ := f.receiver(nil).Receive(context.Background(), c.in, "")
			ph, perr := ParseHandoff(c.in, Limits{})
			got, _ := f.receiver(nil).ReceiveParsed(context.Background(), ph, perr, "")
			if got.Outcome != want.Outcome || got.Reason != want.Reason || got.ChainQuality != want.ChainQuality {
				t.Fatalf("ReceiveParsed: %s %q %s, Receive: %s %q %s", got.Outcome, got.Reason, got.ChainQuality, want.Outcome, want.Reason, want.ChainQuality)
			}
		})
	}
	t.Run("parsed under a larger bound", func(t *testing.T) {
		ph, perr := ParseHandoff(b, Limits{MaxHandoff: 1 << 20})
		r := f.receiver(func(o *Options) { o.Limits.MaxHandoff = len(b) - 1 })
		res, err := r.ReceiveParsed(context.Background(), ph, perr, "")
		if res.Outcome != Rejected || res.Reason != ReasonPolicy || res.ChainQuality != ChainUnchecked || !errors.Is(err, ErrPolicy) {
			t.Fatalf("got %s %q %s (%v), want rejected policy unchecked", res.Outcome, res.Reason, res.ChainQuality, err)
		}
	})
}
