// Package storetest is the conformance suite of store.Store (in the spirit
// of golang.org/x/mod/sumdb/storage's test suite): every hop store runs
// Run, and the SQL stores also run RunOutcome. Each subtest is named after
// the rule it checks, taken from the doc comments of package store and the
// draft's "Lifecycle", "Freshness and Replay", "Asking Again" and "Knowing
// the Outcome".
//
// Every time value the suite passes to a store is derived from Base, so a
// failure reproduces exactly. (A SQL store stamps its initial Since with the
// wall clock when it is created; the suite only checks that it is stable.)
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// Base is the suite's fixed "now". It has a nanosecond part so that a store
// that rounds times is caught.
var Base = time.Date(2026, time.May, 20, 12, 0, 0, 123456789, time.UTC)

// Iss is the issuer of the suite's hops.
const Iss = "https://agent.example/delegator"

// Retention is the suite's retention period.
const Retention = time.Hour

// keepFor is how long past Base a record is kept by default (exp + skew).
const keepFor = 5 * time.Minute

var allStates = []store.State{store.Received, store.Accepted, store.Rejected, store.Completed, store.Failed}

// Run runs the conformance suite. open must return a fresh, empty store on
// each call and arrange for it to be closed when t ends (t.Cleanup); Close
// may then be called twice, since one subtest closes the store itself.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"ClaimInsertsThenReturnsExisting", testClaimInsertsThenReturnsExisting},
		{"ClaimReturnsCurrentRecord", testClaimReturnsCurrentRecord},
		{"ClaimKeyIsIssAndHop", testClaimKeyIsIssAndHop},
		{"ClaimStoresEveryField", testClaimStoresEveryField},
		{"ClaimRefusesBadState", testClaimRefusesBadState},
		{"GetMissingIsErrNotFound", testGetMissingIsErrNotFound},
		{"HopsListsStateInKeyOrderByPages", testHopsPages},
		{"TransitionFollowsCanMove", testTransitionFollowsCanMove},
		{"TransitionWrongFromIsConflict", testTransitionWrongFromIsConflict},
		{"TransitionMissingIsErrNotFound", testTransitionMissingIsErrNotFound},
		{"TransitionNilStatusKeepsStatusUnlessTerminal", testTransitionNilStatusKeepsStatus},
		{"TransitionIfChecksTheEquivocatedMark", testTransitionIf},
		{"ErrorsNameTheHop", testErrorsNameTheHop},
		{"TransitionTerminalStampsDecided", testTransitionTerminalStampsDecided},
		{"MarkCanceled", testMarkCanceled},
		{"MarkEquivocated", testMarkEquivocated},
		{"FlagsRaiseListResolve", testFlagsRaiseListResolve},
		{"ResolveTwiceOrUnknownFails", testResolveTwiceOrUnknownFails},
		{"SweepRetentionRule", testSweepRetentionRule},
		{"SweepZeroRetention", testSweepZeroRetention},
		{"SweepPrunesResolvedFlagsAfterRetention", testSweepPrunesFlags},
		{"ReleaseOnlyAcceptedOnce", testRelease},
		{"SweepReleasedAfterRetention", testSweepReleased},
		{"SweepManyRowsWithConcurrentClaims", testSweepMany},
		{"SinceIsStable", testSinceIsStable},
		{"ForgetDropsHopsKeepsFlagsMovesSince", testForget},
		{"ConcurrentClaimOneWinner", testConcurrentClaim},
		{"ConcurrentTransitionOneWinner", testConcurrentTransition},
		{"ClosedStoreReturnsErrClosed", testClosed},
	}
	tests = append(tests, heldTests...) // held.go
	tests = append(tests, copyTests...) // copies.go
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, open(t))
		})
	}
}

// Offer returns deterministic offer octets for a hop: every byte value, so
// that a store that mangles bytes (text columns, NUL, invalid UTF-8) is
// caught, then the hop and a variant number.
func Offer(hop string, variant int) []byte {
	b := make([]byte, 0, 256+len(hop)+8)
	for i := range 256 {
		b = append(b, byte(255-i))
	}
	return fmt.Appendf(b, "%s#%d", hop, variant)
}

// Status returns deterministic status octets labelled label, with a NUL and
// bytes that are not UTF-8.
func Status(label string) []byte {
	return append([]byte{0x00, 0xff, 0xfe, 0x80}, "status:"+label...)
}

// NewRecord returns the record of a hop (issuer Iss) claimed in state st at
// Base, kept until Base+5m. A Rejected record carries its status and is
// decided at Base.
func NewRecord(hop string, st store.State, variant int) *store.Record {
	offer := Offer(hop, variant)
	r := &store.Record{
		Iss:       Iss,
		Hop:       hop,
		Digest:    handoff.DigestOf(offer),
		Offer:     offer,
		OfferForm: handoff.FormCOSE,
		State:     st,
		Received:  Base,
		KeepUntil: Base.Add(keepFor),
	}
	switch st {
	case store.Accepted:
		r.Status, r.StatusForm = Status(hop+"/accepted"), handoff.FormJWS
	case store.Rejected:
		r.Status, r.StatusForm = Status(hop+"/rejected"), handoff.FormCOSE
		r.Decided = Base
	}
	return r
}

// DiffRecord lists how got differs from want, field by field; bytes are
// compared exactly (a nil Status is not an empty one) and times with Equal.
func DiffRecord(got, want *store.Record) []string {
	if got == nil || want == nil {
		if got == want {
			return nil
		}
		return []string{fmt.Sprintf("record: got %v, want %v", got, want)}
	}
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w)) }
	if got.Iss != want.Iss {
		add("Iss", got.Iss, want.Iss)
	}
	if got.Hop != want.Hop {
		add("Hop", got.Hop, want.Hop)
	}
	if got.Digest.Alg != want.Digest.Alg {
		add("Digest.Alg", got.Digest.Alg, want.Digest.Alg)
	}
	if !bytes.Equal(got.Digest.Val, want.Digest.Val) {
		add("Digest.Val", fmt.Sprintf("%x", got.Digest.Val), fmt.Sprintf("%x", want.Digest.Val))
	}
	if !bytes.Equal(got.Offer, want.Offer) {
		add("Offer", fmt.Sprintf("%q", got.Offer), fmt.Sprintf("%q", want.Offer))
	}
	if got.OfferForm != want.OfferForm {
		add("OfferForm", got.OfferForm, want.OfferForm)
	}
	if got.State != want.State {
		add("State", got.State, want.State)
	}
	if (got.Status == nil) != (want.Status == nil) || !bytes.Equal(got.Status, want.Status) {
		add("Status", octets(got.Status), octets(want.Status))
	}
	if got.StatusForm != want.StatusForm {
		add("StatusForm", got.StatusForm, want.StatusForm)
	}
	if got.Canceled != want.Canceled {
		add("Canceled", got.Canceled, want.Canceled)
	}
	if got.Equivocated != want.Equivocated {
		add("Equivocated", got.Equivocated, want.Equivocated)
	}
	if !got.Received.Equal(want.Received) {
		add("Received", got.Received, want.Received)
	}
	if !got.KeepUntil.Equal(want.KeepUntil) {
		add("KeepUntil", got.KeepUntil, want.KeepUntil)
	}
	if !got.Decided.Equal(want.Decided) {
		add("Decided", got.Decided, want.Decided)
	}
	if !got.Released.Equal(want.Released) {
		add("Released", got.Released, want.Released)
	}
	return d
}

