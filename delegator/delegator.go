// Package delegator is the handing-over side of a hop, and it never
// guesses (draft "Asking Again", "Lifecycle", "Forks, Concurrency, and
// Equivocation", the "canceled" rules): it keeps every offer it issued
// with its exact octets, learns the hop's state only from verified
// statuses or authoritative observations, asks again by resending the
// identical octets, never treats silence as "failed", refuses a new offer
// for work whose hop is unresolved, and passes cancels down the chain.
package delegator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Retry is the policy for asking again.
type Retry struct {
	First       time.Duration // delay before the first retransmission (capped to before exp); default 2 s
	Factor      float64       // growth of the delay per attempt; default 2
	Max         time.Duration // longest delay; default 5 min
	Jitter      float64       // +- fraction of each delay, 0..1; default 0.2
	MaxAttempts int           // retransmissions before giving up and flagging; default 8
}

func (r Retry) withDefaults() Retry {
	if r.First <= 0 {
		r.First = 2 * time.Second
	}
	if r.Factor < 1 {
		r.Factor = 2
	}
	if r.Max <= 0 {
		r.Max = 5 * time.Minute
	}
	if r.Jitter <= 0 || r.Jitter > 1 {
		r.Jitter = 0.2
	}
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = 8
	}
	return r
}

// Tracking is a store that keeps both sides: the delegator's hops and the
// flags for its operator (store.Memory, store/sqlite, store/postgres).
type Tracking interface {
	store.Tracker
	Raise(ctx context.Context, f store.Flag) (int64, error)
	Flags(ctx context.Context, all bool) ([]store.Flag, error)
}

// Config configures a Delegator.
type Config struct {
	Me     string // this agent's AgentId: the iss of its offers
	Signer *handoff.Signer
	Keys   handoff.KeySource // to verify the statuses it receives
	Store  Tracking
	Form   handoff.Form // signed form of its offers and cancels (default JWS)
	Retry  Retry
	Now    func() time.Time
	Skew   time.Duration // statuses issued after now + skew are refused; 0: 60 s, handoff.NoSkew: none
}

// Delegator tracks the hops it issued. Safe for concurrent use.
type Delegator struct {
	c Config
}

// New validates the configuration.
func New(c Config) (*Delegator, error) {
	if c.Me == "" || c.Signer == nil || c.Keys == nil || c.Store == nil {
		return nil, errors.New("delegator: Me, Signer, Keys and Store are required")
	}
	c.Retry = c.Retry.withDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Delegator{c: c}, nil
}

// Offer describes new work to hand over.
type Offer struct {
	Aud    string
	Dialog string
	Task   string
	// Work names the work, so that no second offer is issued for it while
	// a hop for it is unresolved (draft "Asking Again").
	Work string
	// SafeTwice declares the work safe to do twice: a new offer may be
	// issued while an earlier hop for it is unresolved.
	SafeTwice bool
	TTL       time.Duration // exp - iat; default 300 s
	Obo       *handoff.Principal
	Grant     *handoff.Digest
	Refs      []handoff.ContextRef
	// From is the Handoff this delegator received and now passes on: the
	// offer's prev is its offer's digest and the chain carries it. Nil
	// starts a chain.
	From *handoff.Handoff
	// NoChain sends prev without the chain (privacy: the chain reveals
	// every earlier agent).
	NoChain bool
}

