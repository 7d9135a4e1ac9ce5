package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// --- Issue and IssuedHop ---------------------------------------------------

// Issue keeps the offer's exact octets (a retransmission resends them,
// never re-signs) and every other field; IssuedHop returns them all. The
// stored octets are the tracker's own: changing the caller's slices after
// Issue, or those IssuedHop returned, changes nothing.
func testIssueStoresEveryField(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	prev := handoff.DigestOf([]byte("the offer received"))
	root := NewIssued("root", "work-root", 1)

	child := NewIssued("child", "work-child", 2)
	child.Aud = "https://other.example/agent"
	child.Offer = []byte("eyJhbGciOiJFUzI1NiJ9.eyJob3AiOiJjaGlsZCJ9.c2ln")
	child.OfferForm = handoff.FormJWS
	child.Digest = handoff.DigestOf(child.Offer)
	child.Prev = &prev
	child.Exp = Base.Add(90*time.Second + 987654321)
	child.Created = Base.Add(time.Second + 1)

	// A hop issued with its first ask already scheduled.
	asking := NewIssued("asking", "work-asking", 3)
	asking.Prev = &handoff.Digest{Alg: "sha-384", Val: bytes.Repeat([]byte{0x00, 0xff}, 24)}
	asking.Attempts, asking.NextAsk = 0, Base.Add(7*time.Second+3)

	for _, h := range []*store.Issued{root, child, asking} {
		in := copyIssued(h)
		if err := tr.Issue(ctx, in, false); err != nil {
			t.Fatalf("Issue(%s): %v", h.Hop, err)
		}
		// The caller reuses its buffers.
		in.Offer[0] ^= 0xff
		in.Digest.Val[0] ^= 0xff
		if in.Prev != nil {
			in.Prev.Val[0] ^= 0xff
		}
		in.Work = "changed"
		got, err := tr.IssuedHop(ctx, h.Hop)
		if err != nil {
			t.Fatalf("IssuedHop(%s): %v", h.Hop, err)
		}
		checkIssued(t, "IssuedHop("+h.Hop+") after the caller changed the slices it passed to Issue", got, h)

		before := copyIssued(got)
		got.Offer[0] ^= 0xff
		got.Digest.Val[0] ^= 0xff
		if got.Prev != nil {
			got.Prev.Val[0] ^= 0xff
		}
		again, err := tr.IssuedHop(ctx, h.Hop)
		if err != nil {
			t.Fatalf("IssuedHop(%s): %v", h.Hop, err)
		}
		checkIssued(t, "IssuedHop("+h.Hop+") after the caller changed the slices an earlier IssuedHop returned", again, before)
	}
	for _, h := range []*store.Issued{root, child, asking} {
		got, err := tr.IssuedHop(ctx, h.Hop)
		if err != nil {
			t.Fatal(err)
		}
		if h.Prev == nil && got.Prev != nil {
			t.Errorf("IssuedHop(%s).Prev = %s; want nil (the hop starts the chain)", h.Hop, digestString(got.Prev))
		}
		if got.Status != nil {
			t.Errorf("IssuedHop(%s).Status = %q; want nil before any status", h.Hop, got.Status)
		}
		if got.View != store.Offered || got.Resolved {
			t.Errorf("IssuedHop(%s) is %s, resolved %v; want offered, unresolved", h.Hop, got.View, got.Resolved)
		}
	}
}

// IssuedHop of a hop never issued is ErrNotFound.
func testIssuedHopMissing(t *testing.T, tr store.Tracker) {
	checkNoHop(t, tr, "never-issued")
	mustIssue(t, tr, NewIssued("issued", "work", 0), false)
	checkNoHop(t, tr, "Issued")
	checkNoHop(t, tr, "issue")
	checkNoHop(t, tr, "")
}

