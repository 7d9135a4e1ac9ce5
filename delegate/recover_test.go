package delegate_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// lossy is a real store whose Claim reports an error: after committing
// (the acknowledgement is lost: a reset connection, or the caller's
// context ending while the commit goes through), or without committing.
type lossy struct {
	store.Store
	commit bool                // the claim commits before the error
	before func(*store.Record) // runs first, e.g. another replica's claim
	after  func()              // runs after the commit, e.g. the caller's ctx ends
}

var errReset = errors.New("connection reset by peer")

func (l *lossy) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	if l.before != nil {
		l.before(r)
	}
	if l.commit {
		if _, _, err := l.Store.Claim(context.Background(), r); err != nil {
			return nil, false, err
		}
	}
	if l.after != nil {
		l.after()
	}
	return nil, false, errReset
}

func unknownFlags(t *testing.T, d *delegate.Delegate, hop string) int {
	t.Helper()
	flags, err := d.Flags(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range flags {
		if f.Kind == store.FlagUnknownOutcome && f.Hop == hop {
			n++
		}
	}
	return n
}

// "Knowing the Outcome" after losing an acknowledgement from the store: a
// claim that committed but reported an error is found by re-reading the
// hop. With the caller still there it is answered as taken; with the
// caller gone the hop is flagged unknown outcome (nobody will do the
// work), never left "accepted" unseen. A claim that did not commit, or
// that lost to another claim, is not taken.
func TestClaimAcknowledgementLost(t *testing.T) {
	t.Run("committed, caller still there: taken", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		l := &lossy{Store: mem, commit: true}
		d := w.delegate(l, nil)
		b, o := w.offer("")
		a, err := d.Receive(context.Background(), b, "ctx", "planner")
		if err != nil || !a.Take || a.Outcome != handoff.Accepted || a.Record == nil || a.Record.State != store.Accepted {
			t.Fatalf("Receive = %+v, %v; want the hop taken", a, err)
		}
		if st := statusOf(t, w, a.Status, b); st.State != handoff.StateAccepted {
			t.Fatalf("status %s", st.State)
		}
		l.commit = false
		again, err := d.Receive(context.Background(), b, "ctx", "planner")
		if err != nil || again.Take || again.Outcome != handoff.Retransmission || !bytes.Equal(again.Status.Octets, a.Status.Octets) {
			t.Fatalf("retransmission: %+v, %v", again, err)
		}
		if n := unknownFlags(t, d, o.Hop); n != 0 {
			t.Fatalf("%d unknown-outcome flags for a hop being worked on", n)
		}
	})
	t.Run("committed, caller gone: flagged, not taken", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		ctx, cancel := context.WithCancel(context.Background())
		l := &lossy{Store: mem, commit: true, after: cancel}
		d := w.delegate(l, nil)
		b, o := w.offer("")
		a, err := d.Receive(ctx, b, "ctx", "planner")
		if err == nil || !errors.Is(err, errReset) || !strings.Contains(err.Error(), o.Hop) {
			t.Fatalf("Receive = %+v, %v; want the claim's error naming the hop", a, err)
		}
		if n := unknownFlags(t, d, o.Hop); n != 1 {
			t.Fatalf("%d unknown-outcome flags; want 1", n)
		}
		r, err := mem.Get(context.Background(), o.Iss, o.Hop)
		if err != nil || r.State != store.Accepted {
			t.Fatalf("record %+v, %v", r, err)
		}
		// A retransmission gets the recorded "accepted"; Recover adds no
		// second flag.
		l.commit, l.after = false, nil
		again, err := d.Receive(context.Background(), b, "ctx", "planner")
		if err != nil || again.Take || !bytes.Equal(again.Status.Octets, r.Status) {
			t.Fatalf("retransmission: %+v, %v", again, err)
		}
		if n, err := d.Recover(context.Background()); err != nil || n != 0 {
			t.Fatalf("Recover = %d, %v; want 0 (already flagged)", n, err)
		}
	})
	t.Run("not committed: error, nothing recorded", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		d := w.delegate(&lossy{Store: mem}, nil)
		b, o := w.offer("")
		if a, err := d.Receive(context.Background(), b, "ctx", "planner"); !errors.Is(err, errReset) {
			t.Fatalf("Receive = %+v, %v; want the claim's error", a, err)
		}
		if _, err := mem.Get(context.Background(), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get = %v; want ErrNotFound", err)
		}
	})
	t.Run("another claim won: a retransmission of it", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		// Another replica claims the same offer first, with its own status.
		other := func(r *store.Record) {
			c := *r
			c.Status = append([]byte(nil), "another replica's accepted"...)
			mem.Claim(context.Background(), &c)
		}
		d := w.delegate(&lossy{Store: mem, before: other}, nil)
		b, _ := w.offer("")
		a, err := d.Receive(context.Background(), b, "ctx", "planner")
		if err != nil || a.Take || a.Outcome != handoff.Retransmission || string(a.Status.Octets) != "another replica's accepted" {
			t.Fatalf("Receive = %+v, %v; want a retransmission answered with the winner's status", a, err)
		}
	})
}

