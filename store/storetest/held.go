package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- Held cancels (store.HeldCancels) ---------------------------------------

// heldTests are Run's checks of the held cancels: a "canceled" that
// overtook its offer (draft "Lifecycle": offered -> canceled) is kept,
// bounded, until its offer arrives.
var heldTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"HoldFindTakeOnce", testHoldFindTake},
	{"HeldKeyIsIssAndOffer", testHeldKey},
	{"HoldReplacesSameKey", testHoldReplaces},
	{"TakeHeldWithOctetsTakesOnlyThatCopy", testTakeHeldOctets},
	{"HoldPerIssQuotaPushesOutOnlyOwnOldest", testHoldPerIss},
	{"HoldTotalBoundRefusesNeverEvictsOthers", testHoldTotal},
	{"HoldDropsExpiredFirst", testHoldExpiredFirst},
	{"HoldRefusesBadArguments", testHoldBadArgs},
	{"SweepRemovesExpiredHeld", testSweepHeld},
	{"ConcurrentTakeHeldOneWinner", testConcurrentTakeHeld},
	{"ConcurrentHoldKeepsQuota", testConcurrentHold},
	{"HeldClosedIsErrClosed", testHeldClosed},
	{"ClaimRefusedWhileCancelHeld", testClaimRefusedWhileHeld},
	{"ClaimAndHoldAreOrdered", func(t *testing.T, s store.Store) { ClaimHoldRace(t, s, s) }},
}

// Store.Claim: a claim that could begin work is refused while a cancel
// is held for its offer, writing nothing; a claim recorded canceled, or a
// rejection, is not; an existing record is returned as ever.
func testClaimRefusedWhileHeld(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustHold(t, s, newHeld(Iss, "h", 0), heldLim)
	for _, st := range []store.State{store.Received, store.Accepted} {
		_, stored, err := s.Claim(ctx, NewRecord("h", st, 0))
		if !errors.Is(err, store.ErrCancelHeld) || stored {
			t.Fatalf("Claim %s with a cancel held = %v, %v; want ErrCancelHeld", st, stored, err)
		}
		var he *store.HopError
		if !errors.As(err, &he) || he.Hop != "h" {
			t.Fatalf("Claim error %v does not name the hop", err)
		}
	}
	if _, err := s.Get(ctx, Iss, "h"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after refused claims = %v; want ErrNotFound", err)
	}
	if _, stored, err := s.Claim(ctx, NewRecord("h", store.Accepted, 1)); err != nil || !stored {
		t.Fatalf("Claim of another offer for the hop = %v, %v; want stored (the cancel names the first)", stored, err)
	}
	mustHold(t, s, newHeld(Iss, "c", 0), heldLim)
	r := NewRecord("c", store.Rejected, 0)
	r.Canceled = true
	if _, stored, err := s.Claim(ctx, r); err != nil || !stored {
		t.Fatalf("Claim canceled with a cancel held = %v, %v; want stored", stored, err)
	}
	if got, stored, err := s.Claim(ctx, NewRecord("c", store.Accepted, 0)); err != nil || stored || got.State != store.Rejected {
		t.Fatalf("Claim of a recorded hop with a cancel held = %+v, %v, %v; want the record", got, stored, err)
	}
	mustHold(t, s, newHeld(Iss, "r", 0), heldLim)
	if _, stored, err := s.Claim(ctx, NewRecord("r", store.Rejected, 0)); err != nil || !stored {
		t.Fatalf("Claim rejected with a cancel held = %v, %v; want stored", stored, err)
	}
	if !take(t, s, newHeld(Iss, "h", 0), nil) {
		t.Fatal("the held cancel is gone")
	}
	if _, stored, err := s.Claim(ctx, NewRecord("h2", store.Accepted, 0)); err != nil || !stored {
		t.Fatalf("Claim once taken out = %v, %v; want stored", stored, err)
	}
}

