package handoff

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"

	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// Decoding: the data model of SPEC.md section 1 read once, straight from
// the encoded octets (JSON or CBOR alike) with a wire.Reader. There is no
// second decoder to name a fault: the one that accepts is the one that
// refuses. It reads the whole input whatever it finds, because a syntax
// error anywhere (a duplicate key, invalid UTF-8, trailing octets,
// nesting past MaxNesting) comes before any fault in the data model; of
// the faults, it names the first in the data model's order (the order of
// the members below), not in the order the members arrive on the wire,
// so that one payload always gets one answer. Members of the wrong type
// and unknown members are read whole as tree values (the first to name
// the type it has, the second to keep it); values past a bound (refs
// beyond MaxRefs) are read and dropped.

// A shape lists the members of a map in the data model's order: the order
// in which a fault is named, and the order in which Encode writes them.
type shape []string

// index returns the member's place in the shape, or -1 for a member the
// data model does not define.
func (s shape) index(k string) int {
	for i, n := range s {
		if n == k {
			return i
		}
	}
	return -1
}

// The members of each map of the data model (SPEC.md section 1), in order.
var (
	offerShape     = shape{"v", "type", "hop", "dialog", "task", "iss", "aud", "iat", "exp", "obo", "grant", "prev", "refs"}
	statusShape    = shape{"v", "type", "offer", "iss", "aud", "iat", "state", "reason", "detail", "refs"}
	principalShape = shape{"sub", "iss"}
	refShape       = shape{"kind", "dig", "loc", "proof"}
	digestShape    = shape{"alg", "val"}
)

// The places in offerShape and statusShape, for the switches below.
const (
	oV = iota
	oType
	oHop
	oDialog
	oTask
	oIss
	oAud
	oIat
	oExp
	oObo
	oGrant
	oPrev
	oRefs
)

const (
	sV = iota
	sType
	sOffer
	sIss
	sAud
	sIat
	sState
	sReason
	sDetail
	sRefs
)

// fields tracks one map as it is read: the members seen and the first
// fault in the data model's order.
type fields struct {
	seen  uint32
	rank  int
	fault error
}

// fault records err for the member at rank; an earlier member's fault,
// found later on the wire, replaces a later member's.
func (f *fields) fail(rank int, err error) {
	if err != nil && (f.fault == nil || rank < f.rank) {
		f.fault, f.rank = err, rank
	}
}

// first marks the member at i as seen, and reports a duplicate to the
// reader (a syntax error) when it was seen already.
func (f *fields) first(r *wire.Reader, i int, k string) bool {
	if f.seen&(1<<i) != 0 {
		r.Duplicate(k)
		return false
	}
	f.seen |= 1 << i
	return true
}

// missing records a fault for each required member of s not seen.
func (f *fields) missing(s shape, required uint32) {
	for i, n := range s {
		if required&(1<<i) != 0 && f.seen&(1<<i) == 0 {
			f.fail(i, malformed(n, "missing"))
			return
		}
	}
}

// decoder reads one payload. Its slab holds the vals of the payload's
// digests, so that they share one allocation with the payload.
type decoder struct {
	r   wire.Reader // by value: a pointer field would leak with sl, moving the Reader to the heap
	lim Limits
	sl  *digestSlab
	// arena is where a Handoff's chain elements keep their octets: a few
	// allocations for a chain, not one per element.
	arena []byte
	// raw: a JSON chain's elements are read unchecked (wire.Reader.RawText),
	// as FormInvalid elements whose octets alias the input, for
	// Receiver.warm alone, which keeps the Handoff only when each of them
	// equals an element verified before.
	raw bool
}

// keep returns a copy of a chain element's octets (t, just read), carved
// from the arena. An arena is as large as what is left of the input
// after t (the rest of the chain cannot be more), up to 64 KiB: one
// allocation for a chain of 16 elements of 1 KiB. What follows the chain
// in the input may leave part of an arena unused (at most the input's
// size, and 8 KiB per arena past the first); an element past 8 KiB has
// a copy of its own.
func (d *decoder) keep(t []byte) []byte {
	if len(t) > 8<<10 {
		return bytes.Clone(t)
	}
	if cap(d.arena)-len(d.arena) < len(t) {
		d.arena = make([]byte, 0, min(len(t)+d.r.Left(), max(64<<10, len(t))))
	}
	n := len(d.arena)
	d.arena = append(d.arena, t...)
	return d.arena[n:len(d.arena):len(d.arena)]
}

