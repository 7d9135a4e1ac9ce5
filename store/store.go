// Package store keeps the delegate's hop records (draft "Freshness and
// Replay", "Lifecycle", "Asking Again", "Knowing the Outcome", "Kept
// Records"): for each (iss, hop) that passed the first three receiving
// checks, the digest and octets of the first offer (and of the chain it
// came with, for the operator's picture), the hop's state, and the
// exact octets of the last status sent (and of the one before it, for the
// operator), so that a retransmission is answered from the record and
// never processed again, equivocation is detected, and nothing is lost
// across a restart.
//
// Three implementations pass one conformance suite (store/storetest):
// Memory (tests, a process without durable state), SQLite (the embedded
// default, store/sqlite) and PostgreSQL (fleets of delegate replicas
// sharing one store, store/postgres). The claim of an (iss, hop) is an
// atomic insert-if-absent in the store itself, so two processes racing on
// one offer can never both take it.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff"
)

// State is a hop's state as the delegate keeps it.
type State string

// The delegate's states. Received is a hop remembered with no decision
// yet (it passed steps 1-3; the process may have stopped before deciding);
// Accepted is taken work whose outcome is not known; the rest are terminal
// for the delegate.
const (
	Received  State = "received"
	Accepted  State = "accepted"
	Rejected  State = "rejected"
	Completed State = "completed"
	Failed    State = "failed"
)

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	switch s {
	case Received, Accepted, Rejected, Completed, Failed:
		return true
	}
	return false
}

// Terminal reports whether the delegate has sent its last word on the hop.
func (s State) Terminal() bool { return s == Rejected || s == Completed || s == Failed }

// Wire is the status state that reports a hop in s (draft "Lifecycle"):
// the same word, checked. Received has none: nothing is sent for a hop
// not yet decided.
func (s State) Wire() (handoff.State, error) {
	switch s {
	case Accepted:
		return handoff.StateAccepted, nil
	case Rejected:
		return handoff.StateRejected, nil
	case Completed:
		return handoff.StateCompleted, nil
	case Failed:
		return handoff.StateFailed, nil
	}
	return "", fmt.Errorf("store: a hop in state %q has no status to send", s)
}

// CanMove reports whether the lifecycle allows from -> to (draft
// "Lifecycle"): at most one of accepted and rejected, at most one of
// completed and failed, never rejected once taken, completed or failed
// with or without accepted first, nothing after a terminal state.
func CanMove(from, to State) bool {
	switch from {
	case Received:
		return to == Accepted || to == Rejected || to == Completed || to == Failed
	case Accepted:
		return to == Completed || to == Failed
	}
	return false
}

// Record is what a delegate keeps for one hop.
type Record struct {
	Iss, Hop  string
	Digest    handoff.Digest // handoff digest of the first offer that passed steps 1-3
	Offer     []byte         // that offer's signed octets, exactly as received
	OfferForm handoff.Form
	// Chain: the chain elements the first offer came with, oldest first,
	// each element's signed octets exactly as received; nil when it came
	// with none (and for a record kept before records kept chains, or by
	// Replay). Handoff rebuilds the Handoff from them and the offer.
	Chain [][]byte
	// ChainForms: the signed form of each element of Chain, in its order
	// (a chain may mix JWS and COSE, whatever the offer's form; a chain
	// element that is neither is FormInvalid); nil exactly when Chain is.
	ChainForms []handoff.Form
	State      State
	Status     []byte // exact octets of the last status sent; nil when none was sent
	StatusForm handoff.Form
	// Earlier: the exact octets of the status sent before Status, which a
	// move replaced (Store.Transition): the "accepted" of a hop that then
	// completed or failed; nil when no status came before the last (and
	// for a record moved before records kept it). The lifecycle sends at
	// most two statuses for a hop ("accepted", then "completed" or
	// "failed"; or one alone), so with Status it is every status sent, in
	// order (Statuses). A claim has none: it records the first decision.
	Earlier     []byte
	EarlierForm handoff.Form
	Canceled    bool // a valid "canceled" from the delegator was received
	// Equivocated: a second, different offer for this (iss, hop) was seen
	// (draft "Forks, Concurrency, and Equivocation"); a "failed" sent for
	// the hop then carries reason "equivocation".
	Equivocated bool
	Received    time.Time // when the record was made
	KeepUntil   time.Time // never forgotten before: the offer's exp plus the skew
	Decided     time.Time // when a terminal state was recorded; zero before
	// Released: when the operator released an "accepted" hop whose outcome
	// cannot be learned (Release); zero otherwise. The hop stays accepted
	// (nothing says it completed or failed) and may be swept once the
	// retention period has passed since.
	Released time.Time
}

