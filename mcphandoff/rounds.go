package mcphandoff

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// await keeps p, a multi-round-trip call between rounds, for its next
// round. Calls abandoned past AwaitTTL, and the oldest beyond
// MaxAwaiting, are dropped on the way (and flagged).
func (s *Server) await(ctx context.Context, k hopKey, p *pending) {
	now := time.Now()
	s.mu.Lock()
	if _, ok := s.awaiting[k]; ok {
		s.rorderAwait = slices.DeleteFunc(s.rorderAwait, func(x hopKey) bool { return x == k })
	}
	dropped := s.dropOldest(now, s.cfg.MaxAwaiting)
	// The issuer's own quota: beyond it, its own oldest call goes, never
	// another issuer's. The scan is linear in the calls kept (at most
	// MaxAwaiting), like the removal above.
	mine, oldest := 0, -1
	for i, x := range s.rorderAwait {
		if x.iss == k.iss {
			if mine++; oldest < 0 {
				oldest = i
			}
		}
	}
	if mine >= s.cfg.MaxAwaitingPerIssuer {
		old := s.rorderAwait[oldest]
		delete(s.awaiting, old)
		s.rorderAwait = slices.Delete(s.rorderAwait, oldest, oldest+1)
		dropped = append(dropped, old)
	}
	s.awaiting[k] = p
	s.rorderAwait = append(s.rorderAwait, k)
	if s.awaitTimer == nil {
		s.awaitTimer = time.AfterFunc(time.Until(s.awaiting[s.rorderAwait[0]].until)+time.Millisecond, s.expireAwaiting)
	}
	s.mu.Unlock()
	s.abandoned(ctx, dropped)
}

// dropOldest drops, oldest first, the calls kept past AwaitTTL at now and
// those beyond the first keep-1, and returns them. s.mu is held.
func (s *Server) dropOldest(now time.Time, keep int) []hopKey {
	var dropped []hopKey
	for len(s.rorderAwait) > 0 {
		old := s.rorderAwait[0]
		if p := s.awaiting[old]; p != nil && len(s.rorderAwait) < keep && !now.After(p.until) {
			break
		}
		delete(s.awaiting, old)
		s.rorderAwait = s.rorderAwait[1:]
		dropped = append(dropped, old)
	}
	return dropped
}

// expireAwaiting drops (and flags) the calls kept past AwaitTTL, and runs
// again at the next one's end: an abandoned call is not kept, nor left
// unflagged, for want of other traffic. The calls are kept oldest first,
// each for AwaitTTL, so the first is the next to end.
func (s *Server) expireAwaiting() {
	now := time.Now()
	s.mu.Lock()
	dropped := s.dropOldest(now, math.MaxInt)
	if len(s.rorderAwait) > 0 {
		s.awaitTimer.Reset(time.Until(s.awaiting[s.rorderAwait[0]].until) + time.Millisecond)
	} else {
		s.awaitTimer = nil
	}
	s.mu.Unlock()
	s.abandoned(context.Background(), dropped)
}

// abandoned flags the hops of multi-round-trip calls dropped between
// rounds: each stays "accepted", and what its earlier rounds did is not
// known here (draft "Knowing the Outcome": never guess).
func (s *Server) abandoned(ctx context.Context, ks []hopKey) {
	for _, k := range ks {
		err := s.cfg.Delegate.Unknown(context.WithoutCancel(ctx), k.iss, k.hop,
			"a multi-round-trip call was abandoned between rounds (no retry within the bound); the earlier rounds' effect is not known")
		if err != nil && s.cfg.Report != nil {
			s.cfg.Report(fmt.Errorf("mcphandoff: flagging abandoned hop %s of %s: %w", k.hop, k.iss, err))
		}
	}
}
