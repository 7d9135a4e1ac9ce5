package conformance_test

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/conformance"
)

// brokenEnv makes this test binary the driver of a deliberately broken
// implementation: the module's own, with one rule of the draft undone.
// The harness must catch each, in the rows that rule belongs to.
const brokenEnv = "HANDOFF_TEST_BROKEN_DRIVER"

func TestMain(m *testing.M) {
	if v := os.Getenv(brokenEnv); v != "" {
		impl, ok := broken[v]
		if !ok {
			fmt.Fprintf(os.Stderr, "no broken driver %q\n", v)
			os.Exit(2)
		}
		if err := conformance.Serve(os.Stdin, os.Stdout, impl); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type doer interface {
	Do(*conformance.Request) (*conformance.Answer, error)
}

type doFunc func(*conformance.Request) (*conformance.Answer, error)

func (f doFunc) Do(r *conformance.Request) (*conformance.Answer, error) { return f(r) }

var (
	lib = conformance.Library{}
	b64 = base64.RawURLEncoding
)

// offerOf reads a delivery's offer without verifying it.
func offerOf(hexHandoff string) *handoff.Offer {
	b, _ := hex.DecodeString(hexHandoff)
	h, _ := handoff.ParseHandoff(b, handoff.Limits{})
	if h == nil || h.Offer.Octets == nil {
		return nil
	}
	o, _, _ := handoff.UnsafeDecode(h.Offer)
	return o
}

// reencode rewrites every JWS chain element's payload as Go re-marshals
// it (members sorted): the same content in other octets, as an
// implementation that decodes and re-encodes what it carries would.
func reencode(hexHandoff string) string {
	b, _ := hex.DecodeString(hexHandoff)
	h, err := handoff.ParseHandoff(b, handoff.Limits{})
	if err != nil || len(h.Chain) == 0 {
		return hexHandoff
	}
	for i, e := range h.Chain {
		parts := strings.Split(e.Text(), ".")
		if len(parts) != 3 {
			continue
		}
		p, err := b64.DecodeString(parts[1])
		var m map[string]any
		if err != nil || json.Unmarshal(p, &m) != nil {
			continue
		}
		p, _ = json.Marshal(m)
		parts[1] = b64.EncodeToString(p)
		h.Chain[i] = handoff.ParseElement([]byte(strings.Join(parts, ".")))
	}
	enc := handoff.JSON
	if !handoff.IsJSON(b) {
		enc = handoff.CBOR
	}
	out, err := h.Encode(enc)
	if err != nil {
		return hexHandoff
	}
	return hex.EncodeToString(out)
}

var broken = map[string]doer{
	// The receiver takes itself to be whatever audience the offer names:
	// step 2 never fails.
	"skip-audience": doFunc(func(r *conformance.Request) (*conformance.Answer, error) {
		if r.Kind == conformance.KindVerify {
			if o := offerOf(r.Deliveries[len(r.Deliveries)-1].Handoff); o != nil {
				r.Me = o.Aud
			}
		}
		return lib.Do(r)
	}),
	// Chain elements are decoded and written again before they are
	// checked or passed on.
	"reencode-chain": doFunc(func(r *conformance.Request) (*conformance.Answer, error) {
		for i := range r.Deliveries {
			r.Deliveries[i].Handoff = reencode(r.Deliveries[i].Handoff)
		}
		if r.Kind == conformance.KindSignOffer && r.From != "" {
			r.From = reencode(r.From)
		}
		return lib.Do(r)
	}),
	// No replay memory: every delivery is judged by a receiver of its own.
	"no-replay-memory": doFunc(func(r *conformance.Request) (*conformance.Answer, error) {
		if r.Kind != conformance.KindVerify {
			return lib.Do(r)
		}
		all := &conformance.Answer{}
		for _, d := range r.Deliveries {
			one := *r
			one.Deliveries = []conformance.RequestDelivery{d}
			a, err := lib.Do(&one)
			if err != nil {
				return nil, err
			}
			all.Deliveries = append(all.Deliveries, a.Deliveries...)
		}
		return all, nil
	}),
	// A copy with other octets (a malleated signature, an edited COSE
	// unprotected header) is taken for equivocation, against D5.
	"malleation-is-equivocation": doFunc(func(r *conformance.Request) (*conformance.Answer, error) {
		a, err := lib.Do(r)
		if err != nil || r.Kind != conformance.KindVerify {
			return a, err
		}
		var digests []string
		for i, v := range a.Deliveries {
			d := ""
			if v.Offer != nil {
				d = *v.Offer
			}
			if v.Result == string(handoff.Retransmission) && !slices.Contains(digests, d) {
				a.Deliveries[i].Result = string(handoff.Equivocation)
			}
			digests = append(digests, d)
		}
		return a, nil
	}),
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// handoffBinary builds cmd/handoff once for the tests of this file.
func handoffBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "handoff-conformance-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "handoff")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/handoff").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// runHarness runs `handoff conformance` with args and returns its exit
// code, its output and the results it wrote.
func runHarness(t *testing.T, env []string, args ...string) (int, string, *conformance.Report) {
	t.Helper()
	results := filepath.Join(t.TempDir(), "results.json")
	cmd := exec.Command(handoffBinary(t), append([]string{"conformance", "--kit", kitDir, "--results", results}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep conformance.Report
	if b, err := os.ReadFile(results); err == nil {
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
	}
	return code, string(out), &rep
}

// TestHarnessOwnBinary: `handoff conformance --exec 'handoff conformance
// --driver'` passes every case against this build, and results.json
// carries the kit's corpus digest and the requirement scores.
func TestHarnessOwnBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/handoff")
	}
	bin := handoffBinary(t)
	code, out, rep := runHarness(t, nil, "--exec", bin+" conformance --driver")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out))
	}
	k := loadKit(t)
	if rep.CorpusDigest != k.Manifest.CorpusDigest || len(rep.Cases) != len(k.Cases) || rep.Summary.Cases[conformance.Pass] != len(k.Cases) {
		t.Fatalf("results: digest %s, %d cases, %v", rep.CorpusDigest, len(rep.Cases), rep.Summary.Cases)
	}
	if rep.Summary.MustRows == 0 || !strings.Contains(out, "MUST: ") {
		t.Errorf("no requirement score:\n%s", tail(out))
	}
}

