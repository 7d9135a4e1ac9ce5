package delegator_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

type world struct {
	t       *testing.T
	keys    *trust.Config
	signers map[string]*handoff.Signer
	now     time.Time
}

func newWorld(t *testing.T, names ...string) *world {
	w := &world{t: t, keys: trust.New(), signers: map[string]*handoff.Signer{}, now: time.Unix(1_800_000_000, 0)}
	for _, n := range names {
		k, _ := trust.GenerateKey()
		tk, _ := trust.NewKey(&k.PublicKey)
		if err := w.keys.Add(n, tk); err != nil {
			t.Fatal(err)
		}
		w.signers[n], _ = handoff.NewSigner(k)
	}
	return w
}

func (w *world) clock() time.Time { return w.now }

func (w *world) delegator(me string, s delegator.Tracking) *delegator.Delegator {
	d, err := delegator.New(delegator.Config{Me: me, Signer: w.signers[me], Keys: w.keys, Store: s, Now: w.clock,
		Retry: delegator.Retry{First: 10 * time.Second, Max: time.Minute, MaxAttempts: 3}})
	if err != nil {
		w.t.Fatal(err)
	}
	return d
}

// status signs a status from the delegate about the hop's offer.
func (w *world) status(from string, h *store.Issued, st handoff.State, reason handoff.Reason) handoff.Element {
	el, err := w.signers[from].SignStatus(&handoff.Status{Offer: h.Digest, Iss: from, Aud: "planner", Iat: w.now.Unix(),
		State: st, Reason: reason}, handoff.FormJWS)
	if err != nil {
		w.t.Fatal(err)
	}
	return el
}

func issue(t *testing.T, d *delegator.Delegator, work string) (*handoff.Handoff, *store.Issued) {
	t.Helper()
	h, rec, err := d.Offer(context.Background(), delegator.Offer{Aud: "coder", Dialog: "ctx", Work: work})
	if err != nil {
		t.Fatal(err)
	}
	return h, rec
}

// "Asking Again": a hop is resolved for the delegator once it holds a
// verified completed or failed, or a verified rejected with a reason other
// than stale or replay, or an authoritative observation; every other hop is
// unresolved.
func TestResolution(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		rule     string
		statuses []func(w *world, h *store.Issued) handoff.Element
		observe  bool
		view     store.View
		resolved bool
	}{
		{rule: "a verified completed resolves the hop", view: store.ViewComplete, resolved: true,
			statuses: []func(*world, *store.Issued) handoff.Element{func(w *world, h *store.Issued) handoff.Element {
				return w.status("coder", h, handoff.StateCompleted, "")
			}}},
		{rule: "a verified failed resolves the hop", view: store.ViewFailed, resolved: true,
			statuses: []func(*world, *store.Issued) handoff.Element{func(w *world, h *store.Issued) handoff.Element { return w.status("coder", h, handoff.StateFailed, "") }}},
		{rule: "a verified rejected other than stale or replay resolves the hop", view: store.ViewRejected, resolved: true,
			statuses: []func(*world, *store.Issued) handoff.Element{func(w *world, h *store.Issued) handoff.Element {
				return w.status("coder", h, handoff.StateRejected, handoff.ReasonPolicy)
			}}},
		{rule: "a rejected with reason stale never sets the hop's state", view: store.Offered, resolved: false,
			statuses: []func(*world, *store.Issued) handoff.Element{func(w *world, h *store.Issued) handoff.Element {
				return w.status("coder", h, handoff.StateRejected, handoff.ReasonStale)
			}}},
		{rule: "a rejected with reason replay never sets the hop's state, whichever order it arrives in", view: store.ViewComplete, resolved: true,
			statuses: []func(*world, *store.Issued) handoff.Element{
				func(w *world, h *store.Issued) handoff.Element {
					return w.status("coder", h, handoff.StateCompleted, "")
				},
				func(w *world, h *store.Issued) handoff.Element {
					return w.status("coder", h, handoff.StateRejected, handoff.ReasonReplay)
				}}},
		{rule: "accepted does not resolve the hop", view: store.ViewAccepted, resolved: false,
			statuses: []func(*world, *store.Issued) handoff.Element{func(w *world, h *store.Issued) handoff.Element {
				return w.status("coder", h, handoff.StateAccepted, "")
			}}},
		{rule: "completed or failed may come without accepted (accepted implied)", view: store.ViewFailed, resolved: true,
			statuses: []func(*world, *store.Issued) handoff.Element{func(w *world, h *store.Issued) handoff.Element { return w.status("coder", h, handoff.StateFailed, "") }}},
		{rule: "an authoritative observation that the work did not take effect resolves the hop", observe: true, view: store.Offered, resolved: true},
		{rule: "a missing status is never failed", view: store.Offered, resolved: false},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			w := newWorld(t, "planner", "coder")
			s := store.NewMemory(w.now)
			d := w.delegator("planner", s)
			_, h := issue(t, d, "w1")
			for _, mk := range c.statuses {
				if _, err := d.Intake(ctx, h.Hop, mk(w, h)); err != nil {
					t.Fatal(err)
				}
			}
			if c.observe {
				if err := d.Observe(ctx, h.Hop); err != nil {
					t.Fatal(err)
				}
			}
			w.now = w.now.Add(time.Hour)
			rec := get(t, s, h.Hop)
			if rec.View != c.view || rec.Resolved != c.resolved {
				t.Fatalf("view %s resolved %v, want %s %v", rec.View, rec.Resolved, c.view, c.resolved)
			}
		})
	}
}

