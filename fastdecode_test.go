package handoff

// The fast decoders (readOffer, readStatus, readHandoff over wire.Reader)
// against the generic path they stand in front of (the value tree of
// wire.DecodeJSON / wire.DecodeCBOR, then decodeOffer, decodeStatus,
// parseHandoffTree): same accept/reject decision, same decoded value.

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/quantumlearningmachines/handoff/internal/cose"
	"github.com/quantumlearningmachines/handoff/internal/jws"
	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// DeepEqualNaN is reflect.DeepEqual with NaN equal to itself (a CBOR
// unknown member may hold one). Exported for the package's external tests.
func DeepEqualNaN(a, b any) bool { return nanEqual(reflect.ValueOf(a), reflect.ValueOf(b)) }

func nanEqual(a, b reflect.Value) bool {
	if a.IsValid() != b.IsValid() {
		return false
	}
	if !a.IsValid() {
		return true
	}
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Float32, reflect.Float64:
		x, y := a.Float(), b.Float()
		return x == y || (math.IsNaN(x) && math.IsNaN(y))
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return nanEqual(a.Elem(), b.Elem())
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && (a.IsNil() != b.IsNil()) && (a.Len() != 0 || b.Len() != 0) {
			return false
		}
		if a.Len() != b.Len() {
			return false
		}
		for i := 0; i < a.Len(); i++ {
			if !nanEqual(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		it := a.MapRange()
		for it.Next() {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() {
				// Keys that are not comparable by value (NaN keys) fall back.
				if !mapHasEqual(b, it.Key(), it.Value()) {
					return false
				}
				continue
			}
			if !nanEqual(it.Value(), bv) {
				return false
			}
		}
		return true
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if !a.Type().Field(i).IsExported() {
				// A struct with hidden state (big.Int, time.Time): as a whole.
				return a.CanInterface() && b.CanInterface() && reflect.DeepEqual(a.Interface(), b.Interface())
			}
		}
		for i := 0; i < a.NumField(); i++ {
			if !nanEqual(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	}
	if a.CanInterface() && b.CanInterface() {
		return reflect.DeepEqual(a.Interface(), b.Interface())
	}
	return false
}

func mapHasEqual(m, k, v reflect.Value) bool {
	it := m.MapRange()
	for it.Next() {
		if nanEqual(it.Key(), k) && nanEqual(it.Value(), v) {
			return true
		}
	}
	return false
}

// fastSeeds returns the vector Handoffs, and the payloads of their
// elements (JSON from JWS, CBOR from COSE).
func fastSeeds(tb testing.TB) (handoffs, jsonP, cborP [][]byte) {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "vectors", "*"))
	if err != nil {
		tb.Fatal(err)
	}
	add := func(e Element) {
		switch e.Form {
		case FormJWS:
			if t, err := jws.Parse(e.Octets); err == nil {
				jsonP = append(jsonP, t.Payload)
			}
		case FormCOSE:
			if m, err := cose.Parse(e.Octets); err == nil {
				cborP = append(cborP, m.Payload)
			}
		}
	}
	for _, f := range files {
		if filepath.Ext(f) != ".json" && filepath.Ext(f) != ".cbor" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		handoffs = append(handoffs, b)
		h, _ := ParseHandoff(b, Limits{})
		if h == nil {
			continue
		}
		add(h.Offer)
		for _, e := range h.Chain {
			add(e)
		}
	}
	if len(handoffs) == 0 || len(jsonP) == 0 || len(cborP) == 0 {
		tb.Fatalf("seeds: %d Handoffs, %d JSON and %d CBOR payloads", len(handoffs), len(jsonP), len(cborP))
	}
	return handoffs, jsonP, cborP
}

// What FuzzDecodeFastMatchesTree decodes.
const (
	fastOffer = iota
	fastStatus
	fastHandoff
)

