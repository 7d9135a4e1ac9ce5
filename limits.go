package handoff

import (
	"errors"

	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// Limits bound what a receiver decodes (SPEC.md section 4, "Bounds"). The
// Handoff and element sizes are checked before the octets are parsed; refs
// and detail while the payload is decoded. Exceeding one is "policy".
type Limits struct {
	MaxHandoff int // octets of a whole Handoff; default 1 MiB
	MaxElement int // octets of one signed element; default 64 KiB
	MaxRefs    int // refs of one element; default 64
	MaxDetail  int // octets of a status detail; default 4 KiB
	MaxChain   int // elements of a chain (not counting the offer); default 16
}

// DefaultLimits returns the bounds used where none are given (a Limits
// field left zero takes its default): a value, so that no caller can
// change what every other one accepts.
func DefaultLimits() Limits { return defaultLimits }

// defaultLimits are the bounds used where none are given.
var defaultLimits = Limits{MaxHandoff: 1 << 20, MaxElement: 64 << 10, MaxRefs: 64, MaxDetail: 4 << 10, MaxChain: 16}

func (l Limits) withDefaults() Limits {
	d := defaultLimits
	if l.MaxHandoff > 0 {
		d.MaxHandoff = l.MaxHandoff
	}
	if l.MaxElement > 0 {
		d.MaxElement = l.MaxElement
	}
	if l.MaxRefs > 0 {
		d.MaxRefs = l.MaxRefs
	}
	if l.MaxDetail > 0 {
		d.MaxDetail = l.MaxDetail
	}
	if l.MaxChain > 0 {
		d.MaxChain = l.MaxChain
	}
	return d
}

// MaxNesting is the deepest nesting of arrays and maps (and CBOR tags)
// that a payload or a Handoff may have, unknown members included: the
// data model needs five levels (a payload, refs, a ref, a learnlog-head
// proof, its head), and the rest is room for unknown members. Deeper
// input is refused as an exceeded bound ("policy") before any key is
// looked up (issue 13; docs/decisions.md 49).
const MaxNesting = wire.MaxDepth

// decodeError is the error of an input the tree decoder refused, after
// prefix: malformed (D3), or, for nesting deeper than MaxNesting, an
// exceeded bound (policy, SPEC.md section 4 Bounds).
func decodeError(member, prefix string, err error) error {
	if errors.Is(err, wire.ErrNesting) {
		return overBound(member, "%s%v", prefix, err)
	}
	return malformed(member, "%s%v", prefix, err)
}
