package demo

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/refs"
	"github.com/quantumlearningmachines/handoff/store"
)

// Options configure how a run is shown.
type Options struct {
	Out   io.Writer // the live timeline; nil shows nothing
	JSON  bool      // JSON lines (one object per step) instead of text
	Color bool      // ANSI colour in the text
}

// scenario is one thing the demo shows.
type scenario struct {
	name, title string
	run         func(w *World, ctx context.Context, r *recorder) error
}

// Scenarios, in the order they run. Names are stable: tests and scripts
// look them up.
var scenarios = []scenario{
	{"chain", "a task goes assistant → planner → coder → tester; the chain grows and is verified at every hop", (*World).chain},
	{"replay", "the same offer sent again is answered from the record", (*World).replay},
	{"equivocation", "another offer with the same iss and hop is refused", (*World).equivocation},
	{"wrong-audience", "an offer copied to an agent it was not meant for is refused", (*World).wrongAudience},
	{"broken-chain", "a hop removed from the chain is detected", (*World).brokenChain},
	{"lost-status", "a status lost on the way back is recovered by asking again", (*World).lostStatus},
	{"cancel", "a cancel from the assistant follows the chain down", (*World).cancel},
}

// ScenarioNames lists the scenarios in the order they run.
func ScenarioNames() []string {
	out := make([]string, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.name
	}
	return out
}

// perScenario bounds one scenario, so that a hang is reported, not waited
// for.
const perScenario = 20 * time.Second

// Run shows every scenario through the running agents, printing the
// timeline as it grows, and returns it.
func (w *World) Run(ctx context.Context, o Options) *Timeline {
	start := time.Now()
	r := &recorder{p: printer{w: o.Out, json: o.JSON, color: o.Color}}
	r.p.header(w.Agents())
	for _, s := range scenarios {
		r.begin(s.name, s.title)
		sctx, cancel := context.WithTimeout(ctx, perScenario)
		err := s.run(w, sctx, r)
		cancel()
		if err != nil {
			r.fail(err)
		}
	}
	r.tl.Elapsed = time.Since(start)
	r.p.summary(&r.tl)
	return &r.tl
}

// Run starts the agents, shows every scenario and stops them.
func Run(ctx context.Context, o Options) (*Timeline, error) {
	w, err := Start(ctx)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	return w.Run(ctx, o), nil
}

// offerToPlanner hands a task to the planner over A2A: the offer names the
// task's text by a salted digest (refs[0]), and the salt travels with the
// text in the message, never in the offer.
func (w *World) offerToPlanner(ctx context.Context, work, text string, cfg *a2a.MessageSendConfig) (*a2ahandoff.Reply, error) {
	ref, salt, err := refs.NewSaltedRef([]byte(text), "")
	if err != nil {
		return nil, err
	}
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: text},
		a2a.DataPart{Data: map[string]any{saltKey: base64.RawURLEncoding.EncodeToString(salt)}})
	return w.asstHand.Offer(ctx, delegator.Offer{Aud: idOf(Planner), Work: work, Refs: []handoff.ContextRef{ref}}, m, cfg)
}

// offerOf reads back the offer of a hop its tracker issued.
func offerOf(ctx context.Context, tr store.Tracker, hop string) (handoff.Element, *handoff.Offer, error) {
	iss, err := tr.IssuedHop(ctx, hop)
	if err != nil {
		return handoff.Element{}, nil, err
	}
	el := handoff.Element{Form: iss.OfferForm, Octets: iss.Offer}
	o, _, err := handoff.UnsafeDecode(el) // our own offer, read back from our record
	return el, o, err
}

func check(ok bool, format string, args ...any) string {
	if ok {
		return ""
	}
	return fmt.Sprintf(format, args...)
}

func refused(r *a2ahandoff.Reply) string {
	if r == nil || len(r.Refused) == 0 {
		return ""
	}
	return fmt.Sprintf("a status was refused by the tracker: %v", r.Refused[0])
}

func earlier(n int) string {
	if n == 1 {
		return "1 earlier offer"
	}
	return fmt.Sprintf("%d earlier offers", n)
}

