package wire

import (
	"bytes"
	"errors"
	"unicode/utf8"
)

// The Reader's texts: read and checked (text, Text, TextBytes), read and
// checked against an alphabet in the same pass (TextIn), or read unchecked
// for a caller that compares them with octets it checked before (RawText).

// text reads a text value and returns its octets, aliasing the input when
// it can (always in CBOR; in JSON when it has no escape), and the offset
// of those octets in the input (-1 when they do not alias it).
func (r *Reader) text() ([]byte, int) {
	if r.err != nil {
		return nil, -1
	}
	if r.cbor {
		major, _, arg, err := r.c.head()
		if err != nil {
			r.fail(err)
			return nil, -1
		}
		if major != 3 {
			r.fail(errUse)
			return nil, -1
		}
		start := r.c.off
		s, err := r.c.take(arg)
		if err != nil {
			r.fail(err)
			return nil, -1
		}
		if !utf8.Valid(s) {
			r.fail(errors.New("text string is not valid UTF-8"))
			return nil, -1
		}
		return s, start
	}
	p := &r.j
	p.ws()
	if p.i >= len(p.b) {
		r.fail(errJSONEnd)
		return nil, -1
	}
	if p.b[p.i] != '"' {
		r.fail(errUse)
		return nil, -1
	}
	span, start, err := p.unescaped()
	if err != nil {
		r.fail(err)
		return nil, -1
	}
	if span != nil {
		return span, start
	}
	s, err := p.escaped(start)
	if err != nil {
		r.fail(err)
		return nil, -1
	}
	return []byte(s), -1
}

// TextIn reads a JSON text value whose octets all have a zero entry in
// notIn, and returns them (aliasing the input) with true; for any other
// value, and in CBOR, it reads nothing and returns false. notIn must be
// non-zero for '"', '\\', the control octets and those of 0x80 and above:
// a string of the others has no escape and is valid UTF-8, so its octets
// between the quotes are its text, and one pass over them is both the
// caller's check of its alphabet and the parser's of the string. (A
// signed element in a chain is 1 KiB or more of base64url: text() would
// scan it, then the caller again.)
func (r *Reader) TextIn(notIn *[256]byte) ([]byte, bool) {
	span, ok := r.quoted()
	if !ok || !AllIn(notIn, span) {
		return nil, false
	}
	r.j.i += len(span) + 2
	return span, true
}

// quoted returns, in JSON, the octets from the next value's opening quote
// to the next quote, without reading them.
func (r *Reader) quoted() ([]byte, bool) {
	if r.err != nil || r.cbor {
		return nil, false
	}
	p := &r.j
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	end := bytes.IndexByte(p.b[p.i+1:], '"')
	if end < 0 {
		return nil, false
	}
	return p.b[p.i+1 : p.i+1+end : p.i+1+end], true
}

// RawText reads a JSON text value as the octets between its opening quote
// and the next quote, unchecked: no escape is read, no octet looked at.
// They are the string's text only when the caller knows they hold no
// backslash, control octet or octet of 0x80 and above, as when they equal
// octets it checked before; the Reader is then where the string ends.
// For any other octets the Reader may be anywhere (after an escaped
// quote): the caller must then drop all it read and read the input again
// with the checking methods. In CBOR, or when the next value is not a
// string, it reads nothing and returns false.
func (r *Reader) RawText() ([]byte, bool) {
	span, ok := r.quoted()
	if ok {
		r.j.i += len(span) + 2
	}
	return span, ok
}

// AllIn reports whether every octet of b has a zero entry in notIn: one
// pass, branch-free over eight octets at a time.
func AllIn(notIn *[256]byte, b []byte) bool {
	var bad byte
	n := 0
	for ; len(b)-n >= 8; n += 8 {
		w := b[n : n+8 : n+8]
		bad |= notIn[w[0]] | notIn[w[1]] | notIn[w[2]] | notIn[w[3]] |
			notIn[w[4]] | notIn[w[5]] | notIn[w[6]] | notIn[w[7]]
	}
	for _, c := range b[n:] {
		bad |= notIn[c]
	}
	return bad == 0
}

// Text reads a text value.
func (r *Reader) Text() string {
	b, at := r.text()
	if r.err != nil {
		return ""
	}
	if at >= 0 && r.s != "" {
		return r.s[at : at+len(b)]
	}
	return string(b)
}

// TextBytes reads a text value and returns its octets. They may alias the
// input: copy them to keep them.
func (r *Reader) TextBytes() []byte {
	b, _ := r.text()
	return b
}
