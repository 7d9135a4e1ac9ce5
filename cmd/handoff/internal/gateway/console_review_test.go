package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/picture"
	"github.com/quantumlearningmachines/handoff/store"
)

// The console's tests of what an adversarial review found: actions the
// draft does not allow taken anyway, two operators at once, forged
// sign-ins, pages at the wrong depth, unbounded pages.

// consoleAt serves a console of r's gateway, changed by tweak before it
// serves (its store, its logger), and returns its base URL (the console
// is at base+"/console/").
func (r *consoleRig) consoleAt(t *testing.T, tweak func(c *console)) (string, *console) {
	t.Helper()
	c := newConsole(r.gw)
	if tweak != nil {
		tweak(c)
	}
	srv := httptest.NewServer(http.StripPrefix("/console", c))
	t.Cleanup(srv.Close)
	return srv.URL, c
}

// hopIn records a hop of the planner in state st (released when
// released), with an open unknown-outcome flag, straight in the store,
// and returns the hop and its flag.
func (r *consoleRig) hopIn(t *testing.T, st store.State, released bool) (string, store.Flag) {
	t.Helper()
	ctx := context.Background()
	h := r.offer(t, consolePlanner, "https://coder.example", "", "ctx-"+string(st), nil, nil)
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := &store.Record{Iss: consolePlanner, Hop: o.Hop, Digest: h.Offer.Digest(), Offer: h.Offer.Octets, OfferForm: h.Offer.Form,
		State: st, Received: now, KeepUntil: now.Add(time.Hour)}
	if _, _, err := r.gw.store.Claim(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if released {
		if err := r.gw.store.Release(ctx, consolePlanner, o.Hop, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.gw.store.Raise(ctx, store.Flag{Kind: store.FlagUnknownOutcome, Iss: consolePlanner, Hop: o.Hop, Detail: "test", Created: now}); err != nil {
		t.Fatal(err)
	}
	return o.Hop, r.flag(t, o.Hop, store.FlagUnknownOutcome)
}

// TestConsoleSettlesOnlyWhatTheDraftAllows: draft "Knowing the Outcome":
// a hop taken whose outcome is unknown is settled by an authoritative
// observation (finished) or given up on (released), never by closing its
// flag alone; a hop never taken has no outcome to finish; a released
// hop's outcome may still be finished when learned. The server enforces
// each, whatever form is posted.
func TestConsoleSettlesOnlyWhatTheDraftAllows(t *testing.T) {
	cases := []struct {
		rule     string
		state    store.State // the hop's, with an open unknown-outcome flag
		released bool
		action   string
		outcome  string
		code     int
		// after: the hop's state, and whether its flag is still open
		after    store.State
		flagOpen bool
	}{
		{`Knowing the Outcome: an accepted hop's unknown outcome is not closed with a note alone`, store.Accepted, false, "resolve", "", http.StatusConflict, store.Accepted, true},
		{`Knowing the Outcome: a hop never taken is not finished as completed`, store.Received, false, "finish", "completed", http.StatusConflict, store.Received, true},
		{`Knowing the Outcome: a hop never taken is not finished as failed`, store.Received, false, "finish", "failed", http.StatusConflict, store.Received, true},
		{`Knowing the Outcome: a hop never taken has its flag resolved with a note`, store.Received, false, "resolve", "", http.StatusOK, store.Received, false},
		{`Knowing the Outcome: a released hop's outcome, once learned, is finished`, store.Accepted, true, "finish", "completed", http.StatusOK, store.Completed, false},
		{`Knowing the Outcome: a released hop's flag is resolved with a note`, store.Accepted, true, "resolve", "", http.StatusOK, store.Accepted, false},
		{`Knowing the Outcome: an accepted hop is finished as observed`, store.Accepted, false, "finish", "failed", http.StatusOK, store.Failed, false},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			r := newConsoleRig(t, consoleConfig{})
			hop, f := r.hopIn(t, c.state, c.released)
			form := url.Values{"id": {fmt.Sprint(f.ID)}, "note": {"seen in the upstream's log"}, "outcome": {c.outcome}}
			p := do(t, nil, "POST", r.admin+"/console/"+c.action, "Bearer "+aliceToken, form)
			if p.code != c.code {
				t.Fatalf("%s: %d, want %d: %s", c.action, p.code, c.code, p.body)
			}
			rec, err := r.gw.store.Get(context.Background(), consolePlanner, hop)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != c.after {
				t.Errorf("the hop is %s, want %s", rec.State, c.after)
			}
			if c.after == c.state && rec.Status != nil {
				t.Errorf("a status was signed for a hop left %s", rec.State)
			}
			if open := r.flag(t, hop, store.FlagUnknownOutcome).Resolved.IsZero(); open != c.flagOpen {
				t.Errorf("the flag is open %v, want %v", open, c.flagOpen)
			}
			if c.flagOpen && c.state == store.Accepted {
				// Still listed as flagged, for an operator to settle.
				l := do(t, nil, "GET", r.admin+"/console/?flagged=1", "Bearer "+aliceToken, nil)
				if !slices.Contains(listed(l.body), hop) {
					t.Errorf("the hop is no longer listed as flagged")
				}
			}
		})
	}
}

// failingGet is a store whose Get of one hop fails, as a database that
// times out does.
type failingGet struct {
	store.Store
	hop string
}

func (s failingGet) Get(ctx context.Context, iss, hop string) (*store.Record, error) {
	if hop == s.hop {
		return nil, errors.New("the database timed out")
	}
	return s.Store.Get(ctx, iss, hop)
}

// TestConsoleFlagRowWithoutItsRecord: draft "Knowing the Outcome": on the
// flagged list, an unknown outcome whose hop's record cannot be read
// offers no action (which one the draft allows depends on the record):
// the row says so, and the others keep theirs.
func TestConsoleFlagRowWithoutItsRecord(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	base, _ := r.consoleAt(t, func(c *console) { c.st = failingGet{Store: c.st, hop: hs.unknown} })
	u := r.flag(t, hs.unknown, store.FlagUnknownOutcome)
	e := r.flag(t, hs.equiv, store.FlagEquivocation)
	p := do(t, nil, "GET", base+"/console/flags", "Bearer "+aliceToken, nil)
	if p.code != http.StatusOK {
		t.Fatalf("%d %s", p.code, p.body)
	}
	forms := func(id int64) int {
		return strings.Count(p.body, fmt.Sprintf(`name="id" value="%d"`, id))
	}
	if n := forms(u.ID); n != 0 {
		t.Errorf("the unknown outcome whose record could not be read offers %d actions, want none", n)
	}
	if !strings.Contains(p.body, "the hop&#39;s record could not be read (the database timed out)") {
		t.Errorf("the row does not say its record could not be read")
	}
	if n := forms(e.ID); n != 1 {
		t.Errorf("the equivocation offers %d actions, want 1", n)
	}
}

// resolvedFirst is a store in which another operator resolves a flag
// just before this one does (once).
type resolvedFirst struct {
	store.Store
	once *sync.Once
}

func (s resolvedFirst) Resolve(ctx context.Context, id int64, resolution string, now time.Time) error {
	s.once.Do(func() { s.Store.Resolve(ctx, id, "by Bob: got there first", now) })
	return s.Store.Resolve(ctx, id, resolution, now)
}

// TestConsoleTwoOperatorsOneFlag: draft "Forks, Concurrency, and
// Equivocation" (two operators acting at once): the second to resolve a
// flag is told it is no longer open (409), not that the console failed;
// an outcome finished while another operator closed its flag is recorded
// still, with a resolved flag of its own, so that the record and the
// flags agree.
func TestConsoleTwoOperatorsOneFlag(t *testing.T) {
	cases := []struct {
		rule   string
		kind   string
		action string
		code   int
	}{
		{"Forks, Concurrency, and Equivocation: the second resolution of an equivocation is a conflict", store.FlagEquivocation, "resolve", http.StatusConflict},
		{"Knowing the Outcome: an outcome finished while its flag was closed is recorded with a flag of its own", store.FlagUnknownOutcome, "finish", http.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			r := newConsoleRig(t, consoleConfig{})
			hs := r.seed(t)
			base, _ := r.consoleAt(t, func(c *console) { c.st = resolvedFirst{Store: c.st, once: new(sync.Once)} })
			hop := map[string]string{store.FlagEquivocation: hs.equiv, store.FlagUnknownOutcome: hs.unknown}[c.kind]
			f := r.flag(t, hop, c.kind)
			form := url.Values{"id": {fmt.Sprint(f.ID)}, "note": {"the tests ran"}, "outcome": {"completed"}}
			if p := do(t, nil, "POST", base+"/console/"+c.action, "Bearer "+aliceToken, form); p.code != c.code {
				t.Fatalf("%s: %d, want %d: %s", c.action, p.code, c.code, p.body)
			}
			all, err := r.gw.store.ListFlags(context.Background(), store.FlagQuery{Hops: []store.HopKey{{Iss: consolePlanner, Hop: hop}}, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			var resolutions []string
			for _, g := range all {
				if g.Resolved.IsZero() {
					t.Errorf("flag %d (%s) is still open", g.ID, g.Kind)
				}
				resolutions = append(resolutions, g.Resolution)
			}
			if !slices.Contains(resolutions, "by Bob: got there first") {
				t.Errorf("Bob's resolution is gone: %q", resolutions)
			}
			if c.action == "finish" {
				rec, err := r.gw.store.Get(context.Background(), consolePlanner, hop)
				if err != nil {
					t.Fatal(err)
				}
				if rec.State != store.Completed || !slices.Contains(resolutions, "by Alice: finished as completed, as observed: the tests ran") {
					t.Errorf("the hop is %s, its flags resolved as %q: want completed, and Alice's finish recorded", rec.State, resolutions)
				}
			}
		})
	}
	// Operators racing for real: one resolves, the others are told.
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	f := r.flag(t, hs.equiv, store.FlagEquivocation)
	codes := make([]int, 8)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			codes[i] = do(t, nil, "POST", r.admin+"/console/resolve", "Bearer "+aliceToken, url.Values{"id": {fmt.Sprint(f.ID)}, "note": {fmt.Sprint("operator ", i)}}).code
		})
	}
	wg.Wait()
	slices.Sort(codes)
	if codes[0] != http.StatusOK || codes[1] != http.StatusConflict || codes[len(codes)-1] != http.StatusConflict {
		t.Errorf("concurrent resolutions answered %v: want one 200, the others 409", codes)
	}
}

