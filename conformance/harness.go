package conformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Driver runs one case on the implementation under test. An error is the
// harness's or the driver's own failure (the run stops); a case the
// implementation gets wrong is an Answer that Judge fails.
type Driver interface {
	Do(ctx context.Context, req *Request) (*Answer, error)
	Close() error
}

// The outcomes of a case.
const (
	Pass         = "pass"
	Fail         = "fail"
	NotTested    = "not-tested"     // the driver skipped it (or, for a row, no case of it ran)
	KnownFailure = "known-failure"  // failed, and listed in the baseline
	StaleListing = "stale-baseline" // passed, but listed in the baseline as failing
	Partial      = "partial"        // a row some of whose cases passed and none failed, but not all ran
	NoVectors    = "no-vectors"     // a row no case of the kit names (docs/conformance.md says how this module checks it)
	Excluded     = "excluded"       // a row the requirements file excludes
)

// CaseResult is one case's outcome.
type CaseResult struct {
	ID           string   `json:"id"`
	Kind         string   `json:"kind"`
	Level        string   `json:"level"`
	Requirements []string `json:"requirements"`
	Outcome      string   `json:"outcome"`
	Why          string   `json:"why,omitempty"`
	// Listed: the baseline lists the case (known not to pass).
	Listed bool `json:"listed,omitempty"`
}

// RequirementResult is one requirement row's outcome: pass when every case
// of the kit naming it passed, fail when one failed (known failures
// included), partial when some passed and the others did not run
// (skipped, or left out by --run), not-tested when none ran (no case
// names it, or none of them ran), excluded when the requirements file
// excludes it. Only pass counts for the score.
type RequirementResult struct {
	ID      string   `json:"id"`
	Level   string   `json:"level"`
	Outcome string   `json:"outcome"`
	Cases   []string `json:"cases,omitempty"`
}

// Report is a run's results, as results.json holds them.
type Report struct {
	Kit            string              `json:"kit"`
	Version        int                 `json:"version"`
	CorpusDigest   string              `json:"corpusDigest"`
	Implementation string              `json:"implementation"`
	Filter         string              `json:"filter,omitempty"`  // --run: only the cases whose id matches ran
	Stopped        string              `json:"stopped,omitempty"` // the harness or the driver broke: why, and at which case
	Cases          []CaseResult        `json:"cases"`
	Requirements   []RequirementResult `json:"requirements"`
	Summary        Summary             `json:"summary"`
}

// Summary counts a Report. MustPercent and ShouldPercent are the passing
// share of the MUST-level and SHOULD-level rows that are not excluded: a
// row not tested counts against them.
type Summary struct {
	Cases         map[string]int `json:"cases"`
	MustRows      int            `json:"mustRows"`
	MustPassed    int            `json:"mustPassed"`
	MustPercent   float64        `json:"mustPercent"`
	ShouldRows    int            `json:"shouldRows"`
	ShouldPassed  int            `json:"shouldPassed"`
	ShouldPercent float64        `json:"shouldPercent"`
}

// OK reports whether the run passed: every case it ran passed, but those
// the baseline lists (failed or skipped), and no baseline entry is stale.
// A skipped case the baseline does not list fails the run: a driver that
// skips everything passes nothing.
func (r *Report) OK() bool {
	if r.Summary.Cases[Fail] > 0 || r.Summary.Cases[StaleListing] > 0 {
		return false
	}
	for _, c := range r.Cases {
		if c.Outcome == NotTested && !c.Listed {
			return false
		}
	}
	return true
}

// RunOptions tune Run.
type RunOptions struct {
	Implementation string          // how the implementation was run, for the report
	Baseline       map[string]bool // case ids known to fail
	Match          *regexp.Regexp  // run only the cases whose id matches; nil: all
	Progress       func(CaseResult)
}

// Run drives every case of the kit through d and judges the answers. When
// the driver breaks (no answer, a line that is no answer, an answer to
// another case) it returns the error with the report so far, Stopped
// saying where, so that the verdicts already given are not lost.
func Run(ctx context.Context, k *Kit, d Driver, o RunOptions) (*Report, error) {
	rep := &Report{Kit: k.Manifest.Kit, Version: k.Manifest.Version, CorpusDigest: k.Manifest.CorpusDigest,
		Implementation: o.Implementation, Summary: Summary{Cases: map[string]int{}}}
	if o.Match != nil {
		rep.Filter = o.Match.String()
	}
	for id := range o.Baseline {
		if !slices.ContainsFunc(k.Cases, func(c *Case) bool { return c.ID == id }) {
			return nil, fmt.Errorf("baseline: %q is not a case of this kit", id)
		}
	}
	for _, c := range k.Cases {
		if o.Match != nil && !o.Match.MatchString(c.ID) {
			continue
		}
		req, err := k.NewRequest(c)
		if err != nil {
			return nil, err
		}
		a, err := d.Do(ctx, req)
		if err == nil && a.ID != c.ID {
			err = fmt.Errorf("the driver answered for case %q: answers must echo the id, in order", a.ID)
		}
		if err != nil {
			err = fmt.Errorf("case %s: %w", c.ID, err)
			rep.Stopped = err.Error()
			rep.score(k)
			return rep, err
		}
		cr := CaseResult{ID: c.ID, Kind: c.Kind, Level: c.Level, Requirements: c.Requirements}
		switch {
		case a.Skip != "":
			cr.Outcome, cr.Why = NotTested, a.Skip
		default:
			cr.Outcome, cr.Why = Pass, ""
			if err := Judge(k, c, a); err != nil {
				cr.Outcome, cr.Why = Fail, err.Error()
			}
		}
		cr.Listed = o.Baseline[c.ID]
		switch listed := cr.Listed; {
		case listed && cr.Outcome == Fail:
			cr.Outcome = KnownFailure
		case listed && cr.Outcome == Pass:
			cr.Outcome, cr.Why = StaleListing, "passes now: remove it from the baseline"
		}
		rep.Summary.Cases[cr.Outcome]++
		rep.Cases = append(rep.Cases, cr)
		if o.Progress != nil {
			o.Progress(cr)
		}
	}
	rep.score(k)
	return rep, nil
}

