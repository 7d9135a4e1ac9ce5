package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

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
				errs[i] = s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: from, To: targets[i%len(targets)], Status: Status(fmt.Sprintf("%s/%d", hop, i)), Form: handoff.Form(i % 2), Now: Base.Add(time.Duration(i+1) * time.Second)})
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
		want.Earlier, want.EarlierForm = want.Status, want.StatusForm
		want.State, want.Status, want.StatusForm = to, Status(fmt.Sprintf("%s/%d", hop, winner)), handoff.Form(winner%2)
		if to.Terminal() {
			want.Decided = Base.Add(time.Duration(winner+1) * time.Second)
		}
		checkGet(t, s, hop, want)
	}
}

// Claims and moves of many hops at once, as a loaded delegate makes them
// (a store may write them together in one commit): each gets its own
// answer. Every move of a recorded hop lands with its own status, every
// new claim is stored, and a move of a hop not recorded (ErrNotFound) or
// from the wrong state (ErrConflict) fails alone, not its neighbours.
func testConcurrentClaimsAndMoves(t *testing.T, s store.Store) {
	ctx := t.Context()
	const n = 24
	want := make([]*store.Record, n)
	for i := range n {
		want[i] = put(t, s, fmt.Sprintf("mix-%d", i), store.Accepted)
	}
	moved, wrong, missing := make([]error, n), make([]error, n), make([]error, n)
	claimed := make([]bool, n)
	claimErrs := make([]error, n)
	fresh := make([]*store.Record, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		hop := fmt.Sprintf("mix-%d", i)
		fresh[i] = NewRecord(fmt.Sprintf("mix-new-%d", i), store.Accepted, i)
		r := copyRecord(fresh[i])
		wg.Go(func() {
			<-start
			moved[i] = s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: store.Accepted, To: store.Completed,
				Status: Status(hop + "/completed"), Form: handoff.FormJWS, Now: Base.Add(time.Duration(i+1) * time.Second)})
		})
		wg.Go(func() {
			<-start
			_, claimed[i], claimErrs[i] = s.Claim(ctx, r)
		})
		wg.Go(func() {
			<-start
			// From a state no hop here is in.
			wrong[i] = s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: store.Received, To: store.Rejected,
				Status: Status(hop + "/rejected"), Form: handoff.FormJWS, Now: Base})
		})
		wg.Go(func() {
			<-start
			missing[i] = s.Transition(ctx, store.Move{Iss: Iss, Hop: fmt.Sprintf("mix-none-%d", i), From: store.Accepted, To: store.Failed,
				Status: Status("none"), Form: handoff.FormJWS, Now: Base})
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		hop := fmt.Sprintf("mix-%d", i)
		if moved[i] != nil {
			t.Errorf("move of %s: %v", hop, moved[i])
		}
		if claimErrs[i] != nil || !claimed[i] {
			t.Errorf("claim of %s: stored %v, %v", fresh[i].Hop, claimed[i], claimErrs[i])
		}
		if !errors.Is(wrong[i], store.ErrConflict) {
			t.Errorf("move of %s from received: %v, want ErrConflict", hop, wrong[i])
		}
		var he *store.HopError
		if !errors.Is(missing[i], store.ErrNotFound) || !errors.As(missing[i], &he) || he.Hop != fmt.Sprintf("mix-none-%d", i) {
			t.Errorf("move of an unrecorded hop: %v, want ErrNotFound naming it", missing[i])
		}
		w := want[i]
		w.Earlier, w.EarlierForm = w.Status, w.StatusForm
		w.State, w.Status, w.StatusForm, w.Decided = store.Completed, Status(hop+"/completed"), handoff.FormJWS, Base.Add(time.Duration(i+1)*time.Second)
		checkGet(t, s, hop, w)
		checkGet(t, s, fresh[i].Hop, fresh[i])
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
	_, err = s.List(ctx, store.HopQuery{State: store.Accepted, Limit: 10})
	check("List", err)
	check("Transition", s.Transition(ctx, store.Move{Iss: Iss, Hop: "h", From: store.Accepted, To: store.Completed, Status: Status("c"), Form: handoff.FormJWS, Now: Base}))
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
