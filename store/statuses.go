package store

import "github.com/quantumlearningmachines/handoff"

// Statuses is every status the record keeps as sent for its hop, oldest
// first, with their octets as sent (shared with r): Earlier, then Status,
// each when present. By the lifecycle (CanMove) that is every status the
// delegate sent for the hop: "accepted" then "completed" or "failed", or
// one status alone. (A move to a terminal state that sends none leaves
// the "accepted" before it as the only one. The statuses signed again for
// same-content copies of the offer, CopyStatus, are other octets of these
// same statuses, kept apart.)
func (r *Record) Statuses() []handoff.Element {
	var out []handoff.Element
	if r.Earlier != nil {
		out = append(out, handoff.Element{Form: r.EarlierForm, Octets: r.Earlier})
	}
	if r.Status != nil {
		out = append(out, handoff.Element{Form: r.StatusForm, Octets: r.Status})
	}
	return out
}

// Apply makes the move m on r as every store makes it (Store.Transition),
// leaving aside its conditions (From, Mark), for a caller that keeps the
// record it moved: the state is m.To; a status given replaces the last
// one, and on a move to a terminal state with none there is no last one
// (a retransmission must not get "accepted" as if it were the last word);
// the status replaced becomes Earlier; a move to Accepted with no status
// keeps both; Decided is m.Now on a move to a terminal state. m.Status is
// copied.
func (r *Record) Apply(m Move) {
	if m.Status != nil || m.To.Terminal() {
		r.Earlier, r.EarlierForm = r.Status, r.StatusForm
		r.Status, r.StatusForm = nil, 0
		if m.Status != nil {
			r.Status, r.StatusForm = append([]byte(nil), m.Status...), m.Form
		}
	}
	r.State = m.To
	if m.To.Terminal() {
		r.Decided = m.Now
	}
}