func (w *World) chain(ctx context.Context, r *recorder) error {
	res, err := w.offerToPlanner(ctx, "report --json", "Add a --json flag to the report command", nil)
	if err != nil {
		return err
	}
	hop1 := res.Hop

	// assistant -> planner: the planner's receiving checks, as its code saw them.
	ph, _, hop2 := w.planner.hop(hop1)
	if ph == nil {
		return fmt.Errorf("the planner's code never saw hop %s (task %s)", hop1, res.State())
	}
	r.step(Step{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Want: "accepted",
		Verdict: string(ph.Result.Outcome), Chain: string(ph.Result.ChainQuality),
		Why: fmt.Sprintf("chain %s (it starts here); prompt named by salted digest: %s", ph.Result.ChainQuality, refOutcomes(ph.Result.Refs))},
		check(ph.Result.ChainQuality == handoff.ChainAbsent, "chain %s, want absent", ph.Result.ChainQuality),
		check(slices.Equal(ph.Result.Refs, []handoff.RefOutcome{handoff.RefVerified}), "refs %v, want [verified]", ph.Result.Refs),
		check(len(ph.Offer.Refs) == 1 && ph.Offer.Refs[0].Kind == handoff.KindSaltedDigest, "the offer's refs are not one salted digest"))

	// planner -> coder.
	ch, _, hop3 := w.coder.hop(hop2)
	if ch == nil {
		return fmt.Errorf("the coder's code never saw the planner's hop %q", hop2)
	}
	r.step(Step{From: Planner, To: Coder, What: "offer", Carrier: A2A, Want: "accepted",
		Verdict: string(ch.Result.Outcome), Chain: string(ch.Result.ChainQuality),
		Why: fmt.Sprintf("chain %s: %s verified, back to the assistant", ch.Result.ChainQuality, earlier(len(ch.Handoff.Chain)))},
		check(ch.Result.ChainQuality == handoff.ChainFull && len(ch.Handoff.Chain) == 1, "chain %s of %d, want full of 1", ch.Result.ChainQuality, len(ch.Handoff.Chain)),
		check(issOf(ch.Handoff.Chain, 0) == idOf(Assistant), "the chain starts at %q, want the assistant", issOf(ch.Handoff.Chain, 0)))

	// coder -> tester, over MCP.
	runs, q := w.tester.ran(hop3)
	v := "not run"
	if runs > 0 {
		v = string(handoff.Accepted) // the tool runs only for an accepted offer
	}
	forms, n, enc := w.tester.received(hop3)
	r.step(Step{From: Coder, To: Tester, What: "offer", Carrier: MCP, Want: "accepted", Verdict: v, Chain: string(q),
		Why: fmt.Sprintf("chain %s: %s verified (signed forms %s; %s Handoff in tools/call _meta)", q, earlier(n), forms, enc)},
		check(q == handoff.ChainFull && n == 2, "chain %s of %d, want full of 2", q, n),
		check(forms == "JWS, JWS, COSE", "signed forms %s, want JWS, JWS, COSE", forms),
		check(enc == "CBOR", "the Handoff came as %s, want CBOR", enc))

	// The statuses back up.
	w.coder.mu.Lock()
	tr := w.coder.tool[hop3]
	w.coder.mu.Unlock()
	if tr == nil {
		return fmt.Errorf("no reply from the tester for hop %q", hop3)
	}
	r.step(Step{From: Tester, To: Coder, What: "status", Carrier: MCP, Want: "completed", Verdict: string(tr.State),
		Why: "signed status in CallToolResult _meta, verified by the coder; " + toolText(tr.Result)},
		check(tr.Status != nil, "no signed status in the result's _meta"))
	w.planner.mu.Lock()
	cr := w.planner.reply[hop2]
	w.planner.mu.Unlock()
	r.step(Step{From: Coder, To: Planner, What: "status", Carrier: A2A, Want: "completed", Verdict: view(cr), Task: taskState(cr),
		Why: fmt.Sprintf("signed %s in the task's metadata, verified by the planner; task %s", statesIn(cr), taskState(cr))},
		refused(cr), check(taskState(cr) == "COMPLETED", "task %s, want COMPLETED", taskState(cr)))
	r.step(Step{From: Planner, To: Assistant, What: "status", Carrier: A2A, Want: "completed", Verdict: view(res), Task: taskState(res),
		Why: fmt.Sprintf("signed %s in the task's metadata, verified by the assistant; task %s; hop resolved", statesIn(res), taskState(res))},
		refused(res), check(taskState(res) == "COMPLETED", "task %s, want COMPLETED", taskState(res)),
		check(res.Issued != nil && res.Issued.Resolved, "hop not resolved"))
	return nil
}

