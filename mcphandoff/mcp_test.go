package mcphandoff_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

const (
	planner = "https://planner.example"
	tester  = "https://tester.example"
	coder   = "https://coder.example"
	other   = "https://other.example"
)

// env is one delegate (the tester, an MCP server behind bearer-token
// authentication, with a SQLite hop store) and one delegator (the planner,
// an MCP client), over real HTTP on loopback.
type env struct {
	t       *testing.T
	form    handoff.Form
	keys    *trust.Config
	signers map[string]*handoff.Signer
	dstore  *sqlite.Store
	dbPath  string
	d       *delegate.Delegate
	srv     *mcphandoff.Server
	ms      *mcp.Server // the tester's MCP server, with srv attached
	url     string
	dl      *delegator.Delegator
	hc      *mcphandoff.Client
	cs      *mcp.ClientSession

	runs    atomic.Int32                    // times the tool ran
	entered chan string                     // hop of each run, when the tool starts
	release chan struct{}                   // closed to let a blocked run complete
	stopped chan string                     // hop of each run stopped by its context
	quality map[string]handoff.ChainQuality // by hop, as the tool saw it
	reports []error
	mu      sync.Mutex
}

// clock runs the delegator 2 s ahead: a delegate refuses, as "replay",
// offers issued in the same second its store's memory began (restart
// rule), and the store is created just before the first offer.
func ahead() time.Time { return time.Now().Add(2 * time.Second) }

func newEnv(t *testing.T, form handoff.Form, enc handoff.Encoding) *env {
	t.Helper()
	return newEnvWith(t, form, enc, envOptions{})
}

// envOptions vary the delegate and its HTTP handler.
type envOptions struct {
	// requireFullChain is the delegate's "require full chain" policy (D7).
	requireFullChain bool
	// stateless serves MCP statelessly (StreamableHTTPOptions.Stateless):
	// no Mcp-Session-Id, a session per request, and the only transport on
	// which go-sdk v1.8.0 serves protocol 2026-07-28 (SEP-2575), so a
	// client that connects with the default options negotiates it.
	stateless bool
	// wrap, if set, is the hop store the delegate uses, around the real
	// one (to order concurrent deliveries).
	wrap func(store.Store) store.Store
	// stop, if set, is the delegate's own Config.Stop, which New chains
	// after the Server's.
	stop func(iss, hop string)
	// server, if set, changes the ServerConfig.
	server func(*mcphandoff.ServerConfig)
	// unwired builds the Server with NewServer around a delegate whose
	// Config.Stop is only stop: the delegate's stops do not reach the
	// Server (what New arranges does not hold).
	unwired bool
}

func newEnvWith(t *testing.T, form handoff.Form, enc handoff.Encoding, opt envOptions) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, form: form, keys: trust.New(), signers: map[string]*handoff.Signer{},
		entered: make(chan string, 64), release: make(chan struct{}), stopped: make(chan string, 16), quality: map[string]handoff.ChainQuality{}}
	for _, id := range []string{planner, coder, tester, other} {
		k, err := trust.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		e.addKey(id, k)
	}
	var err error
	e.dbPath = filepath.Join(t.TempDir(), "tester.db")
	if e.dstore, err = sqlite.Open(ctx, e.dbPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.dstore.Close() })
	var st store.Store = e.dstore
	if opt.wrap != nil {
		st = opt.wrap(st)
	}
	sc := mcphandoff.ServerConfig{Sender: mcphandoff.TokenUser,
		Report: func(err error) { e.mu.Lock(); e.reports = append(e.reports, err); e.mu.Unlock() }}
	if opt.server != nil {
		opt.server(&sc)
	}
	dc := delegate.Config{Options: handoff.Options{Me: tester, Keys: e.keys, RequireFullChain: opt.requireFullChain},
		Store: st, Signer: e.signers[tester], StatusForm: form, Stop: opt.stop}
	if opt.unwired {
		if sc.Delegate, err = delegate.New(ctx, dc); err != nil {
			t.Fatal(err)
		}
		e.srv, err = mcphandoff.NewServer(sc)
	} else {
		// New chains the delegate's Config.Stop to the Server's Stop.
		e.srv, err = mcphandoff.New(ctx, dc, sc)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.d = e.srv.Delegate()
	ms := mcp.NewServer(&mcp.Implementation{Name: "tester", Version: "1"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "run-tests"}, e.tool)
	if err := e.srv.Attach(ms); err != nil {
		t.Fatal(err)
	}
	e.ms = ms
	tokens := map[string]string{"planner-token": planner, "coder-token": coder, "stranger-token": "https://stranger.example"}
	verify := func(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		u, ok := tokens[tok]
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: u, Expiration: time.Now().Add(time.Hour)}, nil
	}
	h := auth.RequireBearerToken(verify, nil)(mcphandoff.StrictHandler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms },
		&mcp.StreamableHTTPOptions{Stateless: opt.stateless})))
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		e.srv.Wait()
		hs.Close()
	})
	e.url = hs.URL

	if e.dl, err = delegator.New(delegator.Config{Me: planner, Signer: e.signers[planner], Keys: e.keys,
		Store: store.NewMemory(time.Now()), Form: form, Now: ahead}); err != nil {
		t.Fatal(err)
	}
	e.hc, e.cs = e.connect(e.dl, enc, "planner-token")
	return e
}

