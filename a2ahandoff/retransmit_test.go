package a2ahandoff_test

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/store"
)

// transports: the two A2A methods that carry a message.
var transports = []struct {
	name   string
	stream bool
}{{"message/send", false}, {"message/stream", true}}

// reply sends m with the SDK's client over message/send or message/stream
// and returns what came back: the result, or every streamed event.
func reply(t testing.TB, c *a2aclient.Client, m *a2a.Message, stream bool) ([]a2a.Event, error) {
	t.Helper()
	ctx := context.Background()
	if !stream {
		res, err := c.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
		if err != nil {
			return nil, err
		}
		return []a2a.Event{res}, nil
	}
	var evs []a2a.Event
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: m}) {
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// oneMessage sends m and asserts that the reply is exactly one standalone
// agent Message (the Executor's reply to a retransmission or a refusal in
// an existing task) naming task in its TaskID (the hop's task, in the
// answer to a retransmission from the offer's authenticated iss; else
// none), which it returns.
func oneMessage(t testing.TB, c *a2aclient.Client, m *a2a.Message, stream bool, task a2a.TaskID) *a2a.Message {
	t.Helper()
	evs, err := reply(t, c, m, stream)
	if err != nil {
		t.Fatalf("refused by the server: %v", err)
	}
	if len(evs) != 1 {
		t.Fatalf("%d events (%v), want one Message", len(evs), evs)
	}
	m, ok := evs[0].(*a2a.Message)
	if !ok {
		t.Fatalf("reply is a %T, want a standalone Message", evs[0])
	}
	if m.Role != a2a.MessageRoleAgent || m.TaskID != task {
		t.Fatalf("reply message role %q task %q, want an agent message naming task %q", m.Role, m.TaskID, task)
	}
	return m
}

// firstSend sends a fresh offer from the assistant in a new task (blocking
// unless block is false) and returns the offer, the message as sent, and
// the task.
func firstSend(t testing.TB, w *world, c *a2aclient.Client, enc handoff.Encoding, form handoff.Form, text string, blocking bool) (handoff.Element, *a2a.Message, *a2a.Task) {
	t.Helper()
	dialog := "ctx-" + handoff.NewHop()
	now := time.Now().Unix()
	el := w.sign(t, assistantID, handoff.Offer{Hop: handoff.NewHop(), Dialog: dialog, Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 120}, form)
	m := offerMessage(t, text, dialog, &handoff.Handoff{Offer: el}, enc)
	res, err := c.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m, Config: &a2a.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("first reply is a %T, want a task", res)
	}
	return el, m, task
}

// intoTask is the same message (same id, same Handoff octets) re-sent
// into the task it created, as a client does after a lost reply.
func intoTask(m *a2a.Message, task *a2a.Task) *a2a.Message {
	again := *m
	again.TaskID, again.ContextID = task.ID, task.ContextID
	return &again
}

// newMessageIntoTask is a new message (a new id) with m's text, sent into
// task, carrying the offer el in place of m's Handoff.
func newMessageIntoTask(t testing.TB, m *a2a.Message, task *a2a.Task, el handoff.Element, enc handoff.Encoding) *a2a.Message {
	t.Helper()
	m2 := intoTask(m, task)
	m2.ID = a2a.NewMessageID()
	m2.Metadata = nil
	return carrying(t, m2, &handoff.Handoff{Offer: el}, enc)
}

// lastStatus is the last signed status a task carries.
func lastStatus(t testing.TB, task *a2a.Task) handoff.Element {
	t.Helper()
	sts, errs := a2ahandoff.Statuses(task)
	if len(errs) > 0 || len(sts) == 0 {
		t.Fatalf("task %s carries no status (%v)", task.ID, errs)
	}
	return sts[len(sts)-1]
}

