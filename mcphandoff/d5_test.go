package mcphandoff_test

import (
	"context"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/malleate"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// SPEC D5 ("Same signed content is the same offer") over MCP: a copy of a
// completed hop's offer (a malleated JWS or COSE signature, an edited COSE
// unprotected header), called by the authenticated iss, is answered as a
// retransmission with the hop's status signed for the copy's own octets;
// the tool does not run again.
func TestD5CopyOverMCP(t *testing.T) {
	cases := []struct {
		name string
		form handoff.Form
		enc  handoff.Encoding
		copy func(b []byte) ([]byte, error)
	}{
		{"malleated JWS signature", handoff.FormJWS, handoff.JSON, malleate.JWS},
		{"malleated COSE signature", handoff.FormCOSE, handoff.CBOR, malleate.COSESignature},
		{"edited COSE unprotected header", handoff.FormCOSE, handoff.JSON, func(b []byte) ([]byte, error) {
			return malleate.COSEUnprotected(b, "note", "added on the path")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.form, tc.enc)
			ctx := context.Background()
			h, _ := e.offer(e.dl, tester, "copied")
			if _, err := e.hc.Call(ctx, e.cs, call("ok"), h); err != nil {
				t.Fatal(err)
			}
			b, err := tc.copy(h.Offer.Octets)
			if err != nil {
				t.Fatal(err)
			}
			cp := handoff.Element{Form: h.Offer.Form, Octets: b}
			v, err := mcphandoff.HandoffValue(&handoff.Handoff{Offer: cp, Chain: h.Chain}, tc.enc)
			if err != nil {
				t.Fatal(err)
			}
			res, err := e.cs.CallTool(ctx, callCarrying("ok", v))
			if err != nil {
				t.Fatal(err)
			}
			sv, ok := res.Meta[mcphandoff.Key]
			if !ok {
				t.Fatal("the copy got no status")
			}
			st, _, err := mcphandoff.StatusFrom(map[string]any{mcphandoff.Key: sv})
			if err != nil {
				t.Fatal(err)
			}
			vs, err := handoff.VerifyStatus(st, cp, handoff.StatusOptions{Keys: e.keys})
			if err != nil {
				t.Fatalf("the copy's status does not verify for the copy (D9): %v", err)
			}
			if vs.Status.State != handoff.StateCompleted {
				t.Fatalf("the copy's status is %q, want the hop's completed", vs.Status.State)
			}
			if _, err := handoff.VerifyStatus(st, h.Offer, handoff.StatusOptions{Keys: e.keys}); err == nil {
				t.Fatal("the copy's status verifies for the first offer's octets too")
			}
			if n := e.runs.Load(); n != 1 {
				t.Fatalf("tool ran %d times", n)
			}
		})
	}
}