func get(t *testing.T, s delegator.Tracking, hop string) *store.Issued {
	t.Helper()
	r, err := s.IssuedHop(context.Background(), hop)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// "Forks, Concurrency, and Equivocation": if a delegate sends conflicting
// statuses for one hop, the first verified stands and the conflict is
// flagged; a late completed or failed still resolves a canceled or expired
// hop.
func TestConflictsAndLateStatuses(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "planner", "coder", "tester")
	s := store.NewMemory(w.now)
	d := w.delegator("planner", s)

	_, h := issue(t, d, "w1")
	d.Intake(ctx, h.Hop, w.status("coder", h, handoff.StateCompleted, ""))
	if _, err := d.Intake(ctx, h.Hop, w.status("coder", h, handoff.StateFailed, "")); err != nil {
		t.Fatal(err)
	}
	if r := get(t, s, h.Hop); r.View != store.ViewComplete {
		t.Fatalf("the first terminal status did not stand: %s", r.View)
	}
	// The conflicting status resent (the same one, or signed again) adds
	// no flag: one open flag per conflicting state (issue 13).
	for range 3 {
		if _, err := d.Intake(ctx, h.Hop, w.status("coder", h, handoff.StateFailed, "")); err != nil {
			t.Fatal(err)
		}
	}
	flags, _ := d.Flags(ctx, false)
	if len(flags) != 1 || flags[0].Kind != store.FlagConflictingInputs {
		t.Fatalf("flags %+v", flags)
	}

	// A status signed by another agent, or about another offer, is refused (D9).
	_, h2 := issue(t, d, "w2")
	if _, err := d.Intake(ctx, h2.Hop, w.status("tester", h2, handoff.StateCompleted, "")); err == nil {
		t.Fatal("a status from a party other than the delegate was taken")
	}
	if _, err := d.Intake(ctx, h2.Hop, w.status("coder", h, handoff.StateCompleted, "")); err == nil {
		t.Fatal("a status about another offer was taken")
	}

	// Canceled, then a late completed: still resolves.
	cancel, r, err := d.Cancel(ctx, h2.Hop)
	if err != nil || r.View != store.ViewCanceled || r.Resolved {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	if _, err := handoff.VerifyStatus(cancel, handoff.Element{Form: h2.OfferForm, Octets: h2.Offer}, handoff.StatusOptions{Keys: w.keys, Now: w.clock}); err != nil {
		t.Fatalf("the cancel does not verify: %v", err)
	}
	d.Intake(ctx, h2.Hop, w.status("coder", h2, handoff.StateCompleted, ""))
	if r := get(t, s, h2.Hop); r.View != store.ViewComplete || !r.Resolved {
		t.Fatalf("late completed after cancel: %+v", r)
	}

	// Expired (local, provisional), then a late failed: still counts.
	_, h3 := issue(t, d, "w3")
	w.now = w.now.Add(10 * time.Minute)
	if !delegator.Expired(get(t, s, h3.Hop), w.now) {
		t.Fatal("not expired")
	}
	d.Intake(ctx, h3.Hop, w.status("coder", h3, handoff.StateFailed, ""))
	if r := get(t, s, h3.Hop); r.View != store.ViewFailed || !r.Resolved || delegator.Expired(r, w.now) {
		t.Fatalf("late failed after expiry: %+v", r)
	}
}

// D9: a "rejected" wrong-audience signed by an agent the offer reached by
// mistake (here tester, trusted, neither party) verifies, but like stale
// and replay it never sets the hop's state, before or after the
// delegate's own answer, and raises no conflict; the delegate's answer
// still resolves the hop. Any other status from that agent is refused.
func TestMisdeliveredStatus(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "planner", "coder", "tester")
	s := store.NewMemory(w.now)
	d := w.delegator("planner", s)
	_, h := issue(t, d, "w1")
	astray := w.status("tester", h, handoff.StateRejected, handoff.ReasonWrongAudience)
	vs, err := handoff.VerifyStatus(astray, handoff.Element{Form: h.OfferForm, Octets: h.Offer}, handoff.StatusOptions{Keys: w.keys, Now: w.clock})
	if err != nil || !vs.Misdelivered || vs.SetsState() {
		t.Fatalf("the misdelivered status: %+v %v; want verified, Misdelivered, not SetsState", vs, err)
	}
	r, err := d.Intake(ctx, h.Hop, astray)
	if err != nil || r.View != store.Offered || r.Resolved {
		t.Fatalf("after the misdelivered status: %+v %v; want the hop offered, unresolved", r, err)
	}
	if r := get(t, s, h.Hop); r.View != store.Offered || r.Resolved || r.Status != nil {
		t.Fatalf("stored hop %+v: the misdelivered status set it", r)
	}
	// A third party's other statuses do not pass D9.
	for _, st := range []handoff.Element{
		w.status("tester", h, handoff.StateRejected, handoff.ReasonPolicy),
		w.status("tester", h, handoff.StateCompleted, ""),
	} {
		if _, err := d.Intake(ctx, h.Hop, st); !errors.Is(err, handoff.ErrPolicy) {
			t.Fatalf("a third party's status: %v, want policy", err)
		}
	}
	// The delegate's answer resolves the hop; a later misdelivered status
	// is no conflict and changes nothing.
	if r, err := d.Intake(ctx, h.Hop, w.status("coder", h, handoff.StateCompleted, "")); err != nil || r.View != store.ViewComplete || !r.Resolved {
		t.Fatalf("the delegate's completed: %+v %v", r, err)
	}
	if r, err := d.Intake(ctx, h.Hop, astray); err != nil || r.View != store.ViewComplete || !r.Resolved {
		t.Fatalf("a misdelivered status after completed: %+v %v", r, err)
	}
	if flags, _ := d.Flags(ctx, true); len(flags) != 0 {
		t.Fatalf("flags %+v, want none", flags)
	}
}