// ClaimHoldRace races, for many offers, claims on claimer with a hold of a
// cancel for the same offer on holder followed by a read of the hop there
// (a delegate's Cancel): the two must be ordered (Store.Claim). Either
// every claim is refused and nothing is written, or one is stored (the
// others given its record) and the read after the hold finds it; never a
// claim stored that the holder does not see, which would leave work
// running under a held cancel. It races lone claims, then claims among 24
// others (so that stores which commit claims in groups race the hold
// inside a group), two of the raced hop, with an unrelated cancel held
// (so that a group looks for held cancels at all). claimer and holder may
// be one store or two handles on one database.
func ClaimHoldRace(t *testing.T, claimer, holder store.Store) {
	claimHoldRounds(t, claimer, holder, "race", 64, 0, 1)
	mustHold(t, holder, newHeld(Iss, "unrelated", 0), heldLim)
	claimHoldRounds(t, claimer, holder, "batch", 40, 24, 2)
}

// claimHoldRounds runs rounds of ClaimHoldRace, each with fillers other
// claims and claims claims of the raced hop.
func claimHoldRounds(t *testing.T, claimer, holder store.Store, prefix string, rounds, fillers, claims int) {
	ctx := t.Context()
	refused, stored := 0, 0
	for i := range rounds {
		hop := fmt.Sprintf("%s-%d", prefix, i)
		errs, ok := make([]error, claims), make([]bool, claims)
		var herr, gerr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j := range fillers {
			wg.Go(func() {
				<-start
				if _, _, err := claimer.Claim(ctx, NewRecord(fmt.Sprintf("%s-filler-%d", hop, j), store.Accepted, 0)); err != nil {
					t.Errorf("filler claim: %v", err)
				}
			})
		}
		for j := range claims {
			wg.Go(func() { <-start; _, ok[j], errs[j] = claimer.Claim(ctx, NewRecord(hop, store.Accepted, 0)) })
		}
		wg.Go(func() {
			<-start
			if herr = holder.Hold(ctx, newHeld(Iss, hop, 0), heldLim); herr == nil {
				_, gerr = holder.Get(ctx, Iss, hop)
			}
		})
		close(start)
		wg.Wait()
		if herr != nil {
			t.Fatalf("%s: Hold: %v", hop, herr)
		}
		recorded, wins := false, 0
		for j, err := range errs {
			switch {
			case err == nil:
				recorded = true // stored, or the stored claim's record returned
				if ok[j] {
					wins++
				}
			case !errors.Is(err, store.ErrCancelHeld):
				t.Fatalf("%s: claim %d: %v", hop, j, err)
			}
		}
		switch {
		case recorded && wins != 1:
			t.Fatalf("%s: %d claims stored; want one", hop, wins)
		case recorded && gerr != nil:
			t.Fatalf("%s: a claim was stored, yet the read after the hold = %v: work would run under a held cancel", hop, gerr)
		case !recorded && !errors.Is(gerr, store.ErrNotFound):
			t.Fatalf("%s: every claim was refused, yet the read after the hold = %v", hop, gerr)
		case recorded:
			stored++
		default:
			refused++
		}
		if !take(t, holder, newHeld(Iss, hop, 0), nil) {
			t.Fatalf("%s: the held cancel is gone", hop)
		}
	}
	t.Logf("%s: %d rounds refused, %d stored before the hold", prefix, refused, stored)
}

var heldLim = store.HoldLimits{Total: 100, PerIss: 50}

// newHeld returns a cancel held from iss for the offer named label,
// arriving at Base+at and kept 5 minutes past that.
func newHeld(iss, label string, at time.Duration) *store.Held {
	return &store.Held{Iss: iss, Offer: handoff.DigestOf(Offer(label, 0)), Status: Status("cancel/" + iss + "/" + label),
		Form: handoff.FormCOSE, Arrived: Base.Add(at), KeepUntil: Base.Add(at + keepFor)}
}

