package a2ahandoff_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aext"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// TestNilAndZeroArguments: every exported function and method of the
// package, given a nil or zero value where it needs a real one (a nil
// Client or Executor, one not made by its constructor, a nil message,
// Handoff, context, request context or queue, an empty hop, a zero
// status), returns an error that names what is missing, or the harmless
// zero its documentation states, and never panics (developers' guide:
// bad input gets a clear, specific error, never a panic). Nothing is sent
// or signed for such a call, and the hop really sent is not touched.
func TestNilAndZeroArguments(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	tr := store.NewMemory(time.Now())
	dl := w.delegator(t, assistantID, tr, handoff.FormJWS)
	c := w.client(t, srv.url, assistantID, dl, handoff.JSON)
	r := offered(t, c, "nil-table", "complete", nil)
	wantTaskState(t, r, a2a.TaskStateCompleted)
	if len(r.Statuses) == 0 {
		t.Fatal("no status in the reply")
	}
	completed := r.Statuses[len(r.Statuses)-1]
	issued, err := tr.IssuedHop(ctx, r.Hop)
	if err != nil {
		t.Fatal(err)
	}
	// The Handoff of the hop, to offer to Send.
	sentMsg := &a2a.Message{}
	h := &handoff.Handoff{Offer: offerOf(t, tr, r.Hop)}
	if err := a2ahandoff.AttachHandoff(sentMsg, h, handoff.JSON); err != nil {
		t.Fatal(err)
	}

	var (
		nilClient   *a2ahandoff.Client
		zeroClient  a2ahandoff.Client
		nilExecutor *a2ahandoff.Executor
		zeroExec    a2ahandoff.Executor
		nilReply    *a2ahandoff.Reply
		nilCtx      context.Context // a nil context, as a careless caller passes one
	)
	ac := a2aClient(t, srv.url, "token-of-"+assistantID)
	q := eventqueue.NewInMemoryManager()
	queue, err := q.GetOrCreate(ctx, a2a.NewTaskID())
	if err != nil {
		t.Fatal(err)
	}
	rc := &a2asrv.RequestContext{TaskID: a2a.NewTaskID(), ContextID: a2a.NewContextID(), Message: say("complete")}
	// refused checks that a handler from NewHandler(nil) refuses a
	// request with the error naming the missing Executor.
	refused := func(err error) error {
		if err == nil {
			return errors.New("the request was served")
		}
		if !errors.Is(err, a2a.ErrInternalError) {
			return errors.New("not an internal error: " + err.Error())
		}
		return err
	}

	for _, tc := range []struct {
		name string
		want error // errors.Is of the error; nil for none
		call func() error
	}{
		// Client.
		{"NewClient: nil a2aclient.Client", a2ahandoff.ErrInvalid, func() error {
			_, err := a2ahandoff.NewClient(nil, dl, a2ahandoff.ClientOptions{})
			return err
		}},
		{"NewClient: nil delegator", a2ahandoff.ErrInvalid, func() error {
			_, err := a2ahandoff.NewClient(ac, nil, a2ahandoff.ClientOptions{})
			return err
		}},
		{"Client nil: Offer", a2ahandoff.ErrInvalid, func() error {
			_, err := nilClient.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "w"}, say("complete"), nil)
			return err
		}},
		{"Client zero value: Offer", a2ahandoff.ErrInvalid, func() error {
			_, err := zeroClient.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "w"}, say("complete"), nil)
			return err
		}},
		{"Client nil: Send", a2ahandoff.ErrInvalid, func() error { _, err := nilClient.Send(ctx, r.Hop, h, say("x"), nil); return err }},
		{"Client nil: Ask", a2ahandoff.ErrInvalid, func() error { _, err := nilClient.Ask(ctx, r.Hop); return err }},
		{"Client zero value: Ask", a2ahandoff.ErrInvalid, func() error { _, err := zeroClient.Ask(ctx, r.Hop); return err }},
		{"Client nil: Resend", a2ahandoff.ErrInvalid, func() error { return nilClient.Resend(ctx, delegator.Ask{Hop: issued}) }},
		{"Client nil: Poll", a2ahandoff.ErrInvalid, func() error { _, err := nilClient.Poll(ctx, r.Hop); return err }},
		{"Client nil: Cancel", a2ahandoff.ErrInvalid, func() error { _, err := nilClient.Cancel(ctx, r.Hop); return err }},
		{"Client nil: SendCancel", a2ahandoff.ErrInvalid, func() error { _, err := nilClient.SendCancel(ctx, r.Hop, completed); return err }},
		{"Client nil: Forget is a no-op", nil, func() error { nilClient.Forget(r.Hop); zeroClient.Forget(r.Hop); return nil }},
		{"Client nil: Carries nothing", nil, func() error {
			if nilClient.Carries(r.Hop) || zeroClient.Carries(r.Hop) {
				return errors.New("a nil Client carries the hop")
			}
			return nil
		}},
		{"Client nil: TaskID is unknown", nil, func() error {
			if id, ok := nilClient.TaskID(r.Hop); ok || id != "" {
				return errors.New("a nil Client knows a task")
			}
			if id, ok := zeroClient.TaskID(r.Hop); ok || id != "" {
				return errors.New("a zero Client knows a task")
			}
			return nil
		}},
		{"Offer: nil context", a2ahandoff.ErrInvalid, func() error {
			_, err := c.Offer(nilCtx, delegator.Offer{Aud: plannerID, Work: "w"}, say("complete"), nil)
			return err
		}},
		{"Offer: nil message", a2ahandoff.ErrInvalid, func() error {
			_, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "w"}, nil, nil)
			return err
		}},
		{"Send: empty hop", a2ahandoff.ErrInvalid, func() error { _, err := c.Send(ctx, "", h, say("x"), nil); return err }},
		{"Send: nil message", a2ahandoff.ErrInvalid, func() error {
			_, err := c.Send(ctx, r.Hop, h, nil, nil)
			return err
		}},
		{"Send: nil Handoff", a2ahandoff.ErrInvalid, func() error {
			_, err := c.Send(ctx, r.Hop, nil, say("x"), nil)
			return err
		}},
		{"Send: zero Handoff", a2ahandoff.ErrInvalid, func() error {
			_, err := c.Send(ctx, r.Hop, &handoff.Handoff{}, say("x"), nil)
			return err
		}},
		{"Send: a status as the offer", a2ahandoff.ErrInvalid, func() error {
			_, err := c.Send(ctx, r.Hop, &handoff.Handoff{Offer: completed}, say("x"), nil)
			return err
		}},
		{"Send: the Handoff of another hop", a2ahandoff.ErrInvalid, func() error {
			_, err := c.Send(ctx, "another-hop", h, say("x"), nil)
			return err
		}},
		{"Ask: nil context", a2ahandoff.ErrInvalid, func() error { _, err := c.Ask(nilCtx, r.Hop); return err }},
		{"Ask: empty hop", a2ahandoff.ErrNotSent, func() error { _, err := c.Ask(ctx, ""); return err }},
		{"Resend: nil hop", a2ahandoff.ErrInvalid, func() error { return c.Resend(ctx, delegator.Ask{}) }},
		{"Poll: empty hop", a2ahandoff.ErrNotSent, func() error { _, err := c.Poll(ctx, ""); return err }},
		{"Cancel: empty hop (nothing signed)", a2ahandoff.ErrNotSent, func() error { _, err := c.Cancel(ctx, ""); return err }},
		{"SendCancel: empty hop", a2ahandoff.ErrNotSent, func() error { _, err := c.SendCancel(ctx, "", completed); return err }},
		{"SendCancel: zero status", a2ahandoff.ErrInvalid, func() error { _, err := c.SendCancel(ctx, r.Hop, handoff.Element{}); return err }},
		{"SendCancel: a status other than canceled", a2ahandoff.ErrInvalid, func() error {
			_, err := c.SendCancel(ctx, r.Hop, completed)
			return err
		}},
		{"SendCancel: an offer", a2ahandoff.ErrInvalid, func() error { _, err := c.SendCancel(ctx, r.Hop, h.Offer); return err }},
		{"Reply nil: State is empty", nil, func() error {
			if s := nilReply.State(); s != "" {
				return errors.New("state " + string(s))
			}
			return nil
		}},
		{"ExtensionHeader: nil request", nil, func() error {
			_, err := a2ahandoff.ExtensionHeader{}.Before(ctx, nil)
			return err
		}},
		{"ExtensionHeader: nil Meta gets the extension", nil, func() error {
			req := &a2aclient.Request{Payload: &a2a.MessageSendParams{Message: sentMsg}}
			if _, err := (a2ahandoff.ExtensionHeader{}).Before(ctx, req); err != nil {
				return err
			}
			if got := req.Meta.Get(a2aext.CallMetaKey); len(got) != 1 || got[0] != a2ahandoff.URI {
				return errors.New("extension not listed: " + strings.Join(got, ","))
			}
			return nil
		}},
		{"ExtensionHeader: nil payloads", nil, func() error {
			for _, p := range []any{(*a2a.MessageSendParams)(nil), &a2a.MessageSendParams{}, (*a2a.TaskIDParams)(nil), nil} {
				if _, err := (a2ahandoff.ExtensionHeader{}).Before(ctx, &a2aclient.Request{Payload: p}); err != nil {
					return err
				}
			}
			return nil
		}},

		// Carriage.
		{"AttachHandoff: nil message", a2ahandoff.ErrInvalid, func() error {
			return a2ahandoff.AttachHandoff(nil, h, handoff.JSON)
		}},
		{"AttachHandoff: nil Handoff", a2ahandoff.ErrInvalid, func() error {
			return a2ahandoff.AttachHandoff(say("x"), nil, handoff.JSON)
		}},
		{"AttachStatus: nil message is left alone", nil, func() error { a2ahandoff.AttachStatus(nil, completed); return nil }},
		{"AttachStatus: zero status attaches nothing", nil, func() error {
			m := say("x")
			a2ahandoff.AttachStatus(m, handoff.Element{})
			if _, ok := m.Metadata[a2ahandoff.Key]; ok || len(m.Extensions) != 0 {
				return errors.New("a zero status was attached")
			}
			return nil
		}},
		{"HandoffFrom: nil message", a2ahandoff.ErrNoHandoff, func() error { _, err := a2ahandoff.HandoffFrom(nil); return err }},
		{"StatusFrom: nil metadata", nil, func() error {
			if _, ok, err := a2ahandoff.StatusFrom(nil); ok || err != nil {
				return errors.New("a status in nil metadata")
			}
			return nil
		}},
		{"Statuses: nil results carry none", nil, func() error {
			for _, res := range []a2a.SendMessageResult{nil, (*a2a.Task)(nil), (*a2a.Message)(nil)} {
				if sts, errs := a2ahandoff.Statuses(res); len(sts) != 0 || len(errs) != 0 {
					return errors.New("statuses in a nil result")
				}
			}
			return nil
		}},
		{"StrictHandler: nil handler answers 500", errHTTP500, func() error {
			rec := httptest.NewRecorder()
			a2ahandoff.StrictHandler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}")))
			if !strings.Contains(rec.Body.String(), "no handler") {
				return errors.New("body " + rec.Body.String())
			}
			if rec.Code != http.StatusInternalServerError {
				return fmt.Errorf("status %d", rec.Code)
			}
			return errHTTP500
		}},

		// Executor and handler.
		{"NewExecutor: nil context", a2ahandoff.ErrInvalid, func() error {
			_, err := a2ahandoff.NewExecutor(nilCtx, newAgent(), a2ahandoff.ServerConfig{})
			return err
		}},
		{"NewExecutor: nil agent", a2ahandoff.ErrInvalid, func() error {
			_, err := a2ahandoff.NewExecutor(ctx, nil, a2ahandoff.ServerConfig{})
			return err
		}},
		{"NewExecutor: SenderMustBeIss with no Sender", a2ahandoff.ErrInvalid, func() error {
			_, err := a2ahandoff.NewExecutor(ctx, newAgent(), a2ahandoff.ServerConfig{Delegate: delegate.Config{SenderMustBeIss: true}})
			return err
		}},
		{"Executor nil: Delegate is nil", nil, func() error {
			if nilExecutor.Delegate() != nil || zeroExec.Delegate() != nil {
				return errors.New("a delegate without an Executor")
			}
			return nil
		}},
		{"Executor nil: Wait returns", nil, func() error { nilExecutor.Wait(); zeroExec.Wait(); return nil }},
		{"Executor nil: Execute", a2ahandoff.ErrInvalid, func() error { return nilExecutor.Execute(ctx, rc, queue) }},
		{"Executor zero value: Execute", a2ahandoff.ErrInvalid, func() error { return zeroExec.Execute(ctx, rc, queue) }},
		{"Executor nil: Cancel", a2ahandoff.ErrInvalid, func() error { return nilExecutor.Cancel(ctx, rc, queue) }},
		{"Execute: nil context", a2ahandoff.ErrInvalid, func() error { return srv.x.Execute(nilCtx, rc, queue) }},
		{"Execute: nil request context", a2ahandoff.ErrInvalid, func() error { return srv.x.Execute(ctx, nil, queue) }},
		{"Execute: nil queue", a2ahandoff.ErrInvalid, func() error { return srv.x.Execute(ctx, rc, nil) }},
		{"Cancel: nil context", a2ahandoff.ErrInvalid, func() error { return srv.x.Cancel(nilCtx, rc, queue) }},
		{"Cancel: nil request context", a2ahandoff.ErrInvalid, func() error { return srv.x.Cancel(ctx, nil, queue) }},
		{"Cancel: nil queue", a2ahandoff.ErrInvalid, func() error { return srv.x.Cancel(ctx, rc, nil) }},
		{"NewHandler nil: message/send refused", a2a.ErrInternalError, func() error {
			_, err := a2ahandoff.NewHandler(nil).OnSendMessage(ctx, &a2a.MessageSendParams{Message: sentMsg})
			return refused(err)
		}},
		{"NewHandler zero value: message/stream refused", a2a.ErrInternalError, func() error {
			for _, err := range a2ahandoff.NewHandler(&zeroExec).OnSendMessageStream(ctx, &a2a.MessageSendParams{Message: sentMsg}) {
				return refused(err)
			}
			return errors.New("no event")
		}},
		{"NewHandler nil: tasks/get and tasks/cancel refused", a2a.ErrInternalError, func() error {
			hd := a2ahandoff.NewHandler(nil)
			if _, err := hd.OnCancelTask(ctx, &a2a.TaskIDParams{ID: "t"}); refused(err) == nil || !strings.Contains(err.Error(), "no usable Executor") {
				return errors.New("cancel not refused")
			}
			_, err := hd.OnGetTask(ctx, &a2a.TaskQueryParams{ID: "t"})
			return refused(err)
		}},
		{"NewHandler nil: refused over JSON-RPC", a2a.ErrInternalError, func() error {
			hs := httptest.NewServer(a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(a2ahandoff.NewHandler(nil))))
			defer hs.Close()
			_, err := a2aClient(t, hs.URL, "").SendMessage(ctx, &a2a.MessageSendParams{Message: offerMessage(t, "complete", "d", h, handoff.JSON)})
			if err == nil {
				return errors.New("served")
			}
			return err
		}},
		{"NewHandler: nil params go to a2a-go, which refuses them", a2a.ErrInvalidParams, func() error {
			_, err := a2ahandoff.NewHandler(srv.x).OnSendMessage(ctx, nil)
			return err
		}},
		{"UserName: nil context is not authenticated", nil, func() error {
			if a2ahandoff.UserName(nilCtx) != "" {
				return errors.New("authenticated")
			}
			return nil
		}},
		{"HopFrom: nil context has no hop", nil, func() error {
			if hop := a2ahandoff.HopFrom(nilCtx); hop != nil {
				return errors.New("a hop")
			}
			return nil
		}},
		{"Declare: a nil Hop (HopFrom outside Execute)", a2ahandoff.ErrInvalid, func() error {
			return a2ahandoff.HopFrom(ctx).Declare(delegate.Outcome{State: store.Completed})
		}},
		{"Declare: a Hop whose work is not running", a2ahandoff.ErrInvalid, func() error {
			return (&a2ahandoff.Hop{Iss: assistantID, ID: "h"}).Declare(delegate.Outcome{State: store.Completed})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				err = tc.call()
			}()
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}

	// None of it touched the hop really sent: the client still carries
	// it, the delegate answers asking again from its record, and the agent
	// ran once.
	if !c.Carries(r.Hop) {
		t.Fatal("the client forgot the hop")
	}
	a, err := c.Ask(ctx, r.Hop)
	if err != nil {
		t.Fatal(err)
	}
	noRefusals(t, a)
	if len(a.Statuses) != 1 || !bytes.Equal(a.Statuses[0].Octets, completed.Octets) {
		t.Fatalf("asked again: %d statuses, want the identical \"completed\"", len(a.Statuses))
	}
	if rec := recorded(t, srv, assistantID, r.Hop); rec.State != store.Completed || rec.Canceled {
		t.Fatalf("record %s (canceled %v), want completed", rec.State, rec.Canceled)
	}
	if n := srv.agent.runs.Load(); n != 1 {
		t.Fatalf("the agent ran %d times", n)
	}
}

// errHTTP500 stands for an HTTP answer 500 in the table.
var errHTTP500 = errors.New("HTTP 500")
