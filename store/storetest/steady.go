package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

// SteadyStream feeds s a steady stream of hops and checks that what the
// store occupies stays flat (issue 19): each minute of its clock, 200 hops
// are claimed and answered ("rejected", a terminal state), kept for five
// minutes, and Sweep removes those past their keep time. size reports what
// the store occupies now (file or relation sizes, as the store measures
// them), after the maintenance a store in service gets; it is called every
// minute, and compared after the stream's first ten minutes, once the
// window is full, and at its end, thirty minutes in. The bytes per live hop are
// logged (docs/scaling.md). The records vary as NewRecord's do: a third
// with no chain, the others with a chain of one or two elements.
func SteadyStream(t *testing.T, s store.Store, size func() int64) {
	ctx := t.Context()
	const perMinute, keep, minutes = 200, 5, 30
	var early, late int64
	live := 0
	for m := range minutes {
		now := Base.Add(time.Duration(m) * time.Minute)
		for i := range perMinute {
			r := NewRecord(fmt.Sprintf("steady-%03d-%04d", m, i), store.Rejected, i)
			r.Received, r.Decided, r.KeepUntil = now, now, now.Add(keep*time.Minute)
			if _, stored, err := s.Claim(ctx, r); err != nil || !stored {
				t.Fatalf("minute %d: Claim: %v %v", m, stored, err)
			}
		}
		if _, err := s.Sweep(ctx, now, 0); err != nil {
			t.Fatalf("minute %d: Sweep: %v", m, err)
		}
		// Read every minute: a store whose space is reclaimed by a
		// maintenance task (PostgreSQL's autovacuum) runs it in size.
		switch n := size(); m {
		case 9:
			early = n
		case minutes - 1:
			late = n
		}
	}
	// The hops within the keep time, at the end: the last keep+1 minutes'.
	live = perMinute * (keep + 1)
	t.Logf("steady stream of %d hops a minute kept %d minutes: %d bytes after 10 minutes, %d after %d (%d bytes a live hop)",
		perMinute, keep, early, late, minutes, late/int64(live))
	if late > early+early/4 {
		t.Fatalf("the store grew from %d to %d bytes under a steady stream", early, late)
	}
}