// Recover at start-up flags every hop left "accepted" with no outcome,
// canceled or not, and only those; run again it raises no duplicate.
func TestRecover(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	s := w.freshStore()
	d := w.delegate(s, nil)
	take := func() *handoff.Offer {
		b, o := w.offer("")
		if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
			t.Fatalf("%+v %v", a, err)
		}
		return o
	}
	running, canceled, done := take(), take(), take()
	if err := s.MarkCanceled(ctx, canceled.Iss, canceled.Hop); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Finish(ctx, done.Iss, done.Hop, delegate.Outcome{State: store.Completed}); err != nil {
		t.Fatal(err)
	}
	deferred := w.delegate(s, func(c *delegate.Config) { c.Defer = true })
	rb, ro := w.offer("")
	if _, err := deferred.Receive(ctx, rb, "ctx", "planner"); err != nil {
		t.Fatal(err)
	}
	if n, err := d.Recover(ctx); err != nil || n != 2 {
		t.Fatalf("Recover = %d, %v; want 2", n, err)
	}
	for _, o := range []*handoff.Offer{running, canceled} {
		if n := unknownFlags(t, d, o.Hop); n != 1 {
			t.Errorf("hop %s: %d unknown-outcome flags; want 1", o.Hop, n)
		}
	}
	for _, o := range []*handoff.Offer{done, ro} {
		if n := unknownFlags(t, d, o.Hop); n != 0 {
			t.Errorf("hop %s: %d unknown-outcome flags; want 0", o.Hop, n)
		}
	}
	if n, err := d.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("second Recover = %d, %v; want 0", n, err)
	}
	for _, o := range []*handoff.Offer{running, canceled} {
		if r, err := s.Get(ctx, o.Iss, o.Hop); err != nil || r.State != store.Accepted {
			t.Errorf("hop %s after Recover: %+v, %v; want still accepted", o.Hop, r, err)
		}
	}
}

// cancelOnAccept is a real store in which a delegator's cancel lands just
// as a deferred hop is moved to "accepted".
type cancelOnAccept struct{ store.Store }

func (c cancelOnAccept) Transition(ctx context.Context, m store.Move) error {
	if m.From == store.Received && m.To == store.Accepted {
		if err := c.Store.MarkCanceled(ctx, m.Iss, m.Hop); err != nil {
			return err
		}
	}
	return c.Store.Transition(ctx, m)
}

