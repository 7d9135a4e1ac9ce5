package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The operator console's tests drive a real gateway (a plain A2A agent
// behind it, a SQLite store) with signed offers, and read its admin port.

const (
	consolePlanner = "https://planner.example"
	consoleUser    = "https://user.example" // hands work to the planner: the chain's first offer
	// consoleHostile is a delegator whose AgentId is a page's worst
	// enemy: markup, and a bidi override.
	consoleHostile = "https://evil.example/<script>alert(1)</script>\u202egnp.exe"
	aliceToken     = "alice-operator-token-0123456789"
	bobToken       = "bob-operator-token-0123456789ab"
)

// consoleRig is a gateway with an operator console, and the signers of
// its delegators.
type consoleRig struct {
	gw      *Server
	front   string // the routes' URL
	admin   string // the admin port's URL
	adminCA *http.Client
	signers map[string]*handoff.Signer
	keys    *trust.Config
}

// consoleConfig says how newConsoleRig builds the gateway.
type consoleConfig struct {
	off bool // no operator.tokens_file: the console is off
	tls bool // the admin port over TLS
}

func newConsoleRig(t *testing.T, cc consoleConfig) *consoleRig {
	t.Helper()
	ctx := context.Background()
	ag := &plainAgent{started: make(chan struct{}, 4), saw: make(chan map[string]any, 64), traces: make(chan string, 64)}
	card := &a2a.AgentCard{Name: "coder", Description: "runs tests", Version: "1", ProtocolVersion: "0.3.0",
		Capabilities: a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "test", Name: "test", Description: "runs the tests", Tags: []string{"test"}}}}
	mux := http.NewServeMux()
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(ag)))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)

	// Every key is in the trust configuration before the gateway reads it.
	r := &consoleRig{keys: trust.New(), signers: map[string]*handoff.Signer{}}
	for _, id := range []string{consolePlanner, consoleUser, consoleHostile} {
		r.signers[id] = newSigner(t, r.keys, id)
	}
	coder := newSigner(t, r.keys, "https://coder.example")
	r.signers["https://coder.example"] = coder // the gateway's own: for the hops it issues (issue)
	operator := "operator: {tokens_file: operators.json}\n"
	if cc.off {
		operator = ""
	}
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
admin: 127.0.0.1:0
identity: {id: "https://coder.example", key_env: UNUSED}
trust_file: trust.json
store: sqlite:%s
routes:
  - {name: coder, protocol: a2a, path: /coder/, upstream: %q}
%s`, backdatedSQLite(t), up.URL+"/", operator)
	c, err := Parse([]byte(doc), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	res := &Resources{Signer: coder, Keys: r.keys, Tokens: map[string]string{plannerToken: consolePlanner},
		Operators: map[string]string{aliceToken: "Alice", bobToken: "Bob"}}
	if cc.off {
		res.Operators = map[string]string{}
	}
	r.gw, err = New(ctx, c, res, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(r.gw.Handler())
	admin := httptest.NewUnstartedServer(r.gw.AdminHandler())
	if cc.tls {
		admin.StartTLS()
		r.adminCA = admin.Client()
	} else {
		admin.Start()
		r.adminCA = &http.Client{}
	}
	t.Cleanup(func() { admin.Close(); front.Close(); r.gw.Close() })
	r.front, r.admin = front.URL+"/coder/", admin.URL
	return r
}

// offer is iss's signed offer to aud for hop (new when ""), passing on
// before when not nil (prev its offer's digest, the chain its chain and
// offer). extra makes two offers for one hop differ.
func (r *consoleRig) offer(t *testing.T, iss, aud, hop, dialog string, before *handoff.Handoff, extra map[string]any) *handoff.Handoff {
	t.Helper()
	if hop == "" {
		hop = handoff.NewHop()
	}
	now := time.Now().Unix()
	o := &handoff.Offer{Hop: hop, Dialog: dialog, Iss: iss, Aud: aud, Iat: now, Exp: now + 120, Extra: extra}
	if before != nil {
		d := before.Offer.Digest()
		o.Prev = &d
	}
	el, err := r.signers[iss].SignOffer(o, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		return before.PassOn(el)
	}
	return &handoff.Handoff{Offer: el}
}

// send sends h to the gateway in a message/send whose text tells the
// plain agent what to do ("complete", "fail"), and returns its hop.
func (r *consoleRig) send(t *testing.T, h *handoff.Handoff, dialog, text string) string {
	t.Helper()
	m := msg(text)
	m.ContextID = dialog
	if err := a2ahandoff.AttachHandoff(m, h, handoff.JSON); err != nil {
		t.Fatal(err)
	}
	ac, err := a2aclient.NewFromEndpoints(context.Background(), []a2a.AgentInterface{{URL: r.front, Transport: a2a.TransportProtocolJSONRPC}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.SendMessage(context.Background(), &a2a.MessageSendParams{Message: m}); err != nil {
		t.Fatal(err)
	}
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil {
		t.Fatal(err)
	}
	return o.Hop
}

// issue records a hop this gateway issued onward, as its egress records
// one (package delegator: the offer signed as the gateway, tracked in
// the shared store), issued to aud at created and then seen in view,
// resolved or not; it returns the hop.
func (r *consoleRig) issue(t *testing.T, aud string, created time.Time, view store.View, resolved bool) string {
	t.Helper()
	ctx := context.Background()
	h := r.offer(t, "https://coder.example", aud, "", "ctx-out", nil, nil)
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil {
		t.Fatal(err)
	}
	tr := trackerOf(r.gw.store)
	is := &store.Issued{Hop: o.Hop, Aud: aud, Work: "work-" + o.Hop, Offer: h.Offer.Octets, OfferForm: h.Offer.Form, Digest: h.Offer.Digest(),
		Exp: time.Unix(o.Exp, 0), View: store.Offered, Created: created}
	if err := tr.Issue(ctx, is, false); err != nil {
		t.Fatal(err)
	}
	if view != store.Offered {
		if err := tr.SetView(ctx, o.Hop, store.Offered, view, resolved, nil, 0); err != nil {
			t.Fatal(err)
		}
	} else if resolved {
		if err := tr.ResolveHop(ctx, o.Hop); err != nil {
			t.Fatal(err)
		}
	}
	return o.Hop
}

// consoleIssued are the hops seeded as issued onward, oldest first.
type consoleIssued struct {
	done, running, failed string // to the tester: completed, accepted (unresolved), failed
	waiting, canceled     string // to the reviewer: offered (unresolved), canceled
	hostile               string // to consoleHostile, completed
	at                    time.Time
}

const (
	consoleTester   = "https://tester.example"
	consoleReviewer = "https://reviewer.example"
)

// seedIssued records the hops this gateway issued, a minute apart or
// less, the newest 5 s ago.
func (r *consoleRig) seedIssued(t *testing.T) consoleIssued {
	t.Helper()
	now := time.Now()
	return consoleIssued{
		done:     r.issue(t, consoleTester, now.Add(-3*time.Minute), store.ViewComplete, true),
		running:  r.issue(t, consoleTester, now.Add(-2*time.Minute), store.ViewAccepted, false),
		failed:   r.issue(t, consoleTester, now.Add(-time.Minute), store.ViewFailed, true),
		waiting:  r.issue(t, consoleReviewer, now.Add(-30*time.Second), store.Offered, false),
		canceled: r.issue(t, consoleReviewer, now.Add(-10*time.Second), store.ViewCanceled, true),
		hostile:  r.issue(t, consoleHostile, now.Add(-5*time.Second), store.ViewComplete, true),
		at:       now,
	}
}

// newest is every hop seeded as issued, newest first.
func (is consoleIssued) newest() []string {
	return []string{is.hostile, is.canceled, is.waiting, is.failed, is.running, is.done}
}

// listedIssued is the issued hops a listing page links to, in order.
func listedIssued(body string) []string {
	var hops []string
	for _, m := range regexp.MustCompile(`href="issued\?([^"]+)"`).FindAllStringSubmatch(body, -1) {
		q, _ := url.ParseQuery(strings.ReplaceAll(m[1], "&amp;", "&"))
		hops = append(hops, q.Get("hop"))
	}
	return hops
}