// checkFastMatchesTree decodes in as what (fastOffer, fastStatus or
// fastHandoff) both ways and fails if they differ in decision or value.
// tight selects small bounds (2 refs, 8 octets of detail) instead of the
// defaults; owned, a Reader over its own copy (wire.Reader.ResetOwned).
func checkFastMatchesTree(t *testing.T, in []byte, isCBOR bool, what int, tight, owned bool) {
	enc := JSON
	if isCBOR {
		enc = CBOR
	}
	lim := defaultLimits
	if tight {
		lim.MaxRefs, lim.MaxDetail = 2, 8
	}
	orig := bytes.Clone(in)
	defer func() {
		if !bytes.Equal(in, orig) {
			t.Fatal("a decoder modified its input")
		}
	}()
	var fast, tree any
	var treeErr error
	switch what {
	case fastOffer:
		if o := readOffer(wireReader(in, enc, owned), lim); o != nil {
			fast = o
		}
		if v, err := decodeTree(in, enc); err != nil {
			treeErr = err
		} else if o, err := decodeOffer(v, lim); err != nil {
			treeErr = err
		} else {
			tree = o
		}
	case fastStatus:
		if s := readStatus(wireReader(in, enc, owned), lim); s != nil {
			fast = s
		}
		if v, err := decodeTree(in, enc); err != nil {
			treeErr = err
		} else if s, err := decodeStatus(v, lim); err != nil {
			treeErr = err
		} else {
			tree = s
		}
	default:
		if h := readHandoff(in, enc, math.MaxInt); h != nil {
			fast = h
		}
		h, err := parseHandoffTree(in, enc)
		if err != nil {
			treeErr = err
		} else {
			tree = h
		}
	}
	switch {
	case fast == nil && tree != nil:
		t.Fatalf("%v %d: the fast decoder declines what the generic path accepts:\n%#v\nin: %q", enc, what, tree, in)
	case fast != nil && tree == nil:
		t.Fatalf("%v %d: the fast decoder accepts what the generic path rejects (%v):\n%#v\nin: %q", enc, what, treeErr, fast, in)
	case fast != nil && !DeepEqualNaN(fast, tree):
		t.Fatalf("%v %d: the decoders differ:\nfast: %#v\ntree: %#v\nin: %q", enc, what, fast, tree, in)
	}
}

// FuzzDecodeFastMatchesTree: the fast decoders and the generic path agree
// on every input, for offers, statuses and Handoffs, JSON and CBOR.
func FuzzDecodeFastMatchesTree(f *testing.F) {
	handoffs, jsonP, cborP := fastSeeds(f)
	for _, b := range handoffs {
		f.Add(b, !IsJSON(b), uint8(fastHandoff))
	}
	for _, b := range jsonP {
		f.Add(b, false, uint8(fastOffer))
		f.Add(b, false, uint8(fastStatus))
	}
	for _, b := range cborP {
		f.Add(b, true, uint8(fastOffer))
		f.Add(b, true, uint8(fastStatus))
	}
	for _, s := range []string{
		`{"v":1,"type":"offer","hop":"AAAAAAAAAAAAAAAAAAAAAA","dialog":"d","iss":"a","aud":"b","iat":1,"exp":2,"x":{"y":[1.5,-0,1e400,null,"\u0000"]},"task":""}`,
		`{"v":1,"type":"offer","hop":"AAAAAAAAAAAAAAAAAAAAAA","dialog":"d\u0041","iss":"a","aud":"b","iat":18446744073709551615,"exp":2,"refs":[{"kind":"digest","dig":{"alg":"x","val":"AA"},"proof":null,"z":[]}],"obo":{"sub":"s","q":1}}`,
		`{"v":1,"type":"offer","hop":"AAAAAAAAAAAAAAAAAAAAAA","dialog":"d","iss":"a","aud":"b","iat":1,"exp":2,"exp":2}`,
		`{"v":1,"type":"offer","hop":"AAAAAAAAAAAAAAAAAAAAAA","dialog":"d","iss":"a","aud":"b","iat":01,"exp":2}`,
		`{"v":1,"type":"offer","hop":"AAAAAAAAAAAAAAAAAAAAAA","dialog":"d","iss":"a","aud":"b","iat":1.0,"exp":2}`,
		`{"v":1,"type":"status","offer":{"alg":"sha-256","val":"47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"},"iss":"a","aud":"b","iat":1,"state":"failed","detail":"123456789"}`,
		` {"v":1} `, `{"v":1.0}`, `[]`, `{"offer":"a.b.c","chain":["AAAA","x.y.z","a..b","",".",  "a\u002eb.c"],"x":1}`,
		`{"offer":"AAAA"}`, `{"offer":"a.b.c","chain":[]}`, `{"offer":"a.b.c","offer":"a.b.c"}`,
	} {
		for what := range 3 {
			f.Add([]byte(s), false, uint8(what))
		}
	}
	for _, b := range [][]byte{
		{0xa1, 0x61, 'v', 0x01},
		{0xa1, 0x65, 'o', 'f', 'f', 'e', 'r', 0x65, 'a', '.', 'b', '.', 'c'},
		{0xa2, 0x65, 'o', 'f', 'f', 'e', 'r', 0x42, 0xd2, 0x84, 0x65, 'c', 'h', 'a', 'i', 'n', 0x82, 0x41, 0x00, 0x64, 'A', 'A', 'A', 'A'},
		{0xa1, 0x01, 0x01},
	} {
		for what := range 3 {
			f.Add(b, true, uint8(what))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, isCBOR bool, what uint8) {
		checkFastMatchesTree(t, in, isCBOR, int(what%3), what&4 != 0, what&8 != 0)
	})
}

