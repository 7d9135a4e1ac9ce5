package refs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// FetchPolicy bounds fetching an object from a reference's loc (draft
// "Resource Use": a receiver SHOULD NOT fetch loc URIs from untrusted
// senders without the safeguards it applies to any untrusted URL). Every
// safeguard is on in the zero value, which fetches nothing at all: no
// sender is trusted and no host is allowed. Only a reference that policy
// requires is ever fetched.
type FetchPolicy struct {
	// Senders are the AgentIds (the verified offer's iss, or status's)
	// whose references may be fetched. Empty: fetch for nobody.
	Senders []string
	// Schemes that loc may have, lower case; only "https" and "http"
	// are implemented. Empty: https only.
	Schemes []string
	// Hosts that may be fetched from: "name" (any port) or "name:port",
	// compared case-insensitively, no wildcards. Empty: none.
	Hosts []string
	// MaxSize caps the object's octets; default 1 MiB.
	MaxSize int64
	// Timeout bounds the whole fetch, redirects and body included;
	// default 10 s.
	Timeout time.Duration
	// Deadline bounds all the fetches of one check (one offer's or
	// status's references, up to 64 of them, each within Timeout):
	// counted from its first fetch, past it every fetch still running is
	// ended and every later one is refused, ErrTimeout either way (the
	// reference is "unverifiable"). Default 30 s.
	Deadline time.Duration
	// MaxRedirects bounds the redirects followed (each to the same host
	// and an allowed scheme, never from https to http); default 3.
	MaxRedirects int
	// AllowPrivate permits connecting to loopback, private, link-local,
	// site-local, shared (CGNAT), unspecified, multicast, documentation
	// and reserved addresses, and to IPv6 forms that embed or tunnel to an
	// IPv4 address (IPv4-compatible, IPv4-translated, NAT64, Teredo; 6to4
	// is judged by the IPv4 address it embeds). Off by default;
	// the address is checked when the connection is made, after name
	// resolution, so a name that resolves (or is rebound) to such an
	// address is refused too.
	AllowPrivate bool
	// RootCAs verify https servers; nil: the system's roots.
	RootCAs *x509.CertPool
}

const (
	defaultMaxSize      = 1 << 20
	defaultTimeout      = 10 * time.Second
	defaultDeadline     = 30 * time.Second
	defaultMaxRedirects = 3
)

// fetcher is a FetchPolicy made ready: defaults applied, one http.Client.
type fetcher struct {
	p      FetchPolicy
	client *http.Client
}

func newFetcher(p FetchPolicy) (*fetcher, error) {
	if p.MaxSize < 0 || p.Timeout < 0 || p.Deadline < 0 || p.MaxRedirects < 0 {
		return nil, errors.New("refs: fetch MaxSize, Timeout, Deadline and MaxRedirects must not be negative")
	}
	if p.Deadline == 0 {
		p.Deadline = defaultDeadline
	}
	if p.MaxSize == 0 {
		p.MaxSize = defaultMaxSize
	}
	if p.Timeout == 0 {
		p.Timeout = defaultTimeout
	}
	if p.MaxRedirects == 0 {
		p.MaxRedirects = defaultMaxRedirects
	}
	if len(p.Schemes) == 0 {
		p.Schemes = []string{"https"}
	}
	p.Schemes = slices.Clone(p.Schemes)
	for i, s := range p.Schemes {
		s = strings.ToLower(s)
		if s != "https" && s != "http" {
			return nil, fmt.Errorf("refs: fetch scheme %q is not implemented (https, http)", s)
		}
		p.Schemes[i] = s
	}
	p.Hosts = slices.Clone(p.Hosts)
	for i, h := range p.Hosts {
		if h == "" || strings.ContainsAny(h, "/*@ ") {
			return nil, fmt.Errorf("refs: fetch host %q is not a host name or host:port", h)
		}
		p.Hosts[i] = strings.ToLower(h)
	}
	p.Senders = slices.Clone(p.Senders)
	f := &fetcher{p: p}
	d := &net.Dialer{Timeout: p.Timeout}
	if !p.AllowPrivate {
		d.Control = refusePrivate
	}
	tr := &http.Transport{
		Proxy:       nil, // a proxy would make the dial-time address check meaningless
		DialContext: d.DialContext,
		TLSClientConfig: &tls.Config{
			RootCAs:    p.RootCAs,
			MinVersion: tls.VersionTLS12,
		},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   p.Timeout,
		ResponseHeaderTimeout: p.Timeout,
		// The digest is over the octets the server sends; no transparent
		// gzip, which would hash a decoded form the sender may not mean.
		DisableCompression: true,
		MaxIdleConns:       4,
		IdleConnTimeout:    30 * time.Second,
	}
	f.client = &http.Client{Transport: tr, Timeout: p.Timeout, CheckRedirect: f.checkRedirect}
	return f, nil
}