// Outcome is the terminal record of taken work, written by a SQL store's
// RecordOutcome in the same transaction as the work's effect: the state
// and the exact octets of the status that says so.
type Outcome struct {
	State      State // Completed or Failed
	Status     []byte
	StatusForm handoff.Form
}

// Key names a hop.
func (r *Record) Key() (string, string) { return r.Iss, r.Hop }

// HopKey names a hop.
type HopKey struct{ Iss, Hop string }

// Less orders keys by iss, then hop, comparing bytes.
func (k HopKey) Less(o HopKey) bool {
	if k.Iss != o.Iss {
		return k.Iss < o.Iss
	}
	return k.Hop < o.Hop
}

// Flag kinds raised to the operator.
const (
	FlagEquivocation      = "equivocation"       // a second offer for a remembered (iss, hop)
	FlagConflictingInputs = "conflicting-inputs" // inputs that contradict each other or the record
	FlagUnknownOutcome    = "unknown-outcome"    // a hop whose outcome cannot be learned
	// FlagDoubtfulRejection: a delegator's hop rejected for a reason
	// the unsigned parts around its offer can cause (a chain, the host's
	// dialog, a credential, references' octets): an on-path party that
	// delivered the offer first with junk around it gets the same
	// rejection recorded (docs/threat-model.md).
	FlagDoubtfulRejection = "doubtful-rejection"
)

// Flag is something the operator must look at.
type Flag struct {
	ID         int64
	Kind       string
	Iss, Hop   string
	Detail     string
	Created    time.Time
	Resolved   time.Time // zero while open
	Resolution string

	// Key, when not empty, names what the flag is about beyond its kind
	// and hop (the conflicting offer's signed content, say): Raise keeps
	// at most one open flag per (Kind, Iss, Hop, Key), returning the open
	// one's id instead of adding another, so that an input resent any
	// number of times is flagged once. An empty Key never merges.
	Key string
}

// Errors.
var (
	ErrNotFound = errors.New("store: no record for this hop")
	// ErrConflict: the hop is not in the state the transition starts
	// from (another process moved it, or the lifecycle forbids the move).
	ErrConflict = errors.New("store: hop is not in the expected state")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrCancelHeld: Claim wrote nothing because a cancel is held for the
	// offer of a hop that would otherwise begin (see Store.Claim): the
	// caller checks the held cancel against the offer (HeldFor) and
	// claims the hop canceled, or drops the cancel and claims again.
	ErrCancelHeld = errors.New("store: a cancel is held for this offer")
)

// CheckedClaim reports whether Claim looks for a cancel held for r's
// offer: r is a hop that could begin work (received or accepted) and not
// already recorded canceled.
func CheckedClaim(r *Record) bool {
	return (r.State == Received || r.State == Accepted) && !r.Canceled
}

// CheckClaim reports what makes r no record Claim may store: a state
// other than received, accepted or rejected, no iss, hop, offer or
// digest, a release, a status for a hop received (nothing is sent for a
// hop not yet decided), an earlier status (a new hop has sent one status
// at most), or a chain whose forms do not match it. Every store refuses
// such a claim with its error, writing nothing.
func CheckClaim(r *Record) error {
	switch r.State {
	case Received, Accepted, Rejected:
	default:
		return fmt.Errorf("store: a hop is claimed as received, accepted or rejected, not %q", r.State)
	}
	if r.Iss == "" || r.Hop == "" || len(r.Offer) == 0 || len(r.Digest.Val) == 0 {
		return fmt.Errorf("store: a claim needs iss, hop, the offer and its digest")
	}
	if !r.Released.IsZero() {
		return fmt.Errorf("store: a new hop is not released")
	}
	if r.State == Received && r.Status != nil {
		return fmt.Errorf("store: a hop received, not yet decided, has sent no status")
	}
	if r.Earlier != nil || r.EarlierForm != 0 {
		return fmt.Errorf("store: a new hop has no earlier status: a claim records its first decision")
	}
	return checkChain(r)
}

