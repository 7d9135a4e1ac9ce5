package delegate_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
)

// Races between the calls of one hop, each injected by a real store
// wrapped so that the other caller's write lands at the worst moment.

// cancelStatus signs the planner's "canceled" for the offer b.
func cancelStatus(t *testing.T, w *world, b []byte) handoff.Element {
	t.Helper()
	h, err := handoff.ParseHandoff(b, handoff.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := w.signers["planner"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "planner", Aud: "coder",
		Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openStores returns the stores a test runs on: memory and SQLite (the
// delegate's behaviour must not depend on which).
func openStores(t *testing.T, w *world) map[string]store.Store {
	sq, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hops.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	if err := sq.Forget(context.Background(), w.clock().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	return map[string]store.Store{"memory": w.freshStore(), "sqlite": sq}
}

// onAccept is a real store that runs hook right after a deferred hop is
// moved to "accepted" (before Accept returns).
type onAccept struct {
	store.Store
	hook func()
}

func (x *onAccept) Transition(ctx context.Context, m store.Move) error {
	return x.after(x.Store.Transition(ctx, m), m.From, m.To)
}

func (x *onAccept) after(err error, from, to store.State) error {
	if err == nil && from == store.Received && to == store.Accepted && x.hook != nil {
		h := x.hook
		x.hook = nil
		h()
	}
	return err
}

// "Forks, Concurrency, and Equivocation" with Config.Defer: a second offer
// seen before Accept (the hop is marked, not yet rejected) gets the first
// "rejected" with reason equivocation; one that arrives between the move
// to "accepted" and Accept returning finds the hop accepted (Stop comes
// before any work), and Accept records it "failed", reason equivocation,
// no refs: the work never began. Either way Accept's error wraps
// ErrEquivocated, so the application never starts it.
func TestAcceptRacesEquivocation(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		during bool
		state  store.State
	}{{"equivocated before Accept", false, store.Rejected}, {"equivocated during Accept", true, store.Failed}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			mem := w.freshStore()
			s := &onAccept{Store: mem}
			var stopped []string
			d := w.delegate(s, func(cfg *delegate.Config) {
				cfg.Defer = true
				cfg.Stop = func(_, hop string) { stopped = append(stopped, hop) }
			})
			b, o := w.offer("")
			if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || a.Record.State != store.Received {
				t.Fatalf("%+v %v", a, err)
			}
			b2, _ := w.offer(o.Hop)
			if c.during {
				s.hook = func() {
					if a, err := d.Receive(ctx, b2, "ctx", "planner"); err != nil || a.Outcome != handoff.Equivocation || a.Status != nil {
						t.Errorf("the equivocating offer: %+v, %v", a, err)
					}
				}
			} else if err := mem.MarkEquivocated(ctx, o.Iss, o.Hop); err != nil {
				// The equivocation handler has marked the hop and not yet
				// rejected it.
				t.Fatal(err)
			}
			st, err := d.Accept(ctx, o.Iss, o.Hop)
			if !errors.Is(err, delegate.ErrEquivocated) || errors.Is(err, delegate.ErrCanceled) {
				t.Fatalf("Accept of an equivocated hop = %v; want ErrEquivocated only", err)
			}
			got := statusOf(t, w, st, b)
			if got.State != handoff.State(c.state) || got.Reason != handoff.ReasonEquivocation || len(got.Refs) != 0 {
				t.Fatalf("status %+v; want %s, reason equivocation, no refs", got, c.state)
			}
			r, err := mem.Get(ctx, o.Iss, o.Hop)
			if err != nil || r.State != c.state || !r.Equivocated || !bytes.Equal(r.Status, st.Octets) {
				t.Fatalf("record %+v, %v; want %s with the status Accept returned", r, err, c.state)
			}
			if c.during {
				if len(stopped) != 1 {
					t.Fatalf("stopped %v; want the hop stopped once", stopped)
				}
				expectFlag(t, d, store.FlagEquivocation)
			}
		})
	}
}

// noFlags is a real store whose Raise fails.
type noFlags struct{ store.Store }

var errNoFlag = errors.New("flags table unavailable")

func (noFlags) Raise(context.Context, store.Flag) (int64, error) { return 0, errNoFlag }

// "Knowing the Outcome" after a claim as accepted that reported an error
// and whose re-read found no record: the commit may still land, so the
// hop is flagged "unknown outcome" anyway, and when it does land the hop
// is not accepted unseen. If the flag cannot be raised either, both
// errors are returned.
func TestClaimLostNothingFound(t *testing.T) {
	ctx := context.Background()
	t.Run("the commit lands later: flagged", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		var claimed *store.Record
		d := w.delegate(&lossy{Store: mem, before: func(r *store.Record) { c := *r; claimed = &c }}, nil)
		b, o := w.offer("")
		if a, err := d.Receive(ctx, b, "ctx", "planner"); !errors.Is(err, errReset) || a != nil {
			t.Fatalf("Receive = %+v, %v; want the claim's error", a, err)
		}
		if _, stored, err := mem.Claim(ctx, claimed); err != nil || !stored { // the late commit
			t.Fatalf("late claim: %v %v", stored, err)
		}
		if r, err := mem.Get(ctx, o.Iss, o.Hop); err != nil || r.State != store.Accepted {
			t.Fatalf("record %+v %v", r, err)
		}
		if n := unknownFlags(t, d, o.Hop); n != 1 {
			t.Fatalf("%d unknown-outcome flags for a hop accepted with nobody working on it; want 1", n)
		}
	})
	t.Run("the flag fails too: both errors", func(t *testing.T) {
		w := newWorld(t)
		d := w.delegate(noFlags{&lossy{Store: w.freshStore()}}, nil)
		b, o := w.offer("")
		_, err := d.Receive(ctx, b, "ctx", "planner")
		if !errors.Is(err, errReset) || !errors.Is(err, errNoFlag) || !strings.Contains(err.Error(), o.Hop) {
			t.Fatalf("Receive = %v; want the claim's error and the flag's, naming the hop", err)
		}
	})
	t.Run("a deferred claim is not flagged", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		d := w.delegate(&lossy{Store: mem}, func(c *delegate.Config) { c.Defer = true })
		b, o := w.offer("")
		if _, err := d.Receive(ctx, b, "ctx", "planner"); !errors.Is(err, errReset) {
			t.Fatalf("Receive = %v; want the claim's error", err)
		}
		if n := unknownFlags(t, d, o.Hop); n != 0 {
			t.Fatalf("%d unknown-outcome flags for a hop claimed received (no work); want 0", n)
		}
	})
}