// TestConsoleRefusesCrossSitePosts: a page of another site cannot sign a
// browser in (login CSRF: the victim would act under the attacker's
// session) nor act, even with a form token: a POST whose Sec-Fetch-Site
// is not same-origin, or whose Origin is another host, is refused. A
// refused sign-in is logged (never the token) and counted.
func TestConsoleRefusesCrossSitePosts(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	logged := &lockedWriter{w: &bytes.Buffer{}}
	base, con := r.consoleAt(t, func(c *console) { c.log = slog.New(slog.NewJSONHandler(logged, nil)) })
	host := strings.TrimPrefix(base, "http://")
	cases := []struct {
		name string
		hdr  map[string]string
		code int
	}{
		{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"Sec-Fetch-Site same-site", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"Sec-Fetch-Site none", map[string]string{"Sec-Fetch-Site": "none"}, http.StatusForbidden},
		{"Origin of another site", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"Origin of another port", map[string]string{"Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		{"Origin null", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"same-origin, a forged Origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"the console's own form", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host}, http.StatusSeeOther},
		{"a script (neither header)", nil, http.StatusSeeOther},
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, form url.Values, hdr map[string]string, cookie *http.Cookie) *http.Response {
		req, _ := http.NewRequest("POST", base+"/console/"+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	for _, c := range cases {
		t.Run("sign in: "+c.name, func(t *testing.T) {
			res := post("signin", url.Values{"token": {aliceToken}}, c.hdr, nil)
			if res.StatusCode != c.code {
				t.Fatalf("%d, want %d", res.StatusCode, c.code)
			}
			if opened := len(res.Cookies()) > 0; opened != (c.code == http.StatusSeeOther) {
				t.Errorf("a session opened: %v", opened)
			}
		})
	}
	// An action with a good session and its CSRF token, posted from
	// another site: refused, nothing changes.
	res := post("signin", url.Values{"token": {aliceToken}}, nil, nil)
	ck := res.Cookies()[0]
	req, _ := http.NewRequest("GET", base+"/console/flags", nil)
	req.AddCookie(ck)
	fl, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(fl.Body)
	fl.Body.Close()
	f := r.flag(t, hs.equiv, store.FlagEquivocation)
	form := url.Values{"csrf": {csrf(t, body.String())}, "id": {fmt.Sprint(f.ID)}, "note": {"forged"}}
	for _, hdr := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
		if res := post("resolve", form, hdr, ck); res.StatusCode != http.StatusForbidden {
			t.Errorf("an action posted with %v: %d, want 403", hdr, res.StatusCode)
		}
	}
	if !r.flag(t, hs.equiv, store.FlagEquivocation).Resolved.IsZero() {
		t.Error("a cross-site POST resolved the flag")
	}
	// A wrong token, by the form and by a bearer header: logged at WARN
	// without the token, and counted with the cross-site sign-ins.
	wrong := "not-an-operator-token-0123456789"
	post("signin", url.Values{"token": {wrong}}, nil, nil)
	do(t, nil, "GET", base+"/console/", "Bearer "+wrong, nil)
	log := logged.String()
	if strings.Count(log, `"level":"WARN","msg":"console: sign-in refused: not an operator's token"`) != 2 ||
		strings.Count(log, `"msg":"console: sign-in refused: posted from another site"`) != 7 {
		t.Errorf("the refused sign-ins are not logged at WARN, each once:\n%s", log)
	}
	if strings.Contains(log, wrong) || strings.Contains(log, aliceToken) {
		t.Errorf("the log holds a token:\n%s", log)
	}
	for result, want := range map[string]float64{"refused": 2, "cross_site": 7, "ok": 3} {
		if got := testutil.ToFloat64(con.signins.WithLabelValues(result)); got != want {
			t.Errorf("handoff_gateway_console_signins_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// TestConsoleSessionCookieBehindAProxy: behind a proxy that terminates
// TLS (X-Forwarded-Proto: https) the session cookie is Secure, as on a
// TLS admin port; signing in again ends the session the browser held
// (no session fixed in advance, none piling up).
func TestConsoleSessionCookieBehindAProxy(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	base, con := r.consoleAt(t, nil)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(proto string, old *http.Cookie) *http.Cookie {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/console/signin", strings.NewReader(url.Values{"token": {aliceToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		if old != nil {
			req.AddCookie(old)
		}
		res, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
			t.Fatalf("sign in: %d, cookies %v", res.StatusCode, res.Cookies())
		}
		return res.Cookies()[0]
	}
	for _, c := range []struct {
		proto  string
		secure bool
	}{{"", false}, {"http", false}, {"https", true}, {"HTTPS", true}, {"https, http", true}} {
		if ck := signIn(c.proto, nil); ck.Secure != c.secure {
			t.Errorf("X-Forwarded-Proto %q: Secure %v, want %v", c.proto, ck.Secure, c.secure)
		}
	}
	get := func(ck *http.Cookie) int {
		req, _ := http.NewRequest("GET", base+"/console/", nil)
		req.AddCookie(ck)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	first := signIn("", nil)
	con.mu.Lock()
	before := len(con.sessions)
	con.mu.Unlock()
	second := signIn("", first)
	con.mu.Lock()
	after := len(con.sessions)
	con.mu.Unlock()
	if get(first) != http.StatusUnauthorized || get(second) != http.StatusOK || after != before || first.Value == second.Value {
		t.Errorf("signing in again: the old session answers %d, the new %d; sessions %d then %d", get(first), get(second), before, after)
	}
}

// TestConsoleOnlyAtDepthOne: every page sits at one level (its relative
// links, forms and stylesheet say so); an address deeper down leads back
// to the console's first page, signed in or not, so that signing in from
// it works; a POST there is 404, not a sign-in form posting elsewhere.
func TestConsoleOnlyAtDepthOne(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		method, path, auth string
		code               int
		loc                string
	}{
		{"GET", "/console/a/b", "", http.StatusSeeOther, "../"},
		{"GET", "/console/a/b/c", "", http.StatusSeeOther, "../../"},
		{"GET", "/console/hop/", "", http.StatusSeeOther, "../"},
		{"GET", "/console/a/console.css", "", http.StatusSeeOther, "../"},
		{"GET", "/console/flags/x", "Bearer " + aliceToken, http.StatusSeeOther, "../"},
		{"HEAD", "/console/a/b", "", http.StatusSeeOther, "../"},
		{"POST", "/console/a/signin", "", http.StatusNotFound, ""},
		{"POST", "/console/x/resolve", "Bearer " + aliceToken, http.StatusNotFound, ""},
		{"GET", "/console/a%2Fb", "Bearer " + aliceToken, http.StatusNotFound, ""}, // one level, as the browser counts
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			var form url.Values
			if c.method == "POST" {
				form = url.Values{"token": {aliceToken}}
			}
			p := do(t, noFollow, c.method, r.admin+c.path, c.auth, form)
			if p.code != c.code || p.hdr.Get("Location") != c.loc {
				t.Errorf("%d to %q, want %d to %q", p.code, p.hdr.Get("Location"), c.code, c.loc)
			}
			if p.hdr.Get("Set-Cookie") != "" {
				t.Errorf("a session opened")
			}
		})
	}
	// A browser that opens a deeper address signs in from where it lands.
	jar, _ := cookiejar.New(nil)
	b := &http.Client{Jar: jar}
	p := do(t, b, "GET", r.admin+"/console/hop/a/b", "", nil)
	if p.code != http.StatusUnauthorized || !strings.Contains(p.body, `action="signin"`) {
		t.Fatalf("a deeper address: %d", p.code)
	}
	if p := do(t, b, "POST", r.admin+"/console/signin", "", url.Values{"token": {aliceToken}}); p.code != http.StatusOK || !strings.Contains(p.body, "Hops received") {
		t.Errorf("signing in from where it landed: %d", p.code)
	}
}

// TestConsoleBearerScheme: the Authorization scheme is matched without
// regard to case (RFC 7235), the value trimmed; the operators' token
// hashes are computed once for each operators map.
func TestConsoleBearerScheme(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	base, con := r.consoleAt(t, nil)
	for _, c := range []struct {
		auth string
		code int
	}{
		{"Bearer " + aliceToken, http.StatusOK},
		{"bearer " + aliceToken, http.StatusOK},
		{"BEARER " + aliceToken, http.StatusOK},
		{"  Bearer   " + aliceToken + "  ", http.StatusOK},
		{"Bearer\t" + aliceToken, http.StatusUnauthorized}, // RFC 7235: one or more spaces
		{"Bearer", http.StatusUnauthorized},
		{"Bearer" + aliceToken, http.StatusUnauthorized},
		{"Basic " + aliceToken, http.StatusUnauthorized},
	} {
		if p := do(t, nil, "GET", base+"/console/", c.auth, nil); p.code != c.code {
			t.Errorf("Authorization %q: %d, want %d", c.auth, p.code, c.code)
		}
	}
	sums := con.sums.Load()
	if sums == nil || sums.src != r.gw.operators.Load() || len(sums.sums) != 2 {
		t.Fatalf("the token hashes are not kept for the operators map")
	}
	do(t, nil, "GET", base+"/console/", "Bearer "+aliceToken, nil)
	if con.sums.Load() != sums {
		t.Errorf("the token hashes were computed again for the same operators")
	}
	r.gw.operators.Store(&map[string]string{bobToken: "Bob"})
	if p := do(t, nil, "GET", base+"/console/", "Bearer "+aliceToken, nil); p.code != http.StatusUnauthorized {
		t.Errorf("a token taken out by a reload: %d", p.code)
	}
	if p := do(t, nil, "GET", base+"/console/", "bearer "+bobToken, nil); p.code != http.StatusOK {
		t.Errorf("a token a reload added: %d", p.code)
	}
}

// TestConsoleChainStyleIsScoped: the chain picture's own <style> applies
// to the whole page it is drawn in, so each of its rules names the
// picture first: none styles the page's own classes (.warn of a badge).
func TestConsoleChainStyleIsScoped(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	p := do(t, nil, "GET", r.admin+"/console/"+string(hopHref(consolePlanner, hs.equiv)), "Bearer "+aliceToken, nil)
	m := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindAllStringSubmatch(p.body, -1)
	if len(m) != 1 || !strings.Contains(p.body, `<svg xmlns="http://www.w3.org/2000/svg" class="`+picture.Class+`"`) {
		t.Fatalf("%d styles on the page, or the picture has no class of its own", len(m))
	}
	rules := strings.Split(strings.TrimSuffix(m[0][1], "}"), "}")
	for _, rule := range rules {
		sel, _, _ := strings.Cut(rule, "{")
		for _, s := range strings.Split(sel, ",") {
			if !strings.HasPrefix(strings.TrimSpace(s), "."+picture.Class+" ") {
				t.Errorf("the picture's rule %q styles the whole page", s)
			}
		}
	}
	if len(rules) < 3 {
		t.Errorf("the picture's style: %q", m[0][1])
	}
}

// allFlagsRefused is a store that refuses to list every flag at once:
// no page may need them all.
type allFlagsRefused struct{ store.Store }

func (allFlagsRefused) Flags(context.Context, bool) ([]store.Flag, error) {
	return nil, errors.New("a page read every flag")
}

// TestConsoleFlagsPaged: the flagged list comes newest first, a page at a
// time by the store's cursor, each flag once; no page reads every flag
// (a hop's page reads its own, the navigation counts the open ones up to
// "99+"); a hop's page lists the first of the hops issued onward for it
// and says how many more there are.
func TestConsoleFlagsPaged(t *testing.T) {
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	is := r.seedIssued(t)
	ctx := context.Background()
	for i := range 130 {
		if _, err := r.gw.store.Raise(ctx, store.Flag{Kind: store.FlagConflictingInputs, Iss: consolePlanner, Hop: fmt.Sprintf("many-%03d", i), Detail: "x", Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	// Every resolved flag too, with ?all=1.
	if err := r.gw.store.Resolve(ctx, r.flag(t, "many-000", store.FlagConflictingInputs).ID, "by Bob: x", time.Now()); err != nil {
		t.Fatal(err)
	}
	// Issued onward for one hop: more than a hop's page lists.
	rec, err := r.gw.store.Get(ctx, consolePlanner, hs.done[0])
	if err != nil {
		t.Fatal(err)
	}
	tr := trackerOf(r.gw.store)
	for i := range onwardShown + 5 {
		h := r.offer(t, "https://coder.example", consoleTester, "", "ctx-out", nil, nil)
		o, _, _ := handoff.UnsafeDecode(h.Offer)
		prev := rec.Digest
		if err := tr.Issue(ctx, &store.Issued{Hop: o.Hop, Aud: consoleTester, Work: fmt.Sprint("fan-", i), Offer: h.Offer.Octets, OfferForm: h.Offer.Form,
			Digest: h.Offer.Digest(), Prev: &prev, Exp: time.Unix(o.Exp, 0), View: store.Offered, Created: time.Now()}, false); err != nil {
			t.Fatal(err)
		}
	}
	base, _ := r.consoleAt(t, func(c *console) { c.st = allFlagsRefused{c.st} })
	get := func(path string) page {
		t.Helper()
		p := do(t, nil, "GET", base+"/console/"+path, "Bearer "+aliceToken, nil)
		if p.code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, p.code, p.body)
		}
		return p
	}
	for _, path := range []string{"", "?flagged=1", "onward", string(hopHref(consolePlanner, hs.equiv)), string(issuedHref(is.running)), "flags?all=1"} {
		if p := get(path); !strings.Contains(p.body, `<span class="count">99&#43;</span>`) { // "99+"
			t.Errorf("%s: the navigation does not count 99+ open flags: %s", path, regexp.MustCompile(`Flagged.{0,60}`).FindString(p.body))
		}
	}
	flagIDs := regexp.MustCompile(`name="id" value="(\d+)"`)
	for _, all := range []bool{false, true} {
		want, err := r.gw.store.Flags(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		seenResolved := false
		next := "flags"
		if all {
			next += "?all=1"
		}
		for pages := 0; next != ""; pages++ {
			if pages > 10 {
				t.Fatal("the pages never end")
			}
			p := get(next)
			if n := strings.Count(p.body, `<td><span class="kind k-`); n > flagsPage || n == 0 {
				t.Errorf("%s: %d rows, a page holds 1 to %d", next, n, flagsPage)
			}
			seenResolved = seenResolved || strings.Contains(p.body, "by Bob: x")
			for _, m := range flagIDs.FindAllStringSubmatch(p.body, -1) {
				id, _ := strconv.ParseInt(m[1], 10, 64)
				if len(got) == 0 || got[len(got)-1] != id {
					got = append(got, id)
				}
			}
			next = ""
			if m := regexp.MustCompile(`href="(flags\?[^"]*before=[^"]+)">Older`).FindStringSubmatch(p.body); m != nil {
				next = strings.ReplaceAll(m[1], "&amp;", "&")
				if all != strings.Contains(next, "all=1") {
					t.Errorf("the next page's link %s drops all", next)
				}
			}
		}
		var open []int64
		for _, f := range slices.Backward(want) {
			if f.Resolved.IsZero() {
				open = append(open, f.ID) // a resolved flag has no form
			}
		}
		if seenResolved != all {
			t.Errorf("all=%v: the resolved flag listed %v", all, seenResolved)
		}
		if !slices.Equal(got, open) {
			t.Errorf("all=%v: the pages' open flags %v, want newest first %v", all, got, open)
		}
	}
	if p := do(t, nil, "GET", base+"/console/flags?before=x", "Bearer "+aliceToken, nil); p.code != http.StatusBadRequest {
		t.Errorf("a cursor that is none: %d", p.code)
	}
	// A hop's page: its own flags only; the hops issued onward for it,
	// the first onwardShown, and how many more.
	p := get(string(hopHref(consolePlanner, hs.done[0])))
	if n := len(regexp.MustCompile(`href="issued\?hop=`).FindAllString(p.body, -1)); n != onwardShown || !strings.Contains(p.body, "And 5 more") {
		t.Errorf("the hop page lists %d hops issued onward, want %d and 5 more", n, onwardShown)
	}
	p = get(string(hopHref(consolePlanner, hs.equiv)))
	if strings.Contains(p.body, "conflicting-inputs") || !strings.Contains(p.body, "equivocation") {
		t.Errorf("the hop page lists other hops' flags, or not its own")
	}
}