// Lifecycle: a hop the delegator canceled is never accepted. Accept of a
// deferred hop after a valid cancel rejects it with reason policy (as an
// offer overtaken by its cancel is); a cancel that lands as the hop is
// accepted leaves it failed with no refs (the work never began). Either
// way Accept's error wraps ErrCanceled, and the record holds the status.
func TestAcceptAfterCancel(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		race  bool
		state store.State
	}{{"cancel before Accept", false, store.Rejected}, {"cancel during Accept", true, store.Failed}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			mem := w.freshStore()
			var s store.Store = mem
			if c.race {
				s = cancelOnAccept{mem}
			}
			d := w.delegate(s, func(cfg *delegate.Config) { cfg.Defer = true })
			b, o := w.offer("")
			if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || a.Record.State != store.Received {
				t.Fatalf("%+v %v", a, err)
			}
			if !c.race {
				h, _ := handoff.ParseHandoff(b, handoff.Limits{})
				cancel, err := w.signers["planner"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "planner", Aud: "coder",
					Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := d.Cancel(ctx, cancel, o.Iss, o.Hop); err != nil {
					t.Fatal(err)
				}
			}
			st, err := d.Accept(ctx, o.Iss, o.Hop)
			if !errors.Is(err, delegate.ErrCanceled) {
				t.Fatalf("Accept of a canceled hop = %v; want ErrCanceled", err)
			}
			got := statusOf(t, w, st, b)
			if got.State != handoff.State(c.state) || got.Reason != handoff.ReasonPolicy || len(got.Refs) != 0 {
				t.Fatalf("status %+v; want %s, reason policy, no refs", got, c.state)
			}
			r, err := mem.Get(ctx, o.Iss, o.Hop)
			if err != nil || r.State != c.state || !bytes.Equal(r.Status, st.Octets) {
				t.Fatalf("record %+v, %v", r, err)
			}
		})
	}
}

// "Knowing the Outcome", "Kept Records": an operator who finds that a
// hop's outcome cannot be learned releases it. Nothing is signed (the hop
// stays accepted, a retransmission still gets "accepted"); its
// unknown-outcome flag is closed with the operator's reason; Recover
// leaves it alone; and it is swept after the retention period, as is the
// resolved flag.
func TestRelease(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	s := w.freshStore()
	d := w.delegate(s, func(c *delegate.Config) { c.Retention = time.Hour })
	b, o := w.offer("")
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || !a.Take {
		t.Fatalf("%+v %v", a, err)
	}
	if err := d.Unknown(ctx, o.Iss, o.Hop, "the ledger lost the request"); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, o.Iss, o.Hop, ""); err == nil {
		t.Fatal("Release without a reason succeeded")
	}
	if err := d.Release(ctx, o.Iss, o.Hop, "the ledger cannot say; told the planner's operator"); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, o.Iss, o.Hop, "again"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second Release = %v; want ErrConflict", err)
	}
	if n := unknownFlags(t, d, o.Hop); n != 0 {
		t.Fatalf("%d open unknown-outcome flags after Release; want 0", n)
	}
	all, err := d.Flags(ctx, true)
	if err != nil || len(all) != 1 || !strings.Contains(all[0].Resolution, "told the planner's operator") {
		t.Fatalf("flags %+v, %v; want the unknown-outcome flag resolved with the reason", all, err)
	}
	r, err := s.Get(ctx, o.Iss, o.Hop)
	if err != nil || r.State != store.Accepted || r.Released.IsZero() || !bytes.Equal(r.Status, a.Status.Octets) {
		t.Fatalf("record after Release: %+v, %v; want accepted, released, its accepted status", r, err)
	}
	again, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || again.Take || !bytes.Equal(again.Status.Octets, a.Status.Octets) {
		t.Fatalf("retransmission after Release: %+v, %v", again, err)
	}
	if n, err := d.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("Recover = %d, %v; want 0 (released)", n, err)
	}
	// Not before the retention period has passed.
	w.advance(59 * time.Minute)
	if n, err := d.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep within retention = %d, %v; want 0", n, err)
	}
	w.advance(2 * time.Minute)
	if n, err := d.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep after retention = %d, %v; want 1", n, err)
	}
	if _, err := s.Get(ctx, o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the sweep = %v; want ErrNotFound", err)
	}
	if all, err := d.Flags(ctx, true); err != nil || len(all) != 0 {
		t.Fatalf("flags after the sweep: %+v, %v; want the resolved flag pruned", all, err)
	}
	// A hop that is not accepted cannot be released.
	b2, o2 := w.offer("")
	if _, err := d.Receive(ctx, b2, "ctx", "planner"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Finish(ctx, o2.Iss, o2.Hop, delegate.Outcome{State: store.Completed}); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, o2.Iss, o2.Hop, "why not"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Release of a completed hop = %v; want ErrConflict", err)
	}
}

