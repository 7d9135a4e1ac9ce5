package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// parseJSON is the strict JSON reader behind DecodeJSON: RFC 8259 syntax,
// valid UTF-8 (also after unescaping: no lone surrogates), no duplicate
// object member names (compared after unescaping, exactly), nesting at
// most MaxDepth, nothing after the value but white space. It accepts and
// rejects exactly what jsontext.Decoder with its default options does
// (FuzzJSONDifferential checks), and builds the value tree directly, which
// costs a fraction of reading it token by token.
func parseJSON(b []byte) (any, error) {
	p := jsonParser{b: b}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, fmt.Errorf("invalid character %q after the top-level value at offset %d", p.b[p.i], p.i)
	}
	return v, nil
}

type jsonParser struct {
	b []byte
	i int
	s string // b as a string, or ""; texts without escapes are then its substrings

	// discard is validation only: every check is made (member names are
	// still read, to tell duplicates apart), but no value is kept (see
	// CheckJSON).
	discard bool
}

// CheckJSON reports the error DecodeJSON would give for b, without
// building the value tree.
func CheckJSON(b []byte) error {
	p := jsonParser{b: b, discard: true}
	p.ws()
	_, err := p.value(0)
	if err == nil {
		p.ws()
		if p.i != len(p.b) {
			err = fmt.Errorf("invalid character %q after the top-level value at offset %d", p.b[p.i], p.i)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: JSON: %w", ErrSyntax, err)
	}
	return nil
}

var errJSONEnd = errors.New("unexpected end of input")

func (p *jsonParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *jsonParser) value(depth int) (any, error) {
	if p.i >= len(p.b) {
		return nil, errJSONEnd
	}
	switch c := p.b[p.i]; {
	case c == '{':
		if depth >= MaxDepth {
			return nil, errNesting
		}
		return p.object(depth + 1)
	case c == '[':
		if depth >= MaxDepth {
			return nil, errNesting
		}
		return p.array(depth + 1)
	case c == '"':
		return p.str()
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, p.errorf("invalid character %q at the start of a value", p.b[p.i])
}

func (p *jsonParser) literal(lit string) error {
	if len(p.b)-p.i < len(lit) || string(p.b[p.i:p.i+len(lit)]) != lit {
		if len(p.b)-p.i < len(lit) && string(p.b[p.i:]) == lit[:len(p.b)-p.i] {
			return errJSONEnd
		}
		return p.errorf("invalid literal")
	}
	p.i += len(lit)
	return nil
}

func (p *jsonParser) object(depth int) (any, error) {
	p.i++ // {
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		if p.discard {
			return nil, nil
		}
		return map[string]any{}, nil
	}
	m := map[string]any{}
	for {
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		if p.b[p.i] != '"' {
			return nil, p.errorf("invalid character %q where an object member name belongs", p.b[p.i])
		}
		name, err := p.name()
		if err != nil {
			return nil, err
		}
		if _, dup := m[name]; dup {
			return nil, p.errorf("duplicate object member name %q", name)
		}
		p.ws()
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		if p.b[p.i] != ':' {
			return nil, p.errorf("missing ':' after an object member name")
		}
		p.i++
		p.ws()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		m[name] = v
		p.ws()
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.ws()
		case '}':
			p.i++
			if p.discard {
				return nil, nil
			}
			return m, nil
		default:
			return nil, p.errorf("invalid character %q after an object member", p.b[p.i])
		}
	}
}

func (p *jsonParser) array(depth int) (any, error) {
	p.i++ // [
	p.ws()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return emptyArray, nil
	}
	var a []any
	for {
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		if !p.discard {
			a = appendCapped(a, v, math.MaxUint64) // doubling: at most two slots per element
		}
		p.ws()
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			p.ws()
		case ']':
			p.i++
			if p.discard {
				return nil, nil
			}
			return a, nil
		default:
			return nil, p.errorf("invalid character %q after an array element", p.b[p.i])
		}
	}
}

// str reads a string. The common case, no escapes, is one scan to the
// closing quote (plainASCII), and a validation of the span only if it is
// not all printable ASCII.
func (p *jsonParser) str() (string, error) {
	span, start, err := p.unescaped()
	if err != nil {
		return "", err
	}
	if span == nil {
		return p.escaped(start)
	}
	if p.discard {
		return "", nil
	}
	if p.s != "" {
		return p.s[start : start+len(span)], nil
	}
	return string(span), nil
}