func mustHold(t *testing.T, s store.Store, h *store.Held, lim store.HoldLimits) {
	t.Helper()
	if err := s.Hold(t.Context(), h, lim); err != nil {
		t.Fatalf("Hold(%s): %v", h.Status, err)
	}
}

// isHeld reports whether h (its key) is held, checking the copy's fields
// when it is.
func isHeld(t *testing.T, s store.Store, h *store.Held) bool {
	t.Helper()
	got, err := s.HeldFor(t.Context(), h.Iss, h.Offer)
	if errors.Is(err, store.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("HeldFor: %v", err)
	}
	if got.Iss != h.Iss || !got.Offer.Equal(h.Offer) || !bytes.Equal(got.Status, h.Status) || got.Form != h.Form ||
		!got.Arrived.Equal(h.Arrived) || !got.KeepUntil.Equal(h.KeepUntil) {
		t.Fatalf("HeldFor = %+v; want %+v", got, h)
	}
	return true
}

func take(t *testing.T, s store.Store, h *store.Held, status []byte) bool {
	t.Helper()
	ok, err := s.TakeHeld(t.Context(), h.Iss, h.Offer, status)
	if err != nil {
		t.Fatalf("TakeHeld: %v", err)
	}
	return ok
}

// A held cancel is found with every field as held; TakeHeld removes it
// and reports so once; then it is not found.
func testHoldFindTake(t *testing.T, s store.Store) {
	h := newHeld(Iss, "a", 0)
	if isHeld(t, s, h) {
		t.Fatal("held before Hold")
	}
	if ok := take(t, s, h, nil); ok {
		t.Fatal("TakeHeld of nothing held reported true")
	}
	mustHold(t, s, h, heldLim)
	if !isHeld(t, s, h) {
		t.Fatal("not held after Hold")
	}
	if !take(t, s, h, nil) {
		t.Fatal("TakeHeld of a held cancel reported false")
	}
	if take(t, s, h, nil) {
		t.Fatal("TakeHeld reported true twice")
	}
	if isHeld(t, s, h) {
		t.Fatal("held after TakeHeld")
	}
	_, err := s.HeldFor(t.Context(), h.Iss, h.Offer)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("HeldFor after take = %v; want ErrNotFound", err)
	}
}

// The key is (iss, offer digest): another issuer's cancel naming the same
// offer, and the same issuer's cancel naming another offer (or the same
// value under another alg), are held beside it.
func testHeldKey(t *testing.T, s store.Store) {
	a := newHeld(Iss, "a", 0)
	other := newHeld("https://other.example", "a", time.Second)
	b := newHeld(Iss, "b", 2*time.Second)
	alg := newHeld(Iss, "a", 3*time.Second)
	alg.Offer.Alg, alg.Status = "sha-512", Status("alg")
	for _, h := range []*store.Held{a, other, b, alg} {
		mustHold(t, s, h, heldLim)
	}
	for _, h := range []*store.Held{a, other, b, alg} {
		if !isHeld(t, s, h) {
			t.Errorf("%s not held beside the others", h.Status)
		}
	}
	if !take(t, s, other, nil) || !isHeld(t, s, a) {
		t.Error("taking another issuer's cancel for the same offer took the delegator's")
	}
}

// Holding under a key already held replaces that cancel (the newest copy
// wins) and does not count twice against the quota.
func testHoldReplaces(t *testing.T, s store.Store) {
	lim := store.HoldLimits{Total: 1, PerIss: 1}
	h := newHeld(Iss, "a", 0)
	mustHold(t, s, h, lim)
	again := newHeld(Iss, "a", time.Minute)
	again.Status, again.Form = Status("again"), handoff.FormJWS
	mustHold(t, s, again, lim)
	if !isHeld(t, s, again) {
		t.Fatal("the replacement is not what is held")
	}
}

