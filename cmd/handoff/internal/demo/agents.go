package demo

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/refs"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The four agents.
const (
	Assistant = "assistant"
	Planner   = "planner"
	Coder     = "coder"
	Tester    = "tester"
)

var names = []string{Assistant, Planner, Coder, Tester}

// idOf is an agent's AgentId.
func idOf(name string) string { return "https://" + name + ".example" }

// nameOf is the agent name of an AgentId ("" if none).
func nameOf(id string) string {
	for _, n := range names {
		if idOf(n) == id {
			return n
		}
	}
	return id
}

// trusts says whose keys each agent's trust file holds: the parties whose
// statuses it checks and the earlier hops of the chains it receives.
var trusts = map[string][]string{
	Assistant: {Planner},
	Planner:   {Assistant, Coder},
	Coder:     {Assistant, Planner, Tester},
	Tester:    {Assistant, Planner, Coder},
}

// AgentInfo describes a running agent, for people exploring it.
type AgentInfo struct {
	Name   string `json:"name"`
	ID     string `json:"id"`     // AgentId
	Serves string `json:"serves"` // A2A, MCP, or "-" (the assistant only delegates)
	URL    string `json:"url"`    // A2A JSON-RPC endpoint, MCP streamable HTTP endpoint, or agent card server
	Key    string `json:"key"`    // private JWK file
	Trust  string `json:"trust"`  // trust file
	Store  string `json:"store"`  // SQLite hop store
	Log    string `json:"log"`    // the servers' log
	Token  string `json:"token"`  // bearer token this agent presents to the others
}

// agent is one of the four, with everything of its own.
type agent struct {
	AgentInfo
	key    *ecdsa.PrivateKey
	signer *handoff.Signer
	keys   *trust.Config // loaded from its own trust file
	st     *sqlite.Store
	ln     net.Listener
	srv    *http.Server
	logf   *os.File
	logger *slog.Logger
}

// World is the four agents running on loopback, and the clients by which
// they talk. Start makes one; Run shows the scenarios; Close ends it.
type World struct {
	dir    string
	agents map[string]*agent
	tokens map[string]string // bearer token -> AgentId

	// The assistant's side: a delegator and its A2A client to the planner,
	// whose HTTP transport can lose a reply.
	asstDl   *delegator.Delegator
	asstA2A  *a2aclient.Client
	asstHand *a2ahandoff.Client
	drop     *dropper

	// The planner: a delegate for the assistant and a delegator for the coder.
	planner     *plannerAgent
	plannerX    *a2ahandoff.Executor
	plannerDl   *delegator.Delegator
	plannerA2A  *a2aclient.Client
	plannerHand *a2ahandoff.Client

	// The coder: a delegate for the planner and a delegator for the tester
	// over one MCP session.
	coder     *coderAgent
	coderX    *a2ahandoff.Executor
	coderDl   *delegator.Delegator
	coderMCP  *mcphandoff.Client
	coderSess *mcp.ClientSession

	// The tester: an MCP server with the handoff middleware.
	tester    *testerTool
	testerSrv *mcphandoff.Server

	cancels chan cancelDown // cancels passed down the chain, from OnCancel

	closeOnce sync.Once
}

// Dir is the temporary directory with the agents' keys, trust files, hop
// stores, logs and bearer tokens.
func (w *World) Dir() string { return w.dir }

// Agents describes the four agents.
func (w *World) Agents() []AgentInfo {
	out := make([]AgentInfo, 0, len(names))
	for _, n := range names {
		out = append(out, w.agents[n].AgentInfo)
	}
	return out
}

