package a2ahandoff_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// passingAgent is the planner's code: it passes the work it received on
// to the coder over A2A (a new offer whose prev names the received one,
// with the chain), then waits.
type passingAgent struct {
	c     *a2ahandoff.Client
	sent  chan *a2ahandoff.Reply
	errs  chan error
	ended chan error
}

func (p *passingAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	got := a2ahandoff.HopFrom(ctx)
	if got == nil {
		return errors.New("no hop in the context")
	}
	r, err := p.c.Offer(ctx, delegator.Offer{Aud: coderID, Work: "code for " + got.ID, From: got.Handoff, Dialog: got.Offer.Dialog},
		say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
	if err != nil {
		p.errs <- err
		return err
	}
	p.sent <- r
	<-ctx.Done()
	p.ended <- context.Cause(ctx)
	return ctx.Err()
}

func (p *passingAgent) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	return nil
}

// The chain grows hop by hop over A2A and is verified at each hop
// (draft "Checking a Chain": the coder sees a full chain), and a
// "canceled" from the assistant follows the hops down (draft "Lifecycle":
// a delegate that receives a valid "canceled" sends "canceled" for each
// offer it issued whose prev is that offer).
func TestChainAndCancelDownOverA2A(t *testing.T) {
	for _, f := range formats[:2] {
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			coder := w.serve(t, coderID, memStore(), f.form, nil)

			// The planner: a delegate for the assistant, a delegator for the coder.
			plannerTr := store.NewMemory(time.Now())
			plannerDl := w.delegator(t, plannerID, plannerTr, f.form)
			toCoder := w.client(t, coder.url, plannerID, plannerDl, f.enc)
			agent := &passingAgent{c: toCoder, sent: make(chan *a2ahandoff.Reply, 1), errs: make(chan error, 1), ended: make(chan error, 1)}
			downs := make(chan []error, 1)
			plannerSt := memStore()
			x, err := a2ahandoff.NewExecutor(ctx, agent, a2ahandoff.ServerConfig{
				Delegate: delegate.Config{Options: handoff.Options{Me: plannerID, Keys: w.keys}, Store: plannerSt, Signer: w.signers[plannerID], StatusForm: f.form},
				Sender:   a2ahandoff.UserName,
				OnCancel: func(ctx context.Context, iss, hop string, offer handoff.Digest) {
					var errs []error
					ds, err := plannerDl.CancelDown(ctx, offer)
					errs = append(errs, err)
					for _, d := range ds {
						_, err := toCoder.SendCancel(ctx, d.Hop.Hop, d.Cancel)
						errs = append(errs, err)
					}
					downs <- errs
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(a2ahandoff.NewHandler(x, a2asrv.WithCallInterceptor(bearerAuth{tokens: w.tokens})))))
			t.Cleanup(srv.Close)

			assistantTr := store.NewMemory(time.Now())
			c := w.client(t, srv.URL, assistantID, w.delegator(t, assistantID, assistantTr, f.form), f.enc)
			r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "release"}, say("plan"), &a2a.MessageSendConfig{Blocking: new(false)})
			if err != nil {
				t.Fatal(err)
			}
			noRefusals(t, r)
			var down *a2ahandoff.Reply
			select {
			case down = <-agent.sent:
			case err := <-agent.errs:
				t.Fatal(err)
			}
			noRefusals(t, down)
			<-coder.agent.started
			if down.State() != a2a.TaskStateWorking || down.Issued.View != store.ViewAccepted {
				t.Fatalf("planner -> coder: task %s, hop %v", down.State(), down.Issued)
			}
			coder.agent.mu.Lock()
			got := coder.agent.got
			coder.agent.mu.Unlock()
			if got == nil || got.Result.ChainQuality != handoff.ChainFull || len(got.Handoff.Chain) != 1 || !got.Handoff.Chain[0].Digest().Equal(offerOf(t, assistantTr, r.Hop).Digest()) {
				t.Fatalf("the coder did not see the verified chain back to the assistant: %+v", got)
			}

			cr, err := c.Cancel(ctx, r.Hop)
			if err != nil {
				t.Fatal(err)
			}
			noRefusals(t, cr)
			if cr.State() != a2a.TaskStateCanceled {
				t.Fatalf("planner's task %s, want canceled", cr.State())
			}
			for _, err := range <-downs {
				if err != nil {
					t.Fatalf("canceling down: %v", err)
				}
			}
			if cause := <-coder.agent.stopped; cause == nil {
				t.Fatal("the coder's work was not stopped")
			}
			if cause := <-agent.ended; cause == nil {
				t.Fatal("the planner's work was not stopped")
			}
			rec, err := coder.st.Get(ctx, plannerID, down.Hop)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.Canceled {
				t.Fatal("the coder's hop was not canceled")
			}
			coderTask, _ := toCoder.TaskID(down.Hop)
			ct, err := a2aClient(t, coder.url, "token-of-"+plannerID).GetTask(ctx, &a2a.TaskQueryParams{ID: coderTask})
			if err != nil {
				t.Fatal(err)
			}
			if ct.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("coder's task %s, want canceled", ct.Status.State)
			}
			iss, err := plannerTr.IssuedHop(ctx, down.Hop)
			if err != nil {
				t.Fatal(err)
			}
			if iss.View != store.ViewCanceled || iss.Resolved {
				t.Fatalf("planner's tracker for the coder hop: %s resolved=%v", iss.View, iss.Resolved)
			}
		})
	}
}