// wrongType reads the next value whole and returns the fault of a member
// that has its type, not want.
func (d *decoder) wrongType(member, want string) error {
	v := d.r.Any()
	return malformed(member, "is %s, want %s", wire.TypeName(v), want)
}

// text reads a text member.
func (d *decoder) text(member string) (string, error) {
	if d.r.Peek() != wire.KindText {
		return "", d.wrongType(member, "text")
	}
	return d.r.Text(), nil
}

// time reads a Time: a non-negative integer. One beyond any clock (past
// math.MaxInt64) is read as the largest int64, so that it is never fresh
// and never in the past.
func (d *decoder) time(member string) (int64, error) {
	if d.r.Peek() != wire.KindUint {
		return 0, d.wrongType(member, "a non-negative integer")
	}
	return int64(min(d.r.Uint(), math.MaxInt64)), nil
}

// open opens a map with text keys; what names it in the fault of a value
// that is not one.
func (d *decoder) open(what string) error {
	if d.r.Peek() != wire.KindMap {
		v := d.r.Any()
		return malformed("", "%s is %s, want a map with text keys", what, wire.TypeName(v))
	}
	d.r.Map()
	return nil
}

// closed reports the fault of a map that Key ended at a key that is not
// text (a CBOR map; the reader has read it whole).
func (d *decoder) closed(what string) error {
	if _, ok := d.r.NotText(); ok {
		return malformed("", "%s is map, want a map with text keys", what)
	}
	return nil
}

// extra reads an unknown member into *extra, kept as its tree value.
func (d *decoder) extra(extra *map[string]any, k string) {
	if *extra == nil {
		*extra = map[string]any{}
	} else if _, dup := (*extra)[k]; dup {
		d.r.Duplicate(k)
		return
	}
	(*extra)[k] = d.r.Any()
}

// mapOf reads one map of the data model, the loop every map shares:
// what names it in the fault of a value that is not a map with text keys;
// s lists its members (and their places); an unknown member goes to
// *extra, or, when extra is nil (a closed map), is refused at the place
// after the last member and skipped (End then rechecks the input's
// syntax, its keys no longer told apart); member reads the value of the
// member at place i and returns its fault, if any, and the place to rank
// it at (its own, or one after the members' for a fault of its content
// that comes after theirs). It returns the fields it saw, and the map's
// own fault, if any, which comes before all of theirs. (member takes no
// pointer to the fields: that would move them to the heap.)
func (d *decoder) mapOf(what string, s shape, extra *map[string]any, member func(i int, k string) (rank int, err error)) (fields, error) {
	var f fields
	if err := d.open(what); err != nil {
		return f, err
	}
	for {
		k, ok := d.r.Key()
		if !ok {
			break
		}
		i := s.index(k)
		switch {
		case i < 0 && extra != nil:
			d.extra(extra, k)
		case i < 0:
			d.r.Skip()
			d.r.Recheck()
			if f.fault == nil || f.rank > len(s) {
				f.fail(len(s), malformed(k, "not allowed: %s is closed", what))
			}
		case f.first(&d.r, i, k):
			f.fail(member(i, k))
		}
	}
	return f, d.closed(what)
}

// header reads v and type, which every payload begins with.
func (d *decoder) header(i int, k, typ string) error {
	if i == 0 { // v
		if d.r.Peek() != wire.KindUint {
			d.r.Any()
			return malformed("v", "must be the integer 1")
		} else if d.r.Uint() != Version {
			return malformed("v", "must be the integer 1")
		}
		return nil
	}
	t, err := d.text(k)
	if err == nil && t != typ {
		err = malformed("type", "is %q, want %q", t, typ)
	}
	return err
}

