package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// TestGatewaySenderMustBeIss: with policy.sender_must_be_iss, a copy of
// the planner's offer delivered first, in a message of its own, by a
// caller inbound does not authenticate as the planner (the first-delivery
// hijack, docs/threat-model.md section 4) is refused before the upstream,
// with no status and no record; the planner's own delivery that follows
// is taken, and the upstream runs the planner's message only (decision
// 104).
func TestGatewaySenderMustBeIss(t *testing.T) {
	r := newRigTop(t, "reject", true, "inbound: {bearer_tokens_file: tokens.json}\npolicy: {sender_must_be_iss: true}\n")
	ctx := context.Background()
	now := time.Now().Unix()
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-h", Task: "run the tests", Iss: "https://planner.example",
		Aud: "https://coder.example", Iat: now, Exp: now + 60}
	el, err := r.planner.SignOffer(o, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(token, who string) a2a.SendMessageResult {
		t.Helper()
		_, ac := r.client(t, token)
		m := msg("complete")
		m.ContextID, m.Metadata = "ctx-h", map[string]any{"who": who}
		if err := a2ahandoff.AttachHandoff(m, &handoff.Handoff{Offer: el}, handoff.JSON); err != nil {
			t.Fatal(err)
		}
		res, err := ac.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
		if err != nil {
			t.Fatalf("%s's delivery: %v", who, err)
		}
		return res
	}

	res := deliver("", "mallory")
	if task, ok := res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateRejected {
		t.Fatalf("a delivery by an unauthenticated caller: %#v, want a rejected task", res)
	}
	if sts, _ := a2ahandoff.Statuses(res); len(sts) != 0 {
		t.Fatalf("the refused delivery carried %d signed statuses, want none", len(sts))
	}
	if n := r.agent.runs.Load(); n != 0 {
		t.Fatalf("the upstream ran %d times for the refused delivery", n)
	}
	if _, err := r.gw.store.Get(ctx, o.Iss, o.Hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused delivery was recorded: %v", err)
	}

	res = deliver(plannerToken, "planner")
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("the planner's delivery after the refused one: %#v, want completed", res)
	}
	if sts, errs := a2ahandoff.Statuses(res); len(sts) == 0 || len(errs) != 0 {
		t.Fatalf("the planner's delivery: %d statuses, errors %v", len(sts), errs)
	}
	if n := r.agent.runs.Load(); n != 1 {
		t.Fatalf("the upstream ran %d times, want once", n)
	}
	if who := (<-r.agent.saw)["who"]; who != "planner" {
		t.Fatalf("the upstream ran %v's message, want the planner's", who)
	}
	if rec, err := r.gw.store.Get(ctx, o.Iss, o.Hop); err != nil || rec.State != store.Completed {
		t.Fatalf("the hop's record: %+v %v, want completed", rec, err)
	}
	if n := testutil.ToFloat64(r.gw.metrics.answers.WithLabelValues("coder", "rejected", "policy")); n != 1 {
		t.Errorf("rejected/policy answers counted %v, want 1", n)
	}
	// The log names who brought each delivery and why the copy was refused.
	var refused, taken bool
	for _, line := range strings.Split(r.logs.String(), "\n") {
		refused = refused || strings.Contains(line, "verdict=rejected") && strings.Contains(line, `sender=""`) && strings.Contains(line, "authenticated as the offer's iss")
		taken = taken || strings.Contains(line, "verdict=accepted") && strings.Contains(line, "sender=https://planner.example")
	}
	if !refused || !taken {
		t.Errorf("log lines of the refused copy (%v) and of the planner's delivery (%v) with their senders missing:\n%s", refused, taken, r.logs.String())
	}
}

