package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
	"github.com/x448/float16"
)

var encMode = func() cbor.EncMode {
	m, err := cbor.EncOptions{
		Sort:          cbor.SortCoreDeterministic,
		IndefLength:   cbor.IndefLengthForbidden,
		ShortestFloat: cbor.ShortestFloatNone,
		BigIntConvert: cbor.BigIntConvertShortest,
		Time:          cbor.TimeUnixDynamic,
		TimeTag:       cbor.EncTagRequired,
	}.EncMode()
	if err != nil {
		panic(err)
	}
	return m
}()

// DecodeCBOR strictly decodes one CBOR data item: well-formed (RFC 8949
// section 5.3.1), definite lengths only, text valid UTF-8, no duplicate map
// keys (compared by value, so 1 and a non-minimal 1 are the same key),
// nesting at most MaxDepth, no trailing data. Non-minimal integer heads
// are accepted. Tags are not interpreted: a tag is kept as a cbor.Tag
// around its decoded content, whatever its number (tag 0 around an
// integer is as well-formed as any other), so an unknown member keeps
// whatever well-formed CBOR it holds (D3).
func DecodeCBOR(b []byte) (any, error) {
	d := cborDecoder{b: b}
	v, err := d.value(0)
	if err != nil {
		return nil, fmt.Errorf("%w: CBOR: %v", ErrSyntax, err)
	}
	if d.off != len(b) {
		return nil, fmt.Errorf("%w: CBOR: %d octets of trailing data", ErrSyntax, len(b)-d.off)
	}
	return v, nil
}

type cborDecoder struct {
	b   []byte
	off int
	s   string // b as a string, or ""; texts are then its substrings
}

var errTruncated = errors.New("truncated")

// head reads an initial byte and its argument.
func (d *cborDecoder) head() (major, ai byte, arg uint64, err error) {
	if d.off >= len(d.b) {
		return 0, 0, 0, errTruncated
	}
	ib := d.b[d.off]
	d.off++
	major, ai = ib>>5, ib&0x1f
	switch {
	case ai < 24:
		return major, ai, uint64(ai), nil
	case ai <= 27:
		n := 1 << (ai - 24)
		if len(d.b)-d.off < n {
			return 0, 0, 0, errTruncated
		}
		for _, c := range d.b[d.off : d.off+n] {
			arg = arg<<8 | uint64(c)
		}
		d.off += n
		return major, ai, arg, nil
	case ai == 31:
		return 0, 0, 0, errors.New("indefinite length")
	}
	return 0, 0, 0, fmt.Errorf("reserved additional information %d", ai)
}

func (d *cborDecoder) take(n uint64) ([]byte, error) {
	if n > uint64(len(d.b)-d.off) {
		return nil, errTruncated
	}
	s := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return s, nil
}

func (d *cborDecoder) value(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, errors.New("nested too deeply")
	}
	major, ai, arg, err := d.head()
	if err != nil {
		return nil, err
	}
	switch major {
	case 0:
		return arg, nil
	case 1:
		if arg > math.MaxInt64 {
			return cbor.Tag{Number: 3, Content: new(big.Int).SetUint64(arg).Bytes()}, nil
		}
		return -1 - int64(arg), nil
	case 2:
		s, err := d.take(arg)
		if err != nil {
			return nil, err
		}
		return append([]byte{}, s...), nil
	case 3:
		s, err := d.take(arg)
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(s) {
			return nil, errors.New("text string is not valid UTF-8")
		}
		if d.s != "" {
			return d.s[d.off-len(s) : d.off], nil
		}
		return string(s), nil
	case 4:
		if arg > uint64(len(d.b)-d.off) { // each element takes an octet at least
			return nil, errTruncated
		}
		a := make([]any, 0, arg)
		for i := uint64(0); i < arg; i++ {
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	case 5:
		if arg > uint64(len(d.b)-d.off)/2 {
			return nil, errTruncated
		}
		return d.mapValue(arg, depth)
	case 6:
		c, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		return cbor.Tag{Number: arg, Content: c}, nil
	}
	// major 7: simple values and floats.
	switch ai {
	case 20:
		return false, nil
	case 21:
		return true, nil
	case 22:
		return nil, nil
	case 25:
		return float64(float16.Frombits(uint16(arg)).Float32()), nil
	case 26:
		return float64(math.Float32frombits(uint32(arg))), nil
	case 27:
		return math.Float64frombits(arg), nil
	case 24:
		if arg < 32 {
			return nil, errors.New("simple value in two octets below 32")
		}
	}
	return cbor.SimpleValue(arg), nil
}

// Pairs is a CBOR map with a key that cannot be a Go map key (an array,
// a map, a byte string, a tag around one), kept as its pairs in order.
type Pairs []Pair

// Pair is one member of Pairs.
type Pair struct{ Key, Val any }

