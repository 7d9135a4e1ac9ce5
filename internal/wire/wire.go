// Package wire holds the strict codecs under the handoff element, one per
// encoding family (JSON, CBOR), each with two faces over the same parser:
// Reader, a pull reader that the data model (written once, in the root
// package) drives member by member, building no tree for the members it
// knows and naming every syntax error itself; and DecodeJSON / DecodeCBOR,
// which build the generic value tree below, for what has no shape of its
// own (unknown members, which Reader.Any reads with the same parser, and
// the callers that walk a tree: JCS, reference files). Writer writes maps
// straight to the octets; EncodeJSON / EncodeCBOR write a tree.
//
// Decoded values are:
//
//	map[string]any        a JSON object (names unique, checked)
//	map[any]any           a CBOR map (keys unique, checked; any key type)
//	[]any                 an array
//	string                text
//	uint64                a non-negative integer (JSON integer literal, CBOR major type 0)
//	int64                 a negative integer
//	Number                any other JSON number literal (1.0, 1e3, -0, big)
//	float64, []byte, bool, nil, cbor.Tag, big.Int, time.Time (CBOR only for the first, []byte and the last three)
//
// The data model accepts only the first six shapes for the members it
// defines; everything else can only live in unknown members, which are kept.
package wire

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Number is a JSON number literal that is not a plain integer: a fraction,
// an exponent, "-0", or an integer beyond 64 bits. Such a literal is never a
// valid Time or version; it is kept as written for unknown members.
type Number string

// Map is an ordered map written by the encoders in the order of Keys.
type Map struct {
	Keys []string
	Vals []any
}

// Add appends a member.
func (m *Map) Add(k string, v any) {
	m.Keys = append(m.Keys, k)
	m.Vals = append(m.Vals, v)
}

// ErrSyntax marks input that is not well-formed JSON or CBOR, or that breaks
// the strict profile (duplicate keys, indefinite lengths, trailing data).
var ErrSyntax = errors.New("malformed encoding")

// Members returns the members of a decoded map as text keys. A CBOR map with
// a key that is not text is an error.
func Members(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, x := range m {
			s, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[s] = x
		}
		return out, true
	}
	return nil, false
}

// TypeName names the shape of a decoded value for error messages.
func TypeName(v any) string {
	switch v.(type) {
	case map[string]any, map[any]any, *Map, Pairs:
		return "map"
	case []any:
		return "array"
	case string:
		return "text"
	case uint64, int64:
		return "integer"
	case Number:
		if isIntegerLiteral(string(v.(Number))) {
			return "integer out of range"
		}
		return "non-integer number"
	case float64:
		return "non-integer number"
	case []byte:
		return "byte string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// isIntegerLiteral reports whether a JSON number literal is written as an
// integer (digits, an optional minus), whatever its size.
func isIntegerLiteral(lit string) bool {
	lit = strings.TrimPrefix(lit, "-")
	if lit == "" || lit == "0" { // "-0" is refused for its sign, not its size
		return false
	}
	for i := 0; i < len(lit); i++ {
		if lit[i] < '0' || lit[i] > '9' {
			return false
		}
	}
	return true
}

// parseJSONNumber turns a JSON number literal into uint64, int64 or Number.
func parseJSONNumber(lit string) any {
	plain := len(lit) > 0
	for i := 0; i < len(lit); i++ {
		c := lit[i]
		if (c < '0' || c > '9') && !(i == 0 && c == '-') {
			plain = false
			break
		}
	}
	if plain && lit != "-0" {
		if lit[0] == '-' {
			if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
				return n
			}
		} else if n, err := strconv.ParseUint(lit, 10, 64); err == nil {
			return n
		}
	}
	return Number(lit)
}

// numberFloat converts a Number for CBOR encoding.
func numberFloat(n Number) (float64, error) {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, fmt.Errorf("number %s cannot be represented in CBOR", n)
	}
	return f, nil
}