// raced is a real store in which another replica claims the hop just
// before this delegate does.
type raced struct {
	store.Store
	first func(r *store.Record) *store.Record // the other replica's record
}

func (x raced) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	if _, _, err := x.Store.Claim(ctx, x.first(r)); err != nil {
		return nil, false, err
	}
	return x.Store.Claim(ctx, r)
}

// When the claim finds the hop already recorded by another claim, the
// offer is a retransmission or equivocation of that one (decision 13),
// and the Answer and its Result agree on it.
func TestLostClaimOutcomeAgrees(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		same bool
		want handoff.Outcome
	}{{"same offer", true, handoff.Retransmission}, {"different offer", false, handoff.Equivocation}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			mem := w.freshStore()
			var other []byte
			first := func(r *store.Record) *store.Record {
				o := *r
				if !c.same {
					ob, _ := w.offer(r.Hop)
					h, err := handoff.ParseHandoff(ob, handoff.Limits{})
					if err != nil {
						t.Fatal(err)
					}
					o.Offer, o.Digest = h.Offer.Octets, h.Offer.Digest()
				}
				o.State, o.Status = store.Received, nil // the other replica defers
				other = o.Digest.Val
				return &o
			}
			d := w.delegate(raced{mem, first}, nil)
			b, _ := w.offer("")
			a, err := d.Receive(ctx, b, "ctx", "planner")
			if err != nil {
				t.Fatal(err)
			}
			if a.Take || a.Outcome != c.want || a.Result.Outcome != c.want {
				t.Fatalf("Answer.Outcome %s, Result.Outcome %s, Take %v; want both %s, not taken", a.Outcome, a.Result.Outcome, a.Take, c.want)
			}
			if a.Result.Remembered == nil || !bytes.Equal(a.Result.Remembered.Val, other) {
				t.Fatalf("Result.Remembered = %v; want the first claim's digest", a.Result.Remembered)
			}
			if c.want == handoff.Equivocation && (a.Result.Reason != handoff.ReasonEquivocation || a.Result.Err == nil) {
				t.Fatalf("Result reason %q, err %v; want equivocation", a.Result.Reason, a.Result.Err)
			}
		})
	}
}

// Lifecycle: a deferred hop is rejected only with a reason, and never
// "stale" or "replay" (those are for offers the delegate does not
// remember); "Knowing the Outcome": a failed outcome is either "no
// effect" or lists what took effect, never both, and a completed one is
// never "no effect".
func TestDecisionChecks(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.freshStore()
	d := w.delegate(s, func(c *delegate.Config) { c.Defer = true })
	b, o := w.offer("")
	if _, err := d.Receive(ctx, b, "ctx", "planner"); err != nil {
		t.Fatal(err)
	}
	for _, reason := range []handoff.Reason{"", handoff.ReasonStale, handoff.ReasonReplay} {
		if st, err := d.Reject(ctx, o.Iss, o.Hop, reason); err == nil || st != nil || !strings.Contains(err.Error(), o.Hop) {
			t.Errorf("Reject(%q) = %v, %v; want an error naming the hop", reason, st, err)
		}
	}
	if r, _ := s.Get(ctx, o.Iss, o.Hop); r.State != store.Received {
		t.Fatalf("state %s after refused rejections", r.State)
	}
	st, err := d.Accept(ctx, o.Iss, o.Hop)
	if err != nil || statusOf(t, w, st, b).State != handoff.StateAccepted {
		t.Fatalf("Accept: %v", err)
	}
	ref := handoff.ContextRef{Kind: handoff.KindDigest, Dig: handoff.DigestOf([]byte("one file written"))}
	for _, out := range []delegate.Outcome{
		{State: store.Failed, NoEffect: true, Refs: []handoff.ContextRef{ref}},
		{State: store.Completed, NoEffect: true},
		{State: store.Failed},
		{State: store.Accepted},
	} {
		if st, err := d.Finish(ctx, o.Iss, o.Hop, out); err == nil {
			t.Errorf("Finish(%+v) = %v; want an error", out, st)
		}
	}
	if r, _ := s.Get(ctx, o.Iss, o.Hop); r.State != store.Accepted {
		t.Fatalf("state %s after refused outcomes", r.State)
	}
	if _, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Failed, Refs: []handoff.ContextRef{ref}}); err != nil {
		t.Fatal(err)
	}
}

