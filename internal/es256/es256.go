// Package es256 holds what both signed forms need to check an ES256
// (ECDSA P-256 with SHA-256) signature: a 64-octet R||S signature, each
// half in [1, N-1], turned into its minimal DER form for
// crypto/ecdsa.VerifyASN1.
package es256

import "bytes"

// N is the order of the P-256 base point, big-endian.
var N = [32]byte{
	0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84,
	0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
}

// InRange reports whether the 32-octet big-endian v is in [1, N-1].
func InRange(v []byte) bool {
	var acc byte
	for _, b := range v {
		acc |= b
	}
	return acc != 0 && bytes.Compare(v, N[:]) < 0
}

// AppendDER appends the DER encoding of ECDSA-Sig-Value SEQUENCE { r
// INTEGER, s INTEGER } for the non-zero 32-octet big-endian r and s:
// minimal INTEGERs (leading zero octets dropped, one 0x00 added when the
// high bit is set). The result is at most 72 octets, so all lengths take
// the short form.
func AppendDER(dst, r, s []byte) []byte {
	r, s = bytes.TrimLeft(r, "\x00"), bytes.TrimLeft(s, "\x00")
	l := intLen(r) + intLen(s)
	dst = append(dst, 0x30, byte(l))
	dst = appendInt(dst, r)
	return appendInt(dst, s)
}

func intLen(v []byte) int {
	n := len(v)
	if v[0]&0x80 != 0 {
		n++
	}
	return 2 + n
}

func appendInt(dst, v []byte) []byte {
	if v[0]&0x80 != 0 {
		return append(append(dst, 0x02, byte(len(v)+1), 0x00), v...)
	}
	return append(append(dst, 0x02, byte(len(v))), v...)
}
