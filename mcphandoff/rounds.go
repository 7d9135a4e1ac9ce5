package mcphandoff

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// await keeps p, a multi-round-trip call between rounds, for its next
// round. Calls abandoned past AwaitTTL, and the oldest beyond
// MaxAwaiting, are dropped on the way (and flagged).
func (s *Server) await(ctx context.Context, k hopKey, p *pending) {
	now := time.Now()
	var dropped []hopKey
	s.mu.Lock()
	if _, ok := s.awaiting[k]; ok {
		s.rorderAwait = slices.DeleteFunc(s.rorderAwait, func(x hopKey) bool { return x == k })
	}
	for len(s.rorderAwait) > 0 {
		old := s.rorderAwait[0]
		if len(s.rorderAwait) < s.cfg.MaxAwaiting && !now.After(s.awaiting[old].until) {
			break
		}
		delete(s.awaiting, old)
		s.rorderAwait = s.rorderAwait[1:]
		dropped = append(dropped, old)
	}
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

// expireAwaiting drops (and flags) the calls kept past AwaitTTL, and runs
// again at the next one's end: an abandoned call is not kept, nor left
// unflagged, for want of other traffic. The calls are kept oldest first,
// each for AwaitTTL, so the first is the next to end.
func (s *Server) expireAwaiting() {
	now := time.Now()
	var dropped []hopKey
	s.mu.Lock()
	for len(s.rorderAwait) > 0 {
		old := s.rorderAwait[0]
		if p := s.awaiting[old]; p != nil && !now.After(p.until) {
			break
		}
		delete(s.awaiting, old)
		s.rorderAwait = s.rorderAwait[1:]
		dropped = append(dropped, old)
	}
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
