package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// want is the verdict each scenario must show, as structured steps: for
// every scenario, the steps that carry its point (draft sections named).
var want = map[string][]Step{
	// "Checking a Chain": the chain grows hop by hop, verified at each.
	"chain": {
		{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Verdict: "accepted", Chain: "absent"},
		{From: Planner, To: Coder, What: "offer", Carrier: A2A, Verdict: "accepted", Chain: "full"},
		{From: Coder, To: Tester, What: "offer", Carrier: MCP, Verdict: "accepted", Chain: "full"},
		{From: Tester, To: Coder, What: "status", Carrier: MCP, Verdict: "completed"},
		{From: Coder, To: Planner, What: "status", Carrier: A2A, Verdict: "completed", Task: "COMPLETED"},
		{From: Planner, To: Assistant, What: "status", Carrier: A2A, Verdict: "completed", Task: "COMPLETED"},
	},
	// "Replay and Freshness" / D5: the same octets are a retransmission,
	// answered from the record in a Message: no task is made.
	"replay": {{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Verdict: "retransmission", Task: noTask}},
	// "Forks, Concurrency, and Equivocation": other octets, same (iss, hop).
	"equivocation": {{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Verdict: "equivocation", Task: "REJECTED"}},
	// Step 2: the audience.
	"wrong-audience": {{From: Planner, To: Coder, What: "copy", Carrier: A2A, Verdict: "rejected", Reason: "wrong-audience", Task: "REJECTED"}},
	// D6: prev links.
	"broken-chain": {{From: Coder, To: Tester, What: "offer", Carrier: MCP, Verdict: "rejected", Reason: "broken-chain"}},
	// "Asking Again".
	"lost-status": {
		{From: Planner, To: Assistant, What: "status", Carrier: A2A, Verdict: "lost"},
		{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Verdict: "retransmission"},
		{From: Planner, To: Assistant, What: "status", Carrier: A2A, Verdict: "completed", Task: noTask},
	},
	// "Lifecycle": "canceled" follows the chain down; A2A CANCELED, MCP
	// notifications/cancelled.
	"cancel": {
		{From: Assistant, To: Planner, What: "cancel", Carrier: A2A, Verdict: "canceled", Task: "CANCELED"},
		{From: Planner, To: Coder, What: "cancel", Carrier: A2A, Verdict: "canceled", Task: "CANCELED"},
		{From: Coder, To: Tester, What: "cancel", Carrier: MCP, Verdict: "canceled"},
		{From: Tester, To: Coder, What: "status", Carrier: MCP, Verdict: "failed"},
	},
}

// matches reports whether got has the fields w sets.
func matches(got, w Step) bool {
	return got.From == w.From && got.To == w.To && got.What == w.What && got.Carrier == w.Carrier &&
		got.Verdict == w.Verdict && (w.Reason == "" || got.Reason == w.Reason) &&
		(w.Chain == "" || got.Chain == w.Chain) && (w.Task == "" || got.Task == w.Task)
}

// The whole demo runs to completion over the real servers, and its
// timeline holds every scenario with its expected verdicts.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	tl, err := Run(ctx, Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		os.Stdout.Write(out.Bytes())
	}
	if !tl.OK() {
		for _, s := range tl.Failed() {
			t.Errorf("scenario %s failed: %s", s.Name, s.Err)
		}
		for _, s := range tl.Steps {
			if !s.OK {
				t.Errorf("%s: %s → %s %s: %s", s.Scenario, s.From, s.To, s.What, s.Problem)
			}
		}
	}
	var names []string
	for _, s := range tl.Scenarios {
		names = append(names, s.Name)
	}
	if got, wantNames := strings.Join(names, ","), strings.Join(ScenarioNames(), ","); got != wantNames {
		t.Fatalf("scenarios %s, want %s", got, wantNames)
	}
	for name, steps := range want {
		got := tl.StepsOf(name)
		// The wanted steps appear in this order among the scenario's steps.
		i := 0
		for _, g := range got {
			if i < len(steps) && matches(g, steps[i]) {
				if !g.OK {
					t.Errorf("%s: step %+v matched but is not OK: %s", name, g, g.Problem)
				}
				i++
			}
		}
		if i < len(steps) {
			t.Errorf("%s: no step like %+v in %+v", name, steps[i], got)
		}
	}
	if tl.Elapsed > 30*time.Second {
		t.Errorf("the demo took %s", tl.Elapsed)
	}
	// The printed timeline names every scenario and uses no ANSI colour
	// unless asked.
	for _, n := range ScenarioNames() {
		if !strings.Contains(out.String(), n) {
			t.Errorf("the printed timeline lacks %s", n)
		}
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("ANSI escapes without Options.Color")
	}
}

