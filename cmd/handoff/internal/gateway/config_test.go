package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const good = `listen: 127.0.0.1:8443
admin: 127.0.0.1:9443
identity:
  id: https://coder.example/agent
  key_file: coder.jwk
trust_file: trust.json
store: sqlite:state/hops.db
inbound:
  bearer_tokens_file: tokens.json
policy:
  skew: 60s
  max_lifetime: 300s
  max_chain: 16
  require_full_chain: false
routes:
  - name: coder
    protocol: a2a
    path: /
    upstream: http://127.0.0.1:7000/
    without_handoff: reject
`

// TestParseSpecExample: the keys of docs/spec.md section 6, with exactly
// those names, read as that section says; relative paths are the
// configuration file's folder's.
func TestParseSpecExample(t *testing.T) {
	c, err := Parse([]byte(good), "/etc/handoff")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes[0]
	switch {
	case c.Listen != "127.0.0.1:8443" || c.Admin != "127.0.0.1:9443":
		t.Errorf("addresses: %q %q", c.Listen, c.Admin)
	case c.Identity.ID != "https://coder.example/agent" || c.Identity.KeyFile != "/etc/handoff/coder.jwk":
		t.Errorf("identity: %+v", c.Identity)
	case c.TrustFile != "/etc/handoff/trust.json" || c.Store != "sqlite:/etc/handoff/state/hops.db":
		t.Errorf("files: %q %q", c.TrustFile, c.Store)
	case c.Inbound.BearerTokensFile != "/etc/handoff/tokens.json":
		t.Errorf("inbound: %+v", c.Inbound)
	case c.Policy.EffectiveSkew() != time.Minute || c.Policy.EffectiveMaxLifetime() != 5*time.Minute || c.Policy.EffectiveMaxChain() != 16:
		t.Errorf("policy: %+v", c.Policy)
	case r.Name != "coder" || r.Protocol != "a2a" || r.Path != "/" || r.Upstream.String() != "http://127.0.0.1:7000/" || r.WithoutHandoff != "reject":
		t.Errorf("route: %+v", r)
	}
}

// TestParseDefaults: absent keys take D4's defaults, without_handoff
// "reject" (fail safe), the store sqlite:hops.db beside the file.
func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(`{"listen": ":8443", "identity": {"id": "me", "key_env": "KEY"}, "trust_file": "/t.json",
		"routes": [{"name": "m", "protocol": "a2a", "path": "/mcp", "upstream": "https://tools.example/mcp"}]}`), "/srv")
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "sqlite:/srv/hops.db" || c.Routes[0].WithoutHandoff != "reject" || c.Routes[0].Path != "/mcp/" || c.Admin != "" {
		t.Errorf("%+v", c)
	}
	if c.Policy.EffectiveSkew() != time.Minute || c.Policy.EffectiveMaxLifetime() != 5*time.Minute {
		t.Errorf("policy: %+v", c.Policy)
	}
	o := c.Policy.Options("me", nil)
	if o.Skew != time.Minute || o.MaxLifetime != 5*time.Minute || o.Limits.MaxChain != 16 {
		t.Errorf("options: %+v", o)
	}
	// "0s" is no skew at all, not the default.
	c, err = Parse([]byte(strings.Replace(good, "skew: 60s", "skew: 0s", 1)), "/")
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Policy.Options("me", nil); o.Skew >= 0 {
		t.Errorf("skew 0s: %v, want NoSkew", o.Skew)
	}
}