// statesIn names the states of the statuses a reply carried, in order:
// "accepted, then completed". Only a reply none of whose statuses was
// refused (refused(r) == "") is shown, so these are verified ones.
func statesIn(r *a2ahandoff.Reply) string {
	if r == nil || len(r.Statuses) == 0 {
		return "no status"
	}
	var out []string
	for _, el := range r.Statuses {
		_, st, err := handoff.UnsafeDecode(el)
		if err != nil || st == nil {
			out = append(out, "(not a status)")
			continue
		}
		out = append(out, string(st.State))
	}
	return strings.Join(out, ", then ")
}

// issOf is the iss of a chain's i-th element, read back ("" if none).
func issOf(chain []handoff.Element, i int) string {
	if i >= len(chain) {
		return ""
	}
	o, _, err := handoff.UnsafeDecode(chain[i]) // verified by the receiver already; read for the timeline
	if err != nil || o == nil {
		return ""
	}
	return o.Iss
}

func refOutcomes(rs []handoff.RefOutcome) string {
	if len(rs) == 0 {
		return "carries no ref"
	}
	s := make([]string, len(rs))
	for i, o := range rs {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// view is the hop as the delegator's tracker holds it after a reply.
func view(r *a2ahandoff.Reply) string {
	if r == nil || r.Issued == nil {
		return "no status"
	}
	return string(r.Issued.View)
}

// noTask is the task state shown for an A2A answer that is a Message: the
// delegate made no task (a retransmission answered from the record, or
// work the agent answered at once).
const noTask = "(message)"

// resultKind is the task state of an A2A answer, or noTask for a Message.
func resultKind(res a2a.SendMessageResult) string {
	switch x := res.(type) {
	case *a2a.Task:
		return strings.ToUpper(string(x.Status.State))
	case *a2a.Message:
		return noTask
	}
	return ""
}

func taskState(r *a2ahandoff.Reply) string {
	if r == nil || r.Task == nil {
		return ""
	}
	return strings.ToUpper(string(r.Task.Status.State))
}

// firstHop is the chain scenario's first hop: the assistant's first offer.
func (w *World) firstHop(ctx context.Context) (*store.Issued, error) {
	// The chain scenario's hop is the only one for this work.
	w.planner.mu.Lock()
	var hops []string
	for h := range w.planner.hops {
		hops = append(hops, h)
	}
	w.planner.mu.Unlock()
	for _, h := range hops {
		iss, err := w.agents[Assistant].st.IssuedHop(ctx, h)
		if err == nil && iss.Work == "report --json" {
			return iss, nil
		}
	}
	return nil, errors.New("the chain scenario's hop is not known (did it run?)")
}

func (w *World) replay(ctx context.Context, r *recorder) error {
	first, err := w.firstHop(ctx)
	if err != nil {
		return err
	}
	_, runsBefore, _ := w.planner.hop(first.Hop)
	again, err := w.asstHand.Ask(ctx, first.Hop)
	if err != nil {
		return err
	}
	_, runsAfter, _ := w.planner.hop(first.Hop)
	v := "answered with no status"
	_, isMsg := again.Result.(*a2a.Message)
	same := len(again.Statuses) == 1 && bytes.Equal(again.Statuses[0].Octets, first.Status)
	if isMsg && len(again.Statuses) == 1 {
		v = string(handoff.Retransmission)
	}
	r.step(Step{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Want: "retransmission", Verdict: v, Task: resultKind(again.Result),
		Why: fmt.Sprintf("the same octets again: answered from the record in a Message (no task made), the identical %q status octets; planner's code ran %s", first.View, times(runsAfter))},
		refused(again),
		check(same, "the status resent is not the last one recorded"),
		check(runsAfter == runsBefore && runsAfter == 1, "the planner's code ran %d times, want once", runsAfter))
	return nil
}

func (w *World) equivocation(ctx context.Context, r *recorder) error {
	first, err := w.firstHop(ctx)
	if err != nil {
		return err
	}
	_, o, err := offerOf(ctx, w.agents[Assistant].st, first.Hop)
	if err != nil {
		return err
	}
	// The assistant's key signs a second offer for the same hop: same iss
	// and hop, other work, so other octets.
	now := time.Now().Unix()
	second := *o
	second.Refs, second.Iat, second.Exp, second.Task = nil, now, now+120, "delete-release-branch"
	el, err := w.agents[Assistant].signer.SignOffer(&second, handoff.FormJWS)
	if err != nil {
		return err
	}
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "Delete the release branch"})
	m.ContextID = o.Dialog
	if err := a2ahandoff.AttachHandoff(m, &handoff.Handoff{Offer: el}, handoff.JSON); err != nil {
		return err
	}
	res, err := w.asstA2A.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
	if err != nil {
		return err
	}
	sts, _ := a2ahandoff.Statuses(res)
	flags, err := w.plannerX.Delegate().Flags(ctx, true)
	if err != nil {
		return err
	}
	flagged := slices.ContainsFunc(flags, func(f store.Flag) bool { return f.Kind == store.FlagEquivocation && f.Hop == first.Hop })
	_, runs, _ := w.planner.hop(first.Hop)
	t, _ := res.(*a2a.Task)
	state := ""
	if t != nil {
		state = strings.ToUpper(string(t.Status.State))
	}
	v := "not refused"
	if t != nil && t.Status.State == a2a.TaskStateRejected && len(sts) == 0 && flagged {
		v = string(handoff.Equivocation)
	}
	r.step(Step{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Want: "equivocation", Verdict: v, Task: state,
		Why: fmt.Sprintf("hop %s… already recorded with other octets: task %s, no status, flagged to the operator", first.Hop[:8], state)},
		check(runs == 1, "the planner's code ran %d times for the hop, want once", runs))
	return nil
}

