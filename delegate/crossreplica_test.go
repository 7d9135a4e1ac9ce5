package delegate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// paused is a hop store whose Hold can wait on a hook, to put a cancel's
// hold before or after a claim on another replica.
type paused struct {
	store.Store
	afterHold func() // after Hold returns
}

func (p *paused) Hold(ctx context.Context, x *store.Held, lim store.HoldLimits) error {
	err := p.Store.Hold(ctx, x, lim)
	if p.afterHold != nil {
		p.afterHold()
	}
	return err
}

// replicaStores are two handles on one empty store, for two replicas:
// one memory store shared, two handles on one SQLite file, two
// connections to one PostgreSQL database.
var replicaStores = []struct {
	name string
	open func(t *testing.T, w *world) [2]store.Store
}{
	{"memory", func(t *testing.T, w *world) [2]store.Store { m := w.freshStore(); return [2]store.Store{m, m} }},
	{"sqlite", func(t *testing.T, w *world) [2]store.Store {
		open := sqliteHandles(t)
		a := open()
		a.Forget(context.Background(), w.clock().Add(-time.Minute))
		return [2]store.Store{a, open()}
	}},
	{"postgres", func(t *testing.T, w *world) [2]store.Store {
		open := postgresHandles(t)
		a := open()
		a.Forget(context.Background(), w.clock().Add(-time.Minute))
		return [2]store.Store{a, open()}
	}},
}

// D9, draft "Lifecycle" (offered -> canceled), decision 66: replica A
// receives the offer while replica B receives its cancel by digest alone
// (MCP's notifications/cancelled). The claim and the hold are ordered by
// the store (store.Store.Claim), so whichever comes first the cancel
// stops the hop and is taken out, and A's fresh claim reads nothing:
//   - B holds first: A's claim is refused for the held cancel, which A
//     checks against the offer; the hop is recorded rejected (policy)
//     and canceled, and its work is never taken;
//   - A claims first: B, having held the cancel, finds A's hop by digest
//     and marks it canceled, which every carrier (and RecordOutcome)
//     reads before it begins the work.
func TestCrossReplicaCancelAndClaim(t *testing.T) {
	for _, holdFirst := range []bool{true, false} {
		w := newWorld(t)
		for _, rs := range replicaStores {
			t.Run(map[bool]string{true: "B holds first", false: "A claims first"}[holdFirst]+"/"+rs.name, func(t *testing.T) {
				ctx := context.Background()
				ss := rs.open(t, w)
				b := &paused{Store: ss[1]}
				dA, dB := w.delegate(ss[0], nil), w.delegate(b, nil)
				off, o := w.offer("")
				var got *delegate.Answer
				var err error
				receive := func() { got, err = dA.Receive(ctx, off, "ctx", "planner") }
				if holdFirst {
					b.afterHold = receive // A receives between B's hold and B's look for the hop
				} else {
					receive()
				}
				rec, cerr := dB.Cancel(ctx, cancelStatus(t, w, off), o.Iss, "")
				if err != nil {
					t.Fatalf("A's Receive: %v", err)
				}
				if cerr != nil || !rec.Canceled {
					t.Fatalf("B's Cancel: %+v, %v", rec, cerr)
				}
				if got.Take == holdFirst {
					t.Fatalf("A: Take %v (outcome %s %s); want %v", got.Take, got.Outcome, got.Reason, !holdFirst)
				}
				if holdFirst && (got.Outcome != handoff.Rejected || got.Reason != handoff.ReasonPolicy) {
					t.Fatalf("A: %s %s; want rejected policy", got.Outcome, got.Reason)
				}
				checkCanceledNotHeld(t, ss[0], off, map[bool]store.State{true: store.Rejected, false: store.Accepted}[holdFirst])
			})
		}
	}
}

// The same race run freely, many times: whatever the order, the hop ends
// canceled, no cancel stays held, and a Take is always of a hop recorded
// canceled (so its work stops, or never begins).
func TestCrossReplicaCancelAndClaimRace(t *testing.T) {
	w := newWorld(t)
	for _, rs := range replicaStores {
		t.Run(rs.name, func(t *testing.T) {
			ctx := context.Background()
			ss := rs.open(t, w)
			dA, dB := w.delegate(ss[0], nil), w.delegate(ss[1], nil)
			for range 50 {
				off, o := w.offer("")
				st := cancelStatus(t, w, off)
				var got *delegate.Answer
				var err, cerr error
				var wg sync.WaitGroup
				wg.Go(func() { got, err = dA.Receive(ctx, off, "ctx", "planner") })
				wg.Go(func() { _, cerr = dB.Cancel(ctx, st, o.Iss, "") })
				wg.Wait()
				// A Cancel that finds no hop holds the cancel and says so
				// (store.ErrNotFound): the offer then finds it.
				if err != nil || cerr != nil && !errors.Is(cerr, store.ErrNotFound) {
					t.Fatalf("Receive: %v; Cancel: %v", err, cerr)
				}
				want := store.Rejected
				if got.Take {
					want = store.Accepted
				}
				checkCanceledNotHeld(t, ss[0], off, want)
			}
		})
	}
}

// checkCanceledNotHeld checks that the hop of the offer b is recorded in
// state want and canceled, and that no cancel is held for it.
func checkCanceledNotHeld(t *testing.T, s store.Store, b []byte, want store.State) {
	t.Helper()
	h, err := handoff.ParseHandoff(b, handoff.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	o, _, _ := handoff.UnsafeDecode(h.Offer)
	rec, err := s.Get(context.Background(), o.Iss, o.Hop)
	if err != nil || !rec.Canceled || rec.State != want {
		t.Fatalf("record %+v, %v; want %s and canceled", rec, err, want)
	}
	if held, err := s.HeldFor(context.Background(), o.Iss, h.Offer.Digest()); err == nil {
		t.Fatalf("still held: %+v", held)
	}
}
