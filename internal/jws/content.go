package jws

import "crypto/sha256"

// ContentDigest returns SHA-256 of the signing input, "header.payload":
// exactly the octets the signature covers, so that two tokens with the
// same protected header and payload but another signature (an ECDSA
// (r, N-s), or an honest second signing) have the same content digest
// (SPEC D5). After Digest it costs nothing: Digest keeps the signing
// input's hash on its way to the whole token's.
func (t *Token) ContentDigest() [sha256.Size]byte {
	if t.hashed {
		return t.inputHash
	}
	return sha256.Sum256(t.signingInput)
}
