// Package jws implements the JWS profile of the agent handoff draft
// (draft-agent-handoff-01, section "Signing"; the project's reading is
// SPEC.md section 2 and rules D1, D2, D3, D10): the RFC 7515 compact
// serialization with ES256 only, a protected header of exactly alg, kid
// and typ "agent-handoff+jwt", no crit, and the 64-octet R||S signature.
//
// It is a small strict format written directly over crypto/ecdsa and
// crypto/sha256, not a general JOSE library. Parse rejects anything
// outside the profile: base64url with padding, line breaks or
// non-canonical trailing bits; a header that is not one JSON object or
// that has duplicate, unknown or mistyped members; any alg but ES256; a
// DER or otherwise mis-sized signature. Sign writes the canonical header
// {"alg":"ES256","kid":<kid>,"typ":"agent-handoff+jwt"}.
package jws

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/quantumlearningmachines/handoff/internal/es256"
)

// Typ is the typ header value Sign writes.
const Typ = "agent-handoff+jwt"

// ES256 is the only alg value this profile allows.
const ES256 = "ES256"

// Errors returned by Parse, Verify and Sign wrap exactly one of these.
var (
	// ErrMalformed: bad structure, base64url, header JSON, missing, extra
	// or mistyped header members, empty kid, or a signature not 64 octets.
	ErrMalformed = errors.New("jws: malformed")
	// ErrCrit: the header has a crit member.
	ErrCrit = errors.New("jws: crit header not allowed")
	// ErrAlg: alg is not "ES256", or a key is not a P-256 key.
	ErrAlg = errors.New("jws: algorithm not allowed")
	// ErrTyp: typ is not agent-handoff+jwt (see Parse).
	ErrTyp = errors.New("jws: wrong typ")
	// ErrSignature: the signature does not verify with the given key.
	ErrSignature = errors.New("jws: signature does not verify")
)

// Header is the protected header. Typ is as received (case and
// "application/" prefix preserved).
type Header struct {
	Alg, Kid, Typ string
}

// Token is a structurally valid compact JWS as returned by Parse. Its
// signature has not been checked until Verify returns nil.
type Token struct {
	Header  Header
	Payload []byte // decoded payload octets

	signingInput []byte   // "header.payload" prefix of Parse's input (aliased)
	sigPart      []byte   // ".signature" rest of Parse's input (aliased)
	sig          [64]byte // R||S, each 32 octets big-endian

	// inputHash is SHA-256(signingInput) once Digest has computed it on
	// its way to the whole token's hash; Verify then does not hash the
	// signing input a second time.
	inputHash [sha256.Size]byte
	hashed    bool
}

const (
	sigLen    = 64
	sigB64Len = 86 // RawURLEncoding.EncodedLen(64)
)

var b64 = base64.RawURLEncoding.Strict()

// Sign returns the compact serialization (ASCII octets) of payload signed
// with key, a P-256 key, under the protected header
// {"alg":"ES256","kid":<kid>,"typ":"agent-handoff+jwt"}. kid must be
// non-empty valid UTF-8 and payload non-empty, so that Parse accepts the
// result. rand is passed to ecdsa.Sign (which since Go 1.26 ignores it
// unless GODEBUG=cryptocustomrand=1).
func Sign(rand io.Reader, key *ecdsa.PrivateKey, kid string, payload []byte) ([]byte, error) {
	if key == nil || key.Curve == nil || key.Curve.Params() != elliptic.P256().Params() {
		return nil, fmt.Errorf("%w: signing key is not a P-256 key", ErrAlg)
	}
	if kid == "" {
		return nil, fmt.Errorf("%w: empty kid", ErrMalformed)
	}
	if len(payload) == 0 {
		return nil, fmt.Errorf("%w: empty payload", ErrMalformed)
	}
	hdr := make([]byte, 0, 48+len(kid))
	hdr = append(hdr, `{"alg":"ES256","kid":`...)
	hdr, err := jsontext.AppendQuote(hdr, kid)
	if err != nil {
		return nil, fmt.Errorf("%w: kid is not valid UTF-8", ErrMalformed)
	}
	hdr = append(hdr, `,"typ":"agent-handoff+jwt"}`...)

	n := b64.EncodedLen(len(hdr)) + 1 + b64.EncodedLen(len(payload))
	out := make([]byte, 0, n+1+sigB64Len)
	out = b64.AppendEncode(out, hdr)
	out = append(out, '.')
	out = b64.AppendEncode(out, payload)

	h := sha256.Sum256(out)
	r, s, err := ecdsa.Sign(rand, key, h[:])
	if err != nil {
		return nil, fmt.Errorf("jws: sign: %w", err)
	}
	var sig [sigLen]byte
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	out = append(out, '.')
	return b64.AppendEncode(out, sig[:]), nil
}

