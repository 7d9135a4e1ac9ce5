package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

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
