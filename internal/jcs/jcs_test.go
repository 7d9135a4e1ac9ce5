package jcs

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// RFC 8785 section 3.2.2 (input) and 3.2.3 (output): the sample object.
const (
	rfcSampleIn = `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	rfcSampleOut = `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`

	// RFC 8785 section 3.2.3: sorting by UTF-16 code units, with a
	// character outside the BMP (U+1F600) sorting before U+FB33.
	rfcSortIn = `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	rfcSortOut = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"
)

func TestTransformRFC8785Vectors(t *testing.T) {
	for _, c := range []struct{ rule, in, want string }{
		{"RFC 8785 3.2.2/3.2.3 sample object", rfcSampleIn, rfcSampleOut},
		{"RFC 8785 3.2.3 sorting by UTF-16 code units", rfcSortIn, rfcSortOut},
		{"RFC 8785 3.2.1 whitespace removed", " [ 1 , { } , [ ] , \"\" ] ", `[1,{},[],""]`},
		{"RFC 8785 3.2.2.2 control escapes", `"\u0008\u0009\u000a\u000b\u000c\u000d\u001f\u007f\u2028"`, "\"\\b\\t\\n\\u000b\\f\\r\\u001f\u007f\u2028\""},
		{"RFC 8785 3.2.3 nested objects sorted too", `{"b":{"z":1,"a":2},"a":[{"y":0,"x":0}]}`, `{"a":[{"x":0,"y":0}],"b":{"a":2,"z":1}}`},
		{"RFC 8785 3.2.2.3 -0 is 0", `[-0, -0.0, 0e10]`, `[0,0,0]`},
		{"RFC 8785 3.2.2.3 underflow to zero", `1e-400`, `0`},
		{"RFC 8785 3.2.2.3 integers up to 2^53 as written", `[9007199254740992,-9007199254740992]`, `[9007199254740992,-9007199254740992]`},
		{"RFC 8785 3.2.2.3 large integer whose double JCS writes as itself", `[100000000000000000000,295147905179352830000]`, `[100000000000000000000,295147905179352830000]`},
		{"RFC 8785 3.2.2.3 exponent forms", `[1e21, 1e20, 1e-6, 1e-7, 123e-20, 1.5E+300]`, `[1e+21,100000000000000000000,0.000001,1e-7,1.23e-18,1.5e+300]`},
	} {
		t.Run(c.rule, func(t *testing.T) {
			got, err := Transform([]byte(c.in))
			if err != nil {
				t.Fatalf("Transform: %v", err)
			}
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
			again, err := Transform(got)
			if err != nil || string(again) != string(got) {
				t.Fatalf("not idempotent: %s, %v", again, err)
			}
		})
	}
}

