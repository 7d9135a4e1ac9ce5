package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Carriers: the host protocol that carried a step.
const (
	A2A = "A2A"
	MCP = "MCP"
)

// Step is one line of the timeline: one message through the real servers
// and what its receiver made of it.
type Step struct {
	Scenario string `json:"scenario"`
	From     string `json:"from"`    // agent name: assistant, planner, coder, tester
	To       string `json:"to"`      // agent name
	What     string `json:"what"`    // offer, status, cancel, copy, replay, ...
	Carrier  string `json:"carrier"` // A2A or MCP
	// Verdict is what the receiver made of it: for an offer the receiving
	// checks' outcome (accepted, rejected, retransmission, equivocation),
	// for a status its verified state (completed, canceled, ...), "lost"
	// for a reply the network dropped.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"` // the draft's reason, for a rejection
	Chain   string `json:"chain,omitempty"`  // chain quality (D7), for an accepted offer
	// Task is the A2A task state the reply carried, "(message)" when the
	// A2A answer was a Message (no task was made), "" for MCP steps and
	// steps that show no A2A answer.
	Task    string `json:"task_state,omitempty"`
	Why     string `json:"why,omitempty"` // for people
	Want    string `json:"want"`          // the verdict this step must give
	OK      bool   `json:"ok"`
	Problem string `json:"problem,omitempty"` // why it is not OK
}

// Scenario is one thing the demo shows, with whether every step of it gave
// its expected verdict.
type Scenario struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	OK    bool   `json:"ok"`
	Err   string `json:"error,omitempty"` // why it did not run to its end
	Steps int    `json:"steps"`
}

// Timeline is what a run of the demo showed.
type Timeline struct {
	Steps     []Step        `json:"steps"`
	Scenarios []Scenario    `json:"scenarios"`
	Elapsed   time.Duration `json:"elapsed_ns"`
}

// OK reports whether every scenario gave its expected verdicts.
func (t *Timeline) OK() bool { return len(t.Failed()) == 0 && len(t.Scenarios) > 0 }

// Failed lists the scenarios that did not.
func (t *Timeline) Failed() []Scenario {
	var out []Scenario
	for _, s := range t.Scenarios {
		if !s.OK {
			out = append(out, s)
		}
	}
	return out
}

// StepsOf returns the steps of one scenario, in order.
func (t *Timeline) StepsOf(scenario string) []Step {
	var out []Step
	for _, s := range t.Steps {
		if s.Scenario == scenario {
			out = append(out, s)
		}
	}
	return out
}

// recorder builds the timeline and prints it as it grows.
type recorder struct {
	mu  sync.Mutex
	tl  Timeline
	cur int // index of the running scenario
	p   printer
}

func (r *recorder) begin(name, title string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tl.Scenarios = append(r.tl.Scenarios, Scenario{Name: name, Title: title, OK: true})
	r.cur = len(r.tl.Scenarios) - 1
	r.p.scenario(len(r.tl.Scenarios), name, title)
}

// step records s. It is OK when its verdict is the one wanted and no
// problem was found; problems are the extra checks a step makes
// (identical octets, the agent not run again), "" for a check that held.
func (r *recorder) step(s Step, problems ...string) {
	var ps []string
	for _, p := range problems {
		if p != "" {
			ps = append(ps, p)
		}
	}
	if s.Verdict != s.Want {
		ps = append([]string{fmt.Sprintf("verdict %q, want %q", s.Verdict, s.Want)}, ps...)
	}
	s.OK = len(ps) == 0
	s.Problem = strings.Join(ps, "; ")
	r.mu.Lock()
	defer r.mu.Unlock()
	sc := &r.tl.Scenarios[r.cur]
	s.Scenario = sc.Name
	sc.Steps++
	if !s.OK {
		sc.OK = false
	}
	r.tl.Steps = append(r.tl.Steps, s)
	r.p.step(s)
}