// markAfterGet is a real store in which a second offer for the hop is
// marked just after the first read of the hop.
type markAfterGet struct {
	store.Store
	hop string
}

func (x *markAfterGet) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	r, err := x.Store.Get(ctx, iss, hop)
	if err == nil && hop == x.hop {
		x.hop = ""
		if err := x.Store.MarkEquivocated(ctx, iss, hop); err != nil {
			return nil, err
		}
	}
	return r, err
}

// "Forks, Concurrency, and Equivocation": once a hop is equivocated, its
// "failed" carries reason "equivocation". Finish reads, signs, then
// records: an equivocation marked in between makes it sign again, with
// that reason, on every store.
func TestFinishRacesEquivocation(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	for name, s := range openStores(t, w) {
		t.Run(name, func(t *testing.T) {
			ms := &markAfterGet{Store: s}
			d := w.delegate(ms, nil)
			b, o := w.offer("")
			if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
				t.Fatalf("%+v %v", a, err)
			}
			ref := handoff.ContextRef{Kind: handoff.KindDigest, Dig: handoff.DigestOf([]byte("half the files written"))}
			ms.hop = o.Hop
			st, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Failed, Reason: handoff.ReasonPolicy, Refs: []handoff.ContextRef{ref}})
			if err != nil {
				t.Fatal(err)
			}
			if got := statusOf(t, w, st, b); got.State != handoff.StateFailed || got.Reason != handoff.ReasonEquivocation || len(got.Refs) != 1 {
				t.Fatalf("status %+v; want failed, reason equivocation, the ref", got)
			}
			r, err := s.Get(ctx, o.Iss, o.Hop)
			if err != nil || r.State != store.Failed || !bytes.Equal(r.Status, st.Octets) {
				t.Fatalf("record %+v %v; want failed with the returned status", r, err)
			}
		})
	}
}