func (e *env) addKey(id string, k *ecdsa.PrivateKey) {
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.keys.Add(id, tk); err != nil {
		e.t.Fatal(err)
	}
	if e.signers[id], err = handoff.NewSigner(k); err != nil {
		e.t.Fatal(err)
	}
}

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connect opens an MCP session to the tester with the SDK's streamable
// HTTP client, with the handoff client attached and the transport given
// through Client.Transport (mrtr_test.go uses Client.HTTPClient).
func (e *env) connect(dl *delegator.Delegator, enc handoff.Encoding, token string) (*mcphandoff.Client, *mcp.ClientSession) {
	e.t.Helper()
	hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: dl, Encoding: enc})
	if err != nil {
		e.t.Fatal(err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "planner", Version: "1"}, nil)
	if err := hc.Attach(cl); err != nil {
		e.t.Fatal(err)
	}
	base := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	cs, err := cl.Connect(context.Background(), hc.Transport(&mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: base}), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return hc, cs
}

type args struct {
	Mode string `json:"mode"` // ok, fail, block, error
}

// tool is the tester's MCP tool: it counts its runs and, by mode,
// completes, fails (declaring no effect), blocks until released or
// stopped, or returns an error without declaring the outcome.
func (e *env) tool(ctx context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
	e.runs.Add(1)
	hop := mcphandoff.HopFrom(ctx)
	if hop == nil {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "plain"}}}, nil, nil
	}
	e.entered <- hop.ID
	e.mu.Lock()
	e.quality[hop.ID] = hop.ChainQuality
	e.mu.Unlock()
	switch a.Mode {
	case "fail":
		if err := hop.Declare(delegate.Outcome{State: store.Failed, Detail: "3 tests failed", NoEffect: true}); err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "3 tests failed"}}}, nil, nil
	case "block":
		select {
		case <-e.releaseCh():
		case <-ctx.Done():
			e.stopped <- hop.ID
			if err := hop.Declare(delegate.Outcome{State: store.Failed, Detail: "stopped before running", NoEffect: true}); err != nil {
				return nil, nil, err
			}
			return nil, nil, ctx.Err()
		}
	case "error":
		return nil, nil, errors.New("the test runner crashed")
	case "ask":
		// A multi-round-trip tool (SEP-2322): the first round asks which
		// suite to run, the retry carries the answer.
		ans, ok := req.Params.InputResponses["suite"].(*mcp.ElicitResult)
		if !ok {
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"suite": &mcp.ElicitParams{Mode: "form", Message: "which suite?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"suite": map[string]any{"type": "string"}}}}}}, nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("suite %v passed", ans.Content["suite"])}}}, nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "all tests passed"}}}, nil, nil
}

// gate returns a new release channel for the blocking runs that start
// after it; closing it lets them complete.
func (e *env) gate() chan struct{} {
	c := make(chan struct{})
	e.mu.Lock()
	e.release = c
	e.mu.Unlock()
	return c
}

func (e *env) releaseCh() chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.release
}

func (e *env) offer(dl *delegator.Delegator, aud, work string) (*handoff.Handoff, *store.Issued) {
	e.t.Helper()
	h, hop, err := dl.Offer(context.Background(), delegator.Offer{Aud: aud, Dialog: e.cs.ID(), Work: work})
	if err != nil {
		e.t.Fatal(err)
	}
	return h, hop
}

