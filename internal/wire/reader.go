package wire

import (
	"bytes"
	"unicode/utf8"
	"unsafe"
)

// Reader is a pull reader over one encoded value, JSON or CBOR, for a
// decoder that knows the shape it expects (the data model in the root
// package is written once over it, for both encodings). It reads the
// members the caller names without building the value tree; a value the
// caller does not know (an unknown member) is read whole with Any, into the
// same tree DecodeJSON and DecodeCBOR build.
//
// Reader only accepts: it enforces the same syntax rules as DecodeJSON and
// DecodeCBOR (nesting counted the same way, so that Any returns what the
// tree decoder would have put there, and in CBOR the same budget: the
// counts of the maps and arrays it opens are claimed from the input as
// DecodeCBOR claims them, and what Any reads inside them is decoded
// within what is left), but on anything it does not like,
// including an input those decoders accept in a shape the caller did not
// expect, it fails without saying why. Failure is sticky: every later call
// returns a zero value, Key and More return false, and Failed reports it.
// The caller then decodes again with the tree decoder, which decides and
// names the fault (see the root package's decode functions).
//
// Duplicate keys are the caller's to detect (it knows which keys it has
// seen).
type Reader struct {
	cbor  bool
	j     jsonParser  // JSON: the input and the offset
	c     cborDecoder // CBOR: the input and the offset
	s     string      // the input as one string, when asked for; texts are its substrings
	depth int         // the depth passed to the tree decoder for the next value
	n     int         // open maps and arrays
	open  [maxOpen]struct {
		left  uint64 // CBOR: entries left
		comma bool   // JSON: a ',' comes before the next entry
	}
	fail bool
}

// maxOpen bounds the maps and arrays a caller opens with Map and Array
// (the data model nests four deep); Any has no such bound.
const maxOpen = 8

// Reset makes r a Reader over b, which must not change while the Reader
// and what it returned are in use. With asString the input is copied once
// into a string and every text the Reader returns (Text, and the texts in
// what Any returns) is a substring of it: one allocation for all texts,
// which then keep the whole input alive. Without, each text is its own
// copy.
func (r *Reader) Reset(b []byte, cbor, asString bool) {
	*r = Reader{cbor: cbor}
	if asString {
		r.s = string(b)
	}
	r.setInput(b)
}

// ResetOwned is Reset with asString, for an input that nothing writes ever
// again (a buffer the caller allocated and filled, then handed over): the
// texts alias b itself, without the copy.
func (r *Reader) ResetOwned(b []byte, cbor bool) {
	*r = Reader{cbor: cbor}
	if len(b) > 0 {
		r.s = unsafe.String(unsafe.SliceData(b), len(b))
	}
	r.setInput(b)
}

func (r *Reader) setInput(b []byte) {
	if r.cbor {
		r.c.b, r.c.s = b, r.s
	} else {
		r.j.b, r.j.s = b, r.s
	}
}

// Failed reports whether the input was not what the caller expected.
func (r *Reader) Failed() bool { return r.fail }

// Fail marks the input as not what the caller expected.
func (r *Reader) Fail() { r.fail = true }

func (r *Reader) push() bool {
	if r.n == maxOpen {
		r.fail = true
		return false
	}
	r.open[r.n].left, r.open[r.n].comma = 0, false
	r.n++
	return true
}

// Kind is the kind of the next value, as Peek reports it.
type Kind int

// The kinds Peek tells apart.
const (
	KindOther Kind = iota
	KindText
	KindBytes
)

// Peek reports the kind of the next value without reading it.
func (r *Reader) Peek() Kind {
	if r.fail {
		return KindOther
	}
	if r.cbor {
		if r.c.off < len(r.c.b) {
			switch r.c.b[r.c.off] >> 5 {
			case 2:
				return KindBytes
			case 3:
				return KindText
			}
		}
		return KindOther
	}
	r.j.ws()
	if r.j.i < len(r.j.b) && r.j.b[r.j.i] == '"' {
		return KindText
	}
	return KindOther
}

// Map opens a map; its members are then read with Key and a value each.
func (r *Reader) Map() {
	if r.fail {
		return
	}
	if r.cbor {
		major, _, arg, err := r.c.head()
		if err != nil || major != 5 || r.depth >= MaxDepth || !r.c.claim(arg, 2) || !r.push() {
			r.fail = true
			return
		}
		r.open[r.n-1].left = arg
		r.depth++
		return
	}
	r.j.ws()
	if r.j.i >= len(r.j.b) || r.j.b[r.j.i] != '{' || r.depth >= MaxDepth || !r.push() {
		r.fail = true
		return
	}
	r.j.i++
	r.depth++
}

