package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// drainTimeout bounds the graceful drain of in-flight requests and open
// streams on SIGTERM or SIGINT.
const drainTimeout = 30 * time.Second

// Addrs are the addresses a running gateway listens on ("" for one it
// does not open).
type Addrs struct{ Listen, Admin, Egress string }

// Run is "handoff serve --config path": it serves until SIGTERM or
// SIGINT (then drains), and reloads on SIGHUP. ready, if not nil, gets
// the addresses once every listener listens.
func Run(ctx context.Context, path string, log *slog.Logger, ready func(Addrs)) error {
	c, err := Load(path)
	if err != nil {
		return err
	}
	res, err := c.Open()
	if err != nil {
		return err
	}
	for _, w := range res.Warnings {
		log.Warn(w, "config", path)
	}
	s, err := New(ctx, c, res, log)
	if err != nil {
		return err
	}
	defer s.Close()
	// A brand-new store refuses offers issued up to the end of its first
	// second (the restart rule: it cannot tell them from replays). Not
	// listening before that second is over keeps the docs' promise that
	// offers signed after the start are taken.
	since, err := s.store.Since(ctx)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if wait := time.Until(since.Truncate(time.Second).Add(time.Second)); wait > 0 {
		time.Sleep(wait)
	}

	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if res.TLS != nil {
		ln = tls.NewListener(ln, res.TLS)
	}
	// ReadTimeout bounds reading a request, its body included (a caller
	// that trickles a body holds no connection for long); it does not
	// bound a streamed answer. IdleTimeout closes idle keep-alives.
	main := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	servers := []*http.Server{main}
	errc := make(chan error, 3)
	go func() { errc <- main.Serve(ln) }()
	addrs := Addrs{Listen: ln.Addr().String()}
	closeAll := func() {
		for _, srv := range servers {
			srv.Close()
		}
	}
	if c.Admin != "" {
		aln, err := net.Listen("tcp", c.Admin)
		if err != nil {
			closeAll()
			return fmt.Errorf("admin: %w", err)
		}
		if res.AdminTLS != nil {
			aln = tls.NewListener(aln, res.AdminTLS)
		}
		admin := &http.Server{Handler: s.AdminHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		servers = append(servers, admin)
		go func() { errc <- admin.Serve(aln) }()
		addrs.Admin = aln.Addr().String()
	}
	if c.Egress.Listen != "" {
		eln, err := net.Listen("tcp", c.Egress.Listen)
		if err != nil {
			closeAll()
			return fmt.Errorf("egress: %w", err)
		}
		egress := &http.Server{Handler: s.EgressHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
		servers = append(servers, egress)
		go func() { errc <- egress.Serve(eln) }()
		addrs.Egress = eln.Addr().String()
	}
	// Signals are taken before anyone is told the gateway is up: a SIGHUP
	// sent then must reload it, not end the process.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	s.Sweep(sweepCtx, time.Minute)
	log.Info("serving", "listen", addrs.Listen, "admin", addrs.Admin, "egress", addrs.Egress, "identity", c.Identity.ID, "routes", len(c.Routes),
		"egress_routes", len(c.Egress.Routes), "store", redactedStore(c.Store), "store_since", since.UTC().Format(time.RFC3339))
	if ready != nil {
		ready(addrs)
	}

	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				s.Reload(path) // logs and counts its own failure
				continue
			}
			log.Info("draining", "signal", sig.String(), "timeout", drainTimeout.String())
			return shutdown(s, servers, log)
		case <-ctx.Done():
			return shutdown(s, servers, log)
		case err := <-errc:
			shutdown(s, servers, log)
			return err
		}
	}
}

// shutdown stops taking requests and waits, up to drainTimeout in all,
// for those in flight (streams included) and then for the hops' runs,
// which a2a-go carries on after a non-blocking request was answered:
// their outcomes are recorded before the store closes. A run still going
// then is left as its record says (accepted; its outcome unknown), and
// the log says how many.
func shutdown(s *Server, servers []*http.Server, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("drain: requests still in flight after %s: %w", drainTimeout, err))
		}
	}
	if err := s.Drain(ctx); err != nil {
		errs = append(errs, fmt.Errorf("drain: after %s: %w", drainTimeout, err))
	}
	if len(errs) == 0 {
		log.Info("drained")
	}
	return errors.Join(errs...)
}