func call(mode string) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: "run-tests", Arguments: args{Mode: mode}}
}

// callCarrying is call(mode) with v, a Handoff as the wire carries it,
// under Key: sent with the plain SDK call, as a client that does not track
// the hop (or sends what it likes) would.
func callCarrying(mode string, v any) *mcp.CallToolParams {
	p := call(mode)
	p.Meta = mcp.Meta{mcphandoff.Key: v}
	return p
}

func statusOf(t *testing.T, r *mcphandoff.Reply) *handoff.Status {
	t.Helper()
	if r == nil || r.Status == nil {
		t.Fatalf("no status in the result's _meta: %+v", r)
	}
	_, st, err := handoff.UnsafeDecode(*r.Status)
	if err != nil || st == nil {
		t.Fatalf("status does not decode: %v", err)
	}
	return st
}

func textOf(r *mcp.CallToolResult) string {
	var b bytes.Buffer
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func wait[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// wantRecord fails unless the delegate's record of hop is canceled (or
// not) and in state; note ends the failure message.
func (e *env) wantRecord(t *testing.T, hop string, canceled bool, state store.State, note string) {
	t.Helper()
	rec, err := e.dstore.Get(context.Background(), planner, hop)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Canceled != canceled || rec.State != state {
		t.Fatalf("record: canceled %v, state %s%s", rec.Canceled, rec.State, note)
	}
}

// wantUnknownOutcome fails unless the delegate's only flag is the
// unknown outcome of hop (draft "Knowing the Outcome": the hop stays
// accepted, flagged, never guessed).
func (e *env) wantUnknownOutcome(t *testing.T, hop string) {
	t.Helper()
	flags, err := e.d.Flags(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) != 1 || flags[0].Kind != store.FlagUnknownOutcome || flags[0].Hop != hop {
		t.Fatalf("flags: %+v", flags)
	}
}

// callResult is what Client.Call returned on startBlocking's goroutine.
type callResult struct {
	r   *mcphandoff.Reply
	err error
}

// startBlocking sends h over cs with call("block") on a goroutine of its
// own and returns once the tool has started under the hop: first delivers
// what Call returned, and closing release lets the run complete.
func (e *env) startBlocking(t *testing.T, hc *mcphandoff.Client, cs *mcp.ClientSession, h *handoff.Handoff) (first <-chan callResult, release chan struct{}) {
	t.Helper()
	release = e.gate()
	done := make(chan callResult, 1)
	go func() {
		r, err := hc.Call(context.Background(), cs, call("block"), h)
		done <- callResult{r, err}
	}()
	// Earlier runs whose start nobody took may be queued ahead: wait for
	// this hop's own.
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil {
		t.Fatal(err)
	}
	for wait(t, e.entered, "the tool to start") != o.Hop {
	}
	return done, release
}

// waitReply waits for the call startBlocking started, which must not
// fail, and returns its reply.
func waitReply(t *testing.T, c <-chan callResult, what string) *mcphandoff.Reply {
	t.Helper()
	res := wait(t, c, what)
	if res.err != nil {
		t.Error(res.err)
	}
	return res.r
}

// cancelRunning cancels hop, whose call (first, from startBlocking) is
// running in the tool, with the delegator's signed "canceled" over cs
// (draft "Carrying the Element", MCP; D9), and checks that the status is
// the planner's "canceled", that the call ends with context.Canceled and
// that the tool's work stopped. It returns the status once the server's
// work is over.
func (e *env) cancelRunning(t *testing.T, hc *mcphandoff.Client, cs *mcp.ClientSession, hop string, first <-chan callResult) handoff.Element {
	t.Helper()
	st, err := hc.Cancel(context.Background(), cs, hop)
	if err != nil {
		t.Fatal(err)
	}
	if _, s, _ := handoff.UnsafeDecode(st); s.State != handoff.StateCanceled || s.Iss != planner {
		t.Fatalf("cancel status %+v", s)
	}
	if err := wait(t, first, "the canceled call").err; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled call returned %v", err)
	}
	if got := wait(t, e.stopped, "the work to stop"); got != hop {
		t.Fatalf("stopped %s, want %s", got, hop)
	}
	e.srv.Wait()
	return st
}

var matrix = []struct {
	name string
	form handoff.Form
	enc  handoff.Encoding
}{
	{"JWS/JSON", handoff.FormJWS, handoff.JSON},
	{"JWS/CBOR", handoff.FormJWS, handoff.CBOR},
	{"COSE/JSON", handoff.FormCOSE, handoff.JSON},
	{"COSE/CBOR", handoff.FormCOSE, handoff.CBOR},
}

// TestStatuses runs every status the draft defines over real MCP traffic,
// for each signed form and Handoff encoding.
func TestStatuses(t *testing.T) {
	for _, m := range matrix {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, m.form, m.enc)
			ctx := context.Background()

			t.Run("completed; a retransmission gets the identical octets and the tool does not run again", func(t *testing.T) {
				// draft "Asking Again": a retransmission is not processed again;
				// the last status is resent as the identical octets.
				h, hop := e.offer(e.dl, tester, "completed")
				r, err := e.hc.Call(ctx, e.cs, call("ok"), h)
				if err != nil {
					t.Fatal(err)
				}
				if r.State != handoff.StateCompleted || r.Result.IsError || !r.Hop.Resolved || r.Hop.View != store.ViewComplete {
					t.Fatalf("state %s, IsError %v, hop %+v", r.State, r.Result.IsError, r.Hop)
				}
				if st := statusOf(t, r); st.Iss != tester || st.Aud != planner || !st.Offer.Equal(h.Offer.Digest()) {
					t.Fatalf("status parties/offer: %+v", st)
				}
				runs := e.runs.Load()
				again, err := e.hc.Ask(ctx, e.cs, hop.Hop)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again.Status.Octets, r.Status.Octets) {
					t.Fatal("the retransmission's status differs from the first")
				}
				if e.runs.Load() != runs {
					t.Fatal("the tool ran again for a retransmission")
				}
				if textOf(again.Result) != "all tests passed" {
					t.Fatalf("the retransmission lost the result: %q", textOf(again.Result))
				}
				<-e.entered
			})

			t.Run("passed on: the chain arrives with its octets, checked full", func(t *testing.T) {
				// draft "Checking a Chain": the planner's offer to the coder
				// travels as the chain of the coder's offer to the tester.
				h1, _, err := e.dl.Offer(ctx, delegator.Offer{Aud: coder, Dialog: "a2a-context-1", Work: "build #42"})
				if err != nil {
					t.Fatal(err)
				}
				cd, err := delegator.New(delegator.Config{Me: coder, Signer: e.signers[coder], Keys: e.keys,
					Store: store.NewMemory(time.Now()), Form: m.form, Now: ahead})
				if err != nil {
					t.Fatal(err)
				}
				hc, cs := e.connect(cd, m.enc, "coder-token")
				h2, hop2, err := cd.Offer(ctx, delegator.Offer{Aud: tester, Dialog: cs.ID(), Work: "test #42", From: h1})
				if err != nil {
					t.Fatal(err)
				}
				r, err := hc.Call(ctx, cs, call("ok"), h2)
				if err != nil {
					t.Fatal(err)
				}
				<-e.entered
				e.mu.Lock()
				q := e.quality[hop2.Hop]
				e.mu.Unlock()
				if q != handoff.ChainFull || r.State != handoff.StateCompleted {
					t.Fatalf("chain %s, state %s", q, r.State)
				}
			})

			t.Run("failed, declared by the tool with no effect", func(t *testing.T) {
				h, _ := e.offer(e.dl, tester, "failed")
				r, err := e.hc.Call(ctx, e.cs, call("fail"), h)
				if err != nil {
					t.Fatal(err)
				}
				if r.State != handoff.StateFailed || !r.Result.IsError || !r.Hop.Resolved || r.Hop.View != store.ViewFailed {
					t.Fatalf("state %s, IsError %v, hop %+v", r.State, r.Result.IsError, r.Hop)
				}
				<-e.entered
			})

			rejections := []struct {
				name   string
				make   func() *handoff.Handoff
				reason handoff.Reason // "" : no status (step 1, unaddressable)
			}{
				{"wrong audience (step 2)", func() *handoff.Handoff { h, _ := e.offer(e.dl, other, "elsewhere"); return h }, handoff.ReasonWrongAudience},
				{"stale (step 3)", func() *handoff.Handoff {
					old, err := delegator.New(delegator.Config{Me: planner, Signer: e.signers[planner], Keys: e.keys,
						Store: store.NewMemory(time.Now()), Form: m.form, Now: func() time.Time { return time.Now().Add(-10 * time.Minute) }})
					if err != nil {
						t.Fatal(err)
					}
					h, _ := e.offer(old, tester, "stale")
					return h
				}, handoff.ReasonStale},
				{"bad signature (step 1)", func() *handoff.Handoff {
					h, _ := e.offer(e.dl, tester, "tampered")
					b := bytes.Clone(h.Offer.Octets)
					// Inside the signature, both forms; a JWS keeps to the
					// base64url alphabet (else it is not a JWS at all, and
					// Handoff.Encode refuses to carry it).
					switch i := len(b) - 3; {
					case h.Offer.Form != handoff.FormJWS:
						b[i] ^= 0x01
					case b[i] == 'A':
						b[i] = 'B'
					default:
						b[i] = 'A'
					}
					return &handoff.Handoff{Offer: handoff.Element{Form: h.Offer.Form, Octets: b}}
				}, ""},
				{"policy: dialog of another session (step 5)", func() *handoff.Handoff {
					h, _, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Dialog: "another-session", Work: "dialog"})
					if err != nil {
						t.Fatal(err)
					}
					return h
				}, handoff.ReasonPolicy},
			}
			for _, c := range rejections {
				t.Run("rejected: "+c.name, func(t *testing.T) {
					runs := e.runs.Load()
					h := c.make()
					v, err := mcphandoff.HandoffValue(h, m.enc)
					if err != nil {
						t.Fatal(err)
					}
					// Sent as a delegator that does not track the hop would:
					// the plain SDK call with the Handoff under the key.
					res, err := e.cs.CallTool(ctx, callCarrying("ok", v))
					if err != nil {
						t.Fatal(err)
					}
					if !res.IsError {
						t.Fatal("a rejection is not a tool error")
					}
					if e.runs.Load() != runs {
						t.Fatal("the tool ran for a rejected offer")
					}
					sv, has := res.Meta[mcphandoff.Key]
					if c.reason == "" {
						if has {
							t.Fatal("a step-1 rejection carries a status (decision 12: none)")
						}
						return
					}
					el, _, err := mcphandoff.StatusFrom(map[string]any{mcphandoff.Key: sv})
					if err != nil {
						t.Fatal(err)
					}
					_, st, err := handoff.UnsafeDecode(el)
					if err != nil || st.State != handoff.StateRejected || st.Reason != c.reason {
						t.Fatalf("status %+v, %v; want rejected %s", st, err, c.reason)
					}
				})
			}

			t.Run("rejected stale: Intake verifies it and the hop keeps its state", func(t *testing.T) {
				// Its clock is 10 minutes slow; its skew lets it accept the
				// delegate's statuses, stamped with the real time.
				old, err := delegator.New(delegator.Config{Me: planner, Signer: e.signers[planner], Keys: e.keys, Skew: 20 * time.Minute,
					Store: store.NewMemory(time.Now()), Form: m.form, Now: func() time.Time { return time.Now().Add(-10 * time.Minute) }})
				if err != nil {
					t.Fatal(err)
				}
				hc, cs := e.connect(old, m.enc, "planner-token")
				h, _ := e.offer(old, tester, "stale-tracked")
				r, err := hc.Call(ctx, cs, call("ok"), h)
				if err != nil {
					t.Fatal(err)
				}
				// draft "Forks, Concurrency, and Equivocation": a stale
				// rejection never sets the hop's state.
				if r.State != handoff.StateRejected || r.Reason != handoff.ReasonStale || r.Hop.View != store.Offered || r.Hop.Resolved {
					t.Fatalf("state %s %s, hop %+v", r.State, r.Reason, r.Hop)
				}
			})

			t.Run("a retransmission while the work runs gets accepted", func(t *testing.T) {
				h, hop := e.offer(e.dl, tester, "running")
				first, release := e.startBlocking(t, e.hc, e.cs, h)
				runs := e.runs.Load()
				r, err := e.hc.Ask(ctx, e.cs, hop.Hop)
				if err != nil {
					t.Fatal(err)
				}
				if r.State != handoff.StateAccepted || r.Hop.View != store.ViewAccepted || r.Hop.Resolved {
					t.Fatalf("state %s, hop %+v", r.State, r.Hop)
				}
				close(release)
				done := waitReply(t, first, "the first call")
				if done == nil || done.State != handoff.StateCompleted || !done.Hop.Resolved {
					t.Fatalf("first call: %+v", done)
				}
				if e.runs.Load() != runs {
					t.Fatal("the tool ran twice")
				}
				again, err := e.hc.Ask(ctx, e.cs, hop.Hop)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again.Status.Octets, done.Status.Octets) {
					t.Fatal("the retransmission after completion is not the completed status's octets")
				}
			})

			t.Run("equivocation: the second offer is refused with no status, the first's work stops and fails", func(t *testing.T) {
				h, hop := e.offer(e.dl, tester, "equivocated")
				first, _ := e.startBlocking(t, e.hc, e.cs, h)
				o, _, _ := handoff.UnsafeDecode(h.Offer)
				o2 := *o
				o2.Iat++
				el, err := e.signers[planner].SignOffer(&o2, m.form)
				if err != nil {
					t.Fatal(err)
				}
				v, _ := mcphandoff.HandoffValue(&handoff.Handoff{Offer: el}, m.enc)
				res, err := e.cs.CallTool(ctx, callCarrying("ok", v))
				if err != nil {
					t.Fatal(err)
				}
				if _, has := res.Meta[mcphandoff.Key]; has || !res.IsError {
					t.Fatalf("second offer: IsError %v, status present %v", res.IsError, has)
				}
				wait(t, e.stopped, "the first offer's work to stop")
				r := waitReply(t, first, "the first call")
				// The work was taken and stopped: "failed" with reason
				// equivocation, naming the first offer.
				if r == nil || r.State != handoff.StateFailed || r.Reason != handoff.ReasonEquivocation || !statusOf(t, r).Offer.Equal(h.Offer.Digest()) {
					t.Fatalf("first call: %+v", r)
				}
				flags, err := e.d.Flags(ctx, false)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, f := range flags {
					found = found || (f.Kind == store.FlagEquivocation && f.Hop == hop.Hop)
				}
				if !found {
					t.Fatal("no equivocation flag")
				}
			})

			t.Run("canceled via notifications/cancelled stops the work; asking again learns the outcome", func(t *testing.T) {
				h, hop := e.offer(e.dl, tester, "canceled")
				first, _ := e.startBlocking(t, e.hc, e.cs, h)
				e.cancelRunning(t, e.hc, e.cs, hop.Hop, first)
				e.wantRecord(t, hop.Hop, true, store.Failed, "")
				// The cancel leaves the hop unresolved until the delegate's
				// outcome arrives by asking again.
				r, err := e.hc.Ask(ctx, e.cs, hop.Hop)
				if err != nil {
					t.Fatal(err)
				}
				if r.State != handoff.StateFailed || !r.Hop.Resolved {
					t.Fatalf("after cancel: state %s, hop %+v", r.State, r.Hop)
				}
			})
		})
	}
}