// "Asking Again": while a hop is unresolved the delegator must not issue a
// new offer for the same work, unless the work is safe to do twice; a new
// attempt is a new offer with a new hop.
func TestNoDuplicateWork(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "planner", "coder")
	s := store.NewMemory(w.now)
	d := w.delegator("planner", s)
	_, h := issue(t, d, "build")
	if _, _, err := d.Offer(ctx, delegator.Offer{Aud: "coder", Work: "build"}); !errors.Is(err, store.ErrUnresolvedWork) {
		t.Fatalf("second offer while unresolved: %v", err)
	}
	// Rejected as stale: still unresolved (the delegate may have done it).
	d.Intake(ctx, h.Hop, w.status("coder", h, handoff.StateRejected, handoff.ReasonStale))
	if _, _, err := d.Offer(ctx, delegator.Offer{Aud: "coder", Work: "build"}); !errors.Is(err, store.ErrUnresolvedWork) {
		t.Fatalf("after a stale rejection: %v", err)
	}
	if _, h2, err := d.Offer(ctx, delegator.Offer{Aud: "coder", Work: "build", SafeTwice: true}); err != nil || h2.Hop == h.Hop {
		t.Fatalf("safe to do twice: %v", err)
	}
	d.Intake(ctx, h.Hop, w.status("coder", h, handoff.StateFailed, ""))
	if _, _, err := d.Offer(ctx, delegator.Offer{Aud: "coder", Work: "build"}); !errors.Is(err, store.ErrUnresolvedWork) {
		t.Fatalf("the safe-twice hop is still unresolved, yet a third offer was issued: %v", err)
	}
}

