package handoff_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The module's packages stand on floors, and an import goes down a floor
// or stays on its own, never up: primitives (internal/, trust), the
// element (this package), what uses it (refs, store), the two sides
// (delegate, delegator), the store conformance suite and the conformance
// kit's harness, the SQL stores
// and carriers built on them, and the programs (cmd/). Packages under internal/ import
// nothing of the module outside internal/. A new package must be given a
// floor here.
var floors = []struct {
	floor int
	path  string // a package, or a folder of them when it ends in "/"
}{
	{0, "internal/"},
	{0, "trust"},
	{1, ""},
	{2, "refs"},
	{2, "store"},
	{3, "store/storetest"}, // store interfaces only: an outside store can run it
	{3, "delegate"},
	{3, "delegator"},
	{4, "store/internal/sqlhop"}, // the engine of the two SQL stores
	{4, "store/sqlite"},
	{4, "store/postgres"},
	{4, "a2ahandoff"},
	{4, "mcphandoff"},
	{3, "conformance"},           // the kit's harness and this module's driver of it
	{5, "conformance/internal/"}, // testlog, a program of scripts/test.sh
	{5, "cmd/"},
	{5, "scripts/"}, // the programs of the scripts (scaling's plot)
}

const module = "github.com/quantumlearningmachines/handoff"

func floorOf(t *testing.T, pkg string) int {
	t.Helper()
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	best, found := -1, ""
	for _, f := range floors {
		match := rel == f.path || strings.HasSuffix(f.path, "/") && strings.HasPrefix(rel, f.path)
		if match && len(f.path) >= len(found) {
			best, found = f.floor, f.path
		}
	}
	if best < 0 {
		t.Fatalf("package %s has no floor in layers_test.go: give it one", rel)
	}
	return best
}

func TestImportLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from := fields[0]
		ff := floorOf(t, from)
		internal := strings.HasPrefix(from, module+"/internal/")
		for _, to := range fields[1:] {
			if to != module && !strings.HasPrefix(to, module+"/") {
				continue
			}
			switch {
			case floorOf(t, to) > ff:
				bad = append(bad, from+" (floor "+itoa(ff)+") imports "+to+" (floor "+itoa(floorOf(t, to))+")")
			case internal && !strings.HasPrefix(to, module+"/internal/"):
				bad = append(bad, from+" is a primitive under internal/ but imports "+to)
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

// maxFileLines bounds a hand-written non-test Go file (issue 14: files of
// one idea). A file past it is split along its ideas, not the bound
// raised.
const maxFileLines = 700

// TestFilesOfOneIdea: no hand-written non-test Go file in the module is
// longer than maxFileLines (generated files, marked as Go marks them,
// are not counted).
func TestFilesOfOneIdea(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if generated.Match(b) {
			return nil
		}
		if n := bytes.Count(b, []byte("\n")); n > maxFileLines {
			t.Errorf("%s: %d lines, more than %d: split it along its ideas", path, n, maxFileLines)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// generated is the line Go tools put in a generated file.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)
