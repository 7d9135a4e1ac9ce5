package delegate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/internal/malleate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/postgres"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
)

// signedOffer signs a new offer from planner to coder in form f, with a
// task of its own, returning the element and its payload.
func (w *world) signedOffer(f handoff.Form) (handoff.Element, *handoff.Offer) {
	w.t.Helper()
	n := w.clock().Unix()
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Task: "d5", Iss: "planner", Aud: "coder", Iat: n, Exp: n + 120}
	el, err := w.signers["planner"].SignOffer(o, f)
	if err != nil {
		w.t.Fatal(err)
	}
	return el, o
}

// carry encodes a Handoff with el as its offer.
func carry(t testing.TB, el handoff.Element, enc handoff.Encoding) []byte {
	t.Helper()
	b, err := (&handoff.Handoff{Offer: el}).Encode(enc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// d5Copy is one way to make other octets that verify as the same offer
// (SPEC D5).
type d5Copy struct {
	name string
	form handoff.Form
	make func(t *testing.T, w *world, first handoff.Element, o *handoff.Offer) handoff.Element
}

func malleated(t *testing.T, form handoff.Form, b []byte, err error) handoff.Element {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return handoff.Element{Form: form, Octets: b}
}

var d5Copies = []d5Copy{
	{"malleated JWS signature", handoff.FormJWS, func(t *testing.T, _ *world, e handoff.Element, _ *handoff.Offer) handoff.Element {
		b, err := malleate.JWS(e.Octets)
		return malleated(t, handoff.FormJWS, b, err)
	}},
	{"malleated COSE signature", handoff.FormCOSE, func(t *testing.T, _ *world, e handoff.Element, _ *handoff.Offer) handoff.Element {
		b, err := malleate.COSESignature(e.Octets)
		return malleated(t, handoff.FormCOSE, b, err)
	}},
	{"edited COSE unprotected header", handoff.FormCOSE, func(t *testing.T, _ *world, e handoff.Element, _ *handoff.Offer) handoff.Element {
		b, err := malleate.COSEUnprotected(e.Octets, "note", "added on the path")
		return malleated(t, handoff.FormCOSE, b, err)
	}},
	{"honest re-signature", handoff.FormJWS, func(t *testing.T, w *world, _ handoff.Element, o *handoff.Offer) handoff.Element {
		el, err := w.signers["planner"].SignOffer(o, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		return el
	}},
}

// d5Store is a store kind the D5 tests run on: open gives a store, and
// again another handle on the same records: SQLite reopened after the
// first is closed (a restart), PostgreSQL a second connection pool (a
// second replica), Memory the same store (a second Delegate).
type d5Store struct {
	name string
	open func(t *testing.T, w *world) (s store.Store, again func() store.Store)
}

var d5Stores = []d5Store{
	{"memory", func(t *testing.T, w *world) (store.Store, func() store.Store) {
		s := w.freshStore()
		return s, func() store.Store { return s }
	}},
	{"sqlite", func(t *testing.T, w *world) (store.Store, func() store.Store) {
		open := sqliteHandles(t)
		s := open()
		return s, func() store.Store { s.Close(); return open() }
	}},
	{"postgres", func(t *testing.T, w *world) (store.Store, func() store.Store) {
		open := postgresHandles(t)
		return open(), open
	}},
}

// sqliteHandles returns a function that opens a new handle on one SQLite
// database file, closed when the test ends.
func sqliteHandles(t *testing.T) func() *sqlite.Store {
	path := filepath.Join(t.TempDir(), "hops.db")
	return func() *sqlite.Store {
		s, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// postgresHandles is sqliteHandles for the test PostgreSQL database
// (skipped, or failed under scripts/test.sh, when there is none).
func postgresHandles(t *testing.T) func() store.Store {
	dsn := postgresTarget(t)
	return func() store.Store {
		s, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// workLog counts work taken and Stop calls.
type workLog struct {
	mu      sync.Mutex
	stopped []string
}

func (l *workLog) stop(_, hop string) {
	l.mu.Lock()
	l.stopped = append(l.stopped, hop)
	l.mu.Unlock()
}

// verifiesFor checks st under D9 against the offer el, and that it does not
// against other (a status names one offer's octets).
func verifiesFor(t *testing.T, w *world, st *handoff.Element, el, other handoff.Element) *handoff.Status {
	t.Helper()
	if st == nil {
		t.Fatal("no status")
	}
	vs, err := handoff.VerifyStatus(*st, el, handoff.StatusOptions{Keys: w.keys, Now: w.clock})
	if err != nil {
		t.Fatalf("the status does not verify for the octets it answers (D9): %v", err)
	}
	if _, err := handoff.VerifyStatus(*st, other, handoff.StatusOptions{Keys: w.keys, Now: w.clock}); err == nil {
		t.Fatal("the status verifies for other octets too")
	}
	return vs.Status
}

// TestD5SameContentIsRetransmission: each copy of an offer (a malleated
// JWS or COSE signature, an edited COSE unprotected header, an honest
// re-signature) is a retransmission on every store: the work is taken
// once, the hop's record stays the first's (no equivocation mark, no Stop,
// no flag), and the copy, from a sender authenticated as offer.iss, gets
// the hop's current status signed for the copy's own digest: the same
// octets on every later delivery, after a restart (SQLite) and on a second
// replica (PostgreSQL), and a new status once the hop's has moved on.
func TestD5SameContentIsRetransmission(t *testing.T) {
	ctx := context.Background()
	for _, sk := range d5Stores {
		for _, c := range d5Copies {
			t.Run(sk.name+"/"+c.name, func(t *testing.T) {
				w := newWorld(t)
				s, again := sk.open(t, w)
				var log workLog
				mut := func(cfg *delegate.Config) { cfg.Stop = log.stop }
				d := w.delegate(s, mut)
				first, o := w.signedOffer(c.form)
				a, err := d.Receive(ctx, carry(t, first, handoff.JSON), "ctx", "planner")
				if err != nil || !a.Take {
					t.Fatalf("first: %+v %v", a, err)
				}
				cp := c.make(t, w, first, o)
				if bytes.Equal(cp.Octets, first.Octets) {
					t.Fatal("the copy has the first's octets")
				}

				var answered []byte
				for i, enc := range []handoff.Encoding{handoff.JSON, handoff.CBOR, handoff.JSON} {
					a, err := d.Receive(ctx, carry(t, cp, enc), "ctx", "planner")
					if err != nil || a.Outcome != handoff.Retransmission || !a.Result.Copy || a.Take {
						t.Fatalf("copy %d: outcome %v copy %v take %v, %v", i, a.Outcome, a.Result.Copy, a.Take, err)
					}
					st := verifiesFor(t, w, a.Status, cp, first)
					if st.State != handoff.StateAccepted || st.Iss != "coder" || st.Aud != "planner" {
						t.Fatalf("copy %d: status %+v; want the hop's accepted", i, st)
					}
					if i == 0 {
						answered = a.Status.Octets
					} else if !bytes.Equal(a.Status.Octets, answered) {
						t.Fatalf("copy %d: other status octets than the first delivery's", i)
					}
					if !a.Record.Digest.Equal(first.Digest()) || a.Record.Equivocated || a.Record.State != store.Accepted {
						t.Fatalf("copy %d: record %+v; want the first's, not equivocated", i, a.Record)
					}
				}
				// Not authenticated as offer.iss: no status, like any
				// retransmission.
				if a, err := d.Receive(ctx, carry(t, cp, handoff.JSON), "ctx", ""); err != nil || a.Outcome != handoff.Retransmission || a.Status != nil {
					t.Fatalf("unauthenticated copy: %+v %v", a, err)
				}
				// The first's octets still get the hop's own status.
				if a, err := d.Receive(ctx, carry(t, first, handoff.JSON), "ctx", "planner"); err != nil || a.Result.Copy {
					t.Fatalf("first again: %+v %v", a, err)
				} else {
					verifiesFor(t, w, a.Status, first, cp)
				}

				// A restart, or another replica: the same octets.
				s2 := again()
				d2 := w.delegate(s2, mut)
				a, err = d2.Receive(ctx, carry(t, cp, handoff.JSON), "ctx", "planner")
				if err != nil || a.Outcome != handoff.Retransmission || a.Status == nil || !bytes.Equal(a.Status.Octets, answered) {
					t.Fatalf("copy after a restart or on another replica: %+v %v; want the same status octets", a, err)
				}

				// The hop completes: the copy learns it, then keeps that.
				if _, err := d2.Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Completed}); err != nil {
					t.Fatal(err)
				}
				a, err = d2.Receive(ctx, carry(t, cp, handoff.JSON), "ctx", "planner")
				if err != nil || a.Outcome != handoff.Retransmission {
					t.Fatalf("copy after completion: %+v %v", a, err)
				}
				if st := verifiesFor(t, w, a.Status, cp, first); st.State != handoff.StateCompleted {
					t.Fatalf("copy after completion: %q; want completed", st.State)
				}
				done := a.Status.Octets
				if a, err := d2.Receive(ctx, carry(t, cp, handoff.CBOR), "ctx", "planner"); err != nil || a.Status == nil || !bytes.Equal(a.Status.Octets, done) {
					t.Fatalf("copy after completion, again: %+v %v; want the same octets", a, err)
				}

				if len(log.stopped) != 0 {
					t.Errorf("Stop called for %v; a copy stops nothing", log.stopped)
				}
				if flags, err := d2.Flags(ctx, true); err != nil || len(flags) != 0 {
					t.Errorf("flags %+v, %v; a copy raises none", flags, err)
				}
				r, err := s2.Get(ctx, o.Iss, o.Hop)
				if err != nil || r.Equivocated || !r.Digest.Equal(first.Digest()) || r.State != store.Completed {
					t.Errorf("record %+v, %v; want the first's, completed, not equivocated", r, err)
				}
			})
		}
	}
}

// TestD5CopyOfUndecidedHop: a copy of an offer recorded "received" (not
// decided yet, Config.Defer) gets nothing, as a retransmission would; once
// the hop is accepted, it gets that status, for its own digest.
func TestD5CopyOfUndecidedHop(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	d := w.delegate(w.freshStore(), func(c *delegate.Config) { c.Defer = true })
	first, o := w.signedOffer(handoff.FormJWS)
	if a, err := d.Receive(ctx, carry(t, first, handoff.JSON), "ctx", "planner"); err != nil || a.Record.State != store.Received {
		t.Fatalf("first: %+v %v", a, err)
	}
	cp, err := malleate.JWS(first.Octets)
	if err != nil {
		t.Fatal(err)
	}
	el := handoff.Element{Form: handoff.FormJWS, Octets: cp}
	if a, err := d.Receive(ctx, carry(t, el, handoff.JSON), "ctx", "planner"); err != nil || a.Outcome != handoff.Retransmission || a.Status != nil {
		t.Fatalf("copy of a received hop: %+v %v; want a retransmission with no status", a, err)
	}
	if _, err := d.Accept(ctx, o.Iss, o.Hop); err != nil {
		t.Fatal(err)
	}
	a, err := d.Receive(ctx, carry(t, el, handoff.JSON), "ctx", "planner")
	if err != nil || a.Outcome != handoff.Retransmission {
		t.Fatalf("copy after Accept: %+v %v", a, err)
	}
	if st := verifiesFor(t, w, a.Status, el, first); st.State != handoff.StateAccepted {
		t.Fatalf("copy after Accept: %q", st.State)
	}
}

// TestD5CopiesPastTheBound: past store.MaxCopies copies of one hop, a copy
// is still answered with a status that verifies for it (not kept), and
// the store keeps no more.
func TestD5CopiesPastTheBound(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	s := w.freshStore()
	d := w.delegate(s, nil)
	first, o := w.signedOffer(handoff.FormCOSE)
	if a, err := d.Receive(ctx, carry(t, first, handoff.CBOR), "ctx", "planner"); err != nil || !a.Take {
		t.Fatalf("first: %+v %v", a, err)
	}
	for i := range store.MaxCopies + 3 {
		b, err := malleate.COSEUnprotected(first.Octets, "n", int64(i))
		if err != nil {
			t.Fatal(err)
		}
		el := handoff.Element{Form: handoff.FormCOSE, Octets: b}
		a, err := d.Receive(ctx, carry(t, el, handoff.CBOR), "ctx", "planner")
		if err != nil || a.Outcome != handoff.Retransmission || !a.Result.Copy {
			t.Fatalf("copy %d: %+v %v", i, a, err)
		}
		verifiesFor(t, w, a.Status, el, first)
		_, err = s.CopyStatus(ctx, o.Iss, o.Hop, el.Digest())
		if kept := err == nil; kept != (i < store.MaxCopies) {
			t.Fatalf("copy %d kept = %v (%v); want kept only within the bound of %d", i, kept, err, store.MaxCopies)
		}
	}
}

// TestD5ResentEquivocationOneFlag: 1,000 deliveries of one conflicting
// offer (other signed content for a recorded hop) leave exactly one open
// flag, on every store; another conflicting content is flagged once more.
func TestD5ResentEquivocationOneFlag(t *testing.T) {
	ctx := context.Background()
	for _, sk := range d5Stores {
		t.Run(sk.name, func(t *testing.T) {
			w := newWorld(t)
			s, _ := sk.open(t, w)
			d := w.delegate(s, nil)
			b, o := w.offer("")
			if a, err := d.Receive(ctx, b, "ctx", "planner"); err != nil || !a.Take {
				t.Fatalf("first: %+v %v", a, err)
			}
			other, _ := w.offer(o.Hop)
			n := 1000
			if testing.Short() {
				n = 100
			}
			for i := range n {
				a, err := d.Receive(ctx, other, "ctx", "planner")
				if err != nil || a.Outcome != handoff.Equivocation || a.Status != nil {
					t.Fatalf("delivery %d: %+v %v", i, a, err)
				}
			}
			flags, err := s.Flags(ctx, false)
			if err != nil || len(flags) != 1 || flags[0].Kind != store.FlagEquivocation {
				t.Fatalf("open flags after %d deliveries: %+v %v; want exactly one equivocation flag", n, flags, err)
			}
			third, _ := w.offer(o.Hop)
			if a, err := d.Receive(ctx, third, "ctx", "planner"); err != nil || a.Outcome != handoff.Equivocation {
				t.Fatalf("third: %+v %v", a, err)
			}
			if flags, err := s.Flags(ctx, false); err != nil || len(flags) != 2 {
				t.Fatalf("open flags after another conflicting offer: %d %v; want 2", len(flags), err)
			}
		})
	}
}

// TestD5ConcurrentCopyDeliveries: one copy delivered 16 times at once,
// half through a second Delegate (another replica on PostgreSQL, another
// handle on SQLite): every answer carries the same status octets, and
// the work was taken once.
func TestD5ConcurrentCopyDeliveries(t *testing.T) {
	ctx := context.Background()
	for _, sk := range d5Stores {
		t.Run(sk.name, func(t *testing.T) {
			w := newWorld(t)
			s, again := sk.open(t, w)
			d := w.delegate(s, nil)
			first, _ := w.signedOffer(handoff.FormJWS)
			if a, err := d.Receive(ctx, carry(t, first, handoff.JSON), "ctx", "planner"); err != nil || !a.Take {
				t.Fatalf("first: %+v %v", a, err)
			}
			d2 := d
			if sk.name == "postgres" {
				d2 = w.delegate(again(), nil)
			}
			b, err := malleate.JWS(first.Octets)
			if err != nil {
				t.Fatal(err)
			}
			cp := handoff.Element{Form: handoff.FormJWS, Octets: b}
			msg := carry(t, cp, handoff.JSON)
			const n = 16
			got := make([][]byte, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					dd := d
					if i%2 == 1 {
						dd = d2
					}
					a, err := dd.Receive(ctx, msg, "ctx", "planner")
					switch {
					case err != nil:
						errs[i] = err
					case a.Outcome != handoff.Retransmission || a.Take || a.Status == nil:
						errs[i] = fmt.Errorf("outcome %v take %v status %v", a.Outcome, a.Take, a.Status != nil)
					default:
						got[i] = a.Status.Octets
					}
				}()
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("delivery %d: %v", i, errs[i])
				}
				if !bytes.Equal(got[i], got[0]) {
					t.Fatalf("delivery %d got other status octets than delivery 0", i)
				}
			}
			verifiesFor(t, w, &handoff.Element{Form: handoff.FormJWS, Octets: got[0]}, cp, first)
		})
	}
}

// TestD5CancelNamesTheSignedOctets: the delegator's cancel names the
// octets it signed, and the hop may have been taken with a same-content
// copy of them (anyone on the path can malleate a signature). D5 as
// amended makes them one offer, so the cancel applies to the hop on
// every store, in each order of arrival:
//   - the copy is taken, the original follows (a retransmission, recorded
//     as a copy), then the cancel: applied at once (the status verifies
//     through the recorded copy, StatusOptions.SameOffer);
//   - the copy is taken and the cancel comes before the original: held
//     (those octets were never seen here, the error wraps ErrNotFound),
//     and applied when the original arrives;
//   - the cancel overtakes both: held; the copy, other octets, is taken
//     (the held cancel names the original's digest, which no copy reveals);
//     the original, when it comes, applies it.
//
// Each time the hop ends canceled with its work stopped.
func TestD5CancelNamesTheSignedOctets(t *testing.T) {
	ctx := context.Background()
	type step int
	const (
		cp     step = iota // the copy arrives
		orig               // the original arrives
		cancel             // the delegator's cancel arrives
	)
	orders := []struct {
		name  string
		steps []step
		held  step // after this step's cancel, it is held (not yet applied); -1: applied
	}{
		{"copy, original, cancel", []step{cp, orig, cancel}, -1},
		{"copy, cancel, original", []step{cp, cancel, orig}, cancel},
		{"cancel, copy, original", []step{cancel, cp, orig}, cancel},
	}
	for _, sk := range d5Stores {
		for _, c := range d5Copies {
			for _, ord := range orders {
				t.Run(sk.name+"/"+c.name+"/"+ord.name, func(t *testing.T) {
					w := newWorld(t)
					s, _ := sk.open(t, w)
					var log workLog
					d := w.delegate(s, func(cfg *delegate.Config) { cfg.Stop = log.stop })
					first, o := w.signedOffer(c.form)
					copied := c.make(t, w, first, o)
					cancelEl := cancelStatus(t, w, carry(t, first, handoff.JSON))
					took := 0
					for _, st := range ord.steps {
						switch st {
						case cp, orig:
							el := copied
							if st == orig {
								el = first
							}
							a, err := d.Receive(ctx, carry(t, el, handoff.JSON), "ctx", "planner")
							if err != nil {
								t.Fatalf("delivery: %v", err)
							}
							if a.Take {
								took++
							}
						case cancel:
							_, err := d.Cancel(ctx, cancelEl, o.Iss, o.Hop)
							if ord.held == cancel && !errors.Is(err, store.ErrNotFound) {
								t.Fatalf("cancel: %v; want held (ErrNotFound)", err)
							}
							if ord.held != cancel && err != nil {
								t.Fatalf("cancel: %v", err)
							}
						}
					}
					r, err := s.Get(ctx, o.Iss, o.Hop)
					if err != nil || !r.Canceled {
						t.Fatalf("hop %+v, %v; want canceled", r, err)
					}
					if took != 1 {
						t.Errorf("the work was taken %d times, want once", took)
					}
					if len(log.stopped) == 0 && r.State == store.Accepted {
						t.Errorf("the running work was not stopped")
					}
					if r.Equivocated {
						t.Errorf("the hop is marked equivocated; a copy is the same offer")
					}
				})
			}
		}
	}
}