// TestLostReplyRecoveredByAsking: the caller gives up before the tool
// finishes (the reply is lost); the work goes on, its outcome is recorded,
// and the retransmitter learns it (draft "Asking Again": a delegator over
// MCP learns later statuses by retransmitting).
func TestLostReplyRecoveredByAsking(t *testing.T) {
	for _, enc := range []handoff.Encoding{handoff.JSON, handoff.CBOR} {
		t.Run(enc.String(), func(t *testing.T) {
			e := newEnv(t, handoff.FormJWS, enc)
			ctx := context.Background()
			h, hop := e.offer(e.dl, tester, "lost")
			release := e.gate()
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if _, err := e.hc.Call(short, e.cs, call("block"), h); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call: %v", err)
			}
			close(release)
			e.srv.Wait()
			// What delegator.RunRetransmitter calls for each due hop.
			send := e.hc.Retransmitter(e.cs)
			if err := send(ctx, delegator.Ask{Hop: hop}); err != nil {
				t.Fatal(err)
			}
			r, err := e.hc.Ask(ctx, e.cs, hop.Hop)
			if err != nil {
				t.Fatal(err)
			}
			if r.State != handoff.StateCompleted || !r.Hop.Resolved || textOf(r.Result) != "all tests passed" {
				t.Fatalf("state %s, hop %+v, result %q", r.State, r.Hop, textOf(r.Result))
			}
			if n := e.runs.Load(); n != 1 {
				t.Fatalf("tool ran %d times", n)
			}
		})
	}
}

