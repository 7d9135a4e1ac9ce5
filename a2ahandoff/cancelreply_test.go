package a2ahandoff_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// A hop whose first reply was lost can still be polled and canceled
// (draft "Asking Again", "Lifecycle"): the answer from the record to the
// retransmission names the hop's A2A task (Message.TaskID), the client
// learns it there, and the signed "canceled" reaches the running task,
// which ends CANCELED, the delegate verifies and records the cancel, and
// the agent's work stops. For a JSON and a CBOR Handoff.
func TestCancelAfterLostReply(t *testing.T) {
	for _, f := range formats[:2] {
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), f.form, nil)
			tr := store.NewMemory(time.Now())
			armed := &atomic.Bool{}
			armed.Store(true)
			ac := a2aClient(t, srv.url, "token-of-"+assistantID)
			ac.AddCallInterceptor(dropFirstReply{armed: armed})
			c, err := a2ahandoff.NewClient(ac, w.delegator(t, assistantID, tr, f.form), a2ahandoff.ClientOptions{Encoding: f.enc})
			if err != nil {
				t.Fatal(err)
			}

			r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "lost then canceled"}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
			if err == nil || r == nil || r.Hop == "" {
				t.Fatalf("the reply was not lost: %v %v", r, err)
			}
			<-srv.agent.started // the delegate took the work; its reply was lost
			if _, known := c.TaskID(r.Hop); known {
				t.Fatal("a task id known before any reply arrived")
			}
			if _, err := c.Poll(ctx, r.Hop); err == nil || !strings.Contains(err.Error(), "no A2A task is known") {
				t.Fatalf("Poll before asking again: %v, want no task known", err)
			}

			a, err := c.Ask(ctx, r.Hop)
			if err != nil {
				t.Fatal(err)
			}
			noRefusals(t, a)
			m, ok := a.Result.(*a2a.Message)
			if !ok || m.TaskID == "" {
				t.Fatalf("the answer to the retransmission is %T %+v, want a Message naming the hop's task", a.Result, a.Result)
			}
			offer := offerOf(t, tr, r.Hop)
			if got := statesOf(t, w, a.Statuses, offer); !slices.Equal(got, []string{"accepted"}) {
				t.Fatalf("answered with %v, want accepted", got)
			}
			if task, known := c.TaskID(r.Hop); !known || task != m.TaskID {
				t.Fatalf("client's task for the hop %q (%v), want %q", task, known, m.TaskID)
			}

			p, err := c.Poll(ctx, r.Hop)
			if err != nil {
				t.Fatalf("Poll after asking again: %v", err)
			}
			noRefusals(t, p)
			if p.Task == nil || p.Task.ID != m.TaskID || p.State() != a2a.TaskStateWorking {
				t.Fatalf("polled %+v, want task %s working", p.Result, m.TaskID)
			}
			// The answer was not added to the task: its history holds only
			// the user's first message and the agent's status messages.
			for _, hm := range p.Task.History {
				if strings.Contains(textOf(hm), "answered from the record") {
					t.Fatal("the answer to the retransmission went into the task's history")
				}
			}

			cr, err := c.Cancel(ctx, r.Hop)
			if err != nil {
				t.Fatalf("cancel after a lost reply: %v", err)
			}
			noRefusals(t, cr)
			if cr.State() != a2a.TaskStateCanceled || cr.Task.ID != m.TaskID {
				t.Fatalf("cancel reply: task %v %s, want %s canceled", cr.Task, cr.State(), m.TaskID)
			}
			if cause := <-srv.agent.stopped; cause == nil {
				t.Fatal("the agent's work was not stopped")
			}
			rec, err := srv.st.Get(ctx, assistantID, r.Hop)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.Canceled { // set only for a "canceled" that verified (D9)
				t.Fatal("the delegate did not record the verified cancel")
			}
			if iss, err := tr.IssuedHop(ctx, r.Hop); err != nil || iss.View != store.ViewCanceled || iss.Resolved {
				t.Fatalf("tracker: %+v %v, want canceled and unresolved", iss, err)
			}
			if p := waitState(t, c, r.Hop, a2a.TaskStateCanceled); p.Task.ID != m.TaskID {
				t.Fatalf("polled task %s, want %s", p.Task.ID, m.TaskID)
			}
			if n := srv.agent.runs.Load(); n != 1 {
				t.Fatalf("the agent ran %d times, want once", n)
			}
		})
	}
}