func (w *World) wrongAudience(ctx context.Context, r *recorder) error {
	first, err := w.firstHop(ctx)
	if err != nil {
		return err
	}
	ph, _, _ := w.planner.hop(first.Hop)
	if ph == nil {
		return errors.New("the planner did not keep the Handoff it received")
	}
	// The planner copies the Handoff it received (aud: planner) to the coder.
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "Add a --json flag to the report command"})
	m.ContextID = ph.Offer.Dialog
	if err := a2ahandoff.AttachHandoff(m, ph.Handoff, handoff.JSON); err != nil {
		return err
	}
	_, coderRunsBefore := w.coder.runsTotal()
	res, err := w.plannerA2A.SendMessage(ctx, &a2a.MessageSendParams{Message: m})
	if err != nil {
		return err
	}
	_, coderRuns := w.coder.runsTotal()
	sts, _ := a2ahandoff.Statuses(res)
	v, reason, state, why := "no status", "", "", ""
	if t, ok := res.(*a2a.Task); ok {
		state = strings.ToUpper(string(t.Status.State))
	}
	if len(sts) == 1 {
		// The coder signs its "rejected" and addresses it to the offer's
		// iss (the assistant): D9's misdelivered rejection, from an agent
		// that is not the offer's aud, which never sets the hop's state.
		// Its signature is checked against the coder's key, and what it
		// names read after.
		st, err := signedBy(sts[0], w.agents[Planner].keys, idOf(Coder), ph.Handoff.Offer.Digest())
		if err != nil {
			v, why = "unverifiable status", err.Error()
		} else {
			v, reason = string(st.State), string(st.Reason)
			why = fmt.Sprintf("the offer's aud is the planner: task %s, with the coder's signed %q for the %s", state, st.State, nameOf(st.Aud))
		}
	}
	r.step(Step{From: Planner, To: Coder, What: "copy", Carrier: A2A, Want: "rejected", Verdict: v, Reason: reason, Task: state, Why: why},
		check(reason == string(handoff.ReasonWrongAudience), "reason %q, want wrong-audience", reason),
		check(coderRuns == coderRunsBefore, "the coder's code ran"))
	return nil
}

