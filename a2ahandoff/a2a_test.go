package a2ahandoff_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

const (
	assistantID = "https://assistant.example/agent"
	plannerID   = "https://planner.example/agent"
	coderID     = "https://coder.example/agent"
	malloryID   = "https://mallory.example/agent" // a key nobody trusts
)

// world holds the agents' keys and the trust configuration they share,
// and the bearer tokens by which the servers authenticate their callers.
type world struct {
	keys    *trust.Config
	signers map[string]*handoff.Signer
	tokens  map[string]string // bearer token -> AgentId
}

func newWorld(t testing.TB) *world {
	w := &world{keys: trust.New(), signers: map[string]*handoff.Signer{}, tokens: map[string]string{}}
	for _, id := range []string{assistantID, plannerID, coderID} {
		addAgent(t, w, id)
	}
	_, w.signers[malloryID] = newKey(t) // a signer whose key nobody trusts
	return w
}

// newKey is a fresh key pair and its signer.
func newKey(t testing.TB) (*ecdsa.PrivateKey, *handoff.Signer) {
	t.Helper()
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := handoff.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, s
}

// sign signs o as by, in form.
func (w *world) sign(t testing.TB, by string, o handoff.Offer, form handoff.Form) handoff.Element {
	t.Helper()
	el, err := w.signers[by].SignOffer(&o, form)
	if err != nil {
		t.Fatal(err)
	}
	return el
}

// reoffer signs, as the assistant, another offer for the hop of el, the
// same (iss, hop) with other octets: an equivocation (draft "Forks,
// Concurrency, and Equivocation"). It returns the new offer and its
// payload.
func (w *world) reoffer(t testing.TB, el handoff.Element, form handoff.Form) (handoff.Element, *handoff.Offer) {
	t.Helper()
	o := hopOf(t, el)
	o.Exp++ // other octets, same (iss, hop)
	return w.sign(t, assistantID, *o, form), o
}

// bearerAuth is the host protocol's authentication on the server: a
// bearer token names the calling agent (a2asrv CallContext User).
type bearerAuth struct {
	a2asrv.PassthroughCallInterceptor
	tokens map[string]string
}

func (b bearerAuth) Before(ctx context.Context, cc *a2asrv.CallContext, _ *a2asrv.Request) (context.Context, error) {
	if v, ok := cc.RequestMeta().Get("authorization"); ok && len(v) == 1 {
		if id, ok := b.tokens[strings.TrimPrefix(v[0], "Bearer ")]; ok {
			cc.User = &a2asrv.AuthenticatedUser{UserName: id}
		}
	}
	return ctx, nil
}

// bearer sends the client's token.
type bearer struct {
	a2aclient.PassthroughInterceptor
	token string
}

func (b bearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	if b.token != "" {
		req.Meta.Append("Authorization", "Bearer "+b.token)
	}
	return ctx, nil
}

// testAgent is an existing a2a-go agent: what it does is named by the
// message text. It counts its runs and records what it saw.
type testAgent struct {
	runs    atomic.Int32
	release chan struct{}
	started chan struct{}
	stopped chan error

	mu        sync.Mutex
	requested []string // the A2A-Extensions the request listed
	exts      []string // the message's extensions
	got       *a2ahandoff.Hop
}

func newAgent() *testAgent {
	return &testAgent{release: make(chan struct{}, 8), started: make(chan struct{}, 8), stopped: make(chan error, 8)}
}

func textOf(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	for _, p := range m.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			return tp.Text
		}
	}
	return ""
}

func (a *testAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.runs.Add(1)
	a.mu.Lock()
	if ext, ok := a2asrv.ExtensionsFrom(ctx); ok {
		a.requested = ext.RequestedURIs()
	}
	a.exts = slices.Clone(rc.Message.Extensions)
	a.got = a2ahandoff.HopFrom(ctx)
	a.mu.Unlock()
	end := func(state a2a.TaskState, text string) error {
		ev := a2a.NewStatusUpdateEvent(rc, state, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: text}))
		ev.Final = true
		return q.Write(ctx, ev)
	}
	switch textOf(rc.Message) {
	case "complete":
		if err := q.Write(ctx, a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "the plan"})); err != nil {
			return err
		}
		return end(a2a.TaskStateCompleted, "done")
	case "reply":
		return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "here is the answer"}))
	case "fail-reported":
		if err := a2ahandoff.HopFrom(ctx).Declare(delegate.Outcome{State: store.Failed, NoEffect: true, Reason: handoff.ReasonPolicy, Detail: "nothing to plan"}); err != nil {
			return err
		}
		return end(a2a.TaskStateFailed, "cannot")
	case "fail":
		return end(a2a.TaskStateFailed, "cannot")
	case "more":
		return end(a2a.TaskStateInputRequired, "need more")
	case "error":
		return errors.New("the agent broke")
	case "error-unknown":
		return fmt.Errorf("lost the agent behind this one: %w", a2ahandoff.ErrOutcomeUnknown)
	case "block":
		a.started <- struct{}{}
		select {
		case <-a.release:
			return end(a2a.TaskStateCompleted, "done after waiting")
		case <-ctx.Done():
			a.stopped <- context.Cause(ctx)
			return ctx.Err()
		}
	}
	return end(a2a.TaskStateFailed, "unknown instruction")
}

