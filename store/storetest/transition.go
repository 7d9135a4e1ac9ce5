package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- Transition ----------------------------------------------------------

// Transition follows store.CanMove exactly: over every pair of states (and
// some that are not states), an allowed move succeeds, stores the status
// (keeping the one it replaces as Earlier) and stamps Decided when the
// target is terminal; any other move is ErrConflict and changes nothing.
func testTransitionFollowsCanMove(t *testing.T, s store.Store) {
	ctx := t.Context()
	targets := append(append([]store.State(nil), allStates...), "", "canceled", "expired")
	now := Base.Add(10 * time.Minute)
	for _, from := range allStates {
		for _, to := range targets {
			hop := fmt.Sprintf("move-%s-%s", from, to)
			before := put(t, s, hop, from)
			status := Status(hop)
			err := s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: from, To: to, Status: status, Form: handoff.FormCOSE, Now: now})
			want := before
			if store.CanMove(from, to) {
				if err != nil {
					t.Errorf("Transition(%s -> %s) = %v; CanMove allows it", from, to, err)
					continue
				}
				want = copyRecord(before)
				want.Earlier, want.EarlierForm = before.Status, before.StatusForm
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
				err := s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: from, To: to, Status: Status("cas"), Form: handoff.FormJWS, Now: Base.Add(time.Hour)})
				if !errors.Is(err, store.ErrConflict) {
					t.Errorf("hop in %s: Transition(%s -> %s) = %v; want ErrConflict", actual, from, to, err)
				}
				err = s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: from, To: to, Form: handoff.FormJWS, Now: Base.Add(time.Hour)})
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
			err := s.Transition(ctx, store.Move{Iss: Iss, Hop: "absent", From: m[0], To: m[1], Status: status, Form: handoff.FormJWS, Now: Base})
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Transition(absent, %s -> %s) = %v; want ErrNotFound", m[0], m[1], err)
			}
		}
	}
	checkGone(t, s, Iss, "absent")
}

// A nil status keeps the last status sent, octets and form, on a move to
// Accepted, and leaves no status on a move to a terminal state (the
// accepted octets are not the terminal state's status: they become
// Earlier, as sent before); a non-nil one replaces it, and the one it
// replaces becomes Earlier.
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
	want.Earlier, want.EarlierForm = want.Status, want.StatusForm
	want.State, want.Status, want.StatusForm, want.Decided = store.Completed, nil, 0, Base.Add(2*time.Second)
	mustMove(t, s, "keep-accepted", store.Accepted, store.Completed, nil, handoff.FormCOSE, want.Decided)
	checkGet(t, s, "keep-accepted", want)
	// The same for a claimed Accepted moved to Failed.
	want = put(t, s, "drop-accepted", store.Accepted)
	want.Earlier, want.EarlierForm = want.Status, want.StatusForm
	want.State, want.Status, want.StatusForm, want.Decided = store.Failed, nil, 0, Base.Add(2*time.Second)
	mustMove(t, s, "drop-accepted", store.Accepted, store.Failed, nil, handoff.FormCOSE, want.Decided)
	checkGet(t, s, "drop-accepted", want)

	// A claimed Accepted (with its status) -> Failed with a new status.
	want = put(t, s, "replace", store.Accepted)
	want.Earlier, want.EarlierForm = want.Status, want.StatusForm
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
	check("Transition(absent)", s.Transition(ctx, store.Move{Iss: Iss, Hop: "named-absent", From: store.Received, To: store.Accepted, Form: 0, Now: Base}), store.ErrNotFound, "named-absent")
	check("Transition(completed -> completed)", s.Transition(ctx, store.Move{Iss: Iss, Hop: "named-completed", From: store.Completed, To: store.Completed, Status: Status("c"), Form: 0, Now: Base}),
		store.ErrConflict, "named-completed")
	check("Transition(wrong from)", s.Transition(ctx, store.Move{Iss: Iss, Hop: "named-accepted", From: store.Received, To: store.Accepted, Form: 0, Now: Base}), store.ErrConflict, "named-accepted")
	check("MarkCanceled(absent)", s.MarkCanceled(ctx, Iss, "named-absent"), store.ErrNotFound, "named-absent")
	check("MarkEquivocated(absent)", s.MarkEquivocated(ctx, Iss, "named-absent"), store.ErrNotFound, "named-absent")
	check("Release(absent)", s.Release(ctx, Iss, "named-absent", Base), store.ErrNotFound, "named-absent")
	check("Release(completed)", s.Release(ctx, Iss, "named-completed", Base), store.ErrConflict, "named-completed")
	check("Transition(absent, with a mark)", s.Transition(ctx, store.Move{Iss: Iss, Hop: "named-absent", From: store.Accepted, To: store.Failed, Form: 0, Now: Base, Mark: store.MarkOf(false)}), store.ErrNotFound, "named-absent")
	check("Transition(wrong mark)", s.Transition(ctx, store.Move{Iss: Iss, Hop: "named-accepted", From: store.Accepted, To: store.Failed, Status: Status("f"), Form: 0, Now: Base, Mark: store.MarkOf(true)}),
		store.ErrConflict, "named-accepted")
}

