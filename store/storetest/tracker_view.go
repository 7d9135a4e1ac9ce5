package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- SetView, ResolveHop, SetAsk -----------------------------------------------

// SetView moves a hop only from the view it is in: from any other view it
// is ErrConflict and changes nothing; from the right one it sets the view,
// the status octets and their form.
func testSetViewCompareAndSwap(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	h := NewIssued("cas", "work", 1)
	mustIssue(t, tr, h, false)
	mustAsk(t, tr, h, 2, Base.Add(time.Minute))
	all := []store.View{store.Offered, store.ViewAccepted, store.ViewRejected, store.ViewComplete, store.ViewFailed, store.ViewCanceled}
	wrong := func() {
		t.Helper()
		for _, from := range all {
			if from == h.View {
				continue
			}
			for _, resolved := range []bool{false, true} {
				err := tr.SetView(ctx, h.Hop, from, store.ViewComplete, resolved, Status("wrong"), handoff.FormJWS)
				if !errors.Is(err, store.ErrConflict) {
					t.Errorf("SetView(%s, %s -> completed) while %s = %v; want ErrConflict", h.Hop, from, h.View, err)
				}
				checkHop(t, tr, h)
			}
		}
	}
	wrong()
	mustView(t, tr, h, store.ViewAccepted, false, Status("cas/accepted"), handoff.FormJWS)
	wrong()
	// The same move again is from the wrong view now.
	if err := tr.SetView(ctx, h.Hop, store.Offered, store.ViewAccepted, false, Status("cas/accepted-2"), handoff.FormCOSE); !errors.Is(err, store.ErrConflict) {
		t.Errorf("SetView(offered -> accepted) repeated = %v; want ErrConflict", err)
	}
	checkHop(t, tr, h)
	mustView(t, tr, h, store.ViewComplete, true, Status("cas/completed"), handoff.FormCOSE)
	wrong()
}

// SetView of a hop never issued is ErrNotFound.
func testSetViewMissing(t *testing.T, tr store.Tracker) {
	mustIssue(t, tr, NewIssued("issued", "work", 0), false)
	err := tr.SetView(t.Context(), "missing", store.Offered, store.ViewAccepted, false, Status("x"), handoff.FormJWS)
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SetView of a missing hop = %v; want ErrNotFound", err)
	}
	checkNoHop(t, tr, "missing")
}

// A nil status moves the view and keeps the status (and its form) that was
// there, nil included.
func testSetViewNilStatusKeepsStatus(t *testing.T, tr store.Tracker) {
	h := NewIssued("keep", "work", 1)
	mustIssue(t, tr, h, false)
	mustView(t, tr, h, store.ViewAccepted, false, nil, handoff.FormCOSE)
	if h.Status != nil {
		t.Fatal("suite: the status changed")
	}
	mustView(t, tr, h, store.ViewRejected, false, Status("keep/rejected"), handoff.FormJWS)
	mustView(t, tr, h, store.ViewAccepted, false, nil, handoff.FormCOSE)
	mustView(t, tr, h, store.ViewComplete, true, nil, handoff.FormInvalid)
	mustView(t, tr, h, store.ViewFailed, false, Status("keep/failed"), handoff.FormCOSE)
	mustView(t, tr, h, store.ViewCanceled, false, nil, handoff.FormJWS)
}

// Resolved never goes back: a SetView that does not resolve leaves a
// resolved hop resolved (and its work free), whether SetView or ResolveHop
// resolved it.
func testResolvedNeverReverts(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	byView := NewIssued("by-view", "work-view", 1)
	mustIssue(t, tr, byView, false)
	mustView(t, tr, byView, store.ViewComplete, true, Status("by-view/completed"), handoff.FormCOSE)
	mustView(t, tr, byView, store.ViewCanceled, false, Status("by-view/canceled"), handoff.FormJWS)
	mustView(t, tr, byView, store.ViewAccepted, false, nil, handoff.FormJWS)

	byHop := NewIssued("by-hop", "work-hop", 2)
	mustIssue(t, tr, byHop, false)
	mustResolve(t, tr, byHop)
	mustView(t, tr, byHop, store.ViewAccepted, false, Status("by-hop/accepted"), handoff.FormCOSE)
	mustAsk(t, tr, byHop, 3, Base.Add(time.Minute))

	for _, h := range []*store.Issued{byView, byHop} {
		got, err := tr.IssuedHop(ctx, h.Hop)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Resolved {
			t.Errorf("hop %s is unresolved again after a SetView with resolved false", h.Hop)
		}
		mustIssue(t, tr, NewIssued(h.Hop+"-again", h.Work, 9), false)
	}
}

// Resolving a hop (SetView with resolved, or ResolveHop) stops asking:
// NextAsk becomes zero (Attempts stays). A SetView that does not resolve
// keeps the schedule.
func testResolvingClearsNextAsk(t *testing.T, tr store.Tracker) {
	byView := NewIssued("by-view", "work-view", 1)
	byView.NextAsk = Base.Add(time.Second)
	mustIssue(t, tr, byView, false)
	mustAsk(t, tr, byView, 2, Base.Add(30*time.Second))
	mustView(t, tr, byView, store.ViewAccepted, false, Status("by-view/accepted"), handoff.FormCOSE)
	if byView.NextAsk.IsZero() {
		t.Fatal("suite: the schedule was cleared")
	}
	mustView(t, tr, byView, store.ViewComplete, true, Status("by-view/completed"), handoff.FormCOSE)
	if !byView.NextAsk.IsZero() || byView.Attempts != 2 {
		t.Fatal("suite: expected a cleared schedule")
	}

	byHop := NewIssued("by-hop", "work-hop", 2)
	mustIssue(t, tr, byHop, false)
	mustAsk(t, tr, byHop, 5, Base.Add(time.Hour))
	mustResolve(t, tr, byHop)

	// A resolving SetView on a hop already resolved clears a schedule set
	// since.
	mustAsk(t, tr, byView, 3, Base.Add(time.Minute))
	mustView(t, tr, byView, store.ViewCanceled, true, nil, handoff.FormJWS)
}

// SetAsk records the attempts so far and when to ask again, to the
// nanosecond; a zero time stops asking.
func testSetAskRecordsSchedule(t *testing.T, tr store.Tracker) {
	h := NewIssued("ask", "work", 1)
	mustIssue(t, tr, h, false)
	mustAsk(t, tr, h, 1, Base.Add(2*time.Second+1))
	mustAsk(t, tr, h, 2, Base.Add(4*time.Second-1))
	mustAsk(t, tr, h, 2, Base.Add(4*time.Second-1)) // the same again
	mustAsk(t, tr, h, 3, time.Time{})
	mustAsk(t, tr, h, 0, Base.Add(-time.Hour))
	mustView(t, tr, h, store.ViewAccepted, false, Status("ask/accepted"), handoff.FormCOSE)
	mustAsk(t, tr, h, 7, Base.Add(time.Minute))
}

// ResolveHop and SetAsk of a hop never issued are ErrNotFound and issue
// nothing.
func testResolveHopAndSetAskMissing(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	h := NewIssued("issued", "work", 0)
	mustIssue(t, tr, h, false)
	for _, hop := range []string{"missing", "Issued", ""} {
		if err := tr.ResolveHop(ctx, hop); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ResolveHop(%q) = %v; want ErrNotFound", hop, err)
		}
		if err := tr.SetAsk(ctx, hop, 1, Base.Add(time.Minute)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("SetAsk(%q) = %v; want ErrNotFound", hop, err)
		}
		checkNoHop(t, tr, hop)
	}
	checkHop(t, tr, h)
}
