package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGatewayWalkthrough: docs/gateway.md's walkthrough (an A2A message
// and an MCP tool call through the gateway, by hand, with curl) runs as
// written against the sample config, with the handoff, plainagent and
// plainmcp built from this tree on PATH for its "go install" line. Each
// "#   ..." line (three spaces) is the output of the command above it.
func TestGatewayWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and two servers")
	}
	needTools(t, "curl", "jq")
	// The sample's addresses: a walkthrough cannot choose its ports.
	free(t, "127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:8443", "127.0.0.1:9443")
	doc, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "### By hand: an A2A message and an MCP tool call through the gateway\n")
	_, rest, ok2 := strings.Cut(rest, "```sh\n")
	block, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/gateway.md has no walkthrough block")
	}
	bin := t.TempDir()
	for name, pkg := range map[string]string{"handoff": ".", "plainagent": "./internal/gateway/plainagent", "plainmcp": "./internal/gateway/plainmcp"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	// A folder of its own: the clone's example keys, and the sample config
	// with a store of the test's own, brand-new as on a first run (the
	// sample's store outlives runs, and a new one is what a newcomer has).
	work := t.TempDir()
	// A copy of testdata/example, not a link: the walkthrough changes
	// its keys' modes.
	example := filepath.Join(work, "testdata", "example")
	if err := os.CopyFS(example, os.DirFS("../../testdata/example")); err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile("../../docs/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const sampleStore = "store: sqlite:/tmp/handoff-gateway-hops.db\n"
	if !strings.Contains(string(sample), sampleStore) {
		t.Fatalf("docs/gateway.yaml has no line %q", sampleStore)
	}
	own := strings.Replace(string(sample), sampleStore, "store: sqlite:"+filepath.Join(t.TempDir(), "hops.db")+"\n", 1)
	if err := os.Mkdir(filepath.Join(work, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "docs", "gateway.yaml"), []byte(own), 0o644); err != nil {
		t.Fatal(err)
	}
	runWalkthrough(t, block, work, bin)
}

// runWalkthrough runs a doc's shell block in work with the tree's builds
// in bin first on PATH, and checks that each "#   ..." line (three
// spaces) of the block is a line of its output. A "go install" line is
// skipped: bin holds those builds.
func runWalkthrough(t *testing.T, block, work, bin string) {
	t.Helper()
	var script, want []string
	for _, line := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "#   ") && !strings.HasPrefix(line, "#    "): // not a comment's next line
			want = append(want, strings.TrimPrefix(line, "#   "))
		case strings.HasPrefix(line, "go install "):
			// The tree's own builds are on PATH.
		default:
			script = append(script, line)
		}
	}
	outFile, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	cmd.Dir = work
	// TMPDIR: its mktemp folder is the test's to remove.
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
	// Its own process group, so that the servers it starts in the
	// background stop with it; output to a file, so that waiting for the
	// script does not wait for them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = outFile, outFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		err = errTimeout
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err == errTimeout {
		<-done
	}
	out, _ := os.ReadFile(outFile.Name())
	if err != nil {
		t.Fatalf("the walkthrough failed: %v\n%s", err, out)
	}
	for _, w := range want {
		if !regexp.MustCompile("(?m)^" + regexp.QuoteMeta(w) + "$").Match(out) {
			t.Errorf("the walkthrough's output has no line %q:\n%s", w, out)
		}
	}
}

var errTimeout = &timeoutError{}

type timeoutError struct{}

func (*timeoutError) Error() string { return "still running after 2 minutes" }

// TestEgressWalkthrough: docs/gateway.md's three agents in a row (the
// planner, the coder and the tester, each unmodified behind its
// gateway, the coder's tool call signed by its gateway's egress) runs as
// written with the sample configs of docs/three-agents, in a folder of
// the test's own for the walkthrough's /tmp/handoff-three.
func TestEgressWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and two servers")
	}
	needTools(t, "curl", "jq")
	free(t, "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:8600", "127.0.0.1:8601", "127.0.0.1:8602",
		"127.0.0.1:8603", "127.0.0.1:8604", "127.0.0.1:9601", "127.0.0.1:9602", "127.0.0.1:9604")
	doc, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "### Three agents in a row, by hand\n")
	_, rest, ok2 := strings.Cut(rest, "```sh\n")
	block, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/gateway.md has no three-agent walkthrough block")
	}
	bin := t.TempDir()
	for name, pkg := range map[string]string{"handoff": ".", "plainmcp": "./internal/gateway/plainmcp", "relayagent": "./internal/gateway/relayagent"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	// The walkthrough's state folder is the test's: in the block and in
	// copies of the configs it names.
	const state = "/tmp/handoff-three"
	own := t.TempDir()
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "docs", "three-agents"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"planner", "coder", "tester"} {
		b, err := os.ReadFile("../../docs/three-agents/" + a + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), state+"/") {
			t.Fatalf("docs/three-agents/%s.yaml does not keep its files in %s", a, state)
		}
		if err := os.WriteFile(filepath.Join(work, "docs", "three-agents", a+".yaml"), []byte(strings.ReplaceAll(string(b), state, own)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(block, state) {
		t.Fatalf("the walkthrough does not keep its files in %s", state)
	}
	runWalkthrough(t, strings.ReplaceAll(block, state, own), work, bin)
}

// free waits, up to 15 s, for each address to be free: a walkthrough
// cannot choose its ports, and the servers of the one before may still
// be exiting.
func free(t *testing.T, addrs ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, addr := range addrs {
		for {
			ln, err := net.Listen("tcp", addr)
			if err == nil {
				ln.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the walkthrough needs %s free: %v", addr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// needTools skips the test when a tool is missing, or fails it under CI
// (scripts/test.sh installs them).
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("the walkthrough needs %s (scripts/test.sh installs it)", tool)
			}
			t.Skipf("the walkthrough needs %s", tool)
		}
	}
}
