package gateway

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// buildEgress reads the egress key (config.go's build does the rest):
// its listener, loopback only, and its routes.
func buildEgress(eg map[string]any, c *Config, fail func(path, format string, args ...any), file func(string) string, addr func(path, a string)) {
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	c.Egress.Listen = str(eg, "listen")
	addr("egress.listen", c.Egress.Listen)
	if !isLoopback(c.Egress.Listen) {
		// Whoever reaches it has offers signed as identity.id: the
		// agent beside the gateway only (decision 90).
		fail("egress.listen", "not a loopback address: whoever reaches the egress gets offers signed as identity.id, so it listens for the agent on the same host only (127.0.0.1, [::1] or localhost)")
	}
	for _, other := range []struct{ key, a string }{{"listen", c.Listen}, {"admin", c.Admin}} {
		if other.a != "" && other.a == c.Egress.Listen && !strings.HasSuffix(other.a, ":0") {
			fail("egress.listen", "the same address as %s: the egress listener must be its own", other.key)
		}
	}
	enames, epaths := map[string]int{}, map[string]int{}
	ers, _ := eg["routes"].([]any)
	for i, x := range ers {
		r, _ := x.(map[string]any)
		at := fmt.Sprintf("egress.routes[%d]", i)
		er := EgressRoute{Name: str(r, "name"), Protocol: str(r, "protocol"), Path: str(r, "path"), AgentID: str(r, "agent_id"),
			TokenFile: file(str(r, "bearer_token_file")), TokenEnv: str(r, "bearer_token_env")}
		er.StartsChains, _ = r["starts_chains"].(bool)
		er.SpeaksHandoff, _ = r["speaks_handoff"].(bool)
		if er.TokenFile != "" && er.TokenEnv != "" {
			fail(at+".bearer_token_env", "give bearer_token_file or bearer_token_env, not both")
		}
		if s, ok := r["ttl"].(string); ok {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				fail(at+".ttl", "not a duration: %v", err)
			case d < 2*time.Second:
				fail(at+".ttl", "at least 2s")
			}
			er.TTL = d
		}
		if s, ok := r["call_timeout"].(string); ok {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				fail(at+".call_timeout", "not a duration: %v", err)
			case d < time.Second:
				fail(at+".call_timeout", "at least 1s")
			}
			er.CallTimeout = d
		}
		if j, dup := enames[er.Name]; dup {
			fail(at+".name", "%q is also the name of egress.routes[%d]", er.Name, j)
		}
		enames[er.Name] = i
		if !strings.HasSuffix(er.Path, "/") {
			er.Path += "/"
		}
		if j, dup := epaths[er.Path]; dup {
			fail(at+".path", "%q is also the path of egress.routes[%d]", er.Path, j)
		}
		epaths[er.Path] = i
		if er.AgentID == c.Identity.ID {
			fail(at+".agent_id", "is identity.id: an agent does not hand work to itself through its own gateway")
		}
		u, err := url.Parse(str(r, "url"))
		switch {
		case err != nil:
			// url.Error quotes the value, which may hold a password.
			fail(at+".url", "not a URL (the value is not shown: it may hold a secret)")
		case u.User != nil:
			fail(at+".url", "a URL with credentials in it: give the downstream's token as bearer_token_file or bearer_token_env")
		case u.RawQuery != "" || u.Fragment != "":
			fail(at+".url", "a base URL takes no query or fragment")
		case u.Host == c.Egress.Listen || u.Host == c.Listen:
			fail(at+".url", "is this gateway itself: an outbound call would come back to be signed again")
		default:
			er.URL = u
		}
		c.Egress.Routes = append(c.Egress.Routes, er)
	}
}