// TestUnauthenticatedRetransmission: a resent status goes only to a sender
// the host authenticated as the offer's iss (draft "Replay and Freshness").
func TestUnauthenticatedRetransmission(t *testing.T) {
	for _, enc := range []handoff.Encoding{handoff.JSON, handoff.CBOR} {
		t.Run(enc.String(), func(t *testing.T) {
			e := newEnv(t, handoff.FormJWS, enc)
			ctx := context.Background()
			h, hop := e.offer(e.dl, tester, "copied")
			if _, err := e.hc.Call(ctx, e.cs, call("ok"), h); err != nil {
				t.Fatal(err)
			}
			hc, cs := e.connect(e.dl, enc, "stranger-token")
			if _, err := hc.Ask(ctx, cs, hop.Hop); !errors.Is(err, mcphandoff.ErrNotSent) {
				t.Fatalf("Ask of a hop this client never sent: %v", err)
			}
			v, _ := mcphandoff.HandoffValue(h, enc)
			res, err := cs.CallTool(ctx, callCarrying("ok", v))
			if err != nil {
				t.Fatal(err)
			}
			if _, has := res.Meta[mcphandoff.Key]; has {
				t.Fatal("a replay from an unauthenticated sender got the status")
			}
			if n := e.runs.Load(); n != 1 {
				t.Fatalf("tool ran %d times", n)
			}
		})
	}
}

