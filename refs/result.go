package refs

import (
	"context"

	"github.com/quantumlearningmachines/handoff"
)

// StatusReport is what a delegator learned by checking the refs of a
// status it received against the objects it received with it (draft
// "Data Model", Status refs: for "completed", the result; for "failed",
// what took effect).
type StatusReport struct {
	State    handoff.State
	Refs     []handoff.ContextRef
	Findings Findings // one per ref, in order
}

// CheckStatus checks every ref of a verified status with the material the
// delegator received (the result's octets, the effect records), treating
// each ref as required: it is fetched from loc when the policy's
// FetchPolicy allows it for the status's iss, never otherwise. The status's
// iss is the default learnlog producer. A nil vs or vs.Status gives an
// empty report.
//
// The report answers: for "completed", ResultVerified says the result the
// delegator holds is the one the delegate named; for "failed", Effects
// lists what took effect and which of those records the delegator could
// confirm, and NoEffect says the delegate reported none.
func (c *Checker) CheckStatus(ctx context.Context, vs *handoff.VerifiedStatus, m *Material) *StatusReport {
	if vs == nil || vs.Status == nil {
		return &StatusReport{}
	}
	s := vs.Status
	return &StatusReport{State: s.State, Refs: s.Refs, Findings: c.check(ctx, s.Iss, s.Refs, m, true)}
}

// Verified returns the indexes of the refs found verified, in order.
func (r *StatusReport) Verified() []int {
	var out []int
	for i, f := range r.Findings {
		if f.Outcome == handoff.RefVerified {
			out = append(out, i)
		}
	}
	return out
}

// ResultVerified reports whether the status is "completed", names its
// result by at least one ref, and every ref verified. A "completed" with
// no refs names no result, so nothing the delegator holds is confirmed by
// it: false.
func (r *StatusReport) ResultVerified() bool {
	if r.State != handoff.StateCompleted || len(r.Findings) == 0 {
		return false
	}
	return len(r.Verified()) == len(r.Findings)
}

// NoEffect reports a "failed" status with no refs: the delegate says the
// work took no effect (draft "Lifecycle").
func (r *StatusReport) NoEffect() bool {
	return r.State == handoff.StateFailed && len(r.Refs) == 0
}

// Effects returns, for a "failed" status, the refs naming what took
// effect, each with whether the delegator confirmed its record. Even an
// unconfirmed one took effect as far as the delegate says: the delegator
// takes every one into account before trying again.
func (r *StatusReport) Effects() []Effect {
	if r.State != handoff.StateFailed {
		return nil
	}
	out := make([]Effect, len(r.Refs))
	for i, ref := range r.Refs {
		out[i] = Effect{Ref: ref, Finding: r.Findings[i]}
	}
	return out
}

// Effect is one ref of a "failed" status: a record of something that took
// effect, and what checking it found.
type Effect struct {
	Ref     handoff.ContextRef
	Finding Finding
}

// Confirmed reports whether the effect's record was verified.
func (e Effect) Confirmed() bool { return e.Finding.Outcome == handoff.RefVerified }