// releaseOnList is a real store in which the operator releases every hop
// that Recover lists, just after it lists it.
type releaseOnList struct {
	store.Store
	operator *delegate.Delegate
}

func (x releaseOnList) List(ctx context.Context, q store.HopQuery) ([]*store.Record, error) {
	page, err := x.Store.List(ctx, q)
	for _, r := range page {
		if err := x.operator.Release(ctx, r.Iss, r.Hop, "the ledger cannot say"); err != nil {
			return nil, err
		}
	}
	return page, err
}

// "Knowing the Outcome": a hop the operator released while Recover ran is
// settled; Recover leaves no open unknown-outcome flag on it.
func TestRecoverRacesRelease(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	mem := w.freshStore()
	operator := w.delegate(mem, nil)
	d := w.delegate(releaseOnList{mem, operator}, nil)
	b, o := w.offer("")
	if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("%+v %v", a, err)
	}
	if n, err := d.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("Recover = %d, %v; want 0 (released meanwhile)", n, err)
	}
	if n := unknownFlags(t, d, o.Hop); n != 0 {
		t.Fatalf("%d open unknown-outcome flags on a released hop; want 0", n)
	}
}

// crossAccept is a real store in which a delegator's cancel and the
// application's Accept interleave: the cancel's mark lands just after
// the move to "accepted", and Accept finishes (and records the hop failed)
// before the cancel re-reads the hop.
type crossAccept struct {
	store.Store
	accepted, marked, done chan struct{}
}

func (x *crossAccept) Transition(ctx context.Context, m store.Move) error {
	return x.after(x.Store.Transition(ctx, m), m.From, m.To)
}

func (x *crossAccept) after(err error, from, to store.State) error {
	if from == store.Received && to == store.Accepted {
		close(x.accepted)
		<-x.marked
	}
	return err
}

func (x *crossAccept) MarkCanceled(ctx context.Context, iss, hop string) error {
	<-x.accepted
	err := x.Store.MarkCanceled(ctx, iss, hop)
	close(x.marked)
	<-x.done
	return err
}

// acceptOnMark is a real store in which Accept runs right after a
// cancel's mark, before the cancel re-reads the hop.
type acceptOnMark struct {
	store.Store
	accept func()
}

func (x acceptOnMark) MarkCanceled(ctx context.Context, iss, hop string) error {
	err := x.Store.MarkCanceled(ctx, iss, hop)
	x.accept()
	return err
}