// TestUnknownOutcome: a tool error without a declared outcome is not a
// failure (draft "Knowing the Outcome"): the hop stays accepted, flagged.
func TestUnknownOutcome(t *testing.T) {
	e := newEnv(t, handoff.FormCOSE, handoff.CBOR)
	ctx := context.Background()
	h, hop := e.offer(e.dl, tester, "crash")
	r, err := e.hc.Call(ctx, e.cs, call("error"), h)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != handoff.StateAccepted || r.Hop.Resolved || !r.Result.IsError {
		t.Fatalf("state %s, hop %+v", r.State, r.Hop)
	}
	e.wantUnknownOutcome(t, hop.Hop)
}

// TestPlainCalls: a tools/call without a handoff is refused unless the
// server allows plain calls; other traffic passes untouched.
func TestPlainCalls(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	res, err := e.cs.CallTool(ctx, call("ok"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || e.runs.Load() != 0 {
		t.Fatalf("plain call: IsError %v, runs %d", res.IsError, e.runs.Load())
	}
	if _, err := e.cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []any{42, "not base64url!", map[string]any{"offer": 7}, nil} {
		res, err := e.cs.CallTool(ctx, callCarrying("ok", bad))
		if err != nil {
			t.Fatal(err)
		}
		if _, has := res.Meta[mcphandoff.Key]; has || !res.IsError || e.runs.Load() != 0 {
			t.Fatalf("malformed %v: IsError %v, runs %d", bad, res.IsError, e.runs.Load())
		}
	}

	srv, err := mcphandoff.NewServer(mcphandoff.ServerConfig{Delegate: e.d, AllowPlain: true})
	if err != nil {
		t.Fatal(err)
	}
	ms := mcp.NewServer(&mcp.Implementation{Name: "open", Version: "1"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "run-tests"}, e.tool)
	if err := srv.Attach(ms); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil))
	defer hs.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err = cs.CallTool(ctx, call("ok"))
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || textOf(res) != "plain" {
		t.Fatalf("allowed plain call: %v %q", res.IsError, textOf(res))
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := mcphandoff.NewServer(mcphandoff.ServerConfig{}); err == nil {
		t.Fatal("NewServer without a delegate")
	}
	if _, err := mcphandoff.NewClient(mcphandoff.ClientConfig{}); err == nil {
		t.Fatal("NewClient without a delegator")
	}
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	if err := e.hc.Attach(mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil)); err == nil {
		t.Fatal("a Client attached twice")
	}
	// A second, different offer for a hop this client sent is refused
	// before it leaves (no equivocation from this side).
	h, _ := e.offer(e.dl, tester, "once")
	if _, err := e.hc.Call(context.Background(), e.cs, call("ok"), h); err != nil {
		t.Fatal(err)
	}
	o, _, _ := handoff.UnsafeDecode(h.Offer)
	o.Iat++
	el, _ := e.signers[planner].SignOffer(o, handoff.FormJWS)
	if _, err := e.hc.Call(context.Background(), e.cs, call("ok"), &handoff.Handoff{Offer: el}); err == nil {
		t.Fatal("the client sent a second offer for one hop")
	}
}