// The Cancel Task request is answered without waiting for OnCancel (the
// cancel passed down the chain): the hop's cancel is recorded and
// CANCELED written first, OnCancel runs detached, with the request's
// values, and within ServerConfig.OnCancelTimeout (draft "Lifecycle":
// the delegate passes "canceled" down; how long the upstream request
// waits is the host's, and it does not wait on the hops below).
func TestOnCancelDoesNotDelayCancelReply(t *testing.T) {
	type call struct {
		user string // the CallContext's user, as OnCancel saw it
		err  error  // ctx.Err() when OnCancel returned
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		release bool // the test releases OnCancel; else it waits for its ctx
		want    error
	}{
		{"OnCancel blocks until released", 30 * time.Second, true, nil},
		{"OnCancel blocks until its timeout", 50 * time.Millisecond, false, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			entered, release, done := make(chan struct{}, 1), make(chan struct{}), make(chan call, 1)
			srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) {
				c.OnCancelTimeout = tc.timeout
				c.OnCancel = func(ctx context.Context, iss, hop string, offer handoff.Digest) {
					entered <- struct{}{}
					select {
					case <-release:
					case <-ctx.Done():
					}
					var cl call
					if cc, ok := a2asrv.CallContextFrom(ctx); ok && cc.User != nil {
						cl.user = cc.User.Name()
					}
					cl.err = ctx.Err()
					done <- cl
				}
			})
			c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), handoff.JSON)
			r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "slow chain"}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
			if err != nil {
				t.Fatal(err)
			}
			<-srv.agent.started

			type answer struct {
				r   *a2ahandoff.Reply
				err error
			}
			replied := make(chan answer, 1)
			go func() {
				cr, err := c.Cancel(ctx, r.Hop)
				replied <- answer{cr, err}
			}()
			var got answer
			if tc.release {
				// OnCancel cannot end before release is closed, or its
				// 30 s timeout: a Cancel Task reply that waited for it
				// would come after done.
				select {
				case got = <-replied:
				case cl := <-done:
					t.Fatalf("OnCancel ended (%v) before the Cancel Task request was answered", cl.err)
				}
			} else {
				got = <-replied
			}
			if got.err != nil || got.r.State() != a2a.TaskStateCanceled {
				t.Fatalf("cancel: %v, task %s; want canceled", got.err, got.r.State())
			}
			<-entered // OnCancel runs, and is still blocked (release not closed)
			rec, err := srv.st.Get(ctx, assistantID, r.Hop)
			if err != nil || !rec.Canceled {
				t.Fatalf("the cancel is not recorded once OnCancel started: %v", err)
			}
			if tc.release {
				select {
				case cl := <-done:
					t.Fatalf("OnCancel returned (%v) before it was released", cl.err)
				default:
				}
				close(release)
			}
			cl := <-done
			if !errors.Is(cl.err, tc.want) && cl.err != tc.want {
				t.Fatalf("OnCancel's ctx ended with %v, want %v", cl.err, tc.want)
			}
			if cl.user != assistantID {
				t.Fatalf("OnCancel's ctx has user %q, want the request's %q", cl.user, assistantID)
			}
			<-srv.agent.stopped
		})
	}
}