// acceptFirst is a real store in which the application's Accept of a
// deferred hop lands just before an equivocation's rejection of it.
type acceptFirst struct{ store.Store }

func (x acceptFirst) Transition(ctx context.Context, m store.Move) error {
	if m.Mark == store.MarkAny && m.From == store.Received && m.To == store.Rejected {
		acc := store.Move{Iss: m.Iss, Hop: m.Hop, From: store.Received, To: store.Accepted, Status: []byte("accepted by Accept"), Form: m.Form, Now: m.Now}
		if err := x.Store.Transition(ctx, acc); err != nil {
			return err
		}
	}
	return x.Store.Transition(ctx, m)
}

// "Forks, Concurrency, and Equivocation" on a deferred hop: the first
// offer's rejection (reason equivocation) is in the Answer's record; and
// when Accept wins the race, the hop is handled as taken work: stopped,
// not rejected, and flagged.
func TestEquivocationOfDeferredHop(t *testing.T) {
	ctx := context.Background()
	t.Run("the first is rejected, as the record shows", func(t *testing.T) {
		w := newWorld(t)
		d := w.delegate(w.freshStore(), func(c *delegate.Config) { c.Defer = true })
		b, o := w.offer("")
		if _, err := d.Receive(ctx, b, "ctx", "planner"); err != nil {
			t.Fatal(err)
		}
		b2, _ := w.offer(o.Hop)
		a, err := d.Receive(ctx, b2, "ctx", "planner")
		if err != nil || a.Outcome != handoff.Equivocation || a.Status != nil || a.Record == nil {
			t.Fatalf("%+v %v", a, err)
		}
		if a.Record.State != store.Rejected || !a.Record.Equivocated {
			t.Fatalf("Answer.Record: state %s, equivocated %v; want rejected, equivocated", a.Record.State, a.Record.Equivocated)
		}
		st := &handoff.Element{Form: a.Record.StatusForm, Octets: a.Record.Status}
		if got := statusOf(t, w, st, b); got.State != handoff.StateRejected || got.Reason != handoff.ReasonEquivocation {
			t.Fatalf("recorded status %+v", got)
		}
	})
	t.Run("Accept wins the race: stopped, not rejected", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		var stopped []string
		d := w.delegate(acceptFirst{mem}, func(c *delegate.Config) {
			c.Defer = true
			c.Stop = func(_, hop string) { stopped = append(stopped, hop) }
		})
		b, o := w.offer("")
		if _, err := d.Receive(ctx, b, "ctx", "planner"); err != nil {
			t.Fatal(err)
		}
		b2, _ := w.offer(o.Hop)
		a, err := d.Receive(ctx, b2, "ctx", "planner")
		if err != nil || a.Outcome != handoff.Equivocation || a.Status != nil {
			t.Fatalf("%+v %v", a, err)
		}
		if len(stopped) != 1 || stopped[0] != o.Hop {
			t.Fatalf("stopped %v; want the hop stopped once", stopped)
		}
		if a.Record.State != store.Accepted || !a.Record.Equivocated {
			t.Fatalf("Answer.Record: state %s, equivocated %v; want accepted, equivocated", a.Record.State, a.Record.Equivocated)
		}
		if r, _ := mem.Get(ctx, o.Iss, o.Hop); r.State != store.Accepted {
			t.Fatalf("record state %s; want accepted", r.State)
		}
		expectFlag(t, d, store.FlagEquivocation)
	})
}