func (c *coderAgent) runsTotal() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.runs {
		n += r
	}
	return len(c.runs), n
}

// longIDs are hop ids and digests in a server's message, shortened for
// the timeline.
var longIDs = regexp.MustCompile(`[A-Za-z0-9_-]{20,}`)

// signedBy checks that st is a status signed with a key keys bind to iss,
// about the offer whose digest is offer, and returns its payload.
func signedBy(st handoff.Element, keys handoff.KeySource, iss string, offer handoff.Digest) (*handoff.Status, error) {
	_, s, err := handoff.UnsafeDecode(st)
	if err != nil || s == nil {
		return nil, fmt.Errorf("not a status: %v", err)
	}
	if s.Iss != iss {
		return nil, fmt.Errorf("status from %s, not %s", s.Iss, iss)
	}
	if _, err := handoff.VerifyElement(st, keys); err != nil {
		return nil, err
	}
	if !s.Offer.Equal(offer) {
		return nil, fmt.Errorf("the status names offer %s, not %s", s.Offer, offer)
	}
	return s, nil
}

func (w *World) brokenChain(ctx context.Context, r *recorder) error {
	first, err := w.firstHop(ctx)
	if err != nil {
		return err
	}
	_, _, hop2 := w.planner.hop(first.Hop)
	ch, _, _ := w.coder.hop(hop2)
	if ch == nil {
		return errors.New("the coder did not keep the Handoff it received")
	}
	// The coder passes its hop on again, and the hop in the middle
	// (planner -> coder) is removed from the chain on the way.
	h, iss, err := w.coderDl.Offer(ctx, delegator.Offer{Aud: idOf(Tester), Dialog: w.coderSess.ID(), Work: "retest for hop " + hop2, From: ch.Handoff})
	if err != nil {
		return err
	}
	if len(h.Chain) != 2 {
		return fmt.Errorf("the coder's Handoff has a chain of %d, want 2", len(h.Chain))
	}
	cut := &handoff.Handoff{Offer: h.Offer, Chain: h.Chain[:1]}
	res, err := w.coderMCP.Call(ctx, w.coderSess, &mcp.CallToolParams{Name: "run-tests", Arguments: map[string]any{"suite": "unit"}}, cut)
	if err != nil && res == nil {
		return err
	}
	runs, _ := w.tester.ran(iss.Hop)
	// The tester's own words, from its tool error: the chain check's
	// reason, step, chain index and member.
	why := strings.TrimPrefix(toolText(res.Result), "handoff rejected (broken-chain): broken-chain ")
	why = longIDs.ReplaceAllStringFunc(why, func(s string) string { return s[:8] + "…" })
	r.step(Step{From: Coder, To: Tester, What: "offer", Carrier: MCP, Want: "rejected", Verdict: string(res.State), Reason: string(res.Reason),
		Why: "planner → coder cut from the chain; tester: " + why},
		check(res.Reason == handoff.ReasonBrokenChain, "reason %q, want broken-chain", res.Reason),
		check(runs == 0, "the tester's tool ran"))
	return nil
}

