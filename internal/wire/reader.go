package wire

import (
	"errors"
	"fmt"
	"unsafe"
)

// Reader is a pull reader over one encoded value, JSON or CBOR, for a
// decoder that knows the shape it expects (the data model in the root
// package is written once over it, for both encodings). It reads the
// members the caller names without building the value tree; a value the
// caller does not know (an unknown member, or a member of the wrong type,
// whose type the caller then names) is read whole with Any, into the same
// tree DecodeJSON and DecodeCBOR build.
//
// Reader enforces the same syntax rules as DecodeJSON and DecodeCBOR
// (nesting counted the same way, and in CBOR the same budget: the counts
// of the maps and arrays it opens are claimed from the input as
// DecodeCBOR claims them, and what Any reads inside them is decoded
// within what is left), and fails on a syntax error with the error those
// decoders give (ErrSyntax, ErrNesting). Failure is sticky: every later
// call returns a zero value, Key and More return false, and Err reports
// the first error. A caller that looks before it reads (Peek) never makes
// the Reader fail for a value of the wrong shape: only the syntax of the
// input does, so that a decoder can read on past a fault in the data
// model, to find a syntax error later in the input (which comes first),
// and name the fault itself.
//
// Duplicate keys are the caller's to detect (it knows which keys it has
// seen; Duplicate reports one).
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
		isMap bool   // a map (Key reads it), else an array (More does)
	}
	keyEnd   int // JSON: the offset just after the last key, where a duplicate is named
	err      error
	notText  bool     // CBOR: the map Key last ended had a key that is not text
	restKeys []string // its text keys from that key on
	recheck  bool     // End decodes the whole input again for its syntax (see Recheck)
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

// Err returns the first syntax error, wrapped as DecodeJSON and
// DecodeCBOR wrap theirs, or nil.
func (r *Reader) Err() error { return r.err }

// Failed reports whether the Reader has failed.
func (r *Reader) Failed() bool { return r.err != nil }

// fail records err, the first error, in the decoders' wording.
func (r *Reader) fail(err error) {
	if r.err != nil {
		return
	}
	if r.cbor {
		r.err = fmt.Errorf("%w: CBOR: %w", ErrSyntax, err)
	} else {
		r.err = fmt.Errorf("%w: JSON: %w", ErrSyntax, err)
	}
}

// Recheck tells the Reader that the caller no longer tells duplicate keys
// apart in the map it is reading (it refuses the input anyway, for a
// fault of the data model), so End decodes the whole input once more as
// DecodeJSON or DecodeCBOR does, to find the syntax error that comes
// before any such fault, if there is one. The input is then read twice,
// the second time as one tree: within the decoders' own bounds, and only
// for input that is refused.
func (r *Reader) Recheck() { r.recheck = true }

// Duplicate fails the Reader for a key the caller has already seen in the
// map it is reading, as the decoders fail for one.
func (r *Reader) Duplicate(k string) {
	if r.cbor {
		r.fail(fmt.Errorf("duplicate map key %q", k))
	} else {
		at := r.j
		at.i = r.keyEnd
		r.fail(at.errorf("duplicate object member name %q", k))
	}
}

// errUse is the error of a call the caller should not have made (Text on
// a value Peek did not call text, End with a map still open): a bug, not
// the input's fault, but still a failure, never a panic.
var errUse = errors.New("reader: a value read as what it is not")

func (r *Reader) push(isMap bool) bool {
	if r.n == maxOpen {
		r.fail(errors.New("reader: maps and arrays opened too deeply"))
		return false
	}
	r.open[r.n].left, r.open[r.n].comma, r.open[r.n].isMap = 0, false, isMap
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
	KindUint // a non-negative integer that fits 64 bits (JSON: digits only)
	KindMap
	KindArray
)

// Peek reports the kind of the next value without reading it. After a
// failure it is KindOther.
func (r *Reader) Peek() Kind {
	if r.err != nil {
		return KindOther
	}
	if r.cbor {
		if r.c.off < len(r.c.b) {
			switch r.c.b[r.c.off] >> 5 {
			case 0:
				return KindUint
			case 2:
				return KindBytes
			case 3:
				return KindText
			case 4:
				return KindArray
			case 5:
				return KindMap
			}
		}
		return KindOther
	}
	p := &r.j
	p.ws()
	if p.i >= len(p.b) {
		return KindOther
	}
	switch c := p.b[p.i]; {
	case c == '"':
		return KindText
	case c == '{':
		return KindMap
	case c == '[':
		return KindArray
	case '0' <= c && c <= '9':
		if _, n := jsonUint(p.b[p.i:]); n > 0 {
			return KindUint
		}
	}
	return KindOther
}

