package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// referenceJSON decodes with jsontext.Decoder token by token, the strict
// reader parseJSON must agree with.
func referenceJSON(b []byte) (any, error) {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	v, err := refValue(d, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func refValue(d *jsontext.Decoder, depth int) (any, error) {
	if k := d.PeekKind(); (k == '{' || k == '[') && depth >= MaxDepth {
		return nil, errors.New("nested too deeply")
	}
	tok, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '{':
		m := map[string]any{}
		for d.PeekKind() != '}' {
			t, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			name := t.String()
			v, err := refValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			m[name] = v
		}
		_, err := d.ReadToken()
		return m, err
	case '[':
		a := []any{}
		for d.PeekKind() != ']' {
			v, err := refValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.ReadToken()
		return a, err
	case '"':
		return tok.String(), nil
	case '0':
		return parseJSONNumber(tok.String()), nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	case 'n':
		return nil, nil
	}
	return nil, fmt.Errorf("unexpected %v", tok.Kind())
}

var jsonCases = []string{
	`{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5, -0, 1e3, "x", true, false, null]} `,
	`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"a":1}x`, `{"a":1}{}`, `{"a":}`, `{"a"1}`, `{,}`, `[1,]`, `[,1]`,
	`"\ud800"`, `"\ud800\udc00"`, `"\udc00"`, `"\ud800x"`, `"\u00e9"`, `"\x"`, "\"\x01\"", "\"\xff\"", `"é"`,
	`01`, `-`, `1.`, `1.e3`, `1e`, `1e+`, `-01`, `18446744073709551616`, `-9223372036854775809`, `1E400`,
	`tru`, `nul`, `truex`, `[1 2]`, `{"a":1 "b":2}`, "\t[\n1\r]", `"\/\b\f\n\r\t\\\""`, ``, ` `, `"abc`, `{"a":{"b":[{}]}}`,
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
}

func TestParseJSONMatchesJsontext(t *testing.T) {
	for _, c := range jsonCases {
		checkSame(t, []byte(c))
	}
}

func checkSame(t *testing.T, b []byte) {
	t.Helper()
	got, gerr := parseJSON(b)
	want, werr := referenceJSON(b)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%q: parseJSON err %v, jsontext err %v", b, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: parseJSON %#v, jsontext %#v", b, got, want)
	}
}

// FuzzJSONDifferential: the strict reader accepts exactly what jsontext
// accepts, with the same value.
func FuzzJSONDifferential(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSame(t, b) })
}

func BenchmarkDecodeJSON(b *testing.B) {
	payload := []byte(`{"v":1,"type":"offer","hop":"5Ge6vuQGf40E7hBSFHPwjg","dialog":"ctx-1","iss":"https://planner.example","aud":"https://coder.example","iat":1800000000,"exp":1800000300,"refs":[{"kind":"digest","dig":{"alg":"sha-256","val":"tvIJg0OdijmvdxXyUppve34tX3NdZcREvBlbMX8f3-U"}},{"kind":"digest","dig":{"alg":"sha-256","val":"tvIJg0OdijmvdxXyUppve34tX3NdZcREvBlbMX8f3-U"}}]}`)
	b.Run("parseJSON", func(b *testing.B) {
		for b.Loop() {
			parseJSON(payload)
		}
	})
	b.Run("jsontext", func(b *testing.B) {
		for b.Loop() {
			referenceJSON(payload)
		}
	})
}

// A CBOR map key that is not hashable in Go must not collide with a text
// key spelled like its internal id.
func TestCBORUnhashableKey(t *testing.T) {
	// {[1]: 1, "x8101": 2}
	b := []byte{0xa2, 0x81, 0x01, 0x01, 0x65, 'x', '8', '1', '0', '1', 0x02}
	v, err := DecodeCBOR(b)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := v.(Pairs)
	if !ok || len(p) != 2 {
		t.Fatalf("got %#v", v)
	}
	out, err := EncodeCBOR(v)
	if err != nil {
		t.Fatal(err)
	}
	if v2, err := DecodeCBOR(out); err != nil || len(v2.(Pairs)) != 2 {
		t.Fatalf("re-encoded: %x %v", out, err)
	}
	// Duplicates by value, also for array keys: {[1]: 1, [1]: 2}.
	if _, err := DecodeCBOR([]byte{0xa2, 0x81, 0x01, 0x01, 0x81, 0x01, 0x02}); err == nil {
		t.Fatal("duplicate array keys accepted")
	}
	// 1 and a non-minimal 1 are the same key.
	if _, err := DecodeCBOR([]byte{0xa2, 0x01, 0x01, 0x18, 0x01, 0x02}); err == nil {
		t.Fatal("duplicate integer keys accepted")
	}
}

// TestPlainASCII checks that plainASCII stops at or before the first octet
// a string cannot copy as it is, and only before one.
func TestPlainASCII(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 24; pos++ {
			b := bytes.Repeat([]byte{'a'}, 24)
			b[pos] = byte(c)
			plain := c >= 0x20 && c < 0x80 && c != '"' && c != '\\'
			n := plainASCII(b)
			if n%8 != 0 || !plain && n > pos || plain && n != 24 {
				t.Fatalf("plainASCII with %#x at %d = %d", c, pos, n)
			}
		}
	}
}