// digest reads a Digest: exactly alg and val, val strict base64url of 32
// octets for sha-256. Of its faults, a member's type comes first, then an
// unknown member (it is closed), then val's content.
func (d *decoder) digest(dst *Digest) error {
	f, err := d.mapOf("Digest", digestShape, nil, func(i int, k string) (int, error) {
		if d.r.Peek() != wire.KindText {
			return i, d.wrongType(k, "text")
		}
		if i == 0 {
			dst.Alg = d.r.Text()
			return i, nil
		}
		val := d.r.TextBytes()
		if d.r.Failed() {
			return i, nil
		}
		v, ok := d.sl.b64uDecode(val)
		if !ok {
			_, err := decodeB64u(string(val))
			return len(digestShape) + 1, malformed("val", "%v", err)
		}
		dst.Val = v
		return i, nil
	})
	if err != nil {
		return err
	}
	f.missing(digestShape, 1|2)
	if f.fault == nil && dst.Alg == AlgSHA256 && len(dst.Val) != sha256.Size {
		f.fail(len(digestShape)+1, malformed("val", "is %d octets, sha-256 is 32", len(dst.Val)))
	}
	return f.fault
}

// principal reads the obo member.
func (d *decoder) principal(p *Principal) error {
	f, err := d.mapOf("Principal", principalShape, &p.Extra, func(i int, k string) (int, error) {
		s, err := d.text(k)
		if i == 0 {
			p.Sub = s
		} else {
			p.Iss = s
		}
		return i, err
	})
	if err != nil {
		return err
	}
	f.missing(principalShape, 1)
	return f.fault
}

// ref reads one ContextRef.
func (d *decoder) ref(ref *ContextRef) error {
	f, err := d.mapOf("ContextRef", refShape, &ref.Extra, func(i int, k string) (int, error) {
		var err error
		switch i {
		case 0:
			ref.Kind, err = d.text(k)
			if err == nil && !knownKind(ref.Kind) && !IsAbsoluteURI(ref.Kind) {
				err = malformed("kind", "%q is neither a listed kind nor an absolute URI", ref.Kind)
			}
		case 1:
			err = prefixMember("dig", d.digest(&ref.Dig))
		case 2:
			ref.Loc, err = d.text(k)
		case 3:
			ref.Proof = d.r.Any()
		}
		return i, err
	})
	if err != nil {
		return err
	}
	f.missing(refShape, 1|2)
	return f.fault
}

// refs reads the refs member: a non-empty array of at most lim.MaxRefs,
// in buf while it fits. The refs past the bound are read and dropped.
func (d *decoder) refs(buf []ContextRef) ([]ContextRef, error) {
	if d.r.Peek() != wire.KindArray {
		return nil, d.wrongType("refs", "an array")
	}
	out := buf[:0]
	var first error
	n := 0
	d.r.Array()
	for d.r.More() {
		if n++; n > d.lim.MaxRefs {
			d.r.Skip()
			continue
		}
		out = append(out, ContextRef{})
		if err := d.ref(&out[len(out)-1]); err != nil && first == nil {
			first = prefixMember(fmt.Sprintf("refs[%d]", len(out)-1), err)
		}
	}
	switch {
	case n == 0:
		return nil, malformed("refs", "empty array")
	case n > d.lim.MaxRefs:
		return nil, overBound("refs", "%d refs exceed the limit of %d", n, d.lim.MaxRefs)
	}
	return out, first
}

// offerBlock is an Offer with the values it points to, in one allocation
// (for the common offer: one ref).
type offerBlock struct {
	o           Offer
	obo         Principal
	grant, prev Digest
	refs        [1]ContextRef
	slab        digestSlab
}

// offer reads an offer payload.
func (d *decoder) offer() (*Offer, error) {
	blk := &offerBlock{}
	o := &blk.o
	d.sl = &blk.slab
	f, err := d.mapOf("the payload", offerShape, &o.Extra, func(i int, k string) (int, error) {
		var err error
		switch i {
		case oV, oType:
			err = d.header(i, k, "offer")
		case oHop:
			if o.Hop, err = d.text(k); err == nil && !hopOK(o.Hop) {
				err = hopFault(o.Hop)
			}
		case oDialog:
			o.Dialog, err = d.text(k)
		case oTask:
			o.Task, err = d.text(k)
		case oIss:
			o.Iss, err = d.text(k)
		case oAud:
			o.Aud, err = d.text(k)
		case oIat:
			o.Iat, err = d.time(k)
		case oExp:
			o.Exp, err = d.time(k)
		case oObo:
			o.Obo = &blk.obo
			err = prefixMember(k, d.principal(o.Obo))
		case oGrant:
			o.Grant = &blk.grant
			err = prefixMember(k, d.digest(o.Grant))
		case oPrev:
			o.Prev = &blk.prev
			err = prefixMember(k, d.digest(o.Prev))
		case oRefs:
			o.Refs, err = d.refs(blk.refs[:])
		}
		return i, err
	})
	if err != nil {
		return nil, err
	}
	f.missing(offerShape, 1<<oV|1<<oType|1<<oHop|1<<oDialog|1<<oIss|1<<oAud|1<<oIat|1<<oExp)
	if f.fault != nil {
		return nil, f.fault
	}
	return o, nil
}

