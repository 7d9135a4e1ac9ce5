package storetest

import (
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

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

// r.State must be Received, Accepted or Rejected, and a claim is of a
// new hop (store.CheckClaim: not released, no status before its first, none
// at all when received); any other claim is refused and stores nothing.
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
	// A hop received, not yet decided, has sent no status; a new hop has
	// sent none before its first (store.Record.Earlier).
	for _, bad := range []func(r *store.Record){
		func(r *store.Record) { r.State, r.Status = store.Received, Status("sent") },
		func(r *store.Record) { r.Earlier = Status("before") },
		func(r *store.Record) { r.Earlier = []byte{} },
		func(r *store.Record) { r.EarlierForm = handoff.FormCOSE },
	} {
		r := NewRecord("sent-before", store.Accepted, 1)
		bad(r)
		if got, inserted, err := s.Claim(ctx, r); err == nil || inserted {
			t.Errorf("Claim of %s with status %q, earlier %q (form %v) = %+v, inserted %v, %v; want an error",
				r.State, r.Status, r.Earlier, r.EarlierForm, got, inserted, err)
		}
		checkGone(t, s, Iss, r.Hop)
	}
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
