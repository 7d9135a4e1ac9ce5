package demo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// seen is what an agent's own code learned of the hops it was given: the
// verified hop, how often its code ran and how many of those runs ended,
// and the hop it passed the work on as, with the last reply from
// downstream.
type seen struct {
	mu    sync.Mutex
	hops  map[string]*a2ahandoff.Hop
	runs  map[string]int
	ended map[string]int               // runs whose Execute returned
	downs map[string]string            // received hop -> hop passed on
	reply map[string]*a2ahandoff.Reply // hop passed on -> last reply (A2A)
	tool  map[string]*mcphandoff.Reply // hop passed on -> reply (MCP)
}

func newSeen() seen {
	return seen{hops: map[string]*a2ahandoff.Hop{}, runs: map[string]int{}, ended: map[string]int{}, downs: map[string]string{},
		reply: map[string]*a2ahandoff.Reply{}, tool: map[string]*mcphandoff.Reply{}}
}

func (s *seen) ran(h *a2ahandoff.Hop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.Result != nil {
		s.hops[h.ID] = h
	}
	s.runs[h.ID]++
}

// end notes that a run of the agent's code for hop returned.
func (s *seen) end(hop string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended[hop]++
}

// stopped waits, at most within, until every run of the agent's code for
// hop has returned, and reports whether they all did.
func (s *seen) stopped(ctx context.Context, hop string, within time.Duration) bool {
	deadline := time.After(within)
	for {
		s.mu.Lock()
		done := s.runs[hop] > 0 && s.ended[hop] == s.runs[hop]
		s.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *seen) hop(id string) (*a2ahandoff.Hop, int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hops[id], s.runs[id], s.downs[id]
}

// downOf waits until the agent's code noted the hop it passed the
// received hop on as (it notes it once the downstream reply arrived).
func (s *seen) downOf(ctx context.Context, hop string) (string, error) {
	for {
		if _, _, down := s.hop(hop); down != "" {
			return down, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("hop %s was not passed on: %w", hop, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func textOf(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	for _, p := range m.Parts {
		if t, ok := p.(a2a.TextPart); ok {
			return t.Text
		}
	}
	return ""
}

func reply(text string) *a2a.Message {
	return a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: text})
}

// plannerAgent is the planner's own code, an ordinary a2a-go agent. An
// estimate it answers itself; any other task it passes on to the coder
// (a new offer whose prev names the one it received, the chain carried)
// and follows the coder's task until it ends.
type plannerAgent struct {
	w *World
	seen
}

func newPlannerAgent(w *World) *plannerAgent { return &plannerAgent{w: w, seen: newSeen()} }

func (p *plannerAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	h := a2ahandoff.HopFrom(ctx)
	if h == nil {
		return fmt.Errorf("planner: no hop in the context")
	}
	p.ran(h)
	defer p.end(h.ID)
	text := textOf(rc.Message)
	if strings.HasPrefix(text, "Estimate") {
		return q.Write(ctx, reply("about two hours"))
	}
	// Not blocking: the reply names the coder's task at once, so that a
	// cancel can follow it down while the coder works.
	r, err := p.w.plannerHand.Offer(ctx, delegator.Offer{Aud: idOf(Coder), Dialog: h.Offer.Dialog,
		Work: "code for hop " + h.ID, From: h.Handoff},
		a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "Implement: " + text}),
		&a2a.MessageSendConfig{Blocking: new(false)})
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.downs[h.ID] = r.Hop
	p.reply[r.Hop] = r
	p.mu.Unlock()
	for r.Task == nil || !r.Task.Status.State.Terminal() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if r, err = p.w.plannerHand.Poll(ctx, r.Hop); err != nil {
			return err
		}
		p.mu.Lock()
		p.reply[r.Hop] = r
		p.mu.Unlock()
	}
	if r.Task.Status.State != a2a.TaskStateCompleted {
		return fmt.Errorf("the coder's task ended %s", r.Task.Status.State)
	}
	// The task's text is quoted back, so that whoever hands a task over by
	// hand (try.sh) sees it arrived as sent.
	return q.Write(ctx, reply(fmt.Sprintf("plan for %q done; coder: %s", text, textOf(r.Task.Status.Message))))
}

func (p *plannerAgent) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	return nil // tasks taken with a handoff are canceled by the Executor
}

// coderAgent is the coder's own code: it writes the patch and has the
// tester run the tests over MCP, passing the hop on with the chain.
type coderAgent struct {
	w *World
	seen
}

func newCoderAgent(w *World) *coderAgent { return &coderAgent{w: w, seen: newSeen()} }

func (c *coderAgent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	h := a2ahandoff.HopFrom(ctx)
	if h == nil {
		return fmt.Errorf("coder: no hop in the context")
	}
	c.ran(h)
	defer c.end(h.ID)
	suite := "unit"
	if strings.Contains(textOf(rc.Message), "storage layer") {
		suite = "full" // a long suite: it runs until it is canceled
	}
	hh, iss, err := c.w.coderDl.Offer(ctx, delegator.Offer{Aud: idOf(Tester), Dialog: c.w.coderSess.ID(),
		Work: "tests for hop " + h.ID, From: h.Handoff})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.downs[h.ID] = iss.Hop
	c.mu.Unlock()
	r, err := c.w.coderMCP.Call(ctx, c.w.coderSess, &mcp.CallToolParams{Name: "run-tests", Arguments: map[string]any{"suite": suite}}, hh)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.tool[iss.Hop] = r
	c.mu.Unlock()
	if r.State != handoff.StateCompleted {
		return fmt.Errorf("the tests ended %q", r.State)
	}
	return q.Write(ctx, reply("patch ready; tester: "+toolText(r.Result)))
}

func (c *coderAgent) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	return nil
}