// wireReader returns a Reader over b as decodeOfferPayload sets it up:
// owned (over a copy of b, which nothing writes again) or copying b.
func wireReader(b []byte, enc Encoding, owned bool) *wire.Reader {
	r := new(wire.Reader)
	if owned {
		r.ResetOwned(bytes.Clone(b), enc == CBOR)
	} else {
		r.Reset(b, enc == CBOR, true)
	}
	return r
}

// encodeDecides reports what Encode decided before check existed: encode
// the tree, then decode it. ok is false when the tree could not be
// encoded at all (JSON refuses invalid UTF-8), which check need not
// predict.
func encodeDecides(tree func() (*wire.Map, error), decode func([]byte) error, enc Encoding) (fits, ok bool) {
	t, err := tree()
	if err != nil {
		return false, false
	}
	b, err := encodeTree(t, enc)
	if err != nil {
		return false, false
	}
	return decode(b) == nil, true
}

// sameAsTree fails unless write gives the octets the tree encoder gives
// (when that encodes at all).
func sameAsTree(t *testing.T, what string, enc Encoding, tree func() (*wire.Map, error), write func(Encoding) ([]byte, error)) {
	t.Helper()
	tr, err := tree()
	if err != nil {
		return
	}
	want, err := encodeTree(tr, enc)
	if err != nil {
		return
	}
	got, err := write(enc)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%v: %s write gives %q (%v), the tree encoder %q", enc, what, got, err, want)
	}
}

// checkEncodeCheck compares check with decoding what was encoded, for an
// offer and a status built from the same fields, and, where check passes,
// write with the tree encoder.
func checkEncodeCheck(t *testing.T, o *Offer, s *Status) {
	t.Helper()
	for _, enc := range []Encoding{JSON, CBOR} {
		if o.check() == nil {
			sameAsTree(t, "offer", enc, o.tree, o.write)
		}
		if s.check() == nil {
			sameAsTree(t, "status", enc, s.tree, s.write)
		}
		if fits, ok := encodeDecides(o.tree, func(b []byte) error { _, err := DecodeOffer(b, enc); return err }, enc); ok {
			err := o.check()
			if err != errCheckByDecoding && (err == nil) != fits {
				t.Fatalf("%v: offer check says %v, decoding says fits=%v: %#v", enc, err, fits, o)
			}
		}
		if fits, ok := encodeDecides(s.tree, func(b []byte) error { _, err := DecodeStatus(b, enc); return err }, enc); ok {
			err := s.check()
			if err != errCheckByDecoding && (err == nil) != fits {
				t.Fatalf("%v: status check says %v, decoding says fits=%v: %#v", enc, err, fits, s)
			}
		}
	}
}

// fieldsOffer builds an offer and a status from fuzzed fields.
func fieldsOffer(hop, text, alg string, val []byte, kind string, nrefs, flags uint8, state string, detail int) (*Offer, *Status) {
	d := Digest{Alg: alg, Val: val}
	o := &Offer{Hop: hop, Dialog: text, Task: text, Iss: text, Aud: "a", Iat: -1, Exp: 1}
	s := &Status{Offer: d, Iss: "a", Aud: text, State: State(state), Reason: Reason(text), Detail: string(bytes.Repeat([]byte{'d'}, detail))}
	if flags&1 != 0 {
		o.Obo = &Principal{Sub: text, Iss: text}
		if flags&8 != 0 {
			o.Obo.Iss = ""
		}
	}
	if flags&16 != 0 {
		o.Task, s.Reason = "", ""
	}
	if flags&2 != 0 {
		o.Grant = &d
	}
	if flags&4 != 0 {
		o.Prev = &Digest{Alg: AlgSHA256, Val: make([]byte, 32)}
	}
	for i := 0; i < int(nrefs); i++ {
		r := ContextRef{Kind: kind, Dig: d, Loc: text}
		if flags&32 != 0 {
			r.Loc = ""
		}
		o.Refs = append(o.Refs, r)
		s.Refs = append(s.Refs, r)
	}
	return o, s
}

