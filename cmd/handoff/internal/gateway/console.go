package gateway

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/picture"
	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/safetext"
	"github.com/quantumlearningmachines/handoff/store"
)

// The operator console (issue 17; draft "Knowing the Outcome", "Forks,
// Concurrency, and Equivocation"): pages on the admin port, under
// /console/, for the people who settle what the gateway flagged. It is on
// only when operator.tokens_file names its operators.
//
// Every page is rendered on the server (html/template) with the CSS
// embedded in the binary: the pages load nothing from elsewhere and run
// no script, which the Content-Security-Policy states. Every link, form
// action and redirect is relative and every page sits at one level
// (/console/hop, /console/flags), so the console works unchanged behind a
// reverse proxy that mounts it under a prefix of its own.
//
// The files: console.go (routing, headers, templates), console_auth.go
// (operators, sessions, CSRF), console_pages.go (what each page shows),
// console_issued.go (the pages of the hops issued onward),
// console_flags.go (the flagged list, and a flag's actions as shown),
// console_actions.go (the resolve actions the draft allows).

//go:embed console
var consoleFiles embed.FS

// console serves /console/ (mounted with the prefix stripped).
type console struct {
	s     *Server
	st    store.Store // the store the pages read and the actions write: s.store
	log   *slog.Logger
	now   func() time.Time
	pages map[string]*template.Template
	css   []byte
	csp   string
	// signins counts the sign-ins by result (console_auth.go).
	signins *prometheus.CounterVec
	// sums: the operators' token hashes, for the operators map they were
	// computed from (console_auth.go).
	sums atomic.Pointer[operatorSums]

	mu       sync.Mutex
	sessions map[string]*consoleSession // by session id (the cookie's value)
}

// newConsole parses the embedded templates once.
func newConsole(s *Server) *console {
	c := &console{s: s, st: s.store, log: s.log, now: time.Now, sessions: map[string]*consoleSession{}, pages: map[string]*template.Template{}}
	c.signins = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "handoff_gateway_console_signins_total",
		Help: `Sign-ins to the operator console, by result: "ok", "refused" (a token that is no operator's, by the form or a bearer header), "cross_site" (a sign-in posted from another site).`,
	}, []string{"result"})
	if err := s.reg.Register(c.signins); err != nil {
		// A second console of one gateway (a test's) counts with the first.
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			c.signins = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	funcs := template.FuncMap{
		// t escapes what a signer chose as a terminal shows it (bidi
		// overrides, controls, invisible runes as \u escapes), before
		// html/template escapes it for the page: the SVG does the same.
		"t":     safetext.Text,
		"when":  consoleTime,
		"short": shortHop,
		"badge": badgeCount,
	}
	for _, p := range []string{"signin", "hops", "hop", "onward", "issued", "flags", "error"} {
		c.pages[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(consoleFiles, "console/layout.html", "console/actions.html", "console/"+p+".html"))
	}
	css, err := consoleFiles.ReadFile("console/console.css")
	if err != nil {
		panic(err) // embedded: present at build time
	}
	c.css = css
	// The chain picture is inline SVG with a <style> of its own, allowed
	// by its hash: nothing else inline is.
	c.csp = "default-src 'none'; style-src 'self' " + svgStyleHash() + "; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
	return c
}

