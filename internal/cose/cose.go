// Package cose is the COSE signed form of a handoff element (draft
// "Signing", COSE): a COSE_Sign1 message with tag 18, ES256 (alg -7), content
// type "application/agent-handoff+cbor" in the protected header, and the kid
// (the key's JWK thumbprint as UTF-8 octets) in the protected header.
//
// Parse reads the message in one pass with a strict CBOR reader of its own
// and names the fault it finds (which header, which label, what is wrong).
// It accepts what github.com/veraison/go-cose accepts, with the rules
// go-cose leaves to its callers added (crit is refused, the message is
// exactly one tag 18 around the array, the content type is text and
// checked, only ES256 is allowed), and refuses a few header values no
// handoff carries (see Parse). go-cose is the oracle its tests hold it to
// (FuzzParseMatchesGoCose), and Sign uses it. Verify hashes the
// Sig_structure directly (octet for octet what go-cose builds) and checks
// the signature with crypto/ecdsa.
package cose

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	gocose "github.com/veraison/go-cose"

	"github.com/quantumlearningmachines/handoff/internal/es256"
)

// ContentType is the COSE content type of a handoff payload.
const ContentType = "application/agent-handoff+cbor"

// Errors; each wraps one of these sentinels.
var (
	ErrMalformed   = errors.New("cose: malformed")
	ErrCrit        = errors.New("cose: crit header not allowed")
	ErrAlg         = errors.New("cose: algorithm not allowed")
	ErrContentType = errors.New("cose: wrong content type")
	ErrSignature   = errors.New("cose: signature does not verify")
)

// errUnused marks, inside an ErrMalformed, a header value that COSE allows
// and go-cose would accept but no handoff carries: a tag, a simple value
// other than false, true, null and undefined, an integer below -2^63, a
// map key that is neither an integer nor text, nesting deeper than
// maxDepth, and a COSE_Countersignature (labels 7 and 11). Refusing them
// keeps the reader small and every value it reads one it can compare
// (SPEC D1 leaves these headers to the implementation; docs/decisions.md
// 79). The oracle test allows Parse to refuse what go-cose accepts only
// with this error.
var errUnused = errors.New("a header value no handoff uses")

// Message is a parsed, not yet verified, COSE_Sign1 handoff.
type Message struct {
	Kid     string // from the protected header only (SPEC D10); "" when absent
	HasKid  bool
	Payload []byte // a copy: Parse never aliases its input

	protected []byte   // content of the protected bstr as received (no head)
	sig       [64]byte // R||S, each 32 octets big-endian
}

