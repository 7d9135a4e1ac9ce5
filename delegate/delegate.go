// Package delegate is the receiving side of a hop, durable: it runs the
// receiving checks, keeps each hop's record in a store.Store, enforces the
// lifecycle, answers retransmissions from the record with the identical
// status octets, handles equivocation, records outcomes only when they are
// known, and raises flags to the operator (draft "Lifecycle", "Asking
// Again", "Knowing the Outcome", "Forks, Concurrency, and Equivocation",
// "Replay and Freshness").
//
// A store's memory begins when it was created or its records were dropped
// (store.Store.Since): an offer the store has no record of, issued up to
// that second, is refused with reason "replay" (draft "Replay and
// Freshness": it may have been taken before the records were lost). A
// store made a moment ago therefore refuses an offer signed in the same
// second; store.NewMemory takes the time this delegate's memory began.
//
// The flow of one offer:
//
//	a, err := d.Receive(ctx, handoffOctets, dialog, sender) // sender: whom the host authenticated, or ""
//	send(a.Status)            // nil: send nothing
//	if a.Take {               // new work, recorded "accepted" before this returns
//	    ... do the work exactly once ...
//	    d.Finish(ctx, a.Iss, a.Hop, delegate.Outcome{State: store.Completed, Refs: result})
//	}
package delegate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Config configures a Delegate.
type Config struct {
	// Receiving checks. Memory and Since are the Delegate's own (from
	// the store): New refuses a Config that sets either, rather than
	// silently replacing it.
	Options handoff.Options
	Store   store.Store
	Signer  *handoff.Signer // the delegate's own key, for its statuses
	// StatusForm is the signed form of the statuses it sends (default JWS).
	StatusForm handoff.Form
	// Retention is how long a terminal hop's record is kept after its
	// last status, so a delegator may still ask again (default 24 h).
	Retention time.Duration
	// Stop, if set, is called when work already taken must stop because
	// its offer was equivocated or canceled. It must not block. It may
	// come before the work starts (the hop was just taken, and Receive or
	// Accept has not yet returned): remember it, so that work for that
	// hop not yet begun is not begun. In a fleet it reaches only the
	// process that received the cancel or the equivocating offer: work
	// running on another replica learns of it by reading the hop's record
	// (store.Record.Canceled, Equivocated) before it starts and at points
	// where it can stop.
	Stop func(iss, hop string)
	// OnAnswer, if set, is called with every Answer Receive and
	// ReceiveParsed return (not when they return an error: nothing was
	// decided), after its record is written, with the time the checks
	// and the store took. It is for metrics and logs: it must not block
	// and must not change the Answer.
	OnAnswer func(ctx context.Context, a *Answer, took time.Duration)
	// Defer: an offer that passes every check is recorded "received" with
	// no status, and the caller decides later with Accept or Reject (a
	// person approves, say). Otherwise it is accepted at once.
	Defer bool
	// HeldCancels bounds the cancels held, in the store, for offers not
	// yet received: Total in all (default DefaultMaxHeld) and PerIss per
	// status iss (default DefaultMaxHeldPerIss). Zero takes the default.
	// See Cancel.
	HeldCancels store.HoldLimits
	// SenderMustBeIss: a new hop is recorded (taken, or rejected from
	// step 5 on) only when the host protocol authenticated the request's
	// sender as the verified offer's iss. An offer that passes steps 1-3
	// for an unrecorded hop, from anyone else, is refused at step 4 with
	// ErrSenderNotIss: nothing recorded, no status, no work, so the
	// delegator's own delivery that follows is still a fresh offer (a
	// stale or replayed offer keeps its signed rejection). This closes
	// the first-delivery hijack (a copy of the offer taken in transit and
	// delivered first, in a message of the attacker's:
	// docs/threat-model.md section 4) where every delegator
	// authenticates to the delegate. Retransmissions and equivocations
	// are answered as always (statuses only to iss).
	SenderMustBeIss bool
}

