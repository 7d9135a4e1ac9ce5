package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"

	"github.com/quantumlearningmachines/handoff/store"
)

// chromium is Debian's chromium package's browser (scripts/test.sh
// installs it when missing).
const chromium = "/usr/bin/chromium"

// TestConsoleInBrowser drives the console in headless Chromium as an
// operator would (issue 17): sign in, see the flagged hop in the flagged
// list, open its page and its chain picture, resolve the flag (draft
// "Forks, Concurrency, and Equivocation": resolved with a note), see it
// resolved. The browser loads nothing but the console (no background
// networking: the machine may have no internet), and reports no
// Content-Security-Policy violation. It writes a screenshot of the hop
// page to the test's artifact folder.
func TestConsoleInBrowser(t *testing.T) {
	b := newBrowser(t)
	r := newConsoleRig(t, consoleConfig{})
	hs := r.seed(t)
	is := r.seedIssued(t)
	ctx, step, text := b.ctx, b.step, b.text

	// Signed out, the console is its sign-in form, and nothing else;
	// an address deeper than its pages leads to it, and signing in
	// there works.
	step("open the console", chromedp.Navigate(r.admin+"/console/hop/deeper"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if body := text("main"); strings.Contains(body, hs.equiv[:10]) || strings.Contains(body, consolePlanner) {
		t.Fatalf("the sign-in page shows hop data: %s", body)
	}
	step("sign in",
		chromedp.SendKeys(chromedp.CSS("#token"), aliceToken),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("table.hops")))
	if who := text(".who"); !strings.Contains(who, "Alice") {
		t.Errorf("signed in as %q", who)
	}

	// The flagged list shows the equivocation, and links to its hop.
	step("open the flagged list", chromedp.Click(chromedp.CSS(`nav a[href="flags"]`)), chromedp.WaitVisible(chromedp.CSS("table.flags")))
	if flags := text("table.flags"); !strings.Contains(flags, "equivocation") || !strings.Contains(flags, shortHop(hs.equiv)) {
		t.Fatalf("the flagged list: %s", flags)
	}
	step("open the flagged hop", chromedp.Click(chromedp.CSS(`tr:has(.k-equivocation) a.mono`)), chromedp.WaitVisible(chromedp.CSS("figure.chain svg")))
	if h := text("h1"); !strings.Contains(h, hs.equiv) {
		t.Fatalf("the hop page is of %q, want %s", h, hs.equiv)
	}
	picture := text("figure.chain")
	for _, want := range []string{consoleUser, consolePlanner, "https://coder.example", "verified · starts the chain", "verified · prev ok"} {
		if !strings.Contains(picture, want) {
			t.Errorf("the chain picture lacks %q: %s", want, picture)
		}
	}
	if q := text(".quality"); q != "full" {
		t.Errorf("chain quality %q, want full", q)
	}
	// The stylesheet and the picture's own style both apply (the CSP
	// allows them, by origin and by hash).
	styled, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[
		getComputedStyle(document.querySelector("header.bar")).backgroundColor,
		getComputedStyle(document.querySelector("figure.chain svg text.agent")).fontWeight]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(styled) != 2 || styled[0] != "rgb(29, 35, 48)" || styled[1] != "700" {
		t.Errorf("computed styles %q: the stylesheet or the picture's style did not apply", styled)
	}
	b.screenshot("console-hop.png", "")

	// Resolve the equivocation with a note, from the hop page.
	step("resolve",
		chromedp.SendKeys(chromedp.CSS(`form[action="resolve"] input[name="note"]`), "the planner retried with new work under the old hop; its owner is told"),
		chromedp.Click(chromedp.CSS(`form[action="resolve"] button`)),
		chromedp.WaitVisible(chromedp.CSS(".resolution .badge")))
	if res := text(".resolution"); !strings.Contains(res, "by Alice: the planner retried") {
		t.Errorf("the hop page shows the resolution %q", res)
	}
	step("open the flagged list again", chromedp.Click(chromedp.CSS(`nav a[href="flags"]`)), chromedp.WaitVisible(chromedp.CSS("table.flags")))
	if flags := text("table.flags"); strings.Contains(flags, "equivocation") {
		t.Errorf("the equivocation is still listed open: %s", flags)
	}
	f := r.flag(t, hs.equiv, store.FlagEquivocation)
	if f.Resolved.IsZero() || !strings.HasPrefix(f.Resolution, "by Alice: ") {
		t.Errorf("the store has the flag resolved %v as %q", f.Resolved, f.Resolution)
	}

	// A page with the picture and a .warn badge of its own: the
	// picture's style (.warn: bold, red) stays in the picture.
	step("open an unresolved issued hop", chromedp.Navigate(r.admin+"/console/"+string(issuedHref(is.running))), chromedp.WaitVisible(chromedp.CSS("figure.chain svg")))
	badge, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[
		getComputedStyle(document.querySelector(".badge.warn")).fontWeight,
		getComputedStyle(document.querySelector(".badge.warn")).color,
		getComputedStyle(document.querySelector("figure.chain svg text.agent")).fontWeight]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(badge) != 3 || badge[0] != "600" || badge[1] != "rgb(138, 90, 0)" || badge[2] != "700" {
		t.Errorf("computed styles %q of the badge (want 600, rgb(138, 90, 0)) and the picture's agent (want 700): the picture's style leaks, or does not apply", badge)
	}

	b.noCSPErrors()
}

// browser is headless Chromium for a test: its context, and what it
// logged.
type browser struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	logged []string
}

