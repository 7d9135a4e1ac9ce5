// Package cose is the COSE signed form of a handoff element (draft
// "Signing", COSE): a COSE_Sign1 message with tag 18, ES256 (alg -7), content
// type "application/agent-handoff+cbor" in the protected header, and the kid
// (the key's JWK thumbprint as UTF-8 octets) in the protected header.
//
// It wraps github.com/veraison/go-cose and adds what that library leaves to
// its callers: crit is refused (go-cose accepts unknown critical labels),
// the message is exactly one tag 18 around the array, the content type is
// text and checked, and only ES256 is allowed.
//
// Sign uses go-cose. Parse reads the common shape of the message with a
// small strict CBOR reader and leaves everything else, including every
// message it would reject, to go-cose's decoder, the reference: both give
// the same result for every input. Verify hashes the Sig_structure
// directly (octet for octet what go-cose builds) and checks the signature
// with crypto/ecdsa.
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

// Message is a parsed, not yet verified, COSE_Sign1 handoff.
type Message struct {
	Kid     string // from the protected header only (SPEC D10); "" when absent
	HasKid  bool
	Payload []byte

	protected []byte   // content of the protected bstr as received (no head)
	sig       [64]byte // R||S, each 32 octets big-endian
}

// Parse checks the structure of a tagged COSE_Sign1 handoff without a key.
//
// The common shape is recognized by parseFast, a small strict CBOR reader
// that only accepts; anything it does not fully understand, and every
// message it would reject, goes through parseGoCose, the go-cose based
// reference, so the outcome (the Message, or the error sentinel) is the
// same for every input (FuzzFastParseMatchesGoCose).
func Parse(b []byte) (*Message, error) {
	if m, ok := parseFast(b); ok {
		return m, nil
	}
	return parseGoCose(b)
}