// TestRestartAnswersFromRecord: a delegate that restarts (a new process on
// the same SQLite file) answers a retransmission from its record with the
// identical status octets and does not run the tool (draft "Freshness and
// Replay": the last status is kept in storage that survives a restart).
// The delegator, restarted too, resends with Call and the same Handoff.
func TestRestartAnswersFromRecord(t *testing.T) {
	e := newEnv(t, handoff.FormCOSE, handoff.CBOR)
	ctx := context.Background()
	h, _ := e.offer(e.dl, tester, "durable")
	first, err := e.hc.Call(ctx, e.cs, call("ok"), h)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Wait()

	s2, err := sqlite.Open(ctx, e.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	d2, err := delegate.New(ctx, delegate.Config{Options: handoff.Options{Me: tester, Keys: e.keys},
		Store: s2, Signer: e.signers[tester], StatusForm: handoff.FormCOSE})
	if err != nil {
		t.Fatal(err)
	}
	srv2, err := mcphandoff.NewServer(mcphandoff.ServerConfig{Delegate: d2, Sender: mcphandoff.TokenUser})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	ms := mcp.NewServer(&mcp.Implementation{Name: "tester", Version: "2"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "run-tests"}, func(context.Context, *mcp.CallToolRequest, args) (*mcp.CallToolResult, any, error) {
		runs.Add(1)
		return &mcp.CallToolResult{}, nil, nil
	})
	if err := srv2.Attach(ms); err != nil {
		t.Fatal(err)
	}
	verify := func(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		if tok != "planner-token" {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: planner, Expiration: time.Now().Add(time.Hour)}, nil
	}
	hs := httptest.NewServer(auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil)))
	t.Cleanup(hs.Close) // after the session's own cleanup (LIFO)
	e.url = hs.URL
	hc, cs := e.connect(e.dl, handoff.CBOR, "planner-token")
	again, err := hc.Call(ctx, cs, call("ok"), h)
	if err != nil {
		t.Fatal(err)
	}
	if again.Status == nil || !bytes.Equal(again.Status.Octets, first.Status.Octets) {
		t.Fatal("after the restart the status is not the identical octets")
	}
	if runs.Load() != 0 {
		t.Fatal("the restarted delegate ran the tool for a retransmission")
	}
}

