package handoff

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// Version is the element version this package implements.
const Version = 1

// Digest algorithms. Only SHA-256 is implemented (draft "Data Model").
const AlgSHA256 = "sha-256"

// Digest names octets by hash. It is closed: exactly alg and val.
type Digest struct {
	Alg string
	Val []byte // the hash output, base64url on the wire
}

// DigestOf returns the SHA-256 Digest of b.
func DigestOf(b []byte) Digest {
	h := sha256.Sum256(b)
	return Digest{Alg: AlgSHA256, Val: h[:]}
}

// Equal reports whether two digests have the same alg and val.
func (d Digest) Equal(o Digest) bool { return d.Alg == o.Alg && bytes.Equal(d.Val, o.Val) }

// Matches reports whether d is the SHA-256 digest of b. A digest whose alg
// is not implemented never matches.
func (d Digest) Matches(b []byte) bool {
	if d.Alg != AlgSHA256 {
		return false
	}
	h := sha256.Sum256(b)
	return bytes.Equal(d.Val, h[:])
}

// String is the base64url val, for people.
func (d Digest) String() string { return b64.EncodeToString(d.Val) }

// Principal is the obo member: on whose behalf the root of the chain acted.
type Principal struct {
	Sub   string
	Iss   string // optional
	Extra map[string]any
}

// ContextRef names prior context by digest (draft "Context References").
type ContextRef struct {
	Kind  string
	Dig   Digest
	Loc   string // optional
	Proof any    // optional; nil when absent
	Extra map[string]any
}

// The reference kinds the draft defines; any other kind is an absolute URI.
const (
	KindDigest       = "digest"
	KindSaltedDigest = "salted-digest"
	KindSCITTReceipt = "scitt-receipt"
	KindLearnlogHead = "learnlog-head"
)

// Offer is the payload of a signed offer (draft "Data Model", Offer).
// Extra holds the members this version does not define; they are kept.
type Offer struct {
	Hop    string // base64url of at least 16 random octets
	Dialog string
	Task   string // optional
	Iss    string
	Aud    string
	Iat    int64
	Exp    int64
	Obo    *Principal
	Grant  *Digest
	Prev   *Digest
	Refs   []ContextRef
	Extra  map[string]any
}

// State is a hop state carried by a status.
type State string

// The states a status carries.
const (
	StateAccepted  State = "accepted"
	StateRejected  State = "rejected"
	StateCompleted State = "completed"
	StateFailed    State = "failed"
	StateCanceled  State = "canceled"
)

// Terminal reports whether a state ends the hop's lifecycle.
func (s State) Terminal() bool { return s != StateAccepted }

// Status is the payload of a signed status (draft "Data Model", Status).
type Status struct {
	Offer  Digest
	Iss    string
	Aud    string
	Iat    int64
	State  State
	Reason Reason // optional
	Detail string // optional; for people only, never parsed
	Refs   []ContextRef
	Extra  map[string]any
}

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

var b64 = base64.RawURLEncoding.Strict()

// decodeB64u decodes strict base64url: the B64u alphabet, no padding,
// canonical trailing bits, not empty.
func decodeB64u(s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("empty base64url")
	}
	// encoding/base64 skips CR and LF even in strict mode; B64u has neither.
	for i := 0; i < len(s); i++ {
		if !isB64uChar(s[i]) {
			return nil, fmt.Errorf("not strict base64url: character %q", s[i])
		}
	}
	b, err := b64.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not strict base64url without padding")
	}
	return b, nil
}

// ---- decoding: one definition over the value tree of internal/wire ----

type members map[string]any

func (m members) take(name string) (any, bool) {
	v, ok := m[name]
	if ok {
		delete(m, name)
	}
	return v, ok
}