// Lifecycle: a cancel that races Accept ends the hop without effect
// (rejected, or failed with no refs), and Accept says so. The cancel
// finds the hop terminal, as one crossing a real outcome would, and is
// flagged conflicting inputs like it (failing safe: the operator sees
// every cancel that met a terminal hop; the delegator simulation
// expects that flag).
func TestCancelRacesAccept(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		state store.State
	}{{"Accept sees the mark: rejected", store.Rejected}, {"the mark lands during Accept: failed", store.Failed}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			mem := w.freshStore()
			var d *delegate.Delegate
			var s store.Store
			var acceptErr error
			b, o := w.offer("")
			accept := func() { _, acceptErr = d.Accept(ctx, o.Iss, o.Hop) }
			if c.state == store.Rejected {
				s = acceptOnMark{mem, accept}
			} else {
				x := &crossAccept{Store: mem, accepted: make(chan struct{}), marked: make(chan struct{}), done: make(chan struct{})}
				s = x
				accept = func() {
					go func() {
						defer close(x.done)
						_, acceptErr = d.Accept(ctx, o.Iss, o.Hop)
					}()
				}
			}
			d = w.delegate(s, func(cfg *delegate.Config) { cfg.Defer = true })
			if _, err := d.Receive(ctx, b, "ctx", "planner"); err != nil {
				t.Fatal(err)
			}
			if c.state == store.Failed {
				accept()
			}
			cancel := cancelStatus(t, w, b)
			if _, err := d.Cancel(ctx, cancel, o.Iss, o.Hop); err != nil {
				t.Fatal(err)
			}
			if !errors.Is(acceptErr, delegate.ErrCanceled) {
				t.Fatalf("Accept = %v; want ErrCanceled", acceptErr)
			}
			if r, err := mem.Get(ctx, o.Iss, o.Hop); err != nil || r.State != c.state {
				t.Fatalf("record %+v %v; want %s", r, err, c.state)
			}
			// The cancel asked again, on the store as it now is.
			if _, err := w.delegate(mem, nil).Cancel(ctx, cancel, o.Iss, o.Hop); err != nil {
				t.Fatal(err)
			}
			flags, err := d.Flags(ctx, false)
			if err != nil || len(flags) == 0 {
				t.Fatalf("flags %+v, %v; want conflicting inputs", flags, err)
			}
			for _, f := range flags {
				if f.Kind != store.FlagConflictingInputs || f.Iss != o.Iss || f.Hop != o.Hop {
					t.Fatalf("flag %+v; want conflicting inputs for the hop", f)
				}
			}
		})
	}
}

// Lifecycle, "canceled" from offered: an early cancel from another
// trusted issuer naming the same offer does not push out the delegator's
// own, so the offer, when it arrives, is still refused.
func TestHeldCancelNotReplacedByAnotherIssuer(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.addAgent("tester")
	d := w.delegate(w.freshStore(), nil)
	b, o := w.offer("")
	h, _ := handoff.ParseHandoff(b, handoff.Limits{})
	if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the planner's early cancel: %v", err)
	}
	other, err := w.signers["tester"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "tester", Aud: "coder",
		Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Cancel(ctx, other, o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "held") {
		t.Fatalf("the tester's early cancel: %v", err)
	}
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || a.Take || a.Outcome != handoff.Rejected || statusOf(t, w, a.Status, b).Reason != handoff.ReasonPolicy {
		t.Fatalf("the offer after its delegator's cancel: %+v, %v; want rejected (policy)", a, err)
	}
}

// Errors about one hop name it, iss and hop, and still match their
// sentinel.
func TestErrorsNameIssAndHop(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	stores := openStores(t, w)
	sq := stores["sqlite"]
	d := w.delegate(sq, nil)
	b, o := w.offer("")
	if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("%+v %v", a, err)
	}
	named := func(what string, err, sentinel error) {
		t.Helper()
		if err == nil || (sentinel != nil && !errors.Is(err, sentinel)) {
			t.Errorf("%s = %v; want an error matching %v", what, err, sentinel)
			return
		}
		if msg := err.Error(); !strings.Contains(msg, o.Hop) || !strings.Contains(msg, o.Iss) {
			t.Errorf("%s = %q; want it to name hop %s of %q", what, msg, o.Hop, o.Iss)
		}
	}
	_, err := d.Accept(ctx, o.Iss, o.Hop)
	named("Accept of an accepted hop", err, store.ErrConflict)
	_, err = d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Completed, NoEffect: true})
	named("Finish with a bad outcome", err, nil)
	forged, _ := w.signers["coder"].SignStatus(&handoff.Status{Offer: handoff.DigestOf(b), Iss: "coder", Aud: "planner",
		Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	_, err = d.Cancel(ctx, forged, o.Iss, o.Hop)
	named("Cancel that does not verify", err, nil)
	if _, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Completed}); err != nil {
		t.Fatal(err)
	}
	named("Unknown of a completed hop", d.Unknown(ctx, o.Iss, o.Hop, "why"), store.ErrConflict)
	named("Release of a completed hop", d.Release(ctx, o.Iss, o.Hop, "why"), store.ErrConflict)
	// A claim given up before it was written (the SQL store's claim path).
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = sq.Claim(gone, &store.Record{Iss: o.Iss, Hop: o.Hop, Digest: handoff.DigestOf(b), Offer: b, State: store.Received})
	named("Claim with an ended context", err, context.Canceled)
}

