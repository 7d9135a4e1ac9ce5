package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Who may use the console: an operator named in operator.tokens_file,
// proven by the operator's token, either sent with each request
// (Authorization: Bearer <token>, for scripts) or given once to the
// sign-in form, which opens a session. The session's cookie holds a
// random id, never the token; the session keeps the token's SHA-256, so
// a token taken out of the file (SIGHUP) ends its sessions at once.

const (
	consoleCookie     = "handoff_console"
	sessionLifetime   = 12 * time.Hour // from sign-in, whatever is done
	sessionIdle       = 2 * time.Hour  // from the last request
	maxSessions       = 1024           // the oldest goes first beyond it
	maxConsoleForm    = 64 << 10       // a POST's body
	maxOperatorToken  = 4 << 10        // a token given to the sign-in form
	consoleAuthHeader = `Bearer realm="handoff console"`
)

// consoleSession is one signed-in browser.
type consoleSession struct {
	token   [32]byte // SHA-256 of the operator's token
	csrf    string   // the token every POST of this session carries
	created time.Time
	seen    time.Time
}

// consoleOp is the operator a request comes from.
type consoleOp struct {
	Name string
	// CSRF is the session's form token; "" for a request authenticated
	// by its Authorization header, which a browser does not add by itself.
	CSRF string
	sid  string
}

// operatorSums are the SHA-256 sums of the operators' tokens, computed
// once for the operators map src (a reload stores a new map).
type operatorSums struct {
	src  *map[string]string
	sums [][32]byte
	name []string
}

// operatorNamed returns the name of the operator whose token has SHA-256
// sum, comparing with every token's sum in constant time.
func (c *console) operatorNamed(sum [32]byte) (string, bool) {
	ops := c.s.operators.Load()
	cur := c.sums.Load()
	if cur == nil || cur.src != ops {
		cur = &operatorSums{src: ops}
		for tok, n := range *ops {
			cur.sums, cur.name = append(cur.sums, sha256.Sum256([]byte(tok))), append(cur.name, n)
		}
		c.sums.Store(cur)
	}
	name, found := "", 0
	for i := range cur.sums {
		if subtle.ConstantTimeCompare(cur.sums[i][:], sum[:]) == 1 {
			name, found = cur.name[i], 1
		}
	}
	return name, found == 1
}

// bearerToken is the token of an Authorization header of the Bearer
// scheme, which is matched without regard to case (RFC 7235); the
// header's value and the token are trimmed of surrounding white space.
// ok is false for a header of another scheme, or none.
func bearerToken(h string) (tok string, ok bool) {
	scheme, tok, _ := strings.Cut(strings.TrimSpace(h), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// operator authenticates r: by its bearer token, else by its session.
func (c *console) operator(r *http.Request) (*consoleOp, bool) {
	if tok, ok := bearerToken(r.Header.Get("Authorization")); ok {
		name, ok := c.operatorNamed(sha256.Sum256([]byte(tok)))
		if !ok || tok == "" {
			c.refused(r, "bearer")
			return nil, false
		}
		return &consoleOp{Name: name}, true
	}
	ck, err := r.Cookie(consoleCookie)
	if err != nil {
		return nil, false
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[ck.Value]
	if s == nil {
		return nil, false
	}
	if now.Sub(s.created) > sessionLifetime || now.Sub(s.seen) > sessionIdle {
		delete(c.sessions, ck.Value)
		return nil, false
	}
	name, ok := c.operatorNamed(s.token)
	if !ok {
		delete(c.sessions, ck.Value) // the token was taken out of the file
		return nil, false
	}
	s.seen = now
	return &consoleOp{Name: name, CSRF: s.csrf, sid: ck.Value}, true
}

// refused logs and counts a token that is no operator's (never the
// token itself): by the sign-in form, or a bearer header (via).
func (c *console) refused(r *http.Request, via string) {
	c.signins.WithLabelValues("refused").Inc()
	c.log.Warn("console: sign-in refused: not an operator's token", "via", via, "remote", r.RemoteAddr)
}

// signInForm answers with the sign-in form only: no data of any hop.
func (c *console) signInForm(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", consoleAuthHeader)
	}
	c.render(w, r, code, "signin", consoleFrame{Title: "Sign in", Page: msg})
}

// signIn opens a session for the operator whose token the form gives,
// ending the session the request came with, if any (a browser holds one
// session: none is fixed in advance, none piles up).
func (c *console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxConsoleForm)
	tok := ""
	if err := r.ParseForm(); err == nil {
		tok = strings.TrimSpace(r.PostForm.Get("token"))
	}
	sum := sha256.Sum256([]byte(tok))
	if _, ok := c.operatorNamed(sum); !ok || tok == "" || len(tok) > maxOperatorToken {
		c.refused(r, "form")
		c.signInForm(w, r, http.StatusUnauthorized, "That is not an operator's token.")
		return
	}
	sid, csrf := randomToken(), randomToken()
	now := c.now()
	c.mu.Lock()
	if old, err := r.Cookie(consoleCookie); err == nil {
		delete(c.sessions, old.Value)
	}
	c.dropStale(now)
	c.sessions[sid] = &consoleSession{token: sum, csrf: csrf, created: now, seen: now}
	c.mu.Unlock()
	c.signins.WithLabelValues("ok").Inc()
	// No Path: the cookie's path is the folder signed in from, the
	// console's own, whatever prefix a proxy put before it.
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: sid, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: int(sessionLifetime / time.Second)})
	consoleRedirect(w, "./")
}

// overTLS reports whether the browser reached the console over HTTPS:
// the admin port is TLS, or a proxy that terminates TLS says so in
// X-Forwarded-Proto (its first value). The session cookie is Secure then.
func overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// crossSite says why the POST r comes from a page of another site ("" when
// it does not): its Sec-Fetch-Site is there and not "same-origin", or its
// Origin is there and names another host than the request's Host. A
// browser sets both on a form's POST and a page cannot forge them; a
// script's request (curl, with a bearer token) sends neither.
func crossSite(r *http.Request) string {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return "Sec-Fetch-Site: " + s
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return "Origin " + o + " is not this host, " + r.Host
		}
	}
	return ""
}

// signOut ends the request's session.
func (c *console) signOut(w http.ResponseWriter, r *http.Request, op *consoleOp) {
	if op.sid != "" {
		c.mu.Lock()
		delete(c.sessions, op.sid)
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overTLS(r), MaxAge: -1})
	consoleRedirect(w, "./")
}

// dropStale removes the sessions that have ended and, past maxSessions,
// the oldest. c.mu is held.
func (c *console) dropStale(now time.Time) {
	for id, s := range c.sessions {
		if now.Sub(s.created) > sessionLifetime || now.Sub(s.seen) > sessionIdle {
			delete(c.sessions, id)
		}
	}
	for len(c.sessions) >= maxSessions {
		oldest := ""
		for id, s := range c.sessions {
			if oldest == "" || s.created.Before(c.sessions[oldest].created) {
				oldest = id
			}
		}
		delete(c.sessions, oldest)
	}
}

// csrfOK reports whether a POST may act for op: one with the session's
// form token, or one authenticated by its Authorization header.
func (op *consoleOp) csrfOK(r *http.Request) bool {
	if op.sid == "" {
		return true
	}
	got := r.PostForm.Get("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(op.CSRF)) == 1
}

// randomToken is 32 random octets, base64url.
func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}