// consoleHops are the hops seeded for the console's tests.
type consoleHops struct {
	done    []string // completed, the planner's
	unknown string   // the planner's; the upstream failed: its outcome is unknown, flagged
	equiv   string   // the planner's, with a chain from the user; completed, then a second offer: flagged equivocation
	hostile string   // completed, of consoleHostile, with a hostile dialog
}

const hostileDialog = `ctx-<img src=x onerror=alert(2)>`

// seed drives the gateway to record each kind of hop.
func (r *consoleRig) seed(t *testing.T) consoleHops {
	t.Helper()
	var hs consoleHops
	for i := range 3 {
		d := fmt.Sprintf("ctx-done-%d", i)
		hs.done = append(hs.done, r.send(t, r.offer(t, consolePlanner, "https://coder.example", "", d, nil, nil), d, "complete"))
	}
	hs.unknown = r.send(t, r.offer(t, consolePlanner, "https://coder.example", "", "ctx-unknown", nil, nil), "ctx-unknown", "fail")
	root := r.offer(t, consoleUser, consolePlanner, "", "ctx-user", nil, nil)
	first := r.offer(t, consolePlanner, "https://coder.example", "", "ctx-equiv", root, map[string]any{"work": "one"})
	hs.equiv = r.send(t, first, "ctx-equiv", "complete")
	second := r.offer(t, consolePlanner, "https://coder.example", hs.equiv, "ctx-equiv", root, map[string]any{"work": "two"})
	r.send(t, second, "ctx-equiv", "complete")
	hs.hostile = r.send(t, r.offer(t, consoleHostile, "https://coder.example", "", hostileDialog, nil, nil), hostileDialog, "complete")
	ok := waitFor(t, 5*time.Second, func() bool {
		fs, _ := r.gw.store.Flags(context.Background(), false)
		return slices.ContainsFunc(fs, func(f store.Flag) bool { return f.Hop == hs.unknown && f.Kind == store.FlagUnknownOutcome }) &&
			slices.ContainsFunc(fs, func(f store.Flag) bool { return f.Hop == hs.equiv && f.Kind == store.FlagEquivocation })
	})
	if !ok {
		fs, _ := r.gw.store.Flags(context.Background(), true)
		t.Fatalf("the seeded hops' flags did not appear: %+v", fs)
	}
	return hs
}

// flag is the hop's open flag of kind.
func (r *consoleRig) flag(t *testing.T, hop, kind string) store.Flag {
	t.Helper()
	fs, err := r.gw.store.Flags(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.Hop == hop && f.Kind == kind {
			return f
		}
	}
	t.Fatalf("no %s flag for hop %s", kind, hop)
	return store.Flag{}
}

// page is one answer of the console.
type page struct {
	code int
	hdr  http.Header
	body string
}

// do sends a request to the console with the client c (nil: a plain
// one); auth is an Authorization header ("" for none).
func do(t *testing.T, c *http.Client, method, u, auth string, form url.Values) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if c == nil {
		c = &http.Client{}
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{res.StatusCode, res.Header, string(b)}
}

// signedIn is a browser-like client signed in as the operator of token:
// its cookie jar holds the session.
func (r *consoleRig) signedIn(t *testing.T, base, token string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: r.adminCA.Transport}
	p := do(t, c, "POST", base+"/console/signin", "", url.Values{"token": {token}})
	if p.code != http.StatusOK || !strings.Contains(p.body, "Hops received") {
		t.Fatalf("sign in: %d %s", p.code, p.body)
	}
	return c
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the form token on a page.
func csrf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the page")
	}
	return m[1]
}

// TestConsoleOffWithoutOperators: with no operator.tokens_file there is
// no console: 404, and the admin port is as it was.
func TestConsoleOffWithoutOperators(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{off: true})
	for _, path := range []string{"/console/", "/console", "/console/flags", "/console/console.css"} {
		if p := do(t, nil, "GET", r.admin+path, "Bearer "+aliceToken, nil); p.code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, p.code)
		}
	}
	if p := do(t, nil, "GET", r.admin+"/healthz", "", nil); p.code != http.StatusOK {
		t.Errorf("/healthz: %d", p.code)
	}
}