func (rep *Report) score(k *Kit) {
	outcome := map[string]string{}
	for _, cr := range rep.Cases {
		outcome[cr.ID] = cr.Outcome
	}
	byReq := map[string][]string{} // every case of the kit, run or not
	for _, c := range k.Cases {
		for _, r := range c.Requirements {
			byReq[r] = append(byReq[r], c.ID)
		}
	}
	for _, r := range k.Requirements {
		rr := RequirementResult{ID: r.ID, Level: r.Level, Cases: byReq[r.ID]}
		passed, failed := 0, false
		for _, id := range rr.Cases {
			switch outcome[id] {
			case Pass, StaleListing:
				passed++
			case Fail, KnownFailure:
				failed = true
			}
		}
		switch {
		case r.Excluded != "":
			rr.Outcome = Excluded
		case failed:
			rr.Outcome = Fail
		case passed > 0 && passed == len(rr.Cases):
			rr.Outcome = Pass
		case passed > 0:
			rr.Outcome = Partial
		case len(rr.Cases) == 0:
			rr.Outcome = NoVectors
		default:
			rr.Outcome = NotTested
		}
		rep.Requirements = append(rep.Requirements, rr)
		counted := r.Excluded == ""
		switch {
		case r.Must() && counted:
			rep.Summary.MustRows++
			if rr.Outcome == Pass {
				rep.Summary.MustPassed++
			}
		case r.Should() && counted:
			rep.Summary.ShouldRows++
			if rr.Outcome == Pass {
				rep.Summary.ShouldPassed++
			}
		}
	}
	pct := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return float64(int(1000*float64(a)/float64(b)+0.5)) / 10
	}
	rep.Summary.MustPercent = pct(rep.Summary.MustPassed, rep.Summary.MustRows)
	rep.Summary.ShouldPercent = pct(rep.Summary.ShouldPassed, rep.Summary.ShouldRows)
}

// WriteTable prints the report: one line per case, one per requirement,
// and the totals.
func (rep *Report) WriteTable(w io.Writer) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	fmt.Fprintf(bw, "conformance kit %s v%d, corpus %s\nimplementation: %s\n", rep.Kit, rep.Version, rep.CorpusDigest, rep.Implementation)
	if rep.Filter != "" {
		fmt.Fprintf(bw, "only the cases matching --run %s: rows with cases left out are partial at best\n", rep.Filter)
	}
	fmt.Fprintln(bw)
	fmt.Fprintf(bw, "%-14s  %-13s  %-8s  %s\n", "OUTCOME", "KIND", "LEVEL", "CASE")
	for _, c := range rep.Cases {
		fmt.Fprintf(bw, "%-14s  %-13s  %-8s  %s\n", c.Outcome, c.Kind, c.Level, c.ID)
		if c.Outcome != Pass && c.Why != "" {
			fmt.Fprintf(bw, "%16s%s\n", "", oneLine(c.Why))
		}
	}
	fmt.Fprintf(bw, "\n%-10s  %-11s  %-6s  %s\n", "OUTCOME", "LEVEL", "CASES", "REQUIREMENT")
	for _, r := range rep.Requirements {
		fmt.Fprintf(bw, "%-10s  %-11s  %-6d  %s\n", r.Outcome, r.Level, len(r.Cases), r.ID)
	}
	s := rep.Summary
	listedSkips := 0
	for _, c := range rep.Cases {
		if c.Outcome == NotTested && c.Listed {
			listedSkips++
		}
	}
	fmt.Fprintf(bw, "\ncases: %d pass, %d fail, %d not tested (%d of them in the baseline), %d known failures, %d stale baseline entries\n",
		s.Cases[Pass], s.Cases[Fail], s.Cases[NotTested], listedSkips, s.Cases[KnownFailure], s.Cases[StaleListing])
	fmt.Fprintf(bw, "MUST: %d of %d rows pass (%.1f%%); SHOULD: %d of %d (%.1f%%); a row passes when every case naming it passed, and a row no case tests counts against them\n",
		s.MustPassed, s.MustRows, s.MustPercent, s.ShouldPassed, s.ShouldRows, s.ShouldPercent)
	if rep.Filter != "" {
		fmt.Fprintf(bw, "(only the cases matching --run %s ran: the scores count the rest as not tested)\n", rep.Filter)
	}
	if rep.Stopped != "" {
		fmt.Fprintf(bw, "THE RUN STOPPED at %s: the cases after it did not run\n", rep.Stopped)
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// ReadBaseline reads a baseline file: one case id per line; blank lines
// and lines starting with # are ignored.
func ReadBaseline(name string) (map[string]bool, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			m[line] = true
		}
	}
	return m, nil
}
