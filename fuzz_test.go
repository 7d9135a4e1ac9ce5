package handoff_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocose "github.com/veraison/go-cose"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/wire"
	"github.com/quantumlearningmachines/handoff/trust"
)

// Fuzz targets over the decoders and the receiving checks, seeded with
// every file of testdata/vectors and a few handmade inputs.

// fuzzSeeds returns the vector files whose names end in one of exts.
func fuzzSeeds(f *testing.F, exts ...string) [][]byte {
	f.Helper()
	var out [][]byte
	err := filepath.WalkDir(vecDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "keys" {
				return filepath.SkipDir
			}
			return nil
		}
		if n := d.Name(); n == "vectors.json" || n == "trust.json" {
			return nil
		}
		for _, e := range exts {
			if strings.HasSuffix(path, e) {
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				out = append(out, b)
				break
			}
		}
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	if len(out) == 0 {
		f.Fatalf("no seed files %v under %s", exts, vecDir)
	}
	return out
}

var handmadeJSON = []string{
	`{}`, `{"offer":"a.b.c"}`, `{"offer":"AAAA"}`, `{"offer":"a.b.c","chain":["AAAA","x.y.z"]}`,
	`{"offer":"a.b.c","chain":[]}`, `{"offer":"a.b.c","chain":"a.b.c"}`, `{"offer":1}`, `{"offer":"a.b.c","x":{"y":[1.5,-0,1e3,null]}}`,
	` {"offer":"e30.e30.AAAA"} `, `{"offer":"a.b.c","offer":"a.b.c"}`, `{"offer":"!"}`, `{"offer":""}`, `{"offer":"a.b.c","chain":[""]}`,
}

var handmadeCBOR = [][]byte{
	{0xa0}, // {}
	{0xa1, 0x65, 'o', 'f', 'f', 'e', 'r', 0x40}, // {"offer": h''}
	{0xa1, 0x65, 'o', 'f', 'f', 'e', 'r', 0x65, 'a', '.', 'b', '.', 'c'},
	{0xa2, 0x65, 'o', 'f', 'f', 'e', 'r', 0x42, 0xd2, 0x84, 0x65, 'c', 'h', 'a', 'i', 'n', 0x81, 0x41, 0x00},
	{0xa1, 0x65, 'o', 'f', 'f', 'e', 'r', 0xd8, 0x18, 0x40}, // tagged bstr
	{0xbf, 0x65, 'o', 'f', 'f', 'e', 'r', 0x40, 0xff},       // indefinite map
	{},
}