// A chain longer than the delegate's limit (Limits.MaxChain) is rejected
// at step 6 with reason too-deep (draft "Checking a Chain", check 7;
// "Receiving an Offer" step 6): the task ends REJECTED with the signed
// "rejected", recorded for the hop, and the agent does not run. A chain
// at the limit is accepted.
func TestTooDeepChainOverA2A(t *testing.T) {
	for _, f := range formats[:2] {
		t.Run(f.name, func(t *testing.T) {
			w := newWorld(t)
			addAgent(t, w, reviewerID)
			limit := func(n int) func(*a2ahandoff.ServerConfig) {
				return func(c *a2ahandoff.ServerConfig) { c.Delegate.Options.Limits = handoff.Limits{MaxChain: n} }
			}
			now := time.Now().Unix()
			sign := func(by string, o handoff.Offer) handoff.Element { t.Helper(); return w.sign(t, by, o, f.form) }
			// assistant -> reviewer -> planner -> coder: a chain of 2.
			c0 := sign(assistantID, elem(assistantID, reviewerID, now-30, nil))
			c1 := sign(reviewerID, elem(reviewerID, plannerID, now-20, digest(c0)))

			for _, tc := range []struct {
				name   string
				max    int
				reason handoff.Reason // "" : accepted
			}{
				{"chain of 2, limit 1: too-deep", 1, handoff.ReasonTooDeep},
				{"chain of 2, limit 2: accepted", 2, ""},
			} {
				t.Run(tc.name, func(t *testing.T) {
					srv := w.serve(t, coderID, memStore(), f.form, limit(tc.max))
					o := elem(plannerID, coderID, now-10, digest(c1))
					o.Dialog = "ctx-" + handoff.NewHop()
					el := sign(plannerID, o)
					m := offerMessage(t, "complete", o.Dialog, &handoff.Handoff{Offer: el, Chain: []handoff.Element{c0, c1}}, f.enc)
					task, sts := sendForTask(t, a2aClient(t, srv.url, "token-of-"+plannerID), m)
					rec := recorded(t, srv, plannerID, o.Hop)
					if tc.reason == "" {
						if task.Status.State != a2a.TaskStateCompleted || srv.agent.runs.Load() != 1 {
							t.Fatalf("task %s, agent ran %d times; want completed, once", task.Status.State, srv.agent.runs.Load())
						}
						return
					}
					if task.Status.State != a2a.TaskStateRejected {
						t.Fatalf("task %s, want rejected", task.Status.State)
					}
					if !strings.Contains(textOf(task.Status.Message), string(tc.reason)) {
						t.Errorf("status message %q does not say %s", textOf(task.Status.Message), tc.reason)
					}
					if n := srv.agent.runs.Load(); n != 0 {
						t.Fatalf("the agent ran %d times on a too-deep chain", n)
					}
					if len(sts) != 1 {
						t.Fatalf("%d statuses, want the signed rejected", len(sts))
					}
					s := w.verified(t, sts[0], el)
					if s.State != handoff.StateRejected || s.Reason != tc.reason || s.Iss != coderID || s.Aud != plannerID {
						t.Fatalf("status %s/%s from %s to %s, want rejected/%s from %s to %s", s.State, s.Reason, s.Iss, s.Aud, tc.reason, coderID, plannerID)
					}
					if rec.State != store.Rejected || !bytes.Equal(rec.Status, sts[0].Octets) {
						t.Fatalf("record %s, want rejected with the status sent", rec.State)
					}
				})
			}
		})
	}
}

// seenRequests records, for each JSON-RPC request that reaches the
// server, its method and the X-A2A-Extensions header values as they came
// over HTTP.
type seenRequests struct {
	next http.Handler
	mu   sync.Mutex
	got  map[string][][]string // method -> header values, per request
}

func (s *seenRequests) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &req) == nil {
		s.mu.Lock()
		s.got[req.Method] = append(s.got[req.Method], r.Header.Values("X-A2A-Extensions"))
		s.mu.Unlock()
	}
	s.next.ServeHTTP(w, r)
}

