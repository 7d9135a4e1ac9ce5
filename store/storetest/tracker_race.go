package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/store"
)

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