// A hop is issued once: issuing it again fails, whatever its work and
// safeTwice, and leaves the stored hop as it was.
func testIssueSameHopTwice(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	first := NewIssued("twice", "work-twice", 1)
	mustIssue(t, tr, first, false)
	mustAsk(t, tr, first, 1, Base.Add(time.Minute))
	agains := []struct {
		what      string
		h         *store.Issued
		safeTwice bool
	}{
		{"the same hop again", NewIssued("twice", "work-twice", 1), false},
		{"the same hop again, safe twice", NewIssued("twice", "work-twice", 1), true},
		{"another offer, same hop, other work", NewIssued("twice", "work-other", 2), false},
		{"another offer, same hop, other work, safe twice", NewIssued("twice", "work-other", 2), true},
	}
	for _, a := range agains {
		if err := tr.Issue(ctx, a.h, a.safeTwice); err == nil {
			t.Errorf("Issue of %s succeeded; want an error", a.what)
		}
		checkHop(t, tr, first)
	}
	// Still so once the hop is resolved.
	mustResolve(t, tr, first)
	for _, a := range agains {
		if err := tr.Issue(ctx, a.h, a.safeTwice); err == nil {
			t.Errorf("Issue of %s after it was resolved succeeded; want an error", a.what)
		}
		checkHop(t, tr, first)
	}
}

// Issue refuses a hop not in view offered, or missing its hop, audience,
// work or offer; it stores nothing, and the hop name and the work stay
// free.
func testIssueRefusesBadHop(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	cases := []struct {
		what  string
		spoil func(h *store.Issued)
	}{
		{"no hop", func(h *store.Issued) { h.Hop = "" }},
		{"no aud", func(h *store.Issued) { h.Aud = "" }},
		{"no work", func(h *store.Issued) { h.Work = "" }},
		{"nil offer", func(h *store.Issued) { h.Offer = nil }},
		{"empty offer", func(h *store.Issued) { h.Offer = []byte{} }},
		{"no view", func(h *store.Issued) { h.View = "" }},
		{"view accepted", func(h *store.Issued) { h.View = store.ViewAccepted }},
		{"view rejected", func(h *store.Issued) { h.View = store.ViewRejected }},
		{"view completed", func(h *store.Issued) { h.View = store.ViewComplete }},
		{"view failed", func(h *store.Issued) { h.View = store.ViewFailed }},
		{"view canceled", func(h *store.Issued) { h.View = store.ViewCanceled }},
		{"view expired", func(h *store.Issued) { h.View = "expired" }},
		{"view OFFERED", func(h *store.Issued) { h.View = "OFFERED" }},
	}
	for i, c := range cases {
		good := NewIssued(fmt.Sprintf("bad-%d", i), fmt.Sprintf("work-bad-%d", i), i)
		bad := copyIssued(good)
		c.spoil(bad)
		if err := tr.Issue(ctx, bad, false); err == nil {
			t.Errorf("Issue of a hop with %s succeeded; want an error", c.what)
		} else if errors.Is(err, store.ErrUnresolvedWork) {
			t.Errorf("Issue of a hop with %s = %v; want a refusal, not ErrUnresolvedWork", c.what, err)
		}
		if err := tr.Issue(ctx, copyIssued(bad), true); err == nil {
			t.Errorf("Issue of a hop with %s, safe twice, succeeded; want an error", c.what)
		}
		checkNoHop(t, tr, bad.Hop)
		// Nothing of the refused hop blocks the hop name or the work.
		mustIssue(t, tr, good, false)
	}
}

// Issue refuses a hop without the digest of its offer (its children's Prev
// and the statuses about it name it), storing nothing.
func testIssueRefusesMissingDigest(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	cases := []struct {
		what string
		d    handoff.Digest
	}{
		{"a zero digest", handoff.Digest{}},
		{"a digest with no val", handoff.Digest{Alg: handoff.AlgSHA256}},
		{"a digest with an empty val", handoff.Digest{Alg: handoff.AlgSHA256, Val: []byte{}}},
	}
	for i, c := range cases {
		good := NewIssued(fmt.Sprintf("nodigest-%d", i), fmt.Sprintf("work-nodigest-%d", i), i)
		bad := copyIssued(good)
		bad.Digest = c.d
		if err := tr.Issue(ctx, bad, false); err == nil {
			t.Errorf("Issue of a hop with %s succeeded; want an error", c.what)
			continue
		}
		checkNoHop(t, tr, bad.Hop)
		mustIssue(t, tr, good, false)
	}
}

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

