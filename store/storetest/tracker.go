package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// The conformance suite of store.Tracker, the delegator's side (draft
// "Asking Again", "Lifecycle"): every tracker runs RunTracker. As in Run,
// each subtest is named after the rule it checks and every time is derived
// from Base.

// Aud is the audience (the delegate) of the suite's issued hops.
const Aud = "https://agent.example/delegate"

// RunTracker runs the conformance suite of store.Tracker. open must return
// a fresh, empty tracker on each call and arrange for it to be closed when
// t ends (t.Cleanup).
func RunTracker(t *testing.T, open func(t *testing.T) store.Tracker) {
	tests := []struct {
		name string
		fn   func(t *testing.T, tr store.Tracker)
	}{
		{"IssueThenIssuedHopReturnsEveryField", testIssueStoresEveryField},
		{"IssuedHopMissingIsErrNotFound", testIssuedHopMissing},
		{"IssueSameHopTwiceFails", testIssueSameHopTwice},
		{"IssueRefusesBadViewOrMissingFields", testIssueRefusesBadHop},
		{"IssueRefusesMissingDigest", testIssueRefusesMissingDigest},
		{"NoNewOfferWhileUnresolved", testNoNewOfferWhileUnresolved},
		{"SafeTwiceAllowsAnotherOffer", testSafeTwice},
		{"ResolvedBySetViewFreesWork", testResolvedBySetViewFreesWork},
		{"ResolveHopFreesWork", testResolveHopFreesWork},
		{"DifferentWorkIsIndependent", testDifferentWorkIndependent},
		{"SetViewIsCompareAndSwap", testSetViewCompareAndSwap},
		{"SetViewMissingIsErrNotFound", testSetViewMissing},
		{"SetViewNilStatusKeepsStatus", testSetViewNilStatusKeepsStatus},
		{"ResolvedNeverReverts", testResolvedNeverReverts},
		{"ResolvingClearsNextAsk", testResolvingClearsNextAsk},
		{"SetAskRecordsSchedule", testSetAskRecordsSchedule},
		{"ResolveHopAndSetAskMissingAreErrNotFound", testResolveHopAndSetAskMissing},
		{"ByPrevListsExactlyTheChildren", testByPrev},
		{"DueListsUnresolvedAtOrBeforeNow", testDue},
		{"ConcurrentIssueSameWorkOneWinner", testConcurrentIssue},
		{"ListIssuedMatchesTheModelByPages", testListIssued},
		{"ListIssuedPageIsOneSnapshot", testListIssuedWhileMoving},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, open(t))
		})
	}
}

// NewIssued returns the hop a delegator issues for work: offer octets
// Offer(hop, variant) in COSE, their digest, no Prev, expiring at Base+5m,
// created at Base, in view offered, unresolved, not asking again.
func NewIssued(hop, work string, variant int) *store.Issued {
	offer := Offer(hop, variant)
	return &store.Issued{
		Hop:       hop,
		Aud:       Aud,
		Work:      work,
		Offer:     offer,
		OfferForm: handoff.FormCOSE,
		Digest:    handoff.DigestOf(offer),
		Exp:       Base.Add(keepFor),
		View:      store.Offered,
		Created:   Base,
	}
}

// DiffIssued lists how got differs from want, field by field; bytes are
// compared exactly (a nil Status is not an empty one), a nil Prev is not a
// set one, and times are compared with Equal.
func DiffIssued(got, want *store.Issued) []string {
	if got == nil || want == nil {
		if got == want {
			return nil
		}
		return []string{fmt.Sprintf("issued hop: got %v, want %v", got, want)}
	}
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w)) }
	if got.Hop != want.Hop {
		add("Hop", got.Hop, want.Hop)
	}
	if got.Aud != want.Aud {
		add("Aud", got.Aud, want.Aud)
	}
	if got.Work != want.Work {
		add("Work", got.Work, want.Work)
	}
	if !bytes.Equal(got.Offer, want.Offer) {
		add("Offer", octets(got.Offer), octets(want.Offer))
	}
	if got.OfferForm != want.OfferForm {
		add("OfferForm", got.OfferForm, want.OfferForm)
	}
	if got.Digest.Alg != want.Digest.Alg {
		add("Digest.Alg", got.Digest.Alg, want.Digest.Alg)
	}
	if !bytes.Equal(got.Digest.Val, want.Digest.Val) {
		add("Digest.Val", fmt.Sprintf("%x", got.Digest.Val), fmt.Sprintf("%x", want.Digest.Val))
	}
	switch {
	case (got.Prev == nil) != (want.Prev == nil):
		add("Prev", digestString(got.Prev), digestString(want.Prev))
	case got.Prev != nil && !got.Prev.Equal(*want.Prev):
		add("Prev", digestString(got.Prev), digestString(want.Prev))
	}
	if !got.Exp.Equal(want.Exp) {
		add("Exp", got.Exp, want.Exp)
	}
	if got.View != want.View {
		add("View", got.View, want.View)
	}
	if got.Resolved != want.Resolved {
		add("Resolved", got.Resolved, want.Resolved)
	}
	if (got.Status == nil) != (want.Status == nil) || !bytes.Equal(got.Status, want.Status) {
		add("Status", octets(got.Status), octets(want.Status))
	}
	if got.StatusForm != want.StatusForm {
		add("StatusForm", got.StatusForm, want.StatusForm)
	}
	if got.Attempts != want.Attempts {
		add("Attempts", got.Attempts, want.Attempts)
	}
	if !got.NextAsk.Equal(want.NextAsk) {
		add("NextAsk", got.NextAsk, want.NextAsk)
	}
	if !got.Created.Equal(want.Created) {
		add("Created", got.Created, want.Created)
	}
	return d
}