// RFC 8785 Appendix B: IEEE 754 doubles (as hex bit patterns) and their
// canonical text.
func TestNumberRFC8785AppendixB(t *testing.T) {
	for _, c := range []struct{ bits, want string }{
		{"0000000000000000", "0"},
		{"8000000000000000", "0"},
		{"0000000000000001", "5e-324"},
		{"8000000000000001", "-5e-324"},
		{"7fefffffffffffff", "1.7976931348623157e+308"},
		{"ffefffffffffffff", "-1.7976931348623157e+308"},
		{"4340000000000000", "9007199254740992"},
		{"c340000000000000", "-9007199254740992"},
		{"4430000000000000", "295147905179352830000"},
		{"7fffffffffffffff", ""}, // NaN
		{"7ff0000000000000", ""}, // Infinity
		{"44b52d02c7e14af5", "9.999999999999997e+22"},
		{"44b52d02c7e14af6", "1e+23"},
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},
		{"444b1ae4d6e2ef4e", "999999999999999700000"},
		{"444b1ae4d6e2ef4f", "999999999999999900000"},
		{"444b1ae4d6e2ef50", "1e+21"},
		{"3eb0c6f7a0b5ed8d", "0.000001"},
		{"3eb0c6f7a0b5ed8e", "0.0000010000000000000002"},
		{"41b3de4355555553", "333333333.3333332"},
		{"41b3de4355555554", "333333333.33333325"},
		{"41b3de4355555555", "333333333.3333333"},
		{"41b3de4355555556", "333333333.3333334"},
		{"41b3de4355555557", "333333333.33333343"},
		{"becbf647612f3696", "-0.0000033333333333333333"},
		{"43143ff3c1cb0959", "1424953923781206.2"},
	} {
		t.Run(c.bits, func(t *testing.T) {
			u, err := strconv.ParseUint(c.bits, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			f := math.Float64frombits(u)
			got, err := AppendNumber(nil, f)
			if c.want == "" {
				if !errors.Is(err, ErrNumber) {
					t.Fatalf("%v: got %q, %v; want ErrNumber", f, got, err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("%v: got %q, %v; want %q", f, got, err, c.want)
			}
			// go-json-experiment's independent implementation agrees.
			ref := jsontext.Value(strconv.FormatFloat(f, 'g', -1, 64))
			if err := ref.Canonicalize(); err != nil || string(ref) != c.want {
				t.Fatalf("jsontext gives %q, %v", ref, err)
			}
			// The canonical text reads back to the same double.
			if back, err := strconv.ParseFloat(string(got), 64); err != nil || back != math.Abs(f)*sign(f) {
				t.Fatalf("%q reads back as %v, %v", got, back, err)
			}
		})
	}
}

func sign(f float64) float64 {
	if math.Signbit(f) {
		return -1
	}
	return 1
}

func TestTransformRejects(t *testing.T) {
	for _, c := range []struct {
		rule, in string
		want     error
	}{
		{"RFC 8785 3.1 duplicate member names", `{"a":1,"a":2}`, ErrSyntax},
		{"RFC 8785 3.1 lone high surrogate", `"\ud83d"`, ErrSyntax},
		{"RFC 8785 3.1 lone low surrogate", `"\ude00x"`, ErrSyntax},
		{"RFC 8785 3.1 invalid UTF-8", "\"\xff\"", ErrSyntax},
		{"RFC 8785 3.2.2.3 number beyond the double range", `1e400`, ErrNumber},
		{"RFC 8785 3.2.2.3 negative number beyond the double range", `[-1.8e308]`, ErrNumber},
		{"this package: integer literal a double would round (2^53+1)", `9007199254740993`, ErrUnsafeInteger},
		{"this package: negative integer literal a double would round", `{"seq":-9007199254740993}`, ErrUnsafeInteger},
		{"this package: integer literal beyond 64 bits a double would round", `[123456789012345678901234567890]`, ErrUnsafeInteger},
		{"RFC 8259 trailing data", `{} {}`, ErrSyntax},
		{"RFC 8259 not JSON", `{'a':1}`, ErrSyntax},
	} {
		t.Run(c.rule, func(t *testing.T) {
			got, err := Transform([]byte(c.in))
			if !errors.Is(err, c.want) {
				t.Fatalf("got %q, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestMarshalValueTree(t *testing.T) {
	cbor, err := wire.DecodeCBOR([]byte{
		0xa2,                   // map(2)
		0x63, 's', 'e', 'q', 5, // "seq": 5
		0x61, 'f', 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, // "f": 1.5 (double)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rule string
		v    any
		want string
		err  error
	}{
		{"tree from CBOR: same form as JSON", cbor, `{"f":1.5,"seq":5}`, nil},
		{"ordered *wire.Map is sorted", &wire.Map{Keys: []string{"b", "a"}, Vals: []any{int64(-1), "x"}}, `{"a":"x","b":-1}`, nil},
		{"map[any]any with text keys", map[any]any{"k": []any{true, nil}}, `{"k":[true,null]}`, nil},
		{"wire.Number", []any{wire.Number("4.50"), wire.Number("-0")}, `[4.5,0]`, nil},
		{"CBOR float with an integer value", 1e21, `1e+21`, nil},
		{"uint64 2^53+1 refused, not rounded", map[string]any{"head": map[string]any{"seq": uint64(1<<53 + 1)}}, "", ErrUnsafeInteger},
		{"uint64 2^60 refused: JCS would write 1152921504606847000", uint64(1 << 60), "", ErrUnsafeInteger},
		{"int64 -(2^53+1) refused", int64(-1<<53 - 1), "", ErrUnsafeInteger},
		{"uint64 2^53 exact", uint64(1 << 53), "9007199254740992", nil},
		{"uint64 10^19 written as itself", uint64(10000000000000000000), "10000000000000000000", nil},
		{"NaN refused", math.NaN(), "", ErrNumber},
		{"infinity refused", math.Inf(-1), "", ErrNumber},
		{"byte string has no JSON form", map[string]any{"x": []byte{1}}, "", ErrUnsupported},
		{"non-text map key has no JSON form", map[any]any{uint64(1): "x"}, "", ErrUnsupported},
		{"invalid UTF-8 text", "\xc3", "", ErrUnsupported},
		{"invalid UTF-8 member name", map[string]any{"\xc3": 1}, "", ErrUnsupported},
		{"duplicate member in *wire.Map", &wire.Map{Keys: []string{"a", "a"}, Vals: []any{1, 2}}, "", ErrSyntax},
		{"Go type outside the tree", struct{}{}, "", ErrUnsupported},
	} {
		t.Run(c.rule, func(t *testing.T) {
			got, err := Marshal(c.v)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("got %q, %v; want %v", got, err, c.err)
				}
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestErrorNamesMember(t *testing.T) {
	_, err := Transform([]byte(`{"head":{"seq":9007199254740993}}`))
	if !errors.Is(err, ErrUnsafeInteger) {
		t.Fatal(err)
	}
	if want := "head.seq"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %s", err, want)
	}
}

func TestCompareUTF16(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"a", "ab", -1},
		{"\U0001F600", "\ufb33", -1}, // surrogate 0xD83D < 0xFB33
		{"\ufb33", "\U0001F600", 1},
		{"\U0001F600", "\U0001F601", -1},
		{"\u00f6", "\u20ac", -1},
	} {
		if got := CompareUTF16(c.a, c.b); sgn(got) != c.want {
			t.Errorf("CompareUTF16(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func sgn(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

var fuzzSeeds = []string{
	rfcSampleIn, rfcSortIn, `[]`, `{}`, `0`, `-0`, `1e-7`, `"\u0000"`,
	`[1.7976931348623157e308,5e-324,0.1,0.2,0.30000000000000004]`,
	`{"a":{"b":[1,2,{"c":null}]},"\ud800\udc00":true}`,
}

// FuzzTransform: never a panic; a result is canonical (JCS(JCS(x)) ==
// JCS(x)); and it agrees with go-json-experiment's independent RFC 8785
// implementation (jsontext.Value.Canonicalize) wherever both accept, the
// only intended difference being that this package refuses integer
// literals beyond 2^53-1 instead of rounding them.
func FuzzTransform(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Transform(b)
		ref := jsontext.Value(append([]byte(nil), b...))
		refErr := ref.Canonicalize()
		if err != nil {
			if refErr == nil && !errors.Is(err, ErrUnsafeInteger) && !errors.Is(err, ErrNumber) && !errors.Is(err, ErrSyntax) {
				t.Fatalf("Transform(%q) = %v; jsontext accepts it as %s", b, err, ref)
			}
			return
		}
		again, err := Transform(got)
		if err != nil || string(again) != string(got) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", b, got, again, err)
		}
		if refErr != nil {
			t.Fatalf("Transform(%q) = %q; jsontext refuses it: %v", b, got, refErr)
		}
		if string(ref) != string(got) {
			t.Fatalf("Transform(%q) = %q; jsontext gives %q", b, got, ref)
		}
	})
}

func BenchmarkTransform(b *testing.B) {
	in := []byte(rfcSampleIn)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := Transform(in); err != nil {
			b.Fatal(err)
		}
	}
}
