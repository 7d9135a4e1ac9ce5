// Package gateway is "handoff serve": the delegate's receiving checks, hop
// record and signed statuses in front of an unmodified A2A agent or MCP
// server (docs/spec.md section 6). This file reads its configuration.
package gateway

import (
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/quantumlearningmachines/handoff"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is the configuration's JSON Schema, printed by
// "handoff serve --print-schema".
//
//go:embed config.schema.json
var Schema []byte

// MaxConfigSize bounds the configuration file.
const MaxConfigSize = 1 << 20

// Config is a valid configuration, its relative paths made absolute.
type Config struct {
	Listen    string
	Admin     string // "" for no admin listener
	Identity  Identity
	TrustFile string
	Store     string // "sqlite:PATH" or a postgres:// DSN
	// RecoverOnStart: flag the hops cut off by the last stop (see New).
	RecoverOnStart bool
	Inbound        Inbound
	TLS            TLS // zero: plain HTTP
	Policy         Policy
	Routes         []Route
	Tracing        Tracing // zero: no spans exported
	// Operator: who may use the operator console on the admin port
	// (console.go); zero: the console is off.
	Operator Operator
	// AdminTLS serves the admin port over TLS; zero: plain HTTP.
	AdminTLS TLS
	// Egress: the agent's outbound calls, signed as the agent (egress.go);
	// zero: no egress listener.
	Egress Egress

	lines lineMap // each key path's line, for the problems Open finds
}

// Identity is the AgentId the gateway receives and signs as.
type Identity struct {
	ID      string
	KeyFile string // one of KeyFile and KeyEnv
	KeyEnv  string
}

// Inbound says how callers are authenticated.
type Inbound struct {
	BearerTokensFile string // "" for none: no caller is authenticated
	// ClientCertsFile maps a name of a verified TLS client certificate
	// to an AgentId ("" for none); it needs TLS.ClientCAFile.
	ClientCertsFile string
	JWT             InboundJWT // zero: none
}

// authenticates reports whether in has a way to authenticate a caller.
func (in Inbound) authenticates() bool {
	return in.BearerTokensFile != "" || in.ClientCertsFile != "" || in.JWT != (InboundJWT{})
}

// errNoInbound is why policy.sender_must_be_iss needs inbound.
var errNoInbound = errors.New("no bearer_tokens_file, client_certs_file or jwt authenticates a caller, so every offer would be refused")

// InboundJWT authenticates callers by a bearer JWT an identity provider
// signed (jwt.go): checked against the provider's JWKS (JWKSFile or
// JWKSURL), its Issuer and Audience, and mapped from its Claim to an
// AgentId by AgentsFile ({"<claim value>": "<AgentId>"}).
type InboundJWT struct {
	JWKSFile, JWKSURL string
	Issuer, Audience  string // Audience: identity.id unless given
	Claim             string // "sub" unless given
	AgentsFile        string
}

// TLS is the listener's TLS: its certificate, and the CAs client
// certificates are verified against ("" for none asked).
type TLS struct {
	CertFile, KeyFile, ClientCAFile string
}

// Operator says who may use the operator console: TokensFile maps a
// bearer token to the operator's name ({"<token>": "<name>"}), which
// each resolution records.
type Operator struct {
	TokensFile string
}

// Egress is the listener the agent behind the gateway calls other agents
// and tool servers through: each outbound task or tool call gets an
// offer signed as identity.id, linked to the inbound hop it serves.
type Egress struct {
	Listen string // "" for no egress listener
	Routes []EgressRoute
}

// EgressRoute is one downstream reached through the egress listener.
type EgressRoute struct {
	Name     string
	Protocol string // "a2a" or "mcp"
	Path     string // prefix on egress.listen, stripped before forwarding
	AgentID  string // the downstream's AgentId: the offers' aud
	URL      *url.URL
	// TokenFile / TokenEnv hold the bearer token the gateway sends the
	// downstream (its inbound authentication), so that a lost reply
	// asked again is answered with the recorded status; both "": none.
	TokenFile, TokenEnv string
	// TTL is each offer's lifetime (exp - iat); 0: 300 s.
	TTL time.Duration
	// CallTimeout bounds one outbound call, its asks again included:
	// then it is abandoned, its outcome unknown (flagged); 0: 15 min.
	CallTimeout time.Duration
	// SpeaksHandoff: the downstream runs the receiving checks (a
	// handoff gateway, or an agent with the library), so a lost reply is
	// asked for again from the first call; otherwise only once a signed
	// status has come from it (a plain server would run the work again).
	SpeaksHandoff bool
	// StartsChains: the agent starts work of its own through this
	// route (it is where chains begin), so a call with no link is
	// counted as "origin", not flagged as unlinked.
	StartsChains bool
}

// Tracing exports a span per request over OTLP/HTTP (tracing.go).
type Tracing struct {
	Endpoint    *url.URL // the traces URL; nil: tracing off
	ServiceName string   // "handoff-gateway" unless given
	SampleRatio float64  // of the traces the gateway starts; 1 unless given
}

// Policy is the receiving checks' local policy; its zero values are D4's
// defaults.
type Policy struct {
	Skew             time.Duration // 0: the default; NoSkew when "0s" was given
	SkewSet          bool
	MaxLifetime      time.Duration
	MaxChain         int
	RequireFullChain bool
	// Origins: the AgentIds trusted to start a chain (with
	// RequireFullChain; handoff.Options.Origins).
	Origins []string
	// AdmitCallback: handoff.Options.AdmitCallback.
	AdmitCallback bool
	// SenderMustBeIss: delegate.Config.SenderMustBeIss, a new hop only
	// from a caller inbound authenticated as the offer's iss.
	SenderMustBeIss bool
}

// Route is one upstream behind the gateway.
type Route struct {
	Name           string
	Protocol       string // "a2a" or "mcp"
	Path           string
	Upstream       *url.URL
	WithoutHandoff string // "reject" or "pass"
	// FailuresEffectFree: the upstream's failures take no effect, so a
	// failed task is a signed "failed" with no refs (draft "Knowing the
	// Outcome"); otherwise the hop's outcome is unknown and flagged.
	FailuresEffectFree bool
	// CallTimeout (MCP routes): how long a forwarded tools/call may go
	// unanswered before the gateway cancels it upstream and leaves the
	// hop's outcome unknown; 0 for no limit.
	CallTimeout time.Duration
}

// Problem is one fault of a configuration: the key path it is at
// ("routes[1].protocol"; "" for the whole file), the line of the file,
// and what is wrong.
type Problem struct {
	Path string
	Line int
	Msg  string
}

func (p Problem) String() string {
	where := p.Path
	if where == "" {
		where = "(the file)"
	}
	if p.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", where, p.Line, p.Msg)
	}
	return where + ": " + p.Msg
}

