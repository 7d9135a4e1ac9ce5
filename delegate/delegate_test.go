package delegate_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

type world struct {
	t       testing.TB
	keys    *trust.Config
	signers map[string]*handoff.Signer
	now     time.Time
	mu      sync.Mutex
	seq     int // offers signed, for their task (offer)
}

func newWorld(t testing.TB) *world {
	w := &world{t: t, keys: trust.New(), signers: map[string]*handoff.Signer{}, now: time.Unix(1_800_000_000, 0)}
	w.addAgent("planner")
	w.addAgent("coder")
	return w
}

// addAgent gives the agent named n a new key, trusted and able to sign.
func (w *world) addAgent(n string) {
	w.t.Helper()
	k, err := trust.GenerateKey()
	if err != nil {
		w.t.Fatal(err)
	}
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.keys.Add(n, tk); err != nil {
		w.t.Fatal(err)
	}
	if w.signers[n], err = handoff.NewSigner(k); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) advance(d time.Duration) {
	w.mu.Lock()
	w.now = w.now.Add(d)
	w.mu.Unlock()
}

// offer signs a new offer from planner to coder, returning the Handoff
// octets and the payload. Each call signs other content (its task is
// numbered): an offer for a hop given again is an equivocation of the
// first, not its re-signing, which D5 makes a retransmission (see copies_test.go).
func (w *world) offer(hop string) ([]byte, *handoff.Offer) {
	if hop == "" {
		hop = handoff.NewHop()
	}
	n := w.clock().Unix()
	w.mu.Lock()
	w.seq++
	task := fmt.Sprintf("task-%d", w.seq)
	w.mu.Unlock()
	o := &handoff.Offer{Hop: hop, Dialog: "ctx", Task: task, Iss: "planner", Aud: "coder", Iat: n, Exp: n + 120}
	el, err := w.signers["planner"].SignOffer(o, handoff.FormJWS)
	if err != nil {
		w.t.Fatal(err)
	}
	b, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)
	if err != nil {
		w.t.Fatal(err)
	}
	return b, o
}

func (w *world) delegate(s store.Store, mut func(*delegate.Config)) *delegate.Delegate {
	cfg := delegate.Config{
		Options: handoff.Options{Me: "coder", Keys: w.keys, Now: w.clock},
		Store:   s, Signer: w.signers["coder"],
	}
	if mut != nil {
		mut(&cfg)
	}
	d, err := delegate.New(context.Background(), cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	return d
}

// freshStore returns a memory store whose memory began an hour ago, so the
// restart rule does not touch offers issued now.
func (w *world) freshStore() *store.Memory { return store.NewMemory(w.clock().Add(-time.Hour)) }

func statusOf(t testing.TB, w *world, el *handoff.Element, offer []byte) *handoff.Status {
	t.Helper()
	if el == nil {
		t.Fatal("no status")
	}
	h, err := handoff.ParseHandoff(offer, handoff.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := handoff.VerifyStatus(*el, h.Offer, handoff.StatusOptions{Keys: w.keys, Now: w.clock})
	if err != nil {
		t.Fatalf("status does not verify (D9): %v", err)
	}
	return vs.Status
}

// Lifecycle and "Asking Again": a new offer is taken once and answered
// "accepted"; a retransmission is never processed again and gets the
// identical octets of the last status, and only when the host protocol
// authenticated the sender as offer.iss.
func TestRetransmissionAnsweredFromRecord(t *testing.T) {
	w := newWorld(t)
	d := w.delegate(w.freshStore(), nil)
	ctx := context.Background()
	b, o := w.offer("")
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || !a.Take || a.Outcome != handoff.Accepted {
		t.Fatalf("first: %+v %v", a, err)
	}
	if st := statusOf(t, w, a.Status, b); st.State != handoff.StateAccepted {
		t.Fatalf("state %s", st.State)
	}
	accepted := a.Status.Octets
	again, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || again.Take || again.Outcome != handoff.Retransmission || !bytes.Equal(again.Status.Octets, accepted) {
		t.Fatalf("retransmission: %+v %v", again, err)
	}
	// Security "Replay and Freshness": an unauthenticated requester gets nothing.
	if anon, _ := d.Receive(ctx, b, "ctx", ""); anon.Status != nil || anon.Take {
		t.Fatalf("unauthenticated retransmission answered: %+v", anon)
	}
	done, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Completed})
	if err != nil || statusOf(t, w, done, b).State != handoff.StateCompleted {
		t.Fatalf("finish: %v", err)
	}
	// After exp, a retransmission is still answered with the last status.
	w.advance(10 * time.Minute)
	late, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || late.Outcome != handoff.Retransmission || !bytes.Equal(late.Status.Octets, done.Octets) {
		t.Fatalf("late retransmission: %+v %v", late, err)
	}
	// Lifecycle: at most one of completed and failed.
	if _, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Failed, NoEffect: true}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second terminal status: %v", err)
	}
}

