package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's five-minute tour runs as written (issue 15: copy-paste
// works), but for its install line: the handoff built from this tree is
// first on PATH instead. Each "# ..." line under a command is that
// command's output, checked with its <placeholders> as wildcards.
func TestREADMETour(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "## A five-minute tour\n")
	if !ok {
		t.Fatal("README.md has no five-minute tour")
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("the tour has no sh block")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "handoff"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var script, want []string
	for _, line := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "go install "):
			continue // the tree's own build is on PATH
		case strings.HasPrefix(line, "# "):
			want = append(want, strings.TrimPrefix(line, "# "))
			continue
		}
		script = append(script, line)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the tour failed: %v\n%s", err, out)
	}
	for _, w := range want {
		pat := regexp.QuoteMeta(w)
		pat = regexp.MustCompile(`<[a-z ]+>`).ReplaceAllString(pat, `\S+`)
		pat = strings.ReplaceAll(pat, " ", " +")
		if !regexp.MustCompile("(?m)^" + pat + "$").Match(out) {
			t.Errorf("the tour's output has no line %q:\n%s", w, out)
		}
	}
}