func getTask(t testing.TB, c *a2aclient.Client, id a2a.TaskID) *a2a.Task {
	t.Helper()
	got, err := c.GetTask(context.Background(), &a2a.TaskQueryParams{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A retransmission carrying the original A2A taskId (the same message
// re-sent into the task it created) is answered from the record by
// NewHandler, before a2a-go refuses a message into a terminal or running
// task (draft "Asking Again": not processed again, the last status resent
// as the identical octets; "accepted" while the work runs; "Replay and
// Freshness": resent only to a sender authenticated as offer.iss). The
// agent runs once; the task is left as it was.
func TestRetransmissionIntoOwnTask(t *testing.T) {
	for _, f := range formats[:2] { // a JSON Handoff (JWS) and a CBOR one (COSE)
		for _, tp := range transports {
			t.Run(f.name+"/"+tp.name, func(t *testing.T) {
				w := newWorld(t)
				srv := w.serve(t, plannerID, memStore(), f.form, nil)
				iss := a2aClient(t, srv.url, "token-of-"+assistantID)
				anon := a2aClient(t, srv.url, "")
				other := a2aClient(t, srv.url, "token-of-"+coderID)

				cases := []struct {
					name, rule string
					text       string // what the agent does
					state      a2a.TaskState
					want       string // the last status: state/reason
				}{
					{"after completion", "Asking Again", "complete", a2a.TaskStateCompleted, "completed"},
					{"after a reported failure", "Asking Again", "fail-reported", a2a.TaskStateFailed, "failed/policy"},
					{"after a failure of unknown outcome (hop still accepted)", "Asking Again, Knowing the Outcome", "fail", a2a.TaskStateFailed, "accepted"},
					{"while paused (INPUT_REQUIRED): accepted", "Asking Again", "more", a2a.TaskStateInputRequired, "accepted"},
					{"after a rejection at step 5 (recorded)", "Asking Again, Receiving an Offer step 5", "", a2a.TaskStateRejected, "rejected/policy"},
				}
				for _, tc := range cases {
					t.Run(tc.name+" ("+tc.rule+")", func(t *testing.T) {
						var (
							el   handoff.Element
							m    *a2a.Message
							task *a2a.Task
						)
						if tc.text == "" {
							// Step 5: the offer names another dialog than
							// the message's contextId; rejected and recorded.
							now := time.Now().Unix()
							el = w.sign(t, assistantID, handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-elsewhere", Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 120}, f.form)
							m = offerMessage(t, "complete", "ctx-"+handoff.NewHop(), &handoff.Handoff{Offer: el}, f.enc)
							task = mustSend(t, iss, m).(*a2a.Task)
						} else {
							el, m, task = firstSend(t, w, iss, f.enc, f.form, tc.text, true)
						}
						if task.Status.State != tc.state {
							t.Fatalf("first: task %s, want %s", task.Status.State, tc.state)
						}
						last := lastStatus(t, task)
						if got := statesOf(t, w, []handoff.Element{last}, el); !slices.Equal(got, []string{tc.want}) {
							t.Fatalf("first: last status %v, want %s", got, tc.want)
						}
						runs := srv.agent.runs.Load()

						ans := oneMessage(t, iss, intoTask(m, task), tp.stream, task.ID)
						sts, errs := a2ahandoff.Statuses(ans)
						if len(errs) > 0 || len(sts) != 1 || !bytes.Equal(sts[0].Octets, last.Octets) {
							t.Fatalf("answered with %d statuses (%v), want the identical octets of the last status sent", len(sts), errs)
						}
						if !strings.Contains(textOf(ans), "answered from the record") {
							t.Errorf("reply %q does not say it came from the record", textOf(ans))
						}

						// Replay and Freshness: no resend to a sender not
						// authenticated as the offer's iss.
						for _, c := range []*a2aclient.Client{anon, other} {
							ans := oneMessage(t, c, intoTask(m, task), tp.stream, "")
							if sts, _ := a2ahandoff.Statuses(ans); len(sts) != 0 {
								t.Fatalf("%d statuses resent to a sender not authenticated as iss", len(sts))
							}
							if !strings.Contains(textOf(ans), "no status resent") {
								t.Errorf("reply %q does not say that no status was resent", textOf(ans))
							}
						}
						if n := srv.agent.runs.Load(); n != runs {
							t.Fatalf("the agent ran %d more times", n-runs)
						}
						if got := getTask(t, iss, task.ID); got.Status.State != tc.state || len(got.History) != len(task.History) {
							t.Fatalf("task now %s with %d messages, want it left %s with %d", got.Status.State, len(got.History), tc.state, len(task.History))
						}
					})
				}

				t.Run("while the work runs: accepted (Asking Again)", func(t *testing.T) {
					el, m, task := firstSend(t, w, iss, f.enc, f.form, "block", false)
					<-srv.agent.started
					runs := srv.agent.runs.Load()
					accepted := lastStatus(t, task)
					ans := oneMessage(t, iss, intoTask(m, task), tp.stream, task.ID)
					sts, _ := a2ahandoff.Statuses(ans)
					if len(sts) != 1 || !bytes.Equal(sts[0].Octets, accepted.Octets) {
						t.Fatalf("answered with %d statuses, want the identical octets of accepted", len(sts))
					}
					if got := statesOf(t, w, sts, el); !slices.Equal(got, []string{"accepted"}) {
						t.Fatalf("status %v, want accepted", got)
					}
					ans = oneMessage(t, anon, intoTask(m, task), tp.stream, "")
					if sts, _ := a2ahandoff.Statuses(ans); len(sts) != 0 {
						t.Fatal("accepted resent to an unauthenticated sender")
					}
					if got := getTask(t, iss, task.ID); got.Status.State != a2a.TaskStateWorking {
						t.Fatalf("task %s, want still working", got.Status.State)
					}
					srv.agent.release <- struct{}{}
					done := waitTask(t, iss, task.ID, a2a.TaskStateCompleted, "task")
					if n := srv.agent.runs.Load(); n != runs {
						t.Fatalf("the agent ran %d more times", n-runs)
					}
					// Asked again once done: the completed status now.
					ans = oneMessage(t, iss, intoTask(m, task), tp.stream, task.ID)
					sts, _ = a2ahandoff.Statuses(ans)
					if len(sts) != 1 || !bytes.Equal(sts[0].Octets, lastStatus(t, done).Octets) {
						t.Fatal("after completion, not answered with the identical octets of completed")
					}
				})

				// Forks, Concurrency, and Equivocation: another offer for
				// the same (iss, hop), sent into the first offer's task,
				// gets no status, runs nothing, is flagged; the first
				// keeps its record.
				t.Run("another offer for the same hop, original taskId, after completion: equivocation", func(t *testing.T) {
					el, m, task := firstSend(t, w, iss, f.enc, f.form, "complete", true)
					runs := srv.agent.runs.Load()
					el2, o := w.reoffer(t, el, f.form)
					ans := oneMessage(t, iss, newMessageIntoTask(t, m, task, el2, f.enc), tp.stream, "")
					if sts, _ := a2ahandoff.Statuses(ans); len(sts) != 0 {
						t.Fatalf("%d statuses for an equivocating offer, want none", len(sts))
					}
					if !strings.Contains(textOf(ans), "equivocation") {
						t.Errorf("reply %q does not say equivocation", textOf(ans))
					}
					if n := srv.agent.runs.Load(); n != runs {
						t.Fatalf("the agent ran %d more times", n-runs)
					}
					rec, err := srv.st.Get(context.Background(), o.Iss, o.Hop)
					if err != nil {
						t.Fatal(err)
					}
					if rec.State != store.Completed || !rec.Digest.Equal(el.Digest()) || !rec.Equivocated {
						t.Fatalf("record %s equivocated=%v, want the first offer's, completed, marked equivocated", rec.State, rec.Equivocated)
					}
					flags, _ := srv.x.Delegate().Flags(context.Background(), false)
					if !hasFlag(t, flags, store.FlagEquivocation, o.Hop) {
						t.Fatal("equivocation not flagged")
					}
					if got := getTask(t, iss, task.ID); got.Status.State != a2a.TaskStateCompleted {
						t.Fatalf("first task %s, want still completed", got.Status.State)
					}
					// The first offer, asked again, still gets its status.
					ans = oneMessage(t, iss, intoTask(m, task), tp.stream, task.ID)
					if sts, _ := a2ahandoff.Statuses(ans); len(sts) != 1 || !bytes.Equal(sts[0].Octets, lastStatus(t, task).Octets) {
						t.Fatal("the first offer's retransmission lost its status after the equivocation")
					}
				})
			})
		}
	}
}

// An equivocating offer sent into the first offer's running task (a2a-go
// refuses it: an execution is in progress) still stops the first offer's
// work (draft "Forks, Concurrency, and Equivocation": stop the work if it
// can; once the outcome is known, "failed" with reason equivocation).
func TestEquivocationIntoRunningTask(t *testing.T) {
	for _, f := range formats[:2] {
		t.Run(f.name, func(t *testing.T) {
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), f.form, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = true })
			iss := a2aClient(t, srv.url, "token-of-"+assistantID)
			el, m, task := firstSend(t, w, iss, f.enc, f.form, "block", false)
			<-srv.agent.started
			el2, _ := w.reoffer(t, el, f.form)
			ans := oneMessage(t, iss, newMessageIntoTask(t, m, task, el2, f.enc), false, "")
			if sts, _ := a2ahandoff.Statuses(ans); len(sts) != 0 {
				t.Fatal("a status for the equivocating offer")
			}
			if cause := <-srv.agent.stopped; cause == nil {
				t.Fatal("the first offer's work was not stopped")
			}
			got := waitTask(t, iss, task.ID, a2a.TaskStateFailed, "first task")
			sts, _ := a2ahandoff.Statuses(got)
			if st := statesOf(t, w, sts, el); !slices.Equal(st, []string{"accepted", "failed/equivocation"}) {
				t.Fatalf("first offer's statuses %v, want accepted then failed/equivocation", st)
			}
			if n := srv.agent.runs.Load(); n != 1 {
				t.Fatalf("the agent ran %d times", n)
			}
		})
	}
}

// Without NewHandler (a2asrv.NewHandler around the Executor), a2a-go
// refuses the retransmission into the hop's own terminal task before the
// Executor runs: the SDK fact NewHandler exists for. A retransmission in
// a new message (no taskId) reaches the Executor, which answers it from
// the record in the same shape.
func TestPlainHandlerRefusesRetransmissionIntoOwnTask(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	x, err := a2ahandoff.NewExecutor(ctx, newAgent(), a2ahandoff.ServerConfig{
		Delegate: delegate.Config{Options: handoff.Options{Me: plannerID, Keys: w.keys}, Store: memStore(), Signer: w.signers[plannerID]},
		Sender:   a2ahandoff.UserName,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(x, a2asrv.WithCallInterceptor(bearerAuth{tokens: w.tokens})))))
	t.Cleanup(srv.Close)
	iss := a2aClient(t, srv.URL, "token-of-"+assistantID)
	_, m, task := firstSend(t, w, iss, handoff.JSON, handoff.FormJWS, "complete", true)
	if _, err := reply(t, iss, intoTask(m, task), false); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("a2a-go answered %v, want invalid params (terminal task)", err)
	}
	fresh := *m
	fresh.ID = a2a.NewMessageID()
	ans := oneMessage(t, iss, &fresh, false, task.ID)
	if sts, _ := a2ahandoff.Statuses(ans); len(sts) != 1 || !bytes.Equal(sts[0].Octets, lastStatus(t, task).Octets) {
		t.Fatal("the Executor did not answer the retransmission in a new message from the record")
	}
}