// Lifecycle: a rejection after step 4 is recorded with its status and
// resent for a retransmission; a stale rejection is not recorded.
func TestRejections(t *testing.T) {
	w := newWorld(t)
	s := w.freshStore()
	d := w.delegate(s, nil)
	ctx := context.Background()
	b, o := w.offer("")
	a, err := d.Receive(ctx, b, "another-dialog", "planner")
	if err != nil || a.Take || a.Outcome != handoff.Rejected {
		t.Fatalf("%+v %v", a, err)
	}
	if st := statusOf(t, w, a.Status, b); st.State != handoff.StateRejected || st.Reason != handoff.ReasonPolicy {
		t.Fatalf("status %+v", st)
	}
	if r, err := s.Get(ctx, o.Iss, o.Hop); err != nil || r.State != store.Rejected || !bytes.Equal(r.Status, a.Status.Octets) {
		t.Fatalf("record %+v %v", r, err)
	}
	again, _ := d.Receive(ctx, b, "ctx", "planner")
	if again.Outcome != handoff.Retransmission || !bytes.Equal(again.Status.Octets, a.Status.Octets) {
		t.Fatalf("retransmission of a rejected offer: %+v", again)
	}
	// Step 3: stale; not remembered (D5).
	stale, o2 := w.offer("")
	w.advance(5 * time.Minute)
	a, _ = d.Receive(ctx, stale, "ctx", "planner")
	if statusOf(t, w, a.Status, stale).Reason != handoff.ReasonStale {
		t.Fatalf("stale: %+v", a)
	}
	if _, err := s.Get(ctx, o2.Iss, o2.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stale offer recorded: %v", err)
	}
}

// Step 2: an offer for another agent is rejected wrong-audience, and the
// status names this delegate as its iss (the key that signed it), never the
// offer's aud: a status claiming to speak for another agent would be a
// forgery. D9 as amended: the delegator verifies it as the misdelivered
// rejection of a trusted third party, which never sets the hop's state, so
// it learns nothing it could mistake for the real delegate's answer. From
// an agent the delegator does not trust, it does not verify at all.
func TestWrongAudienceStatusNamesItsSigner(t *testing.T) {
	w := newWorld(t)
	w.addAgent("tester")
	d := w.delegate(w.freshStore(), func(c *delegate.Config) { c.Options.Me = "tester"; c.Signer = w.signers["tester"] })
	b, o := w.offer("")
	a, err := d.Receive(context.Background(), b, "ctx", "planner")
	if err != nil || a.Outcome != handoff.Rejected || a.Reason != handoff.ReasonWrongAudience {
		t.Fatalf("%+v %v", a, err)
	}
	_, st, err := handoff.UnsafeDecode(*a.Status)
	if err != nil || st.State != handoff.StateRejected || st.Reason != handoff.ReasonWrongAudience {
		t.Fatalf("status %+v %v", st, err)
	}
	if st.Iss != "tester" || st.Aud != o.Iss {
		t.Fatalf("status iss %q aud %q, want iss tester (its signer) and aud %q", st.Iss, st.Aud, o.Iss)
	}
	h, _ := handoff.ParseHandoff(b, handoff.Limits{})
	vs, err := handoff.VerifyStatus(*a.Status, h.Offer, handoff.StatusOptions{Keys: w.keys, Now: w.clock})
	if err != nil || !vs.Misdelivered || vs.SetsState() {
		t.Fatalf("D9: %+v, %v; want a misdelivered rejection that sets no state", vs, err)
	}
	untrusted := newWorld(t).keys // binds no key to "tester"
	if _, err := handoff.VerifyStatus(*a.Status, h.Offer, handoff.StatusOptions{Keys: untrusted, Now: w.clock}); err == nil {
		t.Fatal("a misdelivered rejection from an agent the delegator does not trust passed D9")
	}
}

