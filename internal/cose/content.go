package cose

import "crypto/sha256"

// ContentDigest returns SHA-256 of ToBeSigned, the Sig_structure
// ["Signature1", protected, h”, payload] that the signature covers: the
// same for two messages with the same protected header and payload,
// whatever their unprotected headers and signatures (SPEC D5). It is
// encoded as Verify encodes it, so two protected headers (or payloads)
// that differ only in a non-preferred length head, which the signature
// does not see, have one content digest as well.
func (m *Message) ContentDigest() [sha256.Size]byte {
	var heads [tbsHeadsLen]byte
	h := sha256.New()
	for _, part := range m.toBeSigned(&heads) {
		h.Write(part)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}