// newBrowser starts Debian's chromium headless, loading nothing but
// what the test opens (no background networking: the machine may have
// no internet). It skips the test when chromium is missing, unless
// CI=true.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing (CI=true: the browser test must run; Debian: apt-get install chromium)", chromium)
		}
		t.Skipf("%s is missing (Debian: apt-get install chromium)", chromium)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancel)

	// What the browser logs: a page the CSP kept from loading or
	// applying something says so here.
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*cdplog.EventEntryAdded); ok && e.Entry != nil {
			b.mu.Lock()
			b.logged = append(b.logged, string(e.Entry.Level)+": "+e.Entry.Text)
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// step runs steps, failing the test with what they were for.
func (b *browser) step(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// text is the text of the element sel selects.
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("the text of %s: %v", sel, err)
	}
	return s
}

// screenshot writes the page to the test's artifact folder as name, and
// with HANDOFF_UPDATE_SCREENSHOT=1 to docs as docsName too ("": never).
func (b *browser) screenshot(name, docsName string) {
	b.t.Helper()
	shot, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	out := filepath.Join(b.t.ArtifactDir(), name)
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("the page: %s", out)
	if docsName != "" && os.Getenv("HANDOFF_UPDATE_SCREENSHOT") == "1" {
		docs := filepath.Join("..", "..", "..", "..", "docs", docsName)
		if err := os.WriteFile(docs, shot, 0o644); err != nil {
			b.t.Fatal(err)
		}
		b.t.Logf("rewrote %s", docs)
	}
}

// noCSPErrors fails the test if the browser logged a Content Security
// Policy violation.
func (b *browser) noCSPErrors() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range b.logged {
		if strings.Contains(l, "Content Security Policy") || strings.Contains(l, "Refused") {
			b.t.Errorf("the browser says: %s", l)
		}
	}
}

// TestConsoleThreeAgentsInBrowser: the tester's console after the three
// agents of docs/gateway.md's walkthrough, the tester's tool failing. On
// a route whose failures may have taken effect, the outcome is unknown
// (draft "Knowing the Outcome"): flagged. The operator signs in, sees
// the flag, opens the hop (its chain: the planner's offer to the coder
// and the coder's to the tester, each verified, quality full), finishes
// it as the failure observed, and sees it resolved with its name. The
// hop page's screenshot is docs/console.png, the README's picture.
func TestConsoleThreeAgentsInBrowser(t *testing.T) {
	b := newBrowser(t)
	r := newChainRig(t)
	task := r.wait(t, r.send(t, "fail"))
	if task.Status.State != a2a.TaskStateFailed {
		t.Fatalf("A's task: %s", task.Status.State)
	}
	r.c.operators.Store(&map[string]string{aliceToken: "Alice"})
	srv := httptest.NewServer(http.StripPrefix("/console", newConsole(r.c)))
	t.Cleanup(srv.Close)

	b.step("open the console", chromedp.Navigate(srv.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.step("sign in", chromedp.SendKeys(chromedp.CSS("#token"), aliceToken), chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("table.hops")))
	b.step("open the flagged list", chromedp.Click(chromedp.CSS(`nav a[href="flags"]`)), chromedp.WaitVisible(chromedp.CSS("table.flags")))
	if flags := b.text("table.flags"); !strings.Contains(flags, store.FlagUnknownOutcome) {
		t.Fatalf("the flagged list: %s", flags)
	}
	b.step("open the flagged hop", chromedp.Click(chromedp.CSS(`tr:has(.k-unknown-outcome) a.mono`)), chromedp.WaitVisible(chromedp.CSS("figure.chain svg")))
	picture := b.text("figure.chain")
	for _, want := range []string{"https://planner.example", "https://coder.example", "https://tester.example", "verified · starts the chain", "verified · prev ok"} {
		if !strings.Contains(picture, want) {
			t.Errorf("the chain picture lacks %q: %s", want, picture)
		}
	}
	if q := b.text(".quality"); q != "full" {
		t.Errorf("chain quality %q, want full", q)
	}
	b.screenshot("console-three-agents.png", "console.png")
	b.step("finish as failed",
		chromedp.SetValue(chromedp.CSS(`form[action="finish"] select[name="outcome"]`), "failed"),
		chromedp.SendKeys(chromedp.CSS(`form[action="finish"] input[name="note"]`), "the test run wrote nothing: its report says so"),
		chromedp.Click(chromedp.CSS(`form[action="finish"] button`)),
		chromedp.WaitVisible(chromedp.CSS(".resolution .badge")))
	if res := b.text(".resolution"); !strings.Contains(res, "by Alice") {
		t.Errorf("the hop page shows the resolution %q", res)
	}
	b.noCSPErrors()
}