// "Forks, Concurrency, and Equivocation", each case the draft names: the
// second offer never gets a status; every case is flagged.
func TestEquivocation(t *testing.T) {
	ctx := context.Background()
	t.Run("not yet taken: the first is rejected with reason equivocation", func(t *testing.T) {
		w := newWorld(t)
		s := w.freshStore()
		d := w.delegate(s, func(c *delegate.Config) { c.Defer = true })
		b, o := w.offer("")
		a, err := d.Receive(ctx, b, "ctx", "planner")
		if err != nil || a.Take || a.Status != nil || a.Record.State != store.Received {
			t.Fatalf("deferred: %+v %v", a, err)
		}
		b2, _ := w.offer(o.Hop)
		a2, err := d.Receive(ctx, b2, "ctx", "planner")
		if err != nil || a2.Outcome != handoff.Equivocation || a2.Status != nil || a2.Take {
			t.Fatalf("second: %+v %v", a2, err)
		}
		r, _ := s.Get(ctx, o.Iss, o.Hop)
		st := &handoff.Element{Form: r.StatusForm, Octets: r.Status}
		if r.State != store.Rejected || statusOf(t, w, st, b).Reason != handoff.ReasonEquivocation {
			t.Fatalf("first not rejected: %+v", r)
		}
		if _, err := d.Accept(ctx, o.Iss, o.Hop); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("accept after equivocation: %v", err)
		}
		expectFlag(t, d, store.FlagEquivocation)
	})
	t.Run("taken and running: stop, then failed with reason equivocation", func(t *testing.T) {
		w := newWorld(t)
		var stopped []string
		d := w.delegate(w.freshStore(), func(c *delegate.Config) { c.Stop = func(_, hop string) { stopped = append(stopped, hop) } })
		b, o := w.offer("")
		if a, _ := d.Receive(ctx, b, "ctx", "planner"); !a.Take {
			t.Fatal("not taken")
		}
		b2, _ := w.offer(o.Hop)
		a2, _ := d.Receive(ctx, b2, "ctx", "planner")
		if a2.Outcome != handoff.Equivocation || a2.Status != nil || len(stopped) != 1 {
			t.Fatalf("second: %+v stopped %v", a2, stopped)
		}
		part := handoff.ContextRef{Kind: handoff.KindDigest, Dig: handoff.DigestOf([]byte("half the files written"))}
		st, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Failed, Refs: []handoff.ContextRef{part}})
		if err != nil {
			t.Fatal(err)
		}
		if s := statusOf(t, w, st, b); s.State != handoff.StateFailed || s.Reason != handoff.ReasonEquivocation || len(s.Refs) != 1 {
			t.Fatalf("status %+v", s)
		}
		expectFlag(t, d, store.FlagEquivocation)
	})
	t.Run("already terminal: no new status", func(t *testing.T) {
		w := newWorld(t)
		s := w.freshStore()
		d := w.delegate(s, nil)
		b, o := w.offer("")
		d.Receive(ctx, b, "ctx", "planner")
		done, _ := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Completed})
		b2, _ := w.offer(o.Hop)
		a2, _ := d.Receive(ctx, b2, "ctx", "planner")
		r, _ := s.Get(ctx, o.Iss, o.Hop)
		if a2.Status != nil || !bytes.Equal(r.Status, done.Octets) {
			t.Fatalf("terminal hop changed: %+v", a2)
		}
		expectFlag(t, d, store.FlagEquivocation)
	})
}

