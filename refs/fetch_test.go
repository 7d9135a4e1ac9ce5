package refs

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
)

// object is what the test server serves at /obj.
var object = []byte(`{"doc":"the prior context the delegate fetches"}`)

// server is a real local HTTP server that counts the requests it gets, so
// a test can show a refused fetch never reached it.
type server struct {
	*httptest.Server
	hits atomic.Int64
}

func newServer(t *testing.T, tls bool, h http.HandlerFunc) *server {
	s := &server{}
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	})
	if tls {
		s.Server = httptest.NewTLSServer(wrapped)
	} else {
		s.Server = httptest.NewServer(wrapped)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *server) host() string { u, _ := url.Parse(s.URL); return u.Host }

func serveObject(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/obj":
		w.Write(object)
	case "/same-host-redirect":
		http.Redirect(w, r, "/obj", http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

// fetchPolicy allows the server's host, plain http and loopback: every
// safeguard but the one a test turns back on.
func fetchPolicy(hosts ...string) FetchPolicy {
	return FetchPolicy{Senders: []string{delegator}, Schemes: []string{"http", "https"}, Hosts: hosts,
		AllowPrivate: true, Timeout: 5 * time.Second}
}

// checkFetch checks one required digest ref of object at loc, placed at
// index 1 (after a ref the host supplied) so the error's index is shown to
// be the reference's own.
func checkFetch(t *testing.T, fp FetchPolicy, sender, loc string, want []byte) Finding {
	t.Helper()
	first := []byte("supplied")
	c := mustChecker(t, Policy{RequireAll: true, Fetch: fp})
	rs := []handoff.ContextRef{NewDigestRef(first, ""), NewDigestRef(want, loc)}
	fs := c.CheckRefs(context.Background(), sender, rs, &Material{Octets: map[int][]byte{0: first}})
	if fs[0].Outcome != handoff.RefVerified {
		t.Fatalf("the supplied ref: %s %v", fs[0].Outcome, fs[0].Err)
	}
	return fs[1]
}

func wantRefused(t *testing.T, f Finding, safeguard error) {
	t.Helper()
	if f.Outcome != handoff.RefUnverifiable || !errors.Is(f.Err, safeguard) || !errors.Is(f.Err, handoff.ErrUnverifiableRef) {
		t.Fatalf("outcome %s, error %v; want unverifiable by %v", f.Outcome, f.Err, safeguard)
	}
	var re *RefError
	if !errors.As(f.Err, &re) || re.Index != 1 || !strings.Contains(f.Err.Error(), "refs[1]") {
		t.Fatalf("error %v does not name refs[1]", f.Err)
	}
}

// TestFetchAllowed: a required reference whose octets were not supplied
// is fetched from loc and checked (draft "Context References": octets
// the delegate is expected to fetch from loc).
func TestFetchAllowed(t *testing.T) {
	s := newServer(t, false, serveObject)
	f := checkFetch(t, fetchPolicy(s.host()), delegator, s.URL+"/obj", object)
	if f.Outcome != handoff.RefVerified || !f.Fetched {
		t.Fatalf("outcome %s fetched %v: %v", f.Outcome, f.Fetched, f.Err)
	}
	f = checkFetch(t, fetchPolicy(s.host()), delegator, s.URL+"/obj", []byte("not what is served"))
	if f.Outcome != handoff.RefMismatch || !f.Fetched || !errors.Is(f.Err, handoff.ErrRefMismatch) {
		t.Fatalf("outcome %s fetched %v: %v", f.Outcome, f.Fetched, f.Err)
	}
	// A redirect within the host is followed.
	f = checkFetch(t, fetchPolicy(s.host()), delegator, s.URL+"/same-host-redirect", object)
	if f.Outcome != handoff.RefVerified {
		t.Fatalf("same-host redirect: %s %v", f.Outcome, f.Err)
	}
	// A host entry without a port allows any port of that host.
	f = checkFetch(t, fetchPolicy("127.0.0.1"), delegator, s.URL+"/obj", object)
	if f.Outcome != handoff.RefVerified {
		t.Fatalf("host without port: %s %v", f.Outcome, f.Err)
	}
	f = checkFetch(t, fetchPolicy(s.host()), delegator, s.URL+"/missing", object)
	wantRefused(t, f, ErrFetch)
}

// TestFetchHTTPS fetches over TLS with the server's certificate as the
// only root, under the default scheme allowlist (https only).
func TestFetchHTTPS(t *testing.T) {
	s := newServer(t, true, serveObject)
	fp := fetchPolicy(s.host())
	fp.Schemes = nil
	fp.RootCAs = s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	f := checkFetch(t, fp, delegator, s.URL+"/obj", object)
	if f.Outcome != handoff.RefVerified || !f.Fetched {
		t.Fatalf("https: %s %v", f.Outcome, f.Err)
	}
	// Without the root the server is not trusted: a fetch error.
	fp.RootCAs = nil
	wantRefused(t, checkFetch(t, fp, delegator, s.URL+"/obj", object), ErrFetch)
}

// TestFetchSafeguards checks each safeguard of draft "Resource Use" against
// a local server; each refusal is unverifiable, names its safeguard and
// the reference's index, and (but for size and timeout, which must read)
// never reaches the server.
func TestFetchSafeguards(t *testing.T) {
	const capSize = 1024
	slow := make(chan struct{})
	t.Cleanup(func() { close(slow) })
	other := newServer(t, false, serveObject)
	var s *server
	s = newServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Write(bytes.Repeat([]byte("x"), capSize+1))
		case "/big-chunked":
			for range capSize + 1 {
				w.Write([]byte("x"))
				w.(http.Flusher).Flush()
			}
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-slow:
			}
		case "/slow-body":
			// Headers and a first octet at once, then the body trickles:
			// the timeout bounds the whole fetch, not only the headers.
			w.Header().Set("Content-Length", "512")
			w.Write([]byte("x"))
			w.(http.Flusher).Flush()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for range 511 {
				select {
				case <-r.Context().Done():
					return
				case <-slow:
					return
				case <-tick.C:
					w.Write([]byte("x"))
					w.(http.Flusher).Flush()
				}
			}
		case "/elsewhere":
			http.Redirect(w, r, other.URL+"/obj", http.StatusFound)
		case "/loop":
			// An endless chain of same-host redirects.
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			http.Redirect(w, r, "/loop?n="+strconv.Itoa(n+1), http.StatusFound)
		case "/credentials":
			u, _ := url.Parse(s.URL + "/obj")
			u.User = url.UserPassword("user", "secret")
			http.Redirect(w, r, u.String(), http.StatusFound)
		default:
			serveObject(w, r)
		}
	})
	both := []string{s.host(), other.host()}
	tests := []struct {
		name      string
		rule      string
		fp        func() FetchPolicy
		sender    string
		path      string
		safeguard error
		reaches   bool
	}{
		{"size cap, announced", "size cap", func() FetchPolicy { p := fetchPolicy(both...); p.MaxSize = capSize; return p }, delegator, "/big", ErrTooLarge, true},
		{"size cap, streamed", "size cap", func() FetchPolicy { p := fetchPolicy(both...); p.MaxSize = capSize; return p }, delegator, "/big-chunked", ErrTooLarge, true},
		{"timeout, no headers", "timeout", func() FetchPolicy { p := fetchPolicy(both...); p.Timeout = 200 * time.Millisecond; return p }, delegator, "/slow", ErrTimeout, true},
		{"timeout, slow body", "timeout", func() FetchPolicy { p := fetchPolicy(both...); p.Timeout = 300 * time.Millisecond; return p }, delegator, "/slow-body", ErrTimeout, true},
		{"redirect to another host", "no redirects to other hosts", func() FetchPolicy { return fetchPolicy(both...) }, delegator, "/elsewhere", ErrRedirect, true},
		{"more than MaxRedirects redirects", "redirects bounded", func() FetchPolicy { p := fetchPolicy(both...); p.MaxRedirects = 2; return p }, delegator, "/loop", ErrRedirect, true},
		{"redirect adding credentials", "no credentials in loc", func() FetchPolicy { return fetchPolicy(both...) }, delegator, "/credentials", ErrRedirect, true},
		{"scheme not allowed (default https only)", "allowlist of schemes", func() FetchPolicy { p := fetchPolicy(both...); p.Schemes = nil; return p }, delegator, "/obj", ErrSchemeNotAllowed, false},
		{"host not allowed", "allowlist of hosts", func() FetchPolicy { return fetchPolicy(other.host()) }, delegator, "/obj", ErrHostNotAllowed, false},
		{"host allowlist empty by default", "allowlist of hosts", func() FetchPolicy { return fetchPolicy() }, delegator, "/obj", ErrHostNotAllowed, false},
		{"loopback address", "no private-address targets", func() FetchPolicy { p := fetchPolicy(both...); p.AllowPrivate = false; return p }, delegator, "/obj", ErrPrivateAddress, false},
		{"untrusted sender", "no fetch for untrusted senders", func() FetchPolicy { return fetchPolicy(both...) }, "https://stranger.example", "/obj", ErrUntrustedSender, false},
		{"zero policy fetches for nobody", "safeguards on by default", func() FetchPolicy { return FetchPolicy{} }, delegator, "/obj", ErrUntrustedSender, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before, beforeOther := s.hits.Load(), other.hits.Load()
			f := checkFetch(t, tc.fp(), tc.sender, s.URL+tc.path, object)
			wantRefused(t, f, tc.safeguard)
			if got := s.hits.Load() - before; (got > 0) != tc.reaches {
				t.Fatalf("%s: the server got %d requests", tc.rule, got)
			}
			if other.hits.Load() != beforeOther {
				t.Fatalf("%s: the other host was reached", tc.rule)
			}
		})
	}
}

