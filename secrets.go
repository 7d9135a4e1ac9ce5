package handoff

import (
	"errors"
	"fmt"
	"regexp"
)

// ErrSecretLike: a value an element would carry looks like a secret. The
// draft ("Secrets"): "The element MUST NOT contain secrets: no access
// tokens, API keys, tool credentials, passwords, or private keys.
// Credentials appear only as digests in grant." The signer refuses what
// it can recognize; what it cannot (a password, a token of an unknown
// shape) stays the caller's duty.
var ErrSecretLike = errors.New("handoff: the element MUST NOT contain secrets (draft \"Secrets\")")

// secretShapes are the secrets a value can be recognized by, each with
// what it looks like. They are matched anywhere in a value, so a token
// pasted into a sentence is found too.
var secretShapes = []struct {
	what string
	re   *regexp.Regexp
}{
	{"a bearer token (an Authorization header's value)", regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}`)},
	{"a JWT (three base64url parts, the first a JSON header)", regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}`)},
	{"a PEM private key", regexp.MustCompile(`-----BEGIN ([A-Z0-9]+ )?PRIVATE KEY-----`)},
	{"a private JWK (its \"d\" member)", regexp.MustCompile(`"kty"\s*:\s*"(EC|RSA|OKP)"[^}]*"d"\s*:\s*"|"d"\s*:\s*"[A-Za-z0-9_-]{20,}"[^}]*"kty"\s*:`)},
	{"an AWS access key id", regexp.MustCompile(`\b(AKIA|ASIA)[A-Z0-9]{16}\b`)},
	{"a GitHub token", regexp.MustCompile(`\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})\b`)},
	{"a Slack token", regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`)},
	{"an API secret key (sk-...)", regexp.MustCompile(`\bsk-(proj-|live_|test_)?[A-Za-z0-9_-]{20,}`)},
	{"a Google API key", regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}\b`)},
}

// secretIn names the first secret shape found in s ("" for none).
func secretIn(s string) string {
	if len(s) < 16 {
		return ""
	}
	for _, sh := range secretShapes {
		if sh.re.MatchString(s) {
			return sh.what
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
// that may quote an error message with a token in it).
func statusSecrets(st *Status) error {
	return checkSecrets("status", map[string]string{"detail": st.Detail, "iss": st.Iss, "aud": st.Aud, "reason": string(st.Reason)}, st.Extra)
}

// RedactSecrets is s with every secret shape the signer refuses replaced
// by "[redacted]": for free text that crosses a trust boundary, such as
// an upstream's error message copied into a status's detail.
func RedactSecrets(s string) string {
	if len(s) < 16 {
		return s
	}
	for _, sh := range secretShapes {
		s = sh.re.ReplaceAllString(s, "[redacted]")
	}
	return s
}
