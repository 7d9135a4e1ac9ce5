package refs

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// RefFile is the document `handoff ref` writes and `handoff offer --add-ref`
// reads: {"ref": ContextRef, "salt": B64u}. salt is present only for a
// "salted-digest" reference; it is for whoever delivers the octets, and
// never goes into an element.
type RefFile struct {
	Ref  handoff.ContextRef
	Salt []byte // nil when absent
}

// MaxRefFile bounds the octets ParseRefFile reads.
const MaxRefFile = 64 << 10

var b64 = base64.RawURLEncoding.Strict()

// ParseSalt decodes a salt given as strict base64url (no padding, no line
// breaks, canonical final bits) and checks it has SaltSize octets.
func ParseSalt(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("empty salt")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, fmt.Errorf("salt is not base64url: character %q at %d", c, i)
		}
	}
	b, err := b64.DecodeString(s)
	if err != nil {
		return nil, errors.New("salt is not strict base64url without padding")
	}
	if len(b) != SaltSize {
		return nil, fmt.Errorf("%w: it is %d octets", ErrSaltSize, len(b))
	}
	return b, nil
}

// ParseRefFile reads a RefFile, JSON or CBOR by content, strictly: no
// duplicate or unknown members, a ref that fits the data model exactly as
// the receiver decodes one (it goes through the same decoder), and a salt
// (text, base64url) only beside a "salted-digest" ref, of SaltSize
// octets.
func ParseRefFile(b []byte) (RefFile, error) {
	var f RefFile
	if len(b) > MaxRefFile {
		return f, fmt.Errorf("ref file: %d octets exceed the bound of %d", len(b), MaxRefFile)
	}
	enc := handoff.JSON
	var v any
	var err error
	if handoff.IsJSON(b) {
		v, err = wire.DecodeJSON(b)
	} else {
		enc = handoff.CBOR
		v, err = wire.DecodeCBOR(b)
	}
	if err != nil {
		return f, fmt.Errorf("ref file: %w", err)
	}
	m, ok := wire.Members(v)
	if !ok {
		return f, fmt.Errorf("ref file: is %s, want a map with text keys", wire.TypeName(v))
	}
	for k := range m {
		if k != "ref" && k != "salt" {
			return f, fmt.Errorf("ref file: unknown member %q", k)
		}
	}
	rv, ok := m["ref"]
	if !ok {
		return f, errors.New(`ref file: member "ref" is missing`)
	}
	if f.Ref, err = decodeRef(rv, enc); err != nil {
		return f, err
	}
	if sv, ok := m["salt"]; ok {
		s, ok := sv.(string)
		if !ok {
			return f, fmt.Errorf(`ref file: member "salt" is %s, want base64url text`, wire.TypeName(sv))
		}
		if f.Ref.Kind != handoff.KindSaltedDigest {
			return f, fmt.Errorf(`ref file: a salt beside a ref of kind %q (only salted-digest has one)`, f.Ref.Kind)
		}
		if f.Salt, err = ParseSalt(s); err != nil {
			return f, fmt.Errorf(`ref file: member "salt": %w`, err)
		}
	}
	return f, nil
}

// placeholder members of the offer a ref is decoded inside.
func placeholderOffer() *wire.Map {
	m := &wire.Map{}
	m.Add("v", uint64(1))
	m.Add("type", "offer")
	m.Add("hop", "AAAAAAAAAAAAAAAAAAAAAA")
	m.Add("dialog", "d")
	m.Add("iss", "i")
	m.Add("aud", "a")
	m.Add("iat", uint64(0))
	m.Add("exp", uint64(1))
	return m
}

// decodeRef decodes one ContextRef with the receiver's own decoder, by
// placing it in an otherwise fixed offer payload: one definition of the
// data model, not two that could drift apart.
func decodeRef(v any, enc handoff.Encoding) (handoff.ContextRef, error) {
	t := placeholderOffer()
	t.Add("refs", []any{v})
	var b []byte
	var err error
	if enc == handoff.CBOR {
		b, err = wire.EncodeCBOR(t)
	} else {
		b, err = wire.EncodeJSON(t)
	}
	if err != nil {
		return handoff.ContextRef{}, fmt.Errorf("ref file: member \"ref\": %w", err)
	}
	o, err := handoff.DecodeOffer(b, enc)
	if err != nil {
		msg := strings.Replace(err.Error(), `"refs[0]`, `"ref`, 1)
		return handoff.ContextRef{}, fmt.Errorf("ref file: the ref does not fit the data model: %s", msg)
	}
	return o.Refs[0], nil
}

// MarshalJSON writes the file as `handoff ref` prints it: ref's members
// kind, dig (alg, val), loc, proof, then any others in sorted order; then
// salt, when there is one.
func (f RefFile) MarshalJSON() ([]byte, error) {
	t, err := refTree(f.Ref)
	if err != nil {
		return nil, err
	}
	out := &wire.Map{}
	out.Add("ref", t)
	if f.Salt != nil {
		out.Add("salt", b64.EncodeToString(f.Salt))
	}
	return wire.EncodeJSON(out)
}

// refTree is r as the handoff package's encoder writes it, members in a
// fixed order.
func refTree(r handoff.ContextRef) (*wire.Map, error) {
	o := &handoff.Offer{Hop: "AAAAAAAAAAAAAAAAAAAAAA", Dialog: "d", Iss: "i", Aud: "a", Iat: 0, Exp: 1, Refs: []handoff.ContextRef{r}}
	b, err := o.Encode(handoff.JSON)
	if err != nil {
		return nil, fmt.Errorf("refs: the ref does not fit the data model: %w", err)
	}
	v, err := wire.DecodeJSON(b)
	if err != nil {
		return nil, err
	}
	pm, _ := wire.Members(v)
	rm, _ := wire.Members(pm["refs"].([]any)[0])
	t := &wire.Map{}
	order := []string{"kind", "dig", "loc", "proof"}
	for _, k := range order {
		x, ok := rm[k]
		if !ok {
			continue
		}
		if k == "dig" {
			dm, _ := wire.Members(x)
			d := &wire.Map{}
			d.Add("alg", dm["alg"])
			d.Add("val", dm["val"])
			x = d
		}
		t.Add(k, x)
	}
	var rest []string
	for k := range rm {
		if !slices.Contains(order, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		t.Add(k, rm[k])
	}
	return t, nil
}