func expectFlag(t *testing.T, d *delegate.Delegate, kind string) {
	t.Helper()
	flags, err := d.Flags(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flags {
		if f.Kind == kind {
			if err := d.Resolve(context.Background(), f.ID, "looked at it"); err != nil {
				t.Fatal(err)
			}
			if open, _ := d.Flags(context.Background(), false); len(open) != len(flags)-1 {
				t.Fatalf("resolved flag still open")
			}
			return
		}
	}
	t.Fatalf("no %s flag among %+v", kind, flags)
}

// "Replay and Freshness": a delegate whose memory begins now rejects
// offers issued before with reason "replay", but answers hops it records.
func TestRestartRule(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hops.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Forget(ctx, w.clock().Add(-time.Minute)); err != nil { // memory began a minute ago
		t.Fatal(err)
	}
	d := w.delegate(s, nil)
	b, _ := w.offer("") // issued now, after the memory began
	if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("%+v %v", a, err)
	}
	// The records are lost: the memory begins now.
	w.advance(time.Second)
	if err := s.Forget(ctx, w.clock()); err != nil {
		t.Fatal(err)
	}
	d = w.delegate(s, nil)
	w.advance(time.Second)
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || a.Take || statusOf(t, w, a.Status, b).Reason != handoff.ReasonReplay {
		t.Fatalf("after losing memory: %+v %v", a, err)
	}
	// A new offer issued after the restart is taken.
	nb, _ := w.offer("")
	if a, _ := d.Receive(ctx, nb, "ctx", "planner"); !a.Take {
		t.Fatalf("new offer: %+v", a)
	}
}

// TestFirstMemory: the restart rule (decision 14) on a memory store made
// in the second an offer is signed: NewMemory(now) refuses it as "replay"
// and the verdict names the store's start; NewFirstMemory, which follows
// no earlier memory, takes it; after Forget the rule is back.
func TestFirstMemory(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	b, _ := w.offer("")
	d := w.delegate(store.NewMemory(w.clock()), nil)
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || a.Take || statusOf(t, w, a.Status, b).Reason != handoff.ReasonReplay {
		t.Fatalf("NewMemory(now): %+v %v", a, err)
	}
	if a.Err == nil || !strings.Contains(a.Err.Error(), "memory began") {
		t.Fatalf("NewMemory(now): the refusal does not name the store's start: %v", a.Err)
	}
	first := store.NewFirstMemory()
	d = w.delegate(first, nil)
	if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("NewFirstMemory: %+v %v", a, err)
	}
	w.advance(time.Second)
	if err := first.Forget(ctx, w.clock()); err != nil {
		t.Fatal(err)
	}
	d = w.delegate(first, nil)
	if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || a.Take || statusOf(t, w, a.Status, b).Reason != handoff.ReasonReplay {
		t.Fatalf("NewFirstMemory after Forget: %+v %v", a, err)
	}
}

// TestOnAnswer: every decided answer is reported once, with its outcome,
// after its record; an offer that cannot be read is reported too (step 1
// rejections are answers).
func TestOnAnswer(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	var seen []handoff.Outcome
	s := store.NewFirstMemory()
	d := w.delegate(s, func(c *delegate.Config) {
		c.OnAnswer = func(ctx context.Context, a *delegate.Answer, took time.Duration) {
			if took <= 0 {
				t.Errorf("took %v", took)
			}
			if a.Take {
				if r, err := s.Get(ctx, a.Iss, a.Hop); err != nil || r == nil {
					t.Errorf("reported before its record: %v", err)
				}
			}
			seen = append(seen, a.Outcome)
		}
	})
	b, _ := w.offer("")
	for _, in := range [][]byte{b, b, []byte("not a handoff")} {
		if _, err := d.Receive(ctx, in, "ctx", "planner"); err != nil {
			t.Fatal(err)
		}
	}
	want := []handoff.Outcome{handoff.Accepted, handoff.Retransmission, handoff.Rejected}
	if !slices.Equal(seen, want) {
		t.Fatalf("reported %v, want %v", seen, want)
	}
}

