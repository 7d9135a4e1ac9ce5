package main

import (
	"bufio"
	"io"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `handoff demo --keep` runs the scenarios, then keeps the agents running
// and says where they are, until SIGINT, which stops them, removes the
// temporary directory and still exits by the verdicts (0 here).
func TestDemoKeep(t *testing.T) {
	pr, pw := io.Pipe()
	var stderr strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run([]string{"demo", "--keep"}, env{stdin: strings.NewReader(""), stdout: pw, stderr: &stderr})
		pw.Close()
	}()
	dirRE := regexp.MustCompile(`until Ctrl-C \(which removes (\S+)\)`)
	var dir, out strings.Builder
	sc := bufio.NewScanner(pr)
	ready := false
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if m := dirRE.FindStringSubmatch(line); m != nil {
			dir.WriteString(m[1])
		}
		if strings.HasPrefix(line, "Hand the planner a task yourself: sh ") {
			ready = true
			break
		}
	}
	if !ready {
		t.Fatalf("no keep-running notice; exit %d\n%s%s", <-code, out.String(), stderr.String())
	}
	go io.Copy(io.Discard, pr)
	for _, want := range []string{"all 7 scenarios gave their expected verdicts", "  planner   A2A  http://127.0.0.1:", "  tester    MCP  http://127.0.0.1:", "trust planner.trust.json"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("%q missing from\n%s", want, out.String())
		}
	}
	for _, f := range []string{"planner.jwk", "planner.trust.json", "planner.db", "tokens.json", "try.sh"} {
		if _, err := os.Stat(dir.String() + "/" + f); err != nil {
			t.Errorf("while kept: %v", err)
		}
	}
	// The demo listens for SIGINT now (signal.NotifyContext), so this
	// process is not interrupted.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d after SIGINT; stderr: %s", c, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("SIGINT did not stop the kept agents")
	}
	if !strings.Contains(stderr.String(), "handoff: demo: interrupted; agents stopped, "+dir.String()+" removed") {
		t.Errorf("stderr: %q", stderr.String())
	}
	if _, err := os.Stat(dir.String()); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", dir.String(), err)
	}
}
