// Package jcs implements the JSON Canonicalization Scheme (RFC 8785): the
// canonical form Learnlog signs and digests (draft "Referencing a Learnlog
// Signed Head"; SPEC.md section 5).
//
// The canonical form of a JSON value is written with no whitespace; object
// members are sorted by their names compared as arrays of UTF-16 code
// units (RFC 8785 section 3.2.3); strings are written with the shortest
// escapes JSON.stringify uses (section 3.2.2.2); numbers are IEEE 754
// doubles written by ECMAScript's Number::toString (section 3.2.2.3).
//
// Input is strict (RFC 8785 section 3.1, I-JSON): one JSON value with no
// duplicate member names, valid UTF-8 and no lone surrogates, numbers that
// fit an IEEE 754 double. This package is stricter than RFC 8785 in one
// respect, deliberately: an integer (an integer literal in JSON text, or an
// integer in a value tree) is accepted only when its decimal text is
// exactly what JCS writes for the double nearest to it. Every integer of
// magnitude up to 2^53 passes; beyond, 9007199254740993 (which a double
// would round to ...992) is refused with ErrUnsafeInteger, while
// 100000000000000000000 (written by JCS as itself) passes. So a digest never
// silently covers a different integer than the one written (a Learnlog
// seq of 2^53+1 would otherwise canonicalize as 2^53), and canonical output
// always reads back: Transform(Transform(x)) == Transform(x). Literals with
// a fraction or an exponent are doubles by definition and are rounded as
// RFC 8785 says.
//
// Two entry points: Transform canonicalizes JSON text; Marshal / Append
// canonicalize a value tree as package wire decodes it from JSON or CBOR
// (so a Learnlog head carried in a CBOR Handoff gets the same digest as the
// same head carried in JSON). CBOR-only values (byte strings, tags, simple
// values, maps with non-text keys) have no JSON form and are refused.
package jcs

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// Errors returned by this package wrap exactly one of these.
var (
	// ErrSyntax: the input is not one strict JSON value (bad syntax,
	// duplicate member names, invalid UTF-8, a lone surrogate escape,
	// nesting deeper than wire.MaxDepth).
	ErrSyntax = errors.New("jcs: not strict JSON")
	// ErrNumber: a number outside the IEEE 754 double range, or a NaN or
	// infinity in a value tree.
	ErrNumber = errors.New("jcs: number not representable as an IEEE 754 double")
	// ErrUnsafeInteger: an integer that a double cannot hold without
	// changing its canonical text (magnitude beyond 2^53, see the package
	// documentation).
	ErrUnsafeInteger = errors.New("jcs: integer beyond 2^53-1")
	// ErrUnsupported: a value with no JSON form (a CBOR byte string, tag,
	// simple value, a map with a non-text key, text that is not UTF-8).
	ErrUnsupported = errors.New("jcs: value has no JSON form")
)

// MaxExactInteger is 2^53: every integer of at most this magnitude is a
// double exactly and is written by JCS as its decimal text.
const MaxExactInteger = 1 << 53

// Transform returns the canonical form of the JSON text b.
func Transform(b []byte) ([]byte, error) {
	v, err := wire.DecodeJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return Append(nil, v)
}

// Marshal returns the canonical JSON form of a value tree (see Append).
func Marshal(v any) ([]byte, error) { return Append(nil, v) }

// Append appends the canonical JSON form of v to dst. v is a value tree as
// package wire decodes it: map[string]any, map[any]any with text keys only,
// *wire.Map, []any, string, bool, nil, uint64, int64, int, float64 and
// wire.Number. Errors name the member path (e.g. "head.seq") where the
// offending value sits.
func Append(dst []byte, v any) ([]byte, error) {
	return appendValue(dst, v, "", 0)
}

func pathErr(path string, sentinel error, format string, args ...any) error {
	where := path
	if where == "" {
		where = "top level"
	}
	return fmt.Errorf("%w: %s: %s", sentinel, where, fmt.Sprintf(format, args...))
}