// Key reads the next member's key, or the end of the map, when it returns
// false. A key that is not text fails.
func (r *Reader) Key() (string, bool) {
	if r.fail || r.n == 0 {
		r.fail = true
		return "", false
	}
	top := &r.open[r.n-1]
	if r.cbor {
		if top.left == 0 {
			r.n--
			r.depth--
			return "", false
		}
		top.left--
		r.c.claimed -= 2 // the key and its value are begun
		return r.Text(), !r.fail
	}
	p := &r.j
	p.ws()
	if p.i >= len(p.b) {
		r.fail = true
		return "", false
	}
	if p.b[p.i] == '}' {
		p.i++
		r.n--
		r.depth--
		return "", false
	}
	if top.comma {
		if p.b[p.i] != ',' {
			r.fail = true
			return "", false
		}
		p.i++
		p.ws()
		if p.i >= len(p.b) {
			r.fail = true
			return "", false
		}
	}
	top.comma = true
	if p.b[p.i] != '"' {
		r.fail = true
		return "", false
	}
	name, err := p.name()
	if err != nil {
		r.fail = true
		return "", false
	}
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != ':' {
		r.fail = true
		return "", false
	}
	p.i++
	return name, true
}

// Array opens an array; its elements are read with More and a value each.
func (r *Reader) Array() {
	if r.fail {
		return
	}
	if r.cbor {
		major, _, arg, err := r.c.head()
		if err != nil || major != 4 || r.depth >= MaxDepth || !r.c.claim(arg, 1) || !r.push() {
			r.fail = true
			return
		}
		r.open[r.n-1].left = arg
		r.depth++
		return
	}
	r.j.ws()
	if r.j.i >= len(r.j.b) || r.j.b[r.j.i] != '[' || r.depth >= MaxDepth || !r.push() {
		r.fail = true
		return
	}
	r.j.i++
	r.depth++
}

// More reports whether the array has another element, and reads the end
// of the array when it has not.
func (r *Reader) More() bool {
	if r.fail || r.n == 0 {
		r.fail = true
		return false
	}
	top := &r.open[r.n-1]
	if r.cbor {
		if top.left == 0 {
			r.n--
			r.depth--
			return false
		}
		top.left--
		r.c.claimed--
		return true
	}
	p := &r.j
	p.ws()
	if p.i >= len(p.b) {
		r.fail = true
		return false
	}
	if p.b[p.i] == ']' {
		p.i++
		r.n--
		r.depth--
		return false
	}
	if top.comma {
		if p.b[p.i] != ',' {
			r.fail = true
			return false
		}
		p.i++
	}
	top.comma = true
	return true
}

// text reads a text value and returns its octets, aliasing the input when
// it can (always in CBOR; in JSON when it has no escape), and the offset
// of those octets in the input (-1 when they do not alias it).
func (r *Reader) text() ([]byte, int) {
	if r.fail {
		return nil, -1
	}
	if r.cbor {
		major, _, arg, err := r.c.head()
		if err != nil || major != 3 {
			r.fail = true
			return nil, -1
		}
		start := r.c.off
		s, err := r.c.take(arg)
		if err != nil || !utf8.Valid(s) {
			r.fail = true
			return nil, -1
		}
		return s, start
	}
	p := &r.j
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		r.fail = true
		return nil, -1
	}
	span, start, err := p.unescaped()
	if err != nil {
		r.fail = true
		return nil, -1
	}
	if span != nil {
		return span, start
	}
	s, err := p.escaped(start)
	if err != nil {
		r.fail = true
		return nil, -1
	}
	return []byte(s), -1
}

// Text reads a text value.
func (r *Reader) Text() string {
	b, at := r.text()
	if r.fail {
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

// compact marks the octets of a compact serialization: the base64url
// alphabet and '.'.
var compact = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
	}
	return t
}()

