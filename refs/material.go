package refs

import (
	"context"
	"crypto/sha256"
)

// Material is what the host delivered with the task for the references:
// the octets (and salts) behind them. The host protocol carries it beside
// the Handoff (an A2A message's parts, an MCP call's arguments); this
// package only reads it.
//
// Octets and Salts are keyed by the reference's index in the element's
// refs (0-based). A present key supplies its value, even an empty one: an
// empty object is a valid object. Objects are found by digest instead,
// for a host that has the objects but not their positions: an Object
// matches a "digest" reference when it has no salt and SHA-256 of its
// octets is dig, and a "salted-digest" reference when it has a salt and
// SHA-256 of salt then octets is dig. Since only a matching object is ever
// found that way, Objects can show a reference verified but never
// mismatched; octets by index can show both.
type Material struct {
	Octets  map[int][]byte
	Salts   map[int][]byte
	Objects []Object
}

// Object is an object the host holds, with its salt when it is named by a
// "salted-digest" reference.
type Object struct {
	Octets []byte
	Salt   []byte
}

type materialKey struct{}

// WithMaterial returns a context carrying m, for Receiver.Receive (or a
// delegate's Receive) to hand to the Checker's step 7 hook. The material
// belongs to the one task the context is for.
func WithMaterial(ctx context.Context, m *Material) context.Context {
	return context.WithValue(ctx, materialKey{}, m)
}

// MaterialFrom returns the material WithMaterial put in ctx, or nil.
func MaterialFrom(ctx context.Context) *Material {
	m, _ := ctx.Value(materialKey{}).(*Material)
	return m
}

// index is the material prepared for one check: Objects hashed once.
type index struct {
	m        *Material
	bySHA    map[[32]byte][]byte // unsalted objects by SHA-256(octets)
	bySalted map[[32]byte]Object // salted objects by SHA-256(salt || octets)
}

func newIndex(m *Material) *index {
	x := &index{m: m}
	if m == nil || len(m.Objects) == 0 {
		return x
	}
	for _, o := range m.Objects {
		if o.Salt == nil {
			if x.bySHA == nil {
				x.bySHA = map[[32]byte][]byte{}
			}
			x.bySHA[sha256.Sum256(o.Octets)] = o.Octets
			continue
		}
		if len(o.Salt) < MinSaltSize {
			continue // never matches: a short salt cannot verify anything
		}
		if x.bySalted == nil {
			x.bySalted = map[[32]byte]Object{}
		}
		x.bySalted[[32]byte(SaltedDigest(o.Salt, o.Octets).Val)] = o
	}
	return x
}

// octets returns the octets supplied for index i.
func (x *index) octets(i int) ([]byte, bool) {
	if x.m == nil {
		return nil, false
	}
	b, ok := x.m.Octets[i]
	return b, ok
}

// salt returns the salt supplied for index i.
func (x *index) salt(i int) ([]byte, bool) {
	if x.m == nil {
		return nil, false
	}
	b, ok := x.m.Salts[i]
	return b, ok
}

// byDigest reports whether an Object matches a sha-256 dig of the kind.
func (x *index) byDigest(salted bool, val []byte) bool {
	if len(val) != sha256.Size {
		return false
	}
	k := [32]byte(val)
	if salted {
		_, ok := x.bySalted[k]
		return ok
	}
	_, ok := x.bySHA[k]
	return ok
}
