package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// RunTwoHandles runs the race of two handles on one database (two
// replicas, or two processes sharing a file) on a store: open is called
// twice and must return two handles on the same, empty database. For each
// of three hops 64 claims race across the two: exactly one inserts, and
// every caller gets the winner's record; then 16 transitions of it race:
// exactly one wins, the others get ErrConflict. Then claims on one handle
// race holds of their cancels on the other (ClaimHoldRace).
func RunTwoHandles(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := t.Context()
	stores := []store.Store{open(t), open(t)}
	const n = 64
	for round := range 3 {
		hop := fmt.Sprintf("shared-%d", round)
		recs := make([]*store.Record, n)
		got := make([]*store.Record, n)
		ins := make([]bool, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			recs[i] = NewRecord(hop, store.Received, i)
			r := *recs[i]
			wg.Go(func() {
				<-start
				got[i], ins[i], errs[i] = stores[i%2].Claim(ctx, &r)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("Claim %d: %v", i, errs[i])
			}
			if ins[i] {
				if winner >= 0 {
					t.Fatalf("round %d: claims %d and %d both inserted", round, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no claim inserted", round)
		}
		for i := range n {
			if d := DiffRecord(got[i], recs[winner]); d != nil {
				t.Errorf("round %d: claim %d got another record than the winner's:\n\t%s", round, i, strings.Join(d, "\n\t"))
			}
		}

		moveErrs := make([]error, 16)
		start = make(chan struct{})
		for i := range moveErrs {
			wg.Go(func() {
				<-start
				moveErrs[i] = stores[i%2].Transition(ctx, store.Move{Iss: Iss, Hop: hop, From: store.Received, To: store.Accepted, Status: Status(fmt.Sprint(i)), Form: handoff.FormJWS, Now: Base})
			})
		}
		close(start)
		wg.Wait()
		wins := 0
		for i, err := range moveErrs {
			if err == nil {
				wins++
			} else if !errors.Is(err, store.ErrConflict) {
				t.Errorf("round %d: transition %d = %v; want nil or ErrConflict", round, i, err)
			}
		}
		if wins != 1 {
			t.Errorf("round %d: %d transitions won; want 1", round, wins)
		}
	}
	ClaimHoldRace(t, stores[0], stores[1])
}