// failClaimOnce is a real store whose first claim fails before writing
// anything (a connection reset before the statement ran).
type failClaimOnce struct {
	store.Store
	failed bool
}

func (x *failClaimOnce) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	if !x.failed {
		x.failed = true
		return nil, false, errReset
	}
	return x.Store.Claim(ctx, r)
}

// duringClaim is a real store that runs hook inside a claim: before the
// record is written, or (commitFirst) once it is, the claim then
// returning what the write returned.
type duringClaim struct {
	store.Store
	hook        func()
	commitFirst bool
}

func (x *duringClaim) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	h := x.hook
	x.hook = nil
	if h == nil {
		return x.Store.Claim(ctx, r)
	}
	if !x.commitFirst {
		h()
		return x.Store.Claim(ctx, r)
	}
	got, stored, err := x.Store.Claim(ctx, r)
	h()
	return got, stored, err
}

// claimDuringCancel is a real store in which a claim runs cancel before
// writing, and the write is tried when that cancel reads the hop a second
// time (after holding the cancel, having found no record the first time).
type claimDuringCancel struct {
	store.Store
	cancel  func()
	pending *store.Record
	gets    int
	got     *store.Record
	stored  bool
	err     error
}

func (x *claimDuringCancel) Claim(ctx context.Context, r *store.Record) (*store.Record, bool, error) {
	c := x.cancel
	x.cancel = nil
	if c == nil {
		return x.Store.Claim(ctx, r)
	}
	x.pending = r
	c()
	if x.pending != nil {
		x.pending = nil
		return x.Store.Claim(ctx, r)
	}
	return x.got, x.stored, x.err
}

func (x *claimDuringCancel) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	if r := x.pending; r != nil {
		if x.gets++; x.gets == 2 {
			x.pending = nil
			x.got, x.stored, x.err = x.Store.Claim(ctx, r)
		}
	}
	return x.Store.Get(ctx, iss, hop)
}

// commitOnSecondGet is a real store that runs hook just before its second
// read of a hop (a cancel's read after holding).
type commitOnSecondGet struct {
	store.Store
	gets int
	hook func()
}

func (x *commitOnSecondGet) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	if x.gets++; x.gets == 2 && x.hook != nil {
		h := x.hook
		x.hook = nil
		h()
	}
	return x.Store.Get(ctx, iss, hop)
}