func octets(b []byte) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", b)
}

func copyRecord(r *store.Record) *store.Record {
	c := *r
	c.Offer = bytes.Clone(r.Offer)
	c.Status = bytes.Clone(r.Status)
	c.Digest.Val = bytes.Clone(r.Digest.Val)
	return &c
}

func checkRecord(t *testing.T, what string, got, want *store.Record) {
	t.Helper()
	if d := DiffRecord(got, want); d != nil {
		t.Errorf("%s differs:\n\t%s", what, strings.Join(d, "\n\t"))
	}
}

func mustGet(t *testing.T, s store.Store, hop string) *store.Record {
	t.Helper()
	r, err := s.Get(t.Context(), Iss, hop)
	if err != nil {
		t.Fatalf("Get(%s): %v", hop, err)
	}
	return r
}

func checkGet(t *testing.T, s store.Store, hop string, want *store.Record) {
	t.Helper()
	checkRecord(t, "Get("+hop+")", mustGet(t, s, hop), want)
}

func checkGone(t *testing.T, s store.Store, iss, hop string) {
	t.Helper()
	if r, err := s.Get(t.Context(), iss, hop); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(%s, %s) = %+v, %v; want ErrNotFound", iss, hop, r, err)
	}
}

func mustClaim(t *testing.T, s store.Store, r *store.Record) {
	t.Helper()
	got, inserted, err := s.Claim(t.Context(), copyRecord(r))
	if err != nil || !inserted {
		t.Fatalf("Claim(%s) = inserted %v, %v; want a new record", r.Hop, inserted, err)
	}
	checkRecord(t, "Claim("+r.Hop+") result", got, r)
}

func mustMove(t *testing.T, s store.Store, hop string, from, to store.State, status []byte, form handoff.Form, now time.Time) {
	t.Helper()
	if err := s.Transition(t.Context(), Iss, hop, from, to, status, form, now); err != nil {
		t.Fatalf("Transition(%s, %s -> %s): %v", hop, from, to, err)
	}
}

// put stores a hop in state st (claimed, then moved through Received for a
// completed or failed hop) and returns its record as it should be stored.
func put(t *testing.T, s store.Store, hop string, st store.State) *store.Record {
	t.Helper()
	switch st {
	case store.Received, store.Accepted, store.Rejected:
		r := NewRecord(hop, st, 0)
		mustClaim(t, s, r)
		return r
	case store.Completed, store.Failed:
		r := NewRecord(hop, store.Received, 0)
		mustClaim(t, s, r)
		r.State, r.Status, r.StatusForm, r.Decided = st, Status(hop+"/"+string(st)), handoff.FormJWS, Base.Add(time.Minute)
		mustMove(t, s, hop, store.Received, st, r.Status, r.StatusForm, r.Decided)
		return r
	}
	t.Fatalf("put: unknown state %q", st)
	return nil
}

// --- Claim and Get ------------------------------------------------------

// Claim stores r when the hop is new, and otherwise returns the record that
// was there, byte for byte, leaving it unchanged (draft "Freshness and
// Replay": a second offer is a retransmission or equivocation, never a new
// record).
func testClaimInsertsThenReturnsExisting(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, st := range []store.State{store.Received, store.Accepted, store.Rejected} {
		hop := "claim-" + string(st)
		first := NewRecord(hop, st, 1)
		got, inserted, err := s.Claim(ctx, copyRecord(first))
		if err != nil || !inserted {
			t.Fatalf("first Claim(%s) = inserted %v, %v; want inserted", hop, inserted, err)
		}
		checkRecord(t, "first Claim result", got, first)
		checkGet(t, s, hop, first)

		// The same offer again (a retransmission) and a different one
		// (equivocation): neither replaces the record.
		for _, second := range []*store.Record{NewRecord(hop, st, 1), NewRecord(hop, store.Received, 2), NewRecord(hop, store.Rejected, 3)} {
			second.Received, second.KeepUntil = Base.Add(time.Hour), Base.Add(2*time.Hour)
			got, inserted, err := s.Claim(ctx, second)
			if err != nil || inserted {
				t.Fatalf("second Claim(%s) = inserted %v, %v; want the existing record", hop, inserted, err)
			}
			checkRecord(t, "second Claim result", got, first)
			checkGet(t, s, hop, first)
		}
	}
	// A record claimed with no status keeps a nil status.
	if r := mustGet(t, s, "claim-received"); r.Status != nil {
		t.Errorf("a hop claimed with no status has status %q, want nil", r.Status)
	}
}

// The record Claim returns for an existing hop is the one stored now, with
// the transitions and marks it went through, not the one first claimed.
func testClaimReturnsCurrentRecord(t *testing.T, s store.Store) {
	ctx := t.Context()
	want := put(t, s, "current", store.Received)
	want.State, want.Status, want.StatusForm = store.Accepted, Status("current/accepted"), handoff.FormCOSE
	mustMove(t, s, "current", store.Received, store.Accepted, want.Status, want.StatusForm, Base.Add(time.Second))
	if err := s.MarkCanceled(ctx, Iss, "current"); err != nil {
		t.Fatal(err)
	}
	want.Canceled = true
	got, inserted, err := s.Claim(ctx, NewRecord("current", store.Received, 9))
	if err != nil || inserted {
		t.Fatalf("Claim = inserted %v, %v; want the existing record", inserted, err)
	}
	checkRecord(t, "Claim result", got, want)
}

// A hop is named by the pair (iss, hop): the same hop id from another
// issuer, or another hop id from the same issuer, is a new hop.
func testClaimKeyIsIssAndHop(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := NewRecord("h1", store.Received, 1)
	b := NewRecord("h1", store.Accepted, 2)
	b.Iss = "https://agent.example/other"
	c := NewRecord("h2", store.Rejected, 3)
	// Keys that a store concatenating iss and hop would confuse.
	d := NewRecord("x", store.Received, 4)
	d.Iss = Iss + "h"
	e := NewRecord("hx", store.Received, 5)
	// Keys are compared exactly: no case folding, no trimming.
	f := NewRecord("H1", store.Received, 6)
	g := NewRecord("h1 ", store.Received, 7)
	all := []*store.Record{a, b, c, d, e, f, g}
	for _, r := range all {
		if _, inserted, err := s.Claim(ctx, copyRecord(r)); err != nil || !inserted {
			t.Fatalf("Claim(%s, %s) = inserted %v, %v; want a new record", r.Iss, r.Hop, inserted, err)
		}
	}
	for _, r := range all {
		got, err := s.Get(ctx, r.Iss, r.Hop)
		if err != nil {
			t.Fatalf("Get(%s, %s): %v", r.Iss, r.Hop, err)
		}
		checkRecord(t, "Get("+r.Iss+", "+r.Hop+")", got, r)
	}
}

// Claim stores r: every field, including the canceled and equivocated
// marks, comes back from Get as given, and Claim returns what it stored.
func testClaimStoresEveryField(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := NewRecord("every-field", store.Rejected, 7)
	r.OfferForm, r.StatusForm = handoff.FormJWS, handoff.FormCOSE
	r.Canceled, r.Equivocated = true, true
	r.Received, r.KeepUntil, r.Decided = Base.Add(-time.Nanosecond), Base.Add(keepFor+time.Nanosecond), Base.Add(3*time.Nanosecond)
	got, inserted, err := s.Claim(ctx, copyRecord(r))
	if err != nil || !inserted {
		t.Fatalf("Claim = inserted %v, %v; want inserted", inserted, err)
	}
	stored := mustGet(t, s, r.Hop)
	checkRecord(t, "Get after Claim", stored, r)
	checkRecord(t, "Claim result against Get", got, stored)
}