// --- ByPrev and Due --------------------------------------------------------------

// ByPrev lists exactly the hops whose Prev is the digest, alg and val both
// (a fan-out of three included, resolved ones too, as they are now),
// ordered by Created then Hop; never a hop whose own Digest it is, nor one
// without a Prev.
func testByPrev(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	p := handoff.DigestOf([]byte("the received offer P"))
	q := handoff.DigestOf([]byte("the received offer Q"))
	pOtherAlg := handoff.Digest{Alg: "sha-384", Val: bytes.Clone(p.Val)}
	ptr := func(d handoff.Digest) *handoff.Digest {
		c := handoff.Digest{Alg: d.Alg, Val: bytes.Clone(d.Val)}
		return &c
	}
	mk := func(hop string, prev *handoff.Digest, created time.Duration) *store.Issued {
		h := NewIssued(hop, "work-"+hop, len(hop))
		h.Prev, h.Created = prev, Base.Add(created)
		return h
	}
	// Fan-out of P: created c last; B and a at the same time (B sorts
	// before a bytewise). Issued out of order.
	childC := mk("child-c", ptr(p), 2*time.Second)
	childA := mk("child-a", ptr(p), time.Second)
	childB := mk("child-B", ptr(p), time.Second)
	otherQ := mk("other-q", ptr(q), 0)
	otherAlg := mk("other-alg", ptr(pOtherAlg), 0)
	// A hop whose own digest is P, starting its chain.
	self := mk("self", nil, 0)
	self.Digest = handoff.Digest{Alg: p.Alg, Val: bytes.Clone(p.Val)}
	root := mk("root", nil, 0)
	for _, h := range []*store.Issued{childC, otherQ, childA, self, otherAlg, childB, root} {
		mustIssue(t, tr, h, false)
	}
	// ByPrev reports the hops as they are now, resolved included.
	mustView(t, tr, childA, store.ViewComplete, true, Status("child-a/completed"), handoff.FormCOSE)
	mustAsk(t, tr, childC, 1, Base.Add(time.Minute))

	byPrev := func(d handoff.Digest, want ...*store.Issued) {
		t.Helper()
		got, err := tr.ByPrev(ctx, d)
		if err != nil {
			t.Fatalf("ByPrev(%s): %v", digestString(&d), err)
		}
		checkList(t, "ByPrev("+digestString(&d)+")", got, want)
	}
	byPrev(p, childB, childA, childC)
	byPrev(handoff.Digest{Alg: p.Alg, Val: bytes.Clone(p.Val)}, childB, childA, childC)
	byPrev(q, otherQ)
	byPrev(pOtherAlg, otherAlg)
	byPrev(handoff.DigestOf([]byte("never received")))
	byPrev(handoff.Digest{Alg: p.Alg, Val: p.Val[:len(p.Val)-1]})
	byPrev(handoff.Digest{Alg: "", Val: bytes.Clone(p.Val)})
	byPrev(handoff.Digest{})
	byPrev(handoff.Digest{Alg: handoff.AlgSHA256, Val: []byte{}})
	byPrev(root.Digest)
}