// Delegate is a durable receiver of offers. Safe for concurrent use; many
// Delegates (processes, replicas) may share one SQL store.
type Delegate struct {
	cfg Config
	// recv runs the receiving checks with the store's Since as it was
	// last read (New, then every Sweep): rebuilt when Since moves.
	recv  atomic.Pointer[handoff.Receiver]
	since atomic.Int64 // the Since recv was built with, UnixNano
	now   func() time.Time

	// Cancels that arrived before their offer are held in the store
	// (held.go).
	mu      sync.Mutex
	claimed map[string]string // hop of each offer claimed here lately, by heldKey
	order   []string          // claimed's keys, oldest first (a ring of maxClaimed)
	next    int
	// working: the hops whose RecordOutcome runs in this process (closed
	// when it ends), so that a second call for one waits, then finds the
	// outcome recorded, rather than running the work again (outcome.go).
	working map[[2]string]chan struct{}
}

// maxClaimed bounds the offers whose hop a delegate remembers for a
// cancel that names only its offer (Cancel with no hop).
const maxClaimed = 4096

// New validates cfg and returns a Delegate. The store's Since turns on the
// restart rule: offers issued before the store's memory begins are refused
// as "replay" until they would be stale anyway.
func New(ctx context.Context, cfg Config) (*Delegate, error) {
	if cfg.Store == nil || cfg.Signer == nil {
		return nil, errors.New("delegate: a store and a signer are required")
	}
	if cfg.Options.Memory != nil || !cfg.Options.Since.IsZero() {
		return nil, errors.New("delegate: Options.Memory and Options.Since come from the store; a Config must not set them")
	}
	if cfg.Retention < 0 {
		return nil, errors.New("delegate: retention must not be negative")
	}
	if cfg.Retention == 0 {
		cfg.Retention = 24 * time.Hour
	}
	since, err := cfg.Store.Since(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.HeldCancels.Total < 0 || cfg.HeldCancels.PerIss < 0 {
		return nil, errors.New("delegate: the bounds of the held cancels must not be negative")
	}
	if cfg.HeldCancels.Total == 0 {
		cfg.HeldCancels.Total = DefaultMaxHeld
	}
	if cfg.HeldCancels.PerIss == 0 {
		cfg.HeldCancels.PerIss = DefaultMaxHeldPerIss
	}
	d := &Delegate{cfg: cfg, claimed: map[string]string{}, working: map[[2]string]chan struct{}{}}
	if err := d.setSince(since); err != nil {
		return nil, err
	}
	d.now = cfg.Options.Now
	if d.now == nil {
		d.now = time.Now
	}
	return d, nil
}

// setSince builds the receiver for the store's Since.
func (d *Delegate) setSince(since time.Time) error {
	o := d.cfg.Options
	o.Memory = lookupOnly{s: d.cfg.Store, refs: o.CheckRefs != nil}
	o.Since = since
	r, err := handoff.NewReceiver(o)
	if err != nil {
		return err
	}
	d.recv.Store(r)
	d.since.Store(since.UnixNano())
	return nil
}

// refreshSince re-reads the store's Since (one small read) and rebuilds
// the receiver when it moved: in a fleet sharing one store, a Forget on
// one replica moves every replica's restart rule. Sweep calls it, so a
// replica running RunSweeper follows within one interval.
func (d *Delegate) refreshSince(ctx context.Context) error {
	since, err := d.cfg.Store.Since(ctx)
	if err != nil {
		return err
	}
	if since.UnixNano() == d.since.Load() {
		return nil
	}
	return d.setSince(since)
}

// lookupOnly is the receiver's view of the store: Lookup reads the record;
// Remember does not write, because the Delegate claims the hop once, with
// its decision and the status it sends, in one atomic insert (see
// Receive), which also settles a race between two deliveries.
//
// Remember reads the record, so that a recorded hop stops at step 4 as
// the draft orders (a retransmission is not processed again), when the
// steps after it cost more than the read: the Handoff carries a chain
// (step 6 verifies each element), or the offer has refs and references
// are checked (step 7 may fetch them). The record read is handed back
// (readHolder), so the answer is built without a second read. Otherwise steps 5-7 are a few comparisons, and the claim
// finds the record as a read would, for one write and no read (decision
// 69).
type lookupOnly struct {
	s    store.Store
	refs bool // step 7 runs a reference check
}

// costlyLater is the context key of a Receive's readHolder.
type costlyLater struct{}

// readHolder carries, through the receiver, whether the Handoff has a
// chain and who sent it (for Config.SenderMustBeIss), and back the record
// Remember read.
type readHolder struct {
	chain     bool
	sender    string
	mustBeIss bool
	rec       *store.Record
}

func (l lookupOnly) Lookup(ctx context.Context, iss, hop string) (handoff.Seen, bool, error) {
	r, err := l.s.Get(ctx, iss, hop)
	if errors.Is(err, store.ErrNotFound) {
		return handoff.Seen{}, false, nil
	}
	if err != nil {
		return handoff.Seen{}, false, err
	}
	seen, err := store.RecordSeen(r)
	return seen, err == nil, err
}

func (l lookupOnly) Remember(ctx context.Context, iss, hop string, offer handoff.Element, seen handoff.Seen, _ time.Time) (handoff.Seen, bool, error) {
	held, _ := ctx.Value(costlyLater{}).(*readHolder)
	// iss is verified here (steps 1-2). A sender that may not bring a new
	// hop (Config.SenderMustBeIss) always has the record read: a recorded
	// hop is answered as from anyone (a retransmission, an equivocation),
	// and an unrecorded one is refused here, before steps 5-7, so copies
	// delivered again and again never reach the chain's signatures or the
	// reference checks.
	refuse := held != nil && held.mustBeIss && (held.sender == "" || held.sender != iss)
	costly := refuse || held != nil && held.chain
	if !costly && l.refs {
		// Step 7 runs a reference check only for an offer with refs: the
		// payload, already verified, is read again (microseconds, where
		// a store read may take a round trip).
		o, _, err := handoff.UnsafeDecode(offer)
		costly = err == nil && o != nil && len(o.Refs) > 0
	}
	if !costly {
		return seen, true, nil
	}
	r, err := l.s.Get(ctx, iss, hop)
	if errors.Is(err, store.ErrNotFound) {
		if refuse {
			return handoff.Seen{}, false, &handoff.CheckError{Reason: handoff.ReasonPolicy, Err: ErrSenderNotIss}
		}
		return seen, true, nil
	}
	if err != nil {
		return handoff.Seen{}, false, err
	}
	if held != nil {
		held.rec = r // ReceiveParsed answers from it, not from a second read
	}
	first, err := store.RecordSeen(r)
	return first, false, err
}

func (d *Delegate) skew() time.Duration { return handoff.EffectiveSkew(d.cfg.Options.Skew) }

// raise flags the hop to the operator; its error names the hop.
func (d *Delegate) raise(ctx context.Context, kind, iss, hop, detail string) (int64, error) {
	id, err := d.cfg.Store.Raise(ctx, store.Flag{Kind: kind, Iss: iss, Hop: hop, Detail: detail, Created: d.now()})
	if err != nil {
		return 0, store.AtHop(fmt.Errorf("delegate: raising a %s flag: %w", kind, err), iss, hop)
	}
	return id, nil
}

// raiseDetached is raise on a fresh bounded context, for a flag that must
// be raised although the caller's ctx has ended or timed out.
func (d *Delegate) raiseDetached(ctx context.Context, kind, iss, hop, detail string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reread)
	defer cancel()
	_, err := d.raise(rctx, kind, iss, hop, detail)
	return err
}

// sign makes a status for offer o (whose handoff digest is dg), from this
// delegate to the delegator.
func (d *Delegate) sign(o *handoff.Offer, dg handoff.Digest, state handoff.State, reason handoff.Reason, detail string, refs []handoff.ContextRef) (*handoff.Element, error) {
	// iss is this delegate. It equals offer.aud for every offer that passed
	// step 2; for a wrong-audience rejection it is the one honest signer:
	// naming offer.aud there would claim to speak for another agent. D9 as
	// amended verifies it, from a trusted agent, as the misdelivered
	// rejection, which never sets the hop's state.
	// A detail is free text, often an upstream's error message, and it
	// leaves for the delegator: what looks like a secret in it is
	// redacted, never signed (draft "Secrets"; decision 95).
	st := &handoff.Status{Offer: dg, Iss: d.cfg.Options.Me, Aud: o.Iss, Iat: d.now().Unix(), State: state,
		Reason: reason, Detail: handoff.RedactSecrets(detail), Refs: refs}
	s, err := d.cfg.Signer.SignStatus(st, d.cfg.StatusForm)
	if err != nil {
		return nil, err
	}
	return &s, nil
}
