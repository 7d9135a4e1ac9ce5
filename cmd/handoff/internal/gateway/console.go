package gateway

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/picture"
	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/safetext"
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
// console_actions.go (the resolve actions the draft allows).

//go:embed console
var consoleFiles embed.FS

// console serves /console/ (mounted with the prefix stripped).
type console struct {
	s     *Server
	now   func() time.Time
	pages map[string]*template.Template
	css   []byte
	csp   string

	mu       sync.Mutex
	sessions map[string]*consoleSession // by session id (the cookie's value)
}

// newConsole parses the embedded templates once.
func newConsole(s *Server) *console {
	c := &console{s: s, now: time.Now, sessions: map[string]*consoleSession{}, pages: map[string]*template.Template{}}
	funcs := template.FuncMap{
		// t escapes what a signer chose as a terminal shows it (bidi
		// overrides, controls, invisible runes as \u escapes), before
		// html/template escapes it for the page: the SVG does the same.
		"t":     safetext.Text,
		"when":  consoleTime,
		"short": shortHop,
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
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if r.URL.Path == "/console.css" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		h.Set("Content-Type", "text/css; charset=utf-8")
		w.Write(c.css)
		return
	}
	if r.URL.Path == "/signin" && r.Method == http.MethodPost {
		c.signIn(w, r)
		return
	}
	op, ok := c.operator(r)
	if !ok {
		c.signInForm(w, http.StatusUnauthorized, "")
		return
	}
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
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
		c.fail(w, op, http.StatusNotFound, errors.New("no such page"))
	default:
		h.Set("Allow", "GET, POST")
		c.fail(w, op, http.StatusMethodNotAllowed, errors.New("method not allowed"))
	}
}

// consoleFrame is what every page's layout shows.
type consoleFrame struct {
	Title     string
	Nav       string // "hops", "onward" or "flags": the current section
	Op        *consoleOp
	Identity  string // the gateway's AgentId: the aud of every hop received
	OpenFlags int
	Page      any
}

// render writes page p with status code.
func (c *console) render(w http.ResponseWriter, code int, p string, f consoleFrame) {
	f.Identity = c.s.cfg.Load().Identity.ID
	var b bytes.Buffer
	if err := c.pages[p].ExecuteTemplate(&b, "layout", f); err != nil {
		c.s.log.Error("console: rendering a page", "page", p, "err", oneLine(err))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// fail shows err on a page of its own.
func (c *console) fail(w http.ResponseWriter, op *consoleOp, code int, err error) {
	c.render(w, code, "error", consoleFrame{Title: http.StatusText(code), Op: op, Page: struct {
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