// r.State must be Received, Accepted or Rejected; any other claim is
// refused and stores nothing.
func testClaimRefusesBadState(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, st := range []store.State{store.Completed, store.Failed, "", "canceled", "expired", "RECEIVED"} {
		r := NewRecord("bad-"+string(st), store.Received, 0)
		r.State = st
		got, inserted, err := s.Claim(ctx, r)
		if err == nil || inserted {
			t.Errorf("Claim in state %q = %+v, inserted %v, %v; want an error", st, got, inserted, err)
		}
		checkGone(t, s, Iss, r.Hop)
	}
	// A new hop is never released.
	r := NewRecord("released", store.Accepted, 0)
	r.Released = Base
	if got, inserted, err := s.Claim(ctx, r); err == nil || inserted {
		t.Errorf("Claim of a released record = %+v, inserted %v, %v; want an error", got, inserted, err)
	}
	checkGone(t, s, Iss, r.Hop)
	// The store still takes a good claim.
	put(t, s, "good", store.Received)
}

// Get of a hop that was never claimed is ErrNotFound.
func testGetMissingIsErrNotFound(t *testing.T, s store.Store) {
	checkGone(t, s, Iss, "nothing")
	put(t, s, "h1", store.Received)
	checkGone(t, s, Iss, "h2")
	checkGone(t, s, "https://agent.example/other", "h1")
	checkGone(t, s, "", "")
}

// Hops lists the records in one state, in (iss, hop) byte order, a page
// of at most limit at a time after a given key; other states are not
// listed; a limit that is not positive is an error.
func testHopsPages(t *testing.T, s store.Store) {
	ctx := t.Context()
	other := "https://agent.example/a-other" // sorts before Iss
	var want []*store.Record
	// Keys whose byte order differs from a case-folding or locale order.
	for _, hop := range []string{"b", "B", "a", "ab", "\u00e9", "z", "a b", "A"} {
		want = append(want, put(t, s, hop, store.Accepted))
		put(t, s, "r-"+hop, store.Received)
		put(t, s, "c-"+hop, store.Completed)
	}
	r := NewRecord("x", store.Accepted, 1)
	r.Iss = other
	mustClaim(t, s, r)
	want = append(want, r)
	slices.SortFunc(want, func(a, b *store.Record) int {
		return strings.Compare(a.Iss+"\x00"+a.Hop, b.Iss+"\x00"+b.Hop)
	})
	for _, limit := range []int{1, 3, len(want), len(want) + 5} {
		var got []*store.Record
		var after store.HopKey
		for pages := 0; ; pages++ {
			page, err := s.Hops(ctx, store.Accepted, after, limit)
			if err != nil {
				t.Fatalf("Hops(accepted, after %v, %d): %v", after, limit, err)
			}
			if len(page) > limit {
				t.Fatalf("Hops(limit %d) returned %d records", limit, len(page))
			}
			if len(page) == 0 || pages > len(want) {
				break
			}
			got = append(got, page...)
			last := page[len(page)-1]
			after = store.HopKey{Iss: last.Iss, Hop: last.Hop}
		}
		if len(got) != len(want) {
			t.Fatalf("Hops(accepted) by pages of %d listed %d records; want %d", limit, len(got), len(want))
		}
		for i := range want {
			checkRecord(t, fmt.Sprintf("Hops(accepted, pages of %d)[%d]", limit, i), got[i], want[i])
		}
	}
	if got, err := s.Hops(ctx, store.Rejected, store.HopKey{}, 10); err != nil || len(got) != 0 {
		t.Errorf("Hops(rejected) = %d records, %v; want none", len(got), err)
	}
	if got, err := s.Hops(ctx, store.Received, store.HopKey{Iss: Iss, Hop: "r-b"}, 100); err != nil || len(got) != 2 || got[0].Hop != "r-z" || got[1].Hop != "r-\u00e9" {
		t.Errorf("Hops(received, after r-b) = %d records, %v; want r-z, r-\u00e9", len(got), err)
	}
	for _, limit := range []int{0, -1} {
		if _, err := s.Hops(ctx, store.Accepted, store.HopKey{}, limit); err == nil {
			t.Errorf("Hops(limit %d) succeeded; want an error", limit)
		}
	}
}

// --- Transition ----------------------------------------------------------

// Transition follows store.CanMove exactly: over every pair of states (and
// some that are not states), an allowed move succeeds, stores the status
// and stamps Decided when the target is terminal; any other move is
// ErrConflict and changes nothing.
func testTransitionFollowsCanMove(t *testing.T, s store.Store) {
	ctx := t.Context()
	targets := append(append([]store.State(nil), allStates...), "", "canceled", "expired")
	now := Base.Add(10 * time.Minute)
	for _, from := range allStates {
		for _, to := range targets {
			hop := fmt.Sprintf("move-%s-%s", from, to)
			before := put(t, s, hop, from)
			status := Status(hop)
			err := s.Transition(ctx, Iss, hop, from, to, status, handoff.FormCOSE, now)
			want := before
			if store.CanMove(from, to) {
				if err != nil {
					t.Errorf("Transition(%s -> %s) = %v; CanMove allows it", from, to, err)
					continue
				}
				want = copyRecord(before)
				want.State, want.Status, want.StatusForm = to, status, handoff.FormCOSE
				if to.Terminal() {
					want.Decided = now
				}
			} else if !errors.Is(err, store.ErrConflict) {
				t.Errorf("Transition(%s -> %s) = %v; want ErrConflict (CanMove forbids it)", from, to, err)
			}
			checkGet(t, s, hop, want)
		}
	}
}

// Transition is a compare-and-swap on the state: from a state the hop is
// not in, even by a move CanMove allows, it is ErrConflict and changes
// nothing.
func testTransitionWrongFromIsConflict(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, actual := range allStates {
		hop := "cas-" + string(actual)
		want := put(t, s, hop, actual)
		for _, from := range allStates {
			for _, to := range allStates {
				if from == actual || !store.CanMove(from, to) {
					continue
				}
				err := s.Transition(ctx, Iss, hop, from, to, Status("cas"), handoff.FormJWS, Base.Add(time.Hour))
				if !errors.Is(err, store.ErrConflict) {
					t.Errorf("hop in %s: Transition(%s -> %s) = %v; want ErrConflict", actual, from, to, err)
				}
				err = s.Transition(ctx, Iss, hop, from, to, nil, handoff.FormJWS, Base.Add(time.Hour))
				if !errors.Is(err, store.ErrConflict) {
					t.Errorf("hop in %s: Transition(%s -> %s, nil status) = %v; want ErrConflict", actual, from, to, err)
				}
			}
		}
		checkGet(t, s, hop, want)
	}
}