// TestParseTracing: tracing is off unless configured; an endpoint that
// names no path is given OTLP's traces path; the redacted view shows it;
// a change to it, or to one policy key, is named as needing a restart.
func TestParseTracing(t *testing.T) {
	off, err := Parse([]byte(good), "/")
	if err != nil || off.Tracing.Endpoint != nil {
		t.Fatalf("tracing without the key: %+v %v", off.Tracing, err)
	}
	on, err := Parse([]byte(good+"tracing: {otlp_endpoint: 'http://127.0.0.1:4318'}\n"), "/")
	if err != nil {
		t.Fatal(err)
	}
	if tr := on.Tracing; tr.Endpoint.String() != "http://127.0.0.1:4318/v1/traces" || tr.ServiceName != "handoff-gateway" || tr.SampleRatio != 1 {
		t.Errorf("defaults: %+v", tr)
	}
	if c, err := Parse([]byte(good+"tracing: {otlp_endpoint: 'https://otel.example/otlp/traces', sample_ratio: 0.25}\n"), "/"); err != nil ||
		c.Tracing.Endpoint.String() != "https://otel.example/otlp/traces" || c.Tracing.SampleRatio != 0.25 {
		t.Errorf("a path given is kept: %+v %v", c.Tracing, err)
	}
	if b, err := on.Redacted(); err != nil || !strings.Contains(string(b), `"otlp_endpoint": "http://127.0.0.1:4318/v1/traces"`) {
		t.Errorf("redacted: %s %v", b, err)
	}
	chain, err := Parse([]byte(strings.Replace(good, "max_chain: 16", "max_chain: 4", 1)), "/")
	if err != nil {
		t.Fatal(err)
	}
	if ks := restartKeys(off, on); len(ks) != 1 || ks[0] != "tracing" {
		t.Errorf("restart keys when tracing is added: %q", ks)
	}
	if ks := restartKeys(off, chain); len(ks) != 1 || ks[0] != "policy.max_chain" {
		t.Errorf("restart keys when max_chain changes: %q", ks)
	}
}