// Problems is every fault found, in the order of the file; as an error,
// one line each.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Load reads and checks the configuration file at path: its form (the
// schema), then what the schema cannot say (unique routes, addresses,
// durations, one key source). It does not open the files it names (see
// Open). The error is Problems when the file was read but is not valid.
func Load(path string) (*Config, error) {
	b, err := readBounded(path, MaxConfigSize)
	if errors.Is(err, errTooLarge) {
		return nil, Problems{{Msg: fmt.Sprintf("the file is larger than %d octets", MaxConfigSize)}}
	}
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return Parse(b, filepath.Dir(abs))
}

// Parse checks a configuration document; relative paths in it are taken
// from dir.
func Parse(b []byte, dir string) (*Config, error) {
	doc, lines, ps := readYAML(b)
	if len(ps) > 0 {
		return nil, ps
	}
	if ps := validate(doc, lines); len(ps) > 0 {
		return nil, ps
	}
	return build(doc.(map[string]any), lines, dir)
}

var compiled = func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(Schema)))
	if err != nil {
		panic("gateway: config.schema.json: " + err.Error()) // the embedded file; a test reads it
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("config.schema.json", doc); err != nil {
		panic("gateway: config.schema.json: " + err.Error())
	}
	s, err := c.Compile("config.schema.json")
	if err != nil {
		panic("gateway: config.schema.json: " + err.Error())
	}
	return s
}()

var printer = message.NewPrinter(language.English)

// validate holds doc to the schema, one Problem per leaf fault.
func validate(doc any, lines lineMap) Problems {
	err := compiled.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return Problems{{Msg: err.Error()}}
	}
	var ps Problems
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		path := pathOf(e.InstanceLocation)
		switch k := e.ErrorKind.(type) {
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				ps = append(ps, Problem{Path: join(path, p), Line: lines[join(path, p)], Msg: "unknown key"})
			}
			return
		case *kind.Required:
			for _, m := range k.Missing {
				ps = append(ps, Problem{Path: join(path, m), Line: lines[path], Msg: "missing (required)"})
			}
			return
		}
		msg := e.ErrorKind.LocalizedString(printer)
		if k, ok := e.ErrorKind.(*kind.Pattern); ok && strings.HasPrefix(path, "policy.") {
			msg = fmt.Sprintf("%q is not a duration such as 60s, 1m30s or 300ms", k.Got)
		}
		if secretPath(path) {
			// The value may hold a password or a pasted key: not quoted.
			switch k := e.ErrorKind.(type) {
			case *kind.Pattern:
				msg = fmt.Sprintf("does not match the pattern %s (the value is not shown: it may hold a secret)", k.Want)
			case *kind.Type:
				// says only the types
			default:
				msg = "not a valid value (the value is not shown: it may hold a secret)"
			}
		}
		ps = append(ps, Problem{Path: path, Line: lines[path], Msg: msg})
	}
	walk(ve)
	ps = sortProblems(ps)
	return ps
}