// Transition of a hop with no record is ErrNotFound.
func testTransitionMissingIsErrNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	put(t, s, "present", store.Received)
	for _, m := range [][2]store.State{{store.Received, store.Accepted}, {store.Received, store.Completed}, {store.Accepted, store.Failed}} {
		for _, status := range [][]byte{Status("x"), nil} {
			err := s.Transition(ctx, Iss, "absent", m[0], m[1], status, handoff.FormJWS, Base)
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Transition(absent, %s -> %s) = %v; want ErrNotFound", m[0], m[1], err)
			}
		}
	}
	checkGone(t, s, Iss, "absent")
}

// A nil status keeps the last status sent, octets and form, on a move to
// Accepted, and leaves no status on a move to a terminal state (the
// accepted octets are not the terminal state's status); a non-nil one
// replaces it.
func testTransitionNilStatusKeepsStatus(t *testing.T, s store.Store) {
	// Received (no status) -> Accepted with nil: still no status.
	want := put(t, s, "keep-none", store.Received)
	mustMove(t, s, "keep-none", store.Received, store.Accepted, nil, handoff.FormCOSE, Base.Add(time.Second))
	want.State = store.Accepted
	checkGet(t, s, "keep-none", want)

	// Received -> Accepted with a status, then -> Completed with nil: the
	// accepted status does not stand for the completed one; none is kept.
	want = put(t, s, "keep-accepted", store.Received)
	want.State, want.Status, want.StatusForm = store.Accepted, Status("keep-accepted/accepted"), handoff.FormJWS
	mustMove(t, s, "keep-accepted", store.Received, store.Accepted, want.Status, want.StatusForm, Base.Add(time.Second))
	checkGet(t, s, "keep-accepted", want)
	want.State, want.Status, want.StatusForm, want.Decided = store.Completed, nil, 0, Base.Add(2*time.Second)
	mustMove(t, s, "keep-accepted", store.Accepted, store.Completed, nil, handoff.FormCOSE, want.Decided)
	checkGet(t, s, "keep-accepted", want)
	// The same for a claimed Accepted moved to Failed.
	want = put(t, s, "drop-accepted", store.Accepted)
	want.State, want.Status, want.StatusForm, want.Decided = store.Failed, nil, 0, Base.Add(2*time.Second)
	mustMove(t, s, "drop-accepted", store.Accepted, store.Failed, nil, handoff.FormCOSE, want.Decided)
	checkGet(t, s, "drop-accepted", want)

	// A claimed Accepted (with its status) -> Failed with a new status.
	want = put(t, s, "replace", store.Accepted)
	want.State, want.Status, want.StatusForm, want.Decided = store.Failed, Status("replace/failed"), handoff.FormCOSE, Base.Add(3*time.Second)
	mustMove(t, s, "replace", store.Accepted, store.Failed, bytes.Clone(want.Status), want.StatusForm, want.Decided)
	checkGet(t, s, "replace", want)
}

// Errors about one hop name it (iss and hop) and still match their
// sentinel with errors.Is.
func testErrorsNameTheHop(t *testing.T, s store.Store) {
	ctx := t.Context()
	put(t, s, "named-accepted", store.Accepted)
	put(t, s, "named-completed", store.Completed)
	check := func(what string, err, sentinel error, hop string) {
		t.Helper()
		if !errors.Is(err, sentinel) {
			t.Errorf("%s = %v; want %v", what, err, sentinel)
			return
		}
		if msg := err.Error(); !strings.Contains(msg, hop) || !strings.Contains(msg, Iss) {
			t.Errorf("%s = %q; want it to name hop %q of %q", what, msg, hop, Iss)
		}
	}
	_, err := s.Get(ctx, Iss, "named-absent")
	check("Get(absent)", err, store.ErrNotFound, "named-absent")
	check("Transition(absent)", s.Transition(ctx, Iss, "named-absent", store.Received, store.Accepted, nil, 0, Base), store.ErrNotFound, "named-absent")
	check("Transition(completed -> completed)", s.Transition(ctx, Iss, "named-completed", store.Completed, store.Completed, Status("c"), 0, Base),
		store.ErrConflict, "named-completed")
	check("Transition(wrong from)", s.Transition(ctx, Iss, "named-accepted", store.Received, store.Accepted, nil, 0, Base), store.ErrConflict, "named-accepted")
	check("MarkCanceled(absent)", s.MarkCanceled(ctx, Iss, "named-absent"), store.ErrNotFound, "named-absent")
	check("MarkEquivocated(absent)", s.MarkEquivocated(ctx, Iss, "named-absent"), store.ErrNotFound, "named-absent")
	check("Release(absent)", s.Release(ctx, Iss, "named-absent", Base), store.ErrNotFound, "named-absent")
	check("Release(completed)", s.Release(ctx, Iss, "named-completed", Base), store.ErrConflict, "named-completed")
	check("TransitionIf(absent)", s.TransitionIf(ctx, Iss, "named-absent", store.Accepted, store.Failed, false, nil, 0, Base), store.ErrNotFound, "named-absent")
	check("TransitionIf(wrong mark)", s.TransitionIf(ctx, Iss, "named-accepted", store.Accepted, store.Failed, true, Status("f"), 0, Base),
		store.ErrConflict, "named-accepted")
}

// TransitionIf is Transition that also requires the Equivocated mark to be
// as given (draft "Forks, Concurrency, and Equivocation": a "failed" of an
// equivocated hop carries reason "equivocation", so a status signed before
// the mark must not be stored after it): with the mark as given it moves
// the hop exactly as Transition does; with the mark otherwise, or from the
// wrong state, it is ErrConflict and changes nothing.
func testTransitionIf(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := Base.Add(time.Hour)
	for _, marked := range []bool{false, true} {
		for _, status := range [][]byte{Status("if"), nil} {
			hop := fmt.Sprintf("if-%v-%v", marked, status != nil)
			want := put(t, s, hop, store.Accepted)
			if marked {
				if err := s.MarkEquivocated(ctx, Iss, hop); err != nil {
					t.Fatal(err)
				}
				want.Equivocated = true
			}
			if err := s.TransitionIf(ctx, Iss, hop, store.Accepted, store.Failed, !marked, status, handoff.FormCOSE, now); !errors.Is(err, store.ErrConflict) {
				t.Errorf("%s: TransitionIf(equivocated %v) on a hop marked %v = %v; want ErrConflict", hop, !marked, marked, err)
			}
			if err := s.TransitionIf(ctx, Iss, hop, store.Received, store.Failed, marked, status, handoff.FormCOSE, now); !errors.Is(err, store.ErrConflict) {
				t.Errorf("%s: TransitionIf from the wrong state = %v; want ErrConflict", hop, err)
			}
			checkGet(t, s, hop, want)
			if err := s.TransitionIf(ctx, Iss, hop, store.Accepted, store.Failed, marked, status, handoff.FormCOSE, now); err != nil {
				t.Errorf("%s: TransitionIf(equivocated %v) on a hop marked %v = %v; want it moved", hop, marked, marked, err)
				continue
			}
			want.State, want.Status, want.StatusForm, want.Decided = store.Failed, status, handoff.FormCOSE, now
			if status == nil {
				want.StatusForm = 0
			}
			checkGet(t, s, hop, want)
		}
	}
	// A move that keeps the status (to Accepted, nil status) checks the mark too.
	want := put(t, s, "if-keep", store.Received)
	if err := s.TransitionIf(ctx, Iss, "if-keep", store.Received, store.Accepted, true, nil, 0, now); !errors.Is(err, store.ErrConflict) {
		t.Errorf("TransitionIf(received -> accepted, equivocated true) on an unmarked hop = %v; want ErrConflict", err)
	}
	checkGet(t, s, "if-keep", want)
	if err := s.TransitionIf(ctx, Iss, "if-keep", store.Received, store.Accepted, false, nil, 0, now); err != nil {
		t.Errorf("TransitionIf(received -> accepted) = %v", err)
	}
	want.State = store.Accepted
	checkGet(t, s, "if-keep", want)
}

