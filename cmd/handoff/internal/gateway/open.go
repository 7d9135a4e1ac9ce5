package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// Resources are what a configuration's files and variables hold.
type Resources struct {
	Signer *handoff.Signer
	Keys   *trust.Config
	// Tokens maps a bearer token to the AgentId it authenticates.
	Tokens map[string]string
	// TLS is the listener's TLS configuration (nil: plain HTTP), and
	// CertIDs maps a name of a verified client certificate to the
	// AgentId it authenticates (see certSender).
	TLS     *tls.Config
	CertIDs map[string]string
	// JWT checks bearer JWTs (nil: inbound.jwt is not configured).
	JWT *jwtVerifier
	// Operators maps an operator token to the operator's name (empty:
	// the console is off); AdminTLS is the admin port's TLS (nil: plain
	// HTTP).
	Operators map[string]string
	AdminTLS  *tls.Config
	// EgressTokens maps an egress route's name to the bearer token sent
	// to its downstream (absent: none).
	EgressTokens map[string]string
	// Warnings are what works but should not stay so (a secret file
	// others may read), one line each, naming the key.
	Warnings []string
}

// warnOpen notes a secret file that group or others may read or write,
// as ssh does (0o077): it works, but the secret is only as safe as the
// file's mode.
func (r *Resources) warnOpen(key, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s: %s is accessible by others (mode %#o); chmod 600 %s", key, path, fi.Mode().Perm(), path))
	}
}

// maxSecretFile bounds a key or tokens file.
const maxSecretFile = 1 << 20