// The JSON lines form: one object per line, every step among them.
func TestPrinterJSON(t *testing.T) {
	var out bytes.Buffer
	r := &recorder{p: printer{w: &out, json: true}}
	r.p.header([]AgentInfo{{Name: Planner, Serves: A2A}})
	r.begin("replay", "t")
	r.step(Step{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Verdict: "retransmission", Want: "retransmission"})
	r.step(Step{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Verdict: "accepted", Want: "retransmission"})
	r.p.summary(&r.tl)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines: %s", len(lines), out.String())
	}
	var s Step
	if err := json.Unmarshal([]byte(lines[2]), &s); err != nil {
		t.Fatal(err)
	}
	if s.OK || s.Scenario != "replay" || !strings.Contains(s.Problem, `want "retransmission"`) {
		t.Fatalf("a step with the wrong verdict: %+v", s)
	}
	if r.tl.OK() || len(r.tl.Failed()) != 1 {
		t.Fatalf("the timeline is OK with a wrong verdict")
	}
}

// Stopping the demo while work runs (Ctrl-C during the cancel scenario,
// or with --keep) ends promptly and removes the directory.
func TestCloseWhileWorking(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.offerToPlanner(ctx, "storage", "Refactor the storage layer", &a2a.MessageSendConfig{Blocking: new(false)}); err != nil {
		w.Close()
		t.Fatal(err)
	}
	select {
	case <-w.tester.started:
	case <-ctx.Done():
		w.Close()
		t.Fatal("the work never reached the tester")
	}
	done := make(chan error, 1)
	go func() { done <- w.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs while the tester's suite runs")
	}
	if _, err := os.Stat(w.Dir()); !os.IsNotExist(err) {
		t.Fatalf("%s left behind: %v", w.Dir(), err)
	}
}

// The text timeline: aligned columns, a failed step says what was
// unexpected, and the summary names the failed scenarios; colour only
// when asked.
func TestPrinterText(t *testing.T) {
	for _, color := range []bool{false, true} {
		var out bytes.Buffer
		r := &recorder{p: printer{w: &out, color: color}}
		r.begin("replay", "the same offer again")
		r.step(Step{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Verdict: "accepted", Want: "retransmission", Why: "processed twice"})
		r.begin("chain", "the chain")
		r.step(Step{From: Planner, To: Coder, What: "offer", Carrier: A2A, Verdict: "accepted", Want: "accepted"}, "", check(false, "chain %s, want full", "partial"))
		r.p.summary(&r.tl)
		s := out.String()
		for _, want := range []string{
			"1. replay",
			`unexpected: verdict "accepted", want "retransmission"`,
			"unexpected: chain partial, want full",
			"2 of 2 scenarios did not give their expected verdicts: replay, chain",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("color %v: %q not in\n%s", color, want, s)
			}
		}
		if strings.Contains(s, "\x1b[") != color {
			t.Errorf("color %v: ANSI escapes %v", color, !color)
		}
	}
}

// The demo's servers stand behind the strict handlers (D3: a JSON Handoff
// with a duplicate member name is bad-signature, and must be refused
// before the SDKs' map decoding lets the last duplicate win): a Handoff
// whose offer member is given twice is refused by the planner (A2A) and the tester (MCP) as a JSON-RPC error,
// and no work starts.
func TestServersRefuseLaxJSON(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// The StrictHandlers look at the JSON only; the offers need no signature.
	lax := `{"offer":"aGVhZA.Ym9keQ.c2ln","offer":"aGVhZA.Ym9keQ.c2lnMg"}`
	post := func(url, token, body string) (code int, msg string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Result json.RawMessage
			Error  *struct {
				Code    int
				Message string
			}
		}
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &out); err != nil || out.Error == nil || out.Result != nil {
			t.Fatalf("%s answered %s, want a JSON-RPC error", url, b)
		}
		return out.Error.Code, out.Error.Message
	}
	planner, tester := w.agents[Planner], w.agents[Tester]
	code, msg := post(planner.URL, w.agents[Assistant].Token,
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"lax-1","role":"user",`+
			`"contextId":"ctx-lax","parts":[{"kind":"text","text":"do it"}],"extensions":["`+a2ahandoff.URI+`"],`+
			`"metadata":{"`+a2ahandoff.Key+`":`+lax+`}}}}`)
	if code != -32600 || !strings.Contains(msg, "duplicate") {
		t.Errorf("planner (A2A): error %d %q, want -32600 naming the duplicate", code, msg)
	}
	code, msg = post(tester.URL, w.agents[Coder].Token,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run-tests","arguments":{"suite":"unit"},`+
			`"_meta":{"`+mcphandoff.Key+`":`+lax+`}}}`)
	if code != mcphandoff.CodeNotStrict || !strings.Contains(msg, "duplicate") {
		t.Errorf("tester (MCP): error %d %q, want %d naming the duplicate", code, msg, mcphandoff.CodeNotStrict)
	}
	select {
	case <-w.tester.started:
		t.Error("the tester's suite started")
	default:
	}
}
