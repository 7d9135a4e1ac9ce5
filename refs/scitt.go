package refs

import (
	"fmt"

	"github.com/quantumlearningmachines/handoff"
)

// checkSCITTReceipt checks a "scitt-receipt" reference (draft appendix
// "Referencing a SCITT Receipt"): dig against statement (the tagged
// COSE_Sign1 Signed Statement with its unprotected header emptied), then the
// Receipt in proof for that statement with a key trusted (in keys) for one
// of services. statement is nil when the octets could not be obtained. It
// returns RefVerified and nil, or RefMismatch / RefUnverifiable with an
// error wrapping handoff.ErrRefMismatch / handoff.ErrUnverifiableRef.
//
// Placeholder until the receipt profile lands: it performs no check, so it
// can only say "unverifiable".
func checkSCITTReceipt(ref handoff.ContextRef, statement []byte, keys handoff.KeySource, services []string) (handoff.RefOutcome, error) {
	return handoff.RefUnverifiable, fmt.Errorf("%w: kind %q is not supported yet", handoff.ErrUnverifiableRef, ref.Kind)
}
