package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

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
		want.Earlier, want.EarlierForm = want.Status, want.StatusForm
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