// The Cancel Task request carrying the signed "canceled" lists the
// extension URI in the A2A-Extensions service parameter: the HTTP header
// X-A2A-Extensions (draft "Carrying the Element", A2A), as the message
// carrying the offer does.
func TestCancelRequestListsExtension(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	agent := newAgent()
	x, err := a2ahandoff.NewExecutor(ctx, agent, a2ahandoff.ServerConfig{
		Delegate: delegate.Config{Options: handoff.Options{Me: plannerID, Keys: w.keys}, Store: memStore(), Signer: w.signers[plannerID]},
		Sender:   a2ahandoff.UserName,
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := &seenRequests{next: a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(a2ahandoff.NewHandler(x, a2asrv.WithCallInterceptor(bearerAuth{tokens: w.tokens})))), got: map[string][][]string{}}
	srv := httptest.NewServer(seen)
	t.Cleanup(srv.Close)
	c := w.client(t, srv.URL, assistantID, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), handoff.JSON)
	r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "to cancel"}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
	if err != nil {
		t.Fatal(err)
	}
	<-agent.started
	cr, err := c.Cancel(ctx, r.Hop)
	if err != nil || cr.State() != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %v, want canceled", err)
	}
	<-agent.stopped
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for _, method := range []string{"message/send", "tasks/cancel"} {
		reqs := seen.got[method]
		if len(reqs) != 1 {
			t.Fatalf("%d %s requests, want one", len(reqs), method)
		}
		var listed []string
		for _, v := range reqs[0] {
			for _, u := range strings.Split(v, ",") {
				listed = append(listed, strings.TrimSpace(u))
			}
		}
		if !slices.Contains(listed, a2ahandoff.URI) {
			t.Errorf("%s request: X-A2A-Extensions %q does not list %s", method, reqs[0], a2ahandoff.URI)
		}
	}
}

// dropFirstRequest loses the first message before it leaves (the delegate
// never gets it).
type dropFirstRequest struct {
	a2aclient.PassthroughInterceptor
	armed *atomic.Bool
}

func (d dropFirstRequest) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	if req.Method == "SendMessage" && d.armed.CompareAndSwap(true, false) {
		return ctx, errors.New("simulated: the request was lost")
	}
	return ctx, nil
}

// Asking again about a hop whose first message never arrived delivers it
// (draft "Asking Again": a delegate that never got the offer processes it
// as new) with the send configuration of the first: a non-blocking send
// is asked again non-blocking, so Ask returns with the WORKING task (not
// when the work ends), and the hop can be canceled.
func TestAskKeepsSendConfiguration(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	armed := &atomic.Bool{}
	armed.Store(true)
	ac := a2aClient(t, srv.url, "token-of-"+assistantID)
	ac.AddCallInterceptor(dropFirstRequest{armed: armed})
	c, err := a2ahandoff.NewClient(ac, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), a2ahandoff.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "never arrived"}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
	if err == nil || r == nil || r.Hop == "" {
		t.Fatalf("the request was not lost: %v %v", r, err)
	}
	if n := srv.agent.runs.Load(); n != 0 {
		t.Fatalf("the agent ran %d times on a lost request", n)
	}
	// A blocking Ask would wait for the work, which waits for the test:
	// the guard only turns that hang into a failure.
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a, err := c.Ask(actx, r.Hop)
	if err != nil {
		t.Fatalf("asking again (blocking instead of the first send's non-blocking?): %v", err)
	}
	noRefusals(t, a)
	if a.State() != a2a.TaskStateWorking {
		t.Fatalf("asked again: %T %s, want the WORKING task", a.Result, a.State())
	}
	<-srv.agent.started
	cr, err := c.Cancel(ctx, r.Hop)
	if err != nil || cr.State() != a2a.TaskStateCanceled {
		t.Fatalf("cancel: %v, want canceled", err)
	}
	<-srv.agent.stopped
}