// Decided is stamped with now when, and only when, the move is to a
// terminal state.
func testTransitionTerminalStampsDecided(t *testing.T, s store.Store) {
	put(t, s, "decide", store.Received)
	t1, t2 := Base.Add(time.Minute), Base.Add(7*time.Minute+time.Nanosecond)
	mustMove(t, s, "decide", store.Received, store.Accepted, Status("a"), handoff.FormJWS, t1)
	if r := mustGet(t, s, "decide"); !r.Decided.IsZero() {
		t.Errorf("after received -> accepted, Decided = %v; want zero", r.Decided)
	}
	mustMove(t, s, "decide", store.Accepted, store.Completed, Status("c"), handoff.FormJWS, t2)
	if r := mustGet(t, s, "decide"); !r.Decided.Equal(t2) {
		t.Errorf("after accepted -> completed, Decided = %v; want %v", r.Decided, t2)
	}
	for i, to := range []store.State{store.Rejected, store.Completed, store.Failed} {
		hop := "direct-" + string(to)
		put(t, s, hop, store.Received)
		now := Base.Add(time.Duration(i+1) * time.Hour)
		mustMove(t, s, hop, store.Received, to, Status(hop), handoff.FormCOSE, now)
		if r := mustGet(t, s, hop); !r.Decided.Equal(now) {
			t.Errorf("after received -> %s, Decided = %v; want %v", to, r.Decided, now)
		}
	}
}

// --- Marks ---------------------------------------------------------------

// MarkCanceled sets Canceled and nothing else, in any state, more than
// once; on a missing hop it is ErrNotFound.
func testMarkCanceled(t *testing.T, s store.Store) {
	testMark(t, s, "MarkCanceled", s.MarkCanceled, func(r *store.Record) { r.Canceled = true })
}

// MarkEquivocated sets Equivocated and nothing else, in any state, more
// than once; on a missing hop it is ErrNotFound.
func testMarkEquivocated(t *testing.T, s store.Store) {
	testMark(t, s, "MarkEquivocated", s.MarkEquivocated, func(r *store.Record) { r.Equivocated = true })
}

func testMark(t *testing.T, s store.Store, name string, mark func(ctx context.Context, iss, hop string) error, set func(*store.Record)) {
	ctx := t.Context()
	for _, st := range allStates {
		hop := "mark-" + string(st)
		want := put(t, s, hop, st)
		other := put(t, s, hop+"-other", st)
		for range 2 {
			if err := mark(ctx, Iss, hop); err != nil {
				t.Fatalf("%s(%s): %v", name, hop, err)
			}
		}
		set(want)
		checkGet(t, s, hop, want)
		checkGet(t, s, hop+"-other", other)
	}
	// The mark survives a transition.
	want := put(t, s, "mark-then-move", store.Accepted)
	if err := mark(ctx, Iss, "mark-then-move"); err != nil {
		t.Fatal(err)
	}
	set(want)
	want.State, want.Status, want.StatusForm, want.Decided = store.Failed, Status("f"), handoff.FormJWS, Base.Add(time.Hour)
	mustMove(t, s, "mark-then-move", store.Accepted, store.Failed, want.Status, want.StatusForm, want.Decided)
	checkGet(t, s, "mark-then-move", want)

	if err := mark(ctx, Iss, "absent"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s(absent) = %v; want ErrNotFound", name, err)
	}
	checkGone(t, s, Iss, "absent")
}

// --- Flags ---------------------------------------------------------------

func sampleFlags() []store.Flag {
	return []store.Flag{
		{Kind: store.FlagEquivocation, Iss: Iss, Hop: "f1", Detail: "digest a != digest b", Created: Base},
		{Kind: store.FlagUnknownOutcome, Iss: Iss, Hop: "f2", Detail: "lookup timed out\nsecond line, ünïcode", Created: Base.Add(time.Second)},
		{Kind: store.FlagConflictingInputs, Iss: "https://agent.example/other", Hop: "f3", Detail: "", Created: Base.Add(2*time.Second + time.Nanosecond)},
	}
}

func checkFlags(t *testing.T, what string, got, want []store.Flag) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d flags %+v; want %d %+v", what, len(got), got, len(want), want)
		return
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Kind != w.Kind || g.Iss != w.Iss || g.Hop != w.Hop || g.Detail != w.Detail ||
			!g.Created.Equal(w.Created) || !g.Resolved.Equal(w.Resolved) || g.Resolution != w.Resolution || g.Key != w.Key {
			t.Errorf("%s: flag %d = %+v; want %+v", what, i, g, w)
		}
	}
}

func raiseAll(t *testing.T, s store.Store, flags []store.Flag) []store.Flag {
	t.Helper()
	var prev int64
	for i := range flags {
		id, err := s.Raise(t.Context(), flags[i])
		if err != nil {
			t.Fatalf("Raise: %v", err)
		}
		if i > 0 && id <= prev {
			t.Errorf("Raise returned id %d after %d; want increasing ids (Flags lists oldest first)", id, prev)
		}
		prev = id
		flags[i].ID = id
	}
	return flags
}

func mustFlags(t *testing.T, s store.Store, all bool) []store.Flag {
	t.Helper()
	fl, err := s.Flags(t.Context(), all)
	if err != nil {
		t.Fatalf("Flags(%v): %v", all, err)
	}
	return fl
}

// Raise records a flag and returns its id; Flags lists them oldest first,
// open ones only unless all; Resolve closes one with the operator's
// resolution and time.
func testFlagsRaiseListResolve(t *testing.T, s store.Store) {
	ctx := t.Context()
	checkFlags(t, "Flags(open) of an empty store", mustFlags(t, s, false), nil)
	checkFlags(t, "Flags(all) of an empty store", mustFlags(t, s, true), nil)

	flags := raiseAll(t, s, sampleFlags())
	checkFlags(t, "Flags(open)", mustFlags(t, s, false), flags)
	checkFlags(t, "Flags(all)", mustFlags(t, s, true), flags)

	at := Base.Add(time.Hour + time.Nanosecond)
	if err := s.Resolve(ctx, flags[1].ID, "checked the ledger: done ✓", at); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	resolved := append([]store.Flag(nil), flags...)
	resolved[1].Resolved, resolved[1].Resolution = at, "checked the ledger: done ✓"
	checkFlags(t, "Flags(open) after Resolve", mustFlags(t, s, false), []store.Flag{flags[0], flags[2]})
	checkFlags(t, "Flags(all) after Resolve", mustFlags(t, s, true), resolved)

	// A flag raised later comes last.
	late := raiseAll(t, s, []store.Flag{{Kind: store.FlagEquivocation, Iss: Iss, Hop: "f4", Detail: "late", Created: Base.Add(-time.Hour)}})
	if late[0].ID <= flags[2].ID {
		t.Errorf("a later flag got id %d, not above %d", late[0].ID, flags[2].ID)
	}
	checkFlags(t, "Flags(open) after a later Raise", mustFlags(t, s, false), []store.Flag{flags[0], flags[2], late[0]})
	checkFlags(t, "Flags(all) after a later Raise", mustFlags(t, s, true), append(resolved, late[0]))
}