// HopError is an error about one hop: Err (ErrNotFound, ErrConflict, or
// what the database said) and the hop it is about. errors.Is finds Err;
// errors.As finds the hop:
//
//	var he *store.HopError
//	if errors.As(err, &he) { log.Printf("hop %s of %s: %v", he.Hop, he.Iss, he.Err) }
type HopError struct {
	Iss, Hop string
	Err      error
}

func (e *HopError) Error() string { return fmt.Sprintf("%v (hop %q of %q)", e.Err, e.Hop, e.Iss) }

// Unwrap is Err.
func (e *HopError) Unwrap() error { return e.Err }

// AtHop returns err as a *HopError about hop (iss, hop); nil stays nil.
func AtHop(err error, iss, hop string) error {
	if err == nil {
		return nil
	}
	return &HopError{Iss: iss, Hop: hop, Err: err}
}

// Store is a hop store. All methods are safe for concurrent use by many
// goroutines, and for SQL stores by many processes sharing the database.
type Store interface {
	// Claim stores r unless a record for (r.Iss, r.Hop) exists, in one
	// atomic step. It returns the record now stored (r, or the one that
	// was there) and whether this call stored it. r.State must be
	// Received, Accepted or Rejected (a rejection is recorded with the
	// status it sends).
	//
	// A claim that could lead to work (r.State Received or Accepted, and
	// r.Canceled false) is refused with ErrCancelHeld, writing nothing,
	// when no record exists but a cancel is held for its offer
	// (HeldFor(r.Iss, r.Digest) would find it). That look and the insert
	// are one step with respect to Hold, also across processes sharing
	// the store: of a Claim and a Hold for one offer, either the claim
	// sees the cancel, or the claim's record is stored before Hold
	// returns (so the holder, reading the hop after holding, finds it).
	// So a fresh claim costs one write and no read.
	Claim(ctx context.Context, r *Record) (*Record, bool, error)

	// Get returns the record of a hop, or ErrNotFound.
	Get(ctx context.Context, iss, hop string) (*Record, error)

	// List returns a page of the records q selects, newest first
	// (HopCursor): an operator's listing, and a delegate's recovery at
	// start-up (accepted hops nobody is working on). A SQL store answers
	// it from indexes; it is not for the claim path.
	List(ctx context.Context, q HopQuery) ([]*Record, error)

	// Transition makes a Move: the hop goes from one state to another
	// (CanMove), with the status sent for it, and Decided is stamped when
	// the new state is terminal. A move that replaces the last status (a
	// new one, or none on a move to a terminal state) keeps it as
	// Earlier, in the same step. It fails with ErrConflict, changing
	// nothing, when the hop is not in state From or its Equivocated mark
	// does not meet Mark, and with ErrNotFound when there is no record.
	Transition(ctx context.Context, m Move) error

	// Release records the operator's decision to stop waiting for the
	// outcome of an "accepted" hop that cannot be learned (draft "Freshness
	// and Replay": such a hop is kept until its operator resolves it). The
	// hop stays accepted, with its last status: no "completed" or "failed"
	// is invented. Sweep may then remove it once now is past both its
	// KeepUntil and Released plus the retention. ErrConflict when the hop
	// is not accepted or already released, ErrNotFound when there is none.
	Release(ctx context.Context, iss, hop string, now time.Time) error

	// MarkCanceled notes that a valid "canceled" for the hop was received.
	MarkCanceled(ctx context.Context, iss, hop string) error
	// MarkEquivocated notes that a second, different offer for the hop
	// was seen.
	MarkEquivocated(ctx context.Context, iss, hop string) error

	// Raise records a flag for the operator and returns its id. A flag
	// with a Key is recorded only if no open flag has the same kind, iss,
	// hop and Key, atomically; otherwise that flag's id is returned and
	// nothing changes.
	Raise(ctx context.Context, f Flag) (int64, error)
	// Flags lists flags, oldest first; open ones only unless all is set.
	Flags(ctx context.Context, all bool) ([]Flag, error)
	// ListFlags returns a page of the flags q selects, newest first (ID
	// descending): an operator's listing (flag_list.go), and one hop's
	// flags. A SQL store answers it from an index.
	ListFlags(ctx context.Context, q FlagQuery) ([]Flag, error)
	// CountOpenFlags returns how many flags are open, counting no further
	// than max (it returns max when there are more): a badge's number,
	// which does not read every flag.
	CountOpenFlags(ctx context.Context, max int) (int, error)
	// Resolve closes a flag with the operator's resolution. It fails with
	// ErrConflict, changing nothing, when the flag is not open: resolved
	// already (by another operator, say), or no flag has this id.
	Resolve(ctx context.Context, id int64, resolution string, now time.Time) error

	// HopOf returns the hop of iss whose recorded offer, or a
	// same-content copy of it recorded for the hop (CopyStatus), has the
	// handoff digest d, or ErrNotFound: the hop of a cancel that names
	// only its offer (D9: a status names its offer by digest), arriving
	// on a replica that did not take the hop, or after a restart.
	HopOf(ctx context.Context, iss string, d handoff.Digest) (string, error)
	// CopyStatus returns the status signed for a same-content copy (D5)
	// of the hop's offer whose own handoff digest is d, or ErrNotFound.
	CopyStatus(ctx context.Context, iss, hop string, d handoff.Digest) (*Copy, error)
	// PutCopy stores c, the status signed for the copy c.Digest of hop
	// (c.Iss, c.Hop), atomically and only if the hop is recorded with
	// status octets equal to c.Basis, and either prev is nil and no status
	// is stored for that copy yet and the hop has fewer than MaxCopies, or
	// prev is the Basis of the copy's status now stored (which c then
	// replaces). It reports whether it stored c; false (with no error)
	// means a condition did not hold: read the hop and the copy again.
	PutCopy(ctx context.Context, c *Copy, prev []byte) (bool, error)

	// Sweep removes the records that may go at now: past KeepUntil, and
	// either terminal for longer than retention, or Received (nothing was
	// ever sent for them), or Accepted and released (Release) longer than
	// retention ago. Other accepted hops stay until their outcome is
	// recorded or the operator releases them. It returns how many hop
	// records went. It also removes the flags resolved longer than
	// retention ago (open flags stay), and the copies' statuses of the
	// hops that went (CopyStatus).
	Sweep(ctx context.Context, now time.Time, retention time.Duration) (int, error)

	// Since is when this store's memory begins: when it was created, or
	// when its records were last dropped (Forget). A delegate rejects
	// offers issued before Since with reason "replay" until the maximum
	// lifetime has passed (draft "Replay and Freshness"). The zero time
	// says no memory came before this one (NewFirstMemory): no offer is
	// refused for it.
	Since(ctx context.Context) (time.Time, error)

	// Forget drops every hop record and copy status (not the flags) and
	// sets Since to now.
	Forget(ctx context.Context, now time.Time) error

	// HeldCancels keeps cancels that overtook their offers (held.go);
	// Sweep also removes those past their KeepUntil.
	HeldCancels

	Close() error
}