func toolText(r *mcp.CallToolResult) string {
	if r == nil {
		return ""
	}
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return ""
}

// testerTool is the tester's MCP tool. The "full" suite runs until its
// work is stopped by a verified cancel, and then declares that nothing
// took effect.
type testerTool struct {
	mu      sync.Mutex
	runs    map[string]int
	quality map[string]handoff.ChainQuality
	chains  map[string]int    // earlier offers in the Handoff's chain
	forms   map[string]string // signed forms of the chain and offer
	encs    map[string]string // the Handoff's encoding in _meta: CBOR (a base64url string) or JSON (an object)
	started chan string       // hops of "full" runs, once running
	stopped chan string       // hops of "full" runs, once stopped
	closing chan struct{}     // closed when the demo stops: running suites end
}

type suiteArgs struct {
	Suite string `json:"suite" jsonschema:"unit or full"`
}

func newTesterTool() *testerTool {
	return &testerTool{runs: map[string]int{}, quality: map[string]handoff.ChainQuality{}, chains: map[string]int{},
		forms: map[string]string{}, encs: map[string]string{},
		started: make(chan string, 4), stopped: make(chan string, 4), closing: make(chan struct{})}
}

func (t *testerTool) run(ctx context.Context, req *mcp.CallToolRequest, in suiteArgs) (*mcp.CallToolResult, any, error) {
	hop := mcphandoff.HopFrom(ctx)
	if hop == nil {
		return nil, nil, fmt.Errorf("tester: no hop in the context")
	}
	t.mu.Lock()
	t.runs[hop.ID]++
	t.quality[hop.ID] = hop.ChainQuality
	t.forms[hop.ID] = formsOf(hop.Handoff)
	if hop.Handoff != nil {
		t.chains[hop.ID] = len(hop.Handoff.Chain)
	}
	t.encs[hop.ID] = encodingIn(req)
	t.mu.Unlock()
	if in.Suite == "full" {
		note(t.started, hop.ID)
		detail := "stopped by the delegator's cancel before any test ran"
		select {
		case <-ctx.Done(): // only a verified cancel (or an equivocation) ends it
		case <-t.closing:
			detail = "stopped before any test ran: the demo ended"
		}
		note(t.stopped, hop.ID)
		if err := hop.Declare(delegate.Outcome{State: store.Failed, NoEffect: true, Detail: detail}); err != nil {
			return nil, nil, err
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "stopped: canceled"}}}, nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "12 tests passed"}}}, nil, nil
}

// note sends v on c unless c is full: nobody may be listening (a task
// handed over by hand while the agents are kept running).
func note[T any](c chan T, v T) {
	select {
	case c <- v:
	default:
	}
}

func (t *testerTool) ran(hop string) (int, handoff.ChainQuality) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[hop], t.quality[hop]
}

// received is what the tester's tool saw of a hop's Handoff: the signed
// forms of its chain and offer, how many earlier offers its chain
// carried, and its encoding in the call's _meta.
func (t *testerTool) received(hop string) (forms string, chain int, enc string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.forms[hop], t.chains[hop], t.encs[hop]
}

// encodingIn names the encoding of the Handoff in a tools/call's _meta
// (mcphandoff.HandoffValue): a string is a base64url CBOR Handoff, an
// object a JSON one.
func encodingIn(req *mcp.CallToolRequest) string {
	if req == nil || req.Params == nil {
		return "none"
	}
	switch req.Params.Meta[mcphandoff.Key].(type) {
	case string:
		return "CBOR"
	case map[string]any:
		return "JSON"
	case nil:
		return "none"
	}
	return fmt.Sprintf("%T", req.Params.Meta[mcphandoff.Key])
}

// formsOf names the signed forms of a Handoff's chain and offer, oldest
// first: "JWS, JWS, COSE".
func formsOf(h *handoff.Handoff) string {
	if h == nil {
		return ""
	}
	var fs []string
	for _, el := range h.Chain {
		fs = append(fs, el.Form.String())
	}
	return strings.Join(append(fs, h.Offer.Form.String()), ", ")
}

// cancelDown is one cancel an agent passed down the chain, from its
// OnCancel.
type cancelDown struct {
	from, carrier string
	hop           string            // the hop canceled downstream
	a2a           *a2ahandoff.Reply // the delegate's answer over A2A
	err           error
}

// cancelDownA2A is the planner's OnCancel: a verified "canceled" for the
// offer it received cancels every offer it passed on (delegator
// CancelDown), each sent in a Cancel Task request to the coder.
func (w *World) cancelDownA2A(ctx context.Context, offer handoff.Digest) {
	ds, err := w.plannerDl.CancelDown(ctx, offer)
	if err != nil {
		note(w.cancels, cancelDown{from: Planner, carrier: A2A, err: err})
		return
	}
	for _, d := range ds {
		r, err := w.plannerHand.SendCancel(ctx, d.Hop.Hop, d.Cancel)
		note(w.cancels, cancelDown{from: Planner, carrier: A2A, hop: d.Hop.Hop, a2a: r, err: err})
	}
}

// cancelDownMCP is the coder's OnCancel: the same, over MCP, where the
// signed "canceled" travels in notifications/cancelled.
func (w *World) cancelDownMCP(ctx context.Context, offer handoff.Digest) {
	ds, err := w.coderDl.CancelDown(ctx, offer)
	if err != nil {
		note(w.cancels, cancelDown{from: Coder, carrier: MCP, err: err})
		return
	}
	for _, d := range ds {
		err := w.coderMCP.SendCancel(ctx, w.coderSess, d.Hop.Hop, d.Cancel)
		note(w.cancels, cancelDown{from: Coder, carrier: MCP, hop: d.Hop.Hop, err: err})
	}
}
