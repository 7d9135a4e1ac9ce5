package wire

import (
	"encoding/base64"

	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
)

// Writer appends maps of text keys, texts and non-negative integers in
// JSON or CBOR, straight to a buffer: the encoders' output for the same
// values (EncodeJSON, EncodeCBOR of a *Map), octet for octet, without
// building the tree. The caller gives each map's and array's length up
// front (CBOR needs it) and ends each with End (JSON needs it).
type Writer struct {
	cbor  bool
	buf   []byte
	n     int
	comma [maxOpen]bool // JSON: a ',' before the next entry
	array [maxOpen]bool // JSON: the level is an array
	key   string        // the last key written, to name it in an error
	err   error
}

// ErrInvalidUTF8 is the error of a Writer given text that is not valid
// UTF-8, which neither JSON nor a CBOR text string can carry (the
// decoders refuse it).
var ErrInvalidUTF8 = errors.New("text is not valid UTF-8")

// NewWriter returns a Writer appending to buf.
func NewWriter(buf []byte, cbor bool) *Writer { return &Writer{cbor: cbor, buf: buf} }

// Bytes returns the encoding, or the first error.
func (w *Writer) Bytes() ([]byte, error) {
	if w.err == nil && w.n != 0 {
		w.err = errors.New("wire: Writer: a map or array is not ended")
	}
	return w.buf, w.err
}

func (w *Writer) sep() {
	if w.cbor || w.n == 0 {
		return
	}
	if w.comma[w.n-1] {
		w.buf = append(w.buf, ',')
	}
	w.comma[w.n-1] = true
}

func (w *Writer) open(major byte, n int, c byte) {
	if w.n == maxOpen {
		w.err = errors.New("wire: Writer: nested too deeply")
		return
	}
	if w.cbor {
		w.buf = appendHead(w.buf, major, uint64(n))
	} else {
		w.sep()
		w.buf = append(w.buf, c)
	}
	w.comma[w.n], w.array[w.n] = false, major == 4
	w.n++
}

// Map starts a map of n members: n times Key and a value, then End.
func (w *Writer) Map(n int) { w.open(5, n, '{') }

// Array starts an array of n elements, then End.
func (w *Writer) Array(n int) { w.open(4, n, '[') }

// End ends the innermost map or array.
func (w *Writer) End() {
	if w.n == 0 {
		w.err = errors.New("wire: Writer: End without a map or array")
		return
	}
	w.n--
	if w.cbor {
		return
	}
	if w.array[w.n] {
		w.buf = append(w.buf, ']')
	} else {
		w.buf = append(w.buf, '}')
	}
}

// Key writes a member's key; its value follows.
func (w *Writer) Key(k string) {
	w.Text(k)
	w.key = k
	if !w.cbor {
		w.buf = append(w.buf, ':')
		w.comma[w.n-1] = false // the value takes no ','
	}
}

// Text writes a text string.
func (w *Writer) Text(s string) {
	if w.err == nil && !utf8.ValidString(s) {
		w.err = fmt.Errorf("%s: %w", w.key, ErrInvalidUTF8)
	}
	if w.cbor {
		w.buf = appendHead(w.buf, 3, uint64(len(s)))
		w.buf = append(w.buf, s...)
		return
	}
	w.sep()
	w.buf = AppendJSONString(w.buf, s)
}

// ByteString writes a CBOR byte string; JSON has none (an error).
func (w *Writer) ByteString(b []byte) {
	if !w.cbor {
		if w.err == nil {
			w.err = fmt.Errorf("%s: a byte string cannot be represented in JSON", w.key)
		}
		return
	}
	w.buf = appendHead(w.buf, 2, uint64(len(b)))
	w.buf = append(w.buf, b...)
}

// Any writes a value tree as EncodeJSON or EncodeCBOR writes it: a value
// the caller does not know (an unknown member, kept as it was decoded).
func (w *Writer) Any(v any) {
	var b []byte
	var err error
	if !within(v, MaxDepth) {
		err = fmt.Errorf("%w of %d (or a value that holds itself)", ErrNesting, MaxDepth)
	} else if w.cbor {
		b, err = EncodeCBOR(v)
	} else {
		b, err = EncodeJSON(v)
	}
	if err != nil {
		if w.err == nil {
			w.err = fmt.Errorf("%s: %w", w.key, err)
		}
		return
	}
	w.sep()
	w.buf = append(w.buf, b...)
}

// Uint writes a non-negative integer.
func (w *Writer) Uint(u uint64) {
	if w.cbor {
		w.buf = appendHead(w.buf, 0, u)
		return
	}
	w.sep()
	w.buf = strconv.AppendUint(w.buf, u, 10)
}

// AppendJSONString appends s as a JSON string as jsontext writes it: '"'
// and '\\' escaped, control characters as \b \t \n \f \r or \u00xx, all
// else as it is.
func AppendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\b':
			buf = append(buf, '\\', 'b')
		case '\t':
			buf = append(buf, '\\', 't')
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\f':
			buf = append(buf, '\\', 'f')
		case '\r':
			buf = append(buf, '\\', 'r')
		default:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// appendHead appends a CBOR initial byte and argument in preferred form.
func appendHead(buf []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(buf, m|byte(n))
	case n <= 0xff:
		return append(buf, m|24, byte(n))
	case n <= 0xffff:
		return append(buf, m|25, byte(n>>8), byte(n))
	case n <= 0xffffffff:
		return append(buf, m|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(buf, m|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// TextBase64URL writes the base64url (no padding) of b as a text string,
// without making the string first.
func (w *Writer) TextBase64URL(b []byte) {
	n := base64.RawURLEncoding.EncodedLen(len(b))
	if w.cbor {
		w.buf = appendHead(w.buf, 3, uint64(n))
		w.buf = base64.RawURLEncoding.AppendEncode(w.buf, b)
		return
	}
	w.sep()
	w.buf = append(w.buf, '"')
	w.buf = base64.RawURLEncoding.AppendEncode(w.buf, b)
	w.buf = append(w.buf, '"')
}

// within reports whether v nests at most depth arrays, maps and tags: a
// bound the decoders hold input to, checked before a value is written so
// that a value holding itself ends in an error, not in a stack overflow.
func within(v any, depth int) bool {
	switch x := v.(type) {
	case map[string]any:
		if depth == 0 {
			return false
		}
		for _, y := range x {
			if !within(y, depth-1) {
				return false
			}
		}
	case map[any]any:
		if depth == 0 {
			return false
		}
		for k, y := range x {
			if !within(k, depth-1) || !within(y, depth-1) {
				return false
			}
		}
	case Pairs:
		if depth == 0 {
			return false
		}
		for _, p := range x {
			if !within(p.Key, depth-1) || !within(p.Val, depth-1) {
				return false
			}
		}
	case *Map:
		if depth == 0 {
			return false
		}
		for _, y := range x.Vals {
			if !within(y, depth-1) {
				return false
			}
		}
	case []any:
		if depth == 0 {
			return false
		}
		for _, y := range x {
			if !within(y, depth-1) {
				return false
			}
		}
	case cbor.Tag:
		return depth > 0 && within(x.Content, depth-1)
	}
	return true
}