// Parse checks the structure of a tagged COSE_Sign1 handoff without a key:
//
//	d2 84 <bstr protected> <map unprotected> <bstr payload> <bstr signature>
//
// Heads may be longer than needed (as go-cose allows); indefinite lengths
// may not. Each header map has labels that are integers or text, no label
// twice, and the generic header rules of RFC 9052 section 3.1 as go-cose
// checks them (alg an integer or text, content type and type a uint or
// "type/subtype" text, kid, IV and Partial IV byte strings and not both IV
// and Partial IV, countersignatures only unprotected). The protected
// header then carries alg ES256, the handoff content type as text (ASCII
// case-insensitive, D3) and no crit (nor does the unprotected one, D1);
// its kid, if any, is the Message's (D10). The payload is attached and the
// signature 64 octets. The first fault found is returned, wrapping
// ErrMalformed, ErrCrit, ErrAlg or ErrContentType.
func Parse(b []byte) (*Message, error) {
	if len(b) == 0 || b[0] != 0xd2 {
		return nil, malformed("not a tagged COSE_Sign1: the first octet is not tag 18 (0xd2)")
	}
	if len(b) < 2 || b[1] != 0x84 {
		return nil, malformed("tag 18 is not followed by a four-element array (0x84)")
	}
	r := reader{b: b, off: 2}
	prot, err := r.byteString("protected header")
	if err != nil {
		return nil, err
	}
	var u header
	if err := r.header("unprotected header", false, &u); err != nil {
		return nil, err
	}
	if r.off < len(b) && b[r.off] == 0xf6 {
		return nil, malformed("detached payload (null): a handoff carries its payload")
	}
	payload, err := r.byteString("payload")
	if err != nil {
		return nil, err
	}
	sig, err := r.byteString("signature")
	if err != nil {
		return nil, err
	}
	if r.off != len(b) {
		return nil, malformed("%d octets after the message", len(b)-r.off)
	}

	var p header
	if len(prot) > 0 {
		pr := reader{b: prot}
		if prot[0]>>5 != majorMap {
			return nil, malformed("protected header: the byte string does not hold a map")
		}
		if err := pr.header("protected header", true, &p); err != nil {
			return nil, err
		}
		if pr.off != len(prot) {
			return nil, malformed("protected header: %d octets after the map", len(prot)-pr.off)
		}
	}
	if (p.has(labelIV) && u.has(labelPartialIV)) || (p.has(labelPartialIV) && u.has(labelIV)) {
		return nil, malformed("IV and Partial IV are both present (one in each header)")
	}
	if len(sig) == 0 {
		return nil, malformed("empty signature")
	}
	if p.has(labelCrit) {
		return nil, fmt.Errorf("%w: protected label 2", ErrCrit)
	}
	if u.has(labelCrit) {
		return nil, fmt.Errorf("%w: unprotected label 2", ErrCrit)
	}
	switch {
	case !p.has(labelAlg):
		return nil, fmt.Errorf("%w: no alg (label 1) in the protected header", ErrAlg)
	case p.alg.kind != kindInt || p.alg.i != int64(gocose.AlgorithmES256):
		return nil, fmt.Errorf("%w: %s, want ES256 (-7)", ErrAlg, p.alg.describe())
	case !p.has(labelContentType):
		return nil, fmt.Errorf("%w: no content type (label 3) in the protected header", ErrContentType)
	case p.ct.kind != kindText:
		return nil, fmt.Errorf("%w: content type is %s, want text", ErrContentType, p.ct.describe())
	case !asciiEqualFold(string(p.ct.s), ContentType):
		return nil, fmt.Errorf("%w: %q", ErrContentType, p.ct.s)
	case len(sig) != 64:
		return nil, malformed("ES256 signature is %d octets, want 64", len(sig))
	}

	// Keep a copy, so that the Message does not alias b.
	buf := make([]byte, len(prot)+len(payload))
	copy(buf, prot)
	copy(buf[len(prot):], payload)
	m := &Message{
		Payload:   buf[len(prot):],
		protected: buf[:len(prot):len(prot)],
	}
	copy(m.sig[:], sig)
	if p.has(labelKid) {
		m.Kid, m.HasKid = string(p.kid), true
	}
	return m, nil
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// CBOR major types.
const (
	majorUint  = 0
	majorNint  = 1
	majorBytes = 2
	majorText  = 3
	majorArray = 4
	majorMap   = 5
	majorTag   = 6
	majorOther = 7
)

var majorNames = [8]string{"an unsigned integer", "a negative integer", "a byte string",
	"a text string", "an array", "a map", "a tag", "a simple value or float"}

// Header labels with rules (RFC 9052 section 3.1, RFC 9338).
const (
	labelAlg            = 1
	labelCrit           = 2
	labelContentType    = 3
	labelKid            = 4
	labelIV             = 5
	labelPartialIV      = 6
	labelCounterSig     = 7
	labelCounterSig0    = 9
	labelCounterSigV2   = 11
	labelCounterSig0V2  = 12
	labelType           = 16
	maxDepth            = 16     // maps and arrays, the header map included
	maxElements         = 131072 // go-cose's decoder refuses larger arrays and maps
	maxLinearLabelCheck = 16     // labels compared pairwise; past this, a set
)

// reader is a strict reader of definite-length CBOR items over b.
type reader struct {
	b   []byte
	off int
}

// head reads an item head. Additional information 28..31 (reserved, or
// indefinite length) and a truncated head fail. Non-minimal arguments are
// accepted, as go-cose accepts them.
func (r *reader) head(what where) (major, ai byte, arg uint64, err error) {
	if r.off >= len(r.b) {
		return 0, 0, 0, malformed("%s: truncated", what)
	}
	c := r.b[r.off]
	r.off++
	major, ai = c>>5, c&0x1f
	var n int
	switch {
	case ai < 24:
		return major, ai, uint64(ai), nil
	case ai == 24:
		n = 1
	case ai == 25:
		n = 2
	case ai == 26:
		n = 4
	case ai == 27:
		n = 8
	case ai == 31:
		return 0, 0, 0, malformed("%s: indefinite length (0x%02x), which COSE here does not allow", what, c)
	default:
		return 0, 0, 0, malformed("%s: reserved additional information (0x%02x)", what, c)
	}
	if len(r.b)-r.off < n {
		return 0, 0, 0, malformed("%s: truncated", what)
	}
	for _, x := range r.b[r.off : r.off+n] {
		arg = arg<<8 | uint64(x)
	}
	r.off += n
	return major, ai, arg, nil
}

// take returns the next n octets, aliasing r.b.
func (r *reader) take(what where, n uint64) ([]byte, error) {
	if n > uint64(len(r.b)-r.off) {
		return nil, malformed("%s: a length of %d runs past the end", what, n)
	}
	s := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

// byteString reads a byte string and returns its content, aliasing r.b.
func (r *reader) byteString(what string) ([]byte, error) {
	major, _, n, err := r.head(where{hdr: what})
	if err != nil {
		return nil, err
	}
	if major != majorBytes {
		return nil, malformed("%s is %s, want a byte string", what, majorNames[major])
	}
	return r.take(where{hdr: what}, n)
}

// value is what the reader keeps of an item: its kind and, for an integer
// or a string, its content (aliasing the input).
type value struct {
	kind byte // kindInt, kindBytes, kindText or kindOther
	i    int64
	s    []byte
}

const (
	kindOther = iota
	kindInt
	kindBytes
	kindText
)

func (v *value) describe() string {
	switch v.kind {
	case kindInt:
		return fmt.Sprintf("the integer %d", v.i)
	case kindBytes:
		return "a byte string"
	case kindText:
		return fmt.Sprintf("the text %q", v.s)
	}
	return "neither an integer nor a string"
}

// key is a label or map key as an identity: the kind and the content.
func (v *value) key() string {
	if v.kind == kindInt {
		return fmt.Sprint("i", v.i)
	}
	return "t" + string(v.s)
}

// where names the place of an item in an error: a header, and the label
// whose value it is in, if any. It is formatted only for an error.
type where struct {
	hdr      string
	label    value
	hasLabel bool
}

func (w where) String() string {
	if !w.hasLabel {
		return w.hdr
	}
	return w.hdr + ": " + labelName(&w.label)
}

// item reads one item whole, at the given depth (the header map is 1),
// and keeps what value holds of it.
func (r *reader) item(what where, depth int) (value, error) {
	major, ai, arg, err := r.head(what)
	if err != nil {
		return value{}, err
	}
	switch major {
	case majorUint:
		if arg > math.MaxInt64 {
			return value{}, malformed("%s: the integer %d is above 2^63-1", what, arg)
		}
		return value{kind: kindInt, i: int64(arg)}, nil
	case majorNint:
		if arg > math.MaxInt64 {
			return value{}, fmt.Errorf("%w: %s: an integer below -2^63: %w", ErrMalformed, what, errUnused)
		}
		return value{kind: kindInt, i: -1 - int64(arg)}, nil
	case majorBytes:
		s, err := r.take(what, arg)
		return value{kind: kindBytes, s: s}, err
	case majorText:
		s, err := r.take(what, arg)
		if err == nil && !utf8.Valid(s) {
			err = malformed("%s: text that is not UTF-8", what)
		}
		return value{kind: kindText, s: s}, err
	case majorArray, majorMap:
		if depth >= maxDepth {
			return value{}, fmt.Errorf("%w: %s: nested deeper than %d: %w", ErrMalformed, what, maxDepth, errUnused)
		}
		if arg > maxElements {
			return value{}, malformed("%s: %d elements, more than %d", what, arg, maxElements)
		}
		if major == majorArray {
			for range arg {
				if _, err := r.item(what, depth+1); err != nil {
					return value{}, err
				}
			}
			return value{}, nil
		}
		return value{}, r.entries(what, arg, depth+1, nil, false)
	case majorTag:
		return value{}, fmt.Errorf("%w: %s: tag %d: %w", ErrMalformed, what, arg, errUnused)
	}
	switch {
	case ai >= 20 && ai <= 23: // false, true, null, undefined
		return value{}, nil
	case ai >= 25 && ai <= 27: // half, single and double floats
		return value{}, nil
	case ai == 24 && arg < 32:
		return value{}, malformed("%s: simple value %d in two octets", what, arg)
	}
	return value{}, fmt.Errorf("%w: %s: simple value %d: %w", ErrMalformed, what, arg, errUnused)
}

// entries reads the n entries of a map: keys that are integers or text,
// none twice, and values read whole. For each entry, when visit is not
// nil, it is called with the key and the value.
func (r *reader) entries(what where, n uint64, depth int, h *header, protected bool) error {
	var few [maxLinearLabelCheck]value
	var many map[string]struct{}
	for i := range n {
		start := r.off
		major, _, _, err := r.head(what)
		if err != nil {
			return err
		}
		r.off = start
		if major != majorUint && major != majorNint && major != majorText {
			if depth == 1 {
				return malformed("%s: a label is %s, want an integer or text", what, majorNames[major])
			}
			return fmt.Errorf("%w: %s: a map key is %s: %w", ErrMalformed, what, majorNames[major], errUnused)
		}
		k, err := r.item(what, depth)
		if err != nil {
			return err
		}
		dup := false
		if i < maxLinearLabelCheck {
			for j := range i {
				if few[j].kind == k.kind && few[j].i == k.i && string(few[j].s) == string(k.s) {
					dup = true
				}
			}
			few[i] = k
		} else {
			if many == nil {
				many = make(map[string]struct{})
				for j := range few {
					many[few[j].key()] = struct{}{}
				}
			}
			id := k.key()
			_, dup = many[id]
			many[id] = struct{}{}
		}
		if dup {
			return malformed("%s: %s appears twice", what, labelName(&k))
		}
		v, err := r.item(where{what.hdr, k, true}, depth)
		if err != nil {
			return err
		}
		if h != nil {
			if err := h.check(what.hdr, protected, &k, &v); err != nil {
				return err
			}
		}
	}
	return nil
}

func labelName(k *value) string {
	if k.kind == kindInt {
		switch k.i {
		case labelAlg:
			return "label 1 (alg)"
		case labelCrit:
			return "label 2 (crit)"
		case labelContentType:
			return "label 3 (content type)"
		case labelKid:
			return "label 4 (kid)"
		}
		return fmt.Sprint("label ", k.i)
	}
	return fmt.Sprintf("label %q", k.s)
}

// header is what the reader keeps of a header map: which labels with rules
// it has, and the values of alg, content type and kid.
type header struct {
	labels  uint32 // bit l for each label l < 32 present
	alg, ct value
	kid     []byte
}

func (h *header) has(label int) bool { return h.labels&(1<<label) != 0 }

// header reads a header map and checks the generic rules of each label it
// knows.
func (r *reader) header(what string, protected bool, h *header) error {
	major, _, n, err := r.head(where{hdr: what})
	if err != nil {
		return err
	}
	if major != majorMap {
		return malformed("%s is %s, want a map", what, majorNames[major])
	}
	if n > maxElements {
		return malformed("%s: %d labels, more than %d", what, n, maxElements)
	}
	return r.entries(where{hdr: what}, n, 1, h, protected)
}

// check applies the generic rule of label l, if it has one, to its value
// v, and keeps what Parse needs of it.
func (h *header) check(what string, protected bool, l, v *value) error {
	if l.kind != kindInt || l.i < 0 || l.i >= 32 {
		return nil // a label with no rule here
	}
	h.labels |= 1 << l.i
	bad := func(want string) error {
		return malformed("%s: %s is %s, want %s", what, labelName(l), v.describe(), want)
	}
	switch l.i {
	case labelAlg:
		if v.kind != kindInt && v.kind != kindText {
			return bad("an integer or text")
		}
		h.alg = *v
	case labelContentType, labelType:
		if !typeValueOK(v) {
			return bad(`a uint or "type/subtype" text`)
		}
		if l.i == labelContentType {
			h.ct = *v
		}
	case labelKid, labelIV, labelPartialIV:
		if v.kind != kindBytes {
			return bad("a byte string")
		}
		if l.i == labelKid {
			h.kid = v.s
		}
		if h.has(labelIV) && h.has(labelPartialIV) {
			return malformed("%s: IV and Partial IV are both present", what)
		}
	case labelCounterSig0, labelCounterSig0V2:
		if protected {
			return malformed("%s: %s: a countersignature is not allowed here", what, labelName(l))
		}
		if v.kind != kindBytes {
			return bad("a byte string")
		}
	case labelCounterSig, labelCounterSigV2:
		if protected {
			return malformed("%s: %s: a countersignature is not allowed here", what, labelName(l))
		}
		return fmt.Errorf("%w: %s: %s: a COSE_Countersignature: %w", ErrMalformed, what, labelName(l), errUnused)
	}
	return nil
}

// typeValueOK is go-cose's check of a content type or type value: a uint,
// or text that is non-empty, has no leading or trailing space and exactly
// one '/'.
func typeValueOK(v *value) bool {
	switch v.kind {
	case kindInt:
		return v.i >= 0
	case kindText:
		s := v.s
		return len(s) > 0 && s[0] != ' ' && s[len(s)-1] != ' ' && bytes.Count(s, []byte{'/'}) == 1
	}
	return false
}

// asciiEqualFold compares ASCII case-insensitively (D3); unlike
// strings.EqualFold it does not fold non-ASCII letters such as U+017F.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// The ES256 helpers shared with the other signed form (package es256).
var (
	p256N              = es256.N
	scalarInRange      = es256.InRange
	appendDERSignature = es256.AppendDER
)

// Verify checks the ES256 signature with pub.
func (m *Message) Verify(pub *ecdsa.PublicKey) error {
	if pub == nil || pub.Curve != elliptic.P256() {
		return fmt.Errorf("%w: key is not P-256", ErrAlg)
	}
	if pub.X == nil || pub.Y == nil {
		return fmt.Errorf("%w: invalid public key", ErrSignature)
	}
	r, s := m.sig[:32], m.sig[32:]
	if !scalarInRange(r) || !scalarInRange(s) {
		return fmt.Errorf("%w: r or s out of range", ErrSignature)
	}
	var buf [72]byte
	der := appendDERSignature(buf[:0], r, s)
	var heads [tbsHeadsLen]byte
	h := sha256.New()
	for _, part := range m.toBeSigned(&heads) {
		h.Write(part)
	}
	var digest [sha256.Size]byte
	if !ecdsa.VerifyASN1(pub, h.Sum(digest[:0]), der) {
		return ErrSignature
	}
	return nil
}

// tbsHeadsLen bounds the octets toBeSigned writes into heads: 0x84, the
// context "Signature1" with its head, a protected bstr head, h” and a
// payload bstr head.
const tbsHeadsLen = 1 + 11 + 9 + 1 + 9

// toBeSigned returns, in four parts, ToBeSigned: the CBOR encoding of
//
//	Sig_structure = ["Signature1", protected, external_aad: h'', payload]
//
// (RFC 9052 section 4.4) as go-cose builds it, which is the protected
// octets as received re-headed with the shortest length (go-cose's
// deterministicBinaryString), and the payload with the shortest head. The
// heads are written into heads; the other parts alias m.
func (m *Message) toBeSigned(heads *[tbsHeadsLen]byte) [4][]byte {
	p := append(heads[:0], 0x84, 0x6a, 'S', 'i', 'g', 'n', 'a', 't', 'u', 'r', 'e', '1')
	p = appendHead(p, majorBytes, uint64(len(m.protected)))
	n := len(p)
	p = append(p, 0x40)
	p = appendHead(p, majorBytes, uint64(len(m.Payload)))
	return [4][]byte{p[:n], m.protected, p[n:], m.Payload}
}

// appendHead appends the shortest head of the given major type and argument.
func appendHead(dst []byte, major byte, n uint64) []byte {
	major <<= 5
	switch {
	case n < 24:
		return append(dst, major|byte(n))
	case n <= math.MaxUint8:
		return append(dst, major|24, byte(n))
	case n <= math.MaxUint16:
		return append(dst, major|25, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return append(dst, major|26, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, major|27, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32),
		byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// Sign returns a tagged COSE_Sign1 over payload with the protected header
// {1: -7, 3: ContentType, 4: kid}.
func Sign(rand io.Reader, key *ecdsa.PrivateKey, kid string, payload []byte) ([]byte, error) {
	signer, err := gocose.NewSigner(gocose.AlgorithmES256, key)
	if err != nil {
		return nil, err
	}
	msg := gocose.NewSign1Message()
	msg.Headers.Protected.SetAlgorithm(gocose.AlgorithmES256)
	msg.Headers.Protected[gocose.HeaderLabelContentType] = ContentType
	msg.Headers.Protected[gocose.HeaderLabelKeyID] = []byte(kid)
	msg.Payload = payload
	if err := msg.Sign(rand, nil, signer); err != nil {
		return nil, err
	}
	return msg.MarshalCBOR()
}