func (w *World) lostStatus(ctx context.Context, r *recorder) error {
	w.drop.armed.Store(true)
	defer w.drop.armed.Store(false)
	res, err := w.offerToPlanner(ctx, "estimate --json", "Estimate: how long would the --json flag take?", nil)
	if err == nil {
		return errors.New("the reply was not lost")
	}
	if res == nil || res.Hop == "" {
		return err
	}
	before, err := w.agents[Assistant].st.IssuedHop(ctx, res.Hop)
	if err != nil {
		return err
	}
	r.step(Step{From: Planner, To: Assistant, What: "status", Carrier: A2A, Want: "lost", Verdict: lost(w.drop.dropped.Load()),
		Why: fmt.Sprintf("the reply was dropped on the way back; the assistant's hop stays %q, unresolved (silence is not failure)", before.View)},
		check(before.View == store.Offered && !before.Resolved, "the hop is %s", before.View))

	// The retransmitter asks again with the identical octets until the hop
	// is resolved.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	asked := make(chan *a2ahandoff.Reply, 16)
	go w.asstDl.RunRetransmitter(rctx, 25*time.Millisecond, func(ctx context.Context, a delegator.Ask) error {
		rep, err := w.asstHand.Ask(ctx, a.Hop.Hop)
		if err == nil && a.Hop.Hop == res.Hop {
			select {
			case asked <- rep:
			default:
			}
		}
		return err
	}, nil)
	var got *a2ahandoff.Reply
	for got == nil || got.Issued == nil || !got.Issued.Resolved {
		select {
		case got = <-asked:
		case <-ctx.Done():
			return fmt.Errorf("the hop was not resolved by asking again: %w", ctx.Err())
		}
	}
	stop()
	after, err := w.agents[Assistant].st.IssuedHop(ctx, res.Hop)
	if err != nil {
		return err
	}
	_, runs, _ := w.planner.hop(res.Hop)
	_, isMsg := got.Result.(*a2a.Message)
	v := "processed again"
	if isMsg {
		v = string(handoff.Retransmission)
	}
	r.step(Step{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Want: "retransmission", Verdict: v,
		Why: fmt.Sprintf("the retransmitter asked again (attempt %d, %s after the offer) with the identical octets", after.Attempts, time.Since(after.Created).Round(10*time.Millisecond))})
	r.step(Step{From: Planner, To: Assistant, What: "status", Carrier: A2A, Want: "completed", Verdict: view(got), Task: resultKind(got.Result),
		Why: fmt.Sprintf("answered from the record in a Message (no task made): the %s status, verified; hop resolved; planner's code ran %s", statesIn(got), times(runs))},
		refused(got), check(isMsg, "answered with a %T, want a Message", got.Result),
		check(after.Resolved, "the assistant's hop is not resolved"),
		check(runs == 1, "the planner's code ran %d times, want once", runs))
	return nil
}

func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

func lost(n int32) string {
	if n == 1 {
		return "lost"
	}
	return fmt.Sprintf("%d replies dropped", n)
}

// stopWithin bounds how long a canceled agent's code may go on running
// before the demo says its work did not stop.
const stopWithin = 5 * time.Second