// Lifecycle, offered -> canceled: a cancel that overtook its offer is
// never lost to a race, a failed claim, or the same offer delivered twice
// at once. The work is not taken (the cancel was held before the claim,
// which the store then refuses), or it is stopped before it begins (the
// claim committed first, and the cancel finds the hop).
func TestHeldCancelNeverLost(t *testing.T) {
	ctx := context.Background()
	wantCanceled := func(t *testing.T, mem store.Store, o *handoff.Offer, state store.State) {
		t.Helper()
		r, err := mem.Get(ctx, o.Iss, o.Hop)
		if err != nil || !r.Canceled || r.State != state {
			t.Fatalf("record %+v, %v; want %s and canceled", r, err, state)
		}
	}
	t.Run("the claim fails: the cancel stays held for the offer asked again", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		d := w.delegate(&failClaimOnce{Store: mem}, nil)
		b, o := w.offer("")
		if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("early cancel: %v", err)
		}
		if _, err := d.Receive(ctx, b, "ctx", "planner"); !errors.Is(err, errReset) {
			t.Fatalf("first delivery: %v; want the claim's error", err)
		}
		a, err := d.Receive(ctx, b, "ctx", "planner")
		if err != nil || a.Take || a.Outcome != handoff.Rejected || statusOf(t, w, a.Status, b).Reason != handoff.ReasonPolicy {
			t.Fatalf("asked again: %+v, %v; want rejected policy, not taken", a, err)
		}
		wantCanceled(t, mem, o, store.Rejected)
	})
	t.Run("the cancel is held just before the claim writes: the claim is refused, rejected policy, not taken", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		s := &duringClaim{Store: mem}
		stops := 0
		d := w.delegate(s, func(c *delegate.Config) { c.Stop = func(string, string) { stops++ } })
		b, o := w.offer("")
		s.hook = func() {
			if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("cancel before the claim's write: %v; want held", err)
			}
		}
		a, err := d.Receive(ctx, b, "ctx", "planner")
		if err != nil || a.Take || a.Status == nil {
			t.Fatalf("Receive: %+v, %v; want not taken, with a status", a, err)
		}
		// The store refused the claim for the held cancel (store.Store.Claim),
		// which verified against the offer: a policy refusal, with the
		// record as stored; the receiver's verdict stays accepted.
		if a.Outcome != handoff.Rejected || a.Reason != handoff.ReasonPolicy || a.Result.Outcome != handoff.Accepted ||
			a.Record == nil || a.Record.State != store.Rejected || !bytes.Equal(a.Record.Status, a.Status.Octets) {
			t.Fatalf("answer %s %s (result %s), record %+v; want a policy refusal carrying the rejected record, the verdict accepted", a.Outcome, a.Reason, a.Result.Outcome, a.Record)
		}
		st := statusOf(t, w, a.Status, b)
		if st.State != handoff.StateRejected || st.Reason != handoff.ReasonPolicy {
			t.Fatalf("status %+v; want rejected policy", st)
		}
		wantCanceled(t, mem, o, store.Rejected)
		if stops != 0 {
			t.Fatalf("Stop called %d times for work never handed out", stops)
		}
		if flags, err := d.Flags(ctx, false); err != nil || len(flags) != 0 {
			t.Fatalf("flags %+v, %v; want none (nothing crossed: the work was never handed out)", flags, err)
		}
	})
	t.Run("the claim writes between the cancel's hold and its read of the hop: refused, rejected policy, never begun", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		s := &claimDuringCancel{Store: mem}
		var stopped []string
		d := w.delegate(s, func(c *delegate.Config) { c.Stop = func(_, hop string) { stopped = append(stopped, hop) } })
		b, o := w.offer("")
		s.cancel = func() {
			// The claim's write, after the hold, is refused for it: the
			// cancel's read of the hop finds nothing, and it stays held.
			if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Cancel: %v; want held until the offer arrives", err)
			}
			if !errors.Is(s.err, store.ErrCancelHeld) {
				t.Errorf("the claim after the hold: %v; want store.ErrCancelHeld", s.err)
			}
		}
		a, err := d.Receive(ctx, b, "ctx", "planner")
		if err != nil || a.Take || a.Outcome != handoff.Rejected || a.Reason != handoff.ReasonPolicy {
			t.Fatalf("Receive: %+v, %v; want rejected policy, not taken", a, err)
		}
		if len(stopped) != 0 {
			t.Fatalf("Stop calls %v; want none (the work was never handed out)", stopped)
		}
		wantCanceled(t, mem, o, store.Rejected)
	})
	t.Run("a cancel naming only the offer, after its claim: it finds the hop and stops the work", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		var stopped []string
		d := w.delegate(mem, func(c *delegate.Config) { c.Stop = func(_, hop string) { stopped = append(stopped, hop) } })
		b, o := w.offer("")
		if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
			t.Fatalf("Receive: %+v, %v; want taken", a, err)
		}
		// A host that knows only the digest the cancel names passes no hop.
		r, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, "")
		if err != nil || !r.Canceled || r.Hop != o.Hop || len(stopped) != 1 {
			t.Fatalf("Cancel: %v, Stop calls %v; want the hop found, canceled and stopped", err, stopped)
		}
		wantCanceled(t, mem, o, store.Accepted)
	})
	t.Run("a held cancel that does not verify is not reported applied", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		g := &commitOnSecondGet{Store: mem}
		stops := 0
		d := w.delegate(g, func(c *delegate.Config) { c.Stop = func(string, string) { stops++ } })
		b, o := w.offer("")
		h, _ := handoff.ParseHandoff(b, handoff.Limits{})
		bad, err := w.signers["planner"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "planner", Aud: "someone-else",
			Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		var a *delegate.Answer
		g.hook = func() { a, _ = d.Receive(ctx, b, "ctx", "planner") }
		if _, err := d.Cancel(ctx, bad, o.Iss, o.Hop); err == nil {
			t.Fatal("a cancel addressed to another agent was accepted")
		}
		if a == nil || !a.Take || stops != 0 {
			t.Fatalf("Receive %+v, Stop calls %d; want taken, not stopped", a, stops)
		}
	})
	t.Run("a held cancel names one offer: another offer for the hop is not canceled by it", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		s := &duringClaim{Store: mem}
		d := w.delegate(s, func(c *delegate.Config) { c.Defer = true })
		bx, o := w.offer("")
		by, _ := w.offer(o.Hop)
		if _, err := d.Cancel(ctx, cancelStatus(t, w, bx), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("early cancel: %v", err)
		}
		s.hook = func() {
			if _, err := d.Receive(ctx, by, "ctx", "planner"); err != nil {
				t.Error(err)
			}
		}
		if _, err := d.Receive(ctx, bx, "ctx", "planner"); err != nil {
			t.Fatal(err)
		}
		if r, _ := mem.Get(ctx, o.Iss, o.Hop); r.Canceled {
			t.Fatalf("record %s, canceled; the other offer's record is canceled by a cancel naming this one", r.State)
		}
		flags, _ := d.Flags(ctx, false)
		for _, f := range flags {
			if f.Kind != store.FlagEquivocation {
				t.Fatalf("flag %+v; want only the equivocation", f)
			}
		}
	})
	t.Run("the offer delivered twice at once: the second delivery does not take it", func(t *testing.T) {
		w := newWorld(t)
		mem := w.freshStore()
		s := &duringClaim{Store: mem}
		d := w.delegate(s, nil)
		b, o := w.offer("")
		if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("early cancel: %v", err)
		}
		var second *delegate.Answer
		s.hook = func() {
			var err error
			if second, err = d.Receive(ctx, b, "ctx", "planner"); err != nil {
				t.Errorf("second delivery: %v", err)
			}
		}
		first, err := d.Receive(ctx, b, "ctx", "planner")
		if err != nil || first.Take || second == nil || second.Take {
			t.Fatalf("deliveries %+v, %+v, %v; want neither taken", first, second, err)
		}
		wantCanceled(t, mem, o, store.Rejected)
	})
}