// "Asking Again": the retransmission is the identical octets, the first
// one before exp, later ones further apart; the delegator never re-signs,
// and flags a hop it stops asking about while unresolved.
func TestAskingAgain(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "planner", "coder")
	s := store.NewMemory(w.now)
	d := w.delegator("planner", s)
	_, h := issue(t, d, "w")
	if !h.NextAsk.Before(h.Exp) {
		t.Fatal("the first retransmission is not before exp")
	}
	var gaps []time.Duration
	last := w.now
	for i := 0; i < 200 && len(gaps) < 4; i++ {
		w.now = w.now.Add(time.Second)
		asks, err := d.Due(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range asks {
			if !bytes.Equal(a.Offer.Octets, h.Offer) {
				t.Fatal("a retransmission is not the identical octets")
			}
			gaps = append(gaps, w.now.Sub(last))
			last = w.now
		}
	}
	if len(gaps) != 3 {
		t.Fatalf("asked %d times, want MaxAttempts = 3", len(gaps))
	}
	if !(gaps[2] > gaps[1]) {
		t.Fatalf("no backoff: %v", gaps)
	}
	flags, _ := d.Flags(ctx, false)
	if len(flags) != 1 || flags[0].Kind != store.FlagUnknownOutcome {
		t.Fatalf("giving up was not flagged: %+v", flags)
	}
	if r := get(t, s, h.Hop); r.Resolved || r.View != store.Offered {
		t.Fatalf("silence became %+v", r)
	}
	// A resolved hop is not asked about.
	_, h2 := issue(t, d, "w2")
	d.Intake(ctx, h2.Hop, w.status("coder", h2, handoff.StateCompleted, ""))
	w.now = w.now.Add(time.Hour)
	if asks, _ := d.Due(ctx); len(asks) != 0 {
		t.Fatalf("asked about a resolved hop: %d", len(asks))
	}
}