func (w *World) cancel(ctx context.Context, r *recorder) error {
	res, err := w.offerToPlanner(ctx, "storage refactor", "Refactor the storage layer", &a2a.MessageSendConfig{Blocking: new(false)})
	if err != nil {
		return err
	}
	// Wait until the work reached the tester: the tester's long suite runs.
	var hop3 string
	select {
	case hop3 = <-w.tester.started:
	case <-ctx.Done():
		return fmt.Errorf("the work never reached the tester: %w", ctx.Err())
	}
	hop2, err := w.planner.downOf(ctx, res.Hop)
	if err != nil {
		return err
	}
	ph, _, _ := w.planner.hop(res.Hop)
	v := "not run"
	if ph != nil {
		v = string(ph.Result.Outcome)
	}
	_, _, coderDown := w.coder.hop(hop2)
	r.step(Step{From: Assistant, To: Planner, What: "offer", Carrier: A2A, Want: "accepted", Verdict: v, Task: taskState(res),
		Why: "task " + taskState(res) + "; passed on to the coder (A2A), then the tester (MCP), whose full suite runs"},
		check(coderDown == hop3, "the tester's suite runs for hop %q, not the coder's hop %q", hop3, coderDown))

	cr, err := w.asstHand.Cancel(ctx, res.Hop)
	if err != nil {
		return err
	}
	prec, err := w.agents[Planner].st.Get(ctx, idOf(Assistant), res.Hop)
	if err != nil {
		return err
	}
	r.step(Step{From: Assistant, To: Planner, What: "cancel", Carrier: A2A, Want: "canceled", Verdict: strings.ToLower(taskState(cr)), Task: taskState(cr),
		Why: "signed \"canceled\" in the Cancel Task request's metadata: verified, recorded, the planner's code stopped"},
		refused(cr), check(prec.Canceled, "the planner's record of the hop is not canceled"),
		check(w.planner.stopped(ctx, res.Hop, stopWithin), "the planner's code for hop %s still runs %s after the cancel", res.Hop, stopWithin))

	// The planner's cancel down returns only after the coder's (the
	// coder passes it on while answering it), so they are told apart by
	// who sent them.
	downs := map[string]cancelDown{}
	for len(downs) < 2 {
		select {
		case d := <-w.cancels:
			if d.err != nil {
				return fmt.Errorf("%s canceling down: %w", d.from, d.err)
			}
			downs[d.from] = d
		case <-ctx.Done():
			return fmt.Errorf("the cancel did not follow the chain down (%d of 2 hops): %w", len(downs), ctx.Err())
		}
	}
	pd := downs[Planner]
	crec, err := w.agents[Coder].st.Get(ctx, idOf(Planner), hop2)
	if err != nil {
		return err
	}
	down, err := w.agents[Planner].st.IssuedHop(ctx, pd.hop)
	if err != nil {
		return err
	}
	r.step(Step{From: Planner, To: Coder, What: "cancel", Carrier: A2A, Want: "canceled", Verdict: strings.ToLower(taskState(pd.a2a)), Task: taskState(pd.a2a),
		Why: "passed down to the offer whose prev names the canceled one: verified, recorded, the coder's code stopped"},
		check(crec.Canceled, "the coder's record of the hop is not canceled"),
		check(pd.hop == hop2, "the planner canceled hop %q, want its hop %q to the coder", pd.hop, hop2),
		check(down.Prev != nil && res.Issued != nil && down.Prev.Equal(res.Issued.Digest), "the hop canceled down does not name the canceled offer as its prev"),
		check(w.coder.stopped(ctx, hop2, stopWithin), "the coder's code for hop %s still runs %s after the cancel", hop2, stopWithin))

	cd := downs[Coder]
	var stopped string
	select {
	case stopped = <-w.tester.stopped:
	case <-ctx.Done():
		return fmt.Errorf("the tester's work was not stopped: %w", ctx.Err())
	}
	w.testerSrv.Wait() // its outcome recorded
	rec, err := w.agents[Tester].st.Get(ctx, idOf(Coder), hop3)
	if err != nil {
		return err
	}
	v = "not canceled"
	if rec.Canceled && stopped == hop3 {
		v = string(handoff.StateCanceled)
	}
	r.step(Step{From: Coder, To: Tester, What: "cancel", Carrier: MCP, Want: "canceled", Verdict: v,
		Why: "signed \"canceled\" in notifications/cancelled _meta: verified, recorded, the tool's work stopped"},
		check(cd.hop == hop3, "the coder canceled hop %q, want its hop %q to the tester", cd.hop, hop3))

	// Over MCP the coder learns what became of the work by asking again.
	again, err := w.coderMCP.Ask(ctx, w.coderSess, hop3)
	if err != nil && again == nil {
		return err
	}
	var stRefs []handoff.ContextRef
	if again.Status != nil {
		if _, st, err := handoff.UnsafeDecode(*again.Status); err == nil && st != nil { // verified by the coder's Ask
			stRefs = st.Refs
		}
	}
	r.step(Step{From: Tester, To: Coder, What: "status", Carrier: MCP, Want: "failed", Verdict: string(again.State),
		Why: "learned by asking again: the work was stopped before it took effect (failed, no refs: no effect); the coder's hop resolved"},
		check(again.Status != nil, "no signed status in the answer"),
		check(len(stRefs) == 0, "the status names %d effects, want none", len(stRefs)),
		check(again.Hop != nil && again.Hop.Resolved, "the coder's hop is not resolved"))

	return nil
}
