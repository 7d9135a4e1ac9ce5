//go:build unix

package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2asrv"
)

// TestRun is "handoff serve" as an operator runs it: it listens, its
// admin port answers /healthz, /readyz, /metrics and a redacted /config;
// SIGHUP with an invalid file keeps the last good configuration (the log
// and a metric say so), SIGHUP with a valid one applies its new tokens;
// the end of ctx drains and returns.
func TestRun(t *testing.T) {
	agent := &plainAgent{started: make(chan struct{}, 4), saw: make(chan map[string]any, 16)}
	up := httptest.NewServer(a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(agent)))
	defer up.Close()

	dir := t.TempDir()
	key, _ := filepath.Abs("../../../../testdata/example/coder.jwk")
	trustFile, _ := filepath.Abs("../../../../testdata/example/trust.json")
	tokens := filepath.Join(dir, "tokens.json")
	const secret = "first-secret-token-0123456789"
	if err := os.WriteFile(tokens, []byte(`{"`+secret+`": "https://planner.example"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "gateway.yaml")
	good := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
identity: {id: https://coder.example, key_file: %s}
trust_file: %s
inbound: {bearer_tokens_file: tokens.json}
routes:
  - {name: coder, protocol: a2a, path: /, upstream: %q, without_handoff: reject}
`, key, trustFile, up.URL+"/")
	if err := os.WriteFile(config, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	lw := &lockedWriter{w: &logs}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, config, slog.New(slog.NewTextHandler(lw, nil)), func(a Addrs) { ready <- a.Admin })
	}()
	var admin string
	select {
	case admin = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run never became ready")
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(p); code != 200 {
			t.Errorf("%s: %d %s", p, code, body)
		}
	}
	code, cfg := get("/config")
	if code != 200 || strings.Contains(cfg, secret) || !strings.Contains(cfg, "https://coder.example") {
		t.Errorf("/config: %d %s", code, cfg)
	}
	metric := func(line string) bool {
		_, body := get("/metrics")
		return strings.Contains(body, line+"\n")
	}
	if _, body := get("/metrics"); !strings.Contains(body, "\nhandoff_gateway_config_last_reload_ok 1\n") || !strings.Contains(body, "\nhandoff_gateway_build_info{version=") {
		t.Errorf("/metrics lacks the reload gauge or the build info:\n%s", body)
	}

	hup := func(want string) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !metric(want) {
			if time.Now().After(deadline) {
				_, body := get("/metrics")
				t.Fatalf("after SIGHUP, no %q in /metrics:\n%s\nlogs:\n%s", want, body, lw.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// An invalid file: refused, the last good configuration stays.
	if err := os.WriteFile(config, []byte(good+"frobs: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup(`handoff_gateway_config_reloads_total{result="failed"} 1`)
	if !metric("handoff_gateway_config_last_reload_ok 0") || !strings.Contains(lw.String(), "the last good configuration stays") {
		t.Errorf("a failed reload is not said: %s", lw.String())
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz after a failed reload: %d (the running configuration is still good)", code)
	}
	// A valid file with new tokens: applied.
	const second = "second-secret-token-0123456789"
	if err := os.WriteFile(tokens, []byte(`{"`+second+`": "https://planner.example"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	hup(`handoff_gateway_config_reloads_total{result="ok"} 1`)
	if !metric("handoff_gateway_config_last_reload_ok 1") {
		t.Error("the gauge did not return to 1")
	}
	if strings.Contains(lw.String(), secret) || strings.Contains(lw.String(), second) {
		t.Errorf("a token is in the log:\n%s", lw.String())
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Run did not stop")
	}
}
