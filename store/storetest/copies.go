package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// copyTests are the checks of the copies' statuses (store.Copy, SPEC D5)
// and of keyed flags (store.Flag.Key, issue 13: "at most one open flag
// per (iss, hop, conflicting content)"), run by Run.
var copyTests = []struct {
	name string
	fn   func(t *testing.T, s store.Store)
}{
	{"D5CopyStatusInsertOnceThenCompareAndSwap", testCopyStatus},
	{"D5CopiesBoundedPerHop", testCopiesBounded},
	{"D5CopiesGoWithTheirHop", testCopiesGoWithHop},
	{"D5ConcurrentPutCopyOneWinner", testConcurrentPutCopy},
	{"RaiseKeyedOncePerOpenFlag", testRaiseKeyed},
	{"ConcurrentRaiseKeyedOneFlag", testConcurrentRaiseKeyed},
	{"D9HopOfByOfferOrCopyDigest", testHopOf},
}

// HopOf finds a hop of the given iss by its recorded offer's digest or by
// a copy's recorded for it (D9: a cancel names its offer by digest), and
// nothing for another iss, an unknown digest, or a swept hop.
func testHopOf(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := put(t, s, "by-digest", store.Accepted)
	put(t, s, "other-hop", store.Accepted)
	c := copyOf("by-digest", 1, r.Status, "accepted")
	mustPutCopy(t, s, c, nil, true)
	for _, tc := range []struct {
		name, iss string
		d         handoff.Digest
		want      string // "": ErrNotFound
	}{
		{"the offer's digest", Iss, r.Digest, "by-digest"},
		{"a copy's digest", Iss, c.Digest, "by-digest"},
		{"another iss", Iss + "/other", r.Digest, ""},
		{"an unknown digest", Iss, handoff.DigestOf([]byte("never claimed")), ""},
		{"another algorithm", Iss, handoff.Digest{Alg: "sha-384", Val: r.Digest.Val}, ""},
	} {
		got, err := s.HopOf(ctx, tc.iss, tc.d)
		switch {
		case tc.want == "" && !errors.Is(err, store.ErrNotFound):
			t.Errorf("%s: HopOf = %q, %v; want ErrNotFound", tc.name, got, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%s: HopOf = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// copyOf returns the status of copy n of hop, signed from basis.
func copyOf(hop string, n int, basis []byte, label string) *store.Copy {
	return &store.Copy{Iss: Iss, Hop: hop, Digest: handoff.DigestOf(fmt.Appendf(nil, "%s copy %d", hop, n)),
		Basis: bytes.Clone(basis), Status: Status(fmt.Sprintf("%s/copy%d/%s", hop, n, label)), StatusForm: handoff.FormCOSE}
}

func mustPutCopy(t *testing.T, s store.Store, c *store.Copy, prev []byte, want bool) {
	t.Helper()
	got, err := s.PutCopy(t.Context(), c, prev)
	if err != nil {
		t.Fatalf("PutCopy(%s, prev %q): %v", c.Hop, prev, err)
	}
	if got != want {
		t.Errorf("PutCopy(%s copy %s, basis %q, prev %q) stored = %v; want %v", c.Hop, c.Digest, c.Basis, prev, got, want)
	}
}

func checkCopy(t *testing.T, s store.Store, what string, want *store.Copy) {
	t.Helper()
	got, err := s.CopyStatus(t.Context(), want.Iss, want.Hop, want.Digest)
	if err != nil {
		t.Fatalf("%s: CopyStatus: %v", what, err)
	}
	if got.Iss != want.Iss || got.Hop != want.Hop || !got.Digest.Equal(want.Digest) || !bytes.Equal(got.Basis, want.Basis) ||
		!bytes.Equal(got.Status, want.Status) || got.StatusForm != want.StatusForm {
		t.Errorf("%s: CopyStatus = %+v; want %+v", what, got, want)
	}
}

func checkNoCopy(t *testing.T, s store.Store, what, iss, hop string, d handoff.Digest) {
	t.Helper()
	if c, err := s.CopyStatus(t.Context(), iss, hop, d); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: CopyStatus = %+v, %v; want ErrNotFound", what, c, err)
	}
}

// A copy's status is stored once for the hop's current status (insert if
// absent), read back byte for byte, keyed by (iss, hop, copy digest); it
// is replaced only by one signed from the hop's status after a move, and
// only in place of the one it was derived from (compare and swap).
func testCopyStatus(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := put(t, s, "copy", store.Accepted)
	put(t, s, "copy-received", store.Received)
	c := copyOf("copy", 1, r.Status, "accepted")
	checkNoCopy(t, s, "before PutCopy", Iss, "copy", c.Digest)

	tests := []struct {
		name string
		c    *store.Copy
		prev []byte
	}{
		{"a basis that is not the hop's status", copyOf("copy", 1, Status("other"), "x"), nil},
		{"a hop with no status (received)", copyOf("copy-received", 1, nil, "x"), nil},
		{"a hop not recorded", copyOf("copy-missing", 1, Status("x"), "x"), nil},
		{"a replacement of a copy not stored", c, r.Status},
	}
	for _, tt := range tests {
		mustPutCopy(t, s, tt.c, tt.prev, false)
		checkNoCopy(t, s, "after PutCopy of "+tt.name, tt.c.Iss, tt.c.Hop, tt.c.Digest)
	}

	mustPutCopy(t, s, c, nil, true)
	checkCopy(t, s, "after PutCopy", c)
	// Another signing for the same copy and basis loses: the first stays.
	mustPutCopy(t, s, copyOf("copy", 1, r.Status, "accepted-again"), nil, false)
	checkCopy(t, s, "after a second PutCopy", c)
	// Another copy of the same hop, and the same digest under another iss,
	// are other keys.
	c2 := copyOf("copy", 2, r.Status, "accepted")
	mustPutCopy(t, s, c2, nil, true)
	checkCopy(t, s, "the second copy", c2)
	checkCopy(t, s, "the first copy, after the second", c)
	checkNoCopy(t, s, "another iss", "https://agent.example/other", "copy", c.Digest)

	// The hop moves on: a copy signed from its new status replaces the
	// one derived from the old, and only that one.
	done := Status("copy/completed")
	mustMove(t, s, "copy", store.Accepted, store.Completed, done, handoff.FormJWS, Base.Add(time.Minute))
	stale := copyOf("copy", 1, r.Status, "accepted-late")
	mustPutCopy(t, s, stale, nil, false)
	mustPutCopy(t, s, stale, r.Status, false) // its basis is no longer the hop's status
	c3 := copyOf("copy", 1, done, "completed")
	mustPutCopy(t, s, c3, nil, false)         // one is stored: replace it
	mustPutCopy(t, s, c3, Status("x"), false) // not in place of the one stored
	checkCopy(t, s, "after refused replacements", c)
	mustPutCopy(t, s, c3, r.Status, true)
	checkCopy(t, s, "after the replacement", c3)
	mustPutCopy(t, s, copyOf("copy", 1, done, "completed-again"), r.Status, false)
	checkCopy(t, s, "after a second replacement from the old basis", c3)
	if _, err := s.Get(ctx, Iss, "copy"); err != nil {
		t.Fatal(err)
	}
}

// At most store.MaxCopies copies' statuses are kept per hop; another
// hop's are not counted.
func testCopiesBounded(t *testing.T, s store.Store) {
	r := put(t, s, "bound", store.Rejected)
	o := put(t, s, "bound-other", store.Rejected)
	for i := range store.MaxCopies {
		mustPutCopy(t, s, copyOf("bound", i, r.Status, "r"), nil, true)
	}
	over := copyOf("bound", store.MaxCopies, r.Status, "r")
	mustPutCopy(t, s, over, nil, false)
	checkNoCopy(t, s, "past the bound", Iss, "bound", over.Digest)
	checkCopy(t, s, "the last within the bound", copyOf("bound", store.MaxCopies-1, r.Status, "r"))
	// A replacement is not a new copy.
	mustPutCopy(t, s, copyOf("bound", 0, r.Status, "r2"), r.Status, true)
	mustPutCopy(t, s, copyOf("bound-other", 0, o.Status, "r"), nil, true)
}

// Sweep and Forget remove a hop's copies with it: a hop claimed again
// after it went starts with none.
func testCopiesGoWithHop(t *testing.T, s store.Store) {
	ctx := t.Context()
	r := put(t, s, "swept", store.Rejected)
	k := put(t, s, "kept", store.Accepted)
	cs, ck := copyOf("swept", 1, r.Status, "r"), copyOf("kept", 1, k.Status, "a")
	mustPutCopy(t, s, cs, nil, true)
	mustPutCopy(t, s, ck, nil, true)
	if _, err := s.Sweep(ctx, Base.Add(keepFor+Retention+time.Hour), Retention); err != nil {
		t.Fatal(err)
	}
	checkGone(t, s, Iss, "swept")
	checkNoCopy(t, s, "after Sweep", Iss, "swept", cs.Digest)
	checkCopy(t, s, "an accepted hop's copy after Sweep", ck)
	r = put(t, s, "swept", store.Rejected)
	checkNoCopy(t, s, "the hop claimed again", Iss, "swept", cs.Digest)
	mustPutCopy(t, s, cs, nil, true)

	if err := s.Forget(ctx, Base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkNoCopy(t, s, "after Forget", Iss, "swept", cs.Digest)
	checkNoCopy(t, s, "after Forget", Iss, "kept", ck.Digest)
	put(t, s, "kept", store.Accepted)
	checkNoCopy(t, s, "the hop claimed again after Forget", Iss, "kept", ck.Digest)
}

// 32 goroutines store a status for one copy at once: one wins, and the
// stored status is the winner's.
func testConcurrentPutCopy(t *testing.T, s store.Store) {
	r := put(t, s, "race", store.Accepted)
	const n = 32
	var wg sync.WaitGroup
	won := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			won[i], errs[i] = s.PutCopy(t.Context(), copyOf("race", 1, r.Status, fmt.Sprint(i)), nil)
		}()
	}
	wg.Wait()
	winners := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("PutCopy %d: %v", i, errs[i])
		}
		if won[i] {
			winners++
			checkCopy(t, s, "the winner's", copyOf("race", 1, r.Status, fmt.Sprint(i)))
		}
	}
	if winners != 1 {
		t.Errorf("%d PutCopy calls stored; want exactly 1", winners)
	}
}