// Parse checks the structure of a compact JWS; it uses no key. It requires
// exactly three '.'-separated non-empty parts of strict base64url (no
// padding, no characters outside the URL-safe alphabet, canonical trailing
// bits); a header that is one JSON object (no duplicate names, valid UTF-8,
// nothing after it) with exactly the members alg, kid and typ, each a
// string; alg exactly "ES256"; kid non-empty; typ "agent-handoff+jwt" or
// "application/agent-handoff+jwt", ASCII case-insensitively (RFC 7515
// section 4.1.9); and a signature of exactly 64 octets (R||S).
//
// After the split into parts, the header is checked first, then the
// payload, then the signature. A crit member yields ErrCrit whatever else
// the header (if well-formed JSON) holds. A wrong alg yields ErrAlg, a
// wrong typ ErrTyp; everything else, including a missing alg or typ,
// yields ErrMalformed.
//
// The returned Token's signing input aliases compact, which must not be
// modified while the Token is in use.
func Parse(compact []byte) (*Token, error) {
	d1 := bytes.IndexByte(compact, '.')
	d2 := -1
	if d1 >= 0 {
		if i := bytes.IndexByte(compact[d1+1:], '.'); i >= 0 {
			d2 = d1 + 1 + i
		}
	}
	if d2 < 0 || bytes.IndexByte(compact[d2+1:], '.') >= 0 {
		return nil, fmt.Errorf("%w: %d parts, want 3", ErrMalformed, bytes.Count(compact, []byte{'.'})+1)
	}
	hPart, pPart, sPart := compact[:d1], compact[d1+1:d2], compact[d2+1:]
	switch {
	case len(hPart) == 0:
		return nil, fmt.Errorf("%w: empty header part", ErrMalformed)
	case len(pPart) == 0:
		return nil, fmt.Errorf("%w: empty payload part", ErrMalformed)
	case len(sPart) == 0:
		return nil, fmt.Errorf("%w: empty signature part", ErrMalformed)
	}
	// The strict decoder rejects every octet outside the alphabet except
	// CR and LF, which it skips.
	if i := bytes.IndexByte(compact, '\n'); i >= 0 {
		return nil, fmt.Errorf("%w: line feed at offset %d", ErrMalformed, i)
	}
	if i := bytes.IndexByte(compact, '\r'); i >= 0 {
		return nil, fmt.Errorf("%w: carriage return at offset %d", ErrMalformed, i)
	}

	t := new(Token)
	if err := parseHeader(&t.Header, hPart); err != nil {
		return nil, err
	}

	payload := make([]byte, b64.DecodedLen(len(pPart)))
	n, err := b64.Decode(payload, pPart)
	if err != nil {
		return nil, b64Error("payload", pPart)
	}
	t.Payload = payload[:n]

	if len(sPart) != sigB64Len {
		if err := b64CharError("signature", sPart); err != nil || len(sPart)%4 == 1 {
			return nil, b64Error("signature", sPart)
		}
		return nil, fmt.Errorf("%w: signature is %d octets, want %d", ErrMalformed, b64.DecodedLen(len(sPart)), sigLen)
	}
	if n, err := b64.Decode(t.sig[:], sPart); err != nil || n != sigLen {
		return nil, b64Error("signature", sPart)
	}
	t.signingInput = compact[:d2:d2]
	t.sigPart = compact[d2:]
	return t, nil
}