// Start starts the four agents on loopback in a new temporary directory:
// for each a P-256 key, a trust file, a SQLite hop store and an HTTP
// listener on 127.0.0.1:0. The planner and coder serve A2A (JSON-RPC), the
// tester serves MCP (streamable HTTP); the assistant serves its agent card
// only, since nobody hands it work. Close stops them and removes the
// directory.
func Start(ctx context.Context) (w *World, err error) {
	dir, err := os.MkdirTemp("", "handoff-demo-")
	if err != nil {
		return nil, err
	}
	w = &World{dir: dir, agents: map[string]*agent{}, tokens: map[string]string{}, cancels: make(chan cancelDown, 8)}
	defer func() {
		if err != nil {
			w.Close()
			w = nil
		}
	}()
	for _, n := range names {
		a, err := w.newAgent(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		w.agents[n] = a
		w.tokens[a.Token] = a.ID
	}
	for _, n := range names {
		if err := w.writeTrust(w.agents[n]); err != nil {
			return nil, fmt.Errorf("%s: trust file: %w", n, err)
		}
	}
	if err := w.writeTokens(); err != nil {
		return nil, err
	}
	if err := w.startTester(ctx); err != nil {
		return nil, fmt.Errorf("tester: %w", err)
	}
	if err := w.startCoder(ctx); err != nil {
		return nil, fmt.Errorf("coder: %w", err)
	}
	if err := w.startPlanner(ctx); err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	if err := w.startAssistant(ctx); err != nil {
		return nil, fmt.Errorf("assistant: %w", err)
	}
	// A hop store refuses offers issued in the second its memory began
	// (the restart rule, decision 14): these stores were made just now, so
	// the demo waits that second out before the first offer.
	var since time.Time
	for _, a := range w.agents {
		s, err := a.st.Since(ctx)
		if err != nil {
			return nil, err
		}
		if s.After(since) {
			since = s
		}
	}
	select {
	case <-time.After(time.Until(since.Truncate(time.Second).Add(time.Second + 10*time.Millisecond))):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return w, nil
}

func (w *World) newAgent(ctx context.Context, name string) (*agent, error) {
	a := &agent{AgentInfo: AgentInfo{Name: name, ID: idOf(name), Serves: "-",
		Key:   filepath.Join(w.dir, name+".jwk"),
		Trust: filepath.Join(w.dir, name+".trust.json"),
		Store: filepath.Join(w.dir, name+".db"),
		Log:   filepath.Join(w.dir, name+".log")}}
	k, err := trust.GenerateKey()
	if err != nil {
		return nil, err
	}
	a.key = k
	if a.signer, err = handoff.NewSigner(k); err != nil {
		return nil, err
	}
	jwk, err := trust.MarshalPrivateJWK(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(a.Key, append(jwk, '\n'), 0o600); err != nil {
		return nil, err
	}
	tok := make([]byte, 18)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	a.Token = base64.RawURLEncoding.EncodeToString(tok)
	if a.st, err = sqlite.Open(ctx, a.Store); err != nil {
		return nil, err
	}
	if a.logf, err = os.OpenFile(a.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
		return nil, err
	}
	a.logger = slog.New(slog.NewTextHandler(a.logf, nil))
	if a.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	a.URL = "http://" + a.ln.Addr().String()
	return a, nil
}

// writeTrust writes the agent's trust file and loads it back: the agent
// trusts what its file says, nothing else.
func (w *World) writeTrust(a *agent) error {
	cfg := trust.New()
	for _, n := range trusts[a.Name] {
		k, err := trust.NewKey(&w.agents[n].key.PublicKey)
		if err != nil {
			return err
		}
		if err := cfg.Add(idOf(n), k); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(a.Trust, append(b, '\n'), 0o644); err != nil {
		return err
	}
	a.keys, err = trust.Load(a.Trust)
	return err
}

func (w *World) writeTokens() error {
	m := map[string]string{}
	for _, n := range names {
		m[idOf(n)] = w.agents[n].Token
	}
	b, err := json.MarshalIndent(map[string]any{"bearer_tokens": m}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(w.dir, "tokens.json"), append(b, '\n'), 0o600)
}

// serve runs h on the agent's listener.
func (a *agent) serve(h http.Handler) {
	a.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn)}
	go a.srv.Serve(a.ln)
}

// card is the agent's A2A agent card.
func (a *agent) card(desc string, serves bool) *a2a.AgentCard {
	c := &a2a.AgentCard{Name: a.Name, Description: desc, URL: a.URL, Version: "demo",
		ProtocolVersion: "0.3.0", PreferredTransport: a2a.TransportProtocolJSONRPC,
		DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: []a2a.AgentSkill{}}
	if serves {
		c.Capabilities.Extensions = []a2a.AgentExtension{a2ahandoff.CardExtension(true)}
	}
	return c
}

func (w *World) newDelegator(a *agent, form handoff.Form, retry delegator.Retry) (*delegator.Delegator, error) {
	return delegator.New(delegator.Config{Me: a.ID, Signer: a.signer, Keys: a.keys, Store: a.st, Form: form, Retry: retry})
}

// saltKey is the DataPart member under which the assistant delivers, with
// the task, the salt of the salted-digest reference its offer makes to the
// task's text (refs[0]). The salt never goes in the signed offer.
const saltKey = "handoff-ref-salt"

// material is the planner's RequestContextInterceptor: it hands the task's
// text and the salt delivered with it to the step 7 reference check
// (refs.WithMaterial), before the Executor runs the receiving checks.
type material struct{}

func (material) Intercept(ctx context.Context, rc *a2asrv.RequestContext) (context.Context, error) {
	if rc.Message == nil {
		return ctx, nil
	}
	m := &refs.Material{Octets: map[int][]byte{}, Salts: map[int][]byte{}}
	for _, p := range rc.Message.Parts {
		switch x := p.(type) {
		case a2a.TextPart:
			if _, ok := m.Octets[0]; !ok {
				m.Octets[0] = []byte(x.Text)
			}
		case a2a.DataPart:
			if s, ok := x.Data[saltKey].(string); ok {
				if salt, err := refs.ParseSalt(s); err == nil {
					m.Salts[0] = salt
				}
			}
		}
	}
	return refs.WithMaterial(ctx, m), nil
}

func (w *World) startAssistant(ctx context.Context) error {
	a := w.agents[Assistant]
	mux := http.NewServeMux()
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(a.card("hands tasks to the planner; takes no work itself", false)))
	a.serve(mux)
	var err error
	// Asks again soon: the demo's lost reply should be recovered in well
	// under a second.
	if w.asstDl, err = w.newDelegator(a, handoff.FormJWS, delegator.Retry{First: 300 * time.Millisecond, Max: time.Second, MaxAttempts: 10}); err != nil {
		return err
	}
	w.drop = &dropper{base: http.DefaultTransport}
	if w.asstA2A, err = a2aClient(ctx, w.agents[Planner].URL, a.Token, &http.Client{Transport: w.drop}); err != nil {
		return err
	}
	w.asstHand, err = a2ahandoff.NewClient(w.asstA2A, w.asstDl, a2ahandoff.ClientOptions{Encoding: handoff.JSON})
	return err
}

func (w *World) startPlanner(ctx context.Context) error {
	a := w.agents[Planner]
	a.Serves = A2A
	var err error
	if w.plannerDl, err = w.newDelegator(a, handoff.FormJWS, delegator.Retry{}); err != nil {
		return err
	}
	if w.plannerA2A, err = a2aClient(ctx, w.agents[Coder].URL, a.Token, &http.Client{}); err != nil {
		return err
	}
	if w.plannerHand, err = a2ahandoff.NewClient(w.plannerA2A, w.plannerDl, a2ahandoff.ClientOptions{Encoding: handoff.JSON}); err != nil {
		return err
	}
	// Prompts are named by salted digest; the planner requires those it
	// is given to match the text delivered with the task (step 7).
	chk, err := refs.NewChecker(refs.Policy{RequireKinds: []string{handoff.KindSaltedDigest}})
	if err != nil {
		return err
	}
	w.planner = newPlannerAgent(w)
	w.plannerX, err = a2ahandoff.NewExecutor(ctx, w.planner, a2ahandoff.ServerConfig{
		Delegate: delegate.Config{
			Options: handoff.Options{Me: a.ID, Keys: a.keys, CheckRefs: chk.Check},
			Store:   a.st, Signer: a.signer,
		},
		Sender: a2ahandoff.UserName,
		// The planner's only effect is its reply: work that did not
		// complete took no effect.
		NoEffectUnlessCompleted: true,
		OnCancel: func(ctx context.Context, iss, hop string, offer handoff.Digest) {
			w.cancelDownA2A(ctx, offer)
		},
	})
	if err != nil {
		return err
	}
	w.serveA2A(a, w.plannerX, "plans a task and hands the coding to the coder", material{})
	return nil
}

func (w *World) startCoder(ctx context.Context) error {
	a := w.agents[Coder]
	a.Serves = A2A
	var err error
	// The coder signs with COSE and sends CBOR Handoffs: the chain the
	// tester checks mixes JWS and COSE elements, octets unchanged.
	if w.coderDl, err = w.newDelegator(a, handoff.FormCOSE, delegator.Retry{}); err != nil {
		return err
	}
	if w.coderMCP, err = mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: w.coderDl, Encoding: handoff.CBOR}); err != nil {
		return err
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: Coder, Version: "demo"}, nil)
	if err := w.coderMCP.Attach(cl); err != nil {
		return err
	}
	tr := w.coderMCP.Transport(&mcp.StreamableClientTransport{Endpoint: w.agents[Tester].URL,
		HTTPClient: &http.Client{Transport: withToken{base: http.DefaultTransport, token: a.Token}}})
	if w.coderSess, err = cl.Connect(ctx, tr, nil); err != nil {
		return err
	}
	w.coder = newCoderAgent(w)
	w.coderX, err = a2ahandoff.NewExecutor(ctx, w.coder, a2ahandoff.ServerConfig{
		Delegate: delegate.Config{
			Options: handoff.Options{Me: a.ID, Keys: a.keys},
			Store:   a.st, Signer: a.signer,
		},
		Sender: a2ahandoff.UserName,
		// The coder's patch is its reply: nothing takes effect unless it
		// completes.
		NoEffectUnlessCompleted: true,
		OnCancel: func(ctx context.Context, iss, hop string, offer handoff.Digest) {
			w.cancelDownMCP(ctx, offer)
		},
	})
	if err != nil {
		return err
	}
	w.serveA2A(a, w.coderX, "writes the code and has the tester run the tests", nil)
	return nil
}

