package a2ahandoff_test

import (
	"bytes"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/internal/malleate"
)

// SPEC D5 ("Same signed content is the same offer") over A2A: a copy of a
// completed hop's offer (a malleated signature, an edited COSE
// unprotected header), sent by its authenticated iss in a new message, is
// answered as a retransmission with the hop's status signed for the
// copy's own octets; the agent does not run again.
func TestD5CopyOverA2A(t *testing.T) {
	cases := []struct {
		name string
		enc  handoff.Encoding
		form handoff.Form
		copy func(b []byte) ([]byte, error)
	}{
		{"malleated JWS signature", handoff.JSON, handoff.FormJWS, malleate.JWS},
		{"malleated COSE signature", handoff.CBOR, handoff.FormCOSE, malleate.COSESignature},
		{"edited COSE unprotected header", handoff.CBOR, handoff.FormCOSE, func(b []byte) ([]byte, error) {
			return malleate.COSEUnprotected(b, "note", "added on the path")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), tc.form, nil)
			iss := a2aClient(t, srv.url, "token-of-"+assistantID)
			el, m, task := firstSend(t, w, iss, tc.enc, tc.form, "complete", true)
			if task.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("first: task %s", task.Status.State)
			}
			runs := srv.agent.runs.Load()
			b, err := tc.copy(el.Octets)
			if err != nil {
				t.Fatal(err)
			}
			cp := handoff.Element{Form: tc.form, Octets: b}
			again := offerMessage(t, "complete", m.ContextID, &handoff.Handoff{Offer: cp}, tc.enc)
			ans := oneMessage(t, iss, again, false, task.ID)
			sts, errs := a2ahandoff.Statuses(ans)
			if len(errs) > 0 || len(sts) != 1 {
				t.Fatalf("answered with %d statuses (%v), want one", len(sts), errs)
			}
			if st := w.verified(t, sts[0], cp); st.State != handoff.StateCompleted {
				t.Fatalf("the copy's status is %q, want the hop's completed", st.State)
			}
			if _, err := handoff.VerifyStatus(sts[0], el, handoff.StatusOptions{Keys: w.keys}); err == nil {
				t.Fatal("the copy's status verifies for the first offer's octets too")
			}
			// The same copy sent into the hop's own finished task is
			// answered from the record too (before a2a-go would refuse a
			// message into a terminal task), with the same octets.
			into := offerMessage(t, "complete", m.ContextID, &handoff.Handoff{Offer: cp}, tc.enc)
			into.TaskID, into.ContextID = task.ID, task.ContextID
			ans2 := oneMessage(t, iss, into, false, task.ID)
			sts2, errs := a2ahandoff.Statuses(ans2)
			if len(errs) > 0 || len(sts2) != 1 || !bytes.Equal(sts2[0].Octets, sts[0].Octets) {
				t.Fatalf("into its own task: %d statuses (%v), want the copy's status again", len(sts2), errs)
			}
			if n := srv.agent.runs.Load(); n != runs {
				t.Fatalf("the agent ran %d more times", n-runs)
			}
		})
	}
}