// Digest returns SHA-256 of the whole compact serialization Parse was
// given: the handoff digest of the element (draft "Handoff Digest"). The
// signing input is its prefix, so one pass over the octets yields both
// hashes: the signing input's is kept for Verify (Sum does not disturb
// the running state).
func (t *Token) Digest() [sha256.Size]byte {
	h := sha256.New()
	h.Write(t.signingInput)
	h.Sum(t.inputHash[:0])
	t.hashed = true
	h.Write(t.sigPart)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// b64Error describes why part is not strict base64url.
func b64Error(what string, part []byte) error {
	if err := b64CharError(what, part); err != nil {
		return err
	}
	if len(part)%4 == 1 {
		return fmt.Errorf("%w: %s: impossible base64url length %d", ErrMalformed, what, len(part))
	}
	return fmt.Errorf("%w: %s: non-canonical base64url trailing bits", ErrMalformed, what)
}

// b64CharError reports the first octet of part outside the alphabet.
func b64CharError(what string, part []byte) error {
	for i, c := range part {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case c == '=':
			return fmt.Errorf("%w: %s: base64url padding at offset %d", ErrMalformed, what, i)
		default:
			return fmt.Errorf("%w: %s: character %q at offset %d outside base64url", ErrMalformed, what, c, i)
		}
	}
	return nil
}

// parseHeader decodes and checks the header part. The canonical form Sign
// writes, with a kid of printable ASCII needing no escape, is recognized
// directly; anything else goes through the strict JSON decoder.
func parseHeader(h *Header, part []byte) error {
	var stack [160]byte
	var raw []byte
	if n := b64.DecodedLen(len(part)); n <= len(stack) {
		raw = stack[:n]
	} else {
		raw = make([]byte, n)
	}
	n, err := b64.Decode(raw, part)
	if err != nil {
		return b64Error("header", part)
	}
	raw = raw[:n]
	if kid, ok := canonicalKid(raw); ok {
		*h = Header{Alg: ES256, Kid: string(kid), Typ: Typ}
		return nil
	}
	return parseHeaderJSON(h, raw)
}

const (
	canonPrefix = `{"alg":"ES256","kid":"`
	canonSuffix = `","typ":"agent-handoff+jwt"}`
)

// canonicalKid reports whether raw is exactly
// {"alg":"ES256","kid":"<kid>","typ":"agent-handoff+jwt"} with a non-empty
// kid of printable ASCII other than '"' and '\\', and returns kid. Such a
// header is a string the strict JSON path accepts with the same result.
func canonicalKid(raw []byte) ([]byte, bool) {
	if len(raw) <= len(canonPrefix)+len(canonSuffix) ||
		string(raw[:len(canonPrefix)]) != canonPrefix ||
		string(raw[len(raw)-len(canonSuffix):]) != canonSuffix {
		return nil, false
	}
	kid := raw[len(canonPrefix) : len(raw)-len(canonSuffix)]
	for _, c := range kid {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return nil, false
		}
	}
	return kid, true
}

// headerScratch is the pooled state for parsing one header.
type headerScratch struct {
	buf bytes.Buffer
	dec *jsontext.Decoder
	str []byte // unquoted string scratch
}

var headerPool = sync.Pool{New: func() any {
	return &headerScratch{dec: jsontext.NewDecoder(emptyReader{})}
}}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, io.EOF }

// maxPooledHeader bounds the buffer a pooled headerScratch keeps.
const maxPooledHeader = 4 << 10

// parseHeaderJSON checks raw, a decoded header, with the jsontext decoder.
func parseHeaderJSON(h *Header, raw []byte) error {
	sc := headerPool.Get().(*headerScratch)
	err := sc.parse(h, raw)
	sc.dec.Reset(emptyReader{}) // drop the reference to sc.buf's contents
	if sc.buf.Cap() <= maxPooledHeader {
		headerPool.Put(sc)
	}
	return err
}