// Offer signs a new offer with a new hop, records it, schedules the first
// retransmission before exp, and returns the Handoff to send. A new
// attempt at work is always a new offer with a new hop; a hop is never
// signed twice.
func (d *Delegator) Offer(ctx context.Context, spec Offer) (*handoff.Handoff, *store.Issued, error) {
	if spec.Aud == "" || spec.Work == "" {
		return nil, nil, errors.New("delegator: an offer needs Aud and Work")
	}
	if spec.TTL <= 0 {
		spec.TTL = 300 * time.Second
	}
	now := d.c.Now()
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: spec.Dialog, Task: spec.Task, Iss: d.c.Me, Aud: spec.Aud,
		Iat: now.Unix(), Exp: now.Add(spec.TTL).Unix(), Obo: spec.Obo, Grant: spec.Grant, Refs: spec.Refs}
	var prev *handoff.Digest
	if spec.From != nil {
		p := spec.From.Offer.Digest()
		prev, o.Prev = &p, &p
	}
	el, err := d.c.Signer.SignOffer(o, d.c.Form)
	if err != nil {
		return nil, nil, err
	}
	h := &handoff.Handoff{Offer: el}
	if spec.From != nil && !spec.NoChain {
		h = spec.From.PassOn(el)
	}
	exp := time.Unix(o.Exp, 0)
	rec := &store.Issued{Hop: o.Hop, Aud: o.Aud, Work: spec.Work, Offer: el.Octets, OfferForm: el.Form,
		Digest: el.Digest(), Prev: prev, Exp: exp, View: store.Offered, Created: now,
		NextAsk: d.firstAsk(now, exp)}
	if err := d.c.Store.Issue(ctx, rec, spec.SafeTwice); err != nil {
		return nil, nil, err
	}
	return h, rec, nil
}

// firstAsk is the first retransmission: after Retry.First, but before exp
// (halfway there at the latest), while a delegate that never received the
// offer can still process it.
func (d *Delegator) firstAsk(now, exp time.Time) time.Time {
	delay := d.c.Retry.First
	if half := exp.Sub(now) / 2; half > 0 && delay > half {
		delay = half
	}
	return now.Add(d.jitter(delay))
}

func (d *Delegator) jitter(delay time.Duration) time.Duration {
	var b [8]byte
	_, _ = rand.Read(b[:])
	f := float64(binary.LittleEndian.Uint64(b[:])>>11) / (1 << 53) // [0, 1)
	return time.Duration(float64(delay) * (1 + d.c.Retry.Jitter*(2*f-1)))
}

// Expired reports the local, provisional "expired": an offer that reached
// exp with no status. A later verified status still counts.
func Expired(h *store.Issued, now time.Time) bool {
	return h.View == store.Offered && !now.Before(h.Exp)
}

// Intake checks a status received for one of its hops (D9) and applies it
// (draft "Forks, Concurrency, and Equivocation", "Asking Again"): the first
// verified terminal status stands and resolves the hop; a later
// conflicting one is flagged; a "rejected" with reason stale or replay
// never sets the state (it says only that the delegate does not remember
// the hop), nor does a "rejected" wrong-audience from an agent the offer
// reached by mistake (D9: it verifies, but the hop's delegate may still
// answer); a late completed or failed still resolves an expired or
// canceled hop. It returns the hop as it now stands.
func (d *Delegator) Intake(ctx context.Context, hop string, status handoff.Element) (*store.Issued, error) {
	h, err := d.c.Store.IssuedHop(ctx, hop)
	if err != nil {
		return nil, err
	}
	vs, err := handoff.VerifyStatus(status, handoff.Element{Form: h.OfferForm, Octets: h.Offer},
		handoff.StatusOptions{Keys: d.c.Keys, Now: d.c.Now, Skew: d.c.Skew})
	if err != nil {
		return nil, err
	}
	if !vs.SetsState() {
		return h, nil // stale, replay, or misdelivered (D9): verified, and never the hop's state
	}
	s := vs.Status
	var to store.View
	resolved := false
	switch s.State {
	case handoff.StateAccepted:
		to = store.ViewAccepted
	case handoff.StateRejected:
		to, resolved = store.ViewRejected, true
	case handoff.StateCompleted:
		to, resolved = store.ViewComplete, true
	case handoff.StateFailed:
		to, resolved = store.ViewFailed, true
	default:
		return nil, fmt.Errorf("delegator: a %q status for hop %s does not come from the delegate", s.State, hop)
	}
	for {
		if terminal(h.View) {
			if h.View != to && to != store.ViewAccepted {
				// One open flag per conflicting state (Flag.Key), however
				// often the delegate resends it.
				if _, err := d.c.Store.Raise(ctx, store.Flag{Kind: store.FlagConflictingInputs, Iss: d.c.Me, Hop: hop, Created: d.c.Now(),
					Key:    fmt.Sprintf("status %s after %s", s.State, h.View),
					Detail: fmt.Sprintf("the delegate %s sent %q after %q; the first stands", h.Aud, s.State, h.View)}); err != nil {
					return nil, err
				}
			}
			return h, nil
		}
		if to == store.ViewAccepted && h.View != store.Offered {
			return h, nil // accepted after canceled, or a repeat: nothing new
		}
		err := d.c.Store.SetView(ctx, hop, h.View, to, resolved, status.Octets, status.Form)
		if err == nil {
			if to == store.ViewRejected && surroundings(s.Reason) {
				if err := d.doubt(ctx, h, s.Reason); err != nil {
					return nil, err
				}
			}
			return d.c.Store.IssuedHop(ctx, hop)
		}
		if !errors.Is(err, store.ErrConflict) {
			return nil, err
		}
		if h, err = d.c.Store.IssuedHop(ctx, hop); err != nil { // moved meanwhile: judge again
			return nil, err
		}
	}
}