func (w *World) serveA2A(a *agent, x *a2ahandoff.Executor, desc string, ri a2asrv.RequestContextInterceptor) {
	opts := []a2asrv.RequestHandlerOption{a2asrv.WithCallInterceptor(bearerAuth{tokens: w.tokens}), a2asrv.WithLogger(a.logger)}
	if ri != nil {
		opts = append(opts, a2asrv.WithRequestContextInterceptor(ri))
	}
	mux := http.NewServeMux()
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(a.card(desc, true)))
	// StrictHandler in front of the SDK, as the README advises: a Handoff
	// whose JSON is not strict (duplicate members, lone surrogates) is
	// refused before a2a-go's map decoding could hide it.
	mux.Handle("/", a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(a2ahandoff.NewHandler(x, opts...))))
	a.serve(mux)
}

func (w *World) startTester(ctx context.Context) error {
	a := w.agents[Tester]
	a.Serves = MCP
	a.URL += "/mcp"
	// mcphandoff.New builds the delegate with its Stop wired to the
	// server's, so a cancel or equivocation stops the running tool call.
	var err error
	if w.testerSrv, err = mcphandoff.New(ctx, delegate.Config{
		Options: handoff.Options{Me: a.ID, Keys: a.keys},
		Store:   a.st, Signer: a.signer, StatusForm: handoff.FormCOSE,
	}, mcphandoff.ServerConfig{Sender: mcphandoff.TokenUser,
		Report: func(err error) { a.logger.Error("handoff", "err", err) }}); err != nil {
		return err
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: Tester, Version: "demo"}, &mcp.ServerOptions{Logger: a.logger})
	w.tester = newTesterTool()
	mcp.AddTool(srv, &mcp.Tool{Name: "run-tests", Description: "runs a test suite: unit (quick) or full (runs until canceled)"}, w.tester.run)
	if err := w.testerSrv.Attach(srv); err != nil {
		return err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Logger: a.logger})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		id, ok := w.tokens[token]
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: id, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, nil)(mcphandoff.StrictHandler(h)))
	a.serve(mux)
	return nil
}

