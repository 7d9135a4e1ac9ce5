package delegator_test

// TestSimulation is a deterministic, seeded simulation of the draft's hop
// lifecycle across whole delegation trees, over an in-process transport
// that drops, duplicates, delays and reorders every kind of message: the
// offers and their retransmissions (delegator -> delegate), the statuses
// (delegate -> delegator) and the cancels (delegator -> delegate, passed on
// down the chain). After every delivery, and again once a run has drained,
// it checks the rules of the draft's "Lifecycle", "Asking Again", "Knowing
// the Outcome" and "Forks, Concurrency, and Equivocation" sections against
// what the stores say and what an oracle knows actually happened.
//
// One run: a root delegator and a tree of agents of depth 1-4 with a
// fan-out of 3 at one level (three offers with one prev). Each agent below
// the root is a delegate.Delegate over its own store.Memory; an inner agent
// is also a delegator.Delegator over the same store, and passes on work it
// takes with Offer{From: the Handoff it received}. Leaves do the work:
// they complete it, fail with no effect, or never learn its outcome.
// Delegators call Due every simulated second and resend the Handoff octets
// first sent for the hop; every status goes to Intake. The root may cancel;
// a delegate that gets a valid cancel calls its own CancelDown and sends
// the cancels on. A delegator whose hop resolved with no effect may offer
// the work again (a new hop); an oracle may make an authoritative
// observation (Observe) when it is true. Some runs add: no drops on the
// cancel path; seen hops signed again, with the same payload (a copy: a
// retransmission, D5) or a changed one (equivocation); a leaf that
// restarts without its records; a faulty delegate that contradicts its
// own terminal status; statuses and cancels handed in for the wrong hop.
//
// Invariants (each failure names the draft rule):
//  1. A hop is resolved at its delegator only after a verified completed,
//     failed, or rejected (not stale or replay) for it was delivered, or an
//     Observe; a verified one always resolves it, and the first stands.
//  2. Work is done at most once: Answer.Take at most once per (agent, iss,
//     hop), and each logical task takes effect at most once over all its
//     attempts; "failed" with no refs only where nothing took effect.
//  3. A second Offer for work whose hop is unresolved fails with
//     store.ErrUnresolvedWork (probed at random moments).
//  4. Every delegate answer agrees with its record: a retransmission is
//     answered with the record's last status octets (a same-content copy
//     with that status signed again for its own octets); the statuses sent
//     for a hop obey "Lifecycle"; an equivocating offer gets no status.
//  5. A cancel that reaches a recorded hop marks it, stops its work, and
//     CancelDown cancels exactly the hops issued with that prev; with no
//     drops on the cancel path every hop below a canceled one is reached,
//     unless its cancel overtook its offer (counted and logged).
//  6. Silence never becomes failed: a hop that heard nothing stays offered
//     or canceled and unresolved; Due resends identical octets and, once it
//     gives up on an unresolved hop, the hop is flagged.
//
// A failure message always starts with "seed N": rerun one seed with
//
//	go test ./delegator -run TestSimulation -sim.seed=N -v
//
// Determinism: the transport, the topology, the agents' choices and the
// fault probabilities all come from one PCG stream seeded by the run's
// seed. Hop identifiers and signatures are random (crypto/rand) but
// nothing decides on them: lists the stores return are put back in
// creation order, and the retransmission jitter is made negligible
// (Retry.Jitter 1e-6) against delays that never fall near a whole step, so
// every Due fires at the same simulated second in every replay. The test
// replays a few seeds twice and compares the traces.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

var (
	simSeed = flag.Uint64("sim.seed", 0, "run TestSimulation for this one seed only (0: all seeds)")
	simRuns = flag.Int("sim.runs", 0, "number of TestSimulation runs (0: 2000, or 200 with -short)")
)

const (
	simMaxAttempts = 5   // Retry.MaxAttempts
	simDrainCap    = 400 // steps allowed for a run to go quiet after its active phase
	simBase        = 1_800_000_000
	simDetRuns     = 5
)

// simRetry: first retransmission after 1.5 s, then x1.5 each time; with
// the jitter at 1e-6 no ask ever lands near a whole second, so the step at
// which Due returns it does not depend on crypto/rand.
var simRetry = delegator.Retry{First: 1500 * time.Millisecond, Factor: 1.5, Jitter: 1e-6, MaxAttempts: simMaxAttempts}

// ---- identities, shared by all runs (read-only once built) ----

var simIDs struct {
	once    sync.Once
	keys    *trust.Config
	signers map[string]*handoff.Signer
	err     error
}

const simMaxAgents = 16

func simAgentName(i int) string {
	if i == 0 {
		return "root"
	}
	return fmt.Sprintf("agent-%02d", i)
}

