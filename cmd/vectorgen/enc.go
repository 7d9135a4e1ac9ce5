package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// This file holds the generator's own encoders. They are written here, not
// taken from the library under test, so that the vectors check the library
// against an independent reading of the data model. Every payload is an
// ordered tree (obj) that encodes to JSON or CBOR; raw values let a vector
// put exact octets where the data model is broken on purpose.

var b64 = base64.RawURLEncoding

type member struct {
	k string
	v any
}

// obj is an ordered map with text keys. add appends even when the key is
// present (a duplicate key, on purpose); set replaces the first match.
type obj struct{ m []member }

func newObj(kv ...any) *obj {
	o := &obj{}
	for i := 0; i < len(kv); i += 2 {
		o.add(kv[i].(string), kv[i+1])
	}
	return o
}

func (o *obj) add(k string, v any) *obj { o.m = append(o.m, member{k, v}); return o }

func (o *obj) set(k string, v any) *obj {
	for i := range o.m {
		if o.m[i].k == k {
			o.m[i].v = v
			return o
		}
	}
	return o.add(k, v)
}

func (o *obj) del(k string) *obj {
	out := o.m[:0]
	for _, m := range o.m {
		if m.k != k {
			out = append(out, m)
		}
	}
	o.m = out
	return o
}

func (o *obj) get(k string) any {
	for _, m := range o.m {
		if m.k == k {
			return m.v
		}
	}
	return nil
}

// raw is a value written as given: j into JSON, c into CBOR. A raw value
// without the octets for the encoding in use is a generator bug.
type raw struct {
	j string
	c []byte
}

// bs is a byte string: a CBOR bstr, base64url text in JSON.
type bs []byte

// cmap is a CBOR map with arbitrary (already encoded) keys, for COSE
// headers; it has no JSON form.
type cmap [][2][]byte

// elem is a signed element: JWS text, or tagged COSE_Sign1 octets.
type elem struct {
	cose   bool
	octets []byte
}

// asText is how a JSON Handoff carries the element.
func (e elem) asText() string {
	if e.cose {
		return b64.EncodeToString(e.octets)
	}
	return string(e.octets)
}

// ---- JSON ----

func jsonString(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err)
	}
	return string(bytes.TrimRight(buf.Bytes(), "\n"))
}

func toJSON(v any) []byte {
	var buf bytes.Buffer
	writeJSON(&buf, v)
	return buf.Bytes()
}

func writeJSON(buf *bytes.Buffer, v any) {
	switch x := v.(type) {
	case *obj:
		buf.WriteByte('{')
		for i, m := range x.m {
			if i > 0 {
				buf.WriteByte(',')
			}
			buf.WriteString(jsonString(m.k))
			buf.WriteByte(':')
			writeJSON(buf, m.v)
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, y := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSON(buf, y)
		}
		buf.WriteByte(']')
	case string:
		buf.WriteString(jsonString(x))
	case int:
		buf.WriteString(strconv.Itoa(x))
	case int64:
		buf.WriteString(strconv.FormatInt(x, 10))
	case uint64:
		buf.WriteString(strconv.FormatUint(x, 10))
	case float64:
		buf.WriteString(strconv.FormatFloat(x, 'f', -1, 64))
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	case nil:
		buf.WriteString("null")
	case raw:
		if x.j == "" {
			panic("raw value without JSON form")
		}
		buf.WriteString(x.j)
	case bs:
		buf.WriteString(jsonString(b64.EncodeToString(x)))
	case elem:
		buf.WriteString(jsonString(x.asText()))
	default:
		panic(fmt.Sprintf("no JSON form for %T", v))
	}
}

// ---- CBOR ----

func cHead(major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return []byte{m | byte(n)}
	case n <= 0xff:
		return []byte{m | 24, byte(n)}
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16([]byte{m | 25}, uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32([]byte{m | 26}, uint32(n))
	}
	return binary.BigEndian.AppendUint64([]byte{m | 27}, n)
}

func cUint(n uint64) []byte { return cHead(0, n) }

func cInt(n int64) []byte {
	if n >= 0 {
		return cHead(0, uint64(n))
	}
	return cHead(1, uint64(-1-n))
}

func cText(s string) []byte  { return append(cHead(3, uint64(len(s))), s...) }
func cBytes(b []byte) []byte { return append(cHead(2, uint64(len(b))), b...) }

func cArray(items ...[]byte) []byte {
	out := cHead(4, uint64(len(items)))
	for _, it := range items {
		out = append(out, it...)
	}
	return out
}

// cMap encodes alternating encoded keys and values.
func cMap(kv ...[]byte) []byte {
	out := cHead(5, uint64(len(kv)/2))
	for _, it := range kv {
		out = append(out, it...)
	}
	return out
}

func cTag(n uint64, item []byte) []byte { return append(cHead(6, n), item...) }

func cFloat64(f float64) []byte {
	return binary.BigEndian.AppendUint64([]byte{0xfb}, math.Float64bits(f))
}

func toCBOR(v any) []byte {
	switch x := v.(type) {
	case *obj:
		out := cHead(5, uint64(len(x.m)))
		for _, m := range x.m {
			out = append(out, cText(m.k)...)
			out = append(out, toCBOR(m.v)...)
		}
		return out
	case cmap:
		out := cHead(5, uint64(len(x)))
		for _, kv := range x {
			out = append(out, kv[0]...)
			out = append(out, kv[1]...)
		}
		return out
	case []any:
		out := cHead(4, uint64(len(x)))
		for _, y := range x {
			out = append(out, toCBOR(y)...)
		}
		return out
	case string:
		return cText(x)
	case int:
		return cInt(int64(x))
	case int64:
		return cInt(x)
	case uint64:
		return cUint(x)
	case float64:
		return cFloat64(x)
	case bool:
		if x {
			return []byte{0xf5}
		}
		return []byte{0xf4}
	case nil:
		return []byte{0xf6}
	case raw:
		if x.c == nil {
			panic("raw value without CBOR form")
		}
		return x.c
	case bs:
		return cBytes(x)
	case elem:
		if x.cose {
			return cBytes(x.octets)
		}
		return cText(string(x.octets))
	}
	panic(fmt.Sprintf("no CBOR form for %T", v))
}