// Close stops the agents and removes the temporary directory.
func (w *World) Close() error {
	var errs []error
	w.closeOnce.Do(func() {
		// Work still running ends first (the tester's long suite), then
		// the servers and their connections, then the detached OnCancel
		// calls, then the coder's MCP session, whose Close waits for its
		// calls in flight.
		if w.tester != nil {
			close(w.tester.closing)
		}
		for _, n := range names {
			a := w.agents[n]
			if a == nil {
				continue
			}
			if a.srv != nil {
				a.srv.Close()
			} else if a.ln != nil {
				a.ln.Close()
			}
		}
		// The cancels passed down from OnCancel end before what they use
		// (the coder's MCP session, the delegators' hop stores) closes;
		// the planner's cancel to the closed coder fails at once. (The
		// servers take no new request; http.Server.Close does not wait
		// for a handler already running, which could still start one.)
		for _, x := range []*a2ahandoff.Executor{w.plannerX, w.coderX} {
			x.Wait() // a nil Executor (an agent that never started) returns at once
		}
		if w.coderSess != nil {
			w.coderSess.Close()
		}
		if w.testerSrv != nil {
			w.testerSrv.Wait()
		}
		for _, n := range names {
			a := w.agents[n]
			if a == nil {
				continue
			}
			if a.st != nil {
				errs = append(errs, a.st.Close())
			}
			if a.logf != nil {
				a.logf.Close()
			}
		}
		errs = append(errs, os.RemoveAll(w.dir))
	})
	return errors.Join(errs...)
}