func simIdentities(t *testing.T) (*trust.Config, map[string]*handoff.Signer) {
	p := &simIDs
	p.once.Do(func() {
		p.keys, p.signers = trust.New(), map[string]*handoff.Signer{}
		for i := 0; i < simMaxAgents; i++ {
			n := simAgentName(i)
			k, err := trust.GenerateKey()
			if err != nil {
				p.err = err
				return
			}
			tk, err := trust.NewKey(&k.PublicKey)
			if err != nil {
				p.err = err
				return
			}
			if err := p.keys.Add(n, tk); err != nil {
				p.err = err
				return
			}
			if p.signers[n], err = handoff.NewSigner(k); err != nil {
				p.err = err
				return
			}
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.keys, p.signers
}

// ---- the world of one run ----

type simParams struct {
	pDrop, pDup, pDelay float64 // per message, every direction
	maxDelay            int     // steps
	cancelNoDrop        bool    // the cancel path never drops (invariant 5 in its strict form)
	cancelAt            int     // step at which the root cancels; -1: never
	pEquiv              float64 // a retransmission is replaced by a re-signed copy of a seen hop
	pObserve            float64 // per step and unresolved hop: an authoritative observation, when true
	pProbe              float64 // per step: a second Offer for work with an unresolved hop
	pRetry              float64 // a work whose hop resolved with no effect is offered again
	ttl                 time.Duration
	depth, fanLevel     int
	enc                 handoff.Encoding
	active              int // steps of the active phase
	faultFree           bool
	restartAt           int     // step at which one leaf restarts without its records; -1: never
	pConflict           float64 // a leaf that sent "failed" also signs a contradicting "completed"
	pMisroute           float64 // a status or cancel is also handed in for another hop
}

type simAgent struct {
	name     string
	level    int
	parent   *simAgent
	children []*simAgent
	mem      *store.Memory
	del      *delegate.Delegate   // nil for the root
	dor      *delegator.Delegator // nil for leaves
	form     handoff.Form
	signer   *handoff.Signer
	stops    []string
	jobs     []*simJob           // hops this agent took, in order (the root: its one job)
	byRecv   map[string]*simJob  // iss|hop -> job
	takes    map[string]int      // iss|hop -> Answer.Take count
	sent     map[string]*simSent // iss|hop -> statuses this delegate sent
	since    time.Time           // when its memory began
	restarts int
	issued   []*simHop // hops this agent issued as delegator, in order
}

func (a *simAgent) leaf() bool { return len(a.children) == 0 && a.level > 0 }

// simSent is what a delegate sent for one hop (draft "Lifecycle": at most
// one of accepted and rejected, at most one of completed and failed).
type simSent struct {
	accepted, rejected, terminal [][]byte // distinct octets
	last                         []byte   // last non-stale status
}

// simJob is a hop an agent took (or the root's own job): leaves do its
// work, intermediates pass it on as works for their children.
type simJob struct {
	agent    *simAgent
	hop      *simHop // nil for the root's job
	task     string
	from     *handoff.Handoff // what the agent received: From for its offers
	exp      time.Time
	digest   handoff.Digest
	canceled bool // a valid cancel reached the host (no new attempts)
	equiv    bool // the hop was equivocated (no new attempts)
	finished bool
	works    []*simWork
	// leaf
	plan     int // simComplete, simFailNoEffect, simNever
	finishAt int
	stopped  bool
	stopSeen bool
	effect   bool
}

const (
	simComplete = iota
	simFailNoEffect
	simNever
)

// simWork is one piece of a job handed to one child; a new attempt (after
// a resolved hop with no effect) is a new hop for the same Work.
type simWork struct {
	job       *simJob
	name      string // delegator.Offer.Work
	task      string // the logical task, the same across attempts
	to        *simAgent
	cur       *simHop
	attempts  int
	concluded bool
	completed bool
	refs      []handoff.ContextRef
}

// simHop is one offer, as the oracle sees it from both sides.
type simHop struct {
	seq    int
	id     string
	from   *simAgent
	to     *simAgent
	work   *simWork
	parent *simHop // the hop from received (nil at the root)
	offer  handoff.Element
	octets []byte // the Handoff as first sent; every retransmission resends these
	exp    time.Time

	// delegator side
	anyStatus, terminalDelivered, observed bool
	delivered                              map[handoff.State]bool
	firstTerminal                          handoff.State
	asks                                   int

	// delegate side
	took           bool
	tookAfterLost  bool // taken after a cancel for it was lost (delivered before the offer)
	canceledEarly  bool // refused on arrival: its cancel overtook it and was held
	cancelSent     bool
	cancelDelivEv  int  // first delivery of a cancel; -1 never
	cancelRecorded bool // a cancel was delivered while the record existed
	cancelLost     bool // a cancel was delivered before the record existed
	shouldCancel   bool // the root canceled it, or a cancel for its parent reached the parent's record before it was issued
	effect         bool // the leaf's work took effect
	recordLost     bool // the delegate restarted without its records after taking it
	failedNoRefs   bool // the delegate sent "failed" with no refs
}

const (
	simOffer = iota
	simStatus
	simCancel
)

type simMsg struct {
	kind    int
	from    *simAgent
	to      *simAgent
	hop     *simHop
	body    []byte          // offer: Handoff octets
	el      handoff.Element // status or cancel
	retrans bool
	at      int
	prio    uint64
	seq     int
}

type simStats struct {
	runs, steps, sent, dropped, duplicated, delayed, delivered                   int64
	takes, effects, cancels, cancelLost, lateTakes, stale, equivocations, copies int64
	canceledEarly                                                                int64
	replay, restarts, misrouted                                                  int64
	observed, probes, retries, unresolved, flagged, conflicts, finished          int64
	firstLateTakeSeed                                                            uint64
}

type sim struct {
	seed    uint64
	rng     *rand.Rand
	p       simParams
	ctx     context.Context
	keys    *trust.Config
	signers map[string]*handoff.Signer
	step    int
	now     time.Time
	ev      int
	dialog  string
	agents  []*simAgent
	root    *simAgent
	hops    []*simHop
	byID    map[string]*simHop
	net     []*simMsg
	msgSeq  int
	effects map[string]int // task -> effects
	errs    []string
	trace   []string
	tracing bool
	st      simStats
}

type simAbort struct{}

func (s *sim) errf(format string, args ...any) {
	msg := fmt.Sprintf("seed %d step %d: ", s.seed, s.step) + fmt.Sprintf(format, args...)
	if len(s.errs) < 20 {
		s.errs = append(s.errs, msg)
	}
}

// must aborts the run on an error the library should not have returned.
func (s *sim) must(err error, format string, args ...any) {
	if err != nil {
		s.errf(format+": %v", append(args, err)...)
		panic(simAbort{})
	}
}

func (s *sim) clock() time.Time { return s.now }

func (s *sim) tr(format string, args ...any) {
	if s.tracing {
		s.trace = append(s.trace, fmt.Sprintf("%d ", s.step)+fmt.Sprintf(format, args...))
	}
}

func simParamsFor(seed uint64, rng *rand.Rand) simParams {
	p := simParams{cancelAt: -1, restartAt: -1}
	p.depth = 1 + rng.IntN(4)
	p.fanLevel = rng.IntN(p.depth)
	if p.depth >= 2 && p.fanLevel == 0 && rng.IntN(3) > 0 {
		p.fanLevel = 1 // mostly a fan-out with a shared prev
	}
	p.enc = handoff.JSON
	if rng.IntN(2) == 0 {
		p.enc = handoff.CBOR
	}
	p.ttl = time.Duration(4+rng.IntN(37)) * time.Second
	p.active = 20 + rng.IntN(20)
	p.faultFree = seed%10 == 7
	if !p.faultFree {
		p.pDrop = 0.4 * rng.Float64()
		p.pDup = 0.3 * rng.Float64()
		p.pDelay = 0.6 * rng.Float64()
		p.maxDelay = 1 + rng.IntN(8)
		if rng.IntN(4) == 0 {
			p.pEquiv = 0.2 * rng.Float64()
		}
	}
	p.cancelNoDrop = seed%3 == 0
	if p.cancelNoDrop || rng.IntN(3) == 0 {
		p.cancelAt = 1 + rng.IntN(p.active-1)
	}
	if rng.IntN(2) == 0 {
		p.pObserve = 0.5 * rng.Float64()
	}
	p.pProbe = 0.3 * rng.Float64()
	p.pRetry = rng.Float64()
	if !p.faultFree && rng.IntN(4) == 0 {
		p.restartAt = 1 + rng.IntN(p.active-1)
	}
	if !p.faultFree && rng.IntN(5) == 0 {
		p.pConflict = rng.Float64()
	}
	if !p.faultFree && rng.IntN(4) == 0 {
		p.pMisroute = 0.3 * rng.Float64()
	}
	return p
}

func newSim(t *testing.T, seed uint64, tracing bool) *sim {
	keys, signers := simIdentities(t)
	rng := rand.New(rand.NewPCG(seed, 0x5eed_0f_5111))
	s := &sim{seed: seed, rng: rng, ctx: context.Background(), keys: keys, signers: signers,
		now: time.Unix(simBase, 0), dialog: fmt.Sprintf("dialog-%d", seed), byID: map[string]*simHop{},
		effects: map[string]int{}, tracing: tracing}
	s.p = simParamsFor(seed, rng)
	s.build(t)
	return s
}

func (s *sim) build(t *testing.T) {
	var grow func(a *simAgent)
	add := func(level int, parent *simAgent) *simAgent {
		a := &simAgent{name: simAgentName(len(s.agents)), level: level, parent: parent,
			byRecv: map[string]*simJob{}, takes: map[string]int{}, sent: map[string]*simSent{}}
		s.agents = append(s.agents, a)
		return a
	}
	grow = func(a *simAgent) {
		if a.level == s.p.depth {
			return
		}
		n := 1
		if a.level == s.p.fanLevel {
			n = 3
		}
		for i := 0; i < n; i++ {
			c := add(a.level+1, a)
			a.children = append(a.children, c)
			grow(c)
		}
	}
	s.root = add(0, nil)
	grow(s.root)
	if len(s.agents) > simMaxAgents {
		t.Fatalf("seed %d: %d agents", s.seed, len(s.agents))
	}
	for _, a := range s.agents {
		a := a
		a.signer = s.signers[a.name]
		a.form = handoff.FormJWS
		if s.rng.IntN(2) == 0 {
			a.form = handoff.FormCOSE
		}
		a.since = s.now.Add(-time.Hour) // memory began before any offer: no restart rule
		a.mem = store.NewMemory(a.since)
		if a.level > 0 {
			if err := s.newDelegate(a); err != nil {
				t.Fatalf("seed %d: %v", s.seed, err)
			}
		}
		if len(a.children) > 0 {
			d, err := delegator.New(delegator.Config{Me: a.name, Signer: a.signer, Keys: s.keys, Store: a.mem,
				Form: a.form, Retry: simRetry, Now: s.clock})
			if err != nil {
				t.Fatalf("seed %d: %v", s.seed, err)
			}
			a.dor = d
		}
	}
	// The root's own job: one work per child.
	j := &simJob{agent: s.root, task: "job", exp: s.now.Add(24 * time.Hour)}
	s.root.jobs = []*simJob{j}
	for i, c := range s.root.children {
		j.works = append(j.works, &simWork{job: j, name: fmt.Sprintf("job/%d", i), task: fmt.Sprintf("job/%d", i), to: c})
	}
}

func (s *sim) newDelegate(a *simAgent) error {
	d, err := delegate.New(s.ctx, delegate.Config{
		Options: handoff.Options{Me: a.name, Keys: s.keys, Now: s.clock},
		Store:   a.mem, Signer: a.signer, StatusForm: a.form,
		Stop: func(iss, hop string) {
			k := iss + "|" + hop
			a.stops = append(a.stops, k)
			if j := a.byRecv[k]; j != nil {
				j.stopped = true
			}
		},
	})
	a.del = d
	return err
}

// restart: a leaf without durable state restarts. Its hop records are
// gone (a new memory store, whose memory begins now), and so is the work
// it was doing: whether that took effect nobody will learn. The replay
// rule ("Replay and Freshness") must keep it from taking any offer it may
// have seen before.
func (s *sim) restart() {
	var leaves []*simAgent
	for _, a := range s.agents {
		if a.leaf() {
			leaves = append(leaves, a)
		}
	}
	a := leaves[s.rng.IntN(len(leaves))]
	a.restarts++
	a.since = s.now
	a.mem = store.NewMemory(s.now)
	s.must(s.newDelegate(a), "%s: restart", a.name)
	for _, hp := range s.hops {
		if hp.to == a && hp.canceledEarly {
			hp.recordLost = true
		}
	}
	for _, j := range a.jobs {
		j.hop.recordLost = true
		if !j.finished {
			j.finished = true
			if s.rng.IntN(2) == 0 {
				j.effect, j.hop.effect = true, true
				s.effects[j.task]++
				s.st.effects++
			}
		}
	}
	s.st.restarts++
	s.tr("restart %s", a.name)
}

// ---- transport ----

func (s *sim) send(m *simMsg) {
	s.st.sent++
	pDrop := s.p.pDrop
	if m.kind == simCancel && s.p.cancelNoDrop {
		pDrop = 0
	}
	if s.rng.Float64() < pDrop {
		s.st.dropped++
		s.tr("drop %d %s->%s hop%d", m.kind, m.from.name, m.to.name, m.hop.seq)
		return
	}
	copies := 1
	if s.rng.Float64() < s.p.pDup {
		copies = 2
		s.st.duplicated++
	}
	for i := 0; i < copies; i++ {
		c := *m
		c.at = s.step
		if s.p.maxDelay > 0 && s.rng.Float64() < s.p.pDelay {
			c.at += 1 + s.rng.IntN(s.p.maxDelay)
			s.st.delayed++
		}
		c.prio = s.rng.Uint64() // reorders the messages due at one step
		s.msgSeq++
		c.seq = s.msgSeq
		s.net = append(s.net, &c)
	}
}

// deliverDue delivers, in random order, every message due by now; the
// answers they cause that are due now go in a later round of the same step.
func (s *sim) deliverDue() {
	for round := 0; round < 64; round++ {
		var due, rest []*simMsg
		for _, m := range s.net {
			if m.at <= s.step {
				due = append(due, m)
			} else {
				rest = append(rest, m)
			}
		}
		if len(due) == 0 {
			return
		}
		s.net = rest
		sort.Slice(due, func(i, k int) bool {
			if due[i].prio != due[k].prio {
				return due[i].prio < due[k].prio
			}
			return due[i].seq < due[k].seq
		})
		for _, m := range due {
			s.st.delivered++
			s.ev++
			switch m.kind {
			case simOffer:
				s.deliverOffer(m)
			case simStatus:
				s.deliverStatus(m)
			case simCancel:
				s.deliverCancel(m)
			}
		}
	}
	s.errf("messages still due after 64 rounds in one step")
	panic(simAbort{})
}

// ---- issuing ----

// issue makes a new offer for w (its first or a new attempt) and sends it.
func (s *sim) issue(w *simWork) {
	j, a := w.job, w.job.agent
	h, rec, err := a.dor.Offer(s.ctx, delegator.Offer{Aud: w.to.name, Dialog: s.dialog, Task: w.task, Work: w.name,
		TTL: s.p.ttl, From: j.from})
	s.must(err, "%s: Offer for work %s (attempt %d; the previous hop is resolved)", a.name, w.name, w.attempts+1)
	b, err := h.Encode(s.p.enc)
	s.must(err, "encode")
	if s.byID[rec.Hop] != nil {
		s.errf("%s: a new attempt at work %s reuses hop %s (draft: a new attempt is a new offer with a new hop)", a.name, w.name, rec.Hop)
	}
	hp := &simHop{seq: len(s.hops), id: rec.Hop, from: a, to: w.to, work: w, parent: j.hop, offer: h.Offer,
		octets: b, exp: rec.Exp, delivered: map[handoff.State]bool{}, cancelDelivEv: -1}
	s.hops = append(s.hops, hp)
	s.byID[hp.id] = hp
	a.issued = append(a.issued, hp)
	w.cur = hp
	w.attempts++
	// Forks: each passed-on offer names the offer its delegator received
	// (the same prev for a fan-out) and carries the chain so far.
	if j.hop != nil {
		if rec.Prev == nil || !rec.Prev.Equal(j.digest) {
			s.errf("%s: offer hop%d passes on hop%d but its prev is %v, not %s", a.name, hp.seq, j.hop.seq, rec.Prev, j.digest)
		}
	} else if rec.Prev != nil {
		s.errf("%s: root offer hop%d has a prev", a.name, hp.seq)
	}
	if len(h.Chain) != a.level {
		s.errf("%s: offer hop%d carries a chain of %d, want %d", a.name, hp.seq, len(h.Chain), a.level)
	}
	s.tr("offer hop%d %s->%s task %s attempt %d", hp.seq, a.name, w.to.name, w.task, w.attempts)
	s.send(&simMsg{kind: simOffer, from: a, to: w.to, hop: hp, body: b})
}

// ---- delivery: offers ----

func simKey(iss, hop string) string { return iss + "|" + hop }

func (s *sim) deliverOffer(m *simMsg) {
	hp, to := m.hop, m.to
	body := m.body
	equivocating, copying := false, false
	k := simKey(hp.from.name, hp.id)
	var before *store.Record
	if r, err := to.mem.Get(s.ctx, hp.from.name, hp.id); err == nil {
		before = r
	} else if !errors.Is(err, store.ErrNotFound) {
		s.must(err, "get")
	}
	var copyEl handoff.Element
	if m.retrans && before != nil && s.p.pEquiv > 0 && s.rng.Float64() < s.p.pEquiv {
		// A buggy delegator signs the same hop again. With the same
		// payload (new octets: ES256 signatures are randomized) it is a
		// copy, a retransmission (D5: same signed content is the same
		// offer); with another payload, equivocation.
		o, _, err := handoff.UnsafeDecode(hp.offer)
		s.must(err, "decode own offer")
		if s.rng.Float64() < 0.5 {
			copying = true
			s.st.copies++
		} else {
			o.Task += " (signed again, changed)"
			equivocating = true
			s.st.equivocations++
		}
		el, err := hp.from.signer.SignOffer(o, hp.offer.Form)
		s.must(err, "re-sign")
		copyEl = el
		parsed, err := handoff.ParseHandoff(hp.octets, handoff.Limits{})
		s.must(err, "parse")
		body, err = (&handoff.Handoff{Offer: el, Chain: parsed.Chain}).Encode(s.p.enc)
		s.must(err, "encode")
	}
	flagsBefore := s.flagCount(to, store.FlagEquivocation, hp.id)
	stopsBefore := len(to.stops)
	a, err := to.del.Receive(s.ctx, body, s.dialog, m.from.name) // the host authenticated the sender
	if a == nil {
		s.must(err, "%s: Receive hop%d", to.name, hp.seq)
	}
	s.tr("recv hop%d at %s: %s take=%v status=%v equiv=%v", hp.seq, to.name, a.Outcome, a.Take, a.Status != nil, equivocating)
	if a.Iss != hp.from.name || a.Hop != hp.id {
		s.errf("%s: answer names (%s, %s), want (%s, hop%d)", to.name, a.Iss, a.Hop, hp.from.name, hp.seq)
	}
	after, gerr := to.mem.Get(s.ctx, hp.from.name, hp.id)
	if gerr != nil && !errors.Is(gerr, store.ErrNotFound) {
		s.must(gerr, "get")
	}
	if a.Take {
		to.takes[k]++
		s.st.takes++
		// Invariant 2 (draft "Asking Again": a retransmission is not
		// processed again and the work not done again).
		if to.takes[k] > 1 {
			why := ""
			if to.restarts > 0 {
				o, _, _ := handoff.UnsafeDecode(hp.offer)
				why = fmt.Sprintf("; it lost its records in a restart at %d (memory begins then) and the offer's iat is %d, so the replay rule of \"Replay and Freshness\" (reject offers with iat before the restart) did not apply", to.since.Unix(), o.Iat)
			}
			s.errf("%s took hop%d %d times (draft \"Asking Again\": a delegate MUST NOT process the offer again or do the work again)%s", to.name, hp.seq, to.takes[k], why)
		}
	}
	switch a.Outcome {
	case handoff.Accepted:
		if equivocating {
			s.errf("%s accepted a re-signed copy of hop%d it had recorded (equivocation)", to.name, hp.seq)
		}
		if before != nil {
			s.errf("%s: hop%d was recorded, yet Receive accepted it as new", to.name, hp.seq)
		}
		if !a.Take || after == nil || after.State != store.Accepted {
			s.errf("%s: accepted hop%d but take=%v record=%+v", to.name, hp.seq, a.Take, after)
		}
		if a.Status == nil || s.stateOf(to, a.Status, hp) != handoff.StateAccepted {
			s.errf("%s: accepted hop%d without sending \"accepted\"", to.name, hp.seq)
		}
		hp.took = true
		if hp.cancelLost {
			hp.tookAfterLost = true
			s.st.lateTakes++
		}
		if a.Result == nil || a.Result.Offer == nil || a.Result.Offer.Task != hp.work.task {
			s.errf("%s: hop%d task not carried", to.name, hp.seq)
		}
	case handoff.Retransmission:
		// Invariant 4: answered from the record, identical octets.
		if equivocating || a.Take || after == nil || before == nil {
			s.errf("%s: retransmission of hop%d: take=%v record before=%v after=%v", to.name, hp.seq, a.Take, before != nil, after != nil)
			break
		}
		if copying {
			// D5: the hop's state, signed again for the copy's own octets;
			// the record stays the first offer's.
			switch {
			case !a.Result.Copy:
				s.errf("%s: a re-signed copy of hop%d is not reported as a copy", to.name, hp.seq)
			case after.Equivocated != before.Equivocated || !after.Digest.Equal(before.Digest) || len(to.stops) != stopsBefore ||
				s.flagCount(to, store.FlagEquivocation, hp.id) != flagsBefore:
				s.errf("%s: a same-content copy of hop%d was handled as equivocation", to.name, hp.seq)
			case (after.Status == nil) != (a.Status == nil):
				s.errf("%s: copy of hop%d: status sent %v, recorded %v", to.name, hp.seq, a.Status != nil, after.Status != nil)
			case a.Status != nil:
				vs, err := handoff.VerifyStatus(*a.Status, copyEl, handoff.StatusOptions{Keys: s.keys, Now: s.clock})
				s.must(err, "%s: its status for the copy of hop%d does not verify for the copy", to.name, hp.seq)
				_, rst, err := handoff.UnsafeDecode(handoff.Element{Form: after.StatusForm, Octets: after.Status})
				s.must(err, "decode the recorded status")
				if vs.Status.State != rst.State || vs.Status.Reason != rst.Reason {
					s.errf("%s: copy of hop%d answered %s/%s, the hop is %s/%s", to.name, hp.seq, vs.Status.State, vs.Status.Reason, rst.State, rst.Reason)
				}
			}
			return // its status names the copy, which the delegator did not keep
		}
		switch {
		case after.Status == nil && a.Status != nil:
			s.errf("%s: retransmission of hop%d answered though no status was ever sent", to.name, hp.seq)
		case after.Status != nil && a.Status == nil:
			s.errf("%s: authenticated retransmission of hop%d got no status though %s was sent (draft \"Asking Again\": resend the last status)", to.name, hp.seq, after.State)
		case after.Status != nil && !bytes.Equal(a.Status.Octets, after.Status):
			s.errf("%s: retransmission of hop%d answered with octets other than the record's last status (draft \"Asking Again\": identical octets)", to.name, hp.seq)
		}
		if ss := to.sent[k]; ss != nil && after.Status != nil && !bytes.Equal(ss.last, after.Status) {
			s.errf("%s: the record of hop%d does not hold the last status sent", to.name, hp.seq)
		}
	case handoff.Rejected:
		// Only freshness can fail here: every offer is well formed,
		// chained and sent in its dialog.
		if a.Take || a.Status == nil {
			s.errf("%s: rejection of hop%d: take=%v status=%v", to.name, hp.seq, a.Take, a.Status != nil)
			break
		}
		st := s.statusOf(to, a.Status, hp)
		if st.Reason == handoff.ReasonPolicy && hp.cancelLost {
			// Canceled before its offer arrived: the held cancel verified,
			// the offer is refused and recorded canceled; no work.
			if before != nil || after == nil || after.State != store.Rejected || !after.Canceled {
				s.errf("%s: hop%d canceled before arrival: before=%v after=%+v", to.name, hp.seq, before != nil, after)
			}
			s.st.canceledEarly++
			hp.canceledEarly = true
			break
		}
		if before != nil || after != nil {
			s.errf("%s: hop%d rejected (%s) though it is recorded (draft step 3: a remembered pair skips the freshness check)", to.name, hp.seq, st.Reason)
		}
		switch st.Reason {
		case handoff.ReasonStale:
			if s.now.Before(hp.exp) {
				s.errf("%s: hop%d rejected as stale before its exp", to.name, hp.seq)
			}
			s.st.stale++
		case handoff.ReasonReplay:
			if to.restarts == 0 {
				s.errf("%s: hop%d rejected as replay, but its memory was never lost", to.name, hp.seq)
			}
			s.st.replay++
		default:
			s.errf("%s: hop%d rejected with reason %q (%v)", to.name, hp.seq, st.Reason, a.Err)
		}
	case handoff.Equivocation:
		if !equivocating {
			s.errf("%s: identical octets of hop%d taken for equivocation", to.name, hp.seq)
		}
		if a.Status != nil || a.Take {
			s.errf("%s: equivocating offer for hop%d got status=%v take=%v (draft: no status for the second offer)", to.name, hp.seq, a.Status != nil, a.Take)
		}
		if after == nil || !after.Equivocated {
			s.errf("%s: equivocated hop%d not marked", to.name, hp.seq)
		}
		// One open flag per conflicting content: the same change resent
		// is flagged once.
		if n := s.flagCount(to, store.FlagEquivocation, hp.id); n == 0 || n > flagsBefore+1 {
			s.errf("%s: equivocation of hop%d: %d flags, %d before; want one", to.name, hp.seq, n, flagsBefore)
		}
		if before != nil && before.State == store.Accepted && len(to.stops) != stopsBefore+1 {
			s.errf("%s: equivocated hop%d was running but Stop was not called", to.name, hp.seq)
		}
		if j := to.byRecv[k]; j != nil {
			j.equiv = true
		}
		if after != nil && after.Status != nil && before != nil && !bytes.Equal(after.Status, before.Status) {
			s.errf("%s: equivocation changed the last status of taken hop%d", to.name, hp.seq)
		}
		return // nothing to send
	default:
		s.errf("%s: outcome %q", to.name, a.Outcome)
	}
	if a.Status != nil {
		s.sendStatus(to, hp, *a.Status)
	}
	if a.Take {
		s.took(to, hp, a)
	}
}

// stateOf verifies a status the delegate produced and returns its state.
func (s *sim) stateOf(d *simAgent, el *handoff.Element, hp *simHop) handoff.State {
	return s.statusOf(d, el, hp).State
}

func (s *sim) statusOf(d *simAgent, el *handoff.Element, hp *simHop) *handoff.Status {
	vs, err := handoff.VerifyStatus(*el, hp.offer, handoff.StatusOptions{Keys: s.keys, Now: s.clock})
	s.must(err, "%s: its status for hop%d does not verify", d.name, hp.seq)
	return vs.Status
}

// sendStatus records what the delegate sends (the "Lifecycle" rules on
// what a delegate may send for one hop) and puts it on the wire.
func (s *sim) sendStatus(d *simAgent, hp *simHop, el handoff.Element) {
	st := s.statusOf(d, &el, hp)
	k := simKey(hp.from.name, hp.id)
	ss := d.sent[k]
	if ss == nil {
		ss = &simSent{}
		d.sent[k] = ss
	}
	addDistinct := func(list *[][]byte) {
		for _, b := range *list {
			if bytes.Equal(b, el.Octets) {
				return
			}
		}
		*list = append(*list, el.Octets)
	}
	notRemembered := st.State == handoff.StateRejected && (st.Reason == handoff.ReasonStale || st.Reason == handoff.ReasonReplay)
	if !notRemembered {
		switch st.State {
		case handoff.StateAccepted:
			addDistinct(&ss.accepted)
		case handoff.StateRejected:
			addDistinct(&ss.rejected)
		case handoff.StateCompleted, handoff.StateFailed:
			addDistinct(&ss.terminal)
		default:
			s.errf("%s sent %q for hop%d", d.name, st.State, hp.seq)
		}
		ss.last = el.Octets
		if len(ss.accepted) > 1 || len(ss.rejected) > 1 || len(ss.terminal) > 1 || len(ss.accepted)+len(ss.rejected) > 1 {
			s.errf("%s sent conflicting statuses for hop%d: %d accepted, %d rejected, %d completed/failed (draft \"Lifecycle\": at most one of each pair)",
				d.name, hp.seq, len(ss.accepted), len(ss.rejected), len(ss.terminal))
		}
		if st.State == handoff.StateRejected && d.takes[k] > 0 {
			s.errf("%s sent \"rejected\" (%s) for hop%d it took (draft \"Lifecycle\")", d.name, st.Reason, hp.seq)
		}
		if st.State == handoff.StateFailed && len(st.Refs) == 0 {
			hp.failedNoRefs = true
		}

	}
	s.send(&simMsg{kind: simStatus, from: d, to: hp.from, hop: hp, el: el})
}

// took starts what an agent does with work it took.
func (s *sim) took(a *simAgent, hp *simHop, ans *delegate.Answer) {
	j := &simJob{agent: a, hop: hp, task: hp.work.task, from: ans.Result.Handoff, exp: hp.exp, digest: hp.offer.Digest()}
	a.jobs = append(a.jobs, j)
	a.byRecv[simKey(hp.from.name, hp.id)] = j
	if a.leaf() {
		switch x := s.rng.IntN(20); {
		case x < 11:
			j.plan = simComplete
		case x < 16:
			j.plan = simFailNoEffect
		default:
			j.plan = simNever
		}
		j.finishAt = s.step + s.rng.IntN(8)
		return
	}
	for i, c := range a.children {
		w := &simWork{job: j, name: fmt.Sprintf("%s/%d", hp.id, i), task: fmt.Sprintf("%s/%d", j.task, i), to: c}
		j.works = append(j.works, w)
		s.issue(w)
	}
}

// ---- delivery: statuses ----

func (s *sim) deliverStatus(m *simMsg) {
	hp, d := m.hop, m.to
	if s.p.pMisroute > 0 && s.rng.Float64() < s.p.pMisroute {
		s.misrouteStatus(m)
	}
	before, err := d.mem.IssuedHop(s.ctx, hp.id)
	s.must(err, "%s: IssuedHop hop%d", d.name, hp.seq)
	vs, verr := handoff.VerifyStatus(m.el, hp.offer, handoff.StatusOptions{Keys: s.keys, Now: s.clock})
	s.must(verr, "status for hop%d does not verify", hp.seq)
	st := vs.Status
	conflictsBefore := s.flagCount(d, store.FlagConflictingInputs, hp.id)
	got, err := d.dor.Intake(s.ctx, hp.id, m.el)
	s.must(err, "%s: Intake of a verified %q for hop%d", d.name, st.State, hp.seq)
	s.tr("intake hop%d at %s: %s/%s -> %s resolved=%v", hp.seq, d.name, st.State, st.Reason, got.View, got.Resolved)
	hp.anyStatus = true
	notRemembered := st.State == handoff.StateRejected && (st.Reason == handoff.ReasonStale || st.Reason == handoff.ReasonReplay)
	resolving := st.State == handoff.StateCompleted || st.State == handoff.StateFailed || (st.State == handoff.StateRejected && !notRemembered)
	if !notRemembered {
		hp.delivered[st.State] = true
	}
	newConflict := false
	if resolving {
		if hp.firstTerminal == "" {
			hp.firstTerminal = st.State
		} else if hp.firstTerminal != st.State {
			newConflict = true
		}
		hp.terminalDelivered = true
		if !got.Resolved {
			s.errf("%s: a verified %q for hop%d did not resolve it (draft \"Asking Again\")", d.name, st.State, hp.seq)
		}
	}
	if notRemembered && (got.View != before.View || got.Resolved != before.Resolved) {
		s.errf("%s: a %q rejection moved hop%d from %s/%v to %s/%v (draft: it never sets the hop's state)",
			d.name, st.Reason, hp.seq, before.View, before.Resolved, got.View, got.Resolved)
	}
	if st.State == handoff.StateAccepted && before.View == store.Offered && got.View != store.ViewAccepted {
		s.errf("%s: \"accepted\" left hop%d %s", d.name, hp.seq, got.View)
	}
	// Flagged: one open flag per conflicting state, however often resent.
	if n := s.flagCount(d, store.FlagConflictingInputs, hp.id); newConflict && (n == 0 || n > conflictsBefore+1) {
		s.errf("%s: conflicting terminal statuses for hop%d not flagged", d.name, hp.seq)
	}
	s.checkIssued(d, hp, got)
}

// misrouteStatus hands a status to Intake for another hop of the same
// delegator: it answers a different offer, so it must be refused and
// change nothing (draft: the receiver checks status.offer).
func (s *sim) misrouteStatus(m *simMsg) {
	d := m.to
	var others []*simHop
	for _, o := range d.issued {
		if o != m.hop {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		return
	}
	o := others[s.rng.IntN(len(others))]
	before, err := d.mem.IssuedHop(s.ctx, o.id)
	s.must(err, "IssuedHop")
	s.st.misrouted++
	if _, err := d.dor.Intake(s.ctx, o.id, m.el); err == nil {
		s.errf("%s: Intake took a status for hop%d as one for hop%d (draft: status.offer must be the offer's digest)", d.name, m.hop.seq, o.seq)
	}
	after, err := d.mem.IssuedHop(s.ctx, o.id)
	s.must(err, "IssuedHop")
	if after.View != before.View || after.Resolved != before.Resolved || !bytes.Equal(after.Status, before.Status) {
		s.errf("%s: a status for hop%d changed hop%d", d.name, m.hop.seq, o.seq)
	}
}

// checkIssued holds the delegator's view of one hop against what was
// delivered to it: invariants 1 and 6 during the run.
func (s *sim) checkIssued(d *simAgent, hp *simHop, h *store.Issued) {
	if h.Resolved && !hp.terminalDelivered && !hp.observed {
		s.errf("%s: hop%d resolved (view %s) with no verified completed/failed/rejected delivered and no observation (draft \"Asking Again\")",
			d.name, hp.seq, h.View)
	}
	if hp.firstTerminal != "" && string(h.View) != string(hp.firstTerminal) {
		s.errf("%s: hop%d view %s, but the first verified terminal status was %q (draft: the first one stands)", d.name, hp.seq, h.View, hp.firstTerminal)
	}
	switch h.View {
	case store.Offered, store.ViewCanceled:
	case store.ViewAccepted, store.ViewRejected, store.ViewComplete, store.ViewFailed:
		if !hp.delivered[handoff.State(h.View)] {
			s.errf("%s: hop%d is %s with no such verified status delivered (draft: never guess; silence is not failed)", d.name, hp.seq, h.View)
		}
	default:
		s.errf("%s: hop%d in view %q", d.name, hp.seq, h.View)
	}
	if !hp.anyStatus && !hp.observed && (h.Resolved || (h.View != store.Offered && h.View != store.ViewCanceled)) {
		s.errf("%s: hop%d heard nothing, yet it is %s resolved=%v (draft: a missing status is not failed)", d.name, hp.seq, h.View, h.Resolved)
	}
	if !bytes.Equal(h.Offer, hp.offer.Octets) {
		s.errf("%s: the record of hop%d does not keep the offer's octets", d.name, hp.seq)
	}
}

func (s *sim) flagCount(a *simAgent, kind, hop string) int {
	fs, err := a.mem.Flags(s.ctx, true)
	s.must(err, "flags")
	n := 0
	for _, f := range fs {
		if f.Kind == kind && f.Hop == hop {
			n++
		}
	}
	return n
}

// ---- delivery: cancels ----

func (s *sim) deliverCancel(m *simMsg) {
	hp, d := m.hop, m.to
	if s.p.pMisroute > 0 && s.rng.Float64() < s.p.pMisroute {
		s.misrouteCancel(m)
	}
	s.st.cancels++
	if hp.cancelDelivEv < 0 {
		hp.cancelDelivEv = s.ev
	}
	var before *store.Record
	if r, err := d.mem.Get(s.ctx, hp.from.name, hp.id); err == nil {
		before = r
	}
	stopsBefore := len(d.stops)
	conflictsBefore := s.flagCount(d, store.FlagConflictingInputs, hp.id)
	rec, err := d.del.Cancel(s.ctx, m.el, hp.from.name, hp.id)
	if errors.Is(err, store.ErrNotFound) {
		if before != nil {
			s.errf("%s: cancel for recorded hop%d found no record", d.name, hp.seq)
		}
		if !hp.took {
			hp.cancelLost = true
			s.st.cancelLost++
		}
		s.tr("cancel hop%d at %s: no record", hp.seq, d.name)
		return
	}
	s.must(err, "%s: Cancel of hop%d", d.name, hp.seq)
	s.tr("cancel hop%d at %s: state %s", hp.seq, d.name, rec.State)
	hp.cancelRecorded = true
	if !rec.Canceled {
		s.errf("%s: Cancel of hop%d did not mark the record", d.name, hp.seq)
	}
	if before.State == store.Accepted && len(d.stops) != stopsBefore+1 {
		s.errf("%s: a cancel reached running hop%d but Stop was not called", d.name, hp.seq)
	}
	// Flagged: one open flag per hop and state however often the cancel
	// is resent.
	if n := s.flagCount(d, store.FlagConflictingInputs, hp.id); before.State.Terminal() && (n == 0 || n > conflictsBefore+1) {
		s.errf("%s: a cancel crossed the %s status of hop%d and was not flagged", d.name, before.State, hp.seq)
	}
	j := d.byRecv[simKey(hp.from.name, hp.id)]
	if j != nil {
		j.canceled = true
	}
	if d.dor == nil {
		return
	}
	// The cancel follows the hops down: every offer this agent issued
	// whose prev is this hop's offer, fan-out included.
	downs, err := d.dor.CancelDown(s.ctx, rec.Digest)
	s.must(err, "%s: CancelDown for hop%d", d.name, hp.seq)
	sort.Slice(downs, func(i, k int) bool { return s.seqOf(downs[i].Hop.Hop) < s.seqOf(downs[k].Hop.Hop) })
	var want []*simHop
	for _, c := range d.issued {
		if c.parent == hp {
			want = append(want, c)
		}
	}
	var got []*simHop
	for _, dn := range downs {
		c := s.byID[dn.Hop.Hop]
		if c == nil {
			s.errf("%s: CancelDown returned an unknown hop", d.name)
			continue
		}
		got = append(got, c)
		if dn.Hop.View != store.ViewCanceled && !isTerminalView(dn.Hop.View) {
			s.errf("%s: hop%d is %s after CancelDown", d.name, c.seq, dn.Hop.View)
		}
	}
	sort.Slice(got, func(i, k int) bool { return got[i].seq < got[k].seq })
	if len(got) != len(want) {
		s.errf("%s: CancelDown for hop%d canceled %d hops, it issued %d with that prev", d.name, hp.seq, len(got), len(want))
	} else {
		for i := range got {
			if got[i] != want[i] {
				s.errf("%s: CancelDown for hop%d canceled hop%d, want hop%d", d.name, hp.seq, got[i].seq, want[i].seq)
			}
		}
	}
	for _, dn := range downs {
		c := s.byID[dn.Hop.Hop]
		if c == nil {
			continue
		}
		c.cancelSent, c.shouldCancel = true, true
		s.send(&simMsg{kind: simCancel, from: d, to: c.to, hop: c, el: dn.Cancel})
	}
}

// misrouteCancel hands a cancel to the delegate for another hop it
// recorded: it names a different offer, so it must be refused, with no
// mark, no stop and nothing passed down.
func (s *sim) misrouteCancel(m *simMsg) {
	d := m.to
	var others []*simHop
	for _, o := range s.hops {
		if o != m.hop && o.to == d && o.took && !o.recordLost {
			others = append(others, o)
		}
	}
	if len(others) == 0 {
		return
	}
	o := others[s.rng.IntN(len(others))]
	before, err := d.mem.Get(s.ctx, o.from.name, o.id)
	s.must(err, "get")
	stops := len(d.stops)
	s.st.misrouted++
	if _, err := d.del.Cancel(s.ctx, m.el, o.from.name, o.id); err == nil {
		s.errf("%s: a cancel for hop%d was taken as one for hop%d", d.name, m.hop.seq, o.seq)
	}
	after, err := d.mem.Get(s.ctx, o.from.name, o.id)
	s.must(err, "get")
	if after.Canceled != before.Canceled || len(d.stops) != stops {
		s.errf("%s: a cancel for hop%d marked or stopped hop%d", d.name, m.hop.seq, o.seq)
	}
}

func isTerminalView(v store.View) bool {
	return v == store.ViewRejected || v == store.ViewComplete || v == store.ViewFailed
}

// ---- the agents' own steps ----

func (s *sim) tick() {
	for _, a := range s.agents {
		for _, j := range a.jobs {
			if a.leaf() {
				s.tickLeaf(a, j)
			} else {
				s.tickJob(a, j)
			}
		}
	}
}

func (s *sim) tickLeaf(a *simAgent, j *simJob) {
	if j.finished {
		return
	}
	hp := j.hop
	if j.stopped && !j.stopSeen {
		j.stopSeen = true
		if !j.effect && s.rng.IntN(10) < 7 { // stopped in time: nothing took effect
			j.plan, j.finishAt = simFailNoEffect, s.step
		}
	}
	if s.step < j.finishAt {
		return
	}
	j.finished = true
	switch j.plan {
	case simComplete:
		j.effect, hp.effect = true, true
		s.effects[j.task]++
		s.st.effects++
		ref := handoff.ContextRef{Kind: handoff.KindDigest, Dig: handoff.DigestOf([]byte(j.task + "@" + hp.id))}
		st, err := a.del.Finish(s.ctx, hp.from.name, hp.id, delegate.Outcome{State: store.Completed, Refs: []handoff.ContextRef{ref}})
		s.must(err, "%s: Finish completed hop%d", a.name, hp.seq)
		s.finishSent(a, hp, st)
	case simFailNoEffect:
		st, err := a.del.Finish(s.ctx, hp.from.name, hp.id, delegate.Outcome{State: store.Failed, NoEffect: true})
		s.must(err, "%s: Finish failed hop%d", a.name, hp.seq)
		s.finishSent(a, hp, st)
		if s.p.pConflict > 0 && s.rng.Float64() < s.p.pConflict {
			// A faulty delegate (not delegate.Delegate) contradicts itself
			// with a validly signed "completed": whichever the delegator
			// verifies first stands, and the conflict is flagged.
			bogus, err := a.signer.SignStatus(&handoff.Status{Offer: hp.offer.Digest(), Iss: a.name, Aud: hp.from.name,
				Iat: s.now.Unix(), State: handoff.StateCompleted}, a.form)
			s.must(err, "sign")
			s.st.conflicts++
			s.send(&simMsg{kind: simStatus, from: a, to: hp.from, hop: hp, el: bogus})
		}
	case simNever:
		// The outcome cannot be learned: the work may or may not have
		// taken effect; the delegate never guesses.
		if s.rng.IntN(2) == 0 {
			j.effect, hp.effect = true, true
			s.effects[j.task]++
			s.st.effects++
		}
		if s.rng.IntN(2) == 0 {
			s.must(a.del.Unknown(s.ctx, hp.from.name, hp.id, "the effect cannot be observed"), "%s: Unknown hop%d", a.name, hp.seq)
		}
	}
}

func (s *sim) finishSent(a *simAgent, hp *simHop, st *handoff.Element) {
	s.st.finished++
	r, err := a.mem.Get(s.ctx, hp.from.name, hp.id)
	s.must(err, "get")
	if !bytes.Equal(r.Status, st.Octets) {
		s.errf("%s: the record of hop%d does not hold the status Finish returned", a.name, hp.seq)
	}
	if r.State == store.Failed && r.Equivocated {
		if v := s.statusOf(a, st, hp); v.Reason != handoff.ReasonEquivocation {
			s.errf("%s: \"failed\" for equivocated hop%d has reason %q, want equivocation (draft \"Forks, Concurrency, and Equivocation\")", a.name, hp.seq, v.Reason)
		}
	}
	s.tr("finish hop%d at %s: %s", hp.seq, a.name, r.State)
	s.sendStatus(a, hp, *st)
}

// tickJob: a delegator looks at the works of a job; a work whose hop
// resolved with no effect may get a new attempt (a new offer, a new hop),
// and a job whose works are all concluded is finished.
func (s *sim) tickJob(a *simAgent, j *simJob) {
	if j.finished {
		return
	}
	for _, w := range j.works {
		if w.concluded {
			continue
		}
		if w.cur == nil { // the root's works start at step 0
			s.issue(w)
			continue
		}
		h, err := a.mem.IssuedHop(s.ctx, w.cur.id)
		s.must(err, "IssuedHop")
		if !h.Resolved {
			continue
		}
		var refs []handoff.ContextRef
		if h.Status != nil {
			_, st, err := handoff.UnsafeDecode(handoff.Element{Form: h.StatusForm, Octets: h.Status})
			s.must(err, "decode status")
			refs = st.Refs
		}
		switch {
		case h.View == store.ViewComplete:
			w.concluded, w.completed, w.refs = true, true, refs
		case h.View == store.ViewFailed && len(refs) > 0:
			w.concluded, w.refs = true, refs
		default: // failed with no refs, rejected, or observed: nothing took effect
			if !j.canceled && !j.equiv && s.now.Before(j.exp) && w.attempts < 3 && s.rng.Float64() < s.p.pRetry {
				s.st.retries++
				s.issue(w)
				continue
			}
			w.concluded = true
		}
	}
	if j.hop == nil { // the root has no one to answer
		return
	}
	var refs []handoff.ContextRef
	all := true
	for _, w := range j.works {
		if !w.concluded {
			return
		}
		all = all && w.completed
		refs = append(refs, w.refs...)
	}
	j.finished = true
	out := delegate.Outcome{State: store.Completed, Refs: refs}
	if !all {
		out = delegate.Outcome{State: store.Failed, Refs: refs, NoEffect: len(refs) == 0}
	}
	st, err := a.del.Finish(s.ctx, j.hop.from.name, j.hop.id, out)
	s.must(err, "%s: Finish hop%d", a.name, j.hop.seq)
	s.finishSent(a, j.hop, st)
}

// rootCancel: the root revokes every hop it has that is not resolved.
func (s *sim) rootCancel() {
	j := s.root.jobs[0]
	j.canceled = true
	for _, w := range j.works {
		if w.cur == nil {
			w.concluded = true
			continue
		}
		hp := w.cur
		h, err := s.root.mem.IssuedHop(s.ctx, hp.id)
		s.must(err, "IssuedHop")
		if h.Resolved {
			continue
		}
		el, got, err := s.root.dor.Cancel(s.ctx, hp.id)
		s.must(err, "root: Cancel hop%d", hp.seq)
		if isTerminalView(h.View) {
			if got.View != h.View {
				s.errf("root: Cancel moved terminal hop%d from %s to %s", hp.seq, h.View, got.View)
			}
		} else if got.View != store.ViewCanceled {
			s.errf("root: hop%d is %s after Cancel", hp.seq, got.View)
		}
		if got.Resolved != h.Resolved {
			s.errf("root: Cancel changed whether hop%d is resolved (draft: a cancel does not show the work took no effect)", hp.seq)
		}
		hp.cancelSent, hp.shouldCancel = true, true
		s.tr("root cancels hop%d", hp.seq)
		s.send(&simMsg{kind: simCancel, from: s.root, to: hp.to, hop: hp, el: el})
	}
}

// probe: invariant 3 at a random moment. A second offer for work whose
// hop is unresolved must fail with ErrUnresolvedWork (draft "Asking
// Again": no new offer while the hop is unresolved).
func (s *sim) probe() {
	var cands []*simWork
	for _, a := range s.agents {
		for _, j := range a.jobs {
			for _, w := range j.works {
				if w.cur != nil && !w.concluded {
					cands = append(cands, w)
				}
			}
		}
	}
	if len(cands) == 0 {
		return
	}
	w := cands[s.rng.IntN(len(cands))]
	a := w.job.agent
	h, err := a.mem.IssuedHop(s.ctx, w.cur.id)
	s.must(err, "IssuedHop")
	if h.Resolved {
		return
	}
	s.st.probes++
	_, rec, err := a.dor.Offer(s.ctx, delegator.Offer{Aud: w.to.name, Dialog: s.dialog, Task: w.task, Work: w.name,
		TTL: s.p.ttl, From: w.job.from})
	if !errors.Is(err, store.ErrUnresolvedWork) {
		hop := ""
		if rec != nil {
			hop = rec.Hop
		}
		s.errf("%s: a second offer for work %s while hop%d is unresolved (view %s) gave err=%v hop=%q, want ErrUnresolvedWork (draft \"Asking Again\")",
			a.name, w.name, w.cur.seq, h.View, err, hop)
	}
}

// observe: an authoritative observation that a hop's work did not take
// effect, made only when it is true: the delegate holds no record of it
// (it never took the offer, whatever its store says after a restart) and
// the offer has expired, so no copy still in flight can be taken.
func (s *sim) observe() {
	for _, hp := range s.hops {
		if hp.observed || s.rng.Float64() >= s.p.pObserve {
			continue
		}
		h, err := hp.from.mem.IssuedHop(s.ctx, hp.id)
		s.must(err, "IssuedHop")
		if h.Resolved || s.now.Unix() < hp.exp.Unix() {
			continue
		}
		if hp.took {
			continue
		}
		s.must(hp.from.dor.Observe(s.ctx, hp.id), "Observe")
		hp.observed = true
		s.st.observed++
		got, err := hp.from.mem.IssuedHop(s.ctx, hp.id)
		s.must(err, "IssuedHop")
		if !got.Resolved || !got.NextAsk.IsZero() {
			s.errf("%s: hop%d not resolved (or still asked) after Observe", hp.from.name, hp.seq)
		}
		s.tr("observe hop%d", hp.seq)
	}
}

// due: every delegator asks again; a retransmission resends the Handoff
// octets first sent for the hop, and Due must hand back the identical
// offer octets it was given.
func (s *sim) due() {
	for _, a := range s.agents {
		if a.dor == nil {
			continue
		}
		asks, err := a.dor.Due(s.ctx)
		s.must(err, "%s: Due", a.name)
		sort.Slice(asks, func(i, k int) bool { return s.seqOf(asks[i].Hop.Hop) < s.seqOf(asks[k].Hop.Hop) })
		for _, ask := range asks {
			hp := s.byID[ask.Hop.Hop]
			if hp == nil || hp.from != a {
				s.errf("%s: Due returned a hop it did not issue", a.name)
				continue
			}
			hp.asks++
			if !bytes.Equal(ask.Offer.Octets, hp.offer.Octets) || ask.Offer.Form != hp.offer.Form {
				s.errf("%s: Due returned other octets for hop%d than the offer first sent (draft: identical octets)", a.name, hp.seq)
			}
			if ask.Hop.Resolved {
				s.errf("%s: Due asks again about resolved hop%d", a.name, hp.seq)
			}
			if ask.Attempt != hp.asks || ask.Attempt > simMaxAttempts {
				s.errf("%s: retransmission %d of hop%d reported as attempt %d", a.name, hp.asks, hp.seq, ask.Attempt)
			}
			if ask.Hop.View == store.Offered && !s.now.Before(hp.exp) && !delegator.Expired(ask.Hop, s.now) {
				s.errf("%s: hop%d past exp with no status is not expired", a.name, hp.seq)
			}
			s.tr("ask hop%d attempt %d", hp.seq, ask.Attempt)
			s.send(&simMsg{kind: simOffer, from: a, to: hp.to, hop: hp, body: hp.octets, retrans: true})
		}
	}
}

func (s *sim) seqOf(hop string) int {
	if hp := s.byID[hop]; hp != nil {
		return hp.seq
	}
	return -1
}

// quiet: nothing in flight, no retransmission scheduled, no leaf busy.
func (s *sim) quiet() bool {
	if len(s.net) > 0 {
		return false
	}
	for _, hp := range s.hops {
		h, err := hp.from.mem.IssuedHop(s.ctx, hp.id)
		s.must(err, "IssuedHop")
		if !h.NextAsk.IsZero() {
			return false
		}
	}
	for _, a := range s.agents {
		if !a.leaf() {
			continue
		}
		for _, j := range a.jobs {
			if !j.finished {
				return false
			}
		}
	}
	return true
}

func (s *sim) run() (err []string) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(simAbort); !ok {
				s.errf("panic: %v", r)
			}
		}
		err = s.errs
	}()
	for s.step = 0; ; s.step++ {
		s.st.steps++
		s.deliverDue()
		if s.step == s.p.restartAt {
			s.restart()
		}
		if s.step == s.p.cancelAt {
			s.rootCancel()
		}
		s.tick()
		s.deliverDue()
		if s.step < s.p.active {
			if s.rng.Float64() < s.p.pProbe {
				s.probe()
			}
		}
		if s.p.pObserve > 0 {
			s.observe()
		}
		s.due()
		if s.step >= s.p.active && s.quiet() {
			break
		}
		if s.step > s.p.active+simDrainCap {
			s.errf("no quiet after %d steps: Due never gives up, or messages keep coming", s.step)
			return
		}
		s.now = s.now.Add(time.Second)
		if len(s.errs) > 0 {
			return
		}
	}
	s.final()
	return
}

// final checks the invariants once the run has drained.
func (s *sim) final() {
	// Work done at most once: per (agent, hop), and per logical task
	// across all attempts (a new attempt only after a hop resolved with
	// no effect).
	for _, a := range s.agents {
		for _, j := range a.jobs {
			if j.hop != nil && a.takes[simKey(j.hop.from.name, j.hop.id)] != 1 {
				s.errf("%s: hop%d taken %d times", a.name, j.hop.seq, a.takes[simKey(j.hop.from.name, j.hop.id)])
			}
		}
	}
	tasks := make([]string, 0, len(s.effects))
	for t := range s.effects {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks)
	for _, t := range tasks {
		if s.effects[t] > 1 {
			s.errf("task %s took effect %d times (draft \"Asking Again\": no new offer while a hop is unresolved)", t, s.effects[t])
		}
	}
	// "failed" with no refs says that the work took no effect.
	sub := map[*simHop]bool{}
	for _, hp := range s.hops {
		if hp.effect {
			for p := hp; p != nil; p = p.parent {
				sub[p] = true
			}
		}
	}
	for _, hp := range s.hops {
		if hp.failedNoRefs && sub[hp] {
			s.errf("%s sent \"failed\" with no refs for hop%d, but work under it took effect (draft \"Knowing the Outcome\")", hp.to.name, hp.seq)
		}
	}
	unknownFlags := map[string]map[string]bool{}
	for _, hp := range s.hops {
		d := hp.from
		h, err := d.mem.IssuedHop(s.ctx, hp.id)
		s.must(err, "IssuedHop")
		s.checkIssued(d, hp, h)
		rec, rerr := hp.to.mem.Get(s.ctx, hp.from.name, hp.id)
		if rerr != nil && !errors.Is(rerr, store.ErrNotFound) {
			s.must(rerr, "get")
		}
		if rec != nil && !hp.took && !hp.canceledEarly || rec == nil && (hp.took || hp.canceledEarly) && !hp.recordLost {
			s.errf("%s: hop%d taken=%v but record present=%v", hp.to.name, hp.seq, hp.took, rec != nil)
		}
		// Invariant 6: silence never becomes failed, and a hop it stopped
		// asking about while unresolved is flagged.
		if !h.Resolved {
			s.st.unresolved++
			if !h.NextAsk.IsZero() {
				s.errf("%s: hop%d still scheduled after the drain", d.name, hp.seq)
			}
			if unknownFlags[d.name] == nil {
				unknownFlags[d.name] = map[string]bool{}
				fs, err := d.dor.Flags(s.ctx, true)
				s.must(err, "flags")
				for _, f := range fs {
					if f.Kind == store.FlagUnknownOutcome {
						unknownFlags[d.name][f.Hop] = true
					}
				}
			}
			if !unknownFlags[d.name][hp.id] {
				s.errf("%s: stopped asking about unresolved hop%d (view %s, %d asks) without flagging it (draft \"Asking Again\")", d.name, hp.seq, h.View, hp.asks)
			} else {
				s.st.flagged++
			}
		}
		// Liveness where nothing is lost: a hop whose delegate recorded
		// a terminal state is resolved at its delegator.
		if s.p.faultFree && rec != nil && rec.State.Terminal() && !h.Resolved {
			s.errf("fault-free run: %s recorded hop%d %s, but %s never resolved it", hp.to.name, hp.seq, rec.State, d.name)
		}
		// Invariant 4 at rest: the record's status is the last one sent.
		if rec != nil {
			if ss := hp.to.sent[simKey(hp.from.name, hp.id)]; ss != nil && !bytes.Equal(ss.last, rec.Status) {
				s.errf("%s: the record of hop%d does not hold the last status sent", hp.to.name, hp.seq)
			}
		}
		// Invariant 5: a cancel that reached a recorded hop marks it.
		if hp.cancelRecorded && !hp.recordLost && (rec == nil || !rec.Canceled) {
			s.errf("%s: a cancel reached hop%d but its record is not canceled", hp.to.name, hp.seq)
		}
		if s.p.cancelNoDrop && hp.shouldCancel {
			switch {
			case hp.cancelDelivEv < 0:
				s.errf("no-drop cancel path: the cancel for hop%d (%s->%s) was never delivered", hp.seq, hp.from.name, hp.to.name)
			case rec != nil && !rec.Canceled && !hp.recordLost:
				s.errf("no-drop cancel path: %s received hop%d but its record is not canceled", hp.to.name, hp.seq)
			}
		}
		if hp.tookAfterLost && hp.to.restarts == 0 {
			// The delegate held the cancel that overtook the offer; only a
			// restart (which loses what it held) may let the offer in.
			s.errf("%s took hop%d after its cancel had arrived (Lifecycle: canceled from offered)", hp.to.name, hp.seq)
		}
		if hp.tookAfterLost {
			if s.st.firstLateTakeSeed == 0 {
				s.st.firstLateTakeSeed = s.seed
			}
		}
	}
}

// ---- the test ----

func TestSimulation(t *testing.T) {
	runs := 2000
	if testing.Short() {
		runs = 200
	}
	if *simRuns > 0 {
		runs = *simRuns
	}
	seeds := make([]uint64, 0, runs)
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		for i := 1; i <= runs; i++ {
			seeds = append(seeds, uint64(i))
		}
	}
	simIdentities(t)
	start := time.Now()

	// Determinism: a replay of a seed makes the same trace.
	for _, seed := range seeds[:min(simDetRuns, len(seeds))] {
		a, b := newSim(t, seed, true), newSim(t, seed, true)
		a.run()
		b.run()
		if ha, hb := traceHash(a.trace), traceHash(b.trace); ha != hb || len(a.trace) == 0 {
			t.Errorf("seed %d: two runs of one seed differ (%d vs %d events)", seed, len(a.trace), len(b.trace))
			for i := range min(len(a.trace), len(b.trace)) {
				if a.trace[i] != b.trace[i] {
					t.Errorf("first difference at event %d:\n  %s\n  %s", i, a.trace[i], b.trace[i])
					break
				}
			}
		}
	}

	var (
		mu    sync.Mutex
		total simStats
		fails int
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	workers := runtime.GOMAXPROCS(0)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(seeds) {
					return
				}
				s := newSim(t, seeds[i], *simSeed != 0 && testing.Verbose())
				errs := s.run()
				mu.Lock()
				total.add(&s.st)
				total.runs++
				if len(errs) > 0 {
					fails++
					if fails <= 10 {
						t.Errorf("%s\n  params: %s", strings.Join(errs, "\n  "), s.p)
					}
				}
				if s.tracing {
					for _, l := range s.trace {
						t.Log(l)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if fails > 10 {
		t.Errorf("%d of %d runs failed (first 10 shown)", fails, total.runs)
	}
	t.Logf("%d runs in %v: %d steps; messages %d sent, %d dropped, %d duplicated, %d delayed, %d delivered",
		total.runs, time.Since(start).Round(time.Millisecond), total.steps, total.sent, total.dropped, total.duplicated, total.delayed, total.delivered)
	t.Logf("leaf restarts %d, replay rejections %d, self-contradicting delegates %d, misrouted statuses/cancels %d", total.restarts, total.replay, total.conflicts, total.misrouted)
	t.Logf("takes %d, effects %d, statuses finished %d, stale rejections %d, equivocations %d, same-content copies %d, cancels delivered %d (%d before their offer, %d of those hops taken later), observations %d, retries %d, probes %d, unresolved at end %d (flagged %d)",
		total.takes, total.effects, total.finished, total.stale, total.equivocations, total.copies, total.cancels, total.cancelLost, total.lateTakes,
		total.observed, total.retries, total.probes, total.unresolved, total.flagged)
	if total.lateTakes > 0 {
		t.Logf("note: a cancel that overtook its offer was held by a delegate that then restarted (losing it), and the offer was taken later; first seed: %d", total.firstLateTakeSeed)
	}
}

func (a *simStats) add(b *simStats) {
	a.steps += b.steps
	a.sent += b.sent
	a.dropped += b.dropped
	a.duplicated += b.duplicated
	a.delayed += b.delayed
	a.delivered += b.delivered
	a.takes += b.takes
	a.effects += b.effects
	a.cancels += b.cancels
	a.cancelLost += b.cancelLost
	a.lateTakes += b.lateTakes
	a.stale += b.stale
	a.replay += b.replay
	a.restarts += b.restarts
	a.misrouted += b.misrouted
	a.equivocations += b.equivocations
	a.copies += b.copies
	a.observed += b.observed
	a.probes += b.probes
	a.retries += b.retries
	a.unresolved += b.unresolved
	a.flagged += b.flagged
	a.conflicts += b.conflicts
	a.finished += b.finished
	if a.firstLateTakeSeed == 0 || (b.firstLateTakeSeed != 0 && b.firstLateTakeSeed < a.firstLateTakeSeed) {
		a.firstLateTakeSeed = b.firstLateTakeSeed
	}
}

func (p simParams) String() string {
	enc := "JSON"
	if p.enc == handoff.CBOR {
		enc = "CBOR"
	}
	return fmt.Sprintf("depth %d fan-out at level %d, %s, ttl %v, drop %.2f dup %.2f delay %.2f (max %d), cancel at %d (no-drop path %v), equiv %.2f, observe %.2f, probe %.2f, retry %.2f, active %d, fault-free %v, restart at %d, conflict %.2f, misroute %.2f",
		p.depth, p.fanLevel, enc, p.ttl, p.pDrop, p.pDup, p.pDelay, p.maxDelay, p.cancelAt, p.cancelNoDrop, p.pEquiv, p.pObserve, p.pProbe, p.pRetry, p.active, p.faultFree, p.restartAt, p.pConflict, p.pMisroute)
}

func traceHash(tr []string) uint64 {
	h := fnv.New64a()
	for _, l := range tr {
		h.Write([]byte(l))
		h.Write([]byte{0})
	}
	return h.Sum64()
}
