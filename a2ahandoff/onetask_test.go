package a2ahandoff_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// One task, one delegator (decision 53): a new offer naming an existing
// A2A task joins it only when its iss is the iss of the task's first hop
// and the host authenticated the sender as that iss (as for follow-ups,
// draft "Replay and Freshness"). Otherwise it is refused with a
// standalone Message, before the delegate sees it: nothing is recorded
// or signed, the agent does not run, and the task and its hop are left
// as they were. The exploit: a trusted agent that learned the task id
// ran its own work in the task (seeing its history) and, by canceling
// its own hop, wrote the shared task CANCELED, stranding the first
// delegator's hop "accepted".
func TestOfferJoinsOnlyItsDelegatorsTask(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	owner := a2aClient(t, srv.url, "token-of-"+assistantID)

	// coderOffer is a valid offer from the coder (a trusted agent) to
	// the planner, in the task's dialog.
	coderOffer := func(t *testing.T, task *a2a.Task) (handoff.Element, *handoff.Offer) {
		now := time.Now().Unix()
		o := handoff.Offer{Hop: handoff.NewHop(), Dialog: task.ContextID, Iss: coderID, Aud: plannerID, Iat: now, Exp: now + 120}
		return w.sign(t, coderID, o, handoff.FormJWS), &o
	}
	for _, tc := range []struct {
		name  string
		token string                                                        // the sender's bearer token
		offer func(*testing.T, *a2a.Task) (handoff.Element, *handoff.Offer) // the offer sent into the task
		says  string
	}{
		{"another trusted delegator, authenticated as itself", "token-of-" + coderID, coderOffer, "one task, one delegator"},
		{"another trusted delegator, unauthenticated", "", coderOffer, "one task, one delegator"},
		{"the task's delegator's offer, sender not authenticated", "", func(t *testing.T, task *a2a.Task) (handoff.Element, *handoff.Offer) {
			el := signOffer(t, w, task.ContextID)
			return el, hopOf(t, el)
		}, "authenticated by the host"},
		{"the task's delegator's offer, sent by another agent", "token-of-" + coderID, func(t *testing.T, task *a2a.Task) (handoff.Element, *handoff.Offer) {
			el := signOffer(t, w, task.ContextID)
			return el, hopOf(t, el)
		}, "authenticated by the host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			el, task := startPaused(t, w, srv, owner)
			runs := srv.agent.runs.Load()
			el2, o2 := tc.offer(t, task)
			from := a2aClient(t, srv.url, tc.token)
			res := mustSend(t, from, carrying(t, inTask(task, "complete"), &handoff.Handoff{Offer: el2}, handoff.JSON))
			m, ok := res.(*a2a.Message)
			if !ok {
				t.Fatalf("reply %T %+v, want a standalone Message", res, res)
			}
			if !strings.Contains(textOf(m), tc.says) {
				t.Errorf("reply %q does not say %q", textOf(m), tc.says)
			}
			if sts, _ := a2ahandoff.Statuses(res); len(sts) != 0 {
				t.Errorf("%d statuses sent for an offer refused before the delegate saw it", len(sts))
			}
			if _, err := srv.st.Get(ctx, o2.Iss, o2.Hop); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the refused offer's hop is recorded (%v); want nothing recorded", err)
			}
			unchanged(t, srv, owner, task, el, runs, store.Accepted)
			if got := getTask(t, owner, task.ID); len(got.History) != len(task.History) {
				// a2a-go adds the sent message to the history before the
				// executor runs; the refusal adds nothing of the agent's.
				for _, hm := range got.History[len(task.History):] {
					if hm.Role == a2a.MessageRoleAgent {
						t.Errorf("the refusal wrote an agent message into the task: %q", textOf(hm))
					}
				}
			}

			// Sent in a task of its own, the same offer is processed as
			// new: the refusal did not use it up.
			if o2.Iss == coderID {
				fresh := offerMessage(t, "complete", task.ContextID, &handoff.Handoff{Offer: el2}, handoff.JSON)
				got, sts := sendForTask(t, a2aClient(t, srv.url, "token-of-"+coderID), fresh)
				if got.ID == task.ID || got.Status.State != a2a.TaskStateCompleted || len(sts) != 2 {
					t.Fatalf("the offer in its own task: task %s %s, %d statuses; want a new task, completed, accepted+completed", got.ID, got.Status.State, len(sts))
				}
			}
		})
	}

	t.Run("the exploit: another delegator cannot cancel the shared task", func(t *testing.T) {
		el, task := startPaused(t, w, srv, owner)
		el2, o2 := coderOffer(t, task)
		mustSend(t, a2aClient(t, srv.url, "token-of-"+coderID), carrying(t, inTask(task, "more"), &handoff.Handoff{Offer: el2}, handoff.JSON))
		cancel, err := w.signers[coderID].SignStatus(&handoff.Status{Offer: el2.Digest(), Iss: coderID, Aud: plannerID,
			Iat: time.Now().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a2aClient(t, srv.url, "token-of-"+coderID).CancelTask(ctx, &a2a.TaskIDParams{ID: task.ID,
			Metadata: map[string]any{a2ahandoff.Key: cancel.Text()}})
		if err == nil {
			t.Fatal("the other delegator's cancel was taken for the first delegator's task")
		}
		if got := getTask(t, owner, task.ID); got.Status.State != a2a.TaskStateInputRequired {
			t.Fatalf("task %s after the other delegator's cancel; want it left input-required", got.Status.State)
		}
		unchanged(t, srv, owner, task, el, srv.agent.runs.Load(), store.Accepted)
		if _, err := srv.st.Get(ctx, o2.Iss, o2.Hop); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the other delegator's hop is recorded: %v", err)
		}
	})

	t.Run("the task's delegator, authenticated, adds a hop to its own task", func(t *testing.T) {
		_, task := startPaused(t, w, srv, owner)
		el2 := signOffer(t, w, task.ContextID)
		res := mustSend(t, owner, carrying(t, inTask(task, "complete"), &handoff.Handoff{Offer: el2}, handoff.JSON))
		got, ok := res.(*a2a.Task)
		if !ok || got.ID != task.ID || got.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("reply %T %+v, want the task completed under the second hop", res, res)
		}
		o2 := hopOf(t, el2)
		if rec, err := srv.st.Get(ctx, o2.Iss, o2.Hop); err != nil || rec.State != store.Completed {
			t.Fatalf("second hop: %+v, %v; want completed", rec, err)
		}
	})
}