// TestForgedCancelIgnored: a "canceled" that does not verify (signed by
// another agent's key in the delegator's name) neither stops the work nor
// marks the hop (D9); the error goes to Report.
func TestForgedCancelIgnored(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	h, hop := e.offer(e.dl, tester, "forged-cancel")
	first, release := e.startBlocking(t, e.hc, e.cs, h)
	forged, err := e.signers[other].SignStatus(&handoff.Status{Offer: h.Offer.Digest(), Iss: planner, Aud: tester,
		Iat: time.Now().Unix(), State: handoff.StateCanceled}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	// The notification as the SDK hands it to the receiving middleware.
	mw := e.srv.Middleware()(func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, nil })
	if _, err := mw(ctx, "notifications/cancelled", &mcp.ServerRequest[*mcp.CancelledParams]{
		Params: &mcp.CancelledParams{Meta: mcp.Meta{mcphandoff.Key: mcphandoff.StatusValue(forged)}, RequestID: 99}}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	reported := len(e.reports)
	e.mu.Unlock()
	if reported != 1 {
		t.Fatalf("%d errors reported, want the forged cancel's", reported)
	}
	rec, err := e.dstore.Get(ctx, planner, hop.Hop)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Canceled {
		t.Fatal("a forged cancel marked the hop canceled")
	}
	close(release)
	if r := waitReply(t, first, "the call"); r == nil || r.State != handoff.StateCompleted {
		t.Fatalf("the work did not complete: %+v", r)
	}
}
