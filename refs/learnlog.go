package refs

import (
	"fmt"

	"github.com/quantumlearningmachines/handoff"
)

// checkLearnlogHead checks a "learnlog-head" reference (SPEC.md section 5):
// dig against the JCS form of the SignedHead in proof, then the head's JWS
// against a key trusted (in keys) for one of producers, then that the JWS
// payload equals JCS(head). It returns RefVerified and nil, or RefMismatch /
// RefUnverifiable with an error wrapping handoff.ErrRefMismatch /
// handoff.ErrUnverifiableRef.
//
// Placeholder until the learnlog-head profile lands: it performs no check,
// so it can only say "unverifiable".
func checkLearnlogHead(ref handoff.ContextRef, keys handoff.KeySource, producers []string) (handoff.RefOutcome, error) {
	return handoff.RefUnverifiable, fmt.Errorf("%w: kind %q is not supported yet", handoff.ErrUnverifiableRef, ref.Kind)
}
