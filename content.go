package handoff

import (
	"crypto/sha256"
	"fmt"

	"github.com/quantumlearningmachines/handoff/internal/cose"
	"github.com/quantumlearningmachines/handoff/internal/jws"
)

// Same signed content is the same offer (SPEC D5). An ECDSA signature is
// malleable ((r, s) and (r, N-s) both verify) and a COSE unprotected
// header is not signed: anyone holding an offer's octets (every later hop
// does: they travel in chain) can make other octets, with another handoff
// digest, that verify as the same offer. The signed content digest names
// what only the key holder can change: SHA-256 over exactly the octets the
// signature covers.
//
//   - JWS: the ASCII signing input, the text before the second '.'.
//   - COSE_Sign1: ToBeSigned, the CBOR Sig_structure ["Signature1",
//     protected, h'', payload] (RFC 9052 section 4.4), which frames the
//     protected header and payload unambiguously.
//
// The two forms never share a content digest (a signing input is
// base64url text, a Sig_structure begins with the octet 0x84), so an offer
// re-signed in the other form is different content.

// SignedContent returns the signed content digest of a signed element
// (SPEC D5): equal for two elements with the same protected header and
// payload, whatever their signatures (and, for COSE, unprotected
// headers). It checks the element's signed form, not its signature or
// payload.
func SignedContent(e Element) (Digest, error) {
	switch e.Form {
	case FormJWS:
		t, err := jws.Parse(e.Octets)
		if err != nil {
			return Digest{}, fmt.Errorf("handoff: signed content: %w", err)
		}
		d := t.ContentDigest()
		return Digest{Alg: AlgSHA256, Val: d[:]}, nil
	case FormCOSE:
		m, err := cose.Parse(e.Octets)
		if err != nil {
			return Digest{}, fmt.Errorf("handoff: signed content: %w", err)
		}
		d := m.ContentDigest()
		return Digest{Alg: AlgSHA256, Val: d[:]}, nil
	}
	return Digest{}, fmt.Errorf("handoff: signed content: the element is %v, not a signed form", e.Form)
}

// SameContent reports whether a and b are the same offer by D5: the same
// signed content, whatever their other octets. Elements that are not a
// well-formed signed form are never the same content (and an error says
// which one failed).
func SameContent(a, b Element) (bool, error) {
	ca, err := SignedContent(a)
	if err != nil {
		return false, err
	}
	cb, err := SignedContent(b)
	if err != nil {
		return false, err
	}
	return ca.Equal(cb), nil
}

// digests returns the handoff digest of e, the element p was parsed from,
// and its signed content digest, in one allocation. For a JWS both come
// from one pass over the octets (the signing input is the token's prefix,
// see jws.Token.Digest); for COSE the content hashes ToBeSigned (a few
// hundred octets, against a verification).
func (p *parsed) digests(e Element) (digest, content Digest) {
	buf := make([]byte, 2*sha256.Size)
	var d, c [sha256.Size]byte
	if p.tok != nil {
		d = p.tok.Digest()
		c = p.tok.ContentDigest()
	} else {
		d = sha256.Sum256(e.Octets)
		c = p.msg.ContentDigest()
	}
	copy(buf, d[:])
	copy(buf[sha256.Size:], c[:])
	return Digest{Alg: AlgSHA256, Val: buf[:sha256.Size:sha256.Size]}, Digest{Alg: AlgSHA256, Val: buf[sha256.Size:]}
}
