package a2ahandoff_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// signOffer signs a fresh offer from the assistant to the planner in
// dialog.
func signOffer(t testing.TB, w *world, dialog string) handoff.Element {
	t.Helper()
	now := time.Now().Unix()
	return w.sign(t, assistantID, handoff.Offer{Hop: handoff.NewHop(), Dialog: dialog, Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 120}, handoff.FormJWS)
}

func hopOf(t testing.TB, el handoff.Element) *handoff.Offer {
	t.Helper()
	o, _, err := handoff.UnsafeDecode(el)
	if err != nil || o == nil {
		t.Fatalf("offer does not decode: %v", err)
	}
	return o
}

// startPaused sends a fresh offer whose work pauses: the agent leaves the
// task INPUT_REQUIRED and the hop "accepted".
func startPaused(t testing.TB, w *world, srv *server, c *a2aclient.Client) (handoff.Element, *a2a.Task) {
	t.Helper()
	dialog := "ctx-" + handoff.NewHop()
	el := signOffer(t, w, dialog)
	res := mustSend(t, c, offerMessage(t, "more", dialog, &handoff.Handoff{Offer: el}, handoff.JSON))
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateInputRequired {
		t.Fatalf("first message: %T %+v, want an INPUT_REQUIRED task", res, res)
	}
	return el, task
}

// unchanged asserts that a refused message left the task and the hop as
// they were and that the agent did not run again.
func unchanged(t testing.TB, srv *server, c *a2aclient.Client, task *a2a.Task, el handoff.Element, runs int32, state store.State) {
	t.Helper()
	ctx := context.Background()
	if n := srv.agent.runs.Load(); n != runs {
		t.Errorf("the agent ran %d times, want %d", n, runs)
	}
	if got := getTask(t, c, task.ID); got.Status.State != task.Status.State {
		t.Errorf("task is %s, want it left %s", got.Status.State, task.Status.State)
	}
	o := hopOf(t, el)
	rec, err := srv.st.Get(ctx, o.Iss, o.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != state {
		t.Errorf("hop is %s, want %s", rec.State, state)
	}
}

// A message without a Handoff into a task taken with one runs the agent
// under the hop's verified offer, so it is taken only from the offer's
// iss as the host authenticated it, and only while the hop is open
// (draft "Replay and Freshness": statuses go to the authenticated iss;
// "Lifecycle": a canceled or terminal hop does no more work; "Forks,
// Concurrency, and Equivocation": an equivocated hop's work stops).
func TestFollowUpOverA2A(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	iss := a2aClient(t, srv.url, "token-of-"+assistantID)
	anon := a2aClient(t, srv.url, "")
	coder := a2aClient(t, srv.url, "token-of-"+coderID)

	refused := []struct {
		name, rule string
		from       *a2aclient.Client
		before     func(t *testing.T, o *handoff.Offer)
		hopState   store.State
		inText     string
	}{
		{"from an unauthenticated sender", "Replay and Freshness", anon, nil, store.Accepted, "taken only from the offer's issuer"},
		{"from another authenticated agent", "Replay and Freshness", coder, nil, store.Accepted, "taken only from the offer's issuer"},
		{"after the hop was canceled", "Lifecycle", iss, func(t *testing.T, o *handoff.Offer) {
			if err := srv.st.MarkCanceled(ctx, o.Iss, o.Hop); err != nil {
				t.Fatal(err)
			}
		}, store.Accepted, "canceled"},
		{"after the hop was equivocated", "Forks, Concurrency, and Equivocation", iss, func(t *testing.T, o *handoff.Offer) {
			if err := srv.st.MarkEquivocated(ctx, o.Iss, o.Hop); err != nil {
				t.Fatal(err)
			}
		}, store.Accepted, "equivocated"},
		{"after the hop is terminal", "Lifecycle", iss, func(t *testing.T, o *handoff.Offer) {
			if _, err := srv.x.Delegate().Finish(ctx, o.Iss, o.Hop, delegate.Outcome{State: store.Completed}); err != nil {
				t.Fatal(err)
			}
		}, store.Completed, "is completed"},
	}
	for _, tc := range refused {
		t.Run("refused "+tc.name+" ("+tc.rule+")", func(t *testing.T) {
			el, task := startPaused(t, w, srv, iss)
			runs := srv.agent.runs.Load()
			if tc.before != nil {
				tc.before(t, hopOf(t, el))
			}
			res := mustSend(t, tc.from, inTask(task, "complete"))
			m, ok := res.(*a2a.Message)
			if !ok {
				t.Fatalf("reply %T %+v, want a standalone Message", res, res)
			}
			if !strings.Contains(textOf(m), tc.inText) {
				t.Errorf("reply %q does not say %q", textOf(m), tc.inText)
			}
			if sts, _ := a2ahandoff.Statuses(res); len(sts) != 0 {
				t.Errorf("%d statuses sent to a refused follow-up", len(sts))
			}
			unchanged(t, srv, iss, task, el, runs, tc.hopState)
		})
	}

	t.Run("from the offer's iss: the agent runs under the hop and the task completes (Lifecycle)", func(t *testing.T) {
		el, task := startPaused(t, w, srv, iss)
		runs := srv.agent.runs.Load()
		res := mustSend(t, iss, inTask(task, "complete"))
		got, ok := res.(*a2a.Task)
		if !ok || got.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("reply %T %+v, want a COMPLETED task", res, res)
		}
		if n := srv.agent.runs.Load(); n != runs+1 {
			t.Fatalf("the agent ran %d more times, want once", n-runs)
		}
		srv.agent.mu.Lock()
		h := srv.agent.got
		srv.agent.mu.Unlock()
		if h == nil || h.ID != hopOf(t, el).Hop {
			t.Fatalf("the follow-up ran under hop %+v", h)
		}
		sts, _ := a2ahandoff.Statuses(res)
		if st := statesOf(t, w, sts, el); !slices.Equal(st, []string{"accepted", "completed"}) {
			t.Fatalf("statuses %v, want accepted then completed", st)
		}
	})
}

