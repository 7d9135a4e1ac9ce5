package refs

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/quantumlearningmachines/handoff"
)

// SaltSize is the one length of a "salted-digest" salt: 32 octets from a
// cryptographically secure random source (the draft asks for at least 16).
// One length, not a minimum: dig is SHA-256 of salt followed by octets, so
// with salts of several lengths the same dig verifies other octets too,
// the boundary moved (a 48-octet salt that holds the first 16 octets of a
// prompt verifies the prompt without its preamble). Decision 98.
const SaltSize = 32

// NewDigestRef returns a reference of kind "digest" naming octets by their
// SHA-256 digest, with loc ("" for none) where the delegate may fetch them.
//
// Do not use it for prompts, instruction templates, short answers or any
// other low-entropy content: anyone who sees the element can hash guesses
// until one matches (draft "Privacy Considerations", guessable digests).
// Use NewSaltedRef for those.
func NewDigestRef(octets []byte, loc string) handoff.ContextRef {
	return handoff.ContextRef{Kind: handoff.KindDigest, Dig: handoff.DigestOf(octets), Loc: loc}
}

// NewSaltedRef returns a reference of kind "salted-digest" over octets with
// a fresh random salt (SaltSize octets from crypto/rand), and the salt. The
// salt never goes in the element: deliver it to the delegate with the
// octets (draft "Context References"). Prompts and other sensitive or
// low-entropy content must be named this way, never included.
func NewSaltedRef(octets []byte, loc string) (handoff.ContextRef, []byte, error) {
	salt, err := NewSalt()
	if err != nil {
		return handoff.ContextRef{}, nil, err
	}
	return handoff.ContextRef{Kind: handoff.KindSaltedDigest, Dig: SaltedDigest(salt, octets), Loc: loc}, salt, nil
}

// NewSalt returns SaltSize octets from crypto/rand.
func NewSalt() ([]byte, error) {
	salt := make([]byte, SaltSize)
	if _, err := io.ReadFull(rand.Reader, salt); err != nil {
		return nil, fmt.Errorf("refs: reading a random salt: %w", err)
	}
	return salt, nil
}

// SaltedDigest returns the "salted-digest" dig: SHA-256 of salt followed by
// octets. It does not check the salt's length; the Checker does.
func SaltedDigest(salt, octets []byte) handoff.Digest {
	h := sha256.New()
	h.Write(salt)
	h.Write(octets)
	return handoff.Digest{Alg: handoff.AlgSHA256, Val: h.Sum(nil)}
}

// DigestReader returns the SHA-256 Digest of salt (nil for a plain
// "digest") followed by everything r yields, without holding it in memory.
func DigestReader(salt []byte, r io.Reader) (handoff.Digest, error) {
	h := sha256.New()
	h.Write(salt)
	if _, err := io.Copy(h, r); err != nil {
		return handoff.Digest{}, err
	}
	return handoff.Digest{Alg: handoff.AlgSHA256, Val: h.Sum(nil)}, nil
}