// A flag with a Key is raised once while open: raising it again returns
// the open one's id and adds nothing; another key, kind or hop is another
// flag; once resolved, the same key opens a new one; an empty key never
// merges.
func testRaiseKeyed(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := store.Flag{Kind: store.FlagEquivocation, Iss: Iss, Hop: "k", Detail: "first", Created: Base, Key: "content-a"}
	id, err := s.Raise(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	f.ID = id
	for i := range 5 {
		again := f
		again.Detail, again.Created = fmt.Sprintf("again %d", i), Base.Add(time.Duration(i+1)*time.Second)
		if got, err := s.Raise(ctx, again); err != nil || got != id {
			t.Errorf("Raise of the same open key = %d, %v; want %d", got, err, id)
		}
	}
	checkFlags(t, "after raising one key six times", mustFlags(t, s, false), []store.Flag{f})
	if got := mustFlags(t, s, false); len(got) == 1 && got[0].Key != "content-a" {
		t.Errorf("Flags returned Key %q; want %q", got[0].Key, "content-a")
	}

	others := []store.Flag{
		{Kind: store.FlagEquivocation, Iss: Iss, Hop: "k", Detail: "other key", Created: Base, Key: "content-b"},
		{Kind: store.FlagConflictingInputs, Iss: Iss, Hop: "k", Detail: "other kind", Created: Base, Key: "content-a"},
		{Kind: store.FlagEquivocation, Iss: Iss, Hop: "k2", Detail: "other hop", Created: Base, Key: "content-a"},
		{Kind: store.FlagEquivocation, Iss: "https://agent.example/other", Hop: "k", Detail: "other iss", Created: Base, Key: "content-a"},
		{Kind: store.FlagEquivocation, Iss: Iss, Hop: "k", Detail: "no key", Created: Base},
		{Kind: store.FlagEquivocation, Iss: Iss, Hop: "k", Detail: "no key again", Created: Base},
	}
	others = raiseAll(t, s, others)
	checkFlags(t, "after other flags", mustFlags(t, s, false), append([]store.Flag{f}, others...))

	if err := s.Resolve(ctx, id, "seen", Base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	id2, err := s.Raise(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if id2 == id {
		t.Errorf("Raise after the keyed flag was resolved returned its id %d; want a new flag", id)
	}
	if got, err := s.Raise(ctx, f); err != nil || got != id2 {
		t.Errorf("Raise of the reopened key = %d, %v; want %d", got, err, id2)
	}
}

// 32 goroutines raise one keyed flag at once: one flag, one id for all.
func testConcurrentRaiseKeyed(t *testing.T, s store.Store) {
	const n = 32
	var wg sync.WaitGroup
	ids := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], errs[i] = s.Raise(t.Context(), store.Flag{Kind: store.FlagEquivocation, Iss: Iss, Hop: "race",
				Detail: fmt.Sprint(i), Created: Base, Key: "same"})
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Raise %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("Raise %d returned id %d, Raise 0 %d; want one flag", i, ids[i], ids[0])
		}
	}
	if fl := mustFlags(t, s, true); len(fl) != 1 {
		t.Errorf("%d flags after concurrent keyed raises; want 1", len(fl))
	}
}