// "Replay and Freshness" in a fleet: when another process sharing the
// store drops its records (Forget), this delegate's restart rule follows
// at its next Sweep.
func TestSinceFollowsTheStore(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.freshStore()
	d := w.delegate(s, nil)
	before1, _ := w.offer("")
	before2, _ := w.offer("")
	w.advance(time.Second)
	if err := s.Forget(ctx, w.clock()); err != nil { // another replica's Forget
		t.Fatal(err)
	}
	w.advance(time.Second)
	// Not yet seen: the old Since still applies.
	if a, err := d.Receive(ctx, before1, "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("before the Sweep: %+v, %v", a, err)
	}
	if _, err := d.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := d.Receive(ctx, before2, "ctx", "planner")
	if err != nil || a.Take || a.Outcome != handoff.Rejected || statusOf(t, w, a.Status, before2).Reason != handoff.ReasonReplay {
		t.Fatalf("after the Sweep: %+v, %v; want rejected replay", a, err)
	}
}

// A cancel that overtakes its offer is held only when its signature
// verifies with a key bound to its iss; one delegator flooding early
// cancels pushes out only its own oldest, never another's.
func TestHeldCancelsBounded(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.addAgent("tester")
	d := w.delegate(w.freshStore(), nil)

	n := w.clock().Unix()
	to := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: "tester", Aud: "coder", Iat: n, Exp: n + 120}
	el, err := w.signers["tester"].SignOffer(to, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	cancelOf := func(signer, iss string, offer handoff.Digest) handoff.Element {
		c, err := w.signers[signer].SignStatus(&handoff.Status{Offer: offer, Iss: iss, Aud: "coder", Iat: w.clock().Unix(),
			State: handoff.StateCanceled}, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if _, err := d.Cancel(ctx, cancelOf("tester", "tester", el.Digest()), "tester", to.Hop); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "held") {
		t.Fatalf("early cancel: %v", err)
	}
	// A cancel not signed by a key bound to its iss is not held.
	pb, po := w.offer("")
	ph, _ := handoff.ParseHandoff(pb, handoff.Limits{})
	if _, err := d.Cancel(ctx, cancelOf("coder", "planner", ph.Offer.Digest()), po.Iss, po.Hop); err == nil || !strings.Contains(err.Error(), "not held") {
		t.Fatalf("forged early cancel: %v; want it not held", err)
	}
	// The planner's real early cancel, then a flood of early cancels for
	// offers that never come, then another real one.
	oldest, _ := w.offer("")
	oh, _ := handoff.ParseHandoff(oldest, handoff.Limits{})
	d.Cancel(ctx, cancelOf("planner", "planner", oh.Offer.Digest()), "planner", "oldest")
	for i := range 300 {
		d.Cancel(ctx, cancelOf("planner", "planner", handoff.DigestOf([]byte{byte(i), byte(i >> 8)})), "planner", "flood")
	}
	latest, _ := w.offer("")
	lh, _ := handoff.ParseHandoff(latest, handoff.Limits{})
	d.Cancel(ctx, cancelOf("planner", "planner", lh.Offer.Digest()), "planner", "latest")
	// The planner's own bound pushed out its oldest cancel, not its latest.
	if a, err := d.Receive(ctx, latest, "ctx", "planner"); err != nil || a.Take || a.Outcome != handoff.Rejected {
		t.Fatalf("the planner's latest canceled offer: %+v, %v; want rejected", a, err)
	}
	if a, err := d.Receive(ctx, oldest, "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("the planner's oldest canceled offer: %+v, %v; want taken (its cancel was pushed out by the planner's own flood)", a, err)
	}
	// The tester's offer arrives: its cancel is still held.
	a, err := d.Receive(ctx, tb, "ctx", "planner")
	if err != nil || a.Take || a.Outcome != handoff.Rejected || statusOf(t, w, a.Status, tb).Reason != handoff.ReasonPolicy {
		t.Fatalf("the tester's offer after its cancel and a flood: %+v, %v; want rejected (policy)", a, err)
	}
	// The planner's offer, whose forged cancel was not held, is taken.
	if a, err := d.Receive(ctx, pb, "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("offer after a forged cancel: %+v, %v", a, err)
	}
}