// Resolving a flag twice, or a flag that does not exist, is an error and
// changes nothing.
func testResolveTwiceOrUnknownFails(t *testing.T, s store.Store) {
	ctx := t.Context()
	flags := raiseAll(t, s, sampleFlags())
	if err := s.Resolve(ctx, flags[0].ID, "first", Base.Add(time.Minute)); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if err := s.Resolve(ctx, flags[0].ID, "second", Base.Add(2*time.Minute)); err == nil {
		t.Errorf("resolving flag %d twice succeeded; want an error", flags[0].ID)
	}
	maxID := flags[len(flags)-1].ID
	for _, id := range []int64{0, -1, maxID + 1, maxID + 1000} {
		if err := s.Resolve(ctx, id, "nope", Base); err == nil {
			t.Errorf("Resolve(%d) of an unknown flag succeeded; want an error", id)
		}
	}
	want := append([]store.Flag(nil), flags...)
	want[0].Resolved, want[0].Resolution = Base.Add(time.Minute), "first"
	checkFlags(t, "Flags(all)", mustFlags(t, s, true), want)
	checkFlags(t, "Flags(open)", mustFlags(t, s, false), want[1:])
}

// --- Sweep ---------------------------------------------------------------

type sweepStep struct {
	now  time.Time
	gone []string // hops that go at this step
}

func runSweep(t *testing.T, s store.Store, retention time.Duration, hops []string, steps []sweepStep) {
	t.Helper()
	ctx := t.Context()
	present := map[string]bool{}
	for _, h := range hops {
		present[h] = true
	}
	for _, st := range steps {
		n, err := s.Sweep(ctx, st.now, retention)
		if err != nil {
			t.Fatalf("Sweep(%v): %v", st.now, err)
		}
		if n != len(st.gone) {
			t.Errorf("Sweep(now=Base+%v) removed %d records; want %d (%v)", st.now.Sub(Base), n, len(st.gone), st.gone)
		}
		for _, h := range st.gone {
			present[h] = false
		}
		for _, h := range hops {
			_, err := s.Get(ctx, Iss, h)
			switch {
			case present[h] && err != nil:
				t.Errorf("after Sweep(now=Base+%v), Get(%s) = %v; want the record (it may not go yet)", st.now.Sub(Base), h, err)
			case !present[h] && !errors.Is(err, store.ErrNotFound):
				t.Errorf("after Sweep(now=Base+%v), Get(%s) = %v; want ErrNotFound (it may go)", st.now.Sub(Base), h, err)
			}
		}
	}
}

// Sweep removes exactly the records that may go: never before KeepUntil
// (strictly after it); a terminal one once now is strictly after Decided
// plus retention; a Received one once past KeepUntil; an Accepted one
// never (its outcome is unknown).
func testSweepRetentionRule(t *testing.T, s store.Store) {
	ctx := t.Context()
	K := Base.Add(keepFor)
	put(t, s, "received", store.Received)                   // goes after K
	put(t, s, "accepted", store.Accepted)                   // never
	put(t, s, "accepted-canceled", store.Accepted)          // never
	put(t, s, "rejected", store.Rejected)                   // decided Base: goes after Base+1h
	r := NewRecord("rejected-long-keep", store.Rejected, 0) // decided Base, kept until Base+4h
	r.KeepUntil = Base.Add(4 * time.Hour)
	mustClaim(t, s, r)
	r = NewRecord("received-long-keep", store.Received, 0) // kept until Base+2h
	r.KeepUntil = Base.Add(2 * time.Hour)
	mustClaim(t, s, r)
	put(t, s, "failed-30m", store.Accepted) // failed at Base+30m: goes after Base+1h30m
	mustMove(t, s, "failed-30m", store.Accepted, store.Failed, Status("f"), handoff.FormJWS, Base.Add(30*time.Minute))
	put(t, s, "completed-2h", store.Received) // completed at Base+2h: goes after Base+3h
	mustMove(t, s, "completed-2h", store.Received, store.Completed, Status("c"), handoff.FormJWS, Base.Add(2*time.Hour))
	if err := s.MarkCanceled(ctx, Iss, "accepted-canceled"); err != nil {
		t.Fatal(err)
	}
	hops := []string{"received", "accepted", "accepted-canceled", "rejected", "rejected-long-keep",
		"received-long-keep", "failed-30m", "completed-2h"}
	ns := time.Nanosecond
	runSweep(t, s, Retention, hops, []sweepStep{
		{Base.Add(-time.Hour), nil},
		{Base, nil},
		{K, nil},
		{K.Add(ns), []string{"received"}},
		{Base.Add(time.Hour), nil},
		{Base.Add(time.Hour + ns), []string{"rejected"}},
		{Base.Add(90 * time.Minute), nil},
		{Base.Add(90*time.Minute + ns), []string{"failed-30m"}},
		{Base.Add(2 * time.Hour), nil},
		{Base.Add(2*time.Hour + ns), []string{"received-long-keep"}},
		{Base.Add(3 * time.Hour), nil},
		{Base.Add(3*time.Hour + ns), []string{"completed-2h"}},
		{Base.Add(4 * time.Hour), nil},
		{Base.Add(4*time.Hour + ns), []string{"rejected-long-keep"}},
		{Base.Add(10 * 365 * 24 * time.Hour), nil}, // accepted hops stay
	})
	// A smaller retention later changes nothing for Accepted.
	if n, err := s.Sweep(ctx, Base.Add(20*365*24*time.Hour), 0); err != nil || n != 0 {
		t.Errorf("Sweep with zero retention = %d, %v; want 0 (only accepted hops are left)", n, err)
	}
}

// With zero retention a terminal record goes as soon as now is past both
// KeepUntil and Decided.
func testSweepZeroRetention(t *testing.T, s store.Store) {
	K := Base.Add(keepFor)
	put(t, s, "done-early", store.Received) // decided at Base+1m < K: goes after K
	mustMove(t, s, "done-early", store.Received, store.Completed, Status("c"), handoff.FormJWS, Base.Add(time.Minute))
	put(t, s, "done-late", store.Accepted) // decided at K+1m: goes after K+1m
	mustMove(t, s, "done-late", store.Accepted, store.Failed, nil, handoff.FormJWS, K.Add(time.Minute))
	put(t, s, "accepted", store.Accepted)
	ns := time.Nanosecond
	runSweep(t, s, 0, []string{"done-early", "done-late", "accepted"}, []sweepStep{
		{K, nil},
		{K.Add(ns), []string{"done-early"}},
		{K.Add(time.Minute), nil},
		{K.Add(time.Minute + ns), []string{"done-late"}},
	})
}