// dropFirstReply loses the first reply to a message (the network
// dropped it after the delegate answered).
type dropFirstReply struct {
	a2aclient.PassthroughInterceptor
	armed *atomic.Bool
}

func (d dropFirstReply) After(ctx context.Context, resp *a2aclient.Response) error {
	if resp.Method == "SendMessage" && d.armed.CompareAndSwap(true, false) {
		resp.Payload, resp.Err = nil, errors.New("simulated: connection reset before the reply")
	}
	return nil
}

// A lost status is recovered by asking again (draft "Asking Again"): the
// delegator never treats silence as failed; its retransmitter resends the
// identical octets and learns the outcome from the record, and the work is
// done once.
func TestLostReplyRecoveredByAskingAgain(t *testing.T) {
	for _, f := range formats[:2] {
		t.Run(f.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), f.form, nil)
			tr := store.NewMemory(time.Now())
			dl, err := delegator.New(delegator.Config{Me: assistantID, Signer: w.signers[assistantID], Keys: w.keys, Store: tr, Form: f.form,
				Retry: delegator.Retry{First: 50 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 20}})
			if err != nil {
				t.Fatal(err)
			}
			armed := &atomic.Bool{}
			armed.Store(true)
			ac := a2aClient(t, srv.url, "token-of-"+assistantID)
			ac.AddCallInterceptor(dropFirstReply{armed: armed})
			c, err := a2ahandoff.NewClient(ac, dl, a2ahandoff.ClientOptions{Encoding: f.enc})
			if err != nil {
				t.Fatal(err)
			}
			r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "lost"}, say("complete"), nil)
			if err == nil || r == nil || r.Hop == "" {
				t.Fatalf("the reply was not lost: %v %v", r, err)
			}
			if iss, _ := tr.IssuedHop(ctx, r.Hop); iss.View != store.Offered || iss.Resolved {
				t.Fatalf("silence changed the hop: %s", iss.View)
			}
			go dl.RunRetransmitter(ctx, 20*time.Millisecond, c.Resend, nil)
			deadline := time.Now().Add(10 * time.Second)
			for {
				iss, err := tr.IssuedHop(ctx, r.Hop)
				if err != nil {
					t.Fatal(err)
				}
				if iss.Resolved {
					if iss.View != store.ViewComplete {
						t.Fatalf("resolved as %s, want completed", iss.View)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("hop still %s after asking again", iss.View)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if n := srv.agent.runs.Load(); n != 1 {
				t.Fatalf("the agent ran %d times, want once", n)
			}
		})
	}
}

// An agent whose code returns an error ends the task FAILED. "failed" is
// sent only when the effect is known (draft "Knowing the Outcome"): here,
// when the agent declares that its work takes no effect unless it
// completes; otherwise the hop stays "accepted" and is flagged.
func TestAgentErrorOverA2A(t *testing.T) {
	for _, noEffect := range []bool{true, false} {
		name := "effect unknown"
		if noEffect {
			name = "no effect unless completed"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = noEffect })
			tr := store.NewMemory(time.Now())
			c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, tr, handoff.FormJWS), handoff.JSON)
			r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "boom"}, say("error"), nil)
			if err != nil {
				t.Fatal(err)
			}
			noRefusals(t, r)
			if r.State() != a2a.TaskStateFailed {
				t.Fatalf("task %s, want failed", r.State())
			}
			want := []string{"accepted"}
			if noEffect {
				want = append(want, "failed")
			}
			if got := statesOf(t, w, r.Statuses, offerOf(t, tr, r.Hop)); !slices.Equal(got, want) {
				t.Fatalf("statuses %v, want %v", got, want)
			}
			flags, _ := srv.x.Delegate().Flags(ctx, false)
			if hasFlag(t, flags, store.FlagUnknownOutcome, r.Hop) == noEffect {
				t.Fatalf("unknown-outcome flag: %+v", flags)
			}
		})
	}
}

