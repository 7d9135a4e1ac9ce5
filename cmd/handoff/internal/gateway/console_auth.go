package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
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

// operatorNamed returns the name of the operator whose token has SHA-256
// sum, comparing with every token in constant time.
func (c *console) operatorNamed(sum [32]byte) (string, bool) {
	name, found := "", 0
	for tok, n := range *c.s.operators.Load() {
		ts := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(ts[:], sum[:]) == 1 {
			name, found = n, 1
		}
	}
	return name, found == 1
}

// operator authenticates r: by its bearer token, else by its session.
func (c *console) operator(r *http.Request) (*consoleOp, bool) {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		name, ok := c.operatorNamed(sha256.Sum256([]byte(tok)))
		if !ok {
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

// signInForm answers with the sign-in form only: no data of any hop.
func (c *console) signInForm(w http.ResponseWriter, code int, msg string) {
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", consoleAuthHeader)
	}
	c.render(w, code, "signin", consoleFrame{Title: "Sign in", Page: msg})
}

// signIn opens a session for the operator whose token the form gives.
func (c *console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxConsoleForm)
	tok := ""
	if err := r.ParseForm(); err == nil {
		tok = strings.TrimSpace(r.PostForm.Get("token"))
	}
	sum := sha256.Sum256([]byte(tok))
	if _, ok := c.operatorNamed(sum); !ok || tok == "" || len(tok) > maxOperatorToken {
		c.signInForm(w, http.StatusUnauthorized, "That is not an operator's token.")
		return
	}
	sid, csrf := randomToken(), randomToken()
	now := c.now()
	c.mu.Lock()
	c.dropStale(now)
	c.sessions[sid] = &consoleSession{token: sum, csrf: csrf, created: now, seen: now}
	c.mu.Unlock()
	// No Path: the cookie's path is the folder signed in from, the
	// console's own, whatever prefix a proxy put before it.
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: sid, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(sessionLifetime / time.Second)})
	consoleRedirect(w, "./")
}

// signOut ends the request's session.
func (c *console) signOut(w http.ResponseWriter, r *http.Request, op *consoleOp) {
	if op.sid != "" {
		c.mu.Lock()
		delete(c.sessions, op.sid)
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: -1})
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