// surroundings reports whether a rejection's reason is one the unsigned
// parts around an offer can cause: its chain (broken-chain, cycle,
// too-deep), the host's dialog, a credential or the chain policy (policy),
// or the objects its references name (unverifiable-ref, ref-mismatch).
func surroundings(r handoff.Reason) bool {
	switch r {
	case handoff.ReasonBrokenChain, handoff.ReasonCycle, handoff.ReasonTooDeep, handoff.ReasonPolicy,
		handoff.ReasonUnverifiableRef, handoff.ReasonRefMismatch:
		return true
	}
	return false
}

// doubt flags a rejection the delegator's own message may not have
// caused. The rejection stands (the delegate did not take the work, so the
// work may be offered again), but an on-path party that delivered the
// offer first with junk around it gets that same rejection recorded for
// the hop, and this delegator cannot tell: the operator looks, and offers
// the work again under a new hop (Offer; never the old octets), over an
// authenticated channel where it can.
func (d *Delegator) doubt(ctx context.Context, h *store.Issued, r handoff.Reason) error {
	_, err := d.c.Store.Raise(ctx, store.Flag{Kind: store.FlagDoubtfulRejection, Iss: d.c.Me, Hop: h.Hop, Created: d.c.Now(),
		Key: "rejected " + string(r),
		Detail: fmt.Sprintf("the delegate %s rejected the hop with reason %q, which the unsigned parts around the offer (chain, dialog, "+
			"credential, references' octets) can cause: if this delegator sent them right, someone else delivered the offer first; "+
			"the work was not taken, and may be offered again under a new hop", h.Aud, r)})
	return err
}

// terminal: the delegate's last word on the hop is known (canceled is the
// delegator's own word and does not end the hop: a later completed or
// failed still resolves it).
func terminal(v store.View) bool {
	return v == store.ViewRejected || v == store.ViewComplete || v == store.ViewFailed
}

// Observe records an authoritative observation that the work of a hop did
// not take effect (the other system's record, found by an identifier
// derived from the hop). It resolves the hop. A timeout is not one.
func (d *Delegator) Observe(ctx context.Context, hop string) error {
	return d.c.Store.ResolveHop(ctx, hop)
}

// Cancel signs "canceled" for a hop it issued and records it. The cancel is
// a revocation; it does not show that the work took no effect, so the hop
// stays unresolved until a verified completed or failed, or an
// observation.
func (d *Delegator) Cancel(ctx context.Context, hop string) (handoff.Element, *store.Issued, error) {
	h, err := d.c.Store.IssuedHop(ctx, hop)
	if err != nil {
		return handoff.Element{}, nil, err
	}
	offer := handoff.Element{Form: h.OfferForm, Octets: h.Offer}
	st, err := d.c.Signer.SignStatus(&handoff.Status{Offer: offer.Digest(), Iss: d.c.Me, Aud: h.Aud,
		Iat: d.c.Now().Unix(), State: handoff.StateCanceled}, d.c.Form)
	if err != nil {
		return handoff.Element{}, nil, err
	}
	for !terminal(h.View) && h.View != store.ViewCanceled {
		err := d.c.Store.SetView(ctx, hop, h.View, store.ViewCanceled, false, nil, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrConflict) {
			return handoff.Element{}, nil, err
		}
		if h, err = d.c.Store.IssuedHop(ctx, hop); err != nil {
			return handoff.Element{}, nil, err
		}
	}
	h, err = d.c.Store.IssuedHop(ctx, hop)
	return st, h, err
}