// "Knowing the Outcome": work whose effect is in the store commits with its
// outcome record; a failed attempt leaves neither.
func TestRecordOutcome(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hops.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.DB().Exec(`CREATE TABLE effects (hop TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	s.Forget(ctx, w.clock().Add(-time.Hour))
	d := w.delegate(s, nil)
	b, o := w.offer("")
	if a, _ := d.Receive(ctx, b, "ctx", "planner"); !a.Take {
		t.Fatal("not taken")
	}
	boom := errors.New("disk full")
	_, err = d.RecordOutcome(ctx, o.Iss, o.Hop, effectOnly(func(tx *sql.Tx) (delegate.Outcome, error) {
		if _, err := tx.Exec(`INSERT INTO effects (hop) VALUES (?)`, o.Hop); err != nil {
			return delegate.Outcome{}, err
		}
		return delegate.Outcome{}, boom
	}))
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if n := count(t, s.DB()); n != 0 {
		t.Fatalf("effect of a failed attempt committed: %d", n)
	}
	if r, _ := s.Get(ctx, o.Iss, o.Hop); r.State != store.Accepted {
		t.Fatalf("state %s after a failed attempt", r.State)
	}
	st, err := d.RecordOutcome(ctx, o.Iss, o.Hop, effectOnly(func(tx *sql.Tx) (delegate.Outcome, error) {
		_, err := tx.Exec(`INSERT INTO effects (hop) VALUES (?)`, o.Hop)
		return delegate.Outcome{State: store.Completed}, err
	}))
	if err != nil || statusOf(t, w, st, b).State != handoff.StateCompleted || count(t, s.DB()) != 1 {
		t.Fatalf("outcome: %v", err)
	}
	// Never twice.
	_, err = d.RecordOutcome(ctx, o.Iss, o.Hop, func(context.Context) (delegate.Effect, error) {
		t.Fatal("work ran again")
		return nil, nil
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second outcome: %v", err)
	}
}

func count(t *testing.T, db *sql.DB) int {
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM effects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// "Knowing the Outcome": an outcome that cannot be learned keeps the hop
// accepted and is flagged; a failed outcome must say what took effect.
func TestUnknownOutcome(t *testing.T) {
	w := newWorld(t)
	d := w.delegate(w.freshStore(), nil)
	ctx := context.Background()
	b, o := w.offer("")
	a, _ := d.Receive(ctx, b, "ctx", "planner")
	if err := d.Unknown(ctx, o.Iss, o.Hop, "the payment service timed out"); err != nil {
		t.Fatal(err)
	}
	again, _ := d.Receive(ctx, b, "ctx", "planner")
	if !bytes.Equal(again.Status.Octets, a.Status.Octets) {
		t.Fatal("retransmission of an unknown outcome is not the accepted status")
	}
	if _, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Failed}); err == nil {
		t.Fatal("failed without refs or NoEffect accepted")
	}
	expectFlag(t, d, store.FlagUnknownOutcome)
	if _, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Failed, NoEffect: true}); err != nil {
		t.Fatal(err)
	}
}

// Lifecycle: "canceled" from the delegator stops the work; it does not
// show that the work took no effect, so the outcome is still recorded.
func TestCancel(t *testing.T) {
	w := newWorld(t)
	var stopped int
	s := w.freshStore()
	d := w.delegate(s, func(c *delegate.Config) { c.Stop = func(string, string) { stopped++ } })
	ctx := context.Background()
	b, o := w.offer("")
	d.Receive(ctx, b, "ctx", "planner")
	h, _ := handoff.ParseHandoff(b, handoff.Limits{})
	cancel, _ := w.signers["planner"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "planner", Aud: "coder",
		Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormCOSE)
	r, err := d.Cancel(ctx, cancel, o.Iss, o.Hop)
	if err != nil || !r.Canceled || stopped != 1 {
		t.Fatalf("%+v %v %d", r, err, stopped)
	}
	forged, _ := w.signers["coder"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "coder", Aud: "planner",
		Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	if _, err := d.Cancel(ctx, forged, o.Iss, o.Hop); err == nil {
		t.Fatal("a cancel from the delegate itself was accepted")
	}
	if _, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Completed}); err != nil {
		t.Fatal(err)
	}
	// "canceled and completed can cross in flight": the crossing is flagged.
	if _, err := d.Cancel(ctx, cancel, o.Iss, o.Hop); err != nil {
		t.Fatal(err)
	}
	expectFlag(t, d, store.FlagConflictingInputs)
}

// Retention: under a steady stream of offers the sweeper keeps the store
// bounded; accepted hops with unknown outcome stay. On the memory store
// and on SQLite.
func TestSweepBounded(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			w := newWorld(t)
			ctx := context.Background()
			var s store.Store
			var size func() int
			if kind == "memory" {
				m := w.freshStore()
				s, size = m, m.Len
			} else {
				sq, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hops.db"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { sq.Close() })
				if err := sq.Forget(ctx, w.clock().Add(-time.Hour)); err != nil {
					t.Fatal(err)
				}
				s = sq
				size = func() int {
					var n int
					if err := sq.DB().QueryRow(`SELECT COUNT(*) FROM hops`).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
			}
			d := w.delegate(s, func(c *delegate.Config) { c.Retention = time.Minute })
			sb, stuck := w.offer("")
			if a, err := d.Receive(ctx, sb, "ctx", "planner"); err != nil || !a.Take {
				t.Fatalf("%+v %v", a, err)
			}
			max := 0
			for i := 0; i < 600; i++ {
				b, o := w.offer("")
				if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
					t.Fatalf("not taken: %+v %v", a, err)
				}
				if _, err := d.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Completed}); err != nil {
					t.Fatal(err)
				}
				w.advance(time.Second)
				if i%30 == 0 {
					if _, err := d.Sweep(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if n := size(); n > max {
					max = n
				}
			}
			// exp is 120 s, skew 60 s, retention 60 s: about 240 s of offers live.
			if max > 300 {
				t.Fatalf("store grew to %d records", max)
			}
			if _, err := s.Get(ctx, stuck.Iss, stuck.Hop); err != nil {
				t.Fatalf("an accepted hop with unknown outcome was swept: %v", err)
			}
		})
	}
}

// Lifecycle, "canceled" from offered: a cancel that overtakes its offer is
// held, and the offer, when it arrives, is refused and recorded canceled.
func TestCancelBeforeOffer(t *testing.T) {
	w := newWorld(t)
	s := w.freshStore()
	d := w.delegate(s, nil)
	ctx := context.Background()
	b, o := w.offer("")
	h, _ := handoff.ParseHandoff(b, handoff.Limits{})
	cancel, _ := w.signers["planner"].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: "planner", Aud: "coder",
		Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	if _, err := d.Cancel(ctx, cancel, o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("cancel before the offer: %v", err)
	}
	a, err := d.Receive(ctx, b, "ctx", "planner")
	if err != nil || a.Take || a.Outcome != handoff.Rejected || statusOf(t, w, a.Status, b).Reason != handoff.ReasonPolicy {
		t.Fatalf("offer after its cancel: %+v %v", a, err)
	}
	if r, _ := s.Get(ctx, o.Iss, o.Hop); r == nil || !r.Canceled || r.State != store.Rejected {
		t.Fatalf("record %+v", r)
	}
	// A cancel signed by someone else does not stop an offer.
	b2, o2 := w.offer("")
	h2, _ := handoff.ParseHandoff(b2, handoff.Limits{})
	forged, _ := w.signers["coder"].SignStatus(&handoff.Status{Offer: h2.Offer.Digest(), Iss: "planner", Aud: "coder",
		Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	d.Cancel(ctx, forged, o2.Iss, o2.Hop)
	if a, _ := d.Receive(ctx, b2, "ctx", "planner"); !a.Take {
		t.Fatalf("a forged early cancel stopped the offer: %+v", a)
	}
}

// effectOnly is work with no slow part: its Effect is f.
func effectOnly(f func(tx *sql.Tx) (delegate.Outcome, error)) func(context.Context) (delegate.Effect, error) {
	return func(context.Context) (delegate.Effect, error) { return f, nil }
}