// TakeHeld with octets removes only a cancel held with exactly those
// octets: a caller dropping the copy it judged never removes a newer one.
func testTakeHeldOctets(t *testing.T, s store.Store) {
	h := newHeld(Iss, "a", 0)
	mustHold(t, s, h, heldLim)
	if take(t, s, h, Status("some other copy")) {
		t.Fatal("TakeHeld with other octets removed the cancel")
	}
	if !isHeld(t, s, h) {
		t.Fatal("not held after a TakeHeld with other octets")
	}
	if !take(t, s, h, h.Status) {
		t.Fatal("TakeHeld with its octets did not remove it")
	}
}

// At its per-iss quota an issuer's own oldest cancel (the first held) is
// pushed out for its new one; other issuers' cancels stay (a trusted but flooding
// delegator cannot push out another's early cancel).
func testHoldPerIss(t *testing.T, s store.Store) {
	lim := store.HoldLimits{Total: 20, PerIss: 3}
	victim := newHeld("https://victim.example", "v", 0)
	mustHold(t, s, victim, lim)
	var flood []*store.Held
	for i := range 6 {
		// All arrive at one time (a coarse clock): the oldest is the one
		// held first.
		h := newHeld(Iss, fmt.Sprint("flood-", i), time.Second)
		mustHold(t, s, h, lim)
		flood = append(flood, h)
	}
	for i, h := range flood {
		if want := i >= 3; isHeld(t, s, h) != want {
			t.Errorf("flood cancel %d held = %v; want %v (the issuer's newest %d)", i, !want, want, lim.PerIss)
		}
	}
	if !isHeld(t, s, victim) {
		t.Error("another issuer's flood pushed out the victim's cancel")
	}
}