// TestFetchRedirectLimits checks the redirect safeguards one by one, each
// by its own message so that no other safeguard stands in for it: at most
// MaxRedirects redirects are followed (the server sees exactly
// MaxRedirects+1 requests), never from https down to http, and never to a
// URL that carries credentials.
func TestFetchRedirectLimits(t *testing.T) {
	var plain, tlsS *server
	handler := func(self **server) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/loop":
				n, _ := strconv.Atoi(r.URL.Query().Get("n"))
				http.Redirect(w, r, "/loop?n="+strconv.Itoa(n+1), http.StatusFound)
			case "/down":
				// The same host and port, http: only the scheme changes.
				http.Redirect(w, r, "http://"+(*self).host()+"/obj", http.StatusFound)
			case "/credentials":
				u, _ := url.Parse((*self).URL + "/obj")
				u.User = url.User("token")
				http.Redirect(w, r, u.String(), http.StatusFound)
			default:
				serveObject(w, r)
			}
		}
	}
	plain = newServer(t, false, handler(&plain))
	tlsS = newServer(t, true, handler(&tlsS))
	roots := tlsS.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tests := []struct {
		name     string
		rule     string
		s        *server
		path     string
		max      int
		wantMsg  string
		wantHits int64
	}{
		{"more than MaxRedirects (1)", "redirects bounded", plain, "/loop", 1, "more than 1 redirects", 2},
		{"more than MaxRedirects (3, default)", "redirects bounded", plain, "/loop", 0, "more than 3 redirects", 4},
		{"https down to http", "never from https to http", tlsS, "/down", 0, "redirect from https to http", 1},
		{"credentials added, http", "no credentials in loc", plain, "/credentials", 0, "carries credentials", 1},
		{"credentials added, https", "no credentials in loc", tlsS, "/credentials", 0, "carries credentials", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fp := fetchPolicy(tc.s.host())
			fp.MaxRedirects = tc.max
			fp.RootCAs = roots
			before := tc.s.hits.Load()
			f := checkFetch(t, fp, delegator, tc.s.URL+tc.path, object)
			wantRefused(t, f, ErrRedirect)
			if !strings.Contains(f.Err.Error(), tc.wantMsg) {
				t.Fatalf("%s: error %v does not say %q", tc.rule, f.Err, tc.wantMsg)
			}
			if strings.Contains(f.Err.Error(), "token") {
				t.Fatalf("%s: error %v shows the credentials", tc.rule, f.Err)
			}
			if got := tc.s.hits.Load() - before; got != tc.wantHits {
				t.Fatalf("%s: the server got %d requests, want %d", tc.rule, got, tc.wantHits)
			}
		})
	}
}