// checkHandoffRoundTrip: a Handoff that parses, encoded again in its own
// encoding, parses to the same elements (octets unchanged) and the same
// unknown members, and encodes to the same octets a second time.
func checkHandoffRoundTrip(t *testing.T, in []byte) {
	orig := bytes.Clone(in)
	h, err := handoff.ParseHandoff(in, handoff.Limits{})
	if !bytes.Equal(in, orig) {
		t.Fatal("ParseHandoff modified its input")
	}
	if err != nil {
		var ce interface{ Error() string }
		if !errors.As(err, &ce) {
			t.Fatalf("error %T", err)
		}
		return
	}
	if h == nil {
		t.Fatal("nil Handoff without an error")
	}
	enc := handoff.CBOR
	if handoff.IsJSON(in) {
		enc = handoff.JSON
	}
	out, err := h.Encode(enc)
	if err != nil {
		t.Fatalf("Encode(%v) of a parsed Handoff: %v", enc, err)
	}
	if handoff.IsJSON(out) != (enc == handoff.JSON) {
		t.Fatalf("Encode(%v) wrote %q, read back as the other encoding", enc, out)
	}
	h2, err := handoff.ParseHandoff(out, handoff.Limits{})
	if err != nil {
		t.Fatalf("re-encoded Handoff does not parse: %v\nin:  %q\nout: %q", err, in, out)
	}
	sameElement := func(what string, a, b handoff.Element) {
		if a.Form != b.Form || !bytes.Equal(a.Octets, b.Octets) {
			t.Fatalf("%s changed across Encode: %v %q -> %v %q", what, a.Form, a.Octets, b.Form, b.Octets)
		}
	}
	sameElement("offer", h.Offer, h2.Offer)
	if (h.Chain == nil) != (h2.Chain == nil) || len(h.Chain) != len(h2.Chain) {
		t.Fatalf("chain of %d elements (nil %v) became %d (nil %v)", len(h.Chain), h.Chain == nil, len(h2.Chain), h2.Chain == nil)
	}
	for i := range h.Chain {
		sameElement("chain element", h.Chain[i], h2.Chain[i])
	}
	if !sameKeys(h.Extra, h2.Extra) {
		t.Fatalf("unknown members %v became %v", keysOf(h.Extra), keysOf(h2.Extra))
	}
	out2, err := h2.Encode(enc)
	if err != nil || !bytes.Equal(out, out2) {
		t.Fatalf("second Encode differs (%v):\n%q\n%q", err, out, out2)
	}
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func sameKeys(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func FuzzParseHandoffJSON(f *testing.F) {
	for _, b := range fuzzSeeds(f, ".json") {
		f.Add(b)
	}
	for _, s := range handmadeJSON {
		f.Add([]byte(s))
	}
	f.Fuzz(checkHandoffRoundTrip)
}

func FuzzParseHandoffCBOR(f *testing.F) {
	for _, b := range fuzzSeeds(f, ".cbor") {
		f.Add(b)
	}
	for _, b := range handmadeCBOR {
		f.Add(b)
	}
	f.Fuzz(checkHandoffRoundTrip)
}

// fuzzNow is the vectors' clock.
const fuzzNow = 1767225600

var validChain = map[handoff.ChainQuality]bool{
	handoff.ChainAbsent: true, handoff.ChainFull: true, handoff.ChainPartial: true,
	handoff.ChainUnverifiable: true, handoff.ChainUnchecked: true,
}

// FuzzReceive: Receive never panics; a Rejected result carries a
// *CheckError whose Reason has its sentinel; Accepted only when the offer
// verifies with a key bound to its iss, is for this receiver and is fresh.
func FuzzReceive(f *testing.F) {
	for _, b := range fuzzSeeds(f, ".json", ".cbor") {
		f.Add(b)
	}
	for _, s := range handmadeJSON {
		f.Add([]byte(s))
	}
	for _, b := range handmadeCBOR {
		f.Add(b)
	}
	keys, err := trust.Load(filepath.Join(vecDir, "trust.json"))
	if err != nil {
		f.Fatal(err)
	}
	const me = "https://tester.example"
	clock := func() time.Time { return time.Unix(fuzzNow, 0) }

	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := handoff.NewReceiver(handoff.Options{Me: me, Keys: keys, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Receive(context.Background(), in, "")
		if res == nil {
			t.Fatalf("no result: %v", err)
		}
		if !validChain[res.ChainQuality] {
			t.Fatalf("chain quality %q", res.ChainQuality)
		}
		// D7 as amended: ParseHandoff returns a Handoff exactly when the
		// input decodes as a map, and "absent" is exactly a map without a
		// chain member.
		var tree any
		var derr error
		if handoff.IsJSON(in) {
			tree, derr = wire.DecodeJSON(in)
		} else {
			tree, derr = wire.DecodeCBOR(in)
		}
		isMap := false
		switch tree.(type) {
		case map[string]any, map[any]any, wire.Pairs:
			isMap = derr == nil
		}
		h, _ := handoff.ParseHandoff(in, handoff.Limits{})
		if (h != nil) != isMap {
			t.Fatalf("ParseHandoff returned %v for an input that decodes as a map: %v (%v)", h, isMap, derr)
		}
		if want := h != nil && h.Chain == nil; want != (res.ChainQuality == handoff.ChainAbsent) {
			t.Fatalf("chain quality %s; decoded as a map without chain: %v", res.ChainQuality, want)
		}
		switch res.Outcome {
		case handoff.Rejected:
			if res.Err == nil {
				t.Fatalf("rejected (%s) without a *CheckError", res.Reason)
			}
			var ce *handoff.CheckError
			if !errors.As(err, &ce) || ce != res.Err {
				t.Fatalf("Receive's error %v is not Result.Err", err)
			}
			s := res.Reason.Sentinel()
			if s == nil || !errors.Is(err, s) || res.Err.Reason != res.Reason {
				t.Fatalf("reason %q: no matching sentinel (err %v)", res.Reason, err)
			}
		case handoff.Accepted:
			if err != nil || res.Err != nil {
				t.Fatalf("accepted with an error: %v", err)
			}
			h, perr := handoff.ParseHandoff(in, handoff.Limits{})
			if perr != nil {
				t.Fatalf("accepted, but the Handoff does not parse: %v", perr)
			}
			if _, verr := handoff.VerifyElement(h.Offer, keys); verr != nil {
				t.Fatalf("accepted, but the offer does not verify: %v", verr)
			}
			o, st, uerr := handoff.UnsafeDecode(h.Offer)
			if uerr != nil || o == nil || st != nil {
				t.Fatalf("accepted, but the offer does not decode as an offer: %v", uerr)
			}
			if o.Aud != me {
				t.Fatalf("accepted an offer for %q", o.Aud)
			}
			if o.Exp <= o.Iat || o.Iat > fuzzNow+60 || o.Exp <= fuzzNow || o.Exp-o.Iat > 300 {
				t.Fatalf("accepted a stale offer: iat %d exp %d", o.Iat, o.Exp)
			}
			if res.OfferDigest == nil || !res.OfferDigest.Equal(h.Offer.Digest()) {
				t.Fatalf("offer digest %v, want %v", res.OfferDigest, h.Offer.Digest())
			}
			if (h.Chain == nil) != (res.ChainQuality == handoff.ChainAbsent) || res.ChainQuality == handoff.ChainUnchecked {
				t.Fatalf("accepted with chain quality %s, chain of %d", res.ChainQuality, len(h.Chain))
			}
		default:
			t.Fatalf("outcome %q from a fresh receiver", res.Outcome)
		}
	})
}

// payloadSeeds extracts the payloads of the signed elements in the vector
// files: JSON from JWS, CBOR from COSE.
func payloadSeeds(f *testing.F) (jsonP, cborP [][]byte) {
	add := func(e handoff.Element) {
		switch e.Form {
		case handoff.FormJWS:
			parts := strings.Split(string(e.Octets), ".")
			if len(parts) == 3 {
				if b, err := b64Lenient(parts[1]); err == nil {
					jsonP = append(jsonP, b)
				}
			}
		case handoff.FormCOSE:
			var m gocose.Sign1Message
			if m.UnmarshalCBOR(e.Octets) == nil && m.Payload != nil {
				cborP = append(cborP, m.Payload)
			}
		}
	}
	for _, b := range fuzzSeeds(f, ".json", ".cbor") {
		h, _ := handoff.ParseHandoff(b, handoff.Limits{})
		if h == nil {
			continue
		}
		add(h.Offer)
		for _, e := range h.Chain {
			add(e)
		}
	}
	return jsonP, cborP
}

func b64Lenient(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	return base64.RawURLEncoding.DecodeString(s)
}

// FuzzDecodeOfferPayload: DecodeOffer never panics; a decoded offer encodes
// (Offer.Encode) to octets that decode to the same offer, with its unknown
// members (Extra) kept, and encode again to the same octets.
func FuzzDecodeOfferPayload(f *testing.F) {
	jsonP, cborP := payloadSeeds(f)
	for _, b := range jsonP {
		f.Add(b, false)
	}
	for _, b := range cborP {
		f.Add(b, true)
	}
	f.Add([]byte(`{"v":1,"type":"offer","hop":"AAAAAAAAAAAAAAAAAAAAAA","dialog":"d","iss":"a","aud":"b","iat":1,"exp":2,"x":{"y":[1.5,-0,1e400,null,"\u0000"]},"task":""}`), false)
	f.Add([]byte(`{"v":1.0}`), false)
	f.Add([]byte{0xa1, 0x61, 'v', 0x01}, true)

	f.Fuzz(func(t *testing.T, in []byte, isCBOR bool) {
		enc := handoff.JSON
		if isCBOR {
			enc = handoff.CBOR
		}
		o, err := handoff.DecodeOffer(in, enc)
		if err != nil {
			return
		}
		e1, err := o.Encode(enc)
		if err != nil {
			t.Fatalf("Encode(%v) of a decoded offer: %v\nin: %q", enc, err, in)
		}
		o2, err := handoff.DecodeOffer(e1, enc)
		if err != nil {
			t.Fatalf("the encoded offer does not decode: %v\nin:  %q\nout: %q", err, in, e1)
		}
		if !equalOffer(o, o2) {
			t.Fatalf("offer changed across Encode:\n%#v\n%#v\nin:  %q\nout: %q", o, o2, in, e1)
		}
		e2, err := o2.Encode(enc)
		if err != nil || !bytes.Equal(e1, e2) {
			t.Fatalf("second Encode differs (%v):\n%q\n%q", err, e1, e2)
		}
	})
}

// equalOffer compares two offers, Extra values included, with NaN equal
// to itself.
func equalOffer(a, b *handoff.Offer) bool { return handoff.DeepEqualNaN(a, b) }

// FuzzDecodeStatusPayload: DecodeStatus never panics; a decoded status
// encodes to octets that decode to the same status and encode again to
// the same octets.
func FuzzDecodeStatusPayload(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":"status","offer":{"alg":"sha-256","val":"47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"},"iss":"a","aud":"b","iat":1,"state":"failed","reason":"policy","detail":"d","x":[1,{"y":null}]}`), false)
	f.Add([]byte(`{"v":1,"type":"status","offer":{"alg":"x","val":"AA"},"iss":"a","aud":"b","iat":1,"state":"accepted","refs":[{"kind":"digest","dig":{"alg":"x","val":"AA"},"proof":1}]}`), false)
	f.Add([]byte{0xa1, 0x61, 'v', 0x01}, true)
	f.Fuzz(func(t *testing.T, in []byte, isCBOR bool) {
		enc := handoff.JSON
		if isCBOR {
			enc = handoff.CBOR
		}
		s, err := handoff.DecodeStatus(in, enc)
		if err != nil {
			return
		}
		e1, err := s.Encode(enc)
		if err != nil {
			t.Fatalf("Encode(%v) of a decoded status: %v\nin: %q", enc, err, in)
		}
		s2, err := handoff.DecodeStatus(e1, enc)
		if err != nil || !handoff.DeepEqualNaN(s, s2) {
			t.Fatalf("status changed across Encode (%v):\n%#v\n%#v", err, s, s2)
		}
		if e2, err := s2.Encode(enc); err != nil || !bytes.Equal(e1, e2) {
			t.Fatalf("second Encode differs (%v):\n%q\n%q", err, e1, e2)
		}
	})
}
