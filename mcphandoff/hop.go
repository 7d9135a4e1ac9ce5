package mcphandoff

import (
	"context"
	"sync"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// Hop is the verified hop whose work a tool handler is doing, found in
// the handler's context with HopFrom. The handler reads who handed the
// work over and, when it knows, declares the outcome.
type Hop struct {
	Iss, ID      string               // the delegator and the hop
	Digest       handoff.Digest       // the offer's handoff digest
	Offer        *handoff.Offer       // the verified offer
	Handoff      *handoff.Handoff     // as received: pass it on with delegator.Offer{From: h.Handoff}
	ChainQuality handoff.ChainQuality // what the receiver learned of the path back (D7)

	mu    sync.Mutex
	out   delegate.Outcome
	isSet bool
}

type hopCtxKey struct{}

// HopFrom returns the hop whose work runs in ctx (a tool handler's
// context under Server's middleware), or nil when the call carried no
// handoff (or for a nil ctx), as a2ahandoff.HopFrom.
func HopFrom(ctx context.Context) *Hop {
	if ctx == nil {
		return nil
	}
	h, _ := ctx.Value(hopCtxKey{}).(*Hop)
	return h
}

// Declare states the outcome of the hop's work, from the tool handler that
// knows it (draft "Knowing the Outcome"): "completed", or "failed" listing
// in Refs every part of the work that took effect (or NoEffect). The
// middleware records it when the handler returns. Without a declaration, a
// result that is not an error is recorded "completed", and an error result
// leaves the hop "accepted" and flagged (the outcome is not known). The
// last declaration counts.
func (h *Hop) Declare(out delegate.Outcome) error {
	if h == nil {
		return invalid("mcphandoff: Declare on a nil Hop: the call carried no handoff (HopFrom returned nil)")
	}
	if out.State != store.Completed && out.State != store.Failed {
		return invalid(`mcphandoff: a declared outcome is "completed" or "failed"`)
	}
	if out.State == store.Failed && len(out.Refs) == 0 && !out.NoEffect {
		return invalid(`mcphandoff: a "failed" outcome lists in Refs what took effect, or sets NoEffect`)
	}
	h.mu.Lock()
	h.out, h.isSet = out, true
	h.mu.Unlock()
	return nil
}

func (h *Hop) declared() (delegate.Outcome, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out, h.isSet
}