// secretPath: a key whose value may hold a secret (a DSN's password, a
// key pasted where its file or variable name belongs), so that errors
// never quote it.
func secretPath(path string) bool {
	return path == "store" || strings.HasPrefix(path, "identity.") || strings.HasPrefix(path, "inbound.") || strings.HasPrefix(path, "tls.") ||
		strings.HasPrefix(path, "admin_tls.") || strings.HasPrefix(path, "operator.") ||
		strings.HasPrefix(path, "routes[") && strings.HasSuffix(path, ".upstream") ||
		strings.HasPrefix(path, "egress.routes[") && (strings.HasSuffix(path, ".url") || strings.Contains(path, ".bearer_token_"))
}

// pathOf spells a JSON Schema instance location as a key path.
func pathOf(loc []string) string {
	var b strings.Builder
	for _, s := range loc {
		if _, err := strconv.Atoi(s); err == nil && b.Len() > 0 {
			b.WriteString("[" + s + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

func sortProblems(ps Problems) Problems {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].Line != ps[j].Line {
			return ps[i].Line < ps[j].Line
		}
		return ps[i].Path < ps[j].Path
	})
	if len(ps) > maxProblems {
		// A file of thousands of unknown keys is one mistake, not a
		// screenful per key.
		ps = append(ps[:maxProblems:maxProblems], Problem{Path: "(the file)", Msg: fmt.Sprintf("%d more problems not shown", len(ps)-maxProblems)})
	}
	return ps
}

// maxProblems bounds the problems reported for one file.
const maxProblems = 50

// build checks what the schema cannot and makes the Config.
func build(m map[string]any, lines lineMap, dir string) (*Config, error) {
	var ps Problems
	fail := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Line: lines[path], Msg: fmt.Sprintf(format, args...)})
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	file := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c := &Config{Listen: str(m, "listen"), Admin: str(m, "admin"), TrustFile: file(str(m, "trust_file"))}
	addr := func(path, a string) {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			fail(path, "not host:port: %v", err)
			return
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			fail(path, "port %q is not a number from 0 to 65535", port)
		}
		_ = host // empty: every interface
	}
	addr("listen", c.Listen)
	if c.Admin != "" {
		addr("admin", c.Admin)
		if c.Admin == c.Listen && !strings.HasSuffix(c.Admin, ":0") { // port 0: each gets its own
			fail("admin", "the same address as listen: the admin port must be its own")
		}
	}

	id, _ := m["identity"].(map[string]any)
	c.Identity = Identity{ID: str(id, "id"), KeyFile: file(str(id, "key_file")), KeyEnv: str(id, "key_env")}
	switch {
	case c.Identity.KeyFile == "" && c.Identity.KeyEnv == "":
		fail("identity", "give the private key as key_file or key_env")
	case c.Identity.KeyFile != "" && c.Identity.KeyEnv != "":
		fail("identity.key_env", "give key_file or key_env, not both")
	}

	c.Store = str(m, "store")
	c.RecoverOnStart, _ = m["recover_on_start"].(bool)
	switch {
	case c.Store == "":
		c.Store = "sqlite:" + filepath.Join(dir, "hops.db")
	case strings.HasPrefix(c.Store, "sqlite:"):
		c.Store = "sqlite:" + file(strings.TrimPrefix(c.Store, "sqlite:"))
	default:
		if _, err := url.Parse(c.Store); err != nil {
			fail("store", "not a PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DB?...); the value is not shown: it may hold a password")
		}
	}

	if in, ok := m["inbound"].(map[string]any); ok {
		c.Inbound.BearerTokensFile = file(str(in, "bearer_tokens_file"))
		c.Inbound.ClientCertsFile = file(str(in, "client_certs_file"))
		if j, ok := in["jwt"].(map[string]any); ok {
			c.Inbound.JWT = InboundJWT{JWKSFile: file(str(j, "jwks_file")), JWKSURL: str(j, "jwks_url"), Issuer: str(j, "issuer"),
				Audience: str(j, "audience"), Claim: str(j, "claim"), AgentsFile: file(str(j, "agents_file"))}
			if c.Inbound.JWT.Audience == "" {
				c.Inbound.JWT.Audience = c.Identity.ID
			}
			if c.Inbound.JWT.Claim == "" {
				c.Inbound.JWT.Claim = "sub"
			}
			switch u := c.Inbound.JWT.JWKSURL; {
			case (u == "") == (c.Inbound.JWT.JWKSFile == ""):
				fail("inbound.jwt", "give the provider's keys as jwks_file or jwks_url (one of them)")
			case u != "":
				pu, err := url.Parse(u)
				switch {
				case err != nil || pu.Host == "" || pu.Scheme != "https" && pu.Scheme != "http":
					fail("inbound.jwt.jwks_url", "not an http(s) URL")
				case pu.Scheme == "http" && !isLoopback(pu.Host):
					// Keys fetched in the clear could be anyone's.
					fail("inbound.jwt.jwks_url", "plain http is taken only from a loopback address; use https")
				case pu.User != nil:
					fail("inbound.jwt.jwks_url", "holds credentials; the provider's keys are public")
				}
			}
		}
	}
	if t, ok := m["tls"].(map[string]any); ok {
		c.TLS = TLS{CertFile: file(str(t, "cert_file")), KeyFile: file(str(t, "key_file")), ClientCAFile: file(str(t, "client_ca_file"))}
	}
	if c.Inbound.ClientCertsFile != "" && c.TLS.ClientCAFile == "" {
		fail("inbound.client_certs_file", "needs tls.client_ca_file: a client certificate identifies a caller only once it is verified")
	}

	if pol, ok := m["policy"].(map[string]any); ok {
		dur := func(k string) (time.Duration, bool) {
			s, ok := pol[k].(string)
			if !ok {
				return 0, false
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				fail("policy."+k, "not a duration: %v", err)
			}
			return d, true
		}
		c.Policy.Skew, c.Policy.SkewSet = dur("skew")
		if d, ok := dur("max_lifetime"); ok {
			if d < time.Second {
				fail("policy.max_lifetime", "at least 1s")
			}
			c.Policy.MaxLifetime = d
		}
		switch n := pol["max_chain"].(type) {
		case int64:
			c.Policy.MaxChain = int(n)
		case float64: // 2.0: an integer to the schema, and so here
			c.Policy.MaxChain = int(n)
		}
		c.Policy.RequireFullChain, _ = pol["require_full_chain"].(bool)
		c.Policy.AdmitCallback, _ = pol["admit_callback"].(bool)
		c.Policy.SenderMustBeIss, _ = pol["sender_must_be_iss"].(bool)
		if c.Policy.SenderMustBeIss && !c.Inbound.authenticates() {
			fail("policy.sender_must_be_iss", "needs inbound: %v", errNoInbound)
		}
		if os, ok := pol["origins"].([]any); ok {
			for _, o := range os {
				if v, ok := o.(string); ok {
					c.Policy.Origins = append(c.Policy.Origins, v)
				}
			}
			if !c.Policy.RequireFullChain {
				// Else they would be ignored: an origin is known only
				// from a full chain.
				fail("policy.origins", "needs require_full_chain: true (an origin is known only from a full chain)")
			}
		}
	}

	if t, ok := m["tracing"].(map[string]any); ok {
		c.Tracing = Tracing{ServiceName: str(t, "service_name"), SampleRatio: 1}
		if c.Tracing.ServiceName == "" {
			c.Tracing.ServiceName = "handoff-gateway"
		}
		switch r := t["sample_ratio"].(type) {
		case float64:
			c.Tracing.SampleRatio = r
		case int64:
			c.Tracing.SampleRatio = float64(r)
		}
		u, err := url.Parse(str(t, "otlp_endpoint"))
		switch {
		case err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http":
			fail("tracing.otlp_endpoint", "not an http(s) URL (an OpenTelemetry collector's OTLP/HTTP address, e.g. http://127.0.0.1:4318)")
		case u.User != nil || u.RawQuery != "":
			fail("tracing.otlp_endpoint", "holds credentials or a query; give a collector's headers in OTEL_EXPORTER_OTLP_HEADERS")
		default:
			c.Tracing.Endpoint = tracesURL(u)
		}
	}

	if op, ok := m["operator"].(map[string]any); ok {
		c.Operator.TokensFile = file(str(op, "tokens_file"))
		if c.Admin == "" {
			fail("operator", "the console is served on the admin port: set admin")
		}
	}
	if t, ok := m["admin_tls"].(map[string]any); ok {
		c.AdminTLS = TLS{CertFile: file(str(t, "cert_file")), KeyFile: file(str(t, "key_file"))}
		if c.Admin == "" {
			fail("admin_tls", "there is no admin port to serve over TLS: set admin")
		}
	}
	if eg, ok := m["egress"].(map[string]any); ok {
		buildEgress(eg, c, fail, file, addr)
	}

	names, paths := map[string]int{}, map[string]int{}
	routes, _ := m["routes"].([]any)
	if len(routes) == 0 && len(c.Egress.Routes) == 0 {
		fail("routes", "no route: give at least one route, or egress routes for a gateway that only signs outbound calls")
	}
	for i, x := range routes {
		r, _ := x.(map[string]any)
		at := fmt.Sprintf("routes[%d]", i)
		rt := Route{Name: str(r, "name"), Protocol: str(r, "protocol"), Path: str(r, "path"), WithoutHandoff: str(r, "without_handoff")}
		rt.FailuresEffectFree, _ = r["failures_effect_free"].(bool)
		if s, ok := r["call_timeout"].(string); ok {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				fail(at+".call_timeout", "not a duration: %v", err)
			case d < time.Second:
				fail(at+".call_timeout", "at least 1s")
			case rt.Protocol != "mcp":
				fail(at+".call_timeout", "is for mcp routes: an A2A task is followed until it ends, and its delegator cancels it")
			}
			rt.CallTimeout = d
		}
		if rt.WithoutHandoff == "" {
			rt.WithoutHandoff = "reject" // fail safe
		}
		if j, dup := names[rt.Name]; dup {
			fail(at+".name", "%q is also the name of routes[%d]", rt.Name, j)
		}
		names[rt.Name] = i
		if !strings.HasSuffix(rt.Path, "/") {
			rt.Path += "/"
		}
		if j, dup := paths[rt.Path]; dup {
			fail(at+".path", "%q is also the path of routes[%d]", rt.Path, j)
		}
		paths[rt.Path] = i
		u, err := url.Parse(str(r, "upstream"))
		switch {
		case err != nil:
			// url.Error quotes the value, which may hold a password.
			fail(at+".upstream", "not a URL (the value is not shown: it may hold a secret)")
		case u.User != nil:
			fail(at+".upstream", "a URL with credentials in it: the gateway sends none of its own")
		case u.RawQuery != "" || u.Fragment != "":
			fail(at+".upstream", "a base URL takes no query or fragment")
		default:
			rt.Upstream = u
		}
		c.Routes = append(c.Routes, rt)
	}
	if len(ps) > 0 {
		ps = sortProblems(ps)
		return nil, ps
	}
	c.lines = lines
	return c, nil
}