func member(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func appendValue(dst []byte, v any, path string, depth int) ([]byte, error) {
	if depth > wire.MaxDepth {
		return nil, pathErr(path, ErrSyntax, "nested more than %d deep", wire.MaxDepth)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		if !utf8.ValidString(x) {
			return nil, pathErr(path, ErrUnsupported, "text is not valid UTF-8")
		}
		return AppendString(dst, x), nil
	case uint64:
		if x <= MaxExactInteger {
			return strconv.AppendUint(dst, x, 10), nil
		}
		return appendBigInteger(dst, strconv.FormatUint(x, 10), path)
	case int64:
		if -MaxExactInteger <= x && x <= MaxExactInteger {
			return strconv.AppendInt(dst, x, 10), nil
		}
		return appendBigInteger(dst, strconv.FormatInt(x, 10), path)
	case int:
		return appendValue(dst, int64(x), path, depth)
	case float64:
		out, err := AppendNumber(dst, x)
		if err != nil {
			return nil, pathErr(path, ErrNumber, "%v", x)
		}
		return out, nil
	case wire.Number:
		if isIntegerLiteral(string(x)) {
			return appendBigInteger(dst, string(x), path)
		}
		f, err := numberValue(string(x))
		if err != nil {
			return nil, pathErr(path, err, "%s", x)
		}
		return AppendNumber(dst, f)
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			dst, err = appendValue(dst, e, fmt.Sprintf("%s[%d]", path, i), depth+1)
			if err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		return appendObject(dst, keys, func(k string) any { return x[k] }, path, depth)
	case map[any]any:
		m, ok := wire.Members(x)
		if !ok {
			return nil, pathErr(path, ErrUnsupported, "a map with a non-text key")
		}
		return appendValue(dst, m, path, depth)
	case *wire.Map:
		vals := make(map[string]any, len(x.Keys))
		for i, k := range x.Keys {
			if _, dup := vals[k]; dup {
				return nil, pathErr(path, ErrSyntax, "duplicate member %q", k)
			}
			vals[k] = x.Vals[i]
		}
		return appendValue(dst, vals, path, depth)
	}
	return nil, pathErr(path, ErrUnsupported, "a %s", wire.TypeName(v))
}

func appendObject(dst []byte, keys []string, val func(string) any, path string, depth int) ([]byte, error) {
	for _, k := range keys {
		if !utf8.ValidString(k) {
			return nil, pathErr(path, ErrUnsupported, "member name is not valid UTF-8")
		}
	}
	slices.SortFunc(keys, CompareUTF16)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, k)
		dst = append(dst, ':')
		var err error
		dst, err = appendValue(dst, val(k), member(path, k), depth+1)
		if err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// isIntegerLiteral reports whether a JSON number literal has neither a
// fraction nor an exponent ("-0" counts as the double -0, written "0").
func isIntegerLiteral(lit string) bool {
	return !strings.ContainsAny(lit, ".eE") && lit != "-0"
}

// appendBigInteger writes an integer of magnitude beyond 2^53 (decimal text
// lit) if JCS writes the double nearest to it as lit itself, and refuses it
// otherwise: the double would change the number.
func appendBigInteger(dst []byte, lit, path string) ([]byte, error) {
	f, err := numberValue(lit)
	if err != nil {
		return nil, pathErr(path, err, "%s", lit)
	}
	n := len(dst)
	dst, _ = AppendNumber(dst, f)
	if string(dst[n:]) != lit {
		return nil, pathErr(path, ErrUnsafeInteger, "%s would become %s", lit, dst[n:])
	}
	return dst, nil
}

// numberValue turns a JSON number literal into a double.
func numberValue(lit string) (float64, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !(errors.Is(err, strconv.ErrRange) && !math.IsInf(f, 0)) {
		// ParseFloat reports underflow to zero as ErrRange too; that is
		// an ordinary rounding (JSON.parse("1e-400") is 0). Overflow to an
		// infinity is outside the double range (RFC 8785 section 3.2.2.3).
		return 0, ErrNumber
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, ErrNumber
	}
	return f, nil
}

// CompareUTF16 orders strings by their UTF-16 code units (RFC 8785 section
// 3.2.3). It differs from Go's byte order only between a character above
// U+FFFF (a surrogate pair, 0xD800-0xDBFF first) and one in U+E000-U+FFFF.
func CompareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ua, ub := units(ra), units(rb)
			return slices.Compare(ua[:], ub[:])
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b) // the shorter is a prefix: it sorts first
}

// units returns the UTF-16 code units of r, padded with a zero second unit
// for a BMP character (no unit is 0 after a differing first unit, so the
// padding never decides an order that the first unit has not).
func units(r rune) [2]uint16 {
	if r >= 0x10000 {
		h, l := utf16.EncodeRune(r)
		return [2]uint16{uint16(h), uint16(l)}
	}
	return [2]uint16{uint16(r), 0}
}

// AppendString appends s as a JSON string the way JSON.stringify writes it
// (RFC 8785 section 3.2.2.2): '"' and '\\' escaped, the five control
// characters with short escapes as \b \t \n \f \r, the other controls below
// U+0020 as \u00xx (lowercase hex), everything else as its UTF-8 octets. s
// must be valid UTF-8.
func AppendString(dst []byte, s string) []byte {
	// jsontext's minimal escaping, which internal/wire's encoder also
	// writes, is exactly JSON.stringify's.
	return wire.AppendJSONString(dst, s)
}

// AppendNumber appends f as ECMAScript's Number::toString writes it
// (ECMA-262 section 7.1.12.1, required by RFC 8785 section 3.2.2.3). NaN
// and the infinities have no JSON form and yield ErrNumber.
//
// Go's shortest round-trip formatting ('e', precision -1) yields the same
// digits ECMAScript requires: the fewest digits k such that the value
// reads back exactly, and of those, the closest to f. What remains is the
// layout rule for those digits.
func AppendNumber(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, ErrNumber
	}
	if f == 0 { // +0 and -0 alike
		return append(dst, '0'), nil
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±XX
	ePos := strings.IndexByte(string(e), 'e')
	exp, _ := strconv.Atoi(string(e[ePos+1:]))
	var digits [24]byte
	nd := 0
	for _, c := range e[:ePos] {
		if c != '.' {
			digits[nd] = c
			nd++
		}
	}
	d := digits[:nd]
	k := len(d)  // number of significant digits
	n := exp + 1 // position of the decimal point relative to the digits
	switch {
	case k <= n && n <= 21:
		dst = append(dst, d...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, d[:n]...)
		dst = append(dst, '.')
		dst = append(dst, d[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, d...)
	default:
		dst = append(dst, d[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst, nil
}