// acceptThenFail is a real store in which a cancel's mark lands right
// after a deferred hop is moved to "accepted", and recording its "failed"
// then fails.
type acceptThenFail struct{ store.Store }

func (x acceptThenFail) Transition(ctx context.Context, m store.Move) error {
	if m.Mark == store.MarkAny { // only the application's decisions, conditional on the mark
		return x.Store.Transition(ctx, m)
	}
	if m.To == store.Failed {
		return errReset
	}
	err := x.Store.Transition(ctx, m)
	if err == nil && m.To == store.Accepted {
		err = x.Store.MarkCanceled(ctx, m.Iss, m.Hop)
	}
	return err
}

// Knowing the Outcome: a hop accepted as it was canceled, whose "failed"
// (no effect) cannot be recorded, stays "accepted" with nobody working on
// it, so it is flagged unknown outcome, and Accept still says not to do
// the work.
func TestAcceptCanceledFailureFlagged(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	mem := w.freshStore()
	d := w.delegate(acceptThenFail{mem}, func(c *delegate.Config) { c.Defer = true })
	b, o := w.offer("")
	if _, err := d.Receive(ctx, b, "ctx", "planner"); err != nil {
		t.Fatal(err)
	}
	_, err := d.Accept(ctx, o.Iss, o.Hop)
	if !errors.Is(err, delegate.ErrCanceled) || !errors.Is(err, errReset) || !strings.Contains(err.Error(), o.Hop) {
		t.Fatalf("Accept = %v; want ErrCanceled and the store's error, naming the hop", err)
	}
	if r, _ := mem.Get(ctx, o.Iss, o.Hop); r.State != store.Accepted {
		t.Fatalf("record %s; want still accepted", r.State)
	}
	flags, err := d.Flags(ctx, false)
	if err != nil || len(flags) != 1 || flags[0].Kind != store.FlagUnknownOutcome || flags[0].Hop != o.Hop {
		t.Fatalf("flags %+v, %v; want one unknown outcome for the hop", flags, err)
	}
}