// TestFetchPrivateByName: the address check runs when connecting, after
// name resolution, so a host name that resolves to loopback (as a rebound
// name would) is refused although the name itself is allowed.
func TestFetchPrivateByName(t *testing.T) {
	s := newServer(t, false, serveObject)
	u, _ := url.Parse(s.URL)
	host := "localhost:" + u.Port()
	fp := fetchPolicy(host)
	fp.AllowPrivate = false
	f := checkFetch(t, fp, delegator, "http://"+host+"/obj", object)
	wantRefused(t, f, ErrPrivateAddress)
	if s.hits.Load() != 0 {
		t.Fatal("the server was reached")
	}
}

// TestNotRequiredNeverFetched: only a required reference is fetched
// (FetchPolicy; draft "Resource Use"): a reference policy does not require
// is not fetched from its loc even when some of its material (a salt) is
// at hand, and the server is never reached.
func TestNotRequiredNeverFetched(t *testing.T) {
	s := newServer(t, false, serveObject)
	salted, salt := mustSalted(t, object, s.URL+"/obj")
	plain := NewDigestRef(object, s.URL+"/obj")
	tests := []struct {
		name string
		rule string
		ref  handoff.ContextRef
		m    *Material
	}{
		{"digest, nothing at hand", "not required: never fetched", plain, nil},
		{"salted-digest, nothing at hand", "not required: never fetched", salted, nil},
		{"salted-digest, only its salt at hand", "not required: never fetched, a salt alone is nothing to check", salted, &Material{Salts: map[int][]byte{0: salt}}},
		{"salted-digest, salt at hand, other objects supplied", "not required: never fetched", salted, &Material{Salts: map[int][]byte{0: salt}, Objects: []Object{{Octets: []byte("other")}}}},
	}
	c := mustChecker(t, Policy{Fetch: fetchPolicy(s.host())})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := c.CheckRefs(context.Background(), delegator, []handoff.ContextRef{tc.ref}, tc.m)
			if f := fs[0]; f.Outcome != handoff.RefNotChecked || f.Fetched || f.Err != nil || fs.Err() != nil {
				t.Fatalf("%s: outcome %s fetched %v (%v), want not-checked", tc.rule, f.Outcome, f.Fetched, f.Err)
			}
			if n := s.hits.Load(); n != 0 {
				t.Fatalf("%s: the server got %d requests", tc.rule, n)
			}
		})
	}
	// The same reference, required, is fetched: the server is reachable,
	// so the zero hits above are the policy's doing.
	fs := mustChecker(t, Policy{RequireAll: true, Fetch: fetchPolicy(s.host())}).
		CheckRefs(context.Background(), delegator, []handoff.ContextRef{salted}, &Material{Salts: map[int][]byte{0: salt}})
	if fs[0].Outcome != handoff.RefVerified || !fs[0].Fetched || s.hits.Load() != 1 {
		t.Fatalf("required: outcome %s fetched %v (%v), %d requests", fs[0].Outcome, fs[0].Fetched, fs[0].Err, s.hits.Load())
	}
}