// Downstream is a cancel to send for an offer this delegator passed on.
type Downstream struct {
	Hop    *store.Issued
	Cancel handoff.Element
}

// CancelDown is what a delegate does with a valid "canceled" it received
// for offer (the digest of the offer it was given): it cancels every offer
// it issued whose prev equals that digest, fan-out included ("canceled" in
// the draft's Lifecycle). Each receiver of those cancels does the same, so
// the cancel follows the hops down.
func (d *Delegator) CancelDown(ctx context.Context, offer handoff.Digest) ([]Downstream, error) {
	hops, err := d.c.Store.ByPrev(ctx, offer)
	if err != nil {
		return nil, err
	}
	out := make([]Downstream, 0, len(hops))
	for _, h := range hops {
		st, h2, err := d.Cancel(ctx, h.Hop)
		if err != nil {
			return out, err
		}
		out = append(out, Downstream{Hop: h2, Cancel: st})
	}
	return out, nil
}

// Ask is a retransmission to send: the identical octets of the hop's offer.
type Ask struct {
	Hop     *store.Issued
	Offer   handoff.Element
	Attempt int
}

// Due returns the retransmissions to send now and schedules the next ones
// with exponential backoff and jitter. A hop it stops asking about while
// unresolved is flagged to the operator; silence never becomes "failed".
func (d *Delegator) Due(ctx context.Context) ([]Ask, error) {
	now := d.c.Now()
	hops, err := d.c.Store.Due(ctx, now)
	if err != nil {
		return nil, err
	}
	var out []Ask
	for _, h := range hops {
		attempt := h.Attempts + 1
		if attempt > d.c.Retry.MaxAttempts {
			if err := d.c.Store.SetAsk(ctx, h.Hop, h.Attempts, time.Time{}); err != nil {
				return out, err
			}
			if _, err := d.c.Store.Raise(ctx, store.Flag{Kind: store.FlagUnknownOutcome, Iss: d.c.Me, Hop: h.Hop, Created: now,
				Detail: fmt.Sprintf("stopped asking %s after %d retransmissions; the hop is unresolved (%s)", h.Aud, h.Attempts, h.View)}); err != nil {
				return out, err
			}
			continue
		}
		delay := d.c.Retry.First
		for i := 1; i < attempt && delay < d.c.Retry.Max; i++ {
			delay = time.Duration(float64(delay) * d.c.Retry.Factor)
		}
		if delay > d.c.Retry.Max {
			delay = d.c.Retry.Max
		}
		if err := d.c.Store.SetAsk(ctx, h.Hop, attempt, now.Add(d.jitter(delay))); err != nil {
			return out, err
		}
		out = append(out, Ask{Hop: h, Offer: handoff.Element{Form: h.OfferForm, Octets: h.Offer}, Attempt: attempt})
	}
	return out, nil
}

// Flags lists the operator's flags.
func (d *Delegator) Flags(ctx context.Context, all bool) ([]store.Flag, error) {
	return d.c.Store.Flags(ctx, all)
}

// RunRetransmitter asks again every interval until ctx is done: for each
// due hop it calls send with the identical octets of the offer (send
// resends the Handoff the caller keeps for the hop, as first sent). Send
// errors go to report (which may be nil); the schedule goes on, and a hop
// whose retries run out is flagged by Due.
func (d *Delegator) RunRetransmitter(ctx context.Context, every time.Duration, send func(context.Context, Ask) error, report func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		asks, err := d.Due(ctx)
		if err != nil && report != nil {
			report(err)
		}
		for _, a := range asks {
			if err := send(ctx, a); err != nil && report != nil {
				report(fmt.Errorf("delegator: asking %s again about hop %s: %w", a.Hop.Aud, a.Hop.Hop, err))
			}
		}
	}
}
