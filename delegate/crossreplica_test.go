package delegate_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// ordered is a hop store shared by two Delegates (replicas) whose calls
// wait on hooks, to put a claim and a cancel by digest in one order.
type ordered struct {
	store.Store
	mu        sync.Mutex
	nHeldFor  int
	heldFor   func(n int) // after the n-th HeldFor
	claimed   func()      // after Claim
	held      func()      // after Hold
	hopOf     func()      // before HopOf
	take      func()      // before TakeHeld
	tookHook  func()      // after TakeHeld
	onceTaken sync.Once
}

func (h *ordered) HeldFor(ctx context.Context, iss string, d handoff.Digest) (*store.Held, error) {
	r, err := h.Store.HeldFor(ctx, iss, d)
	h.mu.Lock()
	h.nHeldFor++
	n := h.nHeldFor
	h.mu.Unlock()
	if h.heldFor != nil {
		h.heldFor(n)
	}
	return r, err
}

func (h *ordered) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	a, b, err := h.Store.Claim(ctx, r)
	if h.claimed != nil {
		h.claimed()
	}
	return a, b, err
}

func (h *ordered) Hold(ctx context.Context, x *store.Held, lim store.HoldLimits) error {
	err := h.Store.Hold(ctx, x, lim)
	if h.held != nil {
		h.held()
	}
	return err
}

func (h *ordered) HopOf(ctx context.Context, iss string, d handoff.Digest) (string, error) {
	if h.hopOf != nil {
		h.hopOf()
	}
	return h.Store.HopOf(ctx, iss, d)
}

func (h *ordered) TakeHeld(ctx context.Context, iss string, d handoff.Digest, st []byte) (bool, error) {
	if h.take != nil {
		h.take()
	}
	ok, err := h.Store.TakeHeld(ctx, iss, d, st)
	if h.tookHook != nil {
		h.onceTaken.Do(h.tookHook)
	}
	return ok, err
}

// D9, draft "Lifecycle" (offered -> canceled), decision 66: replica A
// receives the offer while replica B receives its cancel by digest alone
// (MCP's notifications/cancelled). B holds the cancel before A's claim
// commits, finds A's hop by digest, marks it canceled and only then takes
// the held cancel out. Whichever way A's look and take fall:
//   - A finds the held cancel but B takes it out first: A reads the mark
//     and does not hand the work out (recorded "failed", no effect);
//   - A's second look comes after B took it out: A hands the work out,
//     but the record is already marked canceled, which every carrier
//     (and RecordOutcome) reads before it begins the work.
func TestCrossReplicaCancelAndClaim(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bFirst   bool // B takes the held cancel out before A's second look
		wantTake bool
	}{
		{"A finds the held cancel, B takes it out", false, false},
		{"B takes it out before A looks again", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			s := w.freshStore()
			a, b := &ordered{Store: s}, &ordered{Store: s}
			aFirstLook, bHeld, aClaimed, aSecondLook, bTook := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
			a.heldFor = func(n int) {
				switch n {
				case 1:
					close(aFirstLook)
					<-bHeld
				case 2:
					close(aSecondLook)
				}
			}
			a.claimed = func() {
				close(aClaimed)
				if tc.bFirst {
					<-bTook
				}
			}
			a.take = func() { <-bTook }
			var once sync.Once
			b.held = func() { once.Do(func() { close(bHeld) }) }
			b.hopOf = func() { <-aClaimed }
			if !tc.bFirst {
				b.take = func() { <-aSecondLook }
			}
			b.tookHook = func() { close(bTook) }
			dA := w.delegate(a, nil)
			dB := w.delegate(b, nil)
			off, o := w.offer("")
			type res struct {
				a   *delegate.Answer
				err error
			}
			ra := make(chan res, 1)
			go func() { x, err := dA.Receive(ctx, off, "ctx", "planner"); ra <- res{x, err} }()
			<-aFirstLook
			rb := make(chan error, 1)
			go func() {
				rec, err := dB.Cancel(ctx, cancelStatus(t, w, off), o.Iss, "")
				if err == nil && (rec == nil || !rec.Canceled) {
					t.Errorf("B's cancel returned %+v", rec)
				}
				rb <- err
			}()
			var got res
			select {
			case got = <-ra:
			case <-time.After(10 * time.Second):
				t.Fatal("A's Receive did not return")
			}
			if got.err != nil {
				t.Fatalf("A's Receive: %v", got.err)
			}
			if err := <-rb; err != nil {
				t.Fatalf("B's cancel: %v", err)
			}
			if got.a.Take != tc.wantTake {
				t.Fatalf("A: Take %v (outcome %s); want %v", got.a.Take, got.a.Outcome, tc.wantTake)
			}
			rec, err := s.Get(ctx, o.Iss, o.Hop)
			if err != nil || !rec.Canceled {
				t.Fatalf("record %+v, %v; want canceled", rec, err)
			}
			if !tc.wantTake && rec.State != store.Failed {
				t.Fatalf("record state %s; want failed (the work never began)", rec.State)
			}
			h, err := handoff.ParseHandoff(off, handoff.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if held, err := s.HeldFor(ctx, o.Iss, h.Offer.Digest()); err == nil && held != nil {
				t.Fatalf("still held: %+v", held)
			}
		})
	}
}