// Transition with a Mark also requires the Equivocated mark to be
// as given (draft "Forks, Concurrency, and Equivocation": a "failed" of an
// equivocated hop carries reason "equivocation", so a status signed before
// the mark must not be stored after it): with the mark as given it moves
// the hop exactly as Transition does; with the mark otherwise, or from the
// wrong state, it is ErrConflict and changes nothing.
func testTransitionMark(t *testing.T, s store.Store) {
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
			if err := s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: store.Accepted, To: store.Failed, Status: status, Form: handoff.FormCOSE, Now: now, Mark: store.MarkOf(!marked)}); !errors.Is(err, store.ErrConflict) {
				t.Errorf("%s: Transition(mark equivocated %v) on a hop marked %v = %v; want ErrConflict", hop, !marked, marked, err)
			}
			if err := s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: store.Received, To: store.Failed, Status: status, Form: handoff.FormCOSE, Now: now, Mark: store.MarkOf(marked)}); !errors.Is(err, store.ErrConflict) {
				t.Errorf("%s: Transition with a mark from the wrong state = %v; want ErrConflict", hop, err)
			}
			checkGet(t, s, hop, want)
			if err := s.Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: store.Accepted, To: store.Failed, Status: status, Form: handoff.FormCOSE, Now: now, Mark: store.MarkOf(marked)}); err != nil {
				t.Errorf("%s: Transition(mark equivocated %v) on a hop marked %v = %v; want it moved", hop, marked, marked, err)
				continue
			}
			want.Earlier, want.EarlierForm = want.Status, want.StatusForm
			want.State, want.Status, want.StatusForm, want.Decided = store.Failed, status, handoff.FormCOSE, now
			if status == nil {
				want.StatusForm = 0
			}
			checkGet(t, s, hop, want)
		}
	}
	// A move that keeps the status (to Accepted, nil status) checks the mark too.
	want := put(t, s, "if-keep", store.Received)
	if err := s.Transition(ctx, store.Move{Iss: Iss, Hop: "if-keep", From: store.Received, To: store.Accepted, Form: 0, Now: now, Mark: store.MarkOf(true)}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Transition(received -> accepted, MarkSet) on an unmarked hop = %v; want ErrConflict", err)
	}
	checkGet(t, s, "if-keep", want)
	if err := s.Transition(ctx, store.Move{Iss: Iss, Hop: "if-keep", From: store.Received, To: store.Accepted, Form: 0, Now: now, Mark: store.MarkOf(false)}); err != nil {
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
	want.Earlier, want.EarlierForm = want.Status, want.StatusForm
	want.State, want.Status, want.StatusForm, want.Decided = store.Failed, Status("f"), handoff.FormJWS, Base.Add(time.Hour)
	mustMove(t, s, "mark-then-move", store.Accepted, store.Failed, want.Status, want.StatusForm, want.Decided)
	checkGet(t, s, "mark-then-move", want)

	if err := mark(ctx, Iss, "absent"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s(absent) = %v; want ErrNotFound", name, err)
	}
	checkGone(t, s, Iss, "absent")
}
