package handoff

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
)

// Digest algorithms. Only SHA-256 is implemented (draft "Data Model").
const AlgSHA256 = "sha-256"

// Digest names octets by hash. It is closed: exactly alg and val.
type Digest struct {
	Alg string
	Val []byte // the hash output, base64url on the wire
}

// DigestOf returns the SHA-256 Digest of b.
func DigestOf(b []byte) Digest {
	h := sha256.Sum256(b)
	return Digest{Alg: AlgSHA256, Val: h[:]}
}

// Equal reports whether two digests have the same alg and val.
func (d Digest) Equal(o Digest) bool { return d.Alg == o.Alg && bytes.Equal(d.Val, o.Val) }

// Matches reports whether d is the SHA-256 digest of b. A digest whose alg
// is not implemented never matches.
func (d Digest) Matches(b []byte) bool {
	if d.Alg != AlgSHA256 {
		return false
	}
	h := sha256.Sum256(b)
	return bytes.Equal(d.Val, h[:])
}

// String is the base64url val, for people.
func (d Digest) String() string { return b64.EncodeToString(d.Val) }

var b64 = base64.RawURLEncoding.Strict()

// decodeB64u decodes strict base64url: the B64u alphabet, no padding,
// canonical trailing bits, not empty.
func decodeB64u(s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("empty base64url")
	}
	// encoding/base64 skips CR and LF even in strict mode; B64u has neither.
	for i := 0; i < len(s); i++ {
		if !isB64uChar(s[i]) {
			return nil, fmt.Errorf("not strict base64url: character %q", s[i])
		}
	}
	b, err := b64.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not strict base64url without padding")
	}
	return b, nil
}
func isB64uChar(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// digestSlab holds the vals of sha-256 digests, so that an offer's digests
// share the allocation of the offer.
type digestSlab struct {
	buf [3 * sha256.Size]byte
	n   int
}

// b64uDecode decodes strict base64url as decodeB64u does, into the slab
// when it fits. It reports false where decodeB64u fails.
func (sl *digestSlab) b64uDecode(s []byte) ([]byte, bool) {
	if len(s) == 0 {
		return nil, false
	}
	for _, c := range s {
		if !isB64uChar(c) {
			return nil, false
		}
	}
	n := b64.DecodedLen(len(s))
	var dst []byte
	if sl != nil && n <= len(sl.buf)-sl.n {
		dst = sl.buf[sl.n : sl.n+n : sl.n+n]
	} else {
		dst = make([]byte, n)
	}
	m, err := b64.Decode(dst, s)
	if err != nil {
		return nil, false
	}
	if sl != nil && n <= len(sl.buf)-sl.n {
		sl.n += n
	}
	return dst[:m:m], true
}

// GrantCheck checks the credential presented with a hop against its
// offer's grant (draft "On Behalf Of": "A receiver that is given a
// credential with the hop can check that it is the one the delegator
// named"). A host that has the credential in hand, say the request's
// bearer token, returns MatchGrant(grant, credential); one that was
// given none decides whether that is a refusal.
type GrantCheck func(ctx context.Context, grant Digest) error

// Errors of MatchGrant.
var (
	// ErrGrantAlg: the grant's alg is not one this implementation has;
	// the draft ("Digest") counts a check that depends on it as failed.
	ErrGrantAlg = errors.New("handoff: the grant's digest alg is not supported: the check counts as failed")
	// ErrGrantMismatch: the credential is not the one the grant names.
	ErrGrantMismatch = errors.New("handoff: the credential presented is not the one the grant names")
)

// MatchGrant reports whether credential, its octets exactly as presented
// (the ASCII octets of a bearer token), is the one grant names: nil, or
// ErrGrantAlg or ErrGrantMismatch. The comparison takes the same time
// whatever the octets.
func MatchGrant(grant Digest, credential []byte) error {
	if grant.Alg != AlgSHA256 {
		return fmt.Errorf("%w (%q)", ErrGrantAlg, grant.Alg)
	}
	h := sha256.Sum256(credential)
	if subtle.ConstantTimeCompare(h[:], grant.Val) != 1 {
		return ErrGrantMismatch
	}
	return nil
}
