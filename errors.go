package handoff

import (
	"errors"
	"fmt"
	"strings"
)

// Reason is a status reason code (draft "Data Model", Status). The listed
// values are the draft's; other text is permitted but should be avoided.
type Reason string

// The draft's reason codes.
const (
	ReasonBadSignature    Reason = "bad-signature"
	ReasonUntrustedKey    Reason = "untrusted-key"
	ReasonWrongAudience   Reason = "wrong-audience"
	ReasonStale           Reason = "stale"
	ReasonReplay          Reason = "replay"
	ReasonEquivocation    Reason = "equivocation"
	ReasonBrokenChain     Reason = "broken-chain"
	ReasonCycle           Reason = "cycle"
	ReasonTooDeep         Reason = "too-deep"
	ReasonUnverifiableRef Reason = "unverifiable-ref"
	ReasonRefMismatch     Reason = "ref-mismatch"
	ReasonPolicy          Reason = "policy"
)

// One sentinel per reason: a *CheckError matches the sentinel of its Reason
// with errors.Is.
var (
	ErrBadSignature    = errors.New(string(ReasonBadSignature))
	ErrUntrustedKey    = errors.New(string(ReasonUntrustedKey))
	ErrWrongAudience   = errors.New(string(ReasonWrongAudience))
	ErrStale           = errors.New(string(ReasonStale))
	ErrReplay          = errors.New(string(ReasonReplay))
	ErrEquivocation    = errors.New(string(ReasonEquivocation))
	ErrBrokenChain     = errors.New(string(ReasonBrokenChain))
	ErrCycle           = errors.New(string(ReasonCycle))
	ErrTooDeep         = errors.New(string(ReasonTooDeep))
	ErrUnverifiableRef = errors.New(string(ReasonUnverifiableRef))
	ErrRefMismatch     = errors.New(string(ReasonRefMismatch))
	ErrPolicy          = errors.New(string(ReasonPolicy))
)

var sentinels = map[Reason]error{
	ReasonBadSignature:    ErrBadSignature,
	ReasonUntrustedKey:    ErrUntrustedKey,
	ReasonWrongAudience:   ErrWrongAudience,
	ReasonStale:           ErrStale,
	ReasonReplay:          ErrReplay,
	ReasonEquivocation:    ErrEquivocation,
	ReasonBrokenChain:     ErrBrokenChain,
	ReasonCycle:           ErrCycle,
	ReasonTooDeep:         ErrTooDeep,
	ReasonUnverifiableRef: ErrUnverifiableRef,
	ReasonRefMismatch:     ErrRefMismatch,
	ReasonPolicy:          ErrPolicy,
}

// Sentinel returns the sentinel error of a listed reason, or nil.
func (r Reason) Sentinel() error { return sentinels[r] }

// OfferIndex is CheckError.Index when the fault is in the offer itself
// rather than in an element of its chain.
const OfferIndex = -1

// CheckError reports the first failed check of an offer or status: which
// reason, at which step of the draft's "Receiving an Offer", for which hop,
// at which element (OfferIndex or a chain index) and member.
type CheckError struct {
	Reason Reason
	Step   int    // 1-7 for "Receiving an Offer"; 0 for status checks
	Hop    string // the offer's hop, when it could be read
	Index  int    // OfferIndex, or the index in the chain (oldest first)
	Member string // the payload or Handoff member at fault, if any
	Err    error  // the cause
}

func (e *CheckError) Error() string {
	var b strings.Builder
	b.WriteString(string(e.Reason))
	if e.Step > 0 {
		fmt.Fprintf(&b, " (step %d)", e.Step)
	}
	if e.Hop != "" {
		fmt.Fprintf(&b, ": hop %s", e.Hop)
	}
	if e.Index >= 0 {
		fmt.Fprintf(&b, ": chain[%d]", e.Index)
	}
	if e.Member != "" {
		fmt.Fprintf(&b, ": member %q", e.Member)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap lets errors.Is match both the reason's sentinel and the cause.
func (e *CheckError) Unwrap() []error {
	errs := make([]error, 0, 2)
	if s := e.Reason.Sentinel(); s != nil {
		errs = append(errs, s)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// memberError is a data-model violation at one member (D3). Decoding
// returns it; the checks turn it into a CheckError naming the member.
type memberError struct {
	member string
	reason Reason // ReasonBadSignature for a malformed element, ReasonPolicy for an exceeded bound
	err    error
}

func (e *memberError) Error() string {
	if e.member == "" {
		return e.err.Error()
	}
	return fmt.Sprintf("member %q: %v", e.member, e.err)
}

func (e *memberError) Unwrap() error { return e.err }

func malformed(member, format string, args ...any) error {
	return &memberError{member: member, reason: ReasonBadSignature, err: fmt.Errorf(format, args...)}
}

func overBound(member, format string, args ...any) error {
	return &memberError{member: member, reason: ReasonPolicy, err: fmt.Errorf(format, args...)}
}

// prefixMember puts a parent member's name before a nested member error
// (nil stays nil).
func prefixMember(parent string, err error) error {
	if err == nil {
		return nil
	}
	var me *memberError
	if errors.As(err, &me) {
		m := parent
		if me.member != "" {
			m = parent + "." + me.member
		}
		return &memberError{member: m, reason: me.reason, err: me.err}
	}
	return malformed(parent, "%v", err)
}