// blockedPrefixes are the ranges netip's predicates do not cover.
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation (TEST-NET-1)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation (TEST-NET-2)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation (TEST-NET-3)
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	// IPv6 forms that embed or reach an IPv4 address, so may reach a
	// private one: refused whole (6to4 is judged by its IPv4 instead, in
	// privateAddr).
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated), e.g. ::7f00:1
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: may reach any IPv4, private ones too
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2001::/32"),       // Teredo: a tunnel to an IPv4 host
	// IPv6 ranges that are not public unicast.
	netip.MustParsePrefix("100::/64"),      // discard-only
	netip.MustParsePrefix("2001:db8::/32"), // documentation
	netip.MustParsePrefix("fec0::/10"),     // site-local (deprecated, still routed locally)
}

// globalUnicast is IPv6's global unicast space (RFC 4291 section 2.4).
var globalUnicast = netip.MustParsePrefix("2000::/3")

// sixToFour is 2002::/16, whose next 32 bits are an IPv4 address.
var sixToFour = netip.MustParsePrefix("2002::/16")

// privateAddr reports whether a is not a public unicast address.
func privateAddr(a netip.Addr) bool {
	a = a.Unmap()
	if sixToFour.Contains(a) {
		// 6to4: judged by the IPv4 address it embeds (2002:AABB:CCDD::
		// reaches AA.BB.CC.DD through a relay).
		b := a.As16()
		return privateAddr(netip.AddrFrom4([4]byte(b[2:6])))
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || !a.IsValid() {
		return true
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		// Outside 2000::/3 IPv6 is reserved or unassigned, nothing a
		// public object is served from.
		return true
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// refusePrivate is the dialer's Control hook: it sees the address actually
// being connected to, after DNS, so rebinding a name cannot get past it.
func refusePrivate(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot read the address %q", ErrPrivateAddress, address)
	}
	if privateAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrPrivateAddress, ap.Addr())
	}
	return nil
}

func (f *fetcher) schemeAllowed(s string) bool {
	return slices.Contains(f.p.Schemes, strings.ToLower(s))
}

func (f *fetcher) hostAllowed(u *url.URL) bool {
	host, hostport := strings.ToLower(u.Hostname()), strings.ToLower(u.Host)
	for _, h := range f.p.Hosts {
		if h == hostport || h == host {
			return true
		}
	}
	return false
}

func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	switch {
	case len(via) > f.p.MaxRedirects:
		return fmt.Errorf("%w: more than %d redirects", ErrRedirect, f.p.MaxRedirects)
	case req.URL.User != nil:
		// As for loc itself: a redirect must not make this receiver send
		// credentials the sender chose.
		bare := *req.URL
		bare.User = nil // never repeat them, not even in an error
		return fmt.Errorf("%w: redirect to %q carries credentials", ErrRedirect, bare.String())
	case !strings.EqualFold(req.URL.Host, first.Host):
		return fmt.Errorf("%w: redirect from host %q to another host %q", ErrRedirect, first.Host, req.URL.Host)
	case !f.schemeAllowed(req.URL.Scheme):
		return fmt.Errorf("%w: redirect to scheme %q", ErrSchemeNotAllowed, req.URL.Scheme)
	case strings.EqualFold(via[len(via)-1].URL.Scheme, "https") && !strings.EqualFold(req.URL.Scheme, "https"):
		return fmt.Errorf("%w: redirect from https to %s", ErrRedirect, req.URL.Scheme)
	}
	return nil
}

