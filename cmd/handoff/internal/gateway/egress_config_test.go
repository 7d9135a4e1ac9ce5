package gateway

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const egressGood = `listen: 127.0.0.1:8443
admin: 127.0.0.1:9443
identity: {id: "https://coder.example", key_file: coder.jwk}
trust_file: trust.json
routes: []
operator: {tokens_file: operators.json}
egress:
  listen: 127.0.0.1:8444
  routes:
    - name: tester
      protocol: mcp
      path: /tester
      agent_id: https://tester.example
      url: http://127.0.0.1:7100/tools/
      bearer_token_file: tester.token
      ttl: 60s
    - {name: reviewer, protocol: a2a, path: /reviewer/, agent_id: "https://reviewer.example", url: "https://reviewer.example/a2a/", starts_chains: true}
`

// TestParseEgress: the egress keys, read as docs/gateway.md says; a
// gateway with only egress routes needs no inbound route.
func TestParseEgress(t *testing.T) {
	c, err := Parse([]byte(egressGood), "/etc/handoff")
	if err != nil {
		t.Fatal(err)
	}
	if c.Egress.Listen != "127.0.0.1:8444" || len(c.Egress.Routes) != 2 || c.Operator.TokensFile != "/etc/handoff/operators.json" {
		t.Fatalf("%+v", c)
	}
	r := c.Egress.Routes[0]
	if r.Name != "tester" || r.Protocol != "mcp" || r.Path != "/tester/" || r.AgentID != "https://tester.example" ||
		r.URL.String() != "http://127.0.0.1:7100/tools/" || r.TokenFile != "/etc/handoff/tester.token" || r.EffectiveTTL() != time.Minute || r.StartsChains {
		t.Errorf("route: %+v", r)
	}
	if r := c.Egress.Routes[1]; r.EffectiveTTL() != 5*time.Minute || !r.StartsChains {
		t.Errorf("route: %+v", r)
	}
	b, err := c.Redacted()
	if err != nil || !strings.Contains(string(b), `"agent_id": "https://reviewer.example"`) || !strings.Contains(string(b), `"tokens_file"`) {
		t.Errorf("redacted: %s %v", b, err)
	}
}

// TestParseEgressRefuses: each fault at its key path.
func TestParseEgressRefuses(t *testing.T) {
	for _, c := range []struct{ name, from, to, path, msg string }{
		{"duplicate name", "name: reviewer", "name: tester", "egress.routes[1].name", `"tester" is also the name of egress.routes[0]`},
		{"duplicate path", "path: /reviewer/", "path: /tester/", "egress.routes[1].path", "also the path"},
		{"aud is itself", `agent_id: "https://reviewer.example"`, `agent_id: "https://coder.example"`, "egress.routes[1].agent_id", "is identity.id"},
		{"credentials in url", "url: http://127.0.0.1:7100/tools/", "url: http://u:p@127.0.0.1:7100/tools/", "egress.routes[0].url", "credentials"},
		{"a bad url, its secret not quoted", "url: http://127.0.0.1:7100/tools/", "url: http://svc:hunter2@host:bad/", "egress.routes[0].url", "the value is not shown"},
		{"short call timeout", "ttl: 60s", "ttl: 60s\n      call_timeout: 10ms", "egress.routes[0].call_timeout", "at least 1s"},
		{"short ttl", "ttl: 60s", "ttl: 1s", "egress.routes[0].ttl", "at least 2s"},
		{"two token sources", "bearer_token_file: tester.token", "bearer_token_file: tester.token\n      bearer_token_env: TOKEN", "egress.routes[0].bearer_token_env", "not both"},
		{"same address", "listen: 127.0.0.1:8444", "listen: 127.0.0.1:8443", "egress.listen", "the same address as listen"},
		{"not loopback", "listen: 127.0.0.1:8444", "listen: 0.0.0.0:8444", "egress.listen", "not a loopback address"},
		{"every interface", "listen: 127.0.0.1:8444", "listen: :8444", "egress.listen", "not a loopback address"},
		{"unknown key", "ttl: 60s", "ttl: 60s\n      retries: 3", "egress.routes[0].retries", "unknown key"},
		{"bad protocol", "protocol: mcp", "protocol: grpc", "egress.routes[0].protocol", ""},
		{"console without admin", "admin: 127.0.0.1:9443\n", "", "operator", "admin port"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := strings.Replace(egressGood, c.from, c.to, 1)
			if doc == egressGood {
				t.Fatalf("%q is not in the document", c.from)
			}
			_, err := Parse([]byte(doc), "/")
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("a secret is quoted: %v", err)
			}
			ps, ok := err.(Problems)
			if !ok {
				t.Fatalf("got %v, want Problems", err)
			}
			for _, p := range ps {
				if p.Path == c.path && strings.Contains(p.Msg, c.msg) {
					return
				}
			}
			t.Fatalf("no problem at %s saying %q: %v", c.path, c.msg, ps)
		})
	}
	// No inbound route and no egress: nothing to serve.
	_, err := Parse([]byte(`{"listen": ":8443", "identity": {"id": "me", "key_env": "KEY"}, "trust_file": "/t.json", "routes": []}`), "/")
	if err == nil || !strings.Contains(err.Error(), "no route: give at least one route") {
		t.Fatalf("got %v", err)
	}
}

