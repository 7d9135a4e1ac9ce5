package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

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
