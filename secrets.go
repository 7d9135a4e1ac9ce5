package handoff

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrSecretLike: a value an element would carry looks like a secret. The
// draft ("Secrets"): "The element MUST NOT contain secrets: no access
// tokens, API keys, tool credentials, passwords, or private keys.
// Credentials appear only as digests in grant." The signer refuses what
// it can recognize; what it cannot (a password, a token of an unknown
// shape) stays the caller's duty.
var ErrSecretLike = errors.New("handoff: the element MUST NOT contain secrets (draft \"Secrets\")")

// secretShapes are the secrets a value can be recognized by, each with
// what it looks like. Each expression matches the whole secret (a PEM
// block through its end line, a JWK's private member with its value), so
// that RedactSecrets leaves none of it; needs, when set, must also be in
// the value (a JWK's "kty"), and digit, that the match holds a digit
// (a token, not an English word after "Bearer").
var secretShapes = []struct {
	what  string
	re    *regexp.Regexp
	needs string
	digit bool
	lead  bool // the match begins with one character that is not the secret's
}{
	{what: "a bearer token (an Authorization header's value)", re: regexp.MustCompile(`(?:\bBearer|(?i:authorization)\s*:\s*(?i:bearer))\s+[A-Za-z0-9._~+/-]{16,}=*`), digit: true},
	{what: "basic credentials (an Authorization header's value)", re: regexp.MustCompile(`(?:\bBasic|(?i:authorization)\s*:\s*(?i:basic))\s+[A-Za-z0-9+/]{12,}={0,2}`), digit: true},
	{what: "a JWT (three base64url parts, the first a JSON header)", re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}`)},
	{what: "a PEM private key", re: regexp.MustCompile(`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|$)`)},
	{what: "a private JWK (its private members)", re: regexp.MustCompile(`"(?:d|k|p|q|dp|dq|qi)"\s*:\s*"[A-Za-z0-9_-]{16,}"`), needs: `"kty"`},
	{what: "a credential in a URL's query", re: regexp.MustCompile(`(?i)[?&](?:access_token|id_token|refresh_token|token|api_key|apikey|key|client_secret|secret|password|sig)=[^&\s"'#]{8,}`)},
	{what: "an AWS access key id", re: regexp.MustCompile(`\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`)},
	{what: "a GitHub token", re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b`)},
	{what: "a Slack token", re: regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`)},
	{what: "an API secret key (sk-...)", re: regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])sk-(?:proj-|live_|test_)?[A-Za-z0-9_-]{20,}`), lead: true},
	{what: "a Stripe secret key", re: regexp.MustCompile(`\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}`)},
	{what: "a Google API key", re: regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}\b`)},
}

// secretIn names the first secret shape found in s ("" for none).
func secretIn(s string) string {
	if len(s) < 12 {
		return ""
	}
	for _, sh := range secretShapes {
		if sh.needs != "" && !strings.Contains(s, sh.needs) {
			continue
		}
		for _, m := range sh.re.FindAllString(s, -1) {
			if !sh.digit || strings.ContainsAny(m, "0123456789") {
				return sh.what
			}
		}
	}
	return ""
}

// checkSecrets looks for secret shapes in every text the payload
// carries: the named members, and the unknown members' strings at any
// depth (keys too).
func checkSecrets(kind string, texts map[string]string, extra map[string]any) error {
	for member, v := range texts {
		if what := secretIn(v); what != "" {
			return fmt.Errorf("%w: the %s's %s looks like %s; a credential goes in grant, as its digest", ErrSecretLike, kind, member, what)
		}
	}
	var walk func(path string, v any) error
	walk = func(path string, v any) error {
		switch x := v.(type) {
		case string:
			if what := secretIn(x); what != "" {
				return fmt.Errorf("%w: the %s's member %s looks like %s", ErrSecretLike, kind, path, what)
			}
		case map[string]any:
			for k, e := range x {
				if what := secretIn(k); what != "" {
					return fmt.Errorf("%w: a member name under the %s's %s looks like %s", ErrSecretLike, kind, path, what)
				}
				if err := walk(path+"."+k, e); err != nil {
					return err
				}
			}
		case []any:
			for i, e := range x {
				if err := walk(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for k, v := range extra {
		if what := secretIn(k); what != "" {
			return fmt.Errorf("%w: a member name of the %s looks like %s", ErrSecretLike, kind, what)
		}
		if err := walk(k, v); err != nil {
			return err
		}
	}
	return nil
}

// offerSecrets checks an offer's texts.
func offerSecrets(o *Offer) error {
	texts := map[string]string{"dialog": o.Dialog, "task": o.Task, "iss": o.Iss, "aud": o.Aud, "hop": o.Hop}
	var extra map[string]any
	if o.Obo != nil {
		texts["obo.sub"], texts["obo.iss"] = o.Obo.Sub, o.Obo.Iss
		if len(o.Obo.Extra) > 0 {
			extra = map[string]any{"obo": o.Obo.Extra}
		}
	}
	for i, r := range o.Refs {
		texts[fmt.Sprintf("refs[%d].loc", i)] = r.Loc
		if len(r.Extra) > 0 {
			if extra == nil {
				extra = map[string]any{}
			}
			extra[fmt.Sprintf("refs[%d]", i)] = r.Extra
		}
		// Not proof: a learnlog-head proof carries a signed head whose
		// JWS has a JWT's shape, and a proof is public by design.
	}
	if err := checkSecrets("offer", texts, extra); err != nil {
		return err
	}
	return checkSecrets("offer", nil, o.Extra)
}

// statusSecrets checks a status's texts (its detail above all: free text
// that may quote an error message with a token in it), its refs' too.
func statusSecrets(st *Status) error {
	texts := map[string]string{"detail": st.Detail, "iss": st.Iss, "aud": st.Aud, "reason": string(st.Reason)}
	extra := map[string]any{}
	for i, r := range st.Refs {
		texts[fmt.Sprintf("refs[%d].loc", i)] = r.Loc
		if len(r.Extra) > 0 {
			extra[fmt.Sprintf("refs[%d]", i)] = r.Extra
		}
	}
	if err := checkSecrets("status", texts, extra); err != nil {
		return err
	}
	return checkSecrets("status", nil, st.Extra)
}

// RedactSecrets is s with every secret shape the signer refuses replaced
// by "[redacted]": for free text that crosses a trust boundary, such as
// an upstream's error message copied into a status's detail.
func RedactSecrets(s string) string {
	if len(s) < 12 {
		return s
	}
	for _, sh := range secretShapes {
		if sh.needs != "" && !strings.Contains(s, sh.needs) {
			continue
		}
		s = sh.re.ReplaceAllStringFunc(s, func(m string) string {
			if sh.digit && !strings.ContainsAny(m, "0123456789") {
				return m
			}
			if sh.lead && m[0] != 's' {
				return m[:1] + "[redacted]" // the character before "sk-" stays
			}
			return "[redacted]"
		})
	}
	return s
}