// Sweep removes the flags resolved longer than the retention period ago
// (strictly), never an open one, and never a hop record for a flag.
func testSweepPrunesFlags(t *testing.T, s store.Store) {
	ctx := t.Context()
	put(t, s, "f1", store.Received)
	put(t, s, "f2", store.Rejected)
	put(t, s, "f3", store.Accepted)
	flags := raiseAll(t, s, sampleFlags())
	resolvedAt := []time.Time{Base.Add(time.Minute), {}, Base.Add(3 * time.Hour)}
	for i, at := range resolvedAt {
		if at.IsZero() {
			continue
		}
		if err := s.Resolve(ctx, flags[i].ID, "ok", at); err != nil {
			t.Fatal(err)
		}
		flags[i].Resolved, flags[i].Resolution = at, "ok"
	}
	steps := []struct {
		now  time.Time
		want []store.Flag
	}{
		{Base.Add(time.Minute + Retention), flags},
		{Base.Add(time.Minute + Retention + time.Nanosecond), flags[1:]},
		{Base.Add(3*time.Hour + Retention), flags[1:]},
		{Base.Add(3*time.Hour + Retention + time.Nanosecond), flags[1:2]},
		{Base.Add(1000 * time.Hour), flags[1:2]},
	}
	for _, st := range steps {
		if _, err := s.Sweep(ctx, st.now, Retention); err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		checkFlags(t, fmt.Sprintf("Flags(all) after Sweep(now=Base+%v)", st.now.Sub(Base)), mustFlags(t, s, true), st.want)
	}
	checkFlags(t, "Flags(open)", mustFlags(t, s, false), flags[1:2])
	mustGet(t, s, "f3") // accepted: stays
	// Ids are not reused after pruning; the pruned ones cannot be resolved.
	late := raiseAll(t, s, []store.Flag{{Kind: store.FlagEquivocation, Iss: Iss, Hop: "f4", Detail: "late", Created: Base}})
	if late[0].ID <= flags[2].ID {
		t.Errorf("a flag raised after pruning got id %d, not above %d", late[0].ID, flags[2].ID)
	}
	if err := s.Resolve(ctx, flags[0].ID, "again", Base.Add(2000*time.Hour)); err == nil {
		t.Errorf("resolving a pruned flag succeeded")
	}
	if err := s.Resolve(ctx, late[0].ID, "ok", Base.Add(2000*time.Hour)); err != nil {
		t.Errorf("Resolve after pruning: %v", err)
	}
}

// Release marks an accepted hop released (Released = now) and changes
// nothing else; it is ErrConflict on any other state or a second time,
// ErrNotFound on a missing hop. A released hop still takes its outcome.
func testRelease(t *testing.T, s store.Store) {
	ctx := t.Context()
	at := Base.Add(time.Hour + time.Nanosecond)
	for _, st := range allStates {
		hop := "release-" + string(st)
		want := put(t, s, hop, st)
		err := s.Release(ctx, Iss, hop, at)
		if st != store.Accepted {
			if !errors.Is(err, store.ErrConflict) {
				t.Errorf("Release of a %s hop = %v; want ErrConflict", st, err)
			}
			checkGet(t, s, hop, want)
			continue
		}
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
		want.Released = at
		checkGet(t, s, hop, want)
		if err := s.Release(ctx, Iss, hop, at.Add(time.Hour)); !errors.Is(err, store.ErrConflict) {
			t.Errorf("second Release = %v; want ErrConflict", err)
		}
		checkGet(t, s, hop, want)
		// The operator learns the outcome after all.
		want.State, want.Status, want.StatusForm, want.Decided = store.Failed, Status("late"), handoff.FormJWS, at.Add(time.Minute)
		mustMove(t, s, hop, store.Accepted, store.Failed, want.Status, want.StatusForm, want.Decided)
		checkGet(t, s, hop, want)
	}
	if err := s.Release(ctx, Iss, "absent", at); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Release(absent) = %v; want ErrNotFound", err)
	}
}

