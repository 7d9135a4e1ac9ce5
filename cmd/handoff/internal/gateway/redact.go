package gateway

import (
	"encoding/json"
	"net/url"
	"strings"
)

// redactDSN masks a PostgreSQL URL's password, in its user part and in
// its query (password, sslpassword, and any other key naming one); a
// DSN that does not parse is masked whole.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(not shown)"
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q := u.Query()
	for k := range q {
		if strings.Contains(strings.ToLower(k), "password") {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// redactedStore is the store key as logs and the admin port show it.
func redactedStore(store string) string {
	if strings.HasPrefix(store, "sqlite:") {
		return store
	}
	return redactDSN(store)
}

// Redacted is the configuration as the admin port shows it: secrets (a
// PostgreSQL DSN's password) masked; a key is named by its file or
// variable, never shown.
func (c *Config) Redacted() ([]byte, error) {
	store := redactedStore(c.Store)
	type egressRoute struct {
		Name      string `json:"name"`
		Protocol  string `json:"protocol"`
		Path      string `json:"path"`
		AgentID   string `json:"agent_id"`
		URL       string `json:"url"`
		TokenFile string `json:"bearer_token_file,omitempty"`
		TokenEnv  string `json:"bearer_token_env,omitempty"`
		TTL       string `json:"ttl"`
		Timeout   string `json:"call_timeout"`
		Starts    bool   `json:"starts_chains"`
		Speaks    bool   `json:"speaks_handoff"`
	}
	type route struct {
		Name               string `json:"name"`
		Protocol           string `json:"protocol"`
		Path               string `json:"path"`
		Upstream           string `json:"upstream"`
		WithoutHandoff     string `json:"without_handoff"`
		FailuresEffectFree bool   `json:"failures_effect_free"`
		CallTimeout        string `json:"call_timeout,omitempty"`
	}
	out := struct {
		Listen   string `json:"listen"`
		Admin    string `json:"admin,omitempty"`
		Identity struct {
			ID      string `json:"id"`
			KeyFile string `json:"key_file,omitempty"`
			KeyEnv  string `json:"key_env,omitempty"`
		} `json:"identity"`
		TrustFile string `json:"trust_file"`
		Store     string `json:"store"`
		Recover   bool   `json:"recover_on_start"`
		Inbound   struct {
			BearerTokensFile string `json:"bearer_tokens_file,omitempty"`
			ClientCertsFile  string `json:"client_certs_file,omitempty"`
			JWT              *struct {
				JWKSFile   string `json:"jwks_file,omitempty"`
				JWKSURL    string `json:"jwks_url,omitempty"`
				Issuer     string `json:"issuer"`
				Audience   string `json:"audience"`
				Claim      string `json:"claim"`
				AgentsFile string `json:"agents_file"`
			} `json:"jwt,omitempty"`
		} `json:"inbound"`
		TLS *struct {
			CertFile     string `json:"cert_file"`
			KeyFile      string `json:"key_file"`
			ClientCAFile string `json:"client_ca_file,omitempty"`
		} `json:"tls,omitempty"`
		Policy struct {
			Skew             string   `json:"skew"`
			MaxLifetime      string   `json:"max_lifetime"`
			MaxChain         int      `json:"max_chain"`
			RequireFullChain bool     `json:"require_full_chain"`
			Origins          []string `json:"origins,omitempty"`
			AdmitCallback    bool     `json:"admit_callback"`
			SenderMustBeIss  bool     `json:"sender_must_be_iss"`
		} `json:"policy"`
		Routes  []route `json:"routes"`
		Tracing *struct {
			Endpoint    string  `json:"otlp_endpoint"`
			ServiceName string  `json:"service_name"`
			SampleRatio float64 `json:"sample_ratio"`
		} `json:"tracing,omitempty"`
		Operator *struct {
			TokensFile string `json:"tokens_file"`
		} `json:"operator,omitempty"`
		AdminTLS *struct {
			CertFile string `json:"cert_file"`
			KeyFile  string `json:"key_file"`
		} `json:"admin_tls,omitempty"`
		Egress *struct {
			Listen string        `json:"listen"`
			Routes []egressRoute `json:"routes"`
		} `json:"egress,omitempty"`
	}{Listen: c.Listen, Admin: c.Admin, TrustFile: c.TrustFile, Store: store, Recover: c.RecoverOnStart}
	out.Identity.ID, out.Identity.KeyFile, out.Identity.KeyEnv = c.Identity.ID, c.Identity.KeyFile, c.Identity.KeyEnv
	out.Inbound.BearerTokensFile, out.Inbound.ClientCertsFile = c.Inbound.BearerTokensFile, c.Inbound.ClientCertsFile
	if j := c.Inbound.JWT; j != (InboundJWT{}) {
		out.Inbound.JWT = &struct {
			JWKSFile   string `json:"jwks_file,omitempty"`
			JWKSURL    string `json:"jwks_url,omitempty"`
			Issuer     string `json:"issuer"`
			Audience   string `json:"audience"`
			Claim      string `json:"claim"`
			AgentsFile string `json:"agents_file"`
		}{j.JWKSFile, j.JWKSURL, j.Issuer, j.Audience, j.Claim, j.AgentsFile}
	}
	if c.TLS != (TLS{}) {
		out.TLS = &struct {
			CertFile     string `json:"cert_file"`
			KeyFile      string `json:"key_file"`
			ClientCAFile string `json:"client_ca_file,omitempty"`
		}{c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ClientCAFile}
	}
	o := c.Policy
	out.Policy.Skew, out.Policy.MaxLifetime = o.EffectiveSkew().String(), o.EffectiveMaxLifetime().String()
	out.Policy.MaxChain, out.Policy.RequireFullChain, out.Policy.Origins = o.EffectiveMaxChain(), o.RequireFullChain, o.Origins
	out.Policy.AdmitCallback, out.Policy.SenderMustBeIss = o.AdmitCallback, o.SenderMustBeIss
	if t := c.Tracing; t.Endpoint != nil {
		out.Tracing = &struct {
			Endpoint    string  `json:"otlp_endpoint"`
			ServiceName string  `json:"service_name"`
			SampleRatio float64 `json:"sample_ratio"`
		}{t.Endpoint.String(), t.ServiceName, t.SampleRatio}
	}
	if c.Operator != (Operator{}) {
		out.Operator = &struct {
			TokensFile string `json:"tokens_file"`
		}{c.Operator.TokensFile}
	}
	if c.AdminTLS != (TLS{}) {
		out.AdminTLS = &struct {
			CertFile string `json:"cert_file"`
			KeyFile  string `json:"key_file"`
		}{c.AdminTLS.CertFile, c.AdminTLS.KeyFile}
	}
	if c.Egress.Listen != "" {
		out.Egress = &struct {
			Listen string        `json:"listen"`
			Routes []egressRoute `json:"routes"`
		}{Listen: c.Egress.Listen}
		for _, r := range c.Egress.Routes {
			out.Egress.Routes = append(out.Egress.Routes, egressRoute{r.Name, r.Protocol, r.Path, r.AgentID, r.URL.String(),
				r.TokenFile, r.TokenEnv, r.EffectiveTTL().String(), r.EffectiveCallTimeout().String(), r.StartsChains, r.SpeaksHandoff})
		}
	}
	for _, r := range c.Routes {
		rr := route{r.Name, r.Protocol, r.Path, r.Upstream.String(), r.WithoutHandoff, r.FailuresEffectFree, ""}
		if r.CallTimeout > 0 {
			rr.CallTimeout = r.CallTimeout.String()
		}
		out.Routes = append(out.Routes, rr)
	}
	return json.MarshalIndent(out, "", "  ")
}
