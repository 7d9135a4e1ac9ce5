package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/fxamacker/cbor/v2"
)

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