func (m members) text(name string, required bool) (string, error) {
	v, ok := m.take(name)
	if !ok {
		if required {
			return "", malformed(name, "missing")
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", malformed(name, "is %s, want text", wire.TypeName(v))
	}
	return s, nil
}

func (m members) time(name string) (int64, error) {
	v, ok := m.take(name)
	if !ok {
		return 0, malformed(name, "missing")
	}
	u, ok := v.(uint64)
	if !ok {
		return 0, malformed(name, "is %s, want a non-negative integer", wire.TypeName(v))
	}
	if u > math.MaxInt64 {
		// A valid Time (uint), but beyond any clock: read as the largest
		// int64, so it is never fresh and never in the past.
		u = math.MaxInt64
	}
	return int64(u), nil
}

func (m members) header(typ string) error {
	v, ok := m.take("v")
	if !ok {
		return malformed("v", "missing")
	}
	if u, ok := v.(uint64); !ok || u != Version {
		return malformed("v", "must be the integer 1")
	}
	t, err := m.text("type", true)
	if err != nil {
		return err
	}
	if t != typ {
		return malformed("type", "is %q, want %q", t, typ)
	}
	return nil
}

func (m members) digest(name string) (*Digest, error) {
	v, ok := m.take(name)
	if !ok {
		return nil, nil
	}
	d, err := decodeDigest(v)
	if err != nil {
		return nil, prefixMember(name, err)
	}
	return &d, nil
}

func (m members) extra() map[string]any {
	if len(m) == 0 {
		return nil
	}
	return map[string]any(m)
}

func asMembers(v any, what string) (members, error) {
	m, ok := wire.Members(v)
	if !ok {
		return nil, malformed("", "%s is %s, want a map with text keys", what, wire.TypeName(v))
	}
	return members(m), nil
}

func decodeDigest(v any) (Digest, error) {
	m, err := asMembers(v, "Digest")
	if err != nil {
		return Digest{}, err
	}
	alg, err := m.text("alg", true)
	if err != nil {
		return Digest{}, err
	}
	val, err := m.text("val", true)
	if err != nil {
		return Digest{}, err
	}
	for k := range m {
		return Digest{}, malformed(k, "not allowed: Digest is closed")
	}
	b, err := decodeB64u(val)
	if err != nil {
		return Digest{}, malformed("val", "%v", err)
	}
	if alg == AlgSHA256 && len(b) != sha256.Size {
		return Digest{}, malformed("val", "is %d octets, sha-256 is 32", len(b))
	}
	return Digest{Alg: alg, Val: b}, nil
}

func decodePrincipal(v any) (*Principal, error) {
	m, err := asMembers(v, "Principal")
	if err != nil {
		return nil, err
	}
	p := &Principal{}
	if p.Sub, err = m.text("sub", true); err != nil {
		return nil, err
	}
	if p.Iss, err = m.text("iss", false); err != nil {
		return nil, err
	}
	p.Extra = m.extra()
	return p, nil
}

func isB64uChar(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// IsAbsoluteURI reports whether s is an RFC 3986 absolute-URI (a scheme,
// no fragment), as a ContextRef kind that the draft does not list must be:
// scheme ":" then only unreserved characters, sub-delims, ":", "@", "/",
// "?" and well-formed percent-encodings. IP-literal hosts ("[...]") are
// not accepted in a kind name.
func IsAbsoluteURI(s string) bool {
	i := 0
	for ; i < len(s) && s[i] != ':'; i++ {
		c := s[i]
		alpha := 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
		if i == 0 && !alpha || !alpha && !('0' <= c && c <= '9' || c == '+' || c == '.' || c == '-') {
			return false
		}
	}
	if i == 0 || i == len(s) {
		return false
	}
	for i++; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:@/?", c) >= 0:
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			i += 2
		default:
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func knownKind(k string) bool {
	switch k {
	case KindDigest, KindSaltedDigest, KindSCITTReceipt, KindLearnlogHead:
		return true
	}
	return false
}

func (m members) refs(lim Limits) ([]ContextRef, error) {
	v, ok := m.take("refs")
	if !ok {
		return nil, nil
	}
	a, ok := v.([]any)
	if !ok {
		return nil, malformed("refs", "is %s, want an array", wire.TypeName(v))
	}
	if len(a) == 0 {
		return nil, malformed("refs", "empty array")
	}
	if len(a) > lim.MaxRefs {
		return nil, overBound("refs", "%d refs exceed the limit of %d", len(a), lim.MaxRefs)
	}
	out := make([]ContextRef, len(a))
	for i, x := range a {
		r, err := decodeRef(x)
		if err != nil {
			return nil, prefixMember(fmt.Sprintf("refs[%d]", i), err)
		}
		out[i] = r
	}
	return out, nil
}

func decodeRef(v any) (ContextRef, error) {
	var r ContextRef
	m, err := asMembers(v, "ContextRef")
	if err != nil {
		return r, err
	}
	if r.Kind, err = m.text("kind", true); err != nil {
		return r, err
	}
	if !knownKind(r.Kind) && !IsAbsoluteURI(r.Kind) {
		return r, malformed("kind", "%q is neither a listed kind nor an absolute URI", r.Kind)
	}
	dv, ok := m.take("dig")
	if !ok {
		return r, malformed("dig", "missing")
	}
	if r.Dig, err = decodeDigest(dv); err != nil {
		return r, prefixMember("dig", err)
	}
	if r.Loc, err = m.text("loc", false); err != nil {
		return r, err
	}
	r.Proof, _ = m.take("proof")
	r.Extra = m.extra()
	return r, nil
}

func decodeOffer(v any, lim Limits) (*Offer, error) {
	m, err := asMembers(v, "the payload")
	if err != nil {
		return nil, err
	}
	if err := m.header("offer"); err != nil {
		return nil, err
	}
	o := &Offer{}
	if o.Hop, err = m.text("hop", true); err != nil {
		return nil, err
	}
	if hb, err := decodeB64u(o.Hop); err != nil {
		return nil, malformed("hop", "%v", err)
	} else if len(hb) < 16 {
		return nil, malformed("hop", "is %d octets, at least 16 required", len(hb))
	}
	if o.Dialog, err = m.text("dialog", true); err != nil {
		return nil, err
	}
	if o.Task, err = m.text("task", false); err != nil {
		return nil, err
	}
	if o.Iss, err = m.text("iss", true); err != nil {
		return nil, err
	}
	if o.Aud, err = m.text("aud", true); err != nil {
		return nil, err
	}
	if o.Iat, err = m.time("iat"); err != nil {
		return nil, err
	}
	if o.Exp, err = m.time("exp"); err != nil {
		return nil, err
	}
	if pv, ok := m.take("obo"); ok {
		if o.Obo, err = decodePrincipal(pv); err != nil {
			return nil, prefixMember("obo", err)
		}
	}
	if o.Grant, err = m.digest("grant"); err != nil {
		return nil, err
	}
	if o.Prev, err = m.digest("prev"); err != nil {
		return nil, err
	}
	if o.Refs, err = m.refs(lim); err != nil {
		return nil, err
	}
	o.Extra = m.extra()
	return o, nil
}

func validState(s State) bool {
	switch s {
	case StateAccepted, StateRejected, StateCompleted, StateFailed, StateCanceled:
		return true
	}
	return false
}

func decodeStatus(v any, lim Limits) (*Status, error) {
	m, err := asMembers(v, "the payload")
	if err != nil {
		return nil, err
	}
	if err := m.header("status"); err != nil {
		return nil, err
	}
	s := &Status{}
	ov, ok := m.take("offer")
	if !ok {
		return nil, malformed("offer", "missing")
	}
	if s.Offer, err = decodeDigest(ov); err != nil {
		return nil, prefixMember("offer", err)
	}
	if s.Iss, err = m.text("iss", true); err != nil {
		return nil, err
	}
	if s.Aud, err = m.text("aud", true); err != nil {
		return nil, err
	}
	if s.Iat, err = m.time("iat"); err != nil {
		return nil, err
	}
	st, err := m.text("state", true)
	if err != nil {
		return nil, err
	}
	if s.State = State(st); !validState(s.State) {
		return nil, malformed("state", "%q is not a state", st)
	}
	r, err := m.text("reason", false)
	if err != nil {
		return nil, err
	}
	s.Reason = Reason(r)
	if s.Detail, err = m.text("detail", false); err != nil {
		return nil, err
	}
	if len(s.Detail) > lim.MaxDetail {
		return nil, overBound("detail", "%d octets exceed the limit of %d", len(s.Detail), lim.MaxDetail)
	}
	if s.Refs, err = m.refs(lim); err != nil {
		return nil, err
	}
	s.Extra = m.extra()
	return s, nil
}

// ---- decoding, fast: the same definition over a pull reader ----
//
// readOffer and readStatus decode a payload straight from the encoded
// octets with a wire.Reader, JSON or CBOR alike: no value tree for the
// members the data model defines (unknown members are still read whole,
// into the tree values the generic path gives them). They accept exactly
// what decodeOffer and decodeStatus over the tree accept, with the same
// result (FuzzDecodeFastMatchesTree checks both encodings), and decline
// everything else without saying why: the generic path then decodes again,
// decides, and names the first fault in the data model's order, whatever
// the order of the members on the wire. A rejected payload is thus decoded
// twice, within the same bounds.

// decodeOfferPayload decodes an offer payload, fast when it can. A
// payload that is not well-formed is malformed, its error after syntax.
// With owned, the payload is a buffer nothing writes again, which the
// decoded texts may alias (see wire.Reader.ResetOwned).
func decodeOfferPayload(payload []byte, enc Encoding, lim Limits, syntax string, owned bool) (*Offer, error) {
	var r wire.Reader
	if owned {
		r.ResetOwned(payload, enc == CBOR)
	} else {
		r.Reset(payload, enc == CBOR, true)
	}
	if o := readOffer(&r, lim); o != nil {
		return o, nil
	}
	v, err := decodeTree(payload, enc)
	if err != nil {
		return nil, decodeError("", syntax, err)
	}
	return decodeOffer(v, lim)
}

// decodeStatusPayload decodes a status payload, fast when it can.
func decodeStatusPayload(payload []byte, enc Encoding, lim Limits, syntax string, owned bool) (*Status, error) {
	var r wire.Reader
	if owned {
		r.ResetOwned(payload, enc == CBOR)
	} else {
		r.Reset(payload, enc == CBOR, true)
	}
	if s := readStatus(&r, lim); s != nil {
		return s, nil
	}
	v, err := decodeTree(payload, enc)
	if err != nil {
		return nil, decodeError("", syntax, err)
	}
	return decodeStatus(v, lim)
}

// digestSlab holds the vals of sha-256 digests, so that an offer's digests
// share the allocation of the offer.
type digestSlab struct {
	buf [3 * sha256.Size]byte
	n   int
}

// b64uDecode decodes strict base64url as decodeB64u does, into the slab
// when it fits. It reports false where decodeB64u fails.
func (sl *digestSlab) b64uDecode(s []byte) ([]byte, bool) {
	if len(s) == 0 {
		return nil, false
	}
	for _, c := range s {
		if !isB64uChar(c) {
			return nil, false
		}
	}
	n := b64.DecodedLen(len(s))
	var dst []byte
	if sl != nil && n <= len(sl.buf)-sl.n {
		dst = sl.buf[sl.n : sl.n+n : sl.n+n]
	} else {
		dst = make([]byte, n)
	}
	m, err := b64.Decode(dst, s)
	if err != nil {
		return nil, false
	}
	if sl != nil && n <= len(sl.buf)-sl.n {
		sl.n += n
	}
	return dst[:m:m], true
}

// hopOK reports whether hop is strict base64url of at least 16 octets.
func hopOK(hop string) bool {
	if hop == "" {
		return false
	}
	for i := 0; i < len(hop); i++ {
		if !isB64uChar(hop[i]) {
			return false
		}
	}
	var buf [48]byte
	if b64.DecodedLen(len(hop)) > len(buf) {
		b, err := b64.DecodeString(hop)
		return err == nil && len(b) >= 16
	}
	n, err := b64.Decode(buf[:], []byte(hop))
	return err == nil && n >= 16
}

// readDigest reads a Digest: exactly alg and val.
func readDigest(r *wire.Reader, d *Digest, sl *digestSlab) {
	r.Map()
	var alg, val bool
	var raw []byte
	for {
		k, ok := r.Key()
		if !ok {
			break
		}
		switch {
		case k == "alg" && !alg:
			alg, d.Alg = true, r.Text()
		case k == "val" && !val:
			val, raw = true, r.TextBytes()
			if !r.Failed() {
				v, ok := sl.b64uDecode(raw)
				if !ok {
					r.Fail()
				}
				d.Val = v
			}
		default: // closed, or a duplicate
			r.Fail()
		}
	}
	if !alg || !val || d.Alg == AlgSHA256 && len(d.Val) != sha256.Size {
		r.Fail()
	}
}

// extraMember reads an unknown member into *extra.
func extraMember(r *wire.Reader, extra *map[string]any, k string) {
	if *extra == nil {
		*extra = map[string]any{}
	} else if _, dup := (*extra)[k]; dup {
		r.Fail()
		return
	}
	(*extra)[k] = r.Any()
}

// readPrincipal reads the obo member.
func readPrincipal(r *wire.Reader, p *Principal) {
	r.Map()
	var sub, iss bool
	for {
		k, ok := r.Key()
		if !ok {
			break
		}
		switch {
		case k == "sub" && !sub:
			sub, p.Sub = true, r.Text()
		case k == "iss" && !iss:
			iss, p.Iss = true, r.Text()
		case k == "sub" || k == "iss":
			r.Fail()
		default:
			extraMember(r, &p.Extra, k)
		}
	}
	if !sub {
		r.Fail()
	}
}

// readRefs reads the refs member: a non-empty array within lim.MaxRefs,
// in buf while it fits.
func readRefs(r *wire.Reader, lim Limits, sl *digestSlab, buf []ContextRef) []ContextRef {
	out := buf[:0]
	r.Array()
	for r.More() {
		if len(out) == lim.MaxRefs {
			r.Fail()
			break
		}
		out = append(out, ContextRef{})
		ref := &out[len(out)-1]
		r.Map()
		var kind, dig, loc, proof bool
		for {
			k, ok := r.Key()
			if !ok {
				break
			}
			switch {
			case k == "kind" && !kind:
				kind, ref.Kind = true, r.Text()
			case k == "dig" && !dig:
				dig = true
				readDigest(r, &ref.Dig, sl)
			case k == "loc" && !loc:
				loc, ref.Loc = true, r.Text()
			case k == "proof" && !proof:
				proof, ref.Proof = true, r.Any()
			case k == "kind" || k == "dig" || k == "loc" || k == "proof":
				r.Fail()
			default:
				extraMember(r, &ref.Extra, k)
			}
		}
		if !kind || !dig || !knownKind(ref.Kind) && !IsAbsoluteURI(ref.Kind) {
			r.Fail()
		}
	}
	if len(out) == 0 {
		r.Fail()
	}
	return out
}

// The members every payload has.
const (
	mV = 1 << iota
	mType
	mIss
	mAud
	mIat
	mRefs
	mHop
	mDialog
	mTask
	mExp
	mObo
	mGrant
	mPrev
	mOffer
	mState
	mReason
	mDetail
)

// readCommon reads a member both payloads define (v, type, iss, aud, iat,
// refs) and reports whether k is one. A duplicate fails.
func readCommon(r *wire.Reader, k, typ string, seen *uint32, iss, aud *string, iat *int64, refs *[]ContextRef, lim Limits, sl *digestSlab, buf []ContextRef) bool {
	var bit uint32
	switch k {
	case "v":
		bit = mV
		if r.Uint() != Version {
			r.Fail()
		}
	case "type":
		bit = mType
		if r.Text() != typ {
			r.Fail()
		}
	case "iss":
		bit = mIss
		*iss = r.Text()
	case "aud":
		bit = mAud
		*aud = r.Text()
	case "iat":
		bit = mIat
		*iat = readTime(r)
	case "refs":
		bit = mRefs
		*refs = readRefs(r, lim, sl, buf)
	default:
		return false
	}
	if *seen&bit != 0 {
		r.Fail()
	}
	*seen |= bit
	return true
}

// readTime reads a Time as members.time does.
func readTime(r *wire.Reader) int64 {
	u := r.Uint()
	if u > math.MaxInt64 {
		u = math.MaxInt64
	}
	return int64(u)
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

// readOffer decodes an offer payload; nil when it declines.
func readOffer(r *wire.Reader, lim Limits) *Offer {
	blk := &offerBlock{}
	o, sl := &blk.o, &blk.slab
	var seen uint32
	r.Map()
	for {
		k, ok := r.Key()
		if !ok {
			break
		}
		if readCommon(r, k, "offer", &seen, &o.Iss, &o.Aud, &o.Iat, &o.Refs, lim, sl, blk.refs[:]) {
			continue
		}
		var bit uint32
		switch k {
		case "hop":
			bit = mHop
			o.Hop = r.Text()
		case "dialog":
			bit = mDialog
			o.Dialog = r.Text()
		case "task":
			bit = mTask
			o.Task = r.Text()
		case "exp":
			bit = mExp
			o.Exp = readTime(r)
		case "obo":
			bit = mObo
			o.Obo = &blk.obo
			readPrincipal(r, o.Obo)
		case "grant":
			bit = mGrant
			o.Grant = &blk.grant
			readDigest(r, o.Grant, sl)
		case "prev":
			bit = mPrev
			o.Prev = &blk.prev
			readDigest(r, o.Prev, sl)
		default:
			extraMember(r, &o.Extra, k)
			continue
		}
		if seen&bit != 0 {
			r.Fail()
		}
		seen |= bit
	}
	const required = mV | mType | mHop | mDialog | mIss | mAud | mIat | mExp
	if !r.End() || seen&required != required || !hopOK(o.Hop) {
		return nil
	}
	return o
}

// readStatus decodes a status payload; nil when it declines.
func readStatus(r *wire.Reader, lim Limits) *Status {
	blk := &struct {
		s    Status
		refs [1]ContextRef
		slab digestSlab
	}{}
	s, sl := &blk.s, &blk.slab
	var seen uint32
	r.Map()
	for {
		k, ok := r.Key()
		if !ok {
			break
		}
		if readCommon(r, k, "status", &seen, &s.Iss, &s.Aud, &s.Iat, &s.Refs, lim, sl, blk.refs[:]) {
			continue
		}
		var bit uint32
		switch k {
		case "offer":
			bit = mOffer
			readDigest(r, &s.Offer, sl)
		case "state":
			bit = mState
			s.State = State(r.Text())
		case "reason":
			bit = mReason
			s.Reason = Reason(r.Text())
		case "detail":
			bit = mDetail
			s.Detail = r.Text()
		default:
			extraMember(r, &s.Extra, k)
			continue
		}
		if seen&bit != 0 {
			r.Fail()
		}
		seen |= bit
	}
	const required = mV | mType | mOffer | mIss | mAud | mIat | mState
	if !r.End() || seen&required != required || !validState(s.State) || len(s.Detail) > lim.MaxDetail {
		return nil
	}
	return s
}

// ---- encoding: the same definition, to an ordered tree ----

func (d Digest) tree() *wire.Map {
	return &wire.Map{Keys: []string{"alg", "val"}, Vals: []any{d.Alg, b64.EncodeToString(d.Val)}}
}

func addExtra(m *wire.Map, extra map[string]any) error {
	if len(extra) == 0 {
		return nil
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		for _, known := range m.Keys {
			if k == known {
				return fmt.Errorf("extra member %q is a defined member", k)
			}
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		m.Add(k, extra[k])
	}
	return nil
}

func refsTree(refs []ContextRef) ([]any, error) {
	out := make([]any, len(refs))
	for i, r := range refs {
		m := &wire.Map{}
		m.Add("kind", r.Kind)
		m.Add("dig", r.Dig.tree())
		if r.Loc != "" {
			m.Add("loc", r.Loc)
		}
		if r.Proof != nil {
			m.Add("proof", r.Proof)
		}
		if err := addExtra(m, r.Extra); err != nil {
			return nil, fmt.Errorf("refs[%d]: %w", i, err)
		}
		out[i] = m
	}
	return out, nil
}

func (o *Offer) tree() (*wire.Map, error) {
	m := &wire.Map{}
	m.Add("v", uint64(Version))
	m.Add("type", "offer")
	m.Add("hop", o.Hop)
	m.Add("dialog", o.Dialog)
	if o.Task != "" {
		m.Add("task", o.Task)
	}
	m.Add("iss", o.Iss)
	m.Add("aud", o.Aud)
	m.Add("iat", uint64(o.Iat))
	m.Add("exp", uint64(o.Exp))
	if o.Obo != nil {
		p := &wire.Map{}
		p.Add("sub", o.Obo.Sub)
		if o.Obo.Iss != "" {
			p.Add("iss", o.Obo.Iss)
		}
		if err := addExtra(p, o.Obo.Extra); err != nil {
			return nil, fmt.Errorf("obo: %w", err)
		}
		m.Add("obo", p)
	}
	if o.Grant != nil {
		m.Add("grant", o.Grant.tree())
	}
	if o.Prev != nil {
		m.Add("prev", o.Prev.tree())
	}
	if len(o.Refs) > 0 {
		r, err := refsTree(o.Refs)
		if err != nil {
			return nil, err
		}
		m.Add("refs", r)
	}
	return m, addExtra(m, o.Extra)
}

func (s *Status) tree() (*wire.Map, error) {
	m := &wire.Map{}
	m.Add("v", uint64(Version))
	m.Add("type", "status")
	m.Add("offer", s.Offer.tree())
	m.Add("iss", s.Iss)
	m.Add("aud", s.Aud)
	m.Add("iat", uint64(s.Iat))
	m.Add("state", string(s.State))
	if s.Reason != "" {
		m.Add("reason", string(s.Reason))
	}
	if s.Detail != "" {
		m.Add("detail", s.Detail)
	}
	if len(s.Refs) > 0 {
		r, err := refsTree(s.Refs)
		if err != nil {
			return nil, err
		}
		m.Add("refs", r)
	}
	return m, addExtra(m, s.Extra)
}

// Encoding names a wire encoding of payloads and Handoffs.
type Encoding int

// The two encodings. A JWS carries a JSON payload; a COSE_Sign1 a CBOR one.
const (
	JSON Encoding = iota
	CBOR
)

func (e Encoding) String() string {
	if e == CBOR {
		return "CBOR"
	}
	return "JSON"
}

func encodeTree(t *wire.Map, enc Encoding) ([]byte, error) {
	if enc == CBOR {
		return wire.EncodeCBOR(t)
	}
	return wire.EncodeJSON(t)
}

// decodeError is the error of an input the tree decoder refused, after
// prefix: malformed (D3), or, for nesting deeper than MaxNesting, an
// exceeded bound (policy, SPEC.md section 4 Bounds).
func decodeError(member, prefix string, err error) error {
	if errors.Is(err, wire.ErrNesting) {
		return overBound(member, "%s%v", prefix, err)
	}
	return malformed(member, "%s%v", prefix, err)
}

// MaxNesting is the deepest nesting of arrays and maps (and CBOR tags)
// that a payload or a Handoff may have, unknown members included: the
// data model needs five levels (a payload, refs, a ref, a learnlog-head
// proof, its head), and the rest is room for unknown members. Deeper
// input is refused as an exceeded bound ("policy") before any key is
// looked up (issue 13; docs/decisions.md 49).
const MaxNesting = wire.MaxDepth

func decodeTree(b []byte, enc Encoding) (any, error) {
	if enc == CBOR {
		return wire.DecodeCBOR(b)
	}
	return wire.DecodeJSON(b)
}

// Encode writes the offer payload in the given encoding. It checks the
// values the data model constrains, so that what it writes decodes again.
func (o *Offer) Encode(enc Encoding) ([]byte, error) {
	switch err := o.check(); err {
	case nil:
		return o.write(enc)
	case errCheckByDecoding:
	default:
		return nil, fmt.Errorf("handoff: offer does not fit the data model: %w", err)
	}
	// Unknown members: through the tree, then decoded again.
	t, err := o.tree()
	if err != nil {
		return nil, err
	}
	b, err := encodeTree(t, enc)
	if err != nil {
		return nil, err
	}
	if _, err := DecodeOffer(b, enc); err != nil {
		return nil, fmt.Errorf("handoff: offer does not fit the data model: %w", err)
	}
	return b, nil
}

// Encode writes the status payload in the given encoding.
func (s *Status) Encode(enc Encoding) ([]byte, error) {
	switch err := s.check(); err {
	case nil:
		return s.write(enc)
	case errCheckByDecoding:
	default:
		return nil, fmt.Errorf("handoff: status does not fit the data model: %w", err)
	}
	// Unknown members: through the tree, then decoded again.
	t, err := s.tree()
	if err != nil {
		return nil, err
	}
	b, err := encodeTree(t, enc)
	if err != nil {
		return nil, err
	}
	if _, err := DecodeStatus(b, enc); err != nil {
		return nil, fmt.Errorf("handoff: status does not fit the data model: %w", err)
	}
	return b, nil
}

// write is tree then encodeTree for a payload without unknown members,
// straight to the octets (octet for octet the same: the tests compare).
func (o *Offer) write(enc Encoding) ([]byte, error) {
	w := wire.NewWriter(make([]byte, 0, 512), enc == CBOR)
	n := 8
	for _, present := range [...]bool{o.Task != "", o.Obo != nil, o.Grant != nil, o.Prev != nil, len(o.Refs) > 0} {
		if present {
			n++
		}
	}
	w.Map(n)
	w.Key("v")
	w.Uint(Version)
	w.Key("type")
	w.Text("offer")
	w.Key("hop")
	w.Text(o.Hop)
	w.Key("dialog")
	w.Text(o.Dialog)
	if o.Task != "" {
		w.Key("task")
		w.Text(o.Task)
	}
	w.Key("iss")
	w.Text(o.Iss)
	w.Key("aud")
	w.Text(o.Aud)
	w.Key("iat")
	w.Uint(uint64(o.Iat))
	w.Key("exp")
	w.Uint(uint64(o.Exp))
	if o.Obo != nil {
		w.Key("obo")
		if o.Obo.Iss != "" {
			w.Map(2)
		} else {
			w.Map(1)
		}
		w.Key("sub")
		w.Text(o.Obo.Sub)
		if o.Obo.Iss != "" {
			w.Key("iss")
			w.Text(o.Obo.Iss)
		}
		w.End()
	}
	if o.Grant != nil {
		w.Key("grant")
		writeDigest(w, o.Grant)
	}
	if o.Prev != nil {
		w.Key("prev")
		writeDigest(w, o.Prev)
	}
	writeRefs(w, o.Refs)
	w.End()
	return w.Bytes()
}

func (s *Status) write(enc Encoding) ([]byte, error) {
	w := wire.NewWriter(make([]byte, 0, 256), enc == CBOR)
	n := 7
	for _, present := range [...]bool{s.Reason != "", s.Detail != "", len(s.Refs) > 0} {
		if present {
			n++
		}
	}
	w.Map(n)
	w.Key("v")
	w.Uint(Version)
	w.Key("type")
	w.Text("status")
	w.Key("offer")
	writeDigest(w, &s.Offer)
	w.Key("iss")
	w.Text(s.Iss)
	w.Key("aud")
	w.Text(s.Aud)
	w.Key("iat")
	w.Uint(uint64(s.Iat))
	w.Key("state")
	w.Text(string(s.State))
	if s.Reason != "" {
		w.Key("reason")
		w.Text(string(s.Reason))
	}
	if s.Detail != "" {
		w.Key("detail")
		w.Text(s.Detail)
	}
	writeRefs(w, s.Refs)
	w.End()
	return w.Bytes()
}

func writeDigest(w *wire.Writer, d *Digest) {
	w.Map(2)
	w.Key("alg")
	w.Text(d.Alg)
	w.Key("val")
	w.TextBase64URL(d.Val)
	w.End()
}

// writeRefs writes the refs member, if there are refs (none with a proof
// or unknown members: check sends those through the tree).
func writeRefs(w *wire.Writer, refs []ContextRef) {
	if len(refs) == 0 {
		return
	}
	w.Key("refs")
	w.Array(len(refs))
	for i := range refs {
		r := &refs[i]
		if r.Loc != "" {
			w.Map(3)
		} else {
			w.Map(2)
		}
		w.Key("kind")
		w.Text(r.Kind)
		w.Key("dig")
		writeDigest(w, &r.Dig)
		if r.Loc != "" {
			w.Key("loc")
			w.Text(r.Loc)
		}
		w.End()
	}
	w.End()
}

// ---- the rules decoding enforces, checked on the fields ----
//
// check reports, without encoding and decoding again, whether the payload
// Encode writes for the offer decodes: the rules of decodeOffer applied to
// the fields as tree writes them (an optional text that is empty is not
// written). Unknown members (Extra, and a ref's proof) are arbitrary
// values whose encoding may break the data model in many ways (a key that
// names an absent defined member, invalid UTF-8 inside, nesting), so when
// there are any, check returns errCheckByDecoding and Encode decodes what
// it wrote instead. TestEncodeCheckMatchesDecoding and
// FuzzEncodeCheckMatchesDecoding hold the two to the same decisions.

var errCheckByDecoding = errors.New("check by decoding")

func checkText(member, s string) error {
	if !utf8.ValidString(s) {
		return malformed(member, "is not valid UTF-8")
	}
	return nil
}

func checkDigest(member string, d *Digest) error {
	if err := checkText(member+".alg", d.Alg); err != nil {
		return err
	}
	if len(d.Val) == 0 {
		return malformed(member+".val", "empty base64url")
	}
	if d.Alg == AlgSHA256 && len(d.Val) != sha256.Size {
		return malformed(member+".val", "is %d octets, sha-256 is 32", len(d.Val))
	}
	return nil
}

func checkRefs(refs []ContextRef) error {
	if len(refs) > defaultLimits.MaxRefs {
		return overBound("refs", "%d refs exceed the limit of %d", len(refs), defaultLimits.MaxRefs)
	}
	for i := range refs {
		r := &refs[i]
		if len(r.Extra) > 0 || r.Proof != nil {
			return errCheckByDecoding
		}
		m := fmt.Sprintf("refs[%d]", i)
		if !knownKind(r.Kind) && !IsAbsoluteURI(r.Kind) {
			return malformed(m+".kind", "%q is neither a listed kind nor an absolute URI", r.Kind)
		}
		if err := checkDigest(m+".dig", &r.Dig); err != nil {
			return err
		}
		if err := checkText(m+".loc", r.Loc); err != nil {
			return err
		}
	}
	return nil
}

func (o *Offer) check() error {
	if len(o.Extra) > 0 || o.Obo != nil && len(o.Obo.Extra) > 0 {
		return errCheckByDecoding
	}
	if !hopOK(o.Hop) {
		if _, err := decodeB64u(o.Hop); err != nil {
			return malformed("hop", "%v", err)
		}
		return malformed("hop", "is fewer than 16 octets")
	}
	for _, t := range [...]struct{ m, s string }{{"dialog", o.Dialog}, {"task", o.Task}, {"iss", o.Iss}, {"aud", o.Aud}} {
		if err := checkText(t.m, t.s); err != nil {
			return err
		}
	}
	if o.Obo != nil {
		if err := checkText("obo.sub", o.Obo.Sub); err != nil {
			return err
		}
		if err := checkText("obo.iss", o.Obo.Iss); err != nil {
			return err
		}
	}
	if o.Grant != nil {
		if err := checkDigest("grant", o.Grant); err != nil {
			return err
		}
	}
	if o.Prev != nil {
		if err := checkDigest("prev", o.Prev); err != nil {
			return err
		}
	}
	return checkRefs(o.Refs)
}

func (s *Status) check() error {
	if len(s.Extra) > 0 {
		return errCheckByDecoding
	}
	if err := checkDigest("offer", &s.Offer); err != nil {
		return err
	}
	for _, t := range [...]struct{ m, s string }{{"iss", s.Iss}, {"aud", s.Aud}, {"reason", string(s.Reason)}, {"detail", s.Detail}} {
		if err := checkText(t.m, t.s); err != nil {
			return err
		}
	}
	if !validState(s.State) {
		return malformed("state", "%q is not a state", s.State)
	}
	if len(s.Detail) > defaultLimits.MaxDetail {
		return overBound("detail", "%d octets exceed the limit of %d", len(s.Detail), defaultLimits.MaxDetail)
	}
	return checkRefs(s.Refs)
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
