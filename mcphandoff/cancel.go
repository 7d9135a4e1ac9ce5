package mcphandoff

import (
	"context"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
)

// cancelled takes a notifications/cancelled. The SDK has already canceled
// the request's context (that ends the call, not the work). A signed
// "canceled" under Key is verified by the delegate (D9) against the hop's
// recorded offer; if it holds, the hop is recorded canceled and its work
// is stopped. The work's outcome is still recorded when known (decision
// 16): a cancel does not show that the work took no effect.
func (s *Server) cancelled(ctx context.Context, p *mcp.CancelledParams) error {
	el, ok, err := StatusFrom(p.Meta)
	if !ok {
		return nil // a plain MCP cancel: the request's business only
	}
	if err != nil {
		return err
	}
	_, st, err := handoff.UnsafeDecode(el)
	if err != nil {
		return fmt.Errorf("mcphandoff: cancel: %w", err)
	}
	if st == nil || st.State != handoff.StateCanceled {
		return fmt.Errorf("%w: notifications/cancelled carries something other than a canceled status", ErrMeta)
	}
	// The status names the offer by digest; the hop comes from the offers
	// this middleware has seen. An unknown digest goes to the delegate
	// with no hop: it holds the cancel for an offer not yet received.
	s.mu.Lock()
	k, known := s.offers[st.Offer.Alg+":"+st.Offer.String()]
	s.mu.Unlock()
	if !known {
		k = hopKey{st.Iss, ""}
	}
	rec, err := s.cfg.Delegate.Cancel(context.WithoutCancel(ctx), el, k.iss, k.hop)
	if err != nil {
		return fmt.Errorf("mcphandoff: cancel for offer %s: %w", st.Offer, err)
	}
	if k.hop == "" && rec != nil {
		k = hopKey{rec.Iss, rec.Hop} // the delegate placed it
	}
	if k.hop != "" {
		// Stop, not stop: work taken but not yet registered (between the
		// delegate's claim and run) is remembered and never begun, even
		// when the delegate's Config.Stop does not reach this Server.
		s.Stop(k.iss, k.hop)
	}
	s.mu.Lock()
	waiting := s.awaiting[k]
	delete(s.awaiting, k)
	if waiting != nil {
		s.rorderAwait = slices.DeleteFunc(s.rorderAwait, func(x hopKey) bool { return x == k })
	}
	s.mu.Unlock()
	if waiting != nil {
		// Canceled between rounds: no round will run again, and what the
		// earlier rounds did is not known here (draft "Knowing the
		// Outcome": never guess).
		if err := s.cfg.Delegate.Unknown(context.WithoutCancel(ctx), k.iss, k.hop, "canceled while the tool awaited input (multi-round-trip); the earlier rounds' effect is not known"); err != nil {
			return fmt.Errorf("mcphandoff: flagging hop %s of %s: %w", k.hop, k.iss, err)
		}
	}
	return nil
}

// stop cancels the context of running work.
func (s *Server) stop(k hopKey) {
	s.mu.Lock()
	w := s.running[k]
	s.mu.Unlock()
	if w != nil {
		w.cancel()
	}
}