func (sc *headerScratch) parse(h *Header, raw []byte) error {
	sc.buf.Reset()
	sc.buf.Write(raw)
	dec := sc.dec
	dec.Reset(&sc.buf) // defaults: duplicate names and invalid UTF-8 rejected

	if tok, err := dec.ReadToken(); err != nil {
		return fmt.Errorf("%w: header is not JSON", ErrMalformed)
	} else if tok.Kind() != '{' {
		return fmt.Errorf("%w: header is not a JSON object", ErrMalformed)
	}

	// The whole object is read before reporting, so that crit wins over
	// every other member problem and JSON errors win over crit.
	var (
		crit                      bool
		semErr                    error // first member problem other than crit
		haveAlg, haveKid, haveTyp bool
		alg, typ                  int // 0 unset, 1 right, 2 wrong
	)
	for dec.PeekKind() == '"' {
		name, err := dec.ReadValue()
		if err != nil {
			return fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
		}
		sc.str, err = jsontext.AppendUnquote(sc.str[:0], name)
		if err != nil {
			return fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
		}
		member := memberOf(sc.str)
		if member == mCrit || member == mOther {
			if member == mCrit {
				crit = true
			} else if semErr == nil {
				semErr = fmt.Errorf("%w: header member %q not allowed", ErrMalformed, sc.str)
			}
			if err := dec.SkipValue(); err != nil {
				return fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
			}
			continue
		}
		isString := dec.PeekKind() == '"'
		val, err := dec.ReadValue()
		if err != nil {
			return fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
		}
		if !isString {
			if semErr == nil {
				semErr = fmt.Errorf("%w: header member %q is not a string", ErrMalformed, memberNames[member])
			}
			continue
		}
		sc.str, err = jsontext.AppendUnquote(sc.str[:0], val)
		if err != nil {
			return fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
		}
		switch member {
		case mAlg:
			haveAlg, alg = true, 2
			if string(sc.str) == ES256 {
				alg, h.Alg = 1, ES256
			}
		case mKid:
			haveKid = true
			h.Kid = string(sc.str)
		case mTyp:
			haveTyp, typ = true, 2
			if typOK(sc.str) {
				typ = 1
				if string(sc.str) == Typ {
					h.Typ = Typ
				} else {
					h.Typ = string(sc.str)
				}
			}
		}
	}
	if tok, err := dec.ReadToken(); err != nil {
		return fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
	} else if tok.Kind() != '}' {
		return fmt.Errorf("%w: header JSON: unexpected %v", ErrMalformed, tok.Kind())
	}
	if _, err := dec.ReadValue(); err != io.EOF {
		return fmt.Errorf("%w: data after header JSON object", ErrMalformed)
	}

	switch {
	case crit:
		return ErrCrit
	case semErr != nil:
		return semErr
	case !haveAlg:
		return fmt.Errorf("%w: header member \"alg\" missing", ErrMalformed)
	case !haveKid:
		return fmt.Errorf("%w: header member \"kid\" missing", ErrMalformed)
	case !haveTyp:
		return fmt.Errorf("%w: header member \"typ\" missing", ErrMalformed)
	case alg != 1:
		return fmt.Errorf("%w: alg must be %q", ErrAlg, ES256)
	case h.Kid == "":
		return fmt.Errorf("%w: empty kid", ErrMalformed)
	case typ != 1:
		return fmt.Errorf("%w: typ must be %q", ErrTyp, Typ)
	}
	return nil
}

type member int

const (
	mOther member = iota
	mAlg
	mKid
	mTyp
	mCrit
)

var memberNames = [...]string{mOther: "", mAlg: "alg", mKid: "kid", mTyp: "typ", mCrit: "crit"}

func memberOf(name []byte) member {
	switch string(name) {
	case "alg":
		return mAlg
	case "kid":
		return mKid
	case "typ":
		return mTyp
	case "crit":
		return mCrit
	}
	return mOther
}

// typOK reports whether v is Typ, with or without "application/", under
// ASCII case folding only.
func typOK(v []byte) bool {
	const app = "application/"
	if len(v) == len(app)+len(Typ) && asciiEqualFold(v[:len(app)], app) {
		v = v[len(app):]
	}
	return asciiEqualFold(v, Typ)
}

func asciiEqualFold(a []byte, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
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

// Verify checks the ES256 signature of t over its signing input with pub,
// which must be a P-256 key (else ErrAlg). R and S are the two 32-octet
// big-endian halves of the signature and must lie in [1, N-1].
func (t *Token) Verify(pub *ecdsa.PublicKey) error {
	if pub == nil || pub.Curve == nil || pub.Curve.Params() != elliptic.P256().Params() {
		return fmt.Errorf("%w: verification key is not a P-256 key", ErrAlg)
	}
	if pub.X == nil || pub.Y == nil {
		return fmt.Errorf("%w: invalid public key", ErrSignature)
	}
	if t == nil {
		return fmt.Errorf("%w: nil token", ErrSignature)
	}
	r, s := t.sig[:32], t.sig[32:]
	if !scalarInRange(r) || !scalarInRange(s) {
		return fmt.Errorf("%w: r or s out of range", ErrSignature)
	}
	var buf [72]byte
	der := appendDERSignature(buf[:0], r, s)
	h := t.inputHash
	if !t.hashed {
		h = sha256.Sum256(t.signingInput)
	}
	if !ecdsa.VerifyASN1(pub, h[:], der) {
		return ErrSignature
	}
	return nil
}
