package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"time"
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
	// "Replay and Freshness" / D5: the same octets are a retransmission.
	"replay": {{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Verdict: "retransmission"}},
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
		{From: Planner, To: Assistant, What: "status", Carrier: A2A, Verdict: "completed"},
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