// svgStyleHash is the CSP source of the chain picture's <style> element
// (picture.Chain.SVG writes the same one for every chain).
func svgStyleHash() string {
	var b bytes.Buffer
	if err := (picture.Chain{}).SVG(&b); err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(b.String(), "<style>")
	style, _, ok2 := strings.Cut(rest, "</style>")
	if !ok || !ok2 {
		return ""
	}
	sum := sha256.Sum256([]byte(style))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", c.csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// No other site learns a console's URL (its hop ids) as a referrer;
	// the console's own forms keep their Origin, which a browser sends
	// as "null" under "no-referrer" (crossSite reads it).
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	// Every page sits at one level (/console/hop): the relative links,
	// forms and stylesheet of a page served deeper (/console/a/b) would
	// lead to /console/a/..., so nothing is served there. Counted on the
	// path as the browser sent it: an escaped "/" is no level.
	if depth := strings.Count(r.URL.EscapedPath(), "/"); depth > 1 {
		if get {
			consoleRedirect(w, strings.Repeat("../", depth-1)) // the console's first page
			return
		}
		http.Error(w, "no such page", http.StatusNotFound)
		return
	}
	if r.URL.Path == "/console.css" && get {
		// The stylesheet is static and holds no data: it is served
		// without a session, so the sign-in form is styled.
		h.Set("Content-Type", "text/css; charset=utf-8")
		w.Write(c.css)
		return
	}
	if r.Method == http.MethodPost {
		// A POST from a page of another site (a forged sign-in, an
		// action), whatever its form holds: the browser says where it
		// comes from. The session's CSRF token is the other layer.
		if why := crossSite(r); why != "" {
			if r.URL.Path == "/signin" {
				c.signins.WithLabelValues("cross_site").Inc()
				c.log.Warn("console: sign-in refused: posted from another site", "why", why, "remote", r.RemoteAddr)
			}
			http.Error(w, "refused: this form was posted from another site ("+why+")", http.StatusForbidden)
			return
		}
	}
	if r.URL.Path == "/signin" && r.Method == http.MethodPost {
		c.signIn(w, r)
		return
	}
	op, ok := c.operator(r)
	if !ok {
		c.signInForm(w, r, http.StatusUnauthorized, "")
		return
	}
	switch {
	case get && r.URL.Path == "/":
		c.hops(w, r, op)
	case get && r.URL.Path == "/hop":
		c.hop(w, r, op)
	case get && r.URL.Path == "/onward":
		c.onward(w, r, op)
	case get && r.URL.Path == "/issued":
		c.issued(w, r, op)
	case get && r.URL.Path == "/flags":
		c.flags(w, r, op)
	case r.Method == http.MethodPost:
		c.post(w, r, op)
	case get:
		c.fail(w, r, op, http.StatusNotFound, errors.New("no such page"))
	default:
		h.Set("Allow", "GET, POST")
		c.fail(w, r, op, http.StatusMethodNotAllowed, errors.New("method not allowed"))
	}
}

// consoleFrame is what every page's layout shows.
type consoleFrame struct {
	Title     string
	Nav       string // "hops", "onward" or "flags": the current section
	Op        *consoleOp
	Identity  string // the gateway's AgentId: the aud of every hop received
	OpenFlags int    // counted up to badgeMax (render)
	Page      any
}

// badgeMax bounds the count of open flags the navigation shows: a badge
// reads no more than this many ("99+").
const badgeMax = 100

// badgeCount is the navigation's count of open flags.
func badgeCount(n int) string {
	if n >= badgeMax {
		return strconv.Itoa(badgeMax-1) + "+"
	}
	return strconv.Itoa(n)
}

// render writes page p with status code. A signed-in operator's page
// counts the open flags for the navigation (store.Store.CountOpenFlags:
// bounded, whatever the number of flags).
func (c *console) render(w http.ResponseWriter, r *http.Request, code int, p string, f consoleFrame) {
	f.Identity = c.s.cfg.Load().Identity.ID
	if f.Op != nil {
		n, err := c.st.CountOpenFlags(r.Context(), badgeMax)
		if err != nil {
			c.log.Warn("console: counting the open flags", "err", oneLine(err))
		}
		f.OpenFlags = n
	}
	var b bytes.Buffer
	if err := c.pages[p].ExecuteTemplate(&b, "layout", f); err != nil {
		c.log.Error("console: rendering a page", "page", p, "err", oneLine(err))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// fail shows err on a page of its own.
func (c *console) fail(w http.ResponseWriter, r *http.Request, op *consoleOp, code int, err error) {
	c.render(w, r, code, "error", consoleFrame{Title: http.StatusText(code), Op: op, Page: struct {
		Code int
		Msg  string
	}{code, err.Error()}})
}

// consoleRedirect answers a POST with a redirect to loc, relative to the page
// posted from (http.Redirect would make it absolute, losing a prefix a
// proxy stripped).
func consoleRedirect(w http.ResponseWriter, loc string) {
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusSeeOther)
}

// consoleTime is a time as the console shows it: UTC to the second; "" for
// none.
func consoleTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// shortHop is a hop id cut for a table cell (the hop page shows it whole).
func shortHop(s string) string {
	if r := []rune(s); len(r) > 14 {
		return string(r[:13]) + "…"
	}
	return s
}
