package refs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/quantumlearningmachines/handoff"
)

// Why a reference could not be verified. Each is wrapped in a *RefError
// that names the reference's index; the fetch safeguards each have their
// own sentinel, so a refusal says which safeguard refused.
var (
	// ErrNoOctets: the host supplied no octets for the reference, and
	// none were fetched (no loc, or fetching was not attempted).
	ErrNoOctets = errors.New("no octets supplied for the reference")
	// ErrNoSalt: a "salted-digest" reference without its salt.
	ErrNoSalt = errors.New("no salt supplied for the salted-digest reference")
	// ErrSaltSize: a salt that is not SaltSize (32) octets.
	ErrSaltSize = errors.New("salt is not 32 octets")
	// ErrSaltForDigest: a salt supplied for a reference of kind "digest",
	// which has none; the host's material does not fit the reference.
	ErrSaltForDigest = errors.New("a salt was supplied for a reference of kind digest")
	// ErrUnsupportedAlg: a Digest alg this implementation lacks (only
	// sha-256); the draft makes such a reference unverifiable.
	ErrUnsupportedAlg = errors.New("digest alg not implemented")
	// ErrUnsupportedKind: a kind this package does not check.
	ErrUnsupportedKind = errors.New("reference kind not supported")
	// ErrNoTrust: the kind needs trusted keys and the policy has none.
	ErrNoTrust = errors.New("no trust configuration for this kind")

	// Fetch safeguards (FetchPolicy).
	ErrUntrustedSender  = errors.New("fetch safeguard: sender not on the trusted-fetch list")
	ErrSchemeNotAllowed = errors.New("fetch safeguard: loc scheme not allowed")
	ErrHostNotAllowed   = errors.New("fetch safeguard: loc host not allowed")
	ErrPrivateAddress   = errors.New("fetch safeguard: private, loopback or link-local address")
	ErrRedirect         = errors.New("fetch safeguard: redirect refused")
	ErrTooLarge         = errors.New("fetch safeguard: object exceeds the size cap")
	ErrTimeout          = errors.New("fetch safeguard: fetch timed out")
	// ErrFetch: the fetch was allowed but did not bring the object (a bad
	// loc, a connection error, an HTTP status other than 200).
	ErrFetch = errors.New("fetch failed")
)

// RefError is the failure of one reference's check: which reference
// (Index in the element's refs, Kind), the outcome (RefMismatch or
// RefUnverifiable) and why. errors.Is matches handoff.ErrRefMismatch or
// handoff.ErrUnverifiableRef by the outcome, and the cause.
type RefError struct {
	Index   int
	Kind    string
	Outcome handoff.RefOutcome
	Err     error
}

func (e *RefError) Error() string {
	return fmt.Sprintf("refs[%d] (kind %q): %s: %v", e.Index, e.Kind, e.Outcome, e.Err)
}

// Unwrap returns the outcome's sentinel and the cause.
func (e *RefError) Unwrap() []error {
	s := handoff.ErrUnverifiableRef
	if e.Outcome == handoff.RefMismatch {
		s = handoff.ErrRefMismatch
	}
	return []error{s, e.Err}
}

// RefErrors are the failures of every required reference of one element,
// in index order. errors.Is(err, handoff.ErrRefMismatch) holds when any of
// them is a mismatch, so step 7 rejects with "ref-mismatch" when one
// required reference mismatched even if another was unverifiable: a
// mismatch is evidence, an unverifiable reference only its absence.
type RefErrors []*RefError

func (es RefErrors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns each failure.
func (es RefErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
