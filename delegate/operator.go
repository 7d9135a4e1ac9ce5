package delegate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

// recoverPage is how many accepted hops Recover reads at a time.
const recoverPage = 500

// Recover is meant for start-up, before this delegate takes work: every
// hop recorded "accepted" that has no outcome was taken by a process that
// is gone (it crashed between the claim and the outcome, or its claim's
// acknowledgement was lost), and nobody is working on it. Its outcome is
// not known, so the hop stays "accepted" (draft "Knowing the Outcome":
// until an authoritative observation) and is flagged "unknown outcome"
// for the operator, who settles it with Finish or Release. A canceled hop
// is flagged too: a cancel does not show that the work took no effect.
// A hop that already has an open unknown-outcome flag is not flagged
// again, so running Recover twice raises no duplicate. It returns how
// many hops it flagged.
//
// In a fleet sharing one store, other replicas may be working on some of
// these hops: run Recover when none is, or read its flags as "check
// whether this is still running".
func (d *Delegate) Recover(ctx context.Context) (int, error) {
	open, err := d.cfg.Store.Flags(ctx, false)
	if err != nil {
		return 0, err
	}
	flagged := map[store.HopKey]bool{}
	for _, f := range open {
		if f.Kind == store.FlagUnknownOutcome {
			flagged[store.HopKey{Iss: f.Iss, Hop: f.Hop}] = true
		}
	}
	n := 0
	q := store.HopQuery{State: store.Accepted, Limit: recoverPage}
	for {
		page, err := d.cfg.Store.List(ctx, q)
		if err != nil {
			return n, err
		}
		for _, r := range page {
			k := store.HopKey{Iss: r.Iss, Hop: r.Hop}
			q.After = r.Cursor()
			if flagged[k] || !r.Released.IsZero() {
				continue
			}
			// Re-read just before raising: an operator's Release (or an
			// outcome) landing since the page was read would otherwise
			// leave an open flag on a hop already settled.
			now, err := d.cfg.Store.Get(ctx, r.Iss, r.Hop)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return n, err
			}
			if now.State != store.Accepted || !now.Released.IsZero() {
				continue
			}
			r = now
			detail := "found accepted at start-up with no outcome: the process that took the work is gone, and whether it took effect is not known"
			if r.Canceled {
				detail += " (the delegator canceled it; a cancel does not show the work took no effect)"
			}
			if _, err := d.raise(ctx, store.FlagUnknownOutcome, r.Iss, r.Hop, detail); err != nil {
				return n, err
			}
			flagged[k] = true
			n++
		}
		if len(page) < recoverPage {
			return n, nil
		}
	}
}

// Sweep removes the records that may go now (see store.Store.Sweep). It
// first re-reads the store's Since, so that a Forget made by another
// process sharing the store (a replica, an operator's tool) turns on this
// delegate's restart rule too: run RunSweeper, or call Sweep, on every
// replica.
func (d *Delegate) Sweep(ctx context.Context) (int, error) {
	if err := d.refreshSince(ctx); err != nil {
		return 0, err
	}
	return d.cfg.Store.Sweep(ctx, d.now(), d.cfg.Retention)
}

// RunSweeper sweeps every interval until ctx is done, so that memory and
// disk stay bounded under a steady stream of offers. Errors are passed to
// report (which may be nil) and the sweeper goes on.
func (d *Delegate) RunSweeper(ctx context.Context, every time.Duration, report func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := d.Sweep(ctx); err != nil && report != nil {
				report(err)
			}
		}
	}
}

// Record reads the hop's record from the store (store.ErrNotFound when
// there is none): what a carrier checks just before it begins taken work,
// since a cancel or an equivocating offer may have marked the hop in
// between on a path that does not reach its Config.Stop (another replica
// sharing the store, another process).
func (d *Delegate) Record(ctx context.Context, iss, hop string) (*store.Record, error) {
	return d.cfg.Store.Get(ctx, iss, hop)
}

// Flags lists the operator's flags: equivocation, conflicting inputs and
// unknown outcomes; open ones only unless all.
func (d *Delegate) Flags(ctx context.Context, all bool) ([]store.Flag, error) {
	return d.cfg.Store.Flags(ctx, all)
}

// Resolve closes a flag with the operator's note. Resolving an unknown
// outcome does not decide it, nor does it let the hop go: Finish records
// the outcome the operator observed, and Release gives up on learning it.
func (d *Delegate) Resolve(ctx context.Context, id int64, resolution string) error {
	return d.cfg.Store.Resolve(ctx, id, resolution, d.now())
}

// Release settles a hop left "accepted" whose outcome the operator has
// found cannot be learned (draft "Knowing the Outcome": the delegate must
// not guess). No "completed" or "failed" is signed: the hop stays
// accepted, a retransmission still gets "accepted", and the delegator's
// hop stays unresolved, as the draft says. What changes is retention: the
// record may be swept once the retention period has passed (draft
// "Freshness and Replay": kept until its operator resolves it). why, the
// operator's reason, is required; it closes the hop's open unknown-outcome
// flags (or, when none is open, is recorded as a resolved one). If the
// outcome is learned later, Finish still records it.
func (d *Delegate) Release(ctx context.Context, iss, hop, why string) error {
	if why == "" {
		return fmt.Errorf("delegate: releasing hop %s of %q needs the operator's reason", hop, iss)
	}
	now := d.now()
	if err := d.cfg.Store.Release(ctx, iss, hop, now); err != nil {
		return err
	}
	flags, err := d.cfg.Store.Flags(ctx, false)
	if err != nil {
		return err
	}
	note := "released by the operator, outcome not known: " + why
	closed := false
	for _, f := range flags {
		if f.Kind == store.FlagUnknownOutcome && f.Iss == iss && f.Hop == hop {
			if err := d.cfg.Store.Resolve(ctx, f.ID, note, now); err != nil {
				return err
			}
			closed = true
		}
	}
	if closed {
		return nil
	}
	id, err := d.raise(ctx, store.FlagUnknownOutcome, iss, hop, "released by the operator with no open flag")
	if err != nil {
		return err
	}
	return d.cfg.Store.Resolve(ctx, id, note, now)
}