func (a *testAgent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// server is a delegate behind a real JSON-RPC A2A server on loopback.
type server struct {
	x     *a2ahandoff.Executor
	agent *testAgent
	url   string
	st    store.Store
	close func()
}

func (w *world) serve(t testing.TB, me string, st store.Store, form handoff.Form, mut func(*a2ahandoff.ServerConfig), opts ...a2asrv.RequestHandlerOption) *server {
	t.Helper()
	agent := newAgent()
	cfg := a2ahandoff.ServerConfig{
		Delegate: delegate.Config{
			Options: handoff.Options{Me: me, Keys: w.keys},
			Store:   st, Signer: w.signers[me], StatusForm: form,
		},
		Sender: a2ahandoff.UserName,
	}
	if mut != nil {
		mut(&cfg)
	}
	x, err := a2ahandoff.NewExecutor(context.Background(), agent, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := a2ahandoff.NewHandler(x, append([]a2asrv.RequestHandlerOption{a2asrv.WithCallInterceptor(bearerAuth{tokens: w.tokens})}, opts...)...)
	srv := httptest.NewServer(a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(h)))
	t.Cleanup(srv.Close)
	return &server{x: x, agent: agent, url: srv.URL, st: st, close: srv.Close}
}

// a2aClient is the SDK's own client for a server, sending token.
func a2aClient(t testing.TB, url, token string) *a2aclient.Client {
	t.Helper()
	c, err := a2aclient.NewFromEndpoints(context.Background(),
		[]a2a.AgentInterface{{URL: url, Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithInterceptors(bearer{token: token}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (w *world) delegator(t testing.TB, me string, tr delegator.Tracking, form handoff.Form) *delegator.Delegator {
	t.Helper()
	dl, err := delegator.New(delegator.Config{Me: me, Signer: w.signers[me], Keys: w.keys, Store: tr, Form: form})
	if err != nil {
		t.Fatal(err)
	}
	return dl
}

func (w *world) client(t testing.TB, url, me string, dl *delegator.Delegator, enc handoff.Encoding) *a2ahandoff.Client {
	t.Helper()
	c, err := a2ahandoff.NewClient(a2aClient(t, url, "token-of-"+me), dl, a2ahandoff.ClientOptions{Encoding: enc})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// memStore is a delegate's memory store whose memory began a minute ago,
// so the restart rule does not touch offers issued now.
func memStore() *store.Memory { return store.NewMemory(time.Now().Add(-time.Minute)) }

// sqliteStore opens a real SQLite hop store in dir and waits out the
// second its memory began: offers issued in that second are refused as
// "replay" (decision 14), and these tests issue offers right away.
func sqliteStore(t testing.TB, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	since, err := s.Since(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(since.Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
	return s
}

func say(text string) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text})
}

// verified checks a status as the delegator does (D9) against offer and
// returns its payload.
func (w *world) verified(t testing.TB, st handoff.Element, offer handoff.Element) *handoff.Status {
	t.Helper()
	vs, err := handoff.VerifyStatus(st, offer, handoff.StatusOptions{Keys: w.keys})
	if err != nil {
		t.Fatalf("status does not verify (D9): %v", err)
	}
	return vs.Status
}

func statesOf(t testing.TB, w *world, sts []handoff.Element, offer handoff.Element) []string {
	t.Helper()
	var out []string
	for _, st := range sts {
		s := w.verified(t, st, offer)
		if s.Reason != "" {
			out = append(out, string(s.State)+"/"+string(s.Reason))
		} else {
			out = append(out, string(s.State))
		}
	}
	return out
}

func offerOf(t testing.TB, tr store.Tracker, hop string) handoff.Element {
	t.Helper()
	iss, err := tr.IssuedHop(context.Background(), hop)
	if err != nil {
		t.Fatal(err)
	}
	return handoff.Element{Form: iss.OfferForm, Octets: iss.Offer}
}

// formats: the Handoff encodings and signed forms carried over A2A.
var formats = []struct {
	name string
	enc  handoff.Encoding
	form handoff.Form
}{
	{"JSON-Handoff/JWS", handoff.JSON, handoff.FormJWS},
	{"CBOR-Handoff/COSE", handoff.CBOR, handoff.FormCOSE},
	{"JSON-Handoff/COSE", handoff.JSON, handoff.FormCOSE},
	{"CBOR-Handoff/JWS", handoff.CBOR, handoff.FormJWS},
}

// waitState polls the hop's task until it reaches state.
func waitState(t testing.TB, c *a2ahandoff.Client, hop string, state a2a.TaskState) *a2ahandoff.Reply {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := c.Poll(context.Background(), hop)
		if err != nil {
			t.Fatal(err)
		}
		if r.State() == state {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("task of hop %s is %s, want %s", hop, r.State(), state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func noRefusals(t testing.TB, r *a2ahandoff.Reply) {
	t.Helper()
	for _, err := range r.Refused {
		t.Errorf("status refused by the tracker: %v", err)
	}
}

func hasFlag(t testing.TB, flags []store.Flag, kind, hop string) bool {
	t.Helper()
	for _, f := range flags {
		if f.Kind == kind && f.Hop == hop {
			return true
		}
	}
	return false
}

// carrying attaches h to m (draft "Carrying the Element", A2A) and
// returns m.
func carrying(t testing.TB, m *a2a.Message, h *handoff.Handoff, enc handoff.Encoding) *a2a.Message {
	t.Helper()
	if err := a2ahandoff.AttachHandoff(m, h, enc); err != nil {
		t.Fatal(err)
	}
	return m
}

// offerMessage is a user message saying text in dialog (its contextId),
// carrying h.
func offerMessage(t testing.TB, text, dialog string, h *handoff.Handoff, enc handoff.Encoding) *a2a.Message {
	t.Helper()
	m := say(text)
	m.ContextID = dialog
	return carrying(t, m, h, enc)
}

// inTask is a user message saying text into task (its contextId and id).
func inTask(task *a2a.Task, text string) *a2a.Message {
	m := say(text)
	m.ContextID, m.TaskID = task.ContextID, task.ID
	return m
}

// mustSend sends m with the SDK's client over message/send and returns the
// result, failing the test if the server refused it.
func mustSend(t testing.TB, c *a2aclient.Client, m *a2a.Message) a2a.SendMessageResult {
	t.Helper()
	res, err := c.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// sendForTask sends m and expects a task back; it returns the task and
// the signed statuses it carries, which must all be readable.
func sendForTask(t testing.TB, c *a2aclient.Client, m *a2a.Message) (*a2a.Task, []handoff.Element) {
	t.Helper()
	res := mustSend(t, c, m)
	task, ok := res.(*a2a.Task)
	if !ok {
		t.Fatalf("reply is a %T, want a task", res)
	}
	sts, errs := a2ahandoff.Statuses(res)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return task, sts
}

// recorded is the delegate's record of (iss, hop), which must exist.
func recorded(t testing.TB, srv *server, iss, hop string) *store.Record {
	t.Helper()
	rec, err := srv.st.Get(context.Background(), iss, hop)
	if err != nil {
		t.Fatalf("the hop is not recorded: %v", err)
	}
	return rec
}

// waitTask polls task id until it reaches state; what names the task in
// the failure message.
func waitTask(t testing.TB, c *a2aclient.Client, id a2a.TaskID, state a2a.TaskState, what string) *a2a.Task {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := getTask(t, c, id)
		if got.Status.State == state {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s, want %s", what, got.Status.State, state)
		}
	}
}

// offered sends a fresh offer for work, saying text, with the handoff
// client, and checks that it was sent and that every status in the reply
// verified at the tracker.
func offered(t testing.TB, c *a2ahandoff.Client, work, text string, cfg *a2a.MessageSendConfig) *a2ahandoff.Reply {
	t.Helper()
	r, err := c.Offer(context.Background(), delegator.Offer{Aud: plannerID, Work: work}, say(text), cfg)
	if err != nil {
		t.Fatal(err)
	}
	noRefusals(t, r)
	return r
}

// wantTaskState fails unless the hop's task is in state (the draft's
// mapping table from the hop's status to the A2A task state).
func wantTaskState(t testing.TB, r *a2ahandoff.Reply, state a2a.TaskState) {
	t.Helper()
	if r.State() != state {
		t.Fatalf("task state %s, want %s", r.State(), state)
	}
}

// The draft's lifecycle over real A2A (mapping table): accepted ->
// WORKING, completed -> COMPLETED, failed -> FAILED, canceled ->
// CANCELED; "Asking Again": a retransmission is answered from the record
// with the identical octets and the work is not done twice; for every
// Handoff encoding and signed form.
func TestLifecycleOverA2A(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), f.form, nil)
			tr := store.NewMemory(time.Now())
			c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, tr, f.form), f.enc)

			t.Run("completed, then asked again (Asking Again: identical octets, work not redone)", func(t *testing.T) {
				r := offered(t, c, "plan-1", "complete", nil)
				wantTaskState(t, r, a2a.TaskStateCompleted)
				offer := offerOf(t, tr, r.Hop)
				if got := statesOf(t, w, r.Statuses, offer); !slices.Equal(got, []string{"accepted", "completed"}) {
					t.Fatalf("statuses %v, want accepted then completed", got)
				}
				if r.Issued == nil || r.Issued.View != store.ViewComplete || !r.Issued.Resolved {
					t.Fatalf("tracker: %+v, want completed and resolved", r.Issued)
				}
				if len(r.Task.Artifacts) != 1 {
					t.Errorf("the agent's artifact is missing: %+v", r.Task.Artifacts)
				}
				srv.agent.mu.Lock()
				requested, exts, got := srv.agent.requested, srv.agent.exts, srv.agent.got
				srv.agent.mu.Unlock()
				if !slices.Contains(requested, a2ahandoff.URI) {
					t.Errorf("A2A-Extensions service parameter %v lacks %s", requested, a2ahandoff.URI)
				}
				if !slices.Contains(exts, a2ahandoff.URI) {
					t.Errorf("Message.extensions %v lacks %s", exts, a2ahandoff.URI)
				}
				if got == nil || got.ID != r.Hop || got.Iss != assistantID || got.Offer.Dialog != r.Task.ContextID || got.Result == nil {
					t.Errorf("the agent's code saw hop %+v; want hop %s of %s in dialog %s", got, r.Hop, assistantID, r.Task.ContextID)
				}
				completed := r.Statuses[1]

				again, err := c.Ask(ctx, r.Hop)
				if err != nil {
					t.Fatal(err)
				}
				noRefusals(t, again)
				if _, ok := again.Result.(*a2a.Message); !ok {
					t.Fatalf("a retransmission is answered with a %T, want a Message", again.Result)
				}
				if len(again.Statuses) != 1 || !bytes.Equal(again.Statuses[0].Octets, completed.Octets) {
					t.Fatalf("retransmission answered with %d statuses, want the identical octets of the last status sent", len(again.Statuses))
				}
				if n := srv.agent.runs.Load(); n != 1 {
					t.Fatalf("the agent ran %d times, want once", n)
				}

				// Resolved: the client's memory of the hop may go.
				c.Forget(r.Hop)
				if c.Carries(r.Hop) {
					t.Fatal("the client still carries a forgotten hop")
				}
				if _, err := c.Ask(ctx, r.Hop); err == nil {
					t.Fatal("asked again about a forgotten hop")
				}
			})

			t.Run("accepted is WORKING until the agent completes", func(t *testing.T) {
				r := offered(t, c, "plan-2", "block", &a2a.MessageSendConfig{Blocking: new(false)})
				<-srv.agent.started
				wantTaskState(t, r, a2a.TaskStateWorking)
				offer := offerOf(t, tr, r.Hop)
				if got := statesOf(t, w, r.Statuses, offer); !slices.Equal(got, []string{"accepted"}) {
					t.Fatalf("statuses %v, want accepted", got)
				}
				if r.Issued.View != store.ViewAccepted || r.Issued.Resolved {
					t.Fatalf("tracker: %s resolved=%v, want accepted, unresolved", r.Issued.View, r.Issued.Resolved)
				}
				srv.agent.release <- struct{}{}
				done := waitState(t, c, r.Hop, a2a.TaskStateCompleted)
				noRefusals(t, done)
				if got := statesOf(t, w, done.Statuses, offer); !slices.Equal(got, []string{"accepted", "completed"}) {
					t.Fatalf("statuses %v, want accepted then completed", got)
				}
				if done.Issued.View != store.ViewComplete || !done.Issued.Resolved {
					t.Fatalf("tracker: %s, want completed", done.Issued.View)
				}
			})

			t.Run("an agent that answers with a Message completes the task", func(t *testing.T) {
				r := offered(t, c, "plan-3", "reply", nil)
				if r.State() != a2a.TaskStateCompleted || textOf(r.Task.Status.Message) != "here is the answer" {
					t.Fatalf("task %s with %q, want completed with the agent's reply", r.State(), textOf(r.Task.Status.Message))
				}
				if got := statesOf(t, w, r.Statuses, offerOf(t, tr, r.Hop)); !slices.Equal(got, []string{"accepted", "completed"}) {
					t.Fatalf("statuses %v", got)
				}
			})

			t.Run("failed with a reported outcome is FAILED with a signed failed", func(t *testing.T) {
				r := offered(t, c, "plan-4", "fail-reported", nil)
				wantTaskState(t, r, a2a.TaskStateFailed)
				if got := statesOf(t, w, r.Statuses, offerOf(t, tr, r.Hop)); !slices.Equal(got, []string{"accepted", "failed/policy"}) {
					t.Fatalf("statuses %v, want accepted then failed/policy", got)
				}
				if r.Issued.View != store.ViewFailed || !r.Issued.Resolved {
					t.Fatalf("tracker: %s, want failed and resolved", r.Issued.View)
				}
			})

			t.Run("failed with an unknown outcome keeps the hop accepted and flags it (Knowing the Outcome)", func(t *testing.T) {
				r := offered(t, c, "plan-5", "fail", nil)
				wantTaskState(t, r, a2a.TaskStateFailed)
				var said []string
				for _, p := range r.Task.Status.Message.Parts {
					if tp, ok := p.(a2a.TextPart); ok {
						said = append(said, tp.Text)
					}
				}
				if !strings.Contains(strings.Join(said, " "), "outcome of the hop's work is not known") {
					t.Errorf("status message %q does not say that the outcome is unknown", said)
				}
				if got := statesOf(t, w, r.Statuses, offerOf(t, tr, r.Hop)); !slices.Equal(got, []string{"accepted"}) {
					t.Fatalf("statuses %v: no failed may be sent while the effect is unknown", got)
				}
				if r.Issued.Resolved {
					t.Fatal("the hop is resolved without a known outcome")
				}
				flags, err := srv.x.Delegate().Flags(ctx, false)
				if err != nil {
					t.Fatal(err)
				}
				if !hasFlag(t, flags, store.FlagUnknownOutcome, r.Hop) {
					t.Fatalf("no unknown-outcome flag for hop %s: %+v", r.Hop, flags)
				}
			})

			t.Run("canceled: the signed canceled in the Cancel Task request makes the task CANCELED", func(t *testing.T) {
				r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "plan-6"}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
				if err != nil {
					t.Fatal(err)
				}
				<-srv.agent.started
				// A cancel without the signed status is refused; the work goes on.
				task, _ := c.TaskID(r.Hop)
				_, err = a2aClient(t, srv.url, "token-of-"+assistantID).CancelTask(ctx, &a2a.TaskIDParams{ID: task})
				if !errors.Is(err, a2a.ErrTaskNotCancelable) {
					t.Fatalf("cancel without a signed canceled: %v, want task not cancelable", err)
				}
				cr, err := c.Cancel(ctx, r.Hop)
				if err != nil {
					t.Fatal(err)
				}
				noRefusals(t, cr)
				wantTaskState(t, cr, a2a.TaskStateCanceled)
				if cause := <-srv.agent.stopped; cause == nil {
					t.Fatal("the agent's context was not canceled")
				}
				rec, err := srv.st.Get(ctx, assistantID, r.Hop)
				if err != nil {
					t.Fatal(err)
				}
				if !rec.Canceled || rec.State != store.Accepted {
					t.Fatalf("delegate record: canceled=%v state=%s; want canceled noted, hop still accepted (a cancel does not show the work took no effect)", rec.Canceled, rec.State)
				}
				if cr.Issued == nil || cr.Issued.View != store.ViewCanceled || cr.Issued.Resolved {
					t.Fatalf("tracker: %+v, want canceled and unresolved", cr.Issued)
				}
			})
		})
	}
}

// The receiving checks run before the agent's code: each rejection ends
// the task REJECTED, with the signed "rejected" and its reason where the
// offer verified (steps 2-7), with none where it did not (step 1, D3), and
// the agent never runs. Sent with the SDK's plain client and the
// package's carriage helpers, as any A2A client would.
func TestRejectionsOverA2A(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), f.form, nil)
			plain := a2aClient(t, srv.url, "token-of-"+assistantID)
			plain.AddCallInterceptor(a2ahandoff.ExtensionHeader{})

			now := time.Now().Unix()
			sign := func(by string, o handoff.Offer) handoff.Element { return w.sign(t, by, o, f.form) }
			base := func() handoff.Offer {
				return handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-" + handoff.NewHop(), Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 120}
			}
			tamper := func(el handoff.Element) handoff.Element {
				b := slices.Clone(el.Octets)
				if el.Form == handoff.FormJWS {
					i := len(b) - 3
					if b[i] == 'A' {
						b[i] = 'B'
					} else {
						b[i] = 'A'
					}
				} else {
					b[len(b)-5] ^= 0x01 // inside the signature
				}
				return handoff.Element{Form: el.Form, Octets: b}
			}

			cases := []struct {
				name    string
				rule    string
				offer   func() (handoff.Element, string) // the offer and the message's contextId
				reason  handoff.Reason                   // "" : no status (step 1)
				inTexts string
			}{
				{"wrong audience", "step 2", func() (handoff.Element, string) {
					o := base()
					o.Aud = coderID
					return sign(assistantID, o), o.Dialog
				}, handoff.ReasonWrongAudience, "wrong-audience"},
				{"stale", "step 3, Freshness", func() (handoff.Element, string) {
					o := base()
					o.Iat, o.Exp = now-400, now-200
					return sign(assistantID, o), o.Dialog
				}, handoff.ReasonStale, "stale"},
				{"other dialog", "step 5", func() (handoff.Element, string) {
					o := base()
					return sign(assistantID, o), "ctx-elsewhere"
				}, handoff.ReasonPolicy, "policy"},
				{"bad signature", "step 1", func() (handoff.Element, string) {
					o := base()
					return tamper(sign(assistantID, o)), o.Dialog
				}, "", "bad-signature"},
				{"untrusted key", "step 1", func() (handoff.Element, string) {
					o := base()
					o.Iss = malloryID
					return sign(malloryID, o), o.Dialog
				}, "", "untrusted-key"},
			}
			for _, tc := range cases {
				t.Run(tc.name+" ("+tc.rule+")", func(t *testing.T) {
					offer, ctxID := tc.offer()
					res := mustSend(t, plain, offerMessage(t, "complete", ctxID, &handoff.Handoff{Offer: offer}, f.enc))
					task, ok := res.(*a2a.Task)
					if !ok || task.Status.State != a2a.TaskStateRejected {
						t.Fatalf("reply %T %+v, want a REJECTED task", res, res)
					}
					if !strings.Contains(textOf(task.Status.Message), tc.inTexts) {
						t.Errorf("status message %q does not say %q", textOf(task.Status.Message), tc.inTexts)
					}
					sts, errs := a2ahandoff.Statuses(res)
					if len(errs) > 0 {
						t.Fatal(errs)
					}
					if tc.reason == "" {
						if len(sts) != 0 {
							t.Fatalf("%d statuses for an offer that did not verify, want none (decision 12)", len(sts))
						}
					} else {
						if len(sts) != 1 {
							t.Fatalf("%d statuses, want the signed rejected", len(sts))
						}
						var s *handoff.Status
						if tc.reason == handoff.ReasonWrongAudience {
							// The receiver is not offer.aud, so its status
							// names itself as iss: D9's misdelivered
							// rejection, which sets no state; read here
							// for what it names.
							_, s, _ = handoff.UnsafeDecode(sts[0])
							if s == nil {
								t.Fatal("the rejection is not a status")
							}
							if s.Iss == coderID {
								t.Fatalf("the wrong-audience status claims to come from %s", s.Iss)
							}
						} else {
							s = w.verified(t, sts[0], offer)
						}
						if s.State != handoff.StateRejected || s.Reason != tc.reason {
							t.Fatalf("status %s/%s, want rejected/%s", s.State, s.Reason, tc.reason)
						}
					}
					if n := srv.agent.runs.Load(); n != 0 {
						t.Fatalf("the agent ran %d times on a rejected offer", n)
					}
				})
			}

			t.Run("no Handoff (the agent requires one)", func(t *testing.T) {
				res := mustSend(t, plain, say("complete"))
				if task, ok := res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateRejected {
					t.Fatalf("reply %+v, want REJECTED", res)
				}
				if srv.agent.runs.Load() != 0 {
					t.Fatal("the agent ran without a handoff")
				}
			})

			malformed := []struct {
				name  string
				value any
			}{
				{"a number", 42},
				{"an array", []any{"x"}},
				{"text that is not base64url", "not base64url!"},
				{"base64url of a JSON Handoff", "eyJvZmZlciI6ImEuYi5jIn0"},
				{"an object without offer", map[string]any{"chain": []any{"a.b.c"}}},
			}
			for _, tc := range malformed {
				t.Run("malformed Handoff: "+tc.name+" (D3)", func(t *testing.T) {
					m := say("complete")
					m.ContextID = "ctx-1"
					m.Metadata = map[string]any{a2ahandoff.Key: tc.value}
					res := mustSend(t, plain, m)
					task, ok := res.(*a2a.Task)
					if !ok || task.Status.State != a2a.TaskStateRejected {
						t.Fatalf("reply %+v, want REJECTED", res)
					}
					if sts, _ := a2ahandoff.Statuses(res); len(sts) != 0 {
						t.Fatal("a status for a malformed Handoff")
					}
					if srv.agent.runs.Load() != 0 {
						t.Fatal("the agent ran on a malformed Handoff")
					}
				})
			}
		})
	}
}

