package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/gateway"
)

// TestServeValidateOnly is SPEC.md section 6's contract for
// "handoff serve --config FILE --validate-only": exit 0 when FILE is
// valid; exit 2 with one line per problem naming the key path and line.
// The sample the README points to must pass.
func TestServeValidateOnly(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, _ := filepath.Abs("../../testdata/example/coder.jwk")
	trustFile, _ := filepath.Abs("../../testdata/example/trust.json")
	valid := write("valid.yaml", "listen: 127.0.0.1:8443\nidentity: {id: https://coder.example, key_file: "+key+"}\ntrust_file: "+trustFile+"\nroutes:\n  - {name: coder, protocol: a2a, path: /, upstream: http://127.0.0.1:7000/, without_handoff: reject}\n")
	for _, tc := range []struct {
		name  string
		file  string
		code  int
		lines []string // each a pattern one stderr line must match, in order
	}{
		{name: "the README's sample", file: "../../docs/gateway.yaml", code: 0, lines: []string{`^handoff: \S+gateway.yaml is valid$`}},
		{name: "valid", file: valid, code: 0, lines: []string{`is valid$`}},
		{name: "several problems, one line each", code: 2, file: write("bad.yaml", `listen: 127.0.0.1:8443
identity:
  id: https://coder.example
  key_file: `+key+`
trust_file: `+trustFile+`
frobs: 1
routes:
  - name: a
    protocol: a2a
    path: /
    upstream: ftp://x
    without_handoff: maybe
`), lines: []string{
			`^handoff: error: serve: \S+bad.yaml: frobs \(line 6\): unknown key$`,
			`^handoff: error: serve: \S+bad.yaml: routes\[0\]\.upstream \(line 11\): `,
			`^handoff: error: serve: \S+bad.yaml: routes\[0\]\.without_handoff \(line 12\): `,
		}},
		{name: "a key file that is missing", code: 2, file: write("nokey.yaml", strings.Replace(mustRead(t, valid), key, filepath.Join(dir, "absent.jwk"), 1)),
			lines: []string{`^handoff: error: serve: \S+nokey.yaml: identity\.key_file \(line 2\): `}},
		{name: "not YAML", code: 2, file: write("tabs.yaml", "listen: [\n"), lines: []string{`^handoff: error: serve: \S+tabs.yaml: `}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"serve", "--config", tc.file, "--validate-only"}, env{strings.NewReader(""), &stdout, &stderr})
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			// Warnings (the example key's mode, say) may come first.
			var got []string
			for _, l := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
				if !strings.HasPrefix(l, "handoff: warning: ") {
					got = append(got, l)
				}
			}
			if len(got) != len(tc.lines) {
				t.Fatalf("stderr has %d lines, want %d:\n%s", len(got), len(tc.lines), stderr.String())
			}
			for i, pat := range tc.lines {
				if !regexp.MustCompile(pat).MatchString(got[i]) {
					t.Errorf("stderr line %d: %q does not match %q", i+1, got[i], pat)
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q", stdout.String())
			}
		})
	}
}

// TestServePrintSchema: --print-schema prints the schema the
// configuration is checked against, as JSON.
func TestServePrintSchema(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"serve", "--print-schema"}, env{strings.NewReader(""), &stdout, &stderr}); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !bytes.Equal(stdout.Bytes(), gateway.Schema) || !json.Valid(stdout.Bytes()) {
		t.Errorf("printed %d octets, not the schema", stdout.Len())
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestServeWarnsOfReadableSecrets: a key or tokens file that others may
// read works, with a warning naming the key and the fix, as the other
// commands warn of a readable --key.
func TestServeWarnsOfReadableSecrets(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "coder.jwk")
	tokens := filepath.Join(dir, "tokens.json")
	trustFile, _ := filepath.Abs("../../testdata/example/trust.json")
	config := filepath.Join(dir, "gateway.yaml")
	for p, text := range map[string]string{
		key:    mustRead(t, "../../testdata/example/coder.jwk"),
		tokens: `{"a-token-of-the-planner-0123": "https://planner.example"}`,
		config: "listen: 127.0.0.1:8443\nidentity: {id: https://coder.example, key_file: coder.jwk}\ntrust_file: " + trustFile +
			"\ninbound: {bearer_tokens_file: tokens.json}\nroutes:\n  - {name: coder, protocol: a2a, path: /, upstream: http://127.0.0.1:7000/}\n",
	} {
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"serve", "--config", config, "--validate-only"}, env{strings.NewReader(""), &stdout, &stderr}); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{
		"handoff: warning: serve: " + config + ": identity.key_file: " + key + " is accessible by others (mode 0644); chmod 600 " + key + "\n",
		"handoff: warning: serve: " + config + ": inbound.bearer_tokens_file: " + tokens + " is accessible by others (mode 0644); chmod 600 " + tokens + "\n",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("no %q in:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "a-token-of-the-planner") {
		t.Errorf("a token is printed:\n%s", stderr.String())
	}
}
