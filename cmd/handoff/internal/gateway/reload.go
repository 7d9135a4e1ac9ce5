package gateway

import (
	"fmt"
	"net/url"
	"slices"
)

// Reload reads the configuration file again and applies what may change
// while running (trust_file, inbound.bearer_tokens_file); a change to
// any other key is logged as needing a restart and not applied. An
// invalid file changes nothing: the last good configuration stays.
func (s *Server) Reload(path string) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	c, err := Load(path)
	var res *Resources
	if err == nil && s.cfg.Load().Policy.SenderMustBeIss && !c.Inbound.authenticates() {
		// The running policy stays (a restart key) with the new inbound:
		// that pair must be one Parse would take.
		err = fmt.Errorf("inbound: policy.sender_must_be_iss stays on until a restart, and the new inbound is empty: %w", errNoInbound)
	}
	if err == nil {
		res, err = c.Open()
	}
	if err != nil {
		s.metrics.reloads.WithLabelValues("failed").Inc()
		s.metrics.configValid.Set(0)
		s.log.Error("reload failed: the last good configuration stays", "config", path, "err", oneLine(err))
		return err
	}
	old := s.cfg.Load()
	for _, k := range restartKeys(old, c) {
		s.log.Warn("reload: this key changed but needs a restart; the running value stays", "key", k)
	}
	s.keys.Store(res.Keys)
	s.tokens.Store(&res.Tokens)
	s.certIDs.Store(&res.CertIDs)
	s.setJWT(res.JWT)
	if old.Operator.TokensFile != "" && c.Operator.TokensFile != "" {
		// The console's operators change with the file; turning the
		// console on or off needs a restart (restartKeys).
		s.operators.Store(&res.Operators)
	}
	keep := *old
	keep.TrustFile, keep.Inbound = c.TrustFile, c.Inbound
	if old.Operator.TokensFile != "" && c.Operator.TokensFile != "" {
		keep.Operator = c.Operator
	}
	if old.Operator.TokensFile != "" && c.Operator.TokensFile == "" {
		// The console stays mounted until a restart, but nobody signs in
		// any more: taking it away takes effect at once, the safe way.
		s.operators.Store(&map[string]string{})
	}
	for _, w := range res.Warnings {
		s.log.Warn(w, "config", path)
	}
	s.cfg.Store(&keep)
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.metrics.configValid.Set(1)
	s.log.Info("reloaded", "config", path)
	return nil
}

// restartKeys names the keys whose change a reload does not apply.
func restartKeys(old, c *Config) []string {
	var ks []string
	if old.Listen != c.Listen {
		ks = append(ks, "listen")
	}
	if old.Admin != c.Admin {
		ks = append(ks, "admin")
	}
	if old.Identity != c.Identity {
		ks = append(ks, "identity")
	}
	if old.TLS != c.TLS {
		ks = append(ks, "tls")
	}
	if old.AdminTLS != c.AdminTLS {
		ks = append(ks, "admin_tls")
	}
	if (old.Operator.TokensFile == "") != (c.Operator.TokensFile == "") {
		ks = append(ks, "operator")
	}
	if !egressEqual(old.Egress, c.Egress) {
		ks = append(ks, "egress")
	}
	if old.Store != c.Store {
		ks = append(ks, "store")
	}
	op, np := old.Policy, c.Policy
	for _, k := range []struct {
		name    string
		changed bool
	}{
		{"policy.skew", op.EffectiveSkew() != np.EffectiveSkew()},
		{"policy.max_lifetime", op.EffectiveMaxLifetime() != np.EffectiveMaxLifetime()},
		{"policy.max_chain", op.EffectiveMaxChain() != np.EffectiveMaxChain()},
		{"policy.require_full_chain", op.RequireFullChain != np.RequireFullChain},
		{"policy.origins", !slices.Equal(op.Origins, np.Origins)},
		{"policy.admit_callback", op.AdmitCallback != np.AdmitCallback},
		{"policy.sender_must_be_iss", op.SenderMustBeIss != np.SenderMustBeIss},
	} {
		if k.changed {
			ks = append(ks, k.name)
		}
	}
	urlOf := func(u *url.URL) string {
		if u == nil {
			return ""
		}
		return u.String()
	}
	if ot, nt := old.Tracing, c.Tracing; urlOf(ot.Endpoint) != urlOf(nt.Endpoint) || ot.ServiceName != nt.ServiceName || ot.SampleRatio != nt.SampleRatio {
		ks = append(ks, "tracing")
	}
	if len(old.Routes) != len(c.Routes) {
		ks = append(ks, "routes")
	} else {
		for i := range c.Routes {
			a, b := old.Routes[i], c.Routes[i]
			if a.Name != b.Name || a.Protocol != b.Protocol || a.Path != b.Path || a.Upstream.String() != b.Upstream.String() ||
				a.WithoutHandoff != b.WithoutHandoff || a.FailuresEffectFree != b.FailuresEffectFree || a.CallTimeout != b.CallTimeout {
				ks = append(ks, fmt.Sprintf("routes[%d]", i))
			}
		}
	}
	return ks
}

// egressEqual: the same egress listener and routes.
func egressEqual(a, b Egress) bool {
	if a.Listen != b.Listen || len(a.Routes) != len(b.Routes) {
		return false
	}
	for i := range a.Routes {
		x, y := a.Routes[i], b.Routes[i]
		if x.Name != y.Name || x.Protocol != y.Protocol || x.Path != y.Path || x.AgentID != y.AgentID || x.URL.String() != y.URL.String() ||
			x.TokenFile != y.TokenFile || x.TokenEnv != y.TokenEnv || x.TTL != y.TTL || x.CallTimeout != y.CallTimeout || x.StartsChains != y.StartsChains || x.SpeaksHandoff != y.SpeaksHandoff {
			return false
		}
	}
	return true
}