// Due lists exactly the unresolved hops whose NextAsk is set and not after
// now (NextAsk == now is due), ordered by Created then Hop: never a
// resolved hop (even one asked again after), nor one not asking.
func testDue(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	now := Base.Add(time.Minute)
	mk := func(hop string, created time.Duration) *store.Issued {
		h := NewIssued(hop, "work-"+hop, len(hop))
		h.Created = Base.Add(created)
		return h
	}
	early := mk("due-early", 3*time.Second)
	atNowB := mk("due-B", time.Second)
	atNowA := mk("due-a", time.Second)
	accepted := mk("due-accepted", 0)
	atIssue := mk("due-at-issue", 4*time.Second)
	atIssue.NextAsk = now.Add(-2 * time.Second)
	later := mk("later", 2*time.Second)
	never := mk("never", 0)
	cleared := mk("cleared", 0)
	resolvedHop := mk("resolved-hop", 0)
	resolvedView := mk("resolved-view", 0)
	for _, h := range []*store.Issued{later, early, never, atNowA, resolvedHop, atIssue, accepted, cleared, atNowB, resolvedView} {
		mustIssue(t, tr, h, false)
	}
	mustAsk(t, tr, early, 1, now.Add(-1))
	mustAsk(t, tr, atNowB, 2, now)
	mustAsk(t, tr, atNowA, 1, now.Add(-time.Hour))
	mustView(t, tr, accepted, store.ViewAccepted, false, Status("due-accepted/accepted"), handoff.FormCOSE)
	mustAsk(t, tr, accepted, 1, now.Add(-time.Second))
	mustAsk(t, tr, later, 1, now.Add(1))
	mustAsk(t, tr, cleared, 1, now.Add(-time.Second))
	mustAsk(t, tr, cleared, 1, time.Time{})
	mustAsk(t, tr, resolvedHop, 1, now.Add(-time.Second))
	mustResolve(t, tr, resolvedHop)
	mustAsk(t, tr, resolvedHop, 2, now.Add(-time.Second))
	mustView(t, tr, resolvedView, store.ViewComplete, true, Status("resolved-view/completed"), handoff.FormCOSE)
	mustAsk(t, tr, resolvedView, 1, now.Add(-time.Second))

	due := func(at time.Time, want ...*store.Issued) {
		t.Helper()
		got, err := tr.Due(ctx, at)
		if err != nil {
			t.Fatalf("Due(%v): %v", at, err)
		}
		checkList(t, fmt.Sprintf("Due(now%+v)", at.Sub(now)), got, want)
	}
	due(now, accepted, atNowB, atNowA, early, atIssue)
	due(now.Add(-1), accepted, atNowA, early, atIssue)
	due(now.Add(1), accepted, atNowB, atNowA, later, early, atIssue)
	due(now.Add(-time.Hour), atNowA)
	due(now.Add(-time.Hour - 1))
	due(now.Add(24*time.Hour), accepted, atNowB, atNowA, later, early, atIssue)

	// Resolving takes a hop off the list.
	mustResolve(t, tr, atNowA)
	mustView(t, tr, accepted, store.ViewComplete, true, Status("due-accepted/completed"), handoff.FormJWS)
	due(now, atNowB, early, atIssue)
}

// --- Concurrency -----------------------------------------------------------------

// 32 goroutines issue different hops for one work at once, none safe
// twice: exactly one is stored, the others fail with ErrUnresolvedWork
// and are not stored. Each round resolves the winner, then races again for
// the same work; the last round races for a new work.
func testConcurrentIssue(t *testing.T, tr store.Tracker) {
	ctx := t.Context()
	const n = 32
	var last *store.Issued
	for round, work := range []string{"work", "work", "work", "other-work"} {
		if last != nil {
			mustResolve(t, tr, last)
		}
		mine := make([]*store.Issued, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			mine[i] = NewIssued(fmt.Sprintf("race-%d-%d", round, i), work, i)
			mine[i].Created = Base.Add(time.Duration(round)*time.Minute + time.Duration(i)*time.Millisecond)
			h := copyIssued(mine[i])
			wg.Go(func() {
				<-start
				errs[i] = tr.Issue(ctx, h, false)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("round %d: Issue %d and %d both succeeded for work %s", round, winner, i, work)
			case err == nil:
				winner = i
			case !errors.Is(err, store.ErrUnresolvedWork):
				t.Errorf("round %d: Issue %d = %v; want success or ErrUnresolvedWork", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no Issue succeeded", round)
		}
		for i := range n {
			if errs[i] == nil {
				checkHop(t, tr, mine[i])
			} else {
				checkNoHop(t, tr, mine[i].Hop)
			}
		}
		last = mine[winner]
	}
}