func TestEncodeCheckMatchesDecoding(t *testing.T) {
	hop := NewHop()
	sha := make([]byte, 32)
	for _, tc := range []struct {
		name                 string
		hop, text, alg, kind string
		val                  []byte
		nrefs, flags         uint8
		state                string
		detail               int
		offerOK, statusOK    bool
	}{
		{"all fine", hop, "t", AlgSHA256, KindDigest, sha, 2, 7, "completed", 10, true, true},
		{"escapes", hop, "\"\\/\x00\x1f\x7f\b\t\n\f\r<>&\u2028é😀", AlgSHA256, KindDigest, sha, 2, 7, "failed", 10, true, true},
		{"optional members empty", hop, "t", AlgSHA256, KindDigest, sha, 2, 1 | 8 | 16 | 32, "rejected", 0, true, true},
		{"times beyond int64", hop, "t", AlgSHA256, KindDigest, sha, 0, 0, "accepted", 0, true, true},
		{"hop of 15 octets", "AAAAAAAAAAAAAAAAAAAA", "t", AlgSHA256, KindDigest, sha, 0, 0, "accepted", 0, false, true},
		{"hop not base64url", hop + "=", "t", AlgSHA256, KindDigest, sha, 0, 0, "accepted", 0, false, true},
		{"hop with non-canonical bits", "AAAAAAAAAAAAAAAAAAAAAB", "t", AlgSHA256, KindDigest, sha, 0, 0, "accepted", 0, false, true},
		{"invalid UTF-8", hop, "\xff", AlgSHA256, KindDigest, sha, 1, 1, "accepted", 0, false, false},
		{"empty val", hop, "t", "x", KindDigest, nil, 0, 2, "accepted", 0, false, false},
		{"sha-256 of 31 octets", hop, "t", AlgSHA256, KindDigest, sha[:31], 0, 2, "accepted", 0, false, false},
		{"other alg, 3 octets", hop, "t", "sha-512", KindDigest, sha[:3], 1, 2, "accepted", 0, true, true},
		{"kind not a URI", hop, "t", AlgSHA256, "not a uri", sha, 1, 0, "accepted", 0, false, false},
		{"kind a URI", hop, "t", AlgSHA256, "urn:x:y", sha, 1, 0, "accepted", 0, true, true},
		{"65 refs", hop, "t", AlgSHA256, KindDigest, sha, 65, 0, "accepted", 0, false, false},
		{"64 refs", hop, "t", AlgSHA256, KindDigest, sha, 64, 0, "accepted", 0, true, true},
		{"no state", hop, "t", AlgSHA256, KindDigest, sha, 0, 0, "", 0, true, false},
		{"unknown state", hop, "t", AlgSHA256, KindDigest, sha, 0, 0, "done", 0, true, false},
		{"detail at the bound", hop, "t", AlgSHA256, KindDigest, sha, 0, 0, "failed", 4096, true, true},
		{"detail over the bound", hop, "t", AlgSHA256, KindDigest, sha, 0, 0, "failed", 4097, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, s := fieldsOffer(tc.hop, tc.text, tc.alg, tc.val, tc.kind, tc.nrefs, tc.flags, tc.state, tc.detail)
			if err := o.check(); (err == nil) != tc.offerOK {
				t.Errorf("offer check: %v, want ok=%v", err, tc.offerOK)
			}
			if err := s.check(); (err == nil) != tc.statusOK {
				t.Errorf("status check: %v, want ok=%v", err, tc.statusOK)
			}
			checkEncodeCheck(t, o, s)
		})
	}
}

// FuzzEncodeCheckMatchesDecoding: Offer.check and Status.check decide as
// decoding the encoded payload does.
func FuzzEncodeCheckMatchesDecoding(f *testing.F) {
	f.Add(NewHop(), "t", AlgSHA256, make([]byte, 32), KindDigest, uint8(1), uint8(7), "completed", uint16(3))
	f.Add("AAAA", "\xff", "", []byte{}, "", uint8(0), uint8(0), "", uint16(5000))
	f.Fuzz(func(t *testing.T, hop, text, alg string, val []byte, kind string, nrefs, flags uint8, state string, detail uint16) {
		o, s := fieldsOffer(hop, text, alg, val, kind, nrefs%70, flags, state, int(detail%5000))
		checkEncodeCheck(t, o, s)
	})
}
