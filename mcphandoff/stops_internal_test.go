package mcphandoff

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// testServer is a Server made by New around a delegate with a memory
// store and no trusted keys: for the bounds, which need no traffic.
func testServer(t *testing.T, cfg ServerConfig) *Server {
	t.Helper()
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sg, err := handoff.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), delegate.Config{Options: handoff.Options{Me: "https://tester.example", Keys: trust.New()},
		Store: store.NewMemory(time.Now()), Signer: sg}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The memory of stops for work not running here (decision 55) is
// bounded: at most maxStops entries, the oldest forgotten first, and an
// entry older than stopTTL is forgotten when the next stop is noted. A
// stop noted again for the same hop counts once.
func TestStopMemoryBounded(t *testing.T) {
	s := testServer(t, ServerConfig{})
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

// Multi-round-trip calls kept between rounds are bounded per issuer
// (ServerConfig.MaxAwaitingPerIssuer, draft "Replay and Freshness": every
// resource bounded): one trusted delegator that abandons call after call
// drops only its own oldest, never another issuer's, and all of them
// together stay within MaxAwaiting.
func TestAwaitingPerIssuer(t *testing.T) {
	var reports int
	s := testServer(t, ServerConfig{MaxAwaiting: 16, MaxAwaitingPerIssuer: 2, Report: func(error) { reports++ }})
	ctx := context.Background()
	keep := func(iss, hop string) {
		s.await(ctx, hopKey{iss, hop}, &pending{hop: &Hop{Iss: iss, ID: hop}, until: time.Now().Add(time.Hour)})
	}
	keep("https://planner.example", "p-1")
	for i := range 100 {
		keep("https://flooder.example", fmt.Sprint("f-", i))
	}
	if _, ok := s.awaiting[hopKey{"https://planner.example", "p-1"}]; !ok {
		t.Fatal("another issuer's flood pushed out the planner's call")
	}
	mine := 0
	for k := range s.awaiting {
		if k.iss == "https://flooder.example" {
			mine++
		}
	}
	if mine != 2 || len(s.rorderAwait) != 3 || len(s.awaiting) != 3 {
		t.Fatalf("the flooder keeps %d calls (%d in order, %d in all); want its bound, 2", mine, len(s.rorderAwait), len(s.awaiting))
	}
	for _, hop := range []string{"f-98", "f-99"} {
		if _, ok := s.awaiting[hopKey{"https://flooder.example", hop}]; !ok {
			t.Fatalf("the flooder's newest call %s was dropped", hop)
		}
	}
	// Each dropped call is flagged unknown outcome; these hops have no
	// record, so flagging them fails, and that is reported.
	if reports != 98 {
		t.Fatalf("%d reports, want one for each of the 98 dropped calls", reports)
	}

	// Every issuer within its quota still stays within MaxAwaiting.
	for i := range 20 {
		keep(fmt.Sprint("https://issuer-", i, ".example"), "h")
	}
	if len(s.awaiting) != 16 || len(s.rorderAwait) != 16 {
		t.Fatalf("%d calls kept (%d in order); want MaxAwaiting, 16", len(s.awaiting), len(s.rorderAwait))
	}

	for _, c := range []ServerConfig{{MaxAwaitingPerIssuer: -1}, {MaxAwaiting: -1}} {
		if _, err := NewServer(ServerConfig{Delegate: s.cfg.Delegate, MaxAwaitingPerIssuer: c.MaxAwaitingPerIssuer, MaxAwaiting: c.MaxAwaiting}); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
	if t2, _ := NewServer(ServerConfig{Delegate: s.cfg.Delegate, MaxAwaiting: 4, MaxAwaitingPerIssuer: 9}); t2.cfg.MaxAwaitingPerIssuer != 4 {
		t.Fatalf("a per-issuer bound above MaxAwaiting is %d, want MaxAwaiting", t2.cfg.MaxAwaitingPerIssuer)
	}
	if t3, _ := NewServer(ServerConfig{Delegate: s.cfg.Delegate}); t3.cfg.MaxAwaitingPerIssuer != DefaultMaxAwaitingPerIssuer {
		t.Fatalf("default per-issuer bound %d, want %d", t3.cfg.MaxAwaitingPerIssuer, DefaultMaxAwaitingPerIssuer)
	}
	if t4, _ := NewServer(ServerConfig{Delegate: s.cfg.Delegate, MaxAwaiting: 2}); t4.cfg.MaxAwaitingPerIssuer != 2 {
		t.Fatalf("default per-issuer bound with MaxAwaiting 2: %d, want 2", t4.cfg.MaxAwaitingPerIssuer)
	}
}

// A multi-round-trip call abandoned between rounds is dropped, and its
// hop flagged, once AwaitTTL has passed even when no other call comes
// (ServerConfig.AwaitTTL: "kept at most"); the timer stops when none is
// left and starts again with the next.
func TestAwaitingExpiresWithoutTraffic(t *testing.T) {
	reports := make(chan error, 8)
	const ttl = 50 * time.Millisecond
	s := testServer(t, ServerConfig{AwaitTTL: ttl, Report: func(err error) { reports <- err }})
	for round := range 2 {
		s.await(context.Background(), hopKey{"https://planner.example", fmt.Sprint("h-", round)},
			&pending{hop: &Hop{Iss: "https://planner.example", ID: fmt.Sprint("h-", round)}, until: time.Now().Add(ttl)})
		select {
		case err := <-reports:
			// The hop has no record here, so flagging it fails: the
			// report shows the drop happened.
			if !strings.Contains(err.Error(), "abandoned") {
				t.Fatalf("round %d: report %v", round, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the abandoned call was not dropped without other traffic", round)
		}
		s.mu.Lock()
		n, timer := len(s.awaiting), s.awaitTimer
		s.mu.Unlock()
		if n != 0 || timer != nil {
			t.Fatalf("round %d: %d calls kept, timer %v; want none", round, n, timer)
		}
	}
}