// fail ends the running scenario early.
func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sc := &r.tl.Scenarios[r.cur]
	sc.OK = false
	sc.Err = err.Error()
	r.p.failure(sc.Name, err)
}

// printer writes the timeline: aligned text (with ANSI colour when asked)
// or JSON lines.
type printer struct {
	w     io.Writer
	json  bool
	color bool
}

const (
	ansiReset = "\x1b[0m"
	ansiBold  = "\x1b[1m"
	ansiDim   = "\x1b[2m"
	ansiRed   = "\x1b[31m"
	ansiGreen = "\x1b[32m"
	ansiCyan  = "\x1b[36m"
)

func (p printer) paint(code, s string) string {
	if !p.color || s == "" {
		return s
	}
	return code + s + ansiReset
}

func (p printer) line(v any) {
	if p.w == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	p.w.Write(append(b, '\n'))
}

func (p printer) printf(format string, args ...any) {
	if p.w != nil {
		fmt.Fprintf(p.w, format, args...)
	}
}

func (p printer) header(agents []AgentInfo) {
	if p.json {
		p.line(map[string]any{"agents": agents})
		return
	}
	p.printf("%s\n", p.paint(ansiBold, "handoff demo: four agents on loopback, each with its own P-256 key, trust file and SQLite hop store"))
	for _, a := range agents {
		p.printf("  %-9s  %-3s  %-26s  %s\n", a.Name, a.Serves, a.URL, p.paint(ansiDim, a.ID))
	}
}

func (p printer) scenario(n int, name, title string) {
	if p.json {
		return
	}
	p.printf("\n%s %s\n", p.paint(ansiBold, fmt.Sprintf("%d. %s", n, name)), p.paint(ansiDim, "- "+title))
}

func (p printer) step(s Step) {
	if p.json {
		p.line(s)
		return
	}
	verdict := s.Verdict
	if s.Reason != "" {
		verdict += " (" + s.Reason + ")"
	}
	mark := "ok"
	code := ansiGreen
	if !s.OK {
		mark, code = "!!", ansiRed
	}
	// Pad before painting, so that escape codes do not upset the columns.
	p.printf("   %s %-9s → %-9s %-6s %s %s %s\n",
		p.paint(code, mark), s.From, s.To, s.What, p.paint(ansiCyan, fmt.Sprintf("%-3s", s.Carrier)),
		p.paint(code, fmt.Sprintf("%-25s", verdict)), p.paint(ansiDim, s.Why))
	if !s.OK {
		p.printf("      %s\n", p.paint(ansiRed, "unexpected: "+s.Problem))
	}
}

func (p printer) failure(name string, err error) {
	if p.json {
		p.line(map[string]any{"scenario": name, "error": err.Error()})
		return
	}
	p.printf("   %s %s\n", p.paint(ansiRed, "!!"), p.paint(ansiRed, "scenario stopped: "+err.Error()))
}

func (p printer) summary(tl *Timeline) {
	if p.json {
		failed := []string{}
		for _, s := range tl.Failed() {
			failed = append(failed, s.Name)
		}
		p.line(struct {
			OK        bool     `json:"ok"`
			Scenarios int      `json:"scenarios"`
			Failed    []string `json:"failed"`
			Elapsed   string   `json:"elapsed"`
		}{tl.OK(), len(tl.Scenarios), failed, tl.Elapsed.Round(time.Millisecond).String()})
		return
	}
	if tl.OK() {
		p.printf("\n%s\n", p.paint(ansiGreen, fmt.Sprintf("all %d scenarios gave their expected verdicts (%s)", len(tl.Scenarios), tl.Elapsed.Round(10*time.Millisecond))))
		return
	}
	var names []string
	for _, s := range tl.Failed() {
		names = append(names, s.Name)
	}
	p.printf("\n%s\n", p.paint(ansiRed, fmt.Sprintf("%d of %d scenarios did not give their expected verdicts: %s", len(names), len(tl.Scenarios), strings.Join(names, ", "))))
}