// TestParseProblems: SPEC section 6, "--validate-only ... one line per
// error naming the key path and line"; unknown keys are errors.
func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name, edit, with string
		want             []string
	}{
		{"unknown top-level key", "listen: 127.0.0.1:8443\n", "listen: 127.0.0.1:8443\nlisten_tls: yes\n",
			[]string{"listen_tls (line 2): unknown key"}},
		{"unknown nested key", "  max_chain: 16\n", "  max_chain: 16\n  max_chians: 3\n",
			[]string{"policy.max_chians (line 14): unknown key"}},
		{"unknown route key", "    without_handoff: reject\n", "    without_handoff: reject\n    timeout: 3s\n",
			[]string{"routes[0].timeout (line 21): unknown key"}},
		{"bad enum", "protocol: a2a", "protocol: grpc",
			[]string{"routes[0].protocol (line 17): "}},
		{"bad without_handoff", "without_handoff: reject", "without_handoff: allow",
			[]string{"routes[0].without_handoff (line 20): "}},
		{"missing required", "trust_file: trust.json\n", "",
			[]string{"trust_file (line 1): missing (required)"}},
		{"wrong type", "max_chain: 16", "max_chain: sixteen",
			[]string{"policy.max_chain (line 13): "}},
		{"bad duration", "skew: 60s", "skew: 60",
			[]string{"policy.skew (line 11): got number, want string"}},
		{"bad duration unit", "skew: 60s", "skew: 60x",
			[]string{"policy.skew (line 11): \"60x\" is not a duration such as 60s"}},
		{"duplicate key", "admin: 127.0.0.1:9443\n", "admin: 127.0.0.1:9443\nadmin: 127.0.0.1:9444\n",
			[]string{"admin (line 3): given twice (first at line 2)"}},
		{"two key sources", "  key_file: coder.jwk\n", "  key_file: coder.jwk\n  key_env: CODER_KEY\n",
			[]string{"identity.key_env (line 6): give key_file or key_env, not both"}},
		{"no key source", "  key_file: coder.jwk\n", "",
			[]string{"identity (line 3): give the private key as key_file or key_env"}},
		{"admin is listen", "admin: 127.0.0.1:9443", "admin: 127.0.0.1:8443",
			[]string{"admin (line 2): the same address as listen"}},
		{"bad address", "listen: 127.0.0.1:8443", "listen: localhost",
			[]string{"listen (line 1): not host:port"}},
		{"bad store", "store: sqlite:state/hops.db", "store: mysql://db",
			[]string{"store (line 7): "}},
		{"upstream with credentials", "upstream: http://127.0.0.1:7000/", "upstream: http://u:p@127.0.0.1:7000/",
			[]string{"routes[0].upstream (line 19): a URL with credentials in it"}},
		{"upstream not http", "upstream: http://127.0.0.1:7000/", "upstream: ftp://127.0.0.1/",
			[]string{"routes[0].upstream (line 19): "}},
		{"unknown protocol", "protocol: a2a", "protocol: grpc",
			[]string{"routes[0].protocol (line 17): "}},
		{"client certificates without a CA", "inbound:\n", "inbound:\n  client_certs_file: certs.json\n",
			[]string{"inbound.client_certs_file (line 9): needs tls.client_ca_file"}},
		{"jwt with two key sources", "inbound:\n", "inbound:\n  jwt: {jwks_file: k.json, jwks_url: 'https://idp.example/jwks', issuer: https://idp.example, agents_file: a.json}\n",
			[]string{"inbound.jwt (line 9): give the provider's keys as jwks_file or jwks_url"}},
		{"jwt keys over plain http", "inbound:\n", "inbound:\n  jwt: {jwks_url: 'http://idp.example/jwks', issuer: https://idp.example, agents_file: a.json}\n",
			[]string{"inbound.jwt.jwks_url (line 9): plain http is taken only from a loopback address"}},
		{"jwt without an issuer", "inbound:\n", "inbound:\n  jwt: {jwks_file: k.json, agents_file: a.json}\n",
			[]string{"inbound.jwt.issuer (line 9): missing (required)"}},
		{"sender_must_be_iss without inbound", "inbound:\n  bearer_tokens_file: tokens.json\npolicy:\n", "policy:\n  sender_must_be_iss: true\n",
			[]string{"policy.sender_must_be_iss (line 9): needs inbound"}},
		{"tracing to a non-URL", "store: sqlite:state/hops.db", "store: sqlite:state/hops.db\ntracing: {otlp_endpoint: '127.0.0.1:4318'}",
			[]string{"tracing.otlp_endpoint (line 8): "}},
		{"tracing with a key in the URL", "store: sqlite:state/hops.db", "store: sqlite:state/hops.db\ntracing: {otlp_endpoint: 'https://otel.example/v1/traces?api_key=x'}",
			[]string{"tracing.otlp_endpoint (line 8): holds credentials or a query"}},
		{"tracing sampled above 1", "store: sqlite:state/hops.db", "store: sqlite:state/hops.db\ntracing: {otlp_endpoint: 'http://127.0.0.1:4318', sample_ratio: 2}",
			[]string{"tracing.sample_ratio (line 8): "}},
		{"tls without a key", "store: sqlite:state/hops.db", "store: sqlite:state/hops.db\ntls: {cert_file: gw.pem}",
			[]string{"tls.key_file (line 8): missing (required)"}},
		{"duplicate route", "    without_handoff: reject\n", "    without_handoff: reject\n  - name: coder\n    protocol: a2a\n    path: /\n    upstream: http://127.0.0.1:7001/\n",
			[]string{"routes[1].name (line 21): \"coder\" is also the name of routes[0]", "routes[1].path (line 23): \"/\" is also the path of routes[0]"}},
		{"call_timeout on an a2a route", "    without_handoff: reject\n", "    without_handoff: reject\n    call_timeout: 30s\n",
			[]string{"routes[0].call_timeout (line 21): is for mcp routes"}},
		{"call_timeout too short", "    without_handoff: reject\n", "    without_handoff: reject\n    call_timeout: 10ms\n",
			[]string{"routes[0].call_timeout (line 21): at least 1s"}},
		{"call_timeout not a duration", "    without_handoff: reject\n", "    without_handoff: reject\n    call_timeout: soon\n",
			[]string{"routes[0].call_timeout (line 21): "}},
		{"no routes", "routes:\n", "routes: []\n#",
			[]string{"routes (line 15): "}},
		{"alias", "store: sqlite:state/hops.db", "store: &s sqlite:state/hops.db\nadmin2: *s",
			[]string{"store (line 7): an anchor (&s)", "admin2 (line 8): an alias (*s)"}},
		{"anchor", "store: sqlite:state/hops.db", "store: &s sqlite:state/hops.db",
			[]string{"store (line 7): an anchor (&s)"}},
		{"path that is a pattern", "path: /\n", "path: /{x}/\n",
			[]string{"routes[0].path (line 18): "}},
		{"store DSN not a URL: its password is not quoted", "store: sqlite:state/hops.db", "store: 'host=db password=hunter2'",
			[]string{"store (line 7): does not match the pattern"}},
		{"store URL that does not parse: its password is not quoted", "store: sqlite:state/hops.db", "store: 'postgres://gw:hunter2/x@db'",
			[]string{"store (line 7): not a PostgreSQL URL"}},
		{"a pasted key is not quoted", "  key_file: coder.jwk\n", "  key_env: '{\"d\": \"hunter2\"}'\n",
			[]string{"identity.key_env (line 5): "}},
		{"custom tag", "trust_file: trust.json", "trust_file: !env TRUST",
			[]string{"trust_file (line 6): the tag !env"}},
		{"not YAML", "listen: 127.0.0.1:8443\n", "listen: [127.0.0.1:8443\n",
			[]string{"(the file) (line 2): not YAML: did not find expected ',' or ']'"}}, // found on the next line
		{"not YAML on a later line (a parser's error)", "admin: 127.0.0.1:9443\n", "admin: [127.0.0.1:9443\n",
			[]string{"(the file) (line 2): not YAML: did not find expected ',' or ']'"}},
		{"not YAML (a scanner's error)", "admin: 127.0.0.1:9443\n", "admin: \"127.0.0.1:9443\n",
			[]string{"(the file) (line 2): not YAML: "}},
		{"two documents", "listen: 127.0.0.1:8443\n", "listen: 127.0.0.1:8443\n---\nlisten: x\n",
			[]string{"(the file) (line 2): a second YAML document"}},
		{"not a mapping", good, "- listen\n", []string{"(the file) (line 1): "}},
		{"empty", good, "", []string{"(the file): the file is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(good, tc.edit, tc.with, 1)
			if tc.name == "no routes" {
				doc = good[:strings.Index(good, "routes:")] + "routes: []\n"
			}
			_, err := Parse([]byte(doc), "/")
			ps, ok := err.(Problems)
			if !ok {
				t.Fatalf("err = %v (%T), want Problems", err, err)
			}
			if len(ps) != len(tc.want) {
				t.Fatalf("problems:\n%v\nwant %d: %q", ps, len(tc.want), tc.want)
			}
			for i, p := range ps {
				if !strings.HasPrefix(p.String(), tc.want[i]) {
					t.Errorf("problem %d = %q, want it to begin %q", i, p, tc.want[i])
				}
				if strings.Contains(p.String(), "hunter2") {
					t.Errorf("problem %d quotes a secret: %q", i, p)
				}
			}
		})
	}
}

