// Command testlog reads `go test -json` on stdin, prints what a plain
// `go test` would (each package's result line, and the output of the
// tests that failed), and writes to -checks the id of every test that
// passed, one a line: `<package dir>.<Test>[/<subtest>]`, the root
// package's dir written "handoff". Those are the check ids that
// conformance/requirements.yaml names; docs/conformance.md is made from
// them (see conformance/README.md):
//
//	go test -json ./... | go run ./conformance/internal/testlog -checks checks.txt
//
// It exits 1 when a test or package failed or a line was not test2json.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
)

const module = "github.com/quantumlearningmachines/handoff"

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

func dir(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, module)
	if !ok {
		return pkg
	}
	if rest == "" {
		return "handoff"
	}
	return strings.TrimPrefix(rest, "/")
}

func main() {
	checks := flag.String("checks", "", "write the ids of the tests that passed to `FILE`")
	flag.Parse()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	outputs := map[string][]string{} // package + "\x00" + test -> its output lines
	passed := map[string]bool{}
	failed := false
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			// Not test2json (a build error printed by go itself): show it.
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		key := ev.Package + "\x00" + ev.Test
		switch ev.Action {
		case "build-output":
			out.WriteString(ev.Output)
		case "build-fail":
			failed = true
		case "output":
			if ev.Test == "" {
				// A package's own lines: its "ok"/"FAIL" line, and what
				// was printed outside any test. Verbose noise is dropped.
				if !strings.HasPrefix(ev.Output, "=== ") && !strings.HasPrefix(ev.Output, "--- PASS") &&
					ev.Output != "PASS\n" && !strings.HasPrefix(ev.Output, "--- SKIP") {
					out.WriteString(ev.Output)
				}
				continue
			}
			outputs[key] = append(outputs[key], ev.Output)
		case "pass":
			if ev.Test != "" {
				passed[dir(ev.Package)+"."+ev.Test] = true
			}
			delete(outputs, key)
		case "skip":
			delete(outputs, key)
		case "fail":
			failed = true
			if ev.Test != "" {
				for _, o := range outputs[key] {
					out.WriteString(o)
				}
				delete(outputs, key)
				break
			}
			// The package failed: a panic or a timeout ends its tests with
			// no event of their own; what they printed is shown now.
			var held []string
			for k := range outputs {
				if strings.HasPrefix(k, ev.Package+"\x00") {
					held = append(held, k)
				}
			}
			sort.Strings(held)
			for _, k := range held {
				for _, o := range outputs[k] {
					out.WriteString(o)
				}
				delete(outputs, k)
			}
		}
		out.Flush()
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testlog:", err)
		os.Exit(2)
	}
	if *checks != "" {
		ids := make([]string, 0, len(passed))
		for id := range passed {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		if err := os.WriteFile(*checks, []byte(strings.Join(ids, "\n")+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testlog:", err)
			os.Exit(2)
		}
	}
	out.Flush()
	if failed {
		os.Exit(1)
	}
}