// A refusal answers a message into an existing task with a standalone
// Message and never writes onto that task: a malformed Handoff (D3) or a
// rejected offer sent into someone's task leaves it and its hop as they
// were; an equivocating offer sent into the first offer's own task stops
// the first offer's work, which ends "failed" with reason equivocation
// when its outcome is known (draft "Forks, Concurrency, and
// Equivocation"), and stays accepted and flagged when it is not
// ("Knowing the Outcome").
func TestRefusalInExistingTask(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)

	t.Run("malformed Handoff from anyone (D3)", func(t *testing.T) {
		srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
		iss := a2aClient(t, srv.url, "token-of-"+assistantID)
		for _, from := range []*a2aclient.Client{a2aClient(t, srv.url, ""), iss} {
			el, task := startPaused(t, w, srv, iss)
			f := inTask(task, "complete")
			f.Metadata = map[string]any{a2ahandoff.Key: 42}
			res := mustSend(t, from, f)
			if m, ok := res.(*a2a.Message); !ok || !strings.Contains(textOf(m), "bad-signature") {
				t.Fatalf("reply %T %+v, want a Message saying bad-signature", res, res)
			}
			unchanged(t, srv, iss, task, el, srv.agent.runs.Load(), store.Accepted)
		}
	})

	t.Run("rejected offer (step 2): the signed rejected in a Message", func(t *testing.T) {
		srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
		iss := a2aClient(t, srv.url, "token-of-"+assistantID)
		el, task := startPaused(t, w, srv, iss)
		now := time.Now().Unix()
		o := handoff.Offer{Hop: handoff.NewHop(), Dialog: task.ContextID, Iss: assistantID, Aud: coderID, Iat: now, Exp: now + 120}
		el2 := w.sign(t, assistantID, o, handoff.FormJWS)
		res := mustSend(t, iss, carrying(t, inTask(task, "complete"), &handoff.Handoff{Offer: el2}, handoff.JSON))
		if _, ok := res.(*a2a.Message); !ok {
			t.Fatalf("reply %T %+v, want a Message", res, res)
		}
		sts, _ := a2ahandoff.Statuses(res)
		if len(sts) != 1 {
			t.Fatalf("%d statuses, want the signed rejected", len(sts))
		}
		if _, s, _ := handoff.UnsafeDecode(sts[0]); s == nil || s.Reason != handoff.ReasonWrongAudience {
			t.Fatalf("status %+v, want rejected/wrong-audience", s)
		}
		unchanged(t, srv, iss, task, el, srv.agent.runs.Load(), store.Accepted)
	})

	for _, known := range []bool{true, false} {
		name := "equivocating offer in the first offer's task, outcome known (NoEffectUnlessCompleted)"
		if !known {
			name = "equivocating offer in the first offer's task, outcome unknown"
		}
		t.Run(name, func(t *testing.T) {
			srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = known })
			iss := a2aClient(t, srv.url, "token-of-"+assistantID)
			el, task := startPaused(t, w, srv, iss)
			runs := srv.agent.runs.Load()
			el2, o := w.reoffer(t, el, handoff.FormJWS)
			mustSend(t, iss, carrying(t, inTask(task, "complete"), &handoff.Handoff{Offer: el2}, handoff.JSON))
			if n := srv.agent.runs.Load(); n != runs {
				t.Fatalf("the agent ran %d more times", n-runs)
			}
			got := getTask(t, iss, task.ID)
			if got.Status.State != a2a.TaskStateFailed {
				t.Fatalf("first task is %s, want FAILED: its work was stopped", got.Status.State)
			}
			sts, _ := a2ahandoff.Statuses(got)
			rec, err := srv.st.Get(ctx, o.Iss, o.Hop)
			if err != nil {
				t.Fatal(err)
			}
			flags, err := srv.x.Delegate().Flags(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			if !hasFlag(t, flags, store.FlagEquivocation, o.Hop) {
				t.Error("equivocation not flagged")
			}
			if known {
				if st := statesOf(t, w, sts, el); !slices.Equal(st, []string{"accepted", "failed/equivocation"}) {
					t.Fatalf("first offer's statuses %v, want accepted then failed/equivocation", st)
				}
				if rec.State != store.Failed {
					t.Fatalf("hop is %s, want failed", rec.State)
				}
				return
			}
			if st := statesOf(t, w, sts, el); !slices.Equal(st, []string{"accepted"}) {
				t.Fatalf("first offer's statuses %v: no failed while the effect is unknown", st)
			}
			if rec.State != store.Accepted || !hasFlag(t, flags, store.FlagUnknownOutcome, o.Hop) {
				t.Fatalf("hop is %s (unknown-outcome flagged: %v), want accepted and flagged", rec.State, hasFlag(t, flags, store.FlagUnknownOutcome, o.Hop))
			}
		})
	}
}