// parseGoCose is the reference Parse, over go-cose.
func parseGoCose(b []byte) (*Message, error) {
	// Exactly one tag 18 around a four-element array: go-cose checks the
	// prefix 0xd2 0x84 and decodes the content with tags forbidden.
	var msg gocose.Sign1Message
	if err := msg.UnmarshalCBOR(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if msg.Payload == nil {
		return nil, fmt.Errorf("%w: detached payload", ErrMalformed)
	}
	p := msg.Headers.Protected
	if _, ok := p[gocose.HeaderLabelCritical]; ok {
		return nil, fmt.Errorf("%w: protected label 2", ErrCrit)
	}
	if _, ok := msg.Headers.Unprotected[gocose.HeaderLabelCritical]; ok {
		return nil, fmt.Errorf("%w: unprotected label 2", ErrCrit)
	}
	alg, err := p.Algorithm()
	if err != nil {
		return nil, fmt.Errorf("%w: protected alg: %v", ErrAlg, err)
	}
	if alg != gocose.AlgorithmES256 {
		return nil, fmt.Errorf("%w: %v, want ES256 (-7)", ErrAlg, alg)
	}
	ct, ok := p[gocose.HeaderLabelContentType]
	if !ok {
		return nil, fmt.Errorf("%w: no content type in the protected header", ErrContentType)
	}
	s, ok := ct.(string)
	if !ok {
		return nil, fmt.Errorf("%w: content type is not text", ErrContentType)
	}
	if !asciiEqualFold(s, ContentType) {
		return nil, fmt.Errorf("%w: %q", ErrContentType, s)
	}
	m := &Message{}
	if kid, ok := p[gocose.HeaderLabelKeyID]; ok {
		kb, ok := kid.([]byte)
		if !ok {
			return nil, fmt.Errorf("%w: kid is not a byte string", ErrMalformed)
		}
		m.Kid, m.HasKid = string(kb), true
	}
	if len(msg.Signature) != 64 {
		return nil, fmt.Errorf("%w: ES256 signature is %d octets, want 64", ErrMalformed, len(msg.Signature))
	}
	// go-cose accepted RawProtected as a well-formed definite-length bstr.
	r := reader{b: msg.Headers.RawProtected}
	prot, ok := r.bytes(majorBytes)
	if !ok || r.off != len(r.b) {
		return nil, fmt.Errorf("%w: protected header is not a byte string", ErrMalformed)
	}
	m.protected = prot
	m.Payload = msg.Payload
	copy(m.sig[:], msg.Signature)
	return m, nil
}

// CBOR major types.
const (
	majorUint  = 0
	majorNint  = 1
	majorBytes = 2
	majorText  = 3
	majorMap   = 5
)

// reader is a strict reader of definite-length CBOR items over b.
type reader struct {
	b   []byte
	off int
}

// head reads an item head: its major type and argument. Additional
// information 28..31 (reserved, or indefinite length) and a truncated head
// fail. Non-minimal arguments are accepted, as go-cose accepts them.
func (r *reader) head() (major byte, arg uint64, ok bool) {
	if r.off >= len(r.b) {
		return 0, 0, false
	}
	c := r.b[r.off]
	r.off++
	major, ai := c>>5, c&0x1f
	var n int
	switch {
	case ai < 24:
		return major, uint64(ai), true
	case ai == 24:
		n = 1
	case ai == 25:
		n = 2
	case ai == 26:
		n = 4
	case ai == 27:
		n = 8
	default:
		return 0, 0, false
	}
	if len(r.b)-r.off < n {
		return 0, 0, false
	}
	for _, x := range r.b[r.off : r.off+n] {
		arg = arg<<8 | uint64(x)
	}
	r.off += n
	return major, arg, true
}

// bytes reads a byte or text string of the given major type and returns
// its content, aliasing r.b.
func (r *reader) bytes(major byte) ([]byte, bool) {
	m, n, ok := r.head()
	if !ok || m != major || n > uint64(len(r.b)-r.off) {
		return nil, false
	}
	s := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return s, true
}

// value is one header label or value the fast path understands: an integer
// that fits int64, a byte string or a (valid UTF-8) text string.
type value struct {
	major byte // majorUint or majorNint (both: i is the value), majorBytes, majorText
	i     int64
	s     []byte
}

func (v *value) isInt() bool { return v.major == majorUint || v.major == majorNint }

// simple reads a value; it fails on anything else (arrays, maps, tags,
// floats and simple values, integers outside int64, invalid UTF-8), which
// sends the message to the reference path.
func (r *reader) simple() (value, bool) {
	start := r.off
	m, n, ok := r.head()
	if !ok {
		return value{}, false
	}
	switch m {
	case majorUint:
		if n > math.MaxInt64 {
			return value{}, false
		}
		return value{major: m, i: int64(n)}, true
	case majorNint:
		if n > math.MaxInt64 {
			return value{}, false
		}
		return value{major: m, i: -1 - int64(n)}, true
	case majorBytes, majorText:
		r.off = start
		s, ok := r.bytes(m)
		if !ok || (m == majorText && !utf8.Valid(s)) {
			return value{}, false
		}
		return value{major: m, s: s}, true
	}
	return value{}, false
}

// sameLabel reports whether two labels are the same header label as go-cose
// sees them (int64 or string).
func sameLabel(a, b *value) bool {
	if a.isInt() != b.isInt() {
		return false
	}
	if a.isInt() {
		return a.i == b.i
	}
	return string(a.s) == string(b.s)
}

// maxFastLabels bounds the labels of one header map on the fast path.
const maxFastLabels = 16

// fastHeader is what parseFast keeps of the protected header.
type fastHeader struct {
	alg, ct, kid bool
	kidValue     []byte
}

// header reads a header map with labels int or text, and checks each
// label go-cose validates (SPEC D1, D3, D10 and go-cose's generic header
// rules). It fails on any label or value it does not handle; the caller
// then falls back to the reference path.
func (r *reader) header(protected bool, h *fastHeader) bool {
	m, n, ok := r.head()
	if !ok || m != majorMap || n > maxFastLabels {
		return false
	}
	var labels [maxFastLabels]value
	for i := range int(n) {
		l, ok := r.simple()
		if !ok || l.major == majorBytes {
			return false
		}
		for j := range i {
			if sameLabel(&labels[j], &l) {
				return false
			}
		}
		labels[i] = l
		v, ok := r.simple()
		if !ok {
			return false
		}
		if !l.isInt() {
			continue // a text label: go-cose has no rule for it
		}
		switch l.i {
		case 1: // alg
			if protected {
				if !v.isInt() || v.i != int64(gocose.AlgorithmES256) {
					return false
				}
				h.alg = true
			} else if v.major == majorBytes {
				return false // go-cose: alg must be int or text
			}
		case 3: // content type
			if protected {
				if v.major != majorText || !asciiEqualFold(string(v.s), ContentType) {
					return false
				}
				h.ct = true
			} else if !typeValueOK(&v) {
				return false
			}
		case 4: // kid
			if v.major != majorBytes {
				return false
			}
			if protected {
				h.kid, h.kidValue = true, v.s
			}
		case 16: // type
			if !typeValueOK(&v) {
				return false
			}
		case 2, 5, 6, 7, 9, 11, 12:
			// crit, IV, Partial IV and the countersignatures: left to
			// the reference path.
			return false
		}
	}
	return true
}

// typeValueOK is go-cose's check of a content type or type value: a uint,
// or text that is non-empty, has no leading or trailing space and exactly
// one '/'.
func typeValueOK(v *value) bool {
	switch v.major {
	case majorUint:
		return true
	case majorText:
		s := v.s
		return len(s) > 0 && s[0] != ' ' && s[len(s)-1] != ' ' && bytes.Count(s, []byte{'/'}) == 1
	}
	return false
}

// parseFast accepts the tagged COSE_Sign1
//
//	d2 84 <bstr protected> <map unprotected> <bstr payload> <bstr signature>
//
// when every part is in the subset it reads and the message meets every
// check of parseGoCose; it then returns what parseGoCose returns. Otherwise
// it returns false and the caller must use parseGoCose.
func parseFast(b []byte) (*Message, bool) {
	if len(b) < 2 || b[0] != 0xd2 || b[1] != 0x84 {
		return nil, false
	}
	r := reader{b: b, off: 2}
	prot, ok := r.bytes(majorBytes)
	if !ok || len(prot) == 0 {
		return nil, false
	}
	if !r.header(false, nil) {
		return nil, false
	}
	payload, ok := r.bytes(majorBytes)
	if !ok {
		return nil, false
	}
	sig, ok := r.bytes(majorBytes)
	if !ok || len(sig) != 64 || r.off != len(b) {
		return nil, false
	}
	var h fastHeader
	pr := reader{b: prot}
	if !pr.header(true, &h) || pr.off != len(prot) || !h.alg || !h.ct {
		return nil, false
	}

	// Copy what the Message keeps, as go-cose does, so that it does not
	// alias b.
	buf := make([]byte, len(prot)+len(payload))
	copy(buf, prot)
	copy(buf[len(prot):], payload)
	m := &Message{
		Payload:   buf[len(prot):],
		protected: buf[:len(prot):len(prot)],
	}
	copy(m.sig[:], sig)
	if h.kid {
		m.Kid, m.HasKid = string(h.kidValue), true
	}
	return m, true
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