func digestString(d *handoff.Digest) string {
	if d == nil {
		return "nil"
	}
	return fmt.Sprintf("%s:%x", d.Alg, d.Val)
}

func copyIssued(h *store.Issued) *store.Issued {
	c := *h
	c.Offer = bytes.Clone(h.Offer)
	c.Status = bytes.Clone(h.Status)
	c.Digest.Val = bytes.Clone(h.Digest.Val)
	if h.Prev != nil {
		p := handoff.Digest{Alg: h.Prev.Alg, Val: bytes.Clone(h.Prev.Val)}
		c.Prev = &p
	}
	return &c
}

func checkIssued(t *testing.T, what string, got, want *store.Issued) {
	t.Helper()
	if d := DiffIssued(got, want); d != nil {
		t.Errorf("%s differs:\n\t%s", what, strings.Join(d, "\n\t"))
	}
}

// checkHop checks that the tracker holds want for its hop.
func checkHop(t *testing.T, tr store.Tracker, want *store.Issued) {
	t.Helper()
	got, err := tr.IssuedHop(t.Context(), want.Hop)
	if err != nil {
		t.Fatalf("IssuedHop(%s): %v", want.Hop, err)
	}
	checkIssued(t, "IssuedHop("+want.Hop+")", got, want)
}

// checkNoHop checks that the tracker holds no hop named hop.
func checkNoHop(t *testing.T, tr store.Tracker, hop string) {
	t.Helper()
	if h, err := tr.IssuedHop(t.Context(), hop); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("IssuedHop(%q) = %+v, %v; want ErrNotFound", hop, h, err)
	}
}

// mustIssue issues a copy of h (so that a tracker keeping the caller's
// slices is caught) and checks that the tracker then holds h.
func mustIssue(t *testing.T, tr store.Tracker, h *store.Issued, safeTwice bool) {
	t.Helper()
	if err := tr.Issue(t.Context(), copyIssued(h), safeTwice); err != nil {
		t.Fatalf("Issue(%s, work %s, safeTwice %v): %v", h.Hop, h.Work, safeTwice, err)
	}
	checkHop(t, tr, h)
}

// issueUnresolvedWork checks that issuing h (not safe twice) fails with
// ErrUnresolvedWork and stores nothing.
func issueUnresolvedWork(t *testing.T, tr store.Tracker, h *store.Issued) {
	t.Helper()
	if err := tr.Issue(t.Context(), copyIssued(h), false); !errors.Is(err, store.ErrUnresolvedWork) {
		t.Errorf("Issue(%s) for work %s with an unresolved hop = %v; want ErrUnresolvedWork", h.Hop, h.Work, err)
	}
	checkNoHop(t, tr, h.Hop)
}

func mustView(t *testing.T, tr store.Tracker, h *store.Issued, to store.View, resolved bool, status []byte, form handoff.Form) {
	t.Helper()
	if err := tr.SetView(t.Context(), h.Hop, h.View, to, resolved, status, form); err != nil {
		t.Fatalf("SetView(%s, %s -> %s, resolved %v): %v", h.Hop, h.View, to, resolved, err)
	}
	h.View, h.Resolved = to, h.Resolved || resolved
	if status != nil {
		h.Status, h.StatusForm = bytes.Clone(status), form
	}
	if h.Resolved {
		h.NextAsk = time.Time{}
	}
	checkHop(t, tr, h)
}

func mustResolve(t *testing.T, tr store.Tracker, h *store.Issued) {
	t.Helper()
	if err := tr.ResolveHop(t.Context(), h.Hop); err != nil {
		t.Fatalf("ResolveHop(%s): %v", h.Hop, err)
	}
	h.Resolved, h.NextAsk = true, time.Time{}
	checkHop(t, tr, h)
}

func mustAsk(t *testing.T, tr store.Tracker, h *store.Issued, attempts int, next time.Time) {
	t.Helper()
	if err := tr.SetAsk(t.Context(), h.Hop, attempts, next); err != nil {
		t.Fatalf("SetAsk(%s, %d, %v): %v", h.Hop, attempts, next, err)
	}
	h.Attempts, h.NextAsk = attempts, next
	checkHop(t, tr, h)
}

func checkList(t *testing.T, what string, got, want []*store.Issued) {
	t.Helper()
	names := func(hs []*store.Issued) []string {
		var n []string
		for _, h := range hs {
			n = append(n, h.Hop)
		}
		return n
	}
	if len(got) != len(want) {
		t.Errorf("%s = %v; want %v", what, names(got), names(want))
		return
	}
	for i := range got {
		if got[i].Hop != want[i].Hop {
			t.Errorf("%s = %v; want %v (ordered by Created, then Hop)", what, names(got), names(want))
			return
		}
	}
	for i := range got {
		checkIssued(t, fmt.Sprintf("%s[%d]", what, i), got[i], want[i])
	}
}