// Lifecycle, "canceled": a delegate that receives a valid cancel sends
// "canceled" for each offer it issued whose prev equals the canceled hop's
// offer digest, fan-out included; a cancel never resolves a hop.
func TestCancelDown(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "planner", "coder", "t1", "t2", "t3")
	s := store.NewMemory(w.now)
	coder := w.delegator("coder", s)
	// The planner's offer to the coder, as received.
	po, _ := w.signers["planner"].SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: "planner", Aud: "coder",
		Iat: w.now.Unix(), Exp: w.now.Unix() + 300}, handoff.FormCOSE)
	received := &handoff.Handoff{Offer: po}
	for i, aud := range []string{"t1", "t2", "t3"} {
		h, rec, err := coder.Offer(ctx, delegator.Offer{Aud: aud, Dialog: "ctx", Work: aud, From: received})
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Chain) != 1 || !rec.Prev.Equal(po.Digest()) {
			t.Fatalf("fan-out %d: prev or chain wrong", i)
		}
	}
	// An offer that does not pass this one on is not canceled with it.
	_, other, _ := coder.Offer(ctx, delegator.Offer{Aud: "t1", Dialog: "ctx", Work: "unrelated"})
	down, err := coder.CancelDown(ctx, po.Digest())
	if err != nil || len(down) != 3 {
		t.Fatalf("cancels down: %d %v", len(down), err)
	}
	for _, c := range down {
		if c.Hop.View != store.ViewCanceled || c.Hop.Resolved {
			t.Fatalf("%+v", c.Hop)
		}
		vs, err := handoff.VerifyStatus(c.Cancel, handoff.Element{Form: c.Hop.OfferForm, Octets: c.Hop.Offer}, handoff.StatusOptions{Keys: w.keys, Now: w.clock})
		if err != nil || vs.Status.State != handoff.StateCanceled || vs.Status.Aud != c.Hop.Aud {
			t.Fatalf("cancel for %s: %v", c.Hop.Aud, err)
		}
	}
	if r := get(t, s, other.Hop); r.View != store.Offered {
		t.Fatalf("an unrelated hop was canceled: %s", r.View)
	}
}

// The tracker survives a restart of the delegator (SQLite) and resumes
// asking again.
func TestRestartResumesAsking(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, "planner", "coder")
	path := filepath.Join(t.TempDir(), "hops.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	d := w.delegator("planner", s)
	_, h := issue(t, d, "w")
	s.Close()

	s2, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	d2 := w.delegator("planner", s2)
	if _, _, err := d2.Offer(ctx, delegator.Offer{Aud: "coder", Work: "w"}); !errors.Is(err, store.ErrUnresolvedWork) {
		t.Fatalf("after restart, a second offer for unresolved work: %v", err)
	}
	w.now = w.now.Add(time.Minute)
	asks, err := d2.Due(ctx)
	if err != nil || len(asks) != 1 || !bytes.Equal(asks[0].Offer.Octets, h.Offer) {
		t.Fatalf("resumed asking: %d %v", len(asks), err)
	}
	if _, err := d2.Intake(ctx, h.Hop, w.status("coder", h, handoff.StateCompleted, "")); err != nil {
		t.Fatal(err)
	}
	if r, _ := s2.IssuedHop(ctx, h.Hop); !r.Resolved {
		t.Fatal("not resolved")
	}
}