// TestConsoleRefusesWithoutOperatorToken: a request with no operator's
// token, or a wrong one (a header, a form, a cookie that is no session),
// gets 401 and the sign-in form only: no hop, no flag, no AgentId of a
// delegator.
func TestConsoleRefusesWithoutOperatorToken(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	is := r.seedIssued(t)
	secrets := []string{hs.done[0], hs.unknown, hs.equiv, consolePlanner, "equivocation", "unknown-outcome", is.running, consoleTester}
	cases := []struct {
		name   string
		method string
		path   string
		auth   string
		form   url.Values
		cookie string
	}{
		{name: "no token", method: "GET", path: "/console/"},
		{name: "no token, hop page", method: "GET", path: "/console/" + string(hopHref(consolePlanner, hs.equiv))},
		{name: "no token, flags", method: "GET", path: "/console/flags?all=1"},
		{name: "no token, issued hops", method: "GET", path: "/console/onward?aud=" + url.QueryEscape(consoleTester)},
		{name: "no token, an issued hop", method: "GET", path: "/console/" + string(issuedHref(is.running))},
		{name: "wrong bearer", method: "GET", path: "/console/", auth: "Bearer " + aliceToken + "x"},
		{name: "a caller's bearer token", method: "GET", path: "/console/", auth: "Bearer " + plannerToken},
		{name: "empty bearer", method: "GET", path: "/console/", auth: "Bearer "},
		{name: "basic auth", method: "GET", path: "/console/", auth: "Basic " + aliceToken},
		{name: "token as a cookie", method: "GET", path: "/console/", cookie: aliceToken},
		{name: "forged session", method: "GET", path: "/console/", cookie: randomToken()},
		{name: "wrong token in the form", method: "POST", path: "/console/signin", form: url.Values{"token": {bobToken[:len(bobToken)-1]}}},
		{name: "empty form", method: "POST", path: "/console/signin", form: url.Values{}},
		{name: "an action with no token", method: "POST", path: "/console/resolve", form: url.Values{"id": {"1"}, "note": {"x"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader
			if c.form != nil {
				body = strings.NewReader(c.form.Encode())
			}
			req, _ := http.NewRequest(c.method, r.admin+c.path, body)
			if c.form != nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			if c.cookie != "" {
				req.AddCookie(&http.Cookie{Name: consoleCookie, Value: c.cookie})
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("status %d, want 401", res.StatusCode)
			}
			if !strings.Contains(string(b), `action="signin"`) {
				t.Errorf("no sign-in form: %s", b)
			}
			for _, s := range secrets {
				if strings.Contains(string(b), s) {
					t.Errorf("the 401 page shows %q", s)
				}
			}
			if res.Header.Get("Set-Cookie") != "" {
				t.Errorf("a session was opened: %s", res.Header.Get("Set-Cookie"))
			}
		})
	}
	if fs, _ := r.gw.store.Flags(context.Background(), false); len(fs) != 2 {
		t.Errorf("open flags after the refused requests: %d, want 2", len(fs))
	}
}

// TestConsoleSession: signing in sets an HttpOnly, SameSite=Strict
// cookie holding a random session id (never the token), Secure when the
// admin port is TLS; the session lets pages be read; signing out, or the
// token leaving operator.tokens_file, ends it.
func TestConsoleSession(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "tls"}[tlsOn], func(t *testing.T) {
			r := newConsoleRig(t, consoleConfig{tls: tlsOn})
			hs := r.seed(t)
			c := r.adminCA
			req, _ := http.NewRequest("POST", r.admin+"/console/signin", strings.NewReader(url.Values{"token": {aliceToken}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			noFollow := &http.Client{Transport: c.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			res, err := noFollow.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "./" {
				t.Fatalf("sign in: %d to %q, want 303 to ./", res.StatusCode, res.Header.Get("Location"))
			}
			cks := res.Cookies()
			if len(cks) != 1 {
				t.Fatalf("cookies: %v", cks)
			}
			ck := cks[0]
			if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure != tlsOn || ck.Path != "" || ck.Value == aliceToken || len(ck.Value) < 40 {
				t.Errorf("cookie %s: want HttpOnly, SameSite=Strict, Secure %v, no Path, a random id", res.Header.Get("Set-Cookie"), tlsOn)
			}
			get := func(cookie string) page {
				req, _ := http.NewRequest("GET", r.admin+"/console/", nil)
				req.AddCookie(&http.Cookie{Name: consoleCookie, Value: cookie})
				res, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return page{res.StatusCode, res.Header, string(b)}
			}
			p := get(ck.Value)
			if p.code != http.StatusOK || !strings.Contains(p.body, hs.done[0][:10]) || !strings.Contains(p.body, "Alice") {
				t.Fatalf("with the session: %d", p.code)
			}
			// The bearer token works without a session, for scripts.
			if p := do(t, c, "GET", r.admin+"/console/", "Bearer "+bobToken, nil); p.code != http.StatusOK || !strings.Contains(p.body, "Bob") {
				t.Errorf("bearer: %d", p.code)
			}
			// Signing out ends the session (with its CSRF token).
			form := url.Values{"csrf": {csrf(t, p.body)}}
			req, _ = http.NewRequest("POST", r.admin+"/console/signout", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.AddCookie(ck)
			res, err = noFollow.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusSeeOther {
				t.Errorf("sign out: %d", res.StatusCode)
			}
			if p := get(ck.Value); p.code != http.StatusUnauthorized {
				t.Errorf("after signing out: %d, want 401", p.code)
			}
			// A token taken out of the file (a reload) ends its sessions.
			bc := r.signedIn(t, r.admin, bobToken)
			r.gw.operators.Store(&map[string]string{aliceToken: "Alice"})
			if p := do(t, bc, "GET", r.admin+"/console/", "", nil); p.code != http.StatusUnauthorized {
				t.Errorf("a session of a token no longer in the file: %d, want 401", p.code)
			}
		})
	}
}

// TestConsoleHeaders: every page says what it may load (nothing from
// elsewhere, no script) and may not be framed or cached.
func TestConsoleHeaders(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	for _, path := range []string{"/console/", "/console/flags", "/console/" + string(hopHref(consolePlanner, hs.equiv)), "/console/nowhere"} {
		for _, auth := range []string{"", "Bearer " + aliceToken} {
			p := do(t, nil, "GET", r.admin+path, auth, nil)
			csp := p.hdr.Get("Content-Security-Policy")
			for _, want := range []string{"default-src 'none'", "style-src 'self' 'sha256-", "form-action 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
				if !strings.Contains(csp, want) {
					t.Errorf("%s: CSP %q lacks %q", path, csp, want)
				}
			}
			if strings.Contains(csp, "script-src") || strings.Contains(csp, "unsafe-inline") {
				t.Errorf("%s: CSP %q allows script or inline style", path, csp)
			}
			if p.hdr.Get("X-Content-Type-Options") != "nosniff" || p.hdr.Get("Cache-Control") != "no-store" {
				t.Errorf("%s: headers %v", path, p.hdr)
			}
			if strings.Contains(p.body, "<script") || regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).MatchString(p.body) {
				t.Errorf("%s: the page loads or runs something: %s", path, p.body)
			}
		}
	}
	if p := do(t, nil, "GET", r.admin+"/console/console.css", "", nil); p.code != http.StatusOK || !strings.HasPrefix(p.hdr.Get("Content-Type"), "text/css") {
		t.Errorf("the stylesheet: %d %s", p.code, p.hdr.Get("Content-Type"))
	}
}

// listed is the hop ids a listing page links to, in order.
func listed(body string) []string {
	var hops []string
	for _, m := range regexp.MustCompile(`href="hop\?([^"]+)"`).FindAllStringSubmatch(body, -1) {
		q, _ := url.ParseQuery(strings.ReplaceAll(m[1], "&amp;", "&"))
		hops = append(hops, q.Get("hop"))
	}
	return hops
}

// TestConsoleFilters: the listing selects by state, delegator, open flag
// and time received, as store.HopQuery does.
func TestConsoleFilters(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	all := append(append([]string{}, hs.done...), hs.unknown, hs.equiv, hs.hostile)
	future := time.Now().Add(time.Hour).UTC().Format(consoleTimeInput)
	past := time.Now().Add(-time.Hour).UTC().Format(consoleTimeInput)
	cases := []struct {
		name  string
		query url.Values
		want  []string
		code  int
	}{
		{"everything", nil, all, 200},
		{"state completed", url.Values{"state": {"completed"}}, append(append([]string{}, hs.done...), hs.equiv, hs.hostile), 200},
		{"state accepted: the unknown outcome", url.Values{"state": {"accepted"}}, []string{hs.unknown}, 200},
		{"state rejected", url.Values{"state": {"rejected"}}, nil, 200},
		{"delegator", url.Values{"iss": {consoleHostile}}, []string{hs.hostile}, 200},
		{"flagged", url.Values{"flagged": {"1"}}, []string{hs.unknown, hs.equiv}, 200},
		{"flagged and completed", url.Values{"flagged": {"1"}, "state": {"completed"}}, []string{hs.equiv}, 200},
		{"received since an hour ago", url.Values{"from": {past}}, all, 200},
		{"received in the next hour", url.Values{"from": {future}}, nil, 200},
		{"received before an hour ago", url.Values{"to": {past}}, nil, 200},
		{"aud is the gateway's", url.Values{"aud": {"https://coder.example"}}, all, 200},
		{"aud of another agent", url.Values{"aud": {"https://tester.example"}}, nil, 200},
		{"not a state", url.Values{"state": {"done"}}, nil, 400},
		{"from after to", url.Values{"from": {future}, "to": {past}}, nil, 400},
		{"not a time", url.Values{"from": {"yesterday"}}, nil, 400},
		{"not a cursor", url.Values{"after": {"xyz"}}, nil, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := do(t, nil, "GET", r.admin+"/console/?"+c.query.Encode(), "Bearer "+aliceToken, nil)
			if p.code != c.code {
				t.Fatalf("status %d, want %d: %s", p.code, c.code, p.body)
			}
			got := listed(p.body)
			if !sameSet(got, c.want) {
				t.Errorf("listed %v, want %v", got, c.want)
			}
		})
	}
}

// TestConsoleIssuedFilters: the listing of the hops issued onward, newest
// first, selects by view, delegate, resolution and time issued, as
// store.IssuedQuery does; each row links to the hop's page; a delegate
// asked for on the received listing points to it.
func TestConsoleIssuedFilters(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	is := r.seedIssued(t)
	mark := is.at.Add(-90 * time.Second).UTC().Format(time.RFC3339Nano)
	cases := []struct {
		name  string
		query url.Values
		want  []string // newest first
		code  int
	}{
		{"everything", nil, is.newest(), 200},
		{"view completed", url.Values{"view": {"completed"}}, []string{is.hostile, is.done}, 200},
		{"view accepted", url.Values{"view": {"accepted"}}, []string{is.running}, 200},
		{"view offered", url.Values{"view": {"offered"}}, []string{is.waiting}, 200},
		{"to the tester", url.Values{"aud": {consoleTester}}, []string{is.failed, is.running, is.done}, 200},
		{"to the tester, unresolved", url.Values{"aud": {consoleTester}, "resolved": {"no"}}, []string{is.running}, 200},
		{"to a hostile delegate", url.Values{"aud": {consoleHostile}}, []string{is.hostile}, 200},
		{"resolved", url.Values{"resolved": {"yes"}}, []string{is.hostile, is.canceled, is.failed, is.done}, 200},
		{"unresolved", url.Values{"resolved": {"no"}}, []string{is.waiting, is.running}, 200},
		{"issued since 90 s ago", url.Values{"from": {mark}}, []string{is.hostile, is.canceled, is.waiting, is.failed}, 200},
		{"issued before 90 s ago", url.Values{"to": {mark}}, []string{is.running, is.done}, 200},
		{"issued in the next hour", url.Values{"from": {is.at.Add(time.Hour).UTC().Format(consoleTimeInput)}}, nil, 200},
		{"to nobody", url.Values{"aud": {"https://nobody.example"}}, nil, 200},
		{"not a view", url.Values{"view": {"expired"}}, nil, 400},
		{"not a resolution", url.Values{"resolved": {"maybe"}}, nil, 400},
		{"from after to", url.Values{"from": {is.at.Format(time.RFC3339)}, "to": {mark}}, nil, 400},
		{"not a time", url.Values{"from": {"yesterday"}}, nil, 400},
		{"not a cursor", url.Values{"after": {"xyz"}}, nil, 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := do(t, nil, "GET", r.admin+"/console/onward?"+c.query.Encode(), "Bearer "+aliceToken, nil)
			if p.code != c.code {
				t.Fatalf("status %d, want %d: %s", p.code, c.code, p.body)
			}
			if got := listedIssued(p.body); !slices.Equal(got, c.want) {
				t.Errorf("listed %v, want %v", got, c.want)
			}
		})
	}
	p := do(t, nil, "GET", r.admin+"/console/onward?aud="+url.QueryEscape(consoleHostile), "Bearer "+aliceToken, nil)
	if strings.Contains(p.body, "<script") || !strings.Contains(p.body, `&lt;script&gt;alert(1)&lt;/script&gt;\u202egnp.exe`) {
		t.Error("the hostile aud is not shown escaped")
	}
	// The received listing's aud filter names another agent: no hop
	// received has it, and the page points to the hops issued to it.
	p = do(t, nil, "GET", r.admin+"/console/?aud="+url.QueryEscape(consoleTester), "Bearer "+aliceToken, nil)
	if want := `href="onward?aud=` + url.QueryEscape(consoleTester) + `"`; !strings.Contains(p.body, want) || !strings.Contains(p.body, `<a href="onward">Issued</a>`) {
		t.Errorf("the received listing filtered by another aud does not point to its issued hops (%s) or lacks the Issued link", want)
	}
	// A row's page is the issued hop's.
	p = do(t, nil, "GET", r.admin+"/console/"+string(issuedHref(is.running)), "Bearer "+aliceToken, nil)
	if p.code != 200 || !strings.Contains(p.body, consoleTester) || !strings.Contains(p.body, `<a href="onward" aria-current="page">Issued</a>`) {
		t.Errorf("the issued hop's page: %d, or without its delegate and its section", p.code)
	}
}

