package sqlhop

import (
	"encoding/binary"
	"errors"

	"github.com/quantumlearningmachines/handoff"
)

// The column hops.chain holds a record's Chain and ChainForms in one
// value, so that a claim stays one row of one statement:
//
//   - NULL: no chain (Chain nil; and every record kept before the column
//     was added);
//   - otherwise uvarint(n), then the n elements oldest first, each as one
//     octet of form (handoff.Form: 0 JWS, 1 COSE, 2 invalid), uvarint(len)
//     and len octets exactly as received.
//
// uvarint is encoding/binary's (little-endian base 128). An empty chain
// is the one octet 0x00, not NULL and not an empty value (a driver may
// read an empty value as NULL). Past the octets themselves it costs the
// count (one octet below 128 elements) and 2 to 4 octets an element (4
// up to 2 MiB; the default limits bound an element to 64 KiB and the
// Handoff, chain and all, to 1 MiB: handoff.Limits).

// chainValue is the value of hops.chain for chain and forms (which
// store.CheckClaim has matched): nil (NULL) for a nil chain.
func chainValue(chain [][]byte, forms []handoff.Form) []byte {
	if chain == nil {
		return nil
	}
	n := binary.MaxVarintLen64
	for _, el := range chain {
		n += 1 + binary.MaxVarintLen64 + len(el)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(chain)))
	for i, el := range chain {
		b = append(b, byte(forms[i]))
		b = binary.AppendUvarint(b, uint64(len(el)))
		b = append(b, el...)
	}
	return b
}

var errChain = errors.New("corrupt chain column")

// parseChain reads a value of hops.chain (nil: NULL) back into Chain and
// ChainForms. The elements are slices of b (each capped at its end), so b
// must not be reused. Anything but the encoding above, exactly (a count
// beyond the octets left, an unknown form, a length past the end, a
// uvarint longer than it needs to be, trailing octets), is errChain: a
// value read is one chainValue writes.
func parseChain(b []byte) ([][]byte, []handoff.Form, error) {
	if b == nil {
		return nil, nil, nil
	}
	n, k := uvarint(b)
	// Each element takes two octets at least: the count is bounded by
	// what is left before anything is allocated for it.
	if k <= 0 || n > uint64(len(b)-k)/2 {
		return nil, nil, errChain
	}
	b = b[k:]
	chain, forms := make([][]byte, n), make([]handoff.Form, n)
	for i := range chain {
		if len(b) == 0 {
			return nil, nil, errChain
		}
		f := handoff.Form(b[0])
		if f != handoff.FormJWS && f != handoff.FormCOSE && f != handoff.FormInvalid {
			return nil, nil, errChain
		}
		l, k := uvarint(b[1:])
		if k <= 0 || l > uint64(len(b)-1-k) {
			return nil, nil, errChain
		}
		start, end := 1+k, 1+k+int(l)
		chain[i], forms[i] = b[start:end:end], f
		b = b[end:]
	}
	if len(b) != 0 {
		return nil, nil, errChain
	}
	return chain, forms, nil
}

// uvarint is binary.Uvarint, refusing (k <= 0) an encoding longer than
// needed (a last octet of zero after others).
func uvarint(b []byte) (uint64, int) {
	n, k := binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, -1
	}
	return n, k
}