// TestParseBounds: a file of many mistakes reports a bounded number;
// max_chain written as 2.0 is 2; /config masks a password in a DSN's
// user part and in its query.
func TestParseBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString(good)
	for i := range 5000 {
		fmt.Fprintf(&b, "unknown%d: 1\n", i)
	}
	_, err := Parse([]byte(b.String()), "/")
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != maxProblems+1 || ps[maxProblems].String() != "(the file): 4950 more problems not shown" {
		t.Errorf("%d problems, the last %v", len(ps), ps[len(ps)-1])
	}

	c, err := Parse([]byte(strings.Replace(good, "max_chain: 16", "max_chain: 2.0", 1)), "/")
	if err != nil || c.Policy.EffectiveMaxChain() != 2 {
		t.Errorf("max_chain: 2.0: %v, %v", c, err)
	}

	for _, dsn := range []string{"postgres://gw:hunter2@db:5432/hops", "postgres://gw@db:5432/hops?password=hunter2&sslmode=disable", "postgres://gw@db/hops?sslpassword=hunter2"} {
		c, err := Parse([]byte(strings.Replace(good, "store: sqlite:state/hops.db", "store: '"+dsn+"'", 1)), "/")
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Redacted()
		if err != nil || strings.Contains(string(r), "hunter2") || !strings.Contains(string(r), "db") {
			t.Errorf("%s: /config shows %s (%v)", dsn, r, err)
		}
	}
}

// exampleDir is a folder holding the example coder's key (coder.jwk) and
// trust file (trust.json), for configurations that name them, and a
// function that writes more files into it.
func exampleDir(t *testing.T) (string, func(name, body string)) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"coder.jwk", "trust.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "testdata", "example", name))
		if err != nil {
			t.Fatal(err)
		}
		write(name, string(b))
	}
	return dir, write
}

