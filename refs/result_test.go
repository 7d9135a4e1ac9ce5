package refs

import (
	"context"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// TestCheckStatus is the delegator's side of status refs (draft "Data
// Model", Status refs: "completed" names the result, "failed" lists what
// took effect): a real signed offer and status, verified with
// handoff.VerifyStatus, then the refs against what the delegator received.
func TestCheckStatus(t *testing.T) {
	tc := trust.New()
	signer := func(id string) *handoff.Signer {
		k, err := trust.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		tk, _ := trust.NewKey(&k.PublicKey)
		if err := tc.Add(id, tk); err != nil {
			t.Fatal(err)
		}
		s, err := handoff.NewSigner(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	planner, coder := signer(delegator), signer(delegate)
	now := time.Now().Unix()
	offer, err := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: delegator, Aud: delegate, Iat: now, Exp: now + 60}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	result := []byte(`{"patch":"diff --git a/x b/x"}`)
	effect1 := []byte("payment record 1")
	effect2 := []byte("ticket record 2")
	status := func(st handoff.State, refs ...handoff.ContextRef) *handoff.VerifiedStatus {
		t.Helper()
		el, err := coder.SignStatus(&handoff.Status{Offer: offer.Digest(), Iss: delegate, Aud: delegator, Iat: now, State: st, Refs: refs}, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := handoff.VerifyStatus(el, offer, handoff.StatusOptions{Keys: tc})
		if err != nil {
			t.Fatal(err)
		}
		return vs
	}
	c := mustChecker(t, Policy{Keys: tc})
	ctx := context.Background()

	// completed: the result received by digest matches; another does not.
	done := status(handoff.StateCompleted, NewDigestRef(result, ""))
	if r := c.CheckStatus(ctx, done, &Material{Objects: []Object{{Octets: result}}}); !r.ResultVerified() || len(r.Verified()) != 1 {
		t.Fatalf("completed with its result: %+v", r.Findings)
	}
	r := c.CheckStatus(ctx, done, &Material{Octets: map[int][]byte{0: []byte("a different result")}})
	if r.ResultVerified() || r.Findings[0].Outcome != handoff.RefMismatch {
		t.Fatalf("completed with another result: %+v", r.Findings)
	}
	// Nothing received: every ref is attempted, so unverifiable, not "not-checked".
	if r := c.CheckStatus(ctx, done, nil); r.ResultVerified() || r.Findings[0].Outcome != handoff.RefUnverifiable {
		t.Fatalf("completed, nothing received: %+v", r.Findings)
	}
	// completed without refs names no result: nothing confirmed.
	if r := c.CheckStatus(ctx, status(handoff.StateCompleted), nil); r.ResultVerified() {
		t.Fatal("a completed with no refs confirmed a result")
	}

	// failed: two effects, the delegator holds the record of one.
	failed := status(handoff.StateFailed, NewDigestRef(effect1, ""), NewDigestRef(effect2, ""))
	r = c.CheckStatus(ctx, failed, &Material{Objects: []Object{{Octets: effect2}}})
	effects := r.Effects()
	if r.NoEffect() || len(effects) != 2 || effects[0].Confirmed() || !effects[1].Confirmed() || r.ResultVerified() {
		t.Fatalf("failed with effects: %+v", effects)
	}
	// failed without refs: no effect.
	if r := c.CheckStatus(ctx, status(handoff.StateFailed), nil); !r.NoEffect() || len(r.Effects()) != 0 {
		t.Fatal("a failed with no refs is not NoEffect")
	}
	if r := c.CheckStatus(ctx, nil, nil); r.ResultVerified() || r.NoEffect() {
		t.Fatal("an empty report claims something")
	}
}
