package handoff

import "strings"

// Version is the element version this package implements.
const Version = 1

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
func validState(s State) bool {
	switch s {
	case StateAccepted, StateRejected, StateCompleted, StateFailed, StateCanceled:
		return true
	}
	return false
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
