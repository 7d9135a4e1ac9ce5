package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/conformance"
)

const kitDir = "v1"

func loadKit(t testing.TB) *conformance.Kit {
	t.Helper()
	k, err := conformance.LoadKit(kitDir)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// pipeDriver runs a driver in process, through conformance.Serve, so that
// the driver protocol itself is exercised.
type pipeDriver struct {
	in   *io.PipeWriter
	dec  *json.Decoder
	done chan error
}

func newPipeDriver(impl interface {
	Do(*conformance.Request) (*conformance.Answer, error)
}) *pipeDriver {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	d := &pipeDriver{in: inW, dec: json.NewDecoder(outR), done: make(chan error, 1)}
	go func() {
		err := conformance.Serve(inR, outW, impl)
		outW.CloseWithError(err)
		d.done <- err
	}()
	return d
}

func (d *pipeDriver) Do(_ context.Context, req *conformance.Request) (*conformance.Answer, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := d.in.Write(append(b, '\n')); err != nil {
		return nil, err
	}
	var a conformance.Answer
	return &a, d.dec.Decode(&a)
}

func (d *pipeDriver) Close() error { d.in.Close(); return <-d.done }

// TestKit runs every vector of the kit against this module (the Library
// driver, through the driver protocol): one subtest per vector, whose
// passing is the check `conformance.TestKit/<id>` that the requirement
// rows the vector names count on (docs/conformance.md).
func TestKit(t *testing.T) {
	k := loadKit(t)
	d := newPipeDriver(conformance.Library{})
	defer func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	}()
	for _, c := range k.Cases {
		t.Run(c.ID, func(t *testing.T) {
			req, err := k.NewRequest(c)
			if err != nil {
				t.Fatal(err)
			}
			a, err := d.Do(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if a.ID != c.ID || a.Skip != "" {
				t.Fatalf("answer %+v", a)
			}
			if err := conformance.Judge(k, c, a); err != nil {
				t.Errorf("%s (%s): %v", c.ID, c.Description, err)
			}
		})
	}
}

// TestKitIsGenerated: the kit is exactly what the committed generator
// makes of testdata/vectors, the requirements file and the schema; no
// file of it was edited by hand.
func TestKitIsGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs cmd/vectorgen")
	}
	out := filepath.Join(t.TempDir(), "v1")
	cmd := exec.Command("go", "run", "./cmd/vectorgen", "-out", "testdata/vectors", "-kit", out,
		"-requirements", "conformance/requirements.yaml", "-schema", "conformance/vector.schema.json")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("vectorgen: %v\n%s", err, b)
	}
	want, got := tree(t, out), tree(t, kitDir)
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("conformance/v1/%s differs from what go run ./cmd/vectorgen -kit conformance/v1 makes: run it and commit the result", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("conformance/v1/%s is not made by the generator", name)
		}
	}
}

