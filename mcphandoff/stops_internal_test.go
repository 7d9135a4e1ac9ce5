package mcphandoff

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The memory of stops for work not running here (decision 55) is
// bounded: at most maxStops entries, the oldest forgotten first, and an
// entry older than stopTTL is forgotten when the next stop is noted. A
// stop noted again for the same hop counts once.
func TestStopMemoryBounded(t *testing.T) {
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sg, err := handoff.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), delegate.Config{Options: handoff.Options{Me: "https://tester.example", Keys: trust.New()},
		Store: store.NewMemory(time.Now()), Signer: sg}, ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxStops + 10 {
		s.Stop("https://planner.example", fmt.Sprint("hop-", i))
	}
	if n := len(s.stops); n != maxStops {
		t.Fatalf("%d stops remembered, want the bound %d", n, maxStops)
	}
	if _, ok := s.stops[hopKey{"https://planner.example", "hop-0"}]; ok {
		t.Fatal("the oldest stop was kept past the bound")
	}
	if _, ok := s.stops[hopKey{"https://planner.example", fmt.Sprint("hop-", maxStops+9)}]; !ok {
		t.Fatal("the newest stop was forgotten")
	}

	// Past stopTTL every remembered stop is forgotten at the next one.
	for i := range s.stopOrder {
		s.stopOrder[i].at = s.stopOrder[i].at.Add(-stopTTL - time.Second)
		s.stops[s.stopOrder[i].k] = s.stopOrder[i].at
	}
	s.Stop("https://planner.example", "fresh")
	s.Stop("https://planner.example", "fresh")
	if len(s.stops) != 1 || len(s.stopOrder) > 2 {
		t.Fatalf("%d stops (%d in order) after the TTL passed, want only the fresh one", len(s.stops), len(s.stopOrder))
	}
}