// TestConsoleIssuedPages: the listing of the hops issued onward comes a
// page at a time by the store's cursor, newest first; the pages' links
// keep the filters and together list every hop once, in order.
func TestConsoleIssuedPages(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	is := r.seedIssued(t)
	for _, c := range []struct {
		query url.Values
		want  []string
	}{
		{url.Values{"n": {"2"}}, is.newest()},
		{url.Values{"n": {"1"}, "resolved": {"yes"}}, []string{is.hostile, is.canceled, is.failed, is.done}},
		{url.Values{"n": {"1"}, "aud": {consoleTester}, "view": {"completed"}}, []string{is.done}},
	} {
		t.Run(c.query.Encode(), func(t *testing.T) {
			var got []string
			next := r.admin + "/console/onward?" + c.query.Encode()
			for pages := 0; next != ""; pages++ {
				if pages > 10 {
					t.Fatal("the pages never end")
				}
				p := do(t, nil, "GET", next, "Bearer "+aliceToken, nil)
				if p.code != 200 {
					t.Fatalf("%s: %d", next, p.code)
				}
				ids := listedIssued(p.body)
				if n, _ := strconv.Atoi(c.query.Get("n")); len(ids) > n {
					t.Errorf("a page of %d hops, asked for %d", len(ids), n)
				}
				if pages > 0 && !strings.Contains(p.body, `">← Newest</a>`) {
					t.Errorf("page %d has no link to the newest", pages+1)
				}
				got = append(got, ids...)
				next = ""
				if m := regexp.MustCompile(`href="(onward\?[^"]*after=[^"]+)">Older`).FindStringSubmatch(p.body); m != nil {
					u, _ := url.Parse(r.admin + "/console/")
					ref, _ := url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
					nu := u.ResolveReference(ref)
					for k := range c.query {
						if nu.Query().Get(k) != c.query.Get(k) {
							t.Errorf("the next page's link drops the filter %s: %s", k, nu)
						}
					}
					next = nu.String()
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("listed %v, want %v, each once, newest first", got, c.want)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestConsolePages: the listing comes a page at a time by the store's
// cursor, newest first; the pages' links keep the filters, and together
// list every hop once.
func TestConsolePages(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	for _, c := range []struct {
		query url.Values
		want  int
	}{
		{url.Values{"n": {"2"}}, 3 + 1 + 1 + 1},
		{url.Values{"n": {"1"}, "state": {"completed"}}, 3 + 1 + 1},
	} {
		t.Run(c.query.Encode(), func(t *testing.T) {
			var got []string
			next := r.admin + "/console/?" + c.query.Encode()
			for pages := 0; next != ""; pages++ {
				if pages > 10 {
					t.Fatal("the pages never end")
				}
				p := do(t, nil, "GET", next, "Bearer "+aliceToken, nil)
				if p.code != 200 {
					t.Fatalf("%s: %d", next, p.code)
				}
				ids := listed(p.body)
				if n, _ := strconv.Atoi(c.query.Get("n")); len(ids) > n {
					t.Errorf("a page of %d hops, asked for %d", len(ids), n)
				}
				got = append(got, ids...)
				next = ""
				if m := regexp.MustCompile(`href="(\?[^"]*after=[^"]+)">Older`).FindStringSubmatch(p.body); m != nil {
					u, _ := url.Parse(r.admin + "/console/")
					ref, _ := url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
					nu := u.ResolveReference(ref)
					for k := range c.query {
						if nu.Query().Get(k) != c.query.Get(k) {
							t.Errorf("the next page's link drops the filter %s: %s", k, nu)
						}
					}
					next = nu.String()
				}
			}
			if len(got) != c.want || len(slices.Compact(slices.Sorted(slices.Values(got)))) != c.want {
				t.Errorf("listed %d hops (%v), want %d, each once", len(got), got, c.want)
			}
			// Newest first: the hostile hop was received last.
			if c.query.Get("state") == "completed" && got[0] != hs.hostile {
				t.Errorf("first listed %s, want the newest %s", got[0], hs.hostile)
			}
		})
	}
}

// attrs are the URLs a page's links, forms and resources name.
var attrURL = regexp.MustCompile(`(?:href|action|src)="([^"]*)"`)

// TestConsoleBehindPrefix: behind a reverse proxy that serves the admin
// port under /ops/ (and strips it), signing in, every link, every form
// and every redirect stay under /ops/console/.
func TestConsoleBehindPrefix(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	target, _ := url.Parse(r.admin)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, "/ops")
		pr.Out.URL.RawPath = ""
	}}
	mux := http.NewServeMux()
	mux.Handle("/ops/", proxy)
	front := httptest.NewServer(mux)
	t.Cleanup(front.Close)
	base := front.URL + "/ops"

	jar, _ := cookiejar.New(nil)
	var visited []string
	c := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		visited = append(visited, req.URL.Path)
		return nil
	}}
	// The console's address without its slash goes to it.
	if p := do(t, c, "GET", base+"/console", "", nil); p.code != http.StatusUnauthorized || !slices.Equal(visited, []string{"/ops/console/"}) {
		t.Fatalf("/ops/console: %d via %v", p.code, visited)
	}
	visited = nil
	p := do(t, c, "POST", base+"/console/signin", "", url.Values{"token": {aliceToken}})
	if p.code != 200 || !slices.Equal(visited, []string{"/ops/console/"}) {
		t.Fatalf("sign in behind the prefix: %d via %v", p.code, visited)
	}
	pages := []string{base + "/console/", base + "/console/flags?all=1", base + "/console/" + string(hopHref(consolePlanner, hs.equiv))}
	seen := map[string]bool{}
	for _, pu := range pages {
		p := do(t, c, "GET", pu, "", nil)
		if p.code != 200 {
			t.Fatalf("%s: %d", pu, p.code)
		}
		u, _ := url.Parse(pu)
		for _, m := range attrURL.FindAllStringSubmatch(p.body, -1) {
			raw := strings.ReplaceAll(m[1], "&amp;", "&")
			if strings.HasPrefix(raw, "/") || strings.Contains(raw, "://") {
				t.Errorf("%s: an absolute URL %q", pu, raw)
				continue
			}
			ref, err := url.Parse(raw)
			if err != nil {
				t.Errorf("%s: %q: %v", pu, raw, err)
				continue
			}
			abs := u.ResolveReference(ref)
			if !strings.HasPrefix(abs.Path, "/ops/console/") {
				t.Errorf("%s: %q leads to %s, outside the prefix", pu, raw, abs.Path)
			}
			if strings.HasPrefix(raw, "#") || seen[abs.String()] || strings.Contains(p.body, `action="`+m[1]+`"`) {
				continue
			}
			seen[abs.String()] = true
			if q := do(t, c, "GET", abs.String(), "", nil); q.code != 200 {
				t.Errorf("%s: the link %q answers %d", pu, raw, q.code)
			}
		}
	}
	// An action's redirect stays under the prefix too.
	f := r.flag(t, hs.equiv, store.FlagEquivocation)
	visited = nil
	hp := do(t, c, "GET", pages[2], "", nil)
	p = do(t, c, "POST", base+"/console/resolve", "", url.Values{"csrf": {csrf(t, hp.body)}, "id": {fmt.Sprint(f.ID)}, "note": {"seen behind the proxy"}, "back": {"hop"}})
	if p.code != 200 || len(visited) != 1 || visited[0] != "/ops/console/hop" {
		t.Errorf("resolve behind the prefix: %d via %v", p.code, visited)
	}
}

// TestConsoleCSRF: a POST of a session needs the session's form token;
// one from elsewhere changes nothing.
func TestConsoleCSRF(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	alice := r.signedIn(t, r.admin, aliceToken)
	bob := r.signedIn(t, r.admin, bobToken)
	bobs := csrf(t, do(t, bob, "GET", r.admin+"/console/flags", "", nil).body)
	f := r.flag(t, hs.equiv, store.FlagEquivocation)
	for _, c := range []struct {
		name string
		form url.Values
	}{
		{"no CSRF token", url.Values{}},
		{"an empty one", url.Values{"csrf": {""}}},
		{"another session's", url.Values{"csrf": {bobs}}},
		{"a made-up one", url.Values{"csrf": {randomToken()}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.form.Set("id", fmt.Sprint(f.ID))
			c.form.Set("note", "forged")
			for _, action := range []string{"resolve", "release", "finish", "signout"} {
				if p := do(t, alice, "POST", r.admin+"/console/"+action, "", c.form); p.code != http.StatusForbidden {
					t.Errorf("%s: %d, want 403", action, p.code)
				}
			}
		})
	}
	if r.flag(t, hs.equiv, store.FlagEquivocation).Resolved.IsZero() == false {
		t.Error("a forged POST resolved the flag")
	}
	if p := do(t, alice, "GET", r.admin+"/console/", "", nil); p.code != 200 {
		t.Errorf("a forged sign-out ended the session: %d", p.code)
	}
}

// TestConsoleResolve: each flag gets the resolve action the draft allows
// for its kind (draft "Knowing the Outcome": an unknown outcome is
// finished as observed, or released; "Forks, Concurrency, and
// Equivocation": an equivocation is resolved with a note), recorded with
// the operator's name and the time.
func TestConsoleResolve(t *testing.T) {
	cases := []struct {
		rule   string
		kind   string
		action string
		form   url.Values
		want   string // the resolution begins so
		check  func(t *testing.T, rec *store.Record)
	}{
		{"equivocation resolved with a note", store.FlagEquivocation, "resolve", url.Values{"note": {"the planner's retry bug; fixed"}},
			"by Alice: the planner's retry bug; fixed", func(t *testing.T, rec *store.Record) {
				if rec.State != store.Completed {
					t.Errorf("the hop went %s", rec.State)
				}
			}},
		{"unknown outcome finished as completed", store.FlagUnknownOutcome, "finish", url.Values{"outcome": {"completed"}, "note": {"the tests ran: see CI run 42"}},
			"by Alice: finished as completed, as observed: the tests ran: see CI run 42", func(t *testing.T, rec *store.Record) {
				st := decodeStatus(rec.Status, rec.StatusForm)
				if rec.State != store.Completed || st.State != "completed" || rec.Decided.IsZero() {
					t.Errorf("the hop is %s, its status %+v", rec.State, st)
				}
			}},
		{"unknown outcome finished as failed with no effect", store.FlagUnknownOutcome, "finish", url.Values{"outcome": {"failed"}, "note": {"nothing ran"}},
			"by Alice: finished as failed, as observed: nothing ran", func(t *testing.T, rec *store.Record) {
				st := decodeStatus(rec.Status, rec.StatusForm)
				if rec.State != store.Failed || st.State != "failed" || len(st.Refs) != 0 {
					t.Errorf("the hop is %s, its status %+v", rec.State, st)
				}
			}},
		{"unknown outcome released", store.FlagUnknownOutcome, "release", url.Values{"note": {"the upstream lost its logs"}},
			"released by the operator, outcome not known: by Alice: the upstream lost its logs", func(t *testing.T, rec *store.Record) {
				if rec.State != store.Accepted || rec.Released.IsZero() {
					t.Errorf("the hop is %s, released %v", rec.State, rec.Released)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			r := newConsoleRig(t, consoleConfig{})
			hs := r.seed(t)
			hop := map[string]string{store.FlagEquivocation: hs.equiv, store.FlagUnknownOutcome: hs.unknown}[c.kind]
			f := r.flag(t, hop, c.kind)
			alice := r.signedIn(t, r.admin, aliceToken)
			flags := do(t, alice, "GET", r.admin+"/console/flags", "", nil)
			if !strings.Contains(flags.body, `action="`+c.action+`"`) {
				t.Fatalf("the flags page offers no %s", c.action)
			}
			before := time.Now()
			c.form.Set("csrf", csrf(t, flags.body))
			c.form.Set("id", fmt.Sprint(f.ID))
			p := do(t, alice, "POST", r.admin+"/console/"+c.action, "", c.form)
			if p.code != 200 || !strings.Contains(p.body, "Flagged") {
				t.Fatalf("%s: %d %s", c.action, p.code, p.body)
			}
			got := r.flag(t, hop, c.kind)
			if got.Resolution != c.want || got.Resolved.Before(before.Add(-time.Second)) || got.Resolved.After(time.Now().Add(time.Second)) {
				t.Errorf("resolution %q at %v, want %q now", got.Resolution, got.Resolved, c.want)
			}
			rec, err := r.gw.store.Get(context.Background(), consolePlanner, hop)
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, rec)
			// Shown, with who and when, in the list of all flags.
			all := do(t, alice, "GET", r.admin+"/console/flags?all=1", "", nil)
			if !strings.Contains(all.body, "by Alice: ") || !strings.Contains(all.body, consoleTime(got.Resolved)) {
				t.Errorf("the list of all flags does not show the resolution")
			}
			// Once resolved, the flag takes no other action.
			c.form.Set("note", "again")
			if p := do(t, alice, "POST", r.admin+"/console/resolve", "", c.form); p.code != http.StatusConflict {
				t.Errorf("resolving a resolved flag: %d, want 409", p.code)
			}
		})
	}
}

// TestConsoleActionsTheDraftRefuses: an equivocation is not "finished"
// or "released" (those settle an unknown outcome), and a resolution
// needs a note.
func TestConsoleActionsTheDraftRefuses(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	f := r.flag(t, hs.equiv, store.FlagEquivocation)
	u := r.flag(t, hs.unknown, store.FlagUnknownOutcome)
	for _, c := range []struct {
		name, action string
		form         url.Values
		code         int
	}{
		{"finish an equivocation", "finish", url.Values{"id": {fmt.Sprint(f.ID)}, "outcome": {"completed"}, "note": {"x"}}, http.StatusConflict},
		{"release an equivocation", "release", url.Values{"id": {fmt.Sprint(f.ID)}, "note": {"x"}}, http.StatusConflict},
		{"no note", "resolve", url.Values{"id": {fmt.Sprint(f.ID)}}, http.StatusBadRequest},
		{"a blank note", "release", url.Values{"id": {fmt.Sprint(u.ID)}, "note": {"  "}}, http.StatusBadRequest},
		{"an outcome that is not one", "finish", url.Values{"id": {fmt.Sprint(u.ID)}, "outcome": {"canceled"}, "note": {"x"}}, http.StatusInternalServerError},
		{"no such flag", "resolve", url.Values{"id": {"99999"}, "note": {"x"}}, http.StatusConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			if p := do(t, nil, "POST", r.admin+"/console/"+c.action, "Bearer "+aliceToken, c.form); p.code != c.code {
				t.Errorf("%d, want %d: %s", p.code, c.code, p.body)
			}
		})
	}
	if fs, _ := r.gw.store.Flags(context.Background(), false); len(fs) != 2 {
		t.Errorf("open flags: %d, want 2 (nothing resolved)", len(fs))
	}
}