// jsonUint reads the JSON number at the start of b when it is what
// DecodeJSON reads as a uint64 (digits only, no leading zero, no fraction
// or exponent, at most 2^64-1), and returns it and its length; else n is 0.
func jsonUint(b []byte) (u uint64, n int) {
	for n < len(b) && '0' <= b[n] && b[n] <= '9' {
		d := uint64(b[n] - '0')
		if u > (1<<64-1-d)/10 {
			return 0, 0 // beyond 64 bits: a Number
		}
		u = u*10 + d
		n++
	}
	switch {
	case n == 0, n > 1 && b[0] == '0':
		return 0, 0
	case n < len(b):
		if c := b[n]; c == '.' || c == 'e' || c == 'E' {
			return 0, 0 // a fraction or an exponent: a Number
		}
	}
	return u, n
}

// Map opens a map; its members are then read with Key and a value each.
func (r *Reader) Map() {
	if r.err != nil {
		return
	}
	if r.cbor {
		major, _, arg, err := r.c.head()
		switch {
		case err != nil:
			r.fail(err)
		case major != 5:
			r.fail(errUse)
		case r.depth >= MaxDepth:
			r.fail(errNesting)
		case !r.c.claim(arg, 2):
			r.fail(errTruncated)
		case r.push(true):
			r.open[r.n-1].left = arg
			r.depth++
		}
		return
	}
	p := &r.j
	p.ws()
	switch {
	case p.i >= len(p.b):
		r.fail(errJSONEnd)
	case p.b[p.i] != '{':
		r.fail(errUse)
	case r.depth >= MaxDepth:
		r.fail(errNesting)
	case r.push(true):
		p.i++
		r.depth++
	}
}

// Key reads the next member's key, or the end of the map, when it returns
// false. In CBOR, a key that is not text ends the map too: the Reader
// reads the rest of the map whole (keys and values, as DecodeCBOR would),
// NotText reports it, and End checks the syntax of the whole input once
// more (Recheck), duplicate keys included.
func (r *Reader) Key() (string, bool) {
	r.notText, r.restKeys = false, nil
	if r.err != nil {
		return "", false
	}
	if r.n == 0 || !r.open[r.n-1].isMap {
		r.fail(errUse)
		return "", false
	}
	top := &r.open[r.n-1]
	if r.cbor {
		if top.left == 0 {
			r.n--
			r.depth--
			return "", false
		}
		if r.c.off < len(r.c.b) && r.c.b[r.c.off]>>5 != 3 {
			// Not text: the rest of the map, whole, as mapValue reads it.
			var rest []string
			for ; top.left > 0; top.left-- {
				r.c.claimed--
				k, err := r.c.value(r.depth) // whole: its text names a member
				if err == nil {
					r.c.claimed--
					r.c.discard = true
					_, err = r.c.value(r.depth)
					r.c.discard = false
				}
				if err != nil {
					r.fail(err)
					return "", false
				}
				if s, ok := k.(string); ok {
					rest = append(rest, s)
				}
			}
			r.n--
			r.depth--
			r.notText, r.restKeys, r.recheck = true, rest, true
			return "", false
		}
		top.left--
		r.c.claimed -= 2 // the key and its value are begun
		return r.Text(), r.err == nil
	}
	p := &r.j
	p.ws()
	if p.i >= len(p.b) {
		r.fail(errJSONEnd)
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
			r.fail(p.errorf("invalid character %q after an object member", p.b[p.i]))
			return "", false
		}
		p.i++
		p.ws()
		if p.i >= len(p.b) {
			r.fail(errJSONEnd)
			return "", false
		}
	}
	top.comma = true
	if p.b[p.i] != '"' {
		r.fail(p.errorf("invalid character %q where an object member name belongs", p.b[p.i]))
		return "", false
	}
	name, err := p.name()
	if err != nil {
		r.fail(err)
		return "", false
	}
	r.keyEnd = p.i
	p.ws()
	if p.i >= len(p.b) {
		r.fail(errJSONEnd)
		return "", false
	}
	if p.b[p.i] != ':' {
		r.fail(p.errorf("missing ':' after an object member name"))
		return "", false
	}
	p.i++
	return name, true
}

