package store

import (
	"context"
	"errors"
	"time"

	"github.com/quantumlearningmachines/handoff"
)

// The delegator's side (draft "Asking Again", "Lifecycle"): for each offer
// it issued, the exact octets (a retransmission resends them, never
// re-signs), the hop's state as the delegator sees it, whether the hop is
// resolved, and when to ask again.

// View is a hop's state as its delegator sees it. "expired" is not kept:
// it is local and provisional, derived from Exp (see package delegator).
type View string

// The delegator's views of a hop.
const (
	Offered      View = "offered"
	ViewAccepted View = "accepted"
	ViewRejected View = "rejected"
	ViewComplete View = "completed"
	ViewFailed   View = "failed"
	ViewCanceled View = "canceled"
)

// Issued is what a delegator keeps for one offer it issued.
type Issued struct {
	Hop       string
	Aud       string
	Work      string // the caller's name for the work; one unresolved hop per work
	Offer     []byte // the signed offer, exact octets
	OfferForm handoff.Form
	Digest    handoff.Digest
	Prev      *handoff.Digest // the received offer this one passes on; nil when it starts the chain
	Exp       time.Time
	View      View
	// Resolved: a verified completed or failed, a verified rejected other
	// than stale or replay, or an authoritative observation that the work
	// did not take effect.
	Resolved   bool
	Status     []byte // the verified status that set View, exact octets; nil before
	StatusForm handoff.Form
	Attempts   int       // retransmissions so far
	NextAsk    time.Time // when to ask again; zero when not asking
	Created    time.Time
}

// ErrUnresolvedWork: an unresolved hop for the same work exists, and the
// work is not declared safe to do twice.
var ErrUnresolvedWork = errors.New("store: an unresolved hop for this work exists")

// Tracker keeps the delegator's hops. Memory, SQLite and PostgreSQL
// implement it beside Store.
type Tracker interface {
	// Issue records a new hop. Unless safeTwice, it fails with
	// ErrUnresolvedWork when an unresolved hop with the same Work exists,
	// checked and inserted in one atomic step.
	Issue(ctx context.Context, h *Issued, safeTwice bool) error
	// IssuedHop returns a hop, or ErrNotFound.
	IssuedHop(ctx context.Context, hop string) (*Issued, error)
	// SetView moves a hop from view from to view to, storing the status
	// that says so and whether the hop is now resolved; ErrConflict when
	// the hop is not in view from.
	SetView(ctx context.Context, hop string, from, to View, resolved bool, status []byte, form handoff.Form) error
	// Resolve marks a hop resolved by an authoritative observation.
	ResolveHop(ctx context.Context, hop string) error
	// SetAsk records a retransmission schedule.
	SetAsk(ctx context.Context, hop string, attempts int, next time.Time) error
	// ByPrev lists the hops whose Prev is d (fan-out included).
	ByPrev(ctx context.Context, d handoff.Digest) ([]*Issued, error)
	// Due lists unresolved hops whose NextAsk is set and not after now.
	Due(ctx context.Context, now time.Time) ([]*Issued, error)
	// ListIssued returns a page of the hops q selects, newest first
	// (IssuedCursor): an operator's listing (issued_list.go). A SQL store
	// answers it from an index; it is not for the hot path.
	ListIssued(ctx context.Context, q IssuedQuery) ([]*Issued, error)
}