// TestConsoleHopPage: a hop's page shows its record, its chain drawn
// (two verified offers, quality full), every status sent in order, and
// its flags.
func TestConsoleHopPage(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	p := do(t, nil, "GET", r.admin+"/console/"+string(hopHref(consolePlanner, hs.equiv)), "Bearer "+aliceToken, nil)
	if p.code != 200 {
		t.Fatalf("%d %s", p.code, p.body)
	}
	for _, want := range []string{
		hs.equiv, consolePlanner, "https://coder.example", "ctx-equiv", // the record
		"<svg", consoleUser, "verified · starts the chain", "verified · prev ok", `class="quality q-full">full<`, // the chain
		`<span class="state s-completed">completed</span>`, // the status sent
		"equivocation", `action="resolve"`, // its flag
		"None: this gateway issued no offer passing this one on.",
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the hop page lacks %q", want)
		}
	}
	if n := strings.Count(p.body, "<svg"); n != 1 {
		t.Errorf("%d pictures", n)
	}
	// Every status sent, oldest first: a completed hop was accepted, then
	// completed; one whose outcome is unknown has only been accepted.
	for hop, want := range map[string][]string{hs.done[0]: {"accepted", "completed"}, hs.equiv: {"accepted", "completed"}, hs.unknown: {"accepted"}} {
		p := do(t, nil, "GET", r.admin+"/console/"+string(hopHref(consolePlanner, hop)), "Bearer "+aliceToken, nil)
		if got := statusesSent(p.body); !slices.Equal(got, want) {
			t.Errorf("hop %s: the statuses sent are listed as %q; want %q", hop, got, want)
		}
	}
	// An unknown hop: 404, and no other hop's data.
	if p := do(t, nil, "GET", r.admin+"/console/hop?iss=x&hop=y", "Bearer "+aliceToken, nil); p.code != 404 || strings.Contains(p.body, hs.equiv) {
		t.Errorf("an unknown hop: %d", p.code)
	}
}