// Open reads the key, the trust file and the tokens file c names, each
// problem at the key that names the file. Nothing secret is quoted.
func (c *Config) Open() (*Resources, error) {
	var ps Problems
	fail := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Line: c.lines[path], Msg: fmt.Sprintf(format, args...)})
	}
	res := &Resources{Tokens: map[string]string{}, CertIDs: map[string]string{}, Operators: map[string]string{}, EgressTokens: map[string]string{}}
	if db, ok := strings.CutPrefix(c.Store, "sqlite:"); ok {
		// Caught here, by --validate-only, rather than by serve's start.
		if fi, err := os.Stat(filepath.Dir(db)); err != nil || !fi.IsDir() {
			fail("store", "the folder of the SQLite file %s does not exist (the file is made, not its folder)", db)
		}
	}

	var jwk []byte
	keyAt := "identity.key_file"
	if c.Identity.KeyEnv != "" {
		keyAt = "identity.key_env"
		v, ok := os.LookupEnv(c.Identity.KeyEnv)
		if !ok || v == "" {
			fail(keyAt, "the environment variable %s is not set", c.Identity.KeyEnv)
		}
		jwk = []byte(v)
	} else {
		b, err := readBounded(c.Identity.KeyFile, maxSecretFile)
		if err != nil {
			fail(keyAt, "%v", err)
		}
		jwk = b
		res.warnOpen(keyAt, c.Identity.KeyFile)
	}
	if len(jwk) > 0 {
		if k, _, err := trust.ParsePrivateJWK(jwk); err != nil {
			fail(keyAt, "not a private key (a P-256 JWK with d): %v", err)
		} else if s, err := handoff.NewSigner(k); err != nil {
			fail(keyAt, "%v", err)
		} else {
			res.Signer = s
		}
	}

	if keys, err := trust.Load(c.TrustFile); err != nil {
		fail("trust_file", "%v", err)
	} else {
		res.Keys = keys
	}

	if f := c.Inbound.BearerTokensFile; f != "" {
		b, err := readBounded(f, maxSecretFile)
		if err != nil {
			fail("inbound.bearer_tokens_file", "%v", err)
		} else {
			res.warnOpen("inbound.bearer_tokens_file", f)
			var m map[string]string
			if err := json.Unmarshal(b, &m); err != nil {
				// The decoder's message may quote a token: say only where.
				fail("inbound.bearer_tokens_file", "not a JSON object of token to AgentId (%s)", jsonWhere(err))
				m = nil // partly filled: its entries say nothing more
			}
			for tok, id := range m {
				switch {
				case len(tok) < 16:
					fail("inbound.bearer_tokens_file", "a token shorter than 16 characters (for AgentId %q): too easy to guess", id)
				case id == "":
					fail("inbound.bearer_tokens_file", "a token mapped to an empty AgentId")
				}
			}
			if len(ps) == 0 {
				res.Tokens = m
			}
		}
	}
	if c.TLS != (TLS{}) {
		res.warnOpen("tls.key_file", c.TLS.KeyFile)
		certPEM, err := readBounded(c.TLS.CertFile, maxSecretFile)
		if err != nil {
			fail("tls.cert_file", "%v", err)
		}
		keyPEM, kerr := readBounded(c.TLS.KeyFile, maxSecretFile)
		if kerr != nil {
			fail("tls.key_file", "%v", kerr)
		}
		if err == nil && kerr == nil {
			if pair, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				// The error may quote neither: crypto/tls names the PEM
				// block types, never key material.
				fail("tls.cert_file", "the certificate and tls.key_file do not make a key pair: %v", err)
			} else {
				res.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
			}
		}
		if f := c.TLS.ClientCAFile; f != "" {
			b, err := readBounded(f, maxSecretFile)
			pool := x509.NewCertPool()
			switch {
			case err != nil:
				fail("tls.client_ca_file", "%v", err)
			case !pool.AppendCertsFromPEM(b):
				fail("tls.client_ca_file", "holds no PEM certificate")
			case res.TLS != nil:
				// Asked for, verified when given: a caller without one is
				// only not identified by it.
				res.TLS.ClientCAs, res.TLS.ClientAuth = pool, tls.VerifyClientCertIfGiven
			}
		}
	}
	if f := c.Inbound.ClientCertsFile; f != "" {
		b, err := readBounded(f, maxSecretFile)
		var m map[string]string
		switch {
		case err != nil:
			fail("inbound.client_certs_file", "%v", err)
		case json.Unmarshal(b, &m) != nil:
			fail("inbound.client_certs_file", "not a JSON object of certificate name to AgentId (%s)", jsonWhere(json.Unmarshal(b, &m)))
		default:
			for name, id := range m {
				if name == "" || id == "" {
					fail("inbound.client_certs_file", "an empty certificate name or AgentId")
				}
			}
			res.CertIDs = m
		}
	}
	if f := c.Operator.TokensFile; f != "" {
		b, err := readBounded(f, maxSecretFile)
		if err != nil {
			fail("operator.tokens_file", "%v", err)
		} else {
			res.warnOpen("operator.tokens_file", f)
			var m map[string]string
			if err := json.Unmarshal(b, &m); err != nil {
				fail("operator.tokens_file", "not a JSON object of token to operator name (%s)", jsonWhere(err))
				m = nil
			}
			if len(m) == 0 && err == nil {
				// Valid: how every operator is revoked at once (SIGHUP).
				res.Warnings = append(res.Warnings, "operator.tokens_file: no operator in it: nobody can sign in to the console")
			}
			for tok, name := range m {
				switch {
				case len(tok) < 16:
					fail("operator.tokens_file", "a token shorter than 16 characters (for operator %q): too easy to guess", name)
				case name == "":
					fail("operator.tokens_file", "a token mapped to an empty operator name")
				}
			}
			res.Operators = m
		}
	}
	if c.AdminTLS != (TLS{}) {
		res.warnOpen("admin_tls.key_file", c.AdminTLS.KeyFile)
		certPEM, err := readBounded(c.AdminTLS.CertFile, maxSecretFile)
		if err != nil {
			fail("admin_tls.cert_file", "%v", err)
		}
		keyPEM, kerr := readBounded(c.AdminTLS.KeyFile, maxSecretFile)
		if kerr != nil {
			fail("admin_tls.key_file", "%v", kerr)
		}
		if err == nil && kerr == nil {
			if pair, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				fail("admin_tls.cert_file", "the certificate and admin_tls.key_file do not make a key pair: %v", err)
			} else {
				res.AdminTLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
			}
		}
	}
	for i, r := range c.Egress.Routes {
		at := fmt.Sprintf("egress.routes[%d]", i)
		var tok string
		switch {
		case r.TokenEnv != "":
			v, ok := os.LookupEnv(r.TokenEnv)
			if !ok || v == "" {
				fail(at+".bearer_token_env", "the environment variable %s is not set", r.TokenEnv)
			}
			tok = v
		case r.TokenFile != "":
			b, err := readBounded(r.TokenFile, maxSecretFile)
			if err != nil {
				fail(at+".bearer_token_file", "%v", err)
			}
			res.warnOpen(at+".bearer_token_file", r.TokenFile)
			tok = strings.TrimSpace(string(b))
			if err == nil && tok == "" {
				fail(at+".bearer_token_file", "the file is empty")
			}
		}
		if strings.ContainsAny(tok, " \t\r\n") {
			fail(at+".bearer_token_"+map[bool]string{true: "env", false: "file"}[r.TokenEnv != ""], "the token holds white space: not one bearer token")
		} else if tok != "" {
			res.EgressTokens[r.Name] = tok
		}
	}
	if j := c.Inbound.JWT; j != (InboundJWT{}) {
		v, at, err := newJWTVerifier(j, c.Policy.EffectiveSkew())
		if err != nil {
			fail(at, "%v", err)
		}
		res.JWT = v
	}
	if len(ps) > 0 {
		ps = sortProblems(ps)
		return nil, ps
	}
	return res, nil
}