// Equivocation (draft "Forks, Concurrency, and Equivocation"): a second
// offer for a recorded (iss, hop) with other octets is refused with no
// status and flagged; the first keeps its terminal status; a first whose
// work is running is stopped and, its outcome known, ends "failed" with
// reason equivocation.
func TestEquivocationOverA2A(t *testing.T) {
	for _, f := range formats[:2] {
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			srv := w.serve(t, plannerID, memStore(), f.form, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = true })
			plain := a2aClient(t, srv.url, "token-of-"+assistantID)
			now := time.Now().Unix()
			send := func(o handoff.Offer, text string, blocking bool) (handoff.Element, *a2a.Task) {
				el := w.sign(t, assistantID, o, f.form)
				m := offerMessage(t, text, o.Dialog, &handoff.Handoff{Offer: el}, f.enc)
				res, err := plain.SendMessage(ctx, &a2a.MessageSendParams{Message: m, Config: &a2a.MessageSendConfig{Blocking: &blocking}})
				if err != nil {
					t.Fatal(err)
				}
				task, ok := res.(*a2a.Task)
				if !ok {
					t.Fatalf("reply is a %T, want a task", res)
				}
				return el, task
			}

			t.Run("after the first completed", func(t *testing.T) {
				o := handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-eq-1", Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 120}
				first, t1 := send(o, "complete", true)
				if t1.Status.State != a2a.TaskStateCompleted {
					t.Fatalf("first: %s", t1.Status.State)
				}
				o.Exp++ // other octets, same (iss, hop)
				_, t2 := send(o, "complete", true)
				if t2.Status.State != a2a.TaskStateRejected {
					t.Fatalf("second: %s, want rejected", t2.Status.State)
				}
				if sts, _ := a2ahandoff.Statuses(t2); len(sts) != 0 {
					t.Fatal("the equivocating offer got a status")
				}
				if n := srv.agent.runs.Load(); n != 1 {
					t.Fatalf("the agent ran %d times", n)
				}
				rec, _ := srv.st.Get(ctx, assistantID, o.Hop)
				if rec.State != store.Completed || !rec.Digest.Equal(first.Digest()) {
					t.Fatalf("the first offer's record changed: %s", rec.State)
				}
				flags, _ := srv.x.Delegate().Flags(ctx, false)
				if !hasFlag(t, flags, store.FlagEquivocation, o.Hop) {
					t.Fatal("equivocation not flagged")
				}
			})

			t.Run("while the first is running", func(t *testing.T) {
				o := handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-eq-2", Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 120}
				first, t1 := send(o, "block", false)
				<-srv.agent.started
				o.Exp++
				_, t2 := send(o, "complete", true)
				if t2.Status.State != a2a.TaskStateRejected {
					t.Fatalf("second: %s, want rejected", t2.Status.State)
				}
				if cause := <-srv.agent.stopped; cause == nil {
					t.Fatal("the first offer's work was not stopped")
				}
				got := waitTask(t, plain, t1.ID, a2a.TaskStateFailed, "first task is")
				sts, _ := a2ahandoff.Statuses(got)
				if st := statesOf(t, w, sts, first); !slices.Equal(st, []string{"accepted", "failed/equivocation"}) {
					t.Fatalf("first offer's statuses %v, want accepted then failed/equivocation", st)
				}
			})
		})
	}
}