// unescaped reads a string that has no escape, and returns its octets
// (aliasing the input) and where they start. At a backslash it stops and
// returns a nil span, with p.i at the backslash, for escaped to finish.
func (p *jsonParser) unescaped() (span []byte, start int, err error) {
	p.i++ // opening quote
	start = p.i
	i := start + plainASCII(p.b[start:])
	ascii := true
	for ; i < len(p.b); i++ {
		c := p.b[i]
		if c == '"' || c == '\\' {
			break
		}
		if c < 0x20 {
			p.i = i
			return nil, start, p.errorf("control character %#x in a string", c)
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	p.i = i
	if i >= len(p.b) {
		return nil, start, errJSONEnd
	}
	if p.b[i] == '\\' {
		return nil, start, nil
	}
	span = p.b[start:i:i]
	if !ascii && !utf8.Valid(span) {
		return nil, start, p.errorf("invalid UTF-8 in a string")
	}
	p.i++ // closing quote
	return span, start, nil
}

// plainASCII returns the length of the prefix of b, in whole 8-octet
// words, that holds only printable ASCII other than '"' and '\\': octets a
// string copies as they are. It tests eight octets at once; the caller
// looks at the rest one by one.
func plainASCII(b []byte) int {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	n := 0
	for ; len(b)-n >= 8; n += 8 {
		x := binary.LittleEndian.Uint64(b[n:])
		q := x ^ ('"' * lo)
		s := x ^ ('\\' * lo)
		// A set high bit marks an octet below 0x20, equal to '"' or '\\'
		// (x - lo*c has it for octets below c, given no high bit in x), or
		// of 0x80 and above. False marks only follow a true one.
		if ((x-0x20*lo)|(q-lo)|(s-lo)|x)&hi != 0 {
			break
		}
	}
	return n
}

// name reads an object member name; the data model's names are interned
// so that reading a payload does not allocate a string per member.
func (p *jsonParser) name() (string, error) {
	start := p.i + 1
	end := start
	for end < len(p.b) && p.b[end] != '"' && p.b[end] != '\\' && p.b[end] >= 0x20 {
		end++
	}
	if end < len(p.b) && p.b[end] == '"' {
		if s, ok := interned(p.b[start:end]); ok {
			p.i = end + 1
			return s, nil
		}
	}
	discard := p.discard
	p.discard = false // a name is read whole, even when checking only: duplicates are told apart by it
	s, err := p.str()
	p.discard = discard
	return s, err
}

// interned returns the data model's member names without allocating: a
// table indexed by a hash of the length and the first and last octets,
// then one comparison.
func interned(b []byte) (string, bool) {
	if len(b) == 0 {
		return "", false
	}
	s := internTable[internHash(b)]
	if len(s) != len(b) || s != string(b) { // the compiler does not allocate for this comparison
		return "", false
	}
	return s, true
}

// internNames are the member names the data model defines.
var internNames = [...]string{
	"v", "type", "hop", "dialog", "task", "iss", "aud", "iat", "exp", "obo",
	"sub", "grant", "prev", "refs", "kind", "dig", "alg", "val", "loc",
	"proof", "offer", "chain", "state", "reason", "detail",
}

func internHash[T string | []byte](b T) byte {
	return (byte(len(b)) + b[0]*2 + b[len(b)-1]*27) & 127
}

var internTable = func() (t [128]string) {
	for _, n := range internNames {
		h := internHash(n)
		if t[h] != "" {
			panic("wire: intern hash collision: " + t[h] + ", " + n)
		}
		t[h] = n
	}
	return t
}()

// escaped finishes a string that has escapes, from its start.
func (p *jsonParser) escaped(start int) (string, error) {
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", p.errorf("invalid UTF-8 in a string")
			}
			p.i++
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf("control character %#x in a string", c)
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return "", errJSONEnd
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := p.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || p.i+1 >= len(p.b) || p.b[p.i] != '\\' || p.b[p.i+1] != 'u' {
					if p.i+1 >= len(p.b) && r < 0xdc00 {
						return "", errJSONEnd
					}
					return "", p.errorf("lone surrogate in a string")
				}
				p.i += 2
				r2, err := p.hex4()
				if err != nil {
					return "", err
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", p.errorf("lone surrogate in a string")
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errorf("invalid escape '\\%c'", e)
		}
	}
	return "", errJSONEnd
}

func (p *jsonParser) hex4() (rune, error) {
	if len(p.b)-p.i < 4 {
		return 0, errJSONEnd
	}
	n, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32)
	if err != nil || !isHexDigits(p.b[p.i:p.i+4]) {
		return 0, p.errorf("invalid \\u escape")
	}
	p.i += 4
	return rune(n), nil
}

func isHexDigits(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// number reads an RFC 8259 number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
func (p *jsonParser) number() (any, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i >= len(p.b) {
		return nil, errJSONEnd
	}
	switch c := p.b[p.i]; {
	case c == '0':
		p.i++
	case '1' <= c && c <= '9':
		digits()
	default:
		return nil, p.errorf("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			if p.i >= len(p.b) {
				return nil, errJSONEnd
			}
			return nil, p.errorf("invalid number: no digits after '.'")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			if p.i >= len(p.b) {
				return nil, errJSONEnd
			}
			return nil, p.errorf("invalid number: no exponent digits")
		}
	}
	if p.discard {
		return nil, nil
	}
	return parseJSONNumber(string(p.b[start:p.i])), nil
}
