package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxDepth bounds the nesting of decoded values, in both formats: at most
// MaxDepth arrays and maps (and, in CBOR, tags) around the deepest value,
// unknown members included. The data model nests five deep at most (a
// payload, refs, a ref, a learnlog-head proof, its head); the rest is room
// for unknown members. Deeper input is refused with an error that matches
// ErrNesting (and ErrSyntax), before anything below the limit is decoded;
// the root package reports it as an exceeded bound (policy). The value is
// well below the 128 it once was (issue 13): a bound on the recursion,
// and on the work an input can make per octet (keyID re-encodes a map key
// once per enclosing key).
const MaxDepth = 32

// ErrNesting marks input nested more deeply than MaxDepth. Errors that
// match it also match ErrSyntax.
var ErrNesting = errors.New("nested more deeply than the limit")

// errNesting is the decoders' error for a value past MaxDepth.
var errNesting = fmt.Errorf("%w of %d", ErrNesting, MaxDepth)

// DecodeJSON strictly decodes one JSON value: RFC 8259 syntax, valid UTF-8,
// no duplicate object member names (compared exactly, case-sensitive), no
// trailing data, nesting at most MaxDepth.
func DecodeJSON(b []byte) (any, error) {
	v, err := parseJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%w: JSON: %w", ErrSyntax, err)
	}
	return v, nil
}

// EncodeJSON writes a value tree as compact JSON. *Map keeps its order;
// plain maps are written with sorted keys. Byte strings, tags and other
// CBOR-only values cannot be written and are an error.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	e := jsontext.NewEncoder(&buf)
	if err := writeJSON(e, v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func writeJSON(e *jsontext.Encoder, v any) error {
	switch x := v.(type) {
	case *Map:
		if err := e.WriteToken(jsontext.BeginObject); err != nil {
			return err
		}
		for i, k := range x.Keys {
			if err := e.WriteToken(jsontext.String(k)); err != nil {
				return err
			}
			if err := writeJSON(e, x.Vals[i]); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return e.WriteToken(jsontext.EndObject)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m := &Map{Keys: keys}
		for _, k := range keys {
			m.Vals = append(m.Vals, x[k])
		}
		return writeJSON(e, m)
	case map[any]any, Pairs:
		m, ok := Members(x)
		if !ok {
			return errors.New("a map with non-text keys cannot be represented in JSON")
		}
		return writeJSON(e, m)
	case []any:
		if err := e.WriteToken(jsontext.BeginArray); err != nil {
			return err
		}
		for _, y := range x {
			if err := writeJSON(e, y); err != nil {
				return err
			}
		}
		return e.WriteToken(jsontext.EndArray)
	case string:
		return e.WriteToken(jsontext.String(x))
	case uint64:
		return e.WriteToken(jsontext.Uint(x))
	case int64:
		return e.WriteToken(jsontext.Int(x))
	case int:
		return e.WriteToken(jsontext.Int(int64(x)))
	case Number:
		return e.WriteValue(jsontext.Value(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return errors.New("a non-finite number cannot be represented in JSON")
		}
		return e.WriteValue(jsontext.Value(strconv.FormatFloat(x, 'g', -1, 64)))
	case bool:
		return e.WriteToken(jsontext.Bool(x))
	case nil:
		return e.WriteToken(jsontext.Null)
	}
	return fmt.Errorf("a CBOR %s cannot be represented in JSON", TypeName(v))
}
