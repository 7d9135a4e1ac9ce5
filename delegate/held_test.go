package delegate_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
)

// wantRefusedCanceled checks the answer to an offer whose cancel was held:
// refused with reason policy, not taken, recorded canceled.
func wantRefusedCanceled(t *testing.T, w *world, s store.Store, a *delegate.Answer, err error, b []byte, o *handoff.Offer) {
	t.Helper()
	if err != nil || a.Take || a.Outcome != handoff.Rejected || statusOf(t, w, a.Status, b).Reason != handoff.ReasonPolicy {
		t.Fatalf("the offer after its held cancel: %+v, %v; want refused (policy), not taken", a, err)
	}
	// The refusal is the answer's; the receiver's verdict stays what the
	// checks found (accepted), never rewritten.
	if a.Reason != handoff.ReasonPolicy || a.Err == nil || a.Result.Outcome != handoff.Accepted || a.Result.Err != nil {
		t.Fatalf("answer %s %q %v over verdict %s %v; want the refusal in the answer only", a.Outcome, a.Reason, a.Err, a.Result.Outcome, a.Result.Err)
	}
	r, err := s.Get(context.Background(), o.Iss, o.Hop)
	if err != nil || !r.Canceled || r.State != store.Rejected {
		t.Fatalf("record %+v, %v; want rejected and canceled", r, err)
	}
	h, _ := handoff.ParseHandoff(b, handoff.Limits{})
	if _, err := s.HeldFor(context.Background(), o.Iss, h.Offer.Digest()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the cancel is still held after it was applied: %v", err)
	}
}

// Lifecycle, offered -> canceled (decision 57): a cancel that overtook its
// offer is held in the store, so a restart keeps it: the store closed and
// reopened (a new process), the offer arrives and is refused, canceled.
func TestHeldCancelSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	path := filepath.Join(t.TempDir(), "hops.db")
	s1, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Forget(ctx, w.clock().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	d1 := w.delegate(s1, nil)
	b, o := w.offer("")
	if _, err := d1.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "held") {
		t.Fatalf("early cancel: %v; want held", err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	stops := 0
	d2 := w.delegate(s2, func(c *delegate.Config) { c.Stop = func(string, string) { stops++ } })
	a, err := d2.Receive(ctx, b, "ctx", "planner")
	wantRefusedCanceled(t, w, s2, a, err, b, o)
	if stops != 0 {
		t.Fatalf("Stop called %d times for work never handed out", stops)
	}
}

// Decision 57: replicas sharing one store share its held cancels. The
// cancel reaches replica A before the offer; the offer then reaches
// replica B, which refuses it and records it canceled, handing out no
// work. Then a cancel held on A and its offer delivered to A and B at
// once: neither hands out the work. On SQLite (two stores on one file)
// and PostgreSQL (two stores on one database).
func TestHeldCancelHonouredByAnotherReplica(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			target := filepath.Join(t.TempDir(), "hops.db")
			if kind == "postgres" {
				target = postgresTarget(t)
			}
			open := func() store.Store {
				var s store.Store
				var err error
				if kind == "postgres" {
					s, err = postgres.Open(ctx, target)
				} else {
					s, err = sqlite.Open(ctx, target)
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			}
			w := newWorld(t)
			sa, sb := open(), open()
			if err := sa.Forget(ctx, w.clock().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			stops := 0
			stop := func(c *delegate.Config) {
				c.Stop = func(string, string) { mu.Lock(); stops++; mu.Unlock() }
			}
			da, db := w.delegate(sa, stop), w.delegate(sb, stop)

			b, o := w.offer("")
			if _, err := da.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("early cancel on A: %v; want held", err)
			}
			a, err := db.Receive(ctx, b, "ctx", "planner")
			wantRefusedCanceled(t, w, sb, a, err, b, o)

			// Delivered to both at once, the cancel held on A.
			for round := range 5 {
				b, o := w.offer("")
				if _, err := da.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("round %d: early cancel on A: %v; want held", round, err)
				}
				answers := make([]*delegate.Answer, 2)
				errs := make([]error, 2)
				var wg sync.WaitGroup
				for i, d := range []*delegate.Delegate{da, db} {
					wg.Go(func() { answers[i], errs[i] = d.Receive(ctx, b, "ctx", "planner") })
				}
				wg.Wait()
				for i := range 2 {
					if errs[i] != nil || answers[i].Take {
						t.Fatalf("round %d: replica %d: take %v, %v; want the work not handed out", round, i, answers[i] != nil && answers[i].Take, errs[i])
					}
				}
				r, err := sa.Get(ctx, o.Iss, o.Hop)
				if err != nil || !r.Canceled || !r.State.Terminal() {
					t.Fatalf("round %d: record %+v, %v; want terminal and canceled", round, r, err)
				}
			}
			if stops != 0 {
				t.Fatalf("Stop called %d times for work never handed out", stops)
			}
		})
	}
}