// TestOpenEgressAndOperatorFiles: the egress tokens and the operators
// are read by Open, each fault at the key that names the file, no
// secret quoted.
func TestOpenEgressAndOperatorFiles(t *testing.T) {
	dir, write := exampleDir(t)
	write("tester.token", "secret-token-of-the-coder-for-the-tester\n")
	write("operators.json", `{"operator-token-0123456789": "alice"}`)
	c, err := Parse([]byte(egressGood), dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	if res.EgressTokens["tester"] != "secret-token-of-the-coder-for-the-tester" || res.EgressTokens["reviewer"] != "" || res.Operators["operator-token-0123456789"] != "alice" {
		t.Fatalf("%+v %+v", res.EgressTokens, res.Operators)
	}
	for _, bad := range []struct{ file, body, path, msg string }{
		{"operators.json", `{"short": "alice"}`, "operator.tokens_file", "shorter than 16"},
		{"operators.json", `{"operator-token-0123456789": ""}`, "operator.tokens_file", "empty operator name"},
		{"tester.token", "two words-of-a-token", "egress.routes[0].bearer_token_file", "white space"},
		{"tester.token", "", "egress.routes[0].bearer_token_file", "empty"},
	} {
		write(bad.file, bad.body)
		_, err := c.Open()
		if err == nil || !strings.Contains(err.Error(), bad.path) || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%s %q: got %v", bad.file, bad.body, err)
		}
		if err != nil && strings.Contains(err.Error(), "words-of-a-token") {
			t.Errorf("the token is quoted: %v", err)
		}
		write("tester.token", "secret-token-of-the-coder-for-the-tester\n")
		write("operators.json", `{"operator-token-0123456789": "alice"}`)
	}
}

// TestReloadRevokesEveryOperator: an operators file emptied ({}) is
// valid, and a reload applies it at once: nobody signs in any more. So
// does taking the operator key away (the console stays mounted until a
// restart, with no one to sign in).
func TestReloadRevokesEveryOperator(t *testing.T) {
	dir, write := exampleDir(t)
	write("operators.json", `{"operator-token-0123456789": "alice"}`)
	doc := `listen: 127.0.0.1:0
admin: 127.0.0.1:0
identity: {id: "https://coder.example", key_file: coder.jwk}
trust_file: trust.json
store: sqlite:hops.db
operator: {tokens_file: operators.json}
routes:
  - {name: tools, protocol: mcp, path: /tools/, upstream: "http://127.0.0.1:1/mcp"}
`
	write("gateway.yaml", doc)
	s := serveFile(t, filepath.Join(dir, "gateway.yaml"))
	if len(*s.operators.Load()) != 1 {
		t.Fatal("no operator at start")
	}
	write("operators.json", `{}`)
	if err := s.Reload(filepath.Join(dir, "gateway.yaml")); err != nil {
		t.Fatalf("an emptied operators file: %v", err)
	}
	if n := len(*s.operators.Load()); n != 0 {
		t.Fatalf("%d operators after the file was emptied", n)
	}
	write("operators.json", `{"operator-token-0123456789": "alice"}`)
	if err := s.Reload(filepath.Join(dir, "gateway.yaml")); err != nil || len(*s.operators.Load()) != 1 {
		t.Fatalf("restored: %v", err)
	}
	write("gateway.yaml", strings.Replace(doc, "operator: {tokens_file: operators.json}\n", "", 1))
	if err := s.Reload(filepath.Join(dir, "gateway.yaml")); err != nil {
		t.Fatal(err)
	}
	if n := len(*s.operators.Load()); n != 0 {
		t.Fatalf("%d operators after the operator key was taken away", n)
	}
}

// serveFile is a gateway (not listening) from the configuration file at
// path, as handoff serve starts one; it is closed when the test ends.
func serveFile(t *testing.T, path string) *Server {
	t.Helper()
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(t.Context(), c, res, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestParsePolicyOrigins: policy.origins (draft "Truncated Chains")
// reach the receiving checks, and are refused without
// require_full_chain, where they would be ignored.
func TestParsePolicyOrigins(t *testing.T) {
	doc := `listen: 127.0.0.1:8443
identity: {id: "https://coder.example", key_file: coder.jwk}
trust_file: trust.json
policy: {require_full_chain: true, origins: ["https://user.example"], admit_callback: true}
routes:
  - {name: coder, protocol: a2a, path: /, upstream: "http://127.0.0.1:7000/"}
`
	c, err := Parse([]byte(doc), "/")
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Policy.Options("https://coder.example", nil); !o.RequireFullChain || len(o.Origins) != 1 || o.Origins[0] != "https://user.example" || !o.AdmitCallback {
		t.Fatalf("options: %+v", o)
	}
	_, err = Parse([]byte(strings.Replace(doc, "require_full_chain: true, ", "", 1)), "/")
	if err == nil || !strings.Contains(err.Error(), "policy.origins") || !strings.Contains(err.Error(), "needs require_full_chain") {
		t.Fatalf("got %v", err)
	}
}