// Move is one state change of a hop, as Store.Transition makes it.
type Move struct {
	Iss, Hop string
	From, To State
	// Status is the signed status sent for the move. Nil keeps the last
	// one on a move to Accepted, and leaves no status on a move to a
	// terminal state: a retransmission then gets nothing rather than the
	// earlier "accepted" as if it were the last word.
	Status []byte
	Form   handoff.Form // Status's signed form
	Now    time.Time    // Decided, on a move to a terminal state
	// Mark is a condition on the hop's Equivocated mark. A status signed
	// for the record as read (a "failed" carries reason "equivocation"
	// only on an equivocated hop, draft "Forks, Concurrency, and
	// Equivocation") is stored with MarkOf(the mark as read), so it is
	// never stored once an equivocation was marked in between.
	Mark Mark
}

// Mark is a condition on a hop's Equivocated mark.
type Mark int8

// The conditions: none, not marked, marked.
const (
	MarkAny Mark = iota
	MarkClear
	MarkSet
)

// MarkOf is the condition that the mark is equivocated.
func MarkOf(equivocated bool) Mark {
	if equivocated {
		return MarkSet
	}
	return MarkClear
}

// Meets reports whether a mark meets the condition.
func (c Mark) Meets(equivocated bool) bool {
	return c == MarkAny || (c == MarkSet) == equivocated
}