func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestKitSchema: every vector file is valid under vector.schema.json
// (draft 2020-12, additionalProperties false throughout).
func TestKitSchema(t *testing.T) {
	c := jsonschema.NewCompiler()
	sch, err := c.Compile(filepath.Join(kitDir, "vector.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(kitDir, "vectors", "*.json"))
	if len(files) == 0 {
		t.Fatal("no vectors")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(v); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// And the schema refuses what it must: an unknown member.
	bad, _ := jsonschema.UnmarshalJSON(strings.NewReader(`{"id":"x","kind":"verify","requirements":["R-X-1"],"level":"MUST","category":"c","description":"d","inputs":{"trust":"t","me":"m","deliveries":[{"now":1,"handoff":{"hex":"","diagnostic":null}}]},"expected":{"deliveries":[{"result":"accepted","reason":null,"chain":"absent","offer":null}]},"extra":1}`))
	if err := sch.Validate(bad); err == nil {
		t.Error("the schema takes an unknown member")
	}
}

// TestKitCoverage: the kit covers what issue 18 lists: every Reason of
// the draft, every chain quality (D7), every outcome, both signed forms
// and both encodings, statuses of each state and D9's wrong-audience,
// sequences (retransmission, malleated copies, equivocation), the size
// bounds, and signing by the implementation.
func TestKitCoverage(t *testing.T) {
	k := loadKit(t)
	seen := map[string]bool{}
	for _, c := range k.Cases {
		seen["kind:"+c.Kind] = true
		for _, f := range c.Flags {
			seen["flag:"+f] = true
		}
		for _, d := range c.Expected.Deliveries {
			seen["result:"+d.Result] = true
			seen["chain:"+d.Chain] = true
			if d.Reason != nil {
				seen["reason:"+*d.Reason] = true
			}
		}
		if len(c.Expected.Deliveries) > 1 {
			seen["sequence"] = true
		}
		if c.Kind == conformance.KindVerifyStatus && c.Expected.State != "" {
			seen["state:"+c.Expected.State] = true
		}
		if strings.Contains(c.ID, "malleated") {
			seen["malleated"] = true
		}
		for _, d := range c.Inputs.Deliveries {
			b, _ := (&d.Handoff).Bytes()
			if handoff.IsJSON(b) {
				seen["encoding:json"] = true
			} else {
				seen["encoding:cbor"] = true
			}
		}
		if strings.Contains(c.ID, "cose") {
			seen["form:cose"] = true
		}
		if strings.Contains(c.ID, "jws") {
			seen["form:jws"] = true
		}
	}
	want := []string{"kind:verify", "kind:verify-status", "kind:sign-offer", "kind:sign-status",
		"result:accepted", "result:rejected", "result:retransmission", "result:equivocation",
		"chain:absent", "chain:full", "chain:partial", "chain:unverifiable", "chain:unchecked",
		"state:accepted", "state:rejected", "state:completed", "state:failed", "state:canceled",
		"encoding:json", "encoding:cbor", "form:jws", "form:cose", "sequence", "malleated", "flag:SPEC-BOUNDS"}
	for _, r := range []handoff.Reason{handoff.ReasonBadSignature, handoff.ReasonUntrustedKey, handoff.ReasonWrongAudience,
		handoff.ReasonStale, handoff.ReasonReplay, handoff.ReasonBrokenChain, handoff.ReasonCycle, handoff.ReasonTooDeep,
		handoff.ReasonUnverifiableRef, handoff.ReasonRefMismatch, handoff.ReasonPolicy} {
		want = append(want, "reason:"+string(r))
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("no vector of the kit has %s", w)
		}
	}
	if !slices.ContainsFunc(k.Cases, func(c *conformance.Case) bool {
		return strings.Contains(c.ID, "wrong-audience") && c.Kind == conformance.KindVerifyStatus
	}) {
		t.Error("no status vector of D9's wrong-audience")
	}
}

var update = flag.Bool("update", false, "write docs/conformance.md from $HANDOFF_CHECKS")

// TestConformanceDoc keeps docs/conformance.md true. Always: the
// requirements file is well-formed, every MUST row is covered or
// excluded, every kit case names known rows. With HANDOFF_CHECKS (the
// checks a whole run of the suite emitted; scripts/test.sh sets it after
// that run): every check a row counts on ran, and the page is exactly
// what that run makes (-update writes it).
func TestConformanceDoc(t *testing.T) {
	rf, err := conformance.LoadRequirements("requirements.yaml")
	if err != nil {
		t.Fatal(err)
	}
	k := loadKit(t)
	if problems := conformance.Trace(rf, k, nil); len(problems) > 0 {
		for _, p := range problems {
			if !strings.Contains(p, "did not run") {
				t.Error(p)
			}
		}
	}
	checksFile := os.Getenv("HANDOFF_CHECKS")
	if checksFile == "" {
		t.Skip("HANDOFF_CHECKS is not set: the page is checked by scripts/test.sh, after the whole suite ran")
	}
	b, err := os.ReadFile(checksFile)
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" {
			emitted[line] = true
		}
	}
	for _, p := range conformance.Trace(rf, k, emitted) {
		t.Error(p)
	}
	doc := conformance.Document(rf, k, emitted)
	const page = "../docs/conformance.md"
	if *update {
		if err := os.WriteFile(page, doc, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile(page)
	if err != nil || !bytes.Equal(old, doc) {
		t.Errorf("docs/conformance.md is not what this run makes (%v): HANDOFF_CHECKS=%s go test ./conformance -run TestConformanceDoc -update", err, checksFile)
	}
}