// At the total bound a new cancel is refused with ErrHeldFull, naming it,
// and nothing held changes: no other issuer's cancel is evicted. Room
// made by a take is used again.
func testHoldTotal(t *testing.T, s store.Store) {
	lim := store.HoldLimits{Total: 4, PerIss: 3}
	var held []*store.Held
	for i := range 3 {
		h := newHeld(Iss, fmt.Sprint("a-", i), time.Duration(i)*time.Second)
		mustHold(t, s, h, lim)
		held = append(held, h)
	}
	b := newHeld("https://b.example", "b", 5*time.Second)
	mustHold(t, s, b, lim)
	held = append(held, b)
	c := newHeld("https://c.example", "c", 6*time.Second)
	err := s.Hold(t.Context(), c, lim)
	if !errors.Is(err, store.ErrHeldFull) {
		t.Fatalf("Hold past the total = %v; want ErrHeldFull", err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte("c.example")) {
		t.Errorf("ErrHeldFull %q does not name the refused cancel's iss", err)
	}
	for _, h := range held {
		if !isHeld(t, s, h) {
			t.Errorf("%s evicted by a refused Hold", h.Status)
		}
	}
	if isHeld(t, s, c) {
		t.Error("the refused cancel is held")
	}
	take(t, s, b, nil)
	mustHold(t, s, c, lim)
}

// Cancels past their keep-until at the new one's arrival go before any
// bound refuses or pushes out a live one.
func testHoldExpiredFirst(t *testing.T, s store.Store) {
	lim := store.HoldLimits{Total: 2, PerIss: 2}
	old := newHeld("https://old.example", "old", 0)
	live := newHeld(Iss, "live", 4*time.Minute)
	mustHold(t, s, old, lim)
	mustHold(t, s, live, lim)
	late := newHeld("https://late.example", "late", keepFor+time.Second) // old has expired by then
	mustHold(t, s, late, lim)
	if isHeld(t, s, old) || !isHeld(t, s, live) || !isHeld(t, s, late) {
		t.Error("want the expired cancel gone, the live and the new one held")
	}
}

func testHoldBadArgs(t *testing.T, s store.Store) {
	for _, c := range []struct {
		name string
		mut  func(*store.Held, *store.HoldLimits)
	}{
		{"no iss", func(h *store.Held, _ *store.HoldLimits) { h.Iss = "" }},
		{"no offer digest", func(h *store.Held, _ *store.HoldLimits) { h.Offer = handoff.Digest{} }},
		{"no octets", func(h *store.Held, _ *store.HoldLimits) { h.Status = nil }},
		{"no arrival", func(h *store.Held, _ *store.HoldLimits) { h.Arrived = time.Time{} }},
		{"no keep-until", func(h *store.Held, _ *store.HoldLimits) { h.KeepUntil = time.Time{} }},
		{"zero total", func(_ *store.Held, l *store.HoldLimits) { l.Total = 0 }},
		{"zero quota", func(_ *store.Held, l *store.HoldLimits) { l.PerIss = 0 }},
	} {
		h, lim := newHeld(Iss, "bad", 0), heldLim
		c.mut(h, &lim)
		if err := s.Hold(t.Context(), h, lim); err == nil {
			t.Errorf("Hold with %s succeeded", c.name)
		}
	}
}

// Sweep removes the held cancels past their keep-until, and only those.
func testSweepHeld(t *testing.T, s store.Store) {
	early := newHeld(Iss, "early", 0)
	late := newHeld(Iss, "late", time.Minute)
	mustHold(t, s, early, heldLim)
	mustHold(t, s, late, heldLim)
	if _, err := s.Sweep(t.Context(), early.KeepUntil, Retention); err != nil {
		t.Fatal(err)
	}
	if !isHeld(t, s, early) {
		t.Fatal("swept at its keep-until; kept until then")
	}
	if _, err := s.Sweep(t.Context(), early.KeepUntil.Add(time.Nanosecond), Retention); err != nil {
		t.Fatal(err)
	}
	if isHeld(t, s, early) || !isHeld(t, s, late) {
		t.Fatal("want the expired cancel swept and the other kept")
	}
}

// Of callers racing to take one held cancel, exactly one gets true.
func testConcurrentTakeHeld(t *testing.T, s store.Store) {
	for round := range 5 {
		h := newHeld(Iss, fmt.Sprint("race-", round), 0)
		mustHold(t, s, h, heldLim)
		const n = 8
		got := make([]bool, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				got[i], errs[i] = s.TakeHeld(t.Context(), h.Iss, h.Offer, nil)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("TakeHeld: %v", errs[i])
			}
			if got[i] {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d takers won; want exactly 1", round, won)
		}
	}
}

// Concurrent holds of one issuer never leave more than its quota held.
func testConcurrentHold(t *testing.T, s store.Store) {
	lim := store.HoldLimits{Total: 100, PerIss: 4}
	const n = 16
	hs := make([]*store.Held, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		hs[i] = newHeld(Iss, fmt.Sprint("c-", i), time.Duration(i)*time.Millisecond)
		wg.Go(func() { errs[i] = s.Hold(t.Context(), hs[i], lim) })
	}
	wg.Wait()
	held := 0
	for i, h := range hs {
		if errs[i] != nil {
			t.Fatalf("Hold %d: %v", i, errs[i])
		}
		if isHeld(t, s, h) {
			held++
		}
	}
	if held != lim.PerIss {
		t.Fatalf("%d held after %d concurrent holds; want the quota, %d", held, n, lim.PerIss)
	}
}

// After Close, the held-cancel methods fail with ErrClosed.
func testHeldClosed(t *testing.T, s store.Store) {
	h := newHeld(Iss, "a", 0)
	mustHold(t, s, h, heldLim)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(t.Context(), newHeld(Iss, "b", 0), heldLim); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Hold after Close = %v; want ErrClosed", err)
	}
	if _, err := s.HeldFor(t.Context(), h.Iss, h.Offer); !errors.Is(err, store.ErrClosed) {
		t.Errorf("HeldFor after Close = %v; want ErrClosed", err)
	}
	if _, err := s.TakeHeld(t.Context(), h.Iss, h.Offer, nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("TakeHeld after Close = %v; want ErrClosed", err)
	}
}
