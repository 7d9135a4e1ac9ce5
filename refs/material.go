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

// index is the material prepared for one check: Objects hashed once, on
// the first look-up by digest (most checks find their octets by index).
type index struct {
	m       *Material
	done    bool
	digests []objectDigest
}

type objectDigest struct {
	salted bool
	sum    [32]byte // SHA-256(octets), or SHA-256(salt || octets) when salted
}

func newIndex(m *Material) index { return index{m: m} }

func (x *index) build() {
	x.done = true
	if x.m == nil {
		return
	}
	x.digests = make([]objectDigest, 0, len(x.m.Objects))
	for _, o := range x.m.Objects {
		if o.Salt == nil {
			x.digests = append(x.digests, objectDigest{false, sha256.Sum256(o.Octets)})
			continue
		}
		if len(o.Salt) != SaltSize {
			continue // never matches: only a salt of SaltSize verifies anything
		}
		x.digests = append(x.digests, objectDigest{true, [32]byte(SaltedDigest(o.Salt, o.Octets).Val)})
	}
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
// Objects are few (what came with one task), so a scan beats a map.
func (x *index) byDigest(salted bool, val []byte) bool {
	if x.m == nil || len(x.m.Objects) == 0 || len(val) != sha256.Size {
		return false
	}
	if !x.done {
		x.build()
	}
	for _, d := range x.digests {
		if d.salted == salted && [32]byte(val) == d.sum {
			return true
		}
	}
	return false
}