// The retransmitter sends what Due returns, on its own schedule, until
// its context ends.
func TestRunRetransmitter(t *testing.T) {
	w := newWorld(t, "planner", "coder")
	s := store.NewMemory(w.now)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	d, err := delegator.New(delegator.Config{Me: "planner", Signer: w.signers["planner"], Keys: w.keys, Store: s, Now: clock,
		Retry: delegator.Retry{First: time.Millisecond, Max: time.Millisecond, MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	_, h, err := d.Offer(context.Background(), delegator.Offer{Aud: "coder", Work: "w"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sent := make(chan delegator.Ask, 10)
	done := make(chan struct{})
	go func() {
		d.RunRetransmitter(ctx, time.Millisecond, func(_ context.Context, a delegator.Ask) error { sent <- a; return nil }, nil)
		close(done)
	}()
	for i := 1; i <= 3; i++ {
		mu.Lock()
		now = now.Add(time.Second)
		mu.Unlock()
		a := <-sent
		if a.Attempt != i || !bytes.Equal(a.Offer.Octets, h.Offer) {
			t.Fatalf("ask %d: attempt %d", i, a.Attempt)
		}
	}
	cancel()
	<-done
}

// TestNoChain: draft "Privacy" (chain disclosure): a delegator SHOULD
// include chain only when the next hop needs it; prev still lets a party
// that holds the earlier offer check the link. Offer.NoChain sends prev
// without the chain: the receiver sees a partial path (prev absent from
// what it carries), and the digest still names the offer passed on.
func TestNoChain(t *testing.T) {
	w := newWorld(t, "planner", "coder", "tester")
	planner := w.delegator("planner", store.NewMemory(w.now))
	coder := w.delegator("coder", store.NewMemory(w.now))
	ctx := context.Background()
	first, _, err := planner.Offer(ctx, delegator.Offer{Aud: "coder", Dialog: "ctx", Work: "w"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		noChain bool
		chain   int
	}{{"with the chain", false, 1}, {"NoChain", true, 0}} {
		t.Run(c.name, func(t *testing.T) {
			h, rec, err := coder.Offer(ctx, delegator.Offer{Aud: "tester", Dialog: "ctx", Work: "w-" + c.name, From: first, NoChain: c.noChain})
			if err != nil {
				t.Fatal(err)
			}
			if len(h.Chain) != c.chain {
				t.Fatalf("the chain has %d elements, want %d", len(h.Chain), c.chain)
			}
			o, _, err := handoff.UnsafeDecode(h.Offer)
			if err != nil {
				t.Fatal(err)
			}
			want := first.Offer.Digest()
			if o.Prev == nil || !bytes.Equal(o.Prev.Val, want.Val) || rec.Prev == nil || !bytes.Equal(rec.Prev.Val, want.Val) {
				t.Fatalf("prev %v (recorded %v), want the digest of the offer passed on %v", o.Prev, rec.Prev, want)
			}
			r, err := handoff.NewReceiver(handoff.Options{Me: "tester", Keys: w.keys, Now: w.clock})
			if err != nil {
				t.Fatal(err)
			}
			b, err := h.Encode(handoff.JSON)
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Receive(ctx, b, "ctx")
			if err != nil || res.Outcome != handoff.Accepted {
				t.Fatalf("%v %v", res.Outcome, err)
			}
			wantQ := handoff.ChainFull
			if c.noChain {
				wantQ = handoff.ChainAbsent // a prev, and nothing carried to check it against
			}
			if res.ChainQuality != wantQ {
				t.Fatalf("chain quality %s, want %s", res.ChainQuality, wantQ)
			}
		})
	}
}

// docs/threat-model.md, "An on-path party delivers the offer first": a
// rejection for a reason the unsigned parts around an offer can cause
// (its chain, the host's dialog, a credential, references' octets) is
// flagged to the operator, once however often it is resent; the hop is
// rejected and resolved all the same (the work was not taken). A reason
// about the signed offer itself is no doubt.
func TestDoubtfulRejectionFlagged(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		reason handoff.Reason
		flag   bool
	}{
		{handoff.ReasonBrokenChain, true},
		{handoff.ReasonPolicy, true},
		{handoff.ReasonRefMismatch, true},
		{handoff.ReasonCycle, true},
		{handoff.ReasonUntrustedKey, false},
		{handoff.ReasonEquivocation, false},
	} {
		t.Run(string(tc.reason), func(t *testing.T) {
			w := newWorld(t, "planner", "coder")
			s := store.NewMemory(w.now)
			d := w.delegator("planner", s)
			_, h := issue(t, d, "w1")
			st := w.status("coder", h, handoff.StateRejected, tc.reason)
			for range 2 {
				r, err := d.Intake(ctx, h.Hop, st)
				if err != nil || r.View != store.ViewRejected || !r.Resolved {
					t.Fatalf("%+v %v: want rejected, resolved", r, err)
				}
			}
			flags, err := d.Flags(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, f := range flags {
				if f.Kind == store.FlagDoubtfulRejection && f.Hop == h.Hop && strings.Contains(f.Detail, string(tc.reason)) {
					n++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.flag]; n != want || len(flags) != want {
				t.Fatalf("flags %+v: want %d doubtful-rejection flag", flags, want)
			}
		})
	}
}