// statusesSent is the states of the statuses a hop page lists as sent,
// in the page's order.
func statusesSent(body string) []string {
	_, list, _ := strings.Cut(body, `<ol class="statuses">`)
	list, _, _ = strings.Cut(list, `</ol>`)
	var states []string
	for _, m := range regexp.MustCompile(`<dt>State</dt><dd><span class="state s-[a-z]+">([a-z]+)</span>`).FindAllStringSubmatch(list, -1) {
		states = append(states, m[1])
	}
	return states
}

// TestConsoleEscapesHostileValues: what a signer chose (its AgentId, the
// dialog) is text on every page: markup is inert, a bidi override shows
// as an escape.
func TestConsoleEscapesHostileValues(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	for _, path := range []string{"/console/", "/console/?iss=" + url.QueryEscape(consoleHostile), "/console/" + string(hopHref(consoleHostile, hs.hostile))} {
		p := do(t, nil, "GET", r.admin+path, "Bearer "+aliceToken, nil)
		if p.code != 200 {
			t.Fatalf("%s: %d", path, p.code)
		}
		// A filter's input keeps the value as given (to search by it
		// again); html/template escaped its markup.
		shown := regexp.MustCompile(`value="[^"]*"`).ReplaceAllString(p.body, "")
		for _, markup := range []string{"<script", "<img"} {
			if strings.Contains(p.body, markup) {
				t.Errorf("%s: the page holds %q raw", path, markup)
			}
		}
		if strings.Contains(shown, "\u202e") {
			t.Errorf("%s: the page shows a bidi override raw", path)
		}
		if !strings.Contains(p.body, `&lt;script&gt;alert(1)&lt;/script&gt;\u202egnp.exe`) {
			t.Errorf("%s: the hostile iss is not shown escaped", path)
		}
	}
	p := do(t, nil, "GET", r.admin+"/console/"+string(hopHref(consoleHostile, hs.hostile)), "Bearer "+aliceToken, nil)
	if !strings.Contains(p.body, `ctx-&lt;img src=x onerror=alert(2)&gt;`) {
		t.Error("the hostile dialog is not shown escaped")
	}
}