// Durable records (draft "Freshness and Replay", "Asking Again"): with the
// SQLite store, a delegate that restarts answers a retransmission from the
// record with the identical octets of the last status and does not run the
// work again; to a sender the host did not authenticate as the offer's iss
// it resends no status.
func TestRetransmissionAfterRestartSQLite(t *testing.T) {
	for _, f := range formats[:2] {
		t.Run(f.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			dir := t.TempDir()
			tr := sqliteStore(t, filepath.Join(dir, "assistant.db"))
			dl := w.delegator(t, assistantID, tr, f.form)

			st1 := sqliteStore(t, filepath.Join(dir, "planner.db"))
			srv1 := w.serve(t, plannerID, st1, f.form, nil)
			c1 := w.client(t, srv1.url, assistantID, dl, f.enc)
			h, issued, err := dl.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "durable", Dialog: "ctx-durable"})
			if err != nil {
				t.Fatal(err)
			}
			m := say("complete")
			m.ContextID = "ctx-durable"
			r1, err := c1.Send(ctx, issued.Hop, h, m, nil)
			if err != nil {
				t.Fatal(err)
			}
			noRefusals(t, r1)
			if r1.State() != a2a.TaskStateCompleted || len(r1.Statuses) != 2 {
				t.Fatalf("first: %s with %d statuses", r1.State(), len(r1.Statuses))
			}
			last := r1.Statuses[1]
			srv1.close()
			if err := st1.Close(); err != nil {
				t.Fatal(err)
			}

			// The delegate restarts on the same file, behind a new server.
			st2, err := sqlite.Open(ctx, filepath.Join(dir, "planner.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st2.Close() })
			srv2 := w.serve(t, plannerID, st2, f.form, nil)
			c2 := w.client(t, srv2.url, assistantID, dl, f.enc)
			r2, err := c2.Send(ctx, issued.Hop, h, m, nil)
			if err != nil {
				t.Fatal(err)
			}
			noRefusals(t, r2)
			if _, ok := r2.Result.(*a2a.Message); !ok || len(r2.Statuses) != 1 || !bytes.Equal(r2.Statuses[0].Octets, last.Octets) {
				t.Fatalf("after the restart: %T with %d statuses; want a Message with the identical octets of the last status", r2.Result, len(r2.Statuses))
			}
			if n := srv2.agent.runs.Load(); n != 0 {
				t.Fatalf("the restarted agent ran %d times", n)
			}
			// The restarted delegate no longer knows which A2A task
			// carried the hop (kept in memory; a2a-go's default task
			// store is gone too): the answer names none, and the client
			// refuses to poll or cancel by a guessed task (fail safe).
			if m := r2.Result.(*a2a.Message); m.TaskID != "" {
				t.Fatalf("after the restart the answer names task %q, want none", m.TaskID)
			}
			if _, err := c2.Cancel(ctx, issued.Hop); err == nil || !strings.Contains(err.Error(), "no A2A task is known") {
				t.Fatalf("cancel with no task known: %v, want refused before anything is signed", err)
			}

			// The same octets from a sender not authenticated as iss.
			anon, err := a2ahandoff.NewClient(a2aClient(t, srv2.url, ""), dl, a2ahandoff.ClientOptions{Encoding: f.enc})
			if err != nil {
				t.Fatal(err)
			}
			r3, err := anon.Send(ctx, issued.Hop, h, m, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := r3.Result.(*a2a.Message); !ok || len(r3.Statuses) != 0 {
				t.Fatalf("unauthenticated retransmission: %T with %d statuses, want a Message with none (Replay and Freshness)", r3.Result, len(r3.Statuses))
			}
		})
	}
}

