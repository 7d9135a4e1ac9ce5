package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// readGeneric drives a Reader over a map whose members named "t..." are
// text, "u..." non-negative integers, "m..." maps of the same kind and
// "a..." arrays of texts; anything else is read whole with Any. It
// returns what it read as the tree DecodeJSON / DecodeCBOR would build,
// or ok false.
func readGeneric(r *Reader) (map[string]any, bool) {
	out := map[string]any{}
	r.Map()
	for {
		k, ok := r.Key()
		if !ok {
			break
		}
		if _, dup := out[k]; dup {
			return nil, false
		}
		switch {
		case strings.HasPrefix(k, "t"):
			out[k] = r.Text()
		case strings.HasPrefix(k, "u"):
			out[k] = r.Uint()
		case strings.HasPrefix(k, "m"):
			m, ok := readGeneric(r)
			if !ok {
				return nil, false
			}
			out[k] = m
		case strings.HasPrefix(k, "a"):
			a := []any{}
			r.Array()
			for r.More() {
				a = append(a, r.Text())
			}
			out[k] = a
		default:
			out[k] = r.Any()
		}
	}
	if _, notText := r.NotText(); notText {
		return nil, false
	}
	return out, !r.Failed()
}

// treeFits reports whether a decoded tree has the shape readGeneric
// expects, so that the Reader must accept its input.
func treeFits(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for k, x := range m {
		switch {
		case strings.HasPrefix(k, "t"):
			if _, ok := x.(string); !ok {
				return false
			}
		case strings.HasPrefix(k, "u"):
			if _, ok := x.(uint64); !ok {
				return false
			}
		case strings.HasPrefix(k, "m"):
			if !treeFits(x) {
				return false
			}
		case strings.HasPrefix(k, "a"):
			a, ok := x.([]any)
			if !ok {
				return false
			}
			for _, y := range a {
				if _, ok := y.(string); !ok {
					return false
				}
			}
		}
	}
	return true
}

func checkReader(t *testing.T, in []byte, cbor, owned bool) {
	var tree any
	var err error
	if cbor {
		tree, err = DecodeCBOR(in)
	} else {
		tree, err = DecodeJSON(in)
	}
	var r Reader
	if owned {
		r.ResetOwned(append([]byte(nil), in...), cbor)
	} else {
		r.Reset(in, cbor, len(in)%2 == 0)
	}
	got, ok := readGeneric(&r)
	ok = ok && r.End()
	fits := err == nil && treeFits(tree)
	switch {
	case ok && !fits:
		t.Fatalf("Reader accepts what the tree decoder rejects or shapes otherwise (%v): %q", err, in)
	case !ok && fits:
		t.Fatalf("Reader declines %q, which decodes to %#v", in, tree)
	case ok && !reflect.DeepEqual(any(got), tree) && !hasNaN(tree):
		t.Fatalf("Reader read %#v, the tree decoder %#v: %q", got, tree, in)
	}
}

func hasNaN(v any) bool {
	switch x := v.(type) {
	case float64:
		return x != x
	case map[string]any:
		for _, y := range x {
			if hasNaN(y) {
				return true
			}
		}
	case []any:
		for _, y := range x {
			if hasNaN(y) {
				return true
			}
		}
	case cbor.Tag:
		return hasNaN(x.Content)
	case map[any]any, Pairs:
		return true // compared by the root package's fuzzing
	}
	return false
}

var readerSeeds = []struct {
	in   string
	cbor bool
}{
	{`{"t":"x","u":1,"m":{"t2":"\u00e9","z":[1,2.5,null]},"a":["p","q"],"x":{"y":true}}`, false},
	{` { "t" : "a\"b" , "u" : 18446744073709551615 } `, false},
	{`{"u":18446744073709551616}`, false},
	{`{"u":01}`, false},
	{`{"u":1.0}`, false},
	{`{"u":-1}`, false},
	{`{"t":"x","t":"y"}`, false},
	{`{"t":"x",}`, false},
	{`{"a":["x",]}`, false},
	{`{"t":"\ud800"}`, false},
	{`{"t":"` + "\x7f\x01" + `"}`, false},
	{`{}`, false},
	{`[]`, false},
	{"\xa2\x61t\x61x\x61u\x18\x2a", true},
	{"\xa1\x61t\x7a\x00\x00\x00\x01x", true}, // non-minimal length head
	{"\xa1\x01\x01", true},                   // an integer key
	{"\xa1\x61m\xa1\x61x\xf9\x7e\x00", true}, // NaN inside an unknown member
	{"\xa1\x61a\x82\x61x\x01", true},
	{"\xa1\x61t\x61x\x00", true}, // trailing data
	{"\xbf\xff", true},
}

func TestReaderMatchesTree(t *testing.T) {
	for _, s := range readerSeeds {
		for _, owned := range []bool{false, true} {
			checkReader(t, []byte(s.in), s.cbor, owned)
		}
	}
}

// FuzzReaderMatchesTree: the Reader, driven by a caller that knows some
// members' shapes, accepts exactly the inputs the tree decoders accept in
// that shape, and reads the same values.
func FuzzReaderMatchesTree(f *testing.F) {
	for _, s := range readerSeeds {
		f.Add([]byte(s.in), s.cbor, false)
	}
	f.Fuzz(checkReader)
}

// TestCBORNestedTagKey: a map key of tags nested as deep as MaxDepth
// allows decodes in time linear in its depth (each level used to look at
// its content twice: 2^31 steps here); one tag more is refused as too
// deep (ErrNesting).
func TestCBORNestedTagKey(t *testing.T) {
	key := func(tags int) []byte {
		b := []byte{0xa1}
		for range tags {
			b = append(b, 0xc5)
		}
		return append(b, 0x01, 0x00) // innermost: 1, then the value 0
	}
	v, err := DecodeCBOR(key(MaxDepth - 1)) // the map is one level
	if err != nil {
		t.Fatalf("DecodeCBOR: %v", err)
	}
	if m, ok := v.(map[any]any); !ok || len(m) != 1 {
		t.Fatalf("DecodeCBOR: %#v, want a map of one tagged key", v)
	}
	if _, err := DecodeCBOR(key(MaxDepth)); !errors.Is(err, ErrNesting) || !errors.Is(err, ErrSyntax) {
		t.Fatalf("DecodeCBOR of %d levels: %v, want ErrNesting and ErrSyntax", MaxDepth+1, err)
	}
}