// compactText reports whether b holds only base64url characters and
// periods, and counts the periods. The test is branch-free over eight
// octets at a time (an octet's entry in notCompact is 0 when it belongs),
// the count a vectorized bytes.Count.
func compactText(b []byte) (dots int, ok bool) {
	var bad byte
	n := 0
	for ; len(b)-n >= 8; n += 8 {
		w := b[n : n+8 : n+8]
		bad |= notCompact[w[0]] | notCompact[w[1]] | notCompact[w[2]] | notCompact[w[3]] |
			notCompact[w[4]] | notCompact[w[5]] | notCompact[w[6]] | notCompact[w[7]]
	}
	for _, c := range b[n:] {
		bad |= notCompact[c]
	}
	if bad != 0 {
		return 0, false
	}
	return bytes.Count(b, dot), true
}

var dot = []byte{'.'}

// notCompact is 1 for the octets outside the base64url alphabet and '.'.
var notCompact = func() (t [256]byte) {
	for c := range t {
		if !compact[c] {
			t[c] = 1
		}
	}
	return t
}()

// CompactText reads a text value made only of base64url characters and
// periods (a JWS, or base64url) in one pass, and returns its octets, which
// alias the input, and the number of periods. A text value of any other
// content is not read: ok is false and the Reader has not moved, nor
// failed. Anything but a text value fails.
func (r *Reader) CompactText() (b []byte, dots int, ok bool) {
	if r.fail {
		return nil, 0, false
	}
	var span []byte
	var next int
	if r.cbor {
		save := r.c.off
		major, _, arg, err := r.c.head()
		if err != nil || major != 3 {
			r.fail = true
			return nil, 0, false
		}
		s, err := r.c.take(arg)
		if err != nil {
			r.fail = true
			return nil, 0, false
		}
		span, next = s, r.c.off
		r.c.off = save
	} else {
		p := &r.j
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			r.fail = true
			return nil, 0, false
		}
		start := p.i + 1
		end := bytes.IndexByte(p.b[start:], '"')
		if end < 0 {
			return nil, 0, false
		}
		span, next = p.b[start:start+end], start+end+1
	}
	dots, ok = compactText(span)
	if !ok {
		return nil, 0, false
	}
	if r.cbor {
		r.c.off = next
	} else {
		r.j.i = next
	}
	return span, dots, true
}

// Uint reads a non-negative integer: in JSON a literal of digits only
// (what DecodeJSON reads as a uint64), in CBOR major type 0.
func (r *Reader) Uint() uint64 {
	if r.fail {
		return 0
	}
	if r.cbor {
		major, _, arg, err := r.c.head()
		if err != nil || major != 0 {
			r.fail = true
			return 0
		}
		return arg
	}
	p := &r.j
	p.ws()
	start := p.i
	var n uint64
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		d := uint64(p.b[p.i] - '0')
		if n > (1<<64-1-d)/10 {
			r.fail = true // beyond 64 bits: a Number
			return 0
		}
		n = n*10 + d
		p.i++
	}
	switch {
	case p.i == start, p.i-start > 1 && p.b[start] == '0':
		r.fail = true
		return 0
	case p.i < len(p.b):
		if c := p.b[p.i]; c == '.' || c == 'e' || c == 'E' || '0' <= c && c <= '9' {
			r.fail = true // a fraction or an exponent: a Number
			return 0
		}
	}
	return n
}

// Bytes reads a CBOR byte string and returns a copy of it (never nil). In
// JSON it fails.
func (r *Reader) Bytes() []byte {
	if r.fail || !r.cbor {
		r.fail = true
		return nil
	}
	major, _, arg, err := r.c.head()
	if err != nil || major != 2 {
		r.fail = true
		return nil
	}
	s, err := r.c.take(arg)
	if err != nil {
		r.fail = true
		return nil
	}
	return append([]byte{}, s...)
}

// Any reads the next value whole, as DecodeJSON or DecodeCBOR would have
// decoded it at this place.
func (r *Reader) Any() any {
	if r.fail {
		return nil
	}
	var v any
	var err error
	if r.cbor {
		v, err = r.c.value(r.depth)
	} else {
		r.j.ws()
		v, err = r.j.value(r.depth)
	}
	if err != nil {
		r.fail = true
		return nil
	}
	return v
}

// End checks that the value is complete and nothing follows it but (in
// JSON) white space, and reports whether the whole input was read as
// expected.
func (r *Reader) End() bool {
	if r.fail || r.n != 0 {
		r.fail = true
		return false
	}
	if r.cbor {
		r.fail = r.c.off != len(r.c.b)
	} else {
		r.j.ws()
		r.fail = r.j.i != len(r.j.b)
	}
	return !r.fail
}