// ErrOutcomeUnknown (draft "Knowing the Outcome"): an agent whose error
// says it cannot tell what its work did leaves the hop "accepted" and
// flagged, even where failures take no effect; any other error there is
// "failed" with no effect.
func TestErrOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	st := memStore()
	srv := w.serve(t, plannerID, st, handoff.FormJWS, func(c *a2ahandoff.ServerConfig) { c.NoEffectUnlessCompleted = true })
	plain := a2aClient(t, srv.url, "token-of-"+assistantID)
	now := time.Now().Unix()
	for _, tc := range []struct {
		text    string
		want    store.State
		flagged bool
	}{
		{"error", store.Failed, false},
		{"error-unknown", store.Accepted, true},
	} {
		o := handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-" + tc.text, Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 120}
		m := offerMessage(t, tc.text, o.Dialog, &handoff.Handoff{Offer: w.sign(t, assistantID, o, handoff.FormJWS)}, handoff.JSON)
		res, err := plain.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
		if err != nil {
			t.Fatalf("%s: %v", tc.text, err)
		}
		if task, ok := res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateFailed {
			t.Fatalf("%s: reply %#v, want a FAILED task", tc.text, res)
		}
		rec, err := st.Get(ctx, assistantID, o.Hop)
		if err != nil || rec.State != tc.want {
			t.Fatalf("%s: record %+v (%v), want %s", tc.text, rec, err, tc.want)
		}
		flags, err := st.Flags(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		found := slices.ContainsFunc(flags, func(f store.Flag) bool { return f.Hop == o.Hop })
		if found != tc.flagged {
			t.Errorf("%s: flagged %v, want %v (%+v)", tc.text, found, tc.flagged, flags)
		}
	}
}