// NotText reports whether the map that Key last ended had a key that is
// not text (CBOR only), and returns that map's text keys from that key on
// (those before it the caller has read).
func (r *Reader) NotText() (rest []string, ok bool) { return r.restKeys, r.notText }

// Array opens an array; its elements are read with More and a value each.
func (r *Reader) Array() {
	if r.err != nil {
		return
	}
	if r.cbor {
		major, _, arg, err := r.c.head()
		switch {
		case err != nil:
			r.fail(err)
		case major != 4:
			r.fail(errUse)
		case r.depth >= MaxDepth:
			r.fail(errNesting)
		case !r.c.claim(arg, 1):
			r.fail(errTruncated)
		case r.push(false):
			r.open[r.n-1].left = arg
			r.depth++
		}
		return
	}
	p := &r.j
	p.ws()
	switch {
	case p.i >= len(p.b):
		r.fail(errJSONEnd)
	case p.b[p.i] != '[':
		r.fail(errUse)
	case r.depth >= MaxDepth:
		r.fail(errNesting)
	case r.push(false):
		p.i++
		r.depth++
	}
}

// More reports whether the array has another element, and reads the end
// of the array when it has not.
func (r *Reader) More() bool {
	if r.err != nil {
		return false
	}
	if r.n == 0 || r.open[r.n-1].isMap {
		r.fail(errUse)
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
		r.fail(errJSONEnd)
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
			r.fail(p.errorf("invalid character %q after an array element", p.b[p.i]))
			return false
		}
		p.i++
	}
	top.comma = true
	return true
}

// Left is how many octets of the input are still to be read: a bound on
// the size of any value yet to come.
func (r *Reader) Left() int {
	if r.cbor {
		return len(r.c.b) - r.c.off
	}
	return len(r.j.b) - r.j.i
}

// Uint reads a non-negative integer: in JSON a literal of digits only
// (what DecodeJSON reads as a uint64), in CBOR major type 0.
func (r *Reader) Uint() uint64 {
	if r.err != nil {
		return 0
	}
	if r.cbor {
		major, _, arg, err := r.c.head()
		if err == nil && major != 0 {
			err = errUse
		}
		if err != nil {
			r.fail(err)
			return 0
		}
		return arg
	}
	p := &r.j
	p.ws()
	u, n := jsonUint(p.b[p.i:])
	if n == 0 {
		r.fail(errUse)
		return 0
	}
	p.i += n
	return u
}

// Bytes reads a CBOR byte string and returns a copy of it (never nil). In
// JSON it fails.
func (r *Reader) Bytes() []byte {
	if r.err != nil {
		return nil
	}
	if !r.cbor {
		r.fail(errUse)
		return nil
	}
	major, _, arg, err := r.c.head()
	if err == nil && major != 2 {
		err = errUse
	}
	var s []byte
	if err == nil {
		s, err = r.c.take(arg)
	}
	if err != nil {
		r.fail(err)
		return nil
	}
	return append([]byte{}, s...)
}

// Any reads the next value whole, as DecodeJSON or DecodeCBOR would have
// decoded it at this place.
func (r *Reader) Any() any {
	if r.err != nil {
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
		r.fail(err)
		return nil
	}
	return v
}

// Skip reads the next value as Any does, keeping nothing: for a value the
// caller drops (past a bound, or in a map it refuses).
func (r *Reader) Skip() {
	if r.err != nil {
		return
	}
	var err error
	if r.cbor {
		r.c.discard = true
		_, err = r.c.value(r.depth)
		r.c.discard = false
	} else {
		r.j.ws()
		r.j.discard = true
		_, err = r.j.value(r.depth)
		r.j.discard = false
	}
	if err != nil {
		r.fail(err)
	}
}

// End checks that the value is complete and nothing follows it but (in
// JSON) white space, and reports whether the whole input was read without
// an error.
func (r *Reader) End() bool {
	if r.err != nil {
		return false
	}
	if r.n != 0 {
		r.fail(errUse)
		return false
	}
	if r.cbor {
		if n := len(r.c.b) - r.c.off; n != 0 {
			r.fail(fmt.Errorf("%d octets of trailing data", n))
		}
	} else {
		p := &r.j
		p.ws()
		if p.i != len(p.b) {
			r.fail(fmt.Errorf("invalid character %q after the top-level value at offset %d", p.b[p.i], p.i))
		}
	}
	if r.err == nil && r.recheck {
		if r.cbor {
			r.err = CheckCBOR(r.c.b)
		} else {
			r.err = CheckJSON(r.j.b)
		}
	}
	return r.err == nil
}
