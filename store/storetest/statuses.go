package storetest

import (
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// --- Every status sent, in order ------------------------------------------

// A record keeps every status sent for its hop, oldest first
// (store.Record.Statuses): through each road the lifecycle allows, a move
// that replaces the last status keeps it as Earlier, octets and form, and
// Statuses lists the statuses sent in the order they were sent.
func testStatusesInOrder(t *testing.T, s store.Store) {
	type step struct {
		to     store.State
		status string // "" for a move with no status
		form   handoff.Form
	}
	roads := []struct {
		name  string
		claim store.State
		steps []step
		want  []string // the statuses sent, oldest first
	}{
		{"accepted-completed", store.Accepted, []step{{store.Completed, "completed", handoff.FormCOSE}}, []string{"accepted-completed/accepted", "completed"}},
		{"accepted-failed", store.Accepted, []step{{store.Failed, "failed", handoff.FormJWS}}, []string{"accepted-failed/accepted", "failed"}},
		{"received-accepted-completed", store.Received, []step{{store.Accepted, "accepted", handoff.FormCOSE}, {store.Completed, "completed", handoff.FormJWS}}, []string{"accepted", "completed"}},
		{"received-accepted-kept-failed", store.Received, []step{{store.Accepted, "", handoff.FormJWS}, {store.Failed, "failed", handoff.FormCOSE}}, []string{"failed"}},
		{"received-completed", store.Received, []step{{store.Completed, "completed", handoff.FormCOSE}}, []string{"completed"}},
		{"received-rejected", store.Received, []step{{store.Rejected, "rejected", handoff.FormJWS}}, []string{"rejected"}},
		{"rejected", store.Rejected, nil, []string{"rejected/rejected"}},
		{"accepted", store.Accepted, nil, []string{"accepted/accepted"}},
		{"received", store.Received, nil, nil},
		// A terminal move with no status: the "accepted" was the last sent.
		{"accepted-failed-silent", store.Accepted, []step{{store.Failed, "", handoff.FormJWS}}, []string{"accepted-failed-silent/accepted"}},
	}
	for i, road := range roads {
		want := NewRecord(road.name, road.claim, 0)
		mustClaim(t, s, want)
		from := road.claim
		for j, st := range road.steps {
			var status []byte
			if st.status != "" {
				status = Status(st.status)
			}
			now := Base.Add(time.Duration(10*i+j+1) * time.Second)
			mustMove(t, s, road.name, from, st.to, status, st.form, now)
			if status != nil || st.to.Terminal() {
				want.Earlier, want.EarlierForm = want.Status, want.StatusForm
				want.Status, want.StatusForm = status, st.form
				if status == nil {
					want.StatusForm = 0
				}
			}
			want.State, from = st.to, st.to
			if st.to.Terminal() {
				want.Decided = now
			}
		}
		got := mustGet(t, s, road.name)
		checkRecord(t, "Get("+road.name+")", got, want)
		sent := got.Statuses()
		if len(sent) != len(road.want) {
			t.Errorf("%s: Statuses() has %d statuses; want %d (%q)", road.name, len(sent), len(road.want), road.want)
			continue
		}
		for k, el := range sent {
			if string(el.Octets) != string(Status(road.want[k])) {
				t.Errorf("%s: Statuses()[%d] = %q; want %q", road.name, k, el.Octets, Status(road.want[k]))
			}
		}
		if n := len(sent); n > 0 && sent[n-1].Form != got.StatusForm && got.Status != nil {
			t.Errorf("%s: the last status's form is %v; want the record's %v", road.name, sent[n-1].Form, got.StatusForm)
		}
	}
}