// hopFault is the fault of a hop that is not strict base64url of at least
// 16 octets.
func hopFault(hop string) error {
	hb, err := decodeB64u(hop)
	if err != nil {
		return malformed("hop", "%v", err)
	}
	return malformed("hop", "is %d octets, at least 16 required", len(hb))
}

// status reads a status payload.
func (d *decoder) status() (*Status, error) {
	blk := &struct {
		s    Status
		refs [1]ContextRef
		slab digestSlab
	}{}
	s := &blk.s
	d.sl = &blk.slab
	f, err := d.mapOf("the payload", statusShape, &s.Extra, func(i int, k string) (int, error) {
		var err error
		switch i {
		case sV, sType:
			err = d.header(i, k, "status")
		case sOffer:
			err = prefixMember(k, d.digest(&s.Offer))
		case sIss:
			s.Iss, err = d.text(k)
		case sAud:
			s.Aud, err = d.text(k)
		case sIat:
			s.Iat, err = d.time(k)
		case sState:
			var st string
			if st, err = d.text(k); err == nil {
				if s.State = State(st); !validState(s.State) {
					err = malformed("state", "%q is not a state", st)
				}
			}
		case sReason:
			var rs string
			rs, err = d.text(k)
			s.Reason = Reason(rs)
		case sDetail:
			if s.Detail, err = d.text(k); err == nil && len(s.Detail) > d.lim.MaxDetail {
				err = overBound("detail", "%d octets exceed the limit of %d", len(s.Detail), d.lim.MaxDetail)
			}
		case sRefs:
			s.Refs, err = d.refs(blk.refs[:])
		}
		return i, err
	})
	if err != nil {
		return nil, err
	}
	f.missing(statusShape, 1<<sV|1<<sType|1<<sOffer|1<<sIss|1<<sAud|1<<sIat|1<<sState)
	if f.fault != nil {
		return nil, f.fault
	}
	return s, nil
}

// decodeOfferPayload and decodeStatusPayload decode a payload: a syntax
// error comes first, after syntax; then the data model's first fault. With
// owned, the payload is a buffer nothing writes again, which the decoded
// texts may alias (see wire.Reader.ResetOwned). (Two functions, not one
// taking the reading method: a method value would move the decoder and
// its Reader to the heap.)
func decodeOfferPayload(payload []byte, enc Encoding, lim Limits, syntax string, owned bool) (*Offer, error) {
	d := decoder{lim: lim}
	d.reset(payload, enc, owned)
	o, fault := d.offer()
	if err := d.finish(syntax, fault); err != nil {
		return nil, err
	}
	return o, nil
}

func decodeStatusPayload(payload []byte, enc Encoding, lim Limits, syntax string, owned bool) (*Status, error) {
	d := decoder{lim: lim}
	d.reset(payload, enc, owned)
	s, fault := d.status()
	if err := d.finish(syntax, fault); err != nil {
		return nil, err
	}
	return s, nil
}

func (d *decoder) reset(payload []byte, enc Encoding, owned bool) {
	if owned {
		d.r.ResetOwned(payload, enc == CBOR)
	} else {
		d.r.Reset(payload, enc == CBOR, true)
	}
}

// finish reads the end of the input and returns the payload's error: a
// syntax error, else fault.
func (d *decoder) finish(syntax string, fault error) error {
	if d.r.End(); d.r.Err() != nil {
		return decodeError("", syntax, d.r.Err())
	}
	return fault
}

// DecodeOffer strictly decodes an offer payload (not a signed offer: see
// Receiver.Receive). Unknown members are kept in Extra.
func DecodeOffer(payload []byte, enc Encoding) (*Offer, error) {
	return decodeOfferPayload(payload, enc, defaultLimits, "", false)
}

// DecodeStatus strictly decodes a status payload.
func DecodeStatus(payload []byte, enc Encoding) (*Status, error) {
	return decodeStatusPayload(payload, enc, defaultLimits, "", false)
}