// mapValue reads n pairs. A map whose keys are all text (every map of the
// data model) becomes map[string]any; one with other hashable keys,
// map[any]any; one with an unhashable key, Pairs. Keys are unique by
// value.
func (d *cborDecoder) mapValue(n uint64, depth int) (any, error) {
	text := make(map[string]any, n)
	var other []Pair
	for i := uint64(0); i < n; i++ {
		k, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if s, ok := k.(string); ok {
			if _, dup := text[s]; dup {
				return nil, fmt.Errorf("duplicate map key %q", s)
			}
			text[s] = v
			continue
		}
		other = append(other, Pair{k, v})
	}
	if len(other) == 0 {
		return text, nil
	}
	seen := make(map[string]bool, len(other))
	hashable := true
	for _, p := range other {
		id, h := keyID(p.Key)
		if seen[id] {
			return nil, fmt.Errorf("duplicate map key %s", id)
		}
		seen[id] = true
		hashable = hashable && h
	}
	if !hashable {
		out := make(Pairs, 0, n)
		for k, v := range text {
			out = append(out, Pair{k, v})
		}
		return append(out, other...), nil
	}
	m := make(map[any]any, n)
	for k, v := range text {
		m[k] = v
	}
	for _, p := range other {
		m[p.Key] = p.Val
	}
	return m, nil
}

// keyID names a map key by value for duplicate detection, and says whether
// the decoded key can itself be a Go map key.
func keyID(k any) (string, bool) {
	switch x := k.(type) {
	case string:
		return "t" + strconv.Quote(x), true
	case uint64:
		return "u" + strconv.FormatUint(x, 10), true
	case int64:
		return "n" + strconv.FormatInt(x, 10), true
	case bool, nil, float64, cbor.SimpleValue:
		return fmt.Sprintf("%T:%v", x, x), true
	case cbor.Tag:
		// One call on the content: calling twice per tag made nested tags
		// in a map key cost 2^depth (FuzzReaderMatchesTree found it).
		if id, h := keyID(x.Content); h {
			return "tag" + strconv.FormatUint(x.Number, 10) + "(" + id + ")", true
		}
	}
	b, _ := encMode.Marshal(k)
	return "x" + hex.EncodeToString(b), false
}

// EncodeCBOR writes a value tree as CBOR with definite lengths. *Map keeps
// its order; other values are written by the deterministic encoder.
func EncodeCBOR(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := writeCBOR(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeCBOR(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case *Map:
		head(buf, 5, uint64(len(x.Keys)))
		for i, k := range x.Keys {
			head(buf, 3, uint64(len(k)))
			buf.WriteString(k)
			if err := writeCBOR(buf, x.Vals[i]); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	case []any:
		head(buf, 4, uint64(len(x)))
		for _, y := range x {
			if err := writeCBOR(buf, y); err != nil {
				return err
			}
		}
		return nil
	case Pairs:
		head(buf, 5, uint64(len(x)))
		for _, p := range x {
			if err := writeCBOR(buf, p.Key); err != nil {
				return err
			}
			if err := writeCBOR(buf, p.Val); err != nil {
				return err
			}
		}
		return nil
	case cbor.Tag:
		head(buf, 6, x.Number)
		return writeCBOR(buf, x.Content)
	case map[any]any:
		// Hashable keys of mixed types: write in the deterministic order of
		// their encodings.
		type kv struct {
			k []byte
			v any
		}
		kvs := make([]kv, 0, len(x))
		for k, v := range x {
			var kb bytes.Buffer
			if err := writeCBOR(&kb, k); err != nil {
				return err
			}
			kvs = append(kvs, kv{kb.Bytes(), v})
		}
		sort.Slice(kvs, func(i, j int) bool { return bytes.Compare(kvs[i].k, kvs[j].k) < 0 })
		head(buf, 5, uint64(len(kvs)))
		for _, e := range kvs {
			buf.Write(e.k)
			if err := writeCBOR(buf, e.v); err != nil {
				return err
			}
		}
		return nil
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
		return writeCBOR(buf, m)
	case string:
		head(buf, 3, uint64(len(x)))
		buf.WriteString(x)
		return nil
	case uint64:
		head(buf, 0, x)
		return nil
	case []byte:
		head(buf, 2, uint64(len(x)))
		buf.Write(x)
		return nil
	case Number:
		f, err := numberFloat(x)
		if err != nil {
			return err
		}
		v = f
	}
	b, err := encMode.Marshal(v)
	if err != nil {
		return err
	}
	buf.Write(b)
	return nil
}

// head writes a CBOR initial byte and argument in preferred (shortest) form.
func head(buf *bytes.Buffer, major byte, n uint64) {
	m := major << 5
	switch {
	case n < 24:
		buf.WriteByte(m | byte(n))
	case n <= 0xff:
		buf.WriteByte(m | 24)
		buf.WriteByte(byte(n))
	case n <= 0xffff:
		buf.WriteByte(m | 25)
		buf.Write(binary.BigEndian.AppendUint16(nil, uint16(n)))
	case n <= 0xffffffff:
		buf.WriteByte(m | 26)
		buf.Write(binary.BigEndian.AppendUint32(nil, uint32(n)))
	default:
		buf.WriteByte(m | 27)
		buf.Write(binary.BigEndian.AppendUint64(nil, n))
	}
}
