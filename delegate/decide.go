package delegate

import (
	"context"
	"errors"
	"fmt"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// ErrCanceled: the delegator canceled the hop before its work was
// accepted, so the work must not start (or, from RecordOutcome, while it
// ran, so its effect was not applied).
var ErrCanceled = errors.New("delegate: the delegator canceled this hop")

// ErrEquivocated: a second, different offer for the hop was seen before
// its work was accepted or began, so the work must not start (or, from
// RecordOutcome, while it ran, so its effect was not applied).
var ErrEquivocated = errors.New("delegate: the hop's offer was equivocated")

// Accept takes the work of a hop recorded "received" (Config.Defer) and
// returns the "accepted" status to send. Do the work only if it returns no
// error: another process may have decided first (store.ErrConflict), the
// delegator canceled the hop (ErrCanceled), or a second offer for it
// was seen (ErrEquivocated).
//
// A canceled hop is never accepted (Lifecycle: offered -> canceled). It
// is rejected with reason "policy", as an offer whose cancel overtook it
// is; if the cancel arrives between the check and the acceptance, the
// hop, whose work has not begun, is recorded "failed" with no refs (it
// took no effect). An equivocated hop is handled the same way with
// reason "equivocation" (draft "Forks, Concurrency, and Equivocation").
// Either way Accept returns that status, to send, with an error wrapping
// ErrCanceled or ErrEquivocated (both when both happened).
func (d *Delegate) Accept(ctx context.Context, iss, hop string) (*handoff.Element, error) {
	return d.decide(ctx, iss, hop, store.Accepted, "")
}

// Reject declines a hop recorded "received" (Config.Defer) with a reason
// and returns the "rejected" status to send. The reason is required, and
// is not "stale" or "replay": those say only that the delegate does not
// remember the offer, never true of a hop it records (draft "Lifecycle").
func (d *Delegate) Reject(ctx context.Context, iss, hop string, reason handoff.Reason) (*handoff.Element, error) {
	switch reason {
	case "":
		return nil, fmt.Errorf("delegate: rejecting hop %s of %q needs a reason", hop, iss)
	case handoff.ReasonStale, handoff.ReasonReplay:
		return nil, fmt.Errorf("delegate: hop %s of %q cannot be rejected %q: that reason is only for an offer the delegate does not remember", hop, iss, reason)
	}
	return d.decide(ctx, iss, hop, store.Rejected, reason)
}

func (d *Delegate) decide(ctx context.Context, iss, hop string, to store.State, reason handoff.Reason) (*handoff.Element, error) {
	r, err := d.cfg.Store.Get(ctx, iss, hop)
	if err != nil {
		return nil, err
	}
	if r.State != store.Received {
		return nil, store.AtHop(fmt.Errorf("%w: the hop is already %s", store.ErrConflict, r.State), iss, hop)
	}
	var target store.State
	var rsn handoff.Reason
	st, r, err := d.moveIf(ctx, r, func(r *store.Record) (store.State, *handoff.Element, error) {
		o, err := recordedOffer(r)
		if err != nil {
			return "", nil, err
		}
		var detail string
		target, rsn = to, reason
		switch {
		case r.Equivocated:
			// Neither taken nor answered: "rejected" with reason
			// equivocation (draft "Forks, Concurrency, and Equivocation"),
			// whatever was asked; it comes first when canceled too.
			target, rsn = store.Rejected, handoff.ReasonEquivocation
			detail = "a second, different offer for this hop was seen before the work was accepted"
		case to == store.Accepted && r.Canceled:
			// Never accepted once canceled (Lifecycle: offered -> canceled).
			target, rsn, detail = store.Rejected, handoff.ReasonPolicy, "canceled by the delegator before the work was accepted"
		}
		ws, err := target.Wire()
		if err != nil {
			return target, nil, err
		}
		st, err := d.sign(o, r.Digest, ws, rsn, detail, nil)
		return target, st, err
	})
	if err != nil {
		return nil, err
	}
	if to == store.Accepted && target != to {
		return st, notTaken(r, fmt.Sprintf("it is rejected with reason %s", rsn), iss, hop)
	}
	if to != store.Accepted {
		return st, nil
	}
	// A cancel or an equivocating offer that arrived between the read
	// above and the transition found the hop "received" and stopped
	// nothing (or found it "accepted" and called Stop before the work
	// began): the work has not begun (this call has not returned), so it
	// took no effect. (Cancel and the equivocation handler mark the hop
	// before reading its state, so one of the two sees the other.) If the
	// re-read fails, their Stop stops the work.
	if r, err = d.cfg.Store.Get(ctx, iss, hop); err != nil || !(r.Canceled || r.Equivocated) || r.State != store.Accepted {
		return st, nil
	}
	failed, r, err := d.conclude(ctx, r, canceledBeforeWork)
	if err != nil {
		return nil, d.notBegun(ctx, r, err)
	}
	return failed, notTaken(r, "it was recorded failed as it was accepted (no effect)", iss, hop)
}

// notTaken is Accept's error for a hop whose work must not start: it
// wraps ErrEquivocated, ErrCanceled, or both, as the record r shows.
func notTaken(r *store.Record, what, iss, hop string) error {
	var errs []error
	if r.Equivocated {
		errs = append(errs, ErrEquivocated)
	}
	if r.Canceled {
		errs = append(errs, ErrCanceled)
	}
	return store.AtHop(fmt.Errorf("%w: %s; do not do the work", errors.Join(errs...), what), iss, hop)
}

// recordedOffer decodes the offer a hop's record holds.
func recordedOffer(r *store.Record) (*handoff.Offer, error) {
	o, _, err := handoff.UnsafeDecode(handoff.Element{Form: r.OfferForm, Octets: r.Offer})
	if err == nil && o == nil {
		err = errors.New("it is not an offer")
	}
	if err != nil {
		return nil, store.AtHop(fmt.Errorf("delegate: the recorded offer cannot be read: %w", err), r.Iss, r.Hop)
	}
	return o, nil
}

// moveIf moves the hop from the state r shows to the state sign(r)
// names, storing the status sign(r) made, with a Move conditional
// on r's equivocation mark, so that a status signed before a mark is never
// stored after it. Refused because an equivocation was marked after r was
// read, it signs again for the hop as it now stands; the mark is only ever
// set, so once is enough. It returns the status and the record as moved,
// or, with an error, the record last signed for.
func (d *Delegate) moveIf(ctx context.Context, r *store.Record, sign func(*store.Record) (store.State, *handoff.Element, error)) (*handoff.Element, *store.Record, error) {
	for retried := false; ; retried = true {
		to, st, err := sign(r)
		if err != nil {
			return nil, r, err
		}
		m := store.Move{Iss: r.Iss, Hop: r.Hop, From: r.State, To: to, Status: st.Octets, Form: st.Form, Now: d.now(), Mark: store.MarkOf(r.Equivocated)}
		err = d.cfg.Store.Transition(ctx, m)
		if err == nil {
			moved := *r
			moved.Apply(m)
			return st, &moved, nil
		}
		if retried || r.Equivocated || !errors.Is(err, store.ErrConflict) {
			return nil, r, err
		}
		cur, gerr := d.cfg.Store.Get(ctx, r.Iss, r.Hop)
		if gerr != nil {
			return nil, r, errors.Join(err, gerr)
		}
		if cur.State != r.State || !cur.Equivocated {
			return nil, r, err // decided by another caller meanwhile
		}
		r = cur
	}
}

// conclude records the terminal outcome out(r) of the hop as r shows it
// (moveIf: a "failed" signed again after an equivocation mark carries
// reason "equivocation", draft "Forks, Concurrency, and Equivocation").
func (d *Delegate) conclude(ctx context.Context, r *store.Record, out func(*store.Record) Outcome) (*handoff.Element, *store.Record, error) {
	return d.moveIf(ctx, r, func(r *store.Record) (store.State, *handoff.Element, error) {
		o := out(r)
		st, err := d.status(r, o)
		return o.State, st, err
	})
}

// Outcome is a known outcome of taken work (draft "Knowing the Outcome").
type Outcome struct {
	State  store.State // store.Completed or store.Failed
	Reason handoff.Reason
	Detail string
	// Refs: for completed, the result; for failed, every part of the work
	// that took effect.
	Refs []handoff.ContextRef
	// NoEffect must be set on a failed outcome without refs: it says the
	// work took no effect at all (a failed status without refs says so to
	// the delegator). It guards against forgetting to list what took effect.
	NoEffect bool
}

func (o Outcome) check() error {
	switch o.State {
	case store.Completed:
		if o.NoEffect {
			return errors.New(`delegate: a "completed" outcome took effect; NoEffect is for "failed" only`)
		}
	case store.Failed:
		if len(o.Refs) == 0 && !o.NoEffect {
			return errors.New(`delegate: a "failed" outcome lists in Refs what took effect, or sets NoEffect when nothing did`)
		}
		if len(o.Refs) > 0 && o.NoEffect {
			return errors.New(`delegate: a "failed" outcome with NoEffect says nothing took effect, yet lists Refs of what did`)
		}
	default:
		return fmt.Errorf("delegate: an outcome is completed or failed, not %q", o.State)
	}
	return nil
}

// status signs the terminal status for a recorded hop. An equivocated hop
// that failed says so with reason "equivocation".
func (d *Delegate) status(r *store.Record, out Outcome) (*handoff.Element, error) {
	o, err := recordedOffer(r)
	if err != nil {
		return nil, err
	}
	reason := out.Reason
	if r.Equivocated && out.State == store.Failed {
		reason = handoff.ReasonEquivocation
	}
	ws, err := out.State.Wire()
	if err != nil {
		return nil, err
	}
	return d.sign(o, r.Digest, ws, reason, out.Detail, out.Refs)
}

// Finish records a known outcome of work whose effect is outside the
// store: call it only with an authoritative observation of this attempt's
// effect (another system's record of the request, found by an identifier
// derived from (iss, hop)). A lookup that timed out proves nothing: then
// call Unknown instead. It returns the status to send.
func (d *Delegate) Finish(ctx context.Context, iss, hop string, out Outcome) (*handoff.Element, error) {
	if err := out.check(); err != nil {
		return nil, store.AtHop(err, iss, hop)
	}
	r, err := d.cfg.Store.Get(ctx, iss, hop)
	if err != nil {
		return nil, err
	}
	// The move is conditional on the equivocated mark as read: an
	// equivocation marked meanwhile makes it sign again, so a "failed"
	// never goes out without reason equivocation on an equivocated hop.
	st, _, err := d.conclude(ctx, r, func(*store.Record) Outcome { return out })
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Unknown keeps a taken hop "accepted" because its outcome cannot be
// learned now (a lookup timed out, the record of the effect was lost) and
// flags it to the operator. The delegate never guesses: the hop stays
// accepted until Finish is called with an authoritative observation, or
// the operator releases it (Release).
func (d *Delegate) Unknown(ctx context.Context, iss, hop, why string) error {
	r, err := d.cfg.Store.Get(ctx, iss, hop)
	if err != nil {
		return err
	}
	if r.State != store.Accepted {
		return store.AtHop(fmt.Errorf("%w: an unknown outcome is for an accepted hop; the hop is %s", store.ErrConflict, r.State), iss, hop)
	}
	_, err = d.raise(ctx, store.FlagUnknownOutcome, iss, hop, why)
	return err
}
