package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- One unresolved hop per work (draft "Asking Again") ---------------------

// While a hop for a work is unresolved, a new offer for that work (another
// hop) fails with ErrUnresolvedWork and is not stored: not while offered,
// accepted, rejected as stale (unresolved), or asked again.
func testNoNewOfferWhileUnresolved(t *testing.T, tr store.Tracker) {
	first := NewIssued("first", "work", 1)
	mustIssue(t, tr, first, false)
	n := 0
	next := func() *store.Issued {
		n++
		h := NewIssued(fmt.Sprintf("again-%d", n), "work", 100+n)
		h.Created = Base.Add(time.Duration(n) * time.Second)
		return h
	}
	issueUnresolvedWork(t, tr, next())
	mustAsk(t, tr, first, 1, Base.Add(time.Minute))
	issueUnresolvedWork(t, tr, next())
	mustView(t, tr, first, store.ViewAccepted, false, Status("first/accepted"), handoff.FormCOSE)
	issueUnresolvedWork(t, tr, next())
	mustView(t, tr, first, store.ViewRejected, false, Status("first/rejected-stale"), handoff.FormJWS)
	issueUnresolvedWork(t, tr, next())
	checkHop(t, tr, first)
}

// A work declared safe to do twice takes another offer while one is
// unresolved; a work's offer not safe twice is refused while any of its
// hops is unresolved, and taken once all are resolved.
func testSafeTwice(t *testing.T, tr store.Tracker) {
	first := NewIssued("first", "work", 1)
	mustIssue(t, tr, first, false)
	second := NewIssued("second", "work", 2)
	second.Created = Base.Add(time.Second)
	mustIssue(t, tr, second, true)
	third := NewIssued("third", "work", 3)
	third.Created = Base.Add(2 * time.Second)
	mustIssue(t, tr, third, true)

	checkHop(t, tr, first)
	fourth := NewIssued("fourth", "work", 4)
	fourth.Created = Base.Add(3 * time.Second)
	issueUnresolvedWork(t, tr, fourth)
	mustResolve(t, tr, first)
	issueUnresolvedWork(t, tr, fourth)
	mustView(t, tr, second, store.ViewComplete, true, Status("second/completed"), handoff.FormCOSE)
	issueUnresolvedWork(t, tr, fourth)
	mustView(t, tr, third, store.ViewFailed, true, Status("third/failed"), handoff.FormJWS)
	mustIssue(t, tr, fourth, false)
}

// A hop resolved by a verified status (SetView with resolved) frees its
// work for a new offer; a status that does not resolve it does not.
func testResolvedBySetViewFreesWork(t *testing.T, tr store.Tracker) {
	paths := []struct {
		name  string
		steps []store.View // the last step resolves
	}{
		{"completed", []store.View{store.ViewAccepted, store.ViewComplete}},
		{"failed", []store.View{store.ViewAccepted, store.ViewFailed}},
		{"rejected", []store.View{store.ViewRejected}},
	}
	for _, p := range paths {
		work := "work-" + p.name
		h := NewIssued("hop-"+p.name, work, 1)
		mustIssue(t, tr, h, false)
		again := NewIssued("again-"+p.name, work, 2)
		again.Created = Base.Add(time.Minute)
		for i, v := range p.steps {
			last := i == len(p.steps)-1
			if !last {
				mustView(t, tr, h, v, false, Status(h.Hop+"/"+string(v)), handoff.FormJWS)
				issueUnresolvedWork(t, tr, again)
				continue
			}
			mustView(t, tr, h, v, true, Status(h.Hop+"/"+string(v)), handoff.FormCOSE)
		}
		mustIssue(t, tr, again, false)
		// The new offer is itself unresolved.
		third := NewIssued("third-"+p.name, work, 3)
		issueUnresolvedWork(t, tr, third)
	}
}

// A hop resolved by an authoritative observation (ResolveHop) frees its
// work, whatever its view.
func testResolveHopFreesWork(t *testing.T, tr store.Tracker) {
	for _, v := range []store.View{store.Offered, store.ViewAccepted} {
		work := "work-" + string(v)
		h := NewIssued("hop-"+string(v), work, 1)
		mustIssue(t, tr, h, false)
		if v != store.Offered {
			mustView(t, tr, h, v, false, Status(h.Hop), handoff.FormCOSE)
		}
		again := NewIssued("again-"+string(v), work, 2)
		issueUnresolvedWork(t, tr, again)
		mustResolve(t, tr, h)
		if h.View != v {
			t.Errorf("ResolveHop changed the view to %s", h.View)
		}
		// Resolving again changes nothing.
		mustResolve(t, tr, h)
		mustIssue(t, tr, again, false)
		issueUnresolvedWork(t, tr, NewIssued("third-"+string(v), work, 3))
	}
}

// The rule is per work: an unresolved hop of one work does not hold back
// an offer for another (names are compared exactly).
func testDifferentWorkIndependent(t *testing.T, tr store.Tracker) {
	works := []string{"work-a", "work-b", "Work-A", "work-a ", "work", "work-a/1"}
	for i, w := range works {
		mustIssue(t, tr, NewIssued(fmt.Sprintf("hop-%d", i), w, i), false)
	}
	for i, w := range works {
		issueUnresolvedWork(t, tr, NewIssued(fmt.Sprintf("again-%d", i), w, 100+i))
	}
	// Resolving one work's hop frees that work only.
	h, err := tr.IssuedHop(t.Context(), "hop-0")
	if err != nil {
		t.Fatal(err)
	}
	mustResolve(t, tr, h)
	mustIssue(t, tr, NewIssued("again-0", "work-a", 100), false)
	for i, w := range works[1:] {
		issueUnresolvedWork(t, tr, NewIssued(fmt.Sprintf("again-%d", i+1), w, 101+i))
	}
}
