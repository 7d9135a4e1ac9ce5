// Package cose is the COSE signed form of a handoff element (draft
// "Signing", COSE): a COSE_Sign1 message with tag 18, ES256 (alg -7), content
// type "application/agent-handoff+cbor" in the protected header, and the kid
// (the key's JWK thumbprint as UTF-8 octets) in the protected header.
//
// It wraps github.com/veraison/go-cose and adds what that library leaves to
// its callers: crit is refused (go-cose accepts unknown critical labels),
// the message is exactly one tag 18 around the array, the content type is
// text and checked, and only ES256 is allowed.
package cose

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"errors"
	"fmt"
	"io"
	"sync"

	gocose "github.com/veraison/go-cose"
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
	msg     gocose.Sign1Message
}

// Parse checks the structure of a tagged COSE_Sign1 handoff without a key.
func Parse(b []byte) (*Message, error) {
	// Exactly one tag 18 around a four-element array: go-cose checks the
	// prefix 0xd2 0x84 and decodes the content with tags forbidden.
	m := &Message{}
	if err := m.msg.UnmarshalCBOR(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if m.msg.Payload == nil {
		return nil, fmt.Errorf("%w: detached payload", ErrMalformed)
	}
	p := m.msg.Headers.Protected
	if _, ok := p[gocose.HeaderLabelCritical]; ok {
		return nil, fmt.Errorf("%w: protected label 2", ErrCrit)
	}
	if _, ok := m.msg.Headers.Unprotected[gocose.HeaderLabelCritical]; ok {
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
	if kid, ok := p[gocose.HeaderLabelKeyID]; ok {
		kb, ok := kid.([]byte)
		if !ok {
			return nil, fmt.Errorf("%w: kid is not a byte string", ErrMalformed)
		}
		m.Kid, m.HasKid = string(kb), true
	}
	if len(m.msg.Signature) != 64 {
		return nil, fmt.Errorf("%w: ES256 signature is %d octets, want 64", ErrMalformed, len(m.msg.Signature))
	}
	m.Payload = m.msg.Payload
	return m, nil
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

var verifiers sync.Map // *ecdsa.PublicKey -> gocose.Verifier

// Verify checks the ES256 signature with pub.
func (m *Message) Verify(pub *ecdsa.PublicKey) error {
	if pub == nil || pub.Curve != elliptic.P256() {
		return fmt.Errorf("%w: key is not P-256", ErrAlg)
	}
	v, ok := verifiers.Load(pub)
	if !ok {
		nv, err := gocose.NewVerifier(gocose.AlgorithmES256, pub)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrSignature, err)
		}
		v, _ = verifiers.LoadOrStore(pub, nv)
	}
	if err := m.msg.Verify(nil, v.(gocose.Verifier)); err != nil {
		return fmt.Errorf("%w: %v", ErrSignature, err)
	}
	return nil
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