// Decision 57, "Kept Records" bounds: the held cancels are bounded per
// status iss and in all. A flood of early cancels from another trusted
// issuer pushes out only that issuer's own oldest, never the delegator's;
// at the total bound a new cancel is refused (store.ErrHeldFull, reported
// to its sender) and nothing held is pushed out.
func TestHeldCancelQuotaUnderFlood(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.addAgent("flooder")
	w.addAgent("latecomer")
	for name, s := range openStores(t, w) {
		t.Run(name, func(t *testing.T) {
			d := w.delegate(s, func(c *delegate.Config) { c.HeldCancels = store.HoldLimits{Total: 6, PerIss: 4} })
			cancelFrom := func(iss string, offer handoff.Digest) handoff.Element {
				c, err := w.signers[iss].SignStatus(&handoff.Status{Offer: offer, Iss: iss, Aud: "coder", Iat: w.clock().Unix(),
					State: handoff.StateCanceled}, handoff.FormJWS)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			b, o := w.offer("")
			if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the planner's early cancel: %v; want held", err)
			}
			for i := range 50 {
				dg := handoff.DigestOf(fmt.Appendf(nil, "%s never sent %d", name, i))
				if _, err := d.Cancel(ctx, cancelFrom("flooder", dg), "flooder", fmt.Sprint("flood-", i)); !errors.Is(err, store.ErrNotFound) ||
					strings.Contains(err.Error(), "not held") {
					t.Fatalf("flood cancel %d: %v; want held (pushing out the flooder's own oldest)", i, err)
				}
			}
			// 1 + 4 held: one more fits, then the total bound refuses.
			if _, err := d.Cancel(ctx, cancelFrom("latecomer", handoff.DigestOf([]byte(name+"late 0"))), "latecomer", "late-0"); strings.Contains(err.Error(), "not held") {
				t.Fatalf("a cancel under the total bound: %v; want held", err)
			}
			_, err := d.Cancel(ctx, cancelFrom("latecomer", handoff.DigestOf([]byte(name+"late 1"))), "latecomer", "late-1")
			if !errors.Is(err, store.ErrHeldFull) || !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "not held") {
				t.Fatalf("a cancel past the total bound: %v; want not held, ErrHeldFull", err)
			}
			a, err := d.Receive(ctx, b, "ctx", "planner")
			wantRefusedCanceled(t, w, s, a, err, b, o)
		})
	}
}

// The default bounds (Config.HeldCancels zero): DefaultMaxHeldPerIss per
// iss (TestHeldCancelsBounded) and DefaultMaxHeld in all: with that many
// held from DefaultMaxHeld/DefaultMaxHeldPerIss issuers, one more issuer's
// cancel is refused.
func TestHeldCancelDefaultTotal(t *testing.T) {
	if testing.Short() {
		t.Skip("signs 4,097 cancels")
	}
	ctx := context.Background()
	w := newWorld(t)
	d := w.delegate(w.freshStore(), nil)
	issuers := delegate.DefaultMaxHeld / delegate.DefaultMaxHeldPerIss
	for k := range issuers + 1 {
		iss := fmt.Sprint("issuer-", k)
		w.addAgent(iss)
		n := delegate.DefaultMaxHeldPerIss
		if k == issuers {
			n = 1
		}
		for i := range n {
			c, err := w.signers[iss].SignStatus(&handoff.Status{Offer: handoff.DigestOf(fmt.Appendf(nil, "%d/%d", k, i)), Iss: iss, Aud: "coder",
				Iat: w.clock().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.Cancel(ctx, c, iss, "h")
			if full := errors.Is(err, store.ErrHeldFull); full != (k == issuers) {
				t.Fatalf("cancel %d of %s: %v; want refused only past %d held", i, iss, err, delegate.DefaultMaxHeld)
			}
		}
	}
}

// A held cancel past its keep-until, not yet swept, does not refuse its
// offer for ever: the store refuses the claim (store.ErrCancelHeld), the
// delegate finds the cancel expired, drops it and claims again (decision
// 76). The offer is taken, and nothing stays held.
func TestExpiredHeldCancelDoesNotRefuse(t *testing.T) {
	for name, s := range openStores(t, newWorld(t)) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			start := w.clock()
			s.Forget(ctx, start.Add(-time.Hour))
			d := w.delegate(s, nil)
			w.now = start.Add(500 * time.Second) // the offer is issued late...
			b, o := w.offer("")
			w.now = start // ...and a cancel naming it is held early (kept 420 s)
			if _, err := d.Cancel(ctx, cancelStatus(t, w, b), o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("early cancel: %v; want it held", err)
			}
			w.now = start.Add(501 * time.Second) // the offer is fresh, the held cancel expired
			a, err := d.Receive(ctx, b, "ctx", "planner")
			if err != nil || !a.Take {
				t.Fatalf("Receive: %+v, %v; want taken", a, err)
			}
			if h, err := s.HeldFor(ctx, o.Iss, *a.Result.OfferDigest); err == nil {
				t.Fatalf("the expired cancel is still held: %+v", h)
			}
		})
	}
}
