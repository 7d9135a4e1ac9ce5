package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/demo"
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

// try.sh, which `handoff demo --keep` writes, hands the planner a task by
// hand with this handoff command and curl, over the real servers. A text
// with quotes, backslashes and a newline arrives as written (the planner
// quotes it back); the same file sent again is a retransmission,
// answered from the record with a Message; a Handoff the planner refuses
// (a member given twice, D3) and a request to a planner that is not there
// are not reported "sent", and the script fails.
func TestTryScript(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("try.sh needs curl")
	}
	// testscript.Main put this test binary on PATH as `handoff`.
	hc, err := exec.LookPath("handoff")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := demo.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	script, err := w.WriteTryScript(hc)
	if err != nil {
		t.Fatal(err)
	}
	try := func(script string, args ...string) (stdout, stderr string, err error) {
		t.Helper()
		var o, e strings.Builder
		cmd := exec.CommandContext(ctx, "sh", append([]string{script}, args...)...)
		// Under -race, `handoff offer` would sleep a second at exit.
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
		cmd.Stdout, cmd.Stderr = &o, &e
		err = cmd.Run()
		return o.String(), e.String(), err
	}
	type answer struct {
		Result struct {
			Kind   string
			Status struct {
				State   string
				Message struct{ Parts []struct{ Text string } }
			}
		}
		Error *struct{ Code int }
	}
	read := func(out string) answer {
		t.Helper()
		var a answer
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("the planner's answer is not JSON: %v\n%s", err, out)
		}
		return a
	}
	sentRE := regexp.MustCompile(`\(sent (offer-ctx-\d+\.json); again: sh try.sh --again offer-ctx-\d+\.json\)`)

	text := "it\"s a \\back\\slash \\n and \\u0041,\na 'second' line\twith $HOME and `no command`"
	out, errOut, err := try(script, text)
	if err != nil {
		t.Fatalf("try.sh: %v\n%s%s", err, out, errOut)
	}
	a := read(out)
	if a.Result.Kind != "task" || a.Result.Status.State != "completed" || len(a.Result.Status.Message.Parts) == 0 {
		t.Fatalf("answer %+v, want a completed task\n%s", a, out)
	}
	if got, want := a.Result.Status.Message.Parts[0].Text, "plan for "+strconv.Quote(text)+" done"; !strings.HasPrefix(got, want) {
		t.Errorf("the planner quotes back %q, want it to begin %q", got, want)
	}
	m := sentRE.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("no (sent …) note: %q", errOut)
	}
	file := m[1]

	out, errOut, err = try(script, "--again", file)
	if err != nil {
		t.Fatalf("try.sh --again: %v\n%s%s", err, out, errOut)
	}
	if a := read(out); a.Result.Kind != "message" || a.Error != nil {
		t.Errorf("sent again: answer %s, want a Message (a retransmission, answered from the record)", out)
	}
	if !sentRE.MatchString(errOut) {
		t.Errorf("sent again: no (sent …) note: %q", errOut)
	}

	lax := filepath.Join(w.Dir(), "offer-lax.json")
	if err := os.WriteFile(lax, []byte(`{"offer":"aGVhZA.Ym9keQ.c2ln","offer":"aGVhZA.Ym9keQ.c2lnMg"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = try(script, "--again", "offer-lax.json")
	if err == nil || strings.Contains(errOut, "(sent") || !strings.Contains(errOut, "JSON-RPC error") {
		t.Errorf("a Handoff the planner refuses: exit %v, stderr %q, want a failure naming the JSON-RPC error and no (sent …)", err, errOut)
	}
	if a := read(out); a.Error == nil {
		t.Errorf("a Handoff the planner refuses: answer %s, want a JSON-RPC error", out)
	}

	// The same script, pointed at a port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	planner := regexp.MustCompile(`(?m)^planner='[^']*'$`)
	if !planner.Match(b) {
		t.Fatalf("no planner= line in\n%s", b)
	}
	down := filepath.Join(w.Dir(), "try-down.sh")
	if err := os.WriteFile(down, planner.ReplaceAll(b, []byte("planner='"+gone+"'")), 0o700); err != nil {
		t.Fatal(err)
	}
	_, errOut, err = try(down, "--again", file)
	if err == nil || strings.Contains(errOut, "(sent") || !strings.Contains(errOut, "curl failed") {
		t.Errorf("no planner: exit %v, stderr %q, want a failure saying curl failed and no (sent …)", err, errOut)
	}
}