// TestOpen reads the files a configuration names; their problems are at
// the key that names them, and never quote a secret.
func TestOpen(t *testing.T) {
	dir, write := exampleDir(t)
	write("tokens.json", `{"s3cret-token-planner-0123456789": "https://planner.example"}`)
	c, err := Parse([]byte(good), dir)
	if err != nil {
		t.Fatal(err)
	}
	// The SQLite file's folder must exist: --validate-only says so.
	if _, err := c.Open(); err == nil || !strings.Contains(err.Error(), "store (line 7): the folder of the SQLite file") {
		t.Errorf("a store whose folder is missing: %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	res, err := c.Open()
	if err != nil {
		t.Fatal(err)
	}
	if res.Signer == nil || res.Keys == nil || res.Tokens["s3cret-token-planner-0123456789"] != "https://planner.example" {
		t.Fatalf("%+v", res)
	}

	write("tokens.json", `{"short": "https://planner.example", "s3cret-token-planner-0123456789": "https://planner.example", "s3cret-token-planner-0123456789": "x"}`)
	key, _ := os.ReadFile(filepath.Join(dir, "coder.jwk"))
	trustFile, _ := os.ReadFile(filepath.Join(dir, "trust.json"))
	write("trust.json", `{"agents": []`)
	write("coder.jwk", string(trustFile)) // a trust file where the key belongs
	_, err = c.Open()
	msg := err.Error()
	for _, want := range []string{"identity.key_file (line 5): not a private key", "trust_file (line 6): ", "inbound.bearer_tokens_file (line 9): "} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "s3cret") || strings.Contains(msg, "\"short\"") {
		t.Errorf("a token is quoted:\n%s", msg)
	}

	// A tokens file that is not the object it should be: one problem,
	// not a second one made up from what the decoder half read.
	write("coder.jwk", string(key))
	write("trust.json", string(trustFile))
	write("tokens.json", `{"t": 5}`)
	_, err = c.Open()
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 || !strings.Contains(ps[0].String(), "not a JSON object of token to AgentId") {
		t.Errorf("tokens file {\"t\": 5}: %v", err)
	}

	// A key pasted where its file's name belongs: not printed back.
	c.Identity.KeyFile = `{"kty": "EC", "d": "hunter2"}`
	if _, err := c.Open(); err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "identity.key_file") {
		t.Errorf("a pasted key: %v", err)
	}

	c.Identity.KeyFile, c.Identity.KeyEnv = "", "HANDOFF_TEST_NO_SUCH_VAR"
	c.lines["identity.key_env"] = 5
	if _, err := c.Open(); err == nil || !strings.Contains(err.Error(), "identity.key_env (line 5): the environment variable HANDOFF_TEST_NO_SUCH_VAR is not set") {
		t.Errorf("key_env: %v", err)
	}
}

// TestSchemaDescribesEveryKey: the embedded schema compiles (the package
// would not start otherwise) and documents every key it allows.
func TestSchemaDescribesEveryKey(t *testing.T) {
	for _, key := range []string{`"listen"`, `"admin"`, `"identity"`, `"key_file"`, `"key_env"`, `"trust_file"`, `"store"`,
		`"inbound"`, `"bearer_tokens_file"`, `"policy"`, `"skew"`, `"max_lifetime"`, `"max_chain"`, `"require_full_chain"`,
		`"sender_must_be_iss"`, `"recover_on_start"`, `"client_certs_file"`, `"tls"`, `"cert_file"`, `"client_ca_file"`, `"routes"`, `"name"`, `"protocol"`, `"path"`, `"upstream"`, `"without_handoff"`,
		`"jwt"`, `"jwks_file"`, `"jwks_url"`, `"issuer"`, `"audience"`, `"claim"`, `"agents_file"`,
		`"tracing"`, `"otlp_endpoint"`, `"service_name"`, `"sample_ratio"`} {
		if !regexp.MustCompile(regexp.QuoteMeta(key) + `: \{\s*"description"`).Match(Schema) {
			t.Errorf("the schema does not describe %s", key)
		}
	}
}

// FuzzParse: whatever the file holds, Parse returns a Config or
// Problems, never panics, and a Config it returns has a redacted view.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		good,
		"listen: [\n",
		"a: &x 1\nb: *x\n",
		"<<: {listen: 1}\n",
		"listen: !!binary aGk=\n",
		"---\nlisten: 1\n---\nlisten: 2\n",
		strings.Repeat("[", 64) + strings.Repeat("]", 64),
		"routes:\n  - {name: a, name: b}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, t.TempDir())
		if err != nil {
			var ps Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error %v is not Problems", err)
			}
			return
		}
		if _, err := c.Redacted(); err != nil {
			t.Fatalf("redacted: %v", err)
		}
	})
}