// budget is the fetching of one check: its fetches share one deadline
// (FetchPolicy.Deadline), set at the first fetch, so that a check of many
// references to slow servers ends in bounded time. Not safe for
// concurrent use (a check fetches one reference at a time).
type budget struct {
	f      *fetcher
	parent context.Context
	ctx    context.Context // nil until the first fetch
	cancel context.CancelFunc
}

// fetch is the fetcher's fetch within the check's deadline.
func (b *budget) fetch(loc, sender string) ([]byte, error) {
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithTimeout(b.parent, b.f.p.Deadline)
	}
	if b.ctx.Err() != nil && b.parent.Err() == nil {
		return nil, fmt.Errorf("%w: %s not fetched: the check's fetches took their whole deadline of %v", ErrTimeout, loc, b.f.p.Deadline)
	}
	out, err := b.f.fetch(b.ctx, loc, sender)
	if err != nil && b.ctx.Err() != nil && b.parent.Err() == nil {
		return nil, fmt.Errorf("%w: %s: the check's fetches took their whole deadline of %v: %v", ErrTimeout, loc, b.f.p.Deadline, err)
	}
	return out, err
}

// end releases the deadline's timer.
func (b *budget) end() {
	if b.cancel != nil {
		b.cancel()
	}
}

// fetch obtains the object at loc for sender, under every safeguard. Its
// errors wrap the sentinel of the safeguard that refused, or ErrFetch.
func (f *fetcher) fetch(ctx context.Context, loc, sender string) ([]byte, error) {
	if loc == "" {
		return nil, fmt.Errorf("%w, and the reference has no loc to fetch them from", ErrNoOctets)
	}
	if !slices.Contains(f.p.Senders, sender) {
		return nil, fmt.Errorf("%w: %q may not make this receiver fetch %q", ErrUntrustedSender, sender, loc)
	}
	u, err := url.Parse(loc)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%w: loc %q is not an absolute URL with a host", ErrFetch, loc)
	}
	if !f.schemeAllowed(u.Scheme) {
		return nil, fmt.Errorf("%w: %q (allowed: %s)", ErrSchemeNotAllowed, u.Scheme, strings.Join(f.p.Schemes, ", "))
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: loc %q carries credentials", ErrFetch, loc)
	}
	if !f.hostAllowed(u) {
		return nil, fmt.Errorf("%w: %q is not on the fetch allowlist", ErrHostNotAllowed, u.Host)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, f.classify(loc, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered HTTP %d", ErrFetch, loc, resp.StatusCode)
	}
	if resp.ContentLength > f.p.MaxSize {
		return nil, fmt.Errorf("%w: %s announces %d octets, the cap is %d", ErrTooLarge, loc, resp.ContentLength, f.p.MaxSize)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, f.p.MaxSize+1))
	if err != nil {
		return nil, f.classify(loc, err)
	}
	if int64(len(b)) > f.p.MaxSize {
		return nil, fmt.Errorf("%w: %s sent more than the cap of %d octets", ErrTooLarge, loc, f.p.MaxSize)
	}
	return b, nil
}

// classify keeps a safeguard's own error and names a timeout as one. The
// client's *url.Error is replaced by loc: it names the URL last requested,
// which for a refused redirect may carry credentials.
func (f *fetcher) classify(loc string, err error) error {
	if ue, ok := err.(*url.Error); ok {
		err = fmt.Errorf("GET %s: %w", loc, ue.Err)
	}
	for _, s := range []error{ErrPrivateAddress, ErrRedirect, ErrSchemeNotAllowed} {
		if errors.Is(err, s) {
			return err
		}
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %s after %v: %v", ErrTimeout, loc, f.p.Timeout, err)
	}
	return fmt.Errorf("%w: %v", ErrFetch, err)
}