// TestPrivateAddr checks the private-address safeguard (draft "Resource
// Use": no private-address targets unless allowed) on each range, IPv6
// forms that embed an IPv4 address included.
func TestPrivateAddr(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		private bool
		rule    string
	}{
		{"127.0.0.1", true, "loopback"}, {"10.1.2.3", true, "private"}, {"172.16.0.1", true, "private"},
		{"192.168.1.1", true, "private"}, {"169.254.169.254", true, "link-local"}, {"100.64.0.1", true, "shared (CGNAT)"},
		{"0.0.0.0", true, "unspecified"}, {"255.255.255.255", true, "broadcast"}, {"224.0.0.1", true, "multicast"},
		{"192.0.2.1", true, "documentation"}, {"198.51.100.1", true, "documentation"}, {"203.0.113.1", true, "documentation"},
		{"::1", true, "loopback"}, {"::", true, "unspecified"}, {"fe80::1", true, "link-local"}, {"fd00::1", true, "unique local"},
		{"::ffff:127.0.0.1", true, "IPv4-mapped loopback"}, {"::ffff:10.0.0.1", true, "IPv4-mapped private"},
		{"64:ff9b::a00:1", true, "NAT64"}, {"64:ff9b:1::1", true, "local-use NAT64"},
		{"::7f00:1", true, "IPv4-compatible loopback"}, {"::a00:1", true, "IPv4-compatible private"},
		{"::5db8:d822", true, "IPv4-compatible, any (deprecated form)"},
		{"::ffff:0:7f00:1", true, "IPv4-translated loopback"}, {"::ffff:0:5db8:d822", true, "IPv4-translated, any"},
		{"fec0::1", true, "site-local"}, {"feff::1", true, "site-local"},
		{"2002:7f00:1::", true, "6to4 embedding loopback"}, {"2002:a00:1::1", true, "6to4 embedding private"},
		{"2002:a9fe:a9fe::", true, "6to4 embedding link-local"}, {"2002::", true, "6to4 embedding unspecified"},
		{"100::1", true, "discard-only"}, {"2001::1", true, "Teredo"}, {"2001:0:4136:e378::1", true, "Teredo"},
		{"2001:db8::1", true, "documentation"},
		{"93.184.216.34", false, "public"}, {"2606:4700::1111", false, "public"}, {"::ffff:93.184.216.34", false, "IPv4-mapped public"},
		{"2002:5db8:d822::1", false, "6to4 embedding a public IPv4"}, {"2001:4860:4860::8888", false, "public, beside Teredo"},
		{"101::1", true, "reserved, outside global unicast 2000::/3"}, {"4000::1", true, "reserved, outside global unicast 2000::/3"},
		{"2001:db9::1", false, "public, beside documentation"}, {"2c0f:fb50::1", false, "public, top of 2000::/3"},
	} {
		if got := privateAddr(netip.MustParseAddr(tc.addr)); got != tc.private {
			t.Errorf("%s: privateAddr(%s) = %v, want %v", tc.rule, tc.addr, got, tc.private)
		}
	}
}