// newJWTVerifier reads inbound.jwt's files; an error names the key at
// fault.
func newJWTVerifier(j InboundJWT, skew time.Duration) (v *jwtVerifier, at string, err error) {
	v = &jwtVerifier{cfg: j, skew: skew, log: slog.New(slog.DiscardHandler),
		hc: &http.Client{Timeout: jwksFetchTime, CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "https" && !isLoopback(req.URL.Host) || len(via) >= 5 {
				return fmt.Errorf("inbound.jwt.jwks_url: a redirect to %s is not followed (https only, at most 5)", req.URL.Redacted())
			}
			return nil
		}}}
	b, err := readBounded(j.AgentsFile, maxSecretFile)
	if err != nil {
		return nil, "inbound.jwt.agents_file", err
	}
	if err := json.Unmarshal(b, &v.agents); err != nil {
		return nil, "inbound.jwt.agents_file", fmt.Errorf("not a JSON object of %s claim value to AgentId (%s)", j.Claim, jsonWhere(err))
	}
	for name, id := range v.agents {
		if name == "" || id == "" {
			return nil, "inbound.jwt.agents_file", errors.New("an empty claim value or AgentId")
		}
	}
	if j.JWKSFile != "" {
		b, err := readBounded(j.JWKSFile, maxJWKS)
		if err == nil {
			v.keys, err = parseJWKS(b)
		}
		if err != nil {
			return nil, "inbound.jwt.jwks_file", err
		}
	}
	return v, "", nil
}

// jsonWhere is where a JSON error is, without the values it may quote.
func jsonWhere(err error) string {
	var se *json.SemanticError
	var sx *jsontext.SyntacticError
	switch {
	case errors.As(err, &sx):
		return fmt.Sprintf("malformed JSON at octet %d", sx.ByteOffset)
	case errors.As(err, &se):
		return fmt.Sprintf("a value that is not text at octet %d", se.ByteOffset)
	}
	return "malformed"
}

// readBounded reads the regular file at path, of at most limit octets.
// Anything else (a FIFO, a device) is refused: it is opened without
// blocking (O_NONBLOCK, harmless for a regular file) and checked before
// it is read, so that a reload never blocks on it.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err == nil {
		if fi, serr := f.Stat(); serr != nil || !fi.Mode().IsRegular() {
			f.Close()
			err = &fs.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
		}
	}
	if err != nil {
		// A key or tokens pasted where its file's name belongs must not
		// be printed back: the path is quoted only when it looks like one.
		var pe *fs.PathError
		if errors.As(err, &pe) && !looksLikePath(path) {
			return nil, fmt.Errorf("cannot open it (%v); the value is not shown: it does not look like a file name and may be a secret", pe.Err)
		}
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d octets", errTooLarge, path, limit)
	}
	return b, nil
}

var errTooLarge = errors.New("too large")

// looksLikePath: no JSON, no line breaks, no quotes, not overlong.
func looksLikePath(p string) bool {
	return len(p) <= 1024 && !strings.ContainsAny(p, "{}\"\n\r")
}
