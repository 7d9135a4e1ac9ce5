// Package malleate makes, without the signing key, other octets that
// verify as the same signed element (SPEC D5, issue 13): an ECDSA
// signature (r, s) rewritten as (r, N-s), and a COSE_Sign1 whose
// unprotected header is edited. It is for tests: anyone on a handoff's
// path can do the same, which is why a delegate must call such a copy a
// retransmission and not equivocation.
package malleate

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strings"

	gocose "github.com/veraison/go-cose"

	"github.com/quantumlearningmachines/handoff/internal/es256"
)

var b64 = base64.RawURLEncoding

// negS replaces s by N-s in a 64-octet R||S signature.
func negS(sig []byte) ([]byte, error) {
	if len(sig) != 64 {
		return nil, fmt.Errorf("malleate: signature of %d octets, want 64 (R||S)", len(sig))
	}
	n := new(big.Int).SetBytes(es256.N[:])
	s := new(big.Int).SetBytes(sig[32:])
	if s.Sign() == 0 {
		return nil, errors.New("malleate: s is zero")
	}
	out := make([]byte, 64)
	copy(out, sig[:32])
	new(big.Int).Sub(n, s).FillBytes(out[32:])
	return out, nil
}

// JWS returns the compact JWS tok with its ES256 signature (r, s)
// replaced by (r, N-s): it verifies with the same key, over the same
// signing input.
func JWS(tok []byte) ([]byte, error) {
	parts := strings.Split(string(tok), ".")
	if len(parts) != 3 {
		return nil, errors.New("malleate: not a compact JWS")
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil {
		return nil, fmt.Errorf("malleate: signature: %w", err)
	}
	if sig, err = negS(sig); err != nil {
		return nil, err
	}
	return []byte(parts[0] + "." + parts[1] + "." + b64.EncodeToString(sig)), nil
}

// edit decodes a tagged COSE_Sign1, applies f and encodes it again; the
// protected header octets and payload are kept as they were.
func edit(msg []byte, f func(m *gocose.Sign1Message) error) ([]byte, error) {
	var m gocose.Sign1Message
	if err := m.UnmarshalCBOR(msg); err != nil {
		return nil, fmt.Errorf("malleate: %w", err)
	}
	if err := f(&m); err != nil {
		return nil, err
	}
	return m.MarshalCBOR()
}

// COSESignature returns the COSE_Sign1 msg with its signature (r, s)
// replaced by (r, N-s).
func COSESignature(msg []byte) ([]byte, error) {
	return edit(msg, func(m *gocose.Sign1Message) error {
		sig, err := negS(m.Signature)
		m.Signature = sig
		return err
	})
}

// COSEUnprotected returns the COSE_Sign1 msg with label set to value in
// its unprotected header (added or changed); the signature does not cover
// it.
func COSEUnprotected(msg []byte, label, value any) ([]byte, error) {
	return edit(msg, func(m *gocose.Sign1Message) error {
		if m.Headers.Unprotected == nil {
			m.Headers.Unprotected = gocose.UnprotectedHeader{}
		}
		m.Headers.Unprotected[label] = value
		m.Headers.RawUnprotected = nil // else go-cose writes the octets it read
		return nil
	})
}