// TestHarnessCLI: --cli drives SPEC.md section 4's commands of this
// build, exit codes included. Every case passes but those whose inputs
// section 4 has no flag for; they are not tested, and
// baselines/handoff-cli.txt lists them, so that the run passes and a case
// that becomes testable shows as a stale entry.
func TestHarnessCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/handoff")
	}
	code, out, rep := runHarness(t, nil, "--cli", handoffBinary(t), "--baseline", "baselines/handoff-cli.txt")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out))
	}
	for _, c := range rep.Cases {
		if c.Outcome != conformance.Pass && (c.Outcome != conformance.NotTested || !c.Listed || !strings.Contains(c.Why, "SPEC.md section 4 has no flag")) {
			t.Errorf("%s: %s: %s", c.ID, c.Outcome, c.Why)
		}
	}
	if rep.Summary.Cases[conformance.NotTested] == 0 {
		t.Errorf("cases: %v", rep.Summary.Cases)
	}
}

// TestHarnessCatchesBrokenBuilds: each deliberately broken implementation
// fails the run, in the cases of the rule it breaks and only in those
// (each case that fails matches the rule's predicate), in the requirement
// rows of those cases, and with a lower MUST score than this build's.
func TestHarnessCatchesBrokenBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/handoff")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	k := loadKit(t)
	byID := map[string]*conformance.Case{}
	for _, c := range k.Cases {
		byID[c.ID] = c
	}
	_, _, good := runHarness(t, nil, "--exec", handoffBinary(t)+" conformance --driver")
	expects := func(c *conformance.Case, f func(i int, v conformance.Verdict) bool) bool {
		for i, v := range c.Expected.Deliveries {
			if f(i, v) {
				return true
			}
		}
		return false
	}
	hasChain := func(c *conformance.Case) bool {
		all := []*conformance.Octets{c.Inputs.From}
		for i := range c.Inputs.Deliveries {
			all = append(all, &c.Inputs.Deliveries[i].Handoff)
		}
		for _, o := range all {
			b, _ := o.Bytes()
			if h, err := handoff.ParseHandoff(b, handoff.Limits{}); err == nil && len(h.Chain) > 0 {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		broken   string
		mustFail []string                     // cases that must fail
		rows     []string                     // rows that must fail
		only     func(*conformance.Case) bool // every failing case is one of these
	}{
		{"skip-audience", []string{"wrong-audience", "order-audience-before-stale"}, []string{"R-RECV-1"},
			func(c *conformance.Case) bool {
				return expects(c, func(_ int, v conformance.Verdict) bool { return v.Reason != nil && *v.Reason == "wrong-audience" })
			}},
		{"reencode-chain", []string{"chain-full-03-jws-json", "sign-offer-pass-on-chain-cbor"}, []string{"R-DIGEST-4", "R-MODEL-2"}, hasChain},
		{"no-replay-memory", []string{"replay-retransmission", "replay-equivocation"}, []string{"R-REPLAY-1", "R-ASK-3", "R-FORK-4"},
			func(c *conformance.Case) bool { return len(c.Expected.Deliveries) > 1 }},
		{"malleation-is-equivocation", []string{"replay-copy-jws-malleated", "replay-copy-cose-unprotected-edited"}, []string{"R-FORK-4", "R-ASK-3"},
			func(c *conformance.Case) bool {
				first := c.Expected.Deliveries[0].Offer
				return expects(c, func(i int, v conformance.Verdict) bool {
					return i > 0 && v.Result == "retransmission" && str(v.Offer) != str(first)
				})
			}},
	} {
		t.Run(tc.broken, func(t *testing.T) {
			code, out, rep := runHarness(t, []string{brokenEnv + "=" + tc.broken}, "--exec", self)
			if code != 1 {
				t.Fatalf("exit %d, want 1 (cases failed):\n%s", code, tail(out))
			}
			failed := map[string]bool{}
			for _, c := range rep.Cases {
				switch c.Outcome {
				case conformance.Fail:
					failed[c.ID] = true
					if !tc.only(byID[c.ID]) {
						t.Errorf("%s fails, though the rule %s breaks is not what it checks: %s", c.ID, tc.broken, c.Why)
					}
				case conformance.Pass:
				default:
					t.Errorf("%s: %s", c.ID, c.Outcome)
				}
			}
			for _, id := range tc.mustFail {
				if !failed[id] {
					t.Errorf("%s passes, want fail", id)
				}
			}
			rows := map[string]string{}
			for _, r := range rep.Requirements {
				rows[r.ID] = r.Outcome
			}
			for _, r := range tc.rows {
				if rows[r] != conformance.Fail {
					t.Errorf("row %s: %q, want fail", r, rows[r])
				}
			}
			if rep.Summary.MustPassed >= good.Summary.MustPassed {
				t.Errorf("MUST rows passing: %d, this build's %d", rep.Summary.MustPassed, good.Summary.MustPassed)
			}
		})
	}
}

func str(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

// TestHarnessBaseline: a listed case that fails is a known failure (the
// run passes); a listed case that passes is stale (the run fails).
func TestHarnessBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/handoff")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	known := filepath.Join(dir, "known")
	// skip-audience fails exactly the cases whose offer names another aud.
	_, _, rep := runHarness(t, []string{brokenEnv + "=skip-audience"}, "--exec", self)
	var failing []string
	for _, c := range rep.Cases {
		if c.Outcome == conformance.Fail {
			failing = append(failing, c.ID)
		}
	}
	if len(failing) == 0 {
		t.Fatal("skip-audience failed nothing")
	}
	os.WriteFile(known, []byte("# known failures of skip-audience\n"+strings.Join(failing, "\n")+"\n"), 0o644)
	if code, out, rep := runHarness(t, []string{brokenEnv + "=skip-audience"}, "--exec", self, "--baseline", known); code != 0 || rep.Summary.Cases[conformance.KnownFailure] != len(failing) {
		t.Fatalf("with the baseline: exit %d, %v\n%s", code, rep.Summary.Cases, tail(out))
	}
	code, out, rep := runHarness(t, nil, "--exec", handoffBinary(t)+" conformance --driver", "--baseline", known)
	if code != 1 || rep.Summary.Cases[conformance.StaleListing] != len(failing) || !strings.Contains(out, "stale-baseline") {
		t.Fatalf("a fixed build with the old baseline: exit %d, %v\n%s", code, rep.Summary.Cases, tail(out))
	}
}

// TestHarnessDriverErrors: a driver that answers out of turn, with junk,
// or not at all is the harness's error (exit 2), naming the case; never a
// pass.
func TestHarnessDriverErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/handoff")
	}
	for _, tc := range []struct{ name, cmd, want string }{
		{"junk", `while read l; do echo not-json; done`, "not an answer line"},
		{"wrong id", `while read l; do echo '{"id":"nope"}'; done`, "echo the id"},
		{"exits", `exit 0`, "does not read its input|without answering"}, // which comes first is a race
		{"silent", `sleep 30`, "no answer within"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := runHarness(t, nil, "--exec", tc.cmd, "--timeout", "2s")
			if code != 2 || !regexp.MustCompile(tc.want).MatchString(out) {
				t.Errorf("exit %d, want 2 with %q:\n%s", code, tc.want, tail(out))
			}
		})
	}
}

func tail(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