// A released accepted hop goes once now is strictly after both its
// KeepUntil and Released plus the retention; an accepted hop not released
// never goes.
func testSweepReleased(t *testing.T, s store.Store) {
	ctx := t.Context()
	K := Base.Add(keepFor)
	put(t, s, "released-late", store.Accepted) // released at Base+1h: goes after Base+2h
	if err := s.Release(ctx, Iss, "released-late", Base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	put(t, s, "released-early", store.Accepted) // released at Base, retention 1h, kept until K
	if err := s.Release(ctx, Iss, "released-early", Base.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	put(t, s, "accepted", store.Accepted)
	ns := time.Nanosecond
	runSweep(t, s, Retention, []string{"released-late", "released-early", "accepted"}, []sweepStep{
		{K, nil},
		{K.Add(ns), []string{"released-early"}},
		{Base.Add(2 * time.Hour), nil},
		{Base.Add(2*time.Hour + ns), []string{"released-late"}},
		{Base.Add(1000 * time.Hour), nil},
	})
}

// claimMany claims the records from 16 goroutines (a SQL store commits
// them in groups) and fails t on any error.
func claimMany(t *testing.T, s store.Store, rs []*store.Record) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(rs))
	next := make(chan *store.Record)
	for range 16 {
		wg.Go(func() {
			for r := range next {
				if _, ins, err := s.Claim(t.Context(), r); err != nil || !ins {
					errs <- fmt.Errorf("Claim(%s) = inserted %v, %v", r.Hop, ins, err)
				}
			}
		})
	}
	for _, r := range rs {
		next <- r
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A sweep over more records than a store handles in one step (a SQL store
// deletes in windows of a few hundred rows) removes exactly the records
// that may go, and claims made while it runs succeed and stay.
func testSweepMany(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 1500
	var old []*store.Record
	for i := range n {
		st := store.Received // may go after KeepUntil
		if i%3 == 0 {
			st = store.Accepted // stays
		}
		old = append(old, NewRecord(fmt.Sprintf("bulk-%05d", i), st, i))
	}
	claimMany(t, s, old)

	// Claims during the sweep: new hops (keys before, among and after the
	// old ones), kept long enough that this sweep may not remove them.
	var fresh []*store.Record
	for i := range 60 {
		r := NewRecord(fmt.Sprintf("%s-%03d", []string{"a", "bulk-00500", "z"}[i%3], i), store.Received, i)
		r.KeepUntil = Base.Add(24 * time.Hour)
		fresh = append(fresh, r)
	}
	swept := make(chan error, 1)
	var removed int
	go func() {
		var err error
		removed, err = s.Sweep(ctx, Base.Add(keepFor+time.Minute), Retention)
		swept <- err
	}()
	for _, r := range fresh {
		got, ins, err := s.Claim(ctx, copyRecord(r))
		if err != nil || !ins {
			t.Fatalf("Claim(%s) during a sweep = inserted %v, %v; want a new record", r.Hop, ins, err)
		}
		checkRecord(t, "Claim during a sweep", got, r)
	}
	if err := <-swept; err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if removed != n-n/3 {
		t.Errorf("Sweep removed %d records; want %d (the received ones)", removed, n-n/3)
	}
	for _, r := range old {
		_, err := s.Get(ctx, r.Iss, r.Hop)
		if r.State == store.Accepted && err != nil {
			t.Fatalf("Get(%s) after the sweep = %v; an accepted hop may not go", r.Hop, err)
		}
		if r.State == store.Received && !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Get(%s) after the sweep = %v; want ErrNotFound (it may go)", r.Hop, err)
		}
	}
	for _, r := range fresh {
		checkGet(t, s, r.Hop, r)
	}
}

// --- Since and Forget -------------------------------------------------------

func mustSince(t *testing.T, s store.Store) time.Time {
	t.Helper()
	since, err := s.Since(t.Context())
	if err != nil {
		t.Fatalf("Since: %v", err)
	}
	return since
}

// Since is set when the store is created and does not move on its own, nor
// with claims, transitions, flags or sweeps.
func testSinceIsStable(t *testing.T, s store.Store) {
	ctx := t.Context()
	s0 := mustSince(t, s)
	if s0.IsZero() {
		t.Fatalf("Since of a new store is zero")
	}
	if s1 := mustSince(t, s); !s1.Equal(s0) {
		t.Fatalf("Since moved between two calls: %v, then %v", s0, s1)
	}
	put(t, s, "a", store.Received)
	put(t, s, "b", store.Accepted)
	mustMove(t, s, "b", store.Accepted, store.Completed, Status("c"), handoff.FormJWS, Base.Add(time.Minute))
	raiseAll(t, s, sampleFlags())
	if _, err := s.Sweep(ctx, Base.Add(48*time.Hour), Retention); err != nil {
		t.Fatal(err)
	}
	if s2 := mustSince(t, s); !s2.Equal(s0) {
		t.Errorf("Since moved from %v to %v without a Forget", s0, s2)
	}
}

// Forget drops every hop record, in every state, keeps the flags, and sets
// Since to now; a forgotten hop can be claimed again.
func testForget(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, st := range allStates {
		put(t, s, "forget-"+string(st), st)
	}
	flags := raiseAll(t, s, sampleFlags())
	if err := s.Resolve(ctx, flags[0].ID, "ok", Base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	flags[0].Resolved, flags[0].Resolution = Base.Add(time.Minute), "ok"

	at := Base.Add(2*time.Hour + 7*time.Nanosecond)
	if err := s.Forget(ctx, at); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	for _, st := range allStates {
		checkGone(t, s, Iss, "forget-"+string(st))
	}
	if since := mustSince(t, s); !since.Equal(at) {
		t.Errorf("Since after Forget(%v) = %v", at, since)
	}
	if since := mustSince(t, s); !since.Equal(at) {
		t.Errorf("Since after Forget(%v), asked again = %v", at, since)
	}
	checkFlags(t, "Flags(all) after Forget", mustFlags(t, s, true), flags)
	checkFlags(t, "Flags(open) after Forget", mustFlags(t, s, false), flags[1:])
	if n, err := s.Sweep(ctx, Base.Add(100*24*time.Hour), 0); err != nil || n != 0 {
		t.Errorf("Sweep after Forget = %d, %v; want 0", n, err)
	}
	// The forgotten pair is new again.
	put(t, s, "forget-accepted", store.Received)

	// A second Forget moves Since again.
	at2 := at.Add(time.Hour)
	if err := s.Forget(ctx, at2); err != nil {
		t.Fatalf("second Forget: %v", err)
	}
	if since := mustSince(t, s); !since.Equal(at2) {
		t.Errorf("Since after a second Forget(%v) = %v", at2, since)
	}
	checkGone(t, s, Iss, "forget-accepted")
}

// --- Concurrency -----------------------------------------------------------

// 64 goroutines claim one (iss, hop) at once, each with its own offer:
// exactly one stores its record, and every other call gets that record.
func testConcurrentClaim(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 64
	for round := range 3 {
		hop := fmt.Sprintf("race-%d", round)
		type result struct {
			got      *store.Record
			inserted bool
			err      error
		}
		mine := make([]*store.Record, n)
		results := make([]result, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			mine[i] = NewRecord(hop, []store.State{store.Received, store.Accepted, store.Rejected}[i%3], i)
			mine[i].Received = Base.Add(time.Duration(i) * time.Millisecond)
			r := copyRecord(mine[i])
			wg.Go(func() {
				<-start
				var res result
				res.got, res.inserted, res.err = s.Claim(ctx, r)
				results[i] = res
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, res := range results {
			if res.err != nil {
				t.Fatalf("round %d: Claim %d: %v", round, i, res.err)
			}
			if res.inserted {
				if winner >= 0 {
					t.Fatalf("round %d: claims %d and %d both inserted", round, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no claim inserted", round)
		}
		for i, res := range results {
			if d := DiffRecord(res.got, mine[winner]); d != nil {
				t.Errorf("round %d: Claim %d returned a record other than the winner's (%d):\n\t%s", round, i, winner, strings.Join(d, "\n\t"))
			}
		}
		checkGet(t, s, hop, mine[winner])
	}
}

// 16 goroutines race the same Transition from one state: exactly one
// succeeds, the others get ErrConflict, and the record holds the winner's
// state, status and time.
func testConcurrentTransition(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 16
	for round, from := range []store.State{store.Accepted, store.Received, store.Accepted, store.Received} {
		hop := fmt.Sprintf("race-move-%d", round)
		want := put(t, s, hop, from)
		var targets []store.State
		for _, to := range allStates {
			if store.CanMove(from, to) {
				targets = append(targets, to)
			}
		}
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				errs[i] = s.Transition(ctx, Iss, hop, from, targets[i%len(targets)], Status(fmt.Sprintf("%s/%d", hop, i)),
					handoff.Form(i%2), Base.Add(time.Duration(i+1)*time.Second))
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: transitions %d and %d both succeeded", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrConflict):
				t.Errorf("round %d: transition %d = %v; want success or ErrConflict", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no transition succeeded", round)
		}
		to := targets[winner%len(targets)]
		want.State, want.Status, want.StatusForm = to, Status(fmt.Sprintf("%s/%d", hop, winner)), handoff.Form(winner%2)
		if to.Terminal() {
			want.Decided = Base.Add(time.Duration(winner+1) * time.Second)
		}
		checkGet(t, s, hop, want)
	}
}

// --- Close -----------------------------------------------------------------

// After Close, every method fails with ErrClosed.
func testClosed(t *testing.T, s store.Store) {
	ctx := t.Context()
	put(t, s, "h", store.Accepted)
	if _, err := s.Raise(ctx, sampleFlags()[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
	_, _, err := s.Claim(ctx, NewRecord("h2", store.Received, 0))
	check("Claim", err)
	_, err = s.Get(ctx, Iss, "h")
	check("Get", err)
	_, err = s.Hops(ctx, store.Accepted, store.HopKey{}, 10)
	check("Hops", err)
	check("Transition", s.Transition(ctx, Iss, "h", store.Accepted, store.Completed, Status("c"), handoff.FormJWS, Base))
	check("Release", s.Release(ctx, Iss, "h", Base))
	check("MarkCanceled", s.MarkCanceled(ctx, Iss, "h"))
	check("MarkEquivocated", s.MarkEquivocated(ctx, Iss, "h"))
	_, err = s.Raise(ctx, sampleFlags()[1])
	check("Raise", err)
	_, err = s.Flags(ctx, true)
	check("Flags", err)
	check("Resolve", s.Resolve(ctx, 1, "x", Base))
	_, err = s.Sweep(ctx, Base.Add(time.Hour), 0)
	check("Sweep", err)
	_, err = s.Since(ctx)
	check("Since", err)
	check("Forget", s.Forget(ctx, Base))
	_, err = s.CopyStatus(ctx, Iss, "h", handoff.DigestOf(nil))
	check("CopyStatus", err)
	_, err = s.PutCopy(ctx, &store.Copy{Iss: Iss, Hop: "h", Digest: handoff.DigestOf(nil), Basis: Status("h/accepted")}, nil)
	check("PutCopy", err)
}