// failRejected is a real store whose moves to "rejected" fail.
type failRejected struct{ store.Store }

func (x failRejected) Transition(ctx context.Context, m store.Move) error {
	if m.Mark == store.MarkAny && m.To == store.Rejected {
		return errReset
	}
	return x.Store.Transition(ctx, m)
}

// "Forks, Concurrency, and Equivocation": every equivocation is flagged,
// even when rejecting the first offer then fails.
func TestEquivocationFlaggedWhenHandlingFails(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	mem := w.freshStore()
	d := w.delegate(failRejected{mem}, func(c *delegate.Config) { c.Defer = true })
	b, o := w.offer("")
	if _, err := d.Receive(ctx, b, "ctx", "planner"); err != nil {
		t.Fatal(err)
	}
	b2, _ := w.offer(o.Hop)
	if _, err := d.Receive(ctx, b2, "ctx", "planner"); !errors.Is(err, errReset) {
		t.Fatalf("second offer: %v; want the store's error", err)
	}
	flags, err := d.Flags(ctx, false)
	if err != nil || len(flags) != 1 || flags[0].Kind != store.FlagEquivocation || !strings.Contains(flags[0].Detail, "failed") {
		t.Fatalf("flags %+v, %v; want one equivocation flag saying its handling failed", flags, err)
	}
}

// markBeforeReject is a real store in which a second offer's mark lands
// just before the application's Reject is stored.
type markBeforeReject struct{ store.Store }

func (x markBeforeReject) Transition(ctx context.Context, m store.Move) error {
	if m.To == store.Rejected && m.Mark == store.MarkClear {
		if err := x.Store.MarkEquivocated(ctx, m.Iss, m.Hop); err != nil {
			return err
		}
	}
	return x.Store.Transition(ctx, m)
}

// "Forks, Concurrency, and Equivocation": a hop not yet taken whose offer
// was equivocated is rejected with reason equivocation, even by a Reject
// signed for another reason just before the mark.
func TestRejectRacesEquivocation(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	mem := w.freshStore()
	d := w.delegate(markBeforeReject{mem}, func(c *delegate.Config) { c.Defer = true })
	b, o := w.offer("")
	if _, err := d.Receive(ctx, b, "ctx", "planner"); err != nil {
		t.Fatal(err)
	}
	st, err := d.Reject(ctx, o.Iss, o.Hop, handoff.ReasonPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if got := statusOf(t, w, st, b); got.State != handoff.StateRejected || got.Reason != handoff.ReasonEquivocation {
		t.Fatalf("status %+v; want rejected, reason equivocation", got)
	}
	if r, _ := mem.Get(ctx, o.Iss, o.Hop); r.State != store.Rejected || !bytes.Equal(r.Status, st.Octets) {
		t.Fatalf("record %+v; want rejected with the status returned", r)
	}
}