// One task, one delegator, against a message that reuses the id of the
// task's first message: a2a-go does not append such a message to the
// history (it takes it for a retried execution), so the first hop's
// message is still there and still names the task's delegator. The
// coder's offer is refused, nothing is recorded for it, and the task
// waits for its own delegator as before.
func TestOfferReusingFirstMessageIDJoinsNoTask(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	owner := a2aClient(t, srv.url, "token-of-"+assistantID)
	el, task := startPaused(t, w, srv, owner)
	seen := getTask(t, owner, task.ID) // whoever holds the task id can read it
	now := time.Now().Unix()
	o := handoff.Offer{Hop: handoff.NewHop(), Dialog: task.ContextID, Iss: coderID, Aud: plannerID, Iat: now, Exp: now + 120}
	m := inTask(task, "complete")
	m.ID = seen.History[0].ID
	res := mustSend(t, a2aClient(t, srv.url, "token-of-"+coderID), carrying(t, m, &handoff.Handoff{Offer: w.sign(t, coderID, o, handoff.FormJWS)}, handoff.JSON))
	if msg, ok := res.(*a2a.Message); !ok || !strings.Contains(textOf(msg), "one task, one delegator") {
		t.Errorf("answer %T %v, want the standalone refusal", res, res)
	}
	if rec, err := srv.st.Get(ctx, coderID, o.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the coder's hop was recorded (%v, %v), want nothing", rec, err)
	}
	first := hopOf(t, el)
	r1, _ := srv.st.Get(ctx, first.Iss, first.Hop)
	if got := getTask(t, owner, task.ID); got.Status.State != a2a.TaskStateInputRequired || r1.State != store.Accepted {
		t.Errorf("task %s, first hop %s; want input-required and accepted", got.Status.State, r1.State)
	}
}

// A refused offer stays in the task's history (a2a-go appended it before
// the refusal). Taken later in a task of its own, it is no hop of the
// first task: the first delegator's cancel still ends that task CANCELED
// (a cancel is held back only by another open hop the task carries).
func TestRefusedOfferInHistoryHoldsNoCancel(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	owner := a2aClient(t, srv.url, "token-of-"+assistantID)
	el, task := startPaused(t, w, srv, owner)
	coder := a2aClient(t, srv.url, "token-of-"+coderID)
	now := time.Now().Unix()
	o := handoff.Offer{Hop: handoff.NewHop(), Dialog: task.ContextID, Iss: coderID, Aud: plannerID, Iat: now, Exp: now + 120}
	el2 := w.sign(t, coderID, o, handoff.FormJWS)
	mustSend(t, coder, carrying(t, inTask(task, "more"), &handoff.Handoff{Offer: el2}, handoff.JSON))
	own, _ := sendForTask(t, coder, offerMessage(t, "more", task.ContextID, &handoff.Handoff{Offer: el2}, handoff.JSON))
	if own.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("the coder's own task is %s, want input-required", own.Status.State)
	}
	first := hopOf(t, el)
	cancel, err := w.signers[assistantID].SignStatus(&handoff.Status{Offer: el.Digest(), Iss: assistantID, Aud: plannerID,
		Iat: time.Now().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	_, err = owner.CancelTask(ctx, &a2a.TaskIDParams{ID: task.ID, Metadata: map[string]any{a2ahandoff.Key: cancel.Text()}})
	got := getTask(t, owner, task.ID)
	r1, _ := srv.st.Get(ctx, first.Iss, first.Hop)
	if err != nil || got.Status.State != a2a.TaskStateCanceled || !r1.Canceled {
		t.Errorf("the assistant's cancel of its own task: %v; task %s; hop canceled=%v", err, got.Status.State, r1.Canceled)
	}
	if r2, _ := srv.st.Get(ctx, coderID, o.Hop); r2.State != store.Accepted || r2.Canceled {
		t.Errorf("the coder's hop in its own task is %s canceled=%v, want accepted, untouched", r2.State, r2.Canceled)
	}
}