// TestFetchDeadlinePerCheck: the fetches of one check share one overall
// deadline (FetchPolicy.Deadline, default 30 s), beside each fetch's own
// Timeout: a check of many required references to a slow server (each
// answer well within Timeout) ends in bounded time, the references not
// fetched in time "unverifiable" with ErrTimeout, and the check's error
// is unverifiable-ref (draft "Resource Use"; step 7). Without it, 64
// references could hold a receiver for 64 x Timeout.
func TestFetchDeadlinePerCheck(t *testing.T) {
	const each, n = 300 * time.Millisecond, 10 // 3 s of fetching without the deadline
	s := newServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(each):
			w.Write(object)
		case <-r.Context().Done():
		}
	})
	fp := fetchPolicy(s.host())
	fp.Timeout, fp.Deadline = 2*time.Second, 800*time.Millisecond
	c := mustChecker(t, Policy{RequireAll: true, Fetch: fp})
	rs := make([]handoff.ContextRef, n)
	for i := range rs {
		rs[i] = NewDigestRef(object, s.URL+"/obj?"+strconv.Itoa(i))
	}
	start := time.Now()
	fs := c.CheckRefs(context.Background(), delegator, rs, nil)
	took := time.Since(start)
	if took > 2*time.Second {
		t.Fatalf("the check took %v; the deadline is %v", took, fp.Deadline)
	}
	last := fs[n-1]
	if last.Outcome != handoff.RefUnverifiable || !errors.Is(last.Err, ErrTimeout) || !strings.Contains(last.Err.Error(), "whole deadline") {
		t.Fatalf("the last reference: %s %v; want unverifiable, the check's deadline passed", last.Outcome, last.Err)
	}
	if err := fs.Err(); !errors.Is(err, handoff.ErrUnverifiableRef) {
		t.Fatalf("the check's error %v; want unverifiable-ref", err)
	}
	if h := s.hits.Load(); h >= n {
		t.Fatalf("the server got %d requests; fetches past the deadline must not be made", h)
	}

	t.Run("defaults and bounds", func(t *testing.T) {
		if c := mustChecker(t, Policy{}); c.p.Fetch.Deadline != 30*time.Second {
			t.Fatalf("default Deadline %v, want 30s", c.p.Fetch.Deadline)
		}
		if _, err := NewChecker(Policy{Fetch: FetchPolicy{Deadline: -time.Second}}); err == nil || !strings.Contains(err.Error(), "Deadline") {
			t.Fatalf("a negative Deadline: %v", err)
		}
	})
}