// TestMCPGatewaySenderMustBeIss is the same over MCP: the planner's offer
// for its session, posted first into that session by a caller with no
// token, is refused as a tool error without a status, before the tool
// runs and with no record; the planner's own call with it then runs the
// tool once.
func TestMCPGatewaySenderMustBeIss(t *testing.T) {
	r := newMCPRigTop(t, "without_handoff: reject", "inbound: {bearer_tokens_file: tokens.json}\npolicy: {sender_must_be_iss: true}\n")
	ctx := context.Background()
	_, cs := r.connect(t, plannerToken, nil)
	h, hop := r.offer(t, cs, "run the tests")
	v, err := mcphandoff.HandoffValue(h, handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	meta, err := json.Marshal(map[string]any{mcphandoff.Key: v})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run-tests","arguments":{"mode":"ok"},"_meta":` + string(meta) + `}}`
	resp := r.post(t, cs.ID(), body)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), `"isError":true`) || !strings.Contains(string(raw), "policy") || strings.Contains(string(raw), `"status"`) {
		t.Fatalf("a call by a caller with no token: %s, want a tool error (policy) with no status", raw)
	}
	if n := r.tools.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times for the refused call", n)
	}
	if _, err := r.gw.store.Get(ctx, "https://planner.example", hop); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused call was recorded: %v", err)
	}
	p := call("ok")
	p.Meta = mcp.Meta{mcphandoff.Key: v}
	res, err := cs.CallTool(ctx, p)
	if err != nil || res.IsError {
		t.Fatalf("the planner's call after the refused one: %+v %v", res, err)
	}
	if n := r.tools.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}
}

// TestReloadKeepsInboundUnderSenderMustBeIss: policy.sender_must_be_iss
// is a restart key, so a reload whose file drops both it and inbound
// would run the option with no way to authenticate anyone (every offer
// refused): that reload fails, and the running configuration stays, its
// tokens included (found by review).
func TestReloadKeepsInboundUnderSenderMustBeIss(t *testing.T) {
	dir, write := exampleDir(t)
	write("tokens.json", `{"`+plannerToken+`": "https://planner.example"}`)
	doc := `listen: 127.0.0.1:0
identity: {id: "https://coder.example", key_file: coder.jwk}
trust_file: trust.json
store: sqlite:hops.db
inbound: {bearer_tokens_file: tokens.json}
policy: {sender_must_be_iss: true}
routes:
  - {name: tools, protocol: mcp, path: /tools/, upstream: "http://127.0.0.1:1/mcp"}
`
	path := filepath.Join(dir, "gateway.yaml")
	write("gateway.yaml", doc)
	s := serveFile(t, path)
	write("gateway.yaml", strings.Replace(strings.Replace(doc, "inbound: {bearer_tokens_file: tokens.json}\n", "", 1), "policy: {sender_must_be_iss: true}\n", "", 1))
	if err := s.Reload(path); err == nil || !strings.Contains(err.Error(), "sender_must_be_iss stays on until a restart") {
		t.Fatalf("a reload dropping inbound under sender_must_be_iss: %v, want it refused", err)
	}
	if run := s.cfg.Load(); !run.Policy.SenderMustBeIss || run.Inbound.BearerTokensFile == "" || len(*s.tokens.Load()) != 1 {
		t.Fatalf("after the refused reload: policy %+v, inbound %+v, %d tokens; want the running configuration kept", run.Policy, run.Inbound, len(*s.tokens.Load()))
	}
	// Dropping only the option keeps inbound: taken, and the option
	// itself changes at the next restart (a restart key).
	write("gateway.yaml", strings.Replace(doc, "policy: {sender_must_be_iss: true}\n", "", 1))
	if err := s.Reload(path); err != nil {
		t.Fatalf("a reload keeping inbound: %v", err)
	}
	next, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if ks := restartKeys(s.cfg.Load(), next); !slices.Contains(ks, "policy.sender_must_be_iss") {
		t.Errorf("restart keys %v, want policy.sender_must_be_iss among them", ks)
	}
	if red, err := s.cfg.Load().Redacted(); err != nil || !regexp.MustCompile(`"sender_must_be_iss":\s*true`).Match(red) {
		t.Errorf("the effective configuration does not show the running option: %s %v", red, err)
	}
}