// EffectiveCallTimeout bounds one outbound call (15 min unless given).
func (r EgressRoute) EffectiveCallTimeout() time.Duration {
	if r.CallTimeout == 0 {
		return 15 * time.Minute
	}
	return r.CallTimeout
}

// EffectiveTTL is the lifetime of the route's offers (300 s unless
// given).
func (r EgressRoute) EffectiveTTL() time.Duration {
	if r.TTL == 0 {
		return 300 * time.Second
	}
	return r.TTL
}

// EffectiveSkew is the skew the checks allow (D4: 60 s unless given).
func (p Policy) EffectiveSkew() time.Duration {
	if !p.SkewSet {
		return handoff.EffectiveSkew(0)
	}
	return p.Skew
}

// Options are the receiving checks' options for this policy, as Me.
func (p Policy) Options(me string, keys handoff.KeySource) handoff.Options {
	skew := p.EffectiveSkew()
	if skew == 0 {
		skew = handoff.NoSkew
	}
	lim := handoff.DefaultLimits()
	lim.MaxChain = p.EffectiveMaxChain()
	return handoff.Options{Me: me, Keys: keys, Skew: skew, MaxLifetime: p.EffectiveMaxLifetime(),
		Limits: lim, RequireFullChain: p.RequireFullChain, Origins: p.Origins, AdmitCallback: p.AdmitCallback}
}

// EffectiveMaxLifetime is the longest lifetime accepted (D4: 300 s).
func (p Policy) EffectiveMaxLifetime() time.Duration {
	if p.MaxLifetime == 0 {
		return 300 * time.Second
	}
	return p.MaxLifetime
}

// EffectiveMaxChain is the longest chain accepted (16 unless given).
func (p Policy) EffectiveMaxChain() int {
	if p.MaxChain == 0 {
		return handoff.DefaultLimits().MaxChain
	}
	return p.MaxChain
}