// TestConsoleThreeAgents: with A calling B and B calling C through the
// gateways' egress, B's console shows the hop A's offer made, the hop B
// issued onward for it (the delegator's view: its state as C's verified
// status says) and that hop's own page; C's console draws the chain C
// received: A's offer and B's, each verified, quality full.
func TestConsoleThreeAgents(t *testing.T) {
	r := newChainRig(t)
	task := r.wait(t, r.send(t, "ok"))
	if task.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("A's task: %s", task.Status.State)
	}
	console := func(gw *Server) string {
		gw.operators.Store(&map[string]string{aliceToken: "Alice"})
		srv := httptest.NewServer(http.StripPrefix("/console", newConsole(gw)))
		t.Cleanup(srv.Close)
		return srv.URL + "/console/"
	}
	get := func(u string) string {
		t.Helper()
		p := do(t, nil, "GET", u, "Bearer "+aliceToken, nil)
		if p.code != 200 {
			t.Fatalf("%s: %d %s", u, p.code, p.body)
		}
		return p.body
	}
	b := console(r.b)
	list := get(b)
	hops := listed(list)
	if len(hops) != 1 {
		t.Fatalf("B received %d hops, want 1: %v", len(hops), hops)
	}
	page := get(b + string(hopHref("https://planner.example", hops[0])))
	m := regexp.MustCompile(`href="(issued\?hop=[^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("B's hop page lists no hop issued onward:\n%s", page)
	}
	if !strings.Contains(page, "https://tester.example") || !strings.Contains(page, `<span class="state s-completed">completed</span> <span class="badge ok">resolved</span>`) {
		t.Errorf("B's hop page does not show the hop to C completed and resolved")
	}
	onward := get(b + "onward")
	if got := listedIssued(onward); len(got) != 1 || "issued?hop="+url.QueryEscape(got[0]) != strings.ReplaceAll(m[1], "&amp;", "&") ||
		!strings.Contains(onward, "https://tester.example") || !strings.Contains(onward, `<span class="state s-completed">completed</span>`) {
		t.Errorf("B's listing of the hops issued onward does not list the hop to C, completed (listed %v; the hop page links %s)", got, m[1])
	}
	if got := listedIssued(get(b + "onward?resolved=no")); len(got) != 0 {
		t.Errorf("B lists %v as unresolved; the hop to C is resolved", got)
	}
	issued := get(b + strings.ReplaceAll(m[1], "&amp;", "&"))
	for _, want := range []string{"Issued hop", "https://tester.example", "Status received", `<span class="state s-completed">completed</span>`, "verified · prev not carried"} {
		if !strings.Contains(issued, want) {
			t.Errorf("the issued hop's page lacks %q", want)
		}
	}
	c := console(r.c)
	hops = listed(get(c))
	if len(hops) != 1 {
		t.Fatalf("C received %d hops, want 1", len(hops))
	}
	page = get(c + string(hopHref("https://coder.example", hops[0])))
	for _, want := range []string{"https://planner.example", "https://coder.example", "https://tester.example",
		"verified · starts the chain", "verified · prev ok", `class="quality q-full">full<`} {
		if !strings.Contains(page, want) {
			t.Errorf("C's hop page lacks %q", want)
		}
	}
}