// Only the delegator's verified "canceled" (D9) cancels a handoff task:
// one signed by another key, or by another trusted agent, or naming
// another offer, is refused and the work goes on.
func TestForgedCancelRefused(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	tr := store.NewMemory(time.Now())
	c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, tr, handoff.FormJWS), handoff.JSON)
	r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "forged"}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
	if err != nil {
		t.Fatal(err)
	}
	<-srv.agent.started
	offer := offerOf(t, tr, r.Hop)
	now := time.Now().Unix()
	forge := func(by, iss string, dg handoff.Digest) handoff.Element {
		el, err := w.signers[by].SignStatus(&handoff.Status{Offer: dg, Iss: iss, Aud: plannerID, Iat: now, State: handoff.StateCanceled}, handoff.FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	cases := []struct {
		name string
		st   handoff.Element
	}{
		{"signed with a key not bound to the delegator", forge(malloryID, assistantID, offer.Digest())},
		{"from another trusted agent", forge(coderID, coderID, offer.Digest())},
		{"naming another offer", forge(assistantID, assistantID, handoff.DigestOf([]byte("another offer")))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.SendCancel(ctx, r.Hop, tc.st)
			if !errors.Is(err, a2a.ErrTaskNotCancelable) {
				t.Fatalf("forged cancel: %v, want task not cancelable", err)
			}
			rec, _ := srv.st.Get(ctx, assistantID, r.Hop)
			if rec.Canceled {
				t.Fatal("a forged cancel was noted")
			}
		})
	}
	srv.agent.release <- struct{}{}
	done := waitState(t, c, r.Hop, a2a.TaskStateCompleted)
	if done.Issued == nil || done.Issued.View != store.ViewComplete {
		t.Fatalf("the work did not go on to completion: %+v", done.Issued)
	}
}

// Streaming (message/stream) carries the same events: the WORKING update
// with "accepted", then the COMPLETED update with "completed", each in
// its TaskStatus.message metadata.
func TestStreamingOverA2A(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormCOSE, nil)
	plain := a2aClient(t, srv.url, "token-of-"+assistantID)
	plain.AddCallInterceptor(a2ahandoff.ExtensionHeader{})
	now := time.Now().Unix()
	offer := w.sign(t, assistantID, handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-stream",
		Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 60}, handoff.FormCOSE)
	m := offerMessage(t, "complete", "ctx-stream", &handoff.Handoff{Offer: offer}, handoff.CBOR)
	var got []string
	for ev, err := range plain.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: m}) {
		if err != nil {
			t.Fatal(err)
		}
		up, ok := ev.(*a2a.TaskStatusUpdateEvent)
		if !ok || up.Status.Message == nil {
			continue
		}
		st, ok, err := a2ahandoff.StatusFrom(up.Status.Message.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, string(up.Status.State)+":"+string(w.verified(t, st, offer).State))
		}
	}
	if want := []string{"working:accepted", "completed:completed"}; !slices.Equal(got, want) {
		t.Fatalf("streamed %v, want %v", got, want)
	}

	// streamed collects, per event, the A2A kind/state and the verified
	// state of the status it carries.
	streamed := func(m *a2a.Message, offer handoff.Element) []string {
		var got []string
		for ev, err := range plain.SendStreamingMessage(ctx, &a2a.MessageSendParams{Message: m}) {
			if err != nil {
				t.Fatal(err)
			}
			var meta map[string]any
			kind := ""
			switch e := ev.(type) {
			case *a2a.Message:
				kind, meta = "message", e.Metadata
			case *a2a.TaskStatusUpdateEvent:
				if e.Status.Message != nil {
					kind, meta = string(e.Status.State), e.Status.Message.Metadata
				}
			}
			st, ok, err := a2ahandoff.StatusFrom(meta)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				s := w.verified(t, st, offer)
				got = append(got, kind+":"+string(s.State)+"/"+string(s.Reason))
			}
		}
		return got
	}

	// Asking Again over message/stream: a Message with the last status,
	// the agent not run again.
	again := *m
	again.ID = a2a.NewMessageID()
	if got, want := streamed(&again, offer), []string{"message:completed/"}; !slices.Equal(got, want) {
		t.Fatalf("streamed retransmission %v, want %v", got, want)
	}
	if n := srv.agent.runs.Load(); n != 1 {
		t.Fatalf("the agent ran %d times", n)
	}

	// A rejection over message/stream (step 5: another dialog): REJECTED
	// with the signed rejected.
	other := w.sign(t, assistantID, handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-other",
		Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 60}, handoff.FormCOSE)
	rm := offerMessage(t, "complete", "ctx-stream-2", &handoff.Handoff{Offer: other}, handoff.CBOR)
	if got, want := streamed(rm, other), []string{"rejected:rejected/policy"}; !slices.Equal(got, want) {
		t.Fatalf("streamed rejection %v, want %v", got, want)
	}
	if n := srv.agent.runs.Load(); n != 1 {
		t.Fatalf("the agent ran %d times", n)
	}
}
