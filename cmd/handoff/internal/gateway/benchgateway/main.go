// Command benchgateway is the gateway's load tool (scripts/bench-gateway.sh
// runs it), in the style of agentgateway's published benchmark: a steady
// mix of A2A message/send requests (fresh offers, retransmissions and
// forgeries) against four targets measured in the same run:
//
//   - bare: the upstream agent itself (a plain a2a-go agent that answers
//     at once; it ignores the handoff in the metadata);
//   - nginx: the upstream behind Debian's nginx as a plain reverse proxy
//     (one proxy hop with no checks at all), when -nginx names the binary;
//   - pass: the upstream behind the same gateway on a route with
//     without_handoff: pass, sent the same messages with no handoff: what
//     the gateway's A2A machinery (a2a-go's server, task store and client)
//     costs before any check, the floor under the gateway's figures;
//   - gateway: the upstream behind handoff serve's gateway (SQLite store),
//     which verifies each offer and records each fresh one durably.
//
// For each target it measures the peak rate (closed loop, -workers
// concurrent senders) and then the latency at half the gateway's peak
// (open loop, requests started at a fixed rate), and prints requests/s,
// the peak's ratio to the bare upstream's, p50 and p99, and the latency
// each adds to the bare upstream's. The targets are: added p50 under 1 ms
// at half of the gateway's peak rate, and a peak of at least 0.5x the bare
// upstream's.
//
// With -handoff naming the handoff binary, a last phase restarts the
// gateway (`handoff serve`, SQLite store) under load: drained with
// SIGTERM at a third of the phase and killed with SIGKILL at two thirds,
// started again on the same store each time, while the senders ask
// again for every answer lost. It checks that no hop record is lost and
// that no work ran twice, against the upstream's own count by message.
//
// Everything runs in this one process but nginx (and that phase's gateway), so the load generator,
// the upstream and the gateway share the machine's cores: the figures
// compare the targets with each other, not with another machine's.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/gateway"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

const (
	planner = "https://planner.example"
	coder   = "https://coder.example"
	token   = "the-planner-bench-token-0123456789"
)

func main() {
	duration := flag.Duration("duration", 5*time.Second, "how long each phase runs")
	workers := flag.Int("workers", 16, "concurrent senders for the peak")
	bodySize := flag.Int("body", 1024, "octets of text in each message")
	nginx := flag.String("nginx", "", "the nginx binary, for the plain reverse proxy target (none: skipped)")
	fresh := flag.Float64("fresh", 0.8, "the share of fresh offers; the rest is half retransmissions, half forgeries")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to `FILE`")
	bin := flag.String("handoff", "", "the handoff `binary`, for the restart phase: handoff serve restarted under load (none: skipped)")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchgateway:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	err := run(*duration, *workers, *bodySize, *nginx, *fresh)
	if err == nil && *bin != "" {
		err = restartPhase(context.Background(), *bin, *workers, *bodySize, 2**duration)
	}
	if err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "benchgateway:", err)
		os.Exit(1)
	}
}

// agent is the upstream: it answers each message with a completed task
// at once, and counts the work it ran.
type agent struct{ runs atomic.Int64 }

func (a *agent) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	a.runs.Add(1)
	return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "done"}))
}

func (a *agent) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	return q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil))
}

func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

func run(duration time.Duration, workers, bodySize int, nginxBin string, freshShare float64) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "benchgateway")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	up := &agent{}
	upURL, stopUp, err := serve(a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(up)))
	if err != nil {
		return err
	}
	defer stopUp()

	keys := trust.New()
	plannerKey, err := newSigner(keys, planner)
	if err != nil {
		return err
	}
	coderKey, err := newSigner(keys, coder)
	if err != nil {
		return err
	}
	forger, err := newSigner(nil, planner) // not in the trust file
	if err != nil {
		return err
	}

	db := filepath.Join(dir, "hops.db")
	// An empty store whose memory began a minute ago: offers signed just
	// now are not "replay" by the restart rule.
	pre, err := sqlite.Open(ctx, db)
	if err != nil {
		return err
	}
	if err := pre.Forget(ctx, time.Now().Add(-time.Minute)); err != nil {
		return err
	}
	pre.Close()
	c, err := gateway.Parse(fmt.Appendf(nil, "listen: 127.0.0.1:0\nidentity: {id: %q, key_env: UNUSED}\ntrust_file: trust.json\nstore: sqlite:%s\nroutes:\n  - {name: plain, protocol: a2a, path: /plain/, upstream: %q, without_handoff: pass}\n  - {name: coder, protocol: a2a, path: /, upstream: %q}\n",
		coder, db, upURL+"/", upURL+"/"), dir)
	if err != nil {
		return err
	}
	gw, err := gateway.New(ctx, c, &gateway.Resources{Signer: coderKey, Keys: keys, Tokens: map[string]string{token: planner}},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer gw.Close()
	gwURL, stopGw, err := serve(gw.Handler())
	if err != nil {
		return err
	}
	defer stopGw()

	targets := []target{{name: "bare", url: upURL + "/"}}
	if nginxBin != "" {
		nURL, stop, err := startNginx(nginxBin, dir, strings.TrimPrefix(upURL, "http://"))
		if err != nil {
			return err
		}
		defer stop()
		targets = append(targets, target{name: "nginx", url: nURL + "/"})
	}
	targets = append(targets, target{name: "pass", url: gwURL + "/plain/", plain: true}, target{name: "gateway", url: gwURL + "/", checked: true})

	text := strings.Repeat("x", bodySize)
	mix := &mix{text: text, planner: plannerKey, forger: forger, fresh: freshShare}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers * 2, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}}

	fmt.Printf("benchgateway: %d workers, %s per phase, %d-octet messages, %.0f%% fresh offers, %.0f%% retransmissions, %.0f%% forgeries\n",
		workers, duration, bodySize, 100*freshShare, 50*(1-freshShare), 50*(1-freshShare))
	// Warm up each target (connections, the store, the retransmission pool).
	for i := range targets {
		if _, err := load(ctx, client, &targets[i], mix, workers, time.Second, 0); err != nil {
			return fmt.Errorf("%s: warm-up: %w", targets[i].name, err)
		}
	}
	for i := range targets {
		t := &targets[i]
		before := up.runs.Load()
		res, err := load(ctx, client, t, mix, workers, duration, 0)
		if err != nil {
			return fmt.Errorf("%s: peak: %w", t.name, err)
		}
		t.peak = res
		if t.checked || t.plain {
			// Every fresh offer (every plain message) ran upstream once;
			// nothing else did.
			if ran := up.runs.Load() - before; ran != res.fresh {
				return fmt.Errorf("gateway: the upstream ran %d times for %d fresh offers (%d requests)", ran, res.fresh, res.n)
			}
		}
	}
	gwPeak := targets[len(targets)-1].peak.rate()
	rate := gwPeak / 2
	for i := range targets {
		t := &targets[i]
		res, err := load(ctx, client, t, mix, workers*4, duration, rate)
		if err != nil {
			return fmt.Errorf("%s: at %.0f/s: %w", t.name, rate, err)
		}
		t.paced = res
	}

	bare := targets[0]
	fmt.Printf("\n%-8s %12s %8s | at %.0f req/s (half the gateway's peak): %9s %9s %11s %11s\n", "target", "peak req/s", "x bare", rate, "p50", "p99", "added p50", "added p99")
	for _, t := range targets {
		fmt.Printf("%-8s %12.0f %8.2f | %*s %9s %9s %11s %11s\n", t.name, t.peak.rate(), t.peak.rate()/bare.peak.rate(),
			len(fmt.Sprintf("at %.0f req/s (half the gateway's peak):", rate)), "",
			ms(t.paced.quantile(0.5)), ms(t.paced.quantile(0.99)),
			ms(t.paced.quantile(0.5)-bare.paced.quantile(0.5)), ms(t.paced.quantile(0.99)-bare.paced.quantile(0.99)))
	}
	gwT := targets[len(targets)-1]
	added := gwT.paced.quantile(0.5) - bare.paced.quantile(0.5)
	ratio := gwT.peak.rate() / bare.peak.rate()
	fmt.Printf("\ntargets: added p50 %s (want < 1 ms): %s; peak %.2fx bare (want >= 0.5x): %s\n",
		ms(added), verdict(added < time.Millisecond), ratio, verdict(ratio >= 0.5))
	fmt.Printf("gateway answers in the peak phase: %d fresh, %d retransmissions, %d forgeries\n", gwT.peak.fresh, gwT.peak.retrans, gwT.peak.forged)
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

func newSigner(keys *trust.Config, id string) (*handoff.Signer, error) {
	k, err := trust.GenerateKey()
	if err != nil {
		return nil, err
	}
	if keys != nil {
		tk, err := trust.NewKey(&k.PublicKey)
		if err != nil {
			return nil, err
		}
		if err := keys.Add(id, tk); err != nil {
			return nil, err
		}
	}
	return handoff.NewSigner(k)
}

type target struct {
	name    string
	url     string
	checked bool // the gateway: its answers are checked, not just counted
	plain   bool // sent messages with no handoff (the pass route)
	peak    *result
	paced   *result
}

// mix makes the request bodies: fresh offers (signed when made, before a
// phase starts), retransmissions of offers already sent, and forgeries
// (signed by a key the gateway does not trust).
type mix struct {
	text            string
	planner, forger *handoff.Signer
	fresh           float64
	mu              sync.Mutex
	sent            [][]byte // fresh bodies already sent once, for retransmissions
	seq             atomic.Int64
}

type kind int

const (
	kindFresh kind = iota
	kindRetrans
	kindForged
	kindPlain // a message with no handoff, for the pass route
)

type request struct {
	kind kind
	body []byte
}

// prepare makes n requests in the mix's proportions, fresh offers first
// signed now, so that signing is not timed.
func (m *mix) prepare(n int) ([]request, error) {
	reqs := make([]request, 0, n)
	for i := range n {
		k := kindFresh
		switch x := float64(i%100) / 100; {
		case x >= m.fresh+(1-m.fresh)/2:
			k = kindForged
		case x >= m.fresh:
			k = kindRetrans
		}
		var b []byte
		var err error
		switch k {
		case kindFresh:
			b, err = m.body(m.planner)
		case kindForged:
			b, err = m.body(m.forger)
		case kindRetrans:
			m.mu.Lock()
			if len(m.sent) > 0 {
				b = m.sent[int(m.seq.Add(1))%len(m.sent)]
			}
			m.mu.Unlock()
			if b == nil {
				k = kindFresh
				b, err = m.body(m.planner)
			}
		}
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, request{kind: k, body: b})
	}
	return reqs, nil
}

// preparePlain makes n message/send requests with no handoff.
func (m *mix) preparePlain(n int) ([]request, error) {
	reqs := make([]request, n)
	for i := range reqs {
		msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: m.text})
		msg.ContextID = "bench"
		b, err := m.envelope(msg)
		if err != nil {
			return nil, err
		}
		reqs[i] = request{kind: kindPlain, body: b}
	}
	return reqs, nil
}

// body is a message/send request carrying a new offer signed by s.
func (m *mix) body(s *handoff.Signer) ([]byte, error) {
	now := time.Now().Unix()
	el, err := s.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "bench", Iss: planner, Aud: coder, Iat: now, Exp: now + 120}, handoff.FormJWS)
	if err != nil {
		return nil, err
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: m.text})
	msg.ContextID = "bench"
	if err := a2ahandoff.AttachHandoff(msg, &handoff.Handoff{Offer: el}, handoff.JSON); err != nil {
		return nil, err
	}
	return m.envelope(msg)
}

// envelope is the JSON-RPC message/send request carrying msg.
func (m *mix) envelope(msg *a2a.Message) ([]byte, error) {
	return json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": m.seq.Add(1), "method": "message/send",
		"params": a2a.MessageSendParams{Message: msg},
	})
}

func (m *mix) remember(b []byte) {
	m.mu.Lock()
	if len(m.sent) < 4096 {
		m.sent = append(m.sent, b)
	}
	m.mu.Unlock()
}

type result struct {
	n, fresh, retrans, forged int64
	took                      time.Duration
	lat                       []time.Duration
}

func (r *result) rate() float64 { return float64(r.n) / r.took.Seconds() }

func (r *result) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	return r.lat[min(len(r.lat)-1, int(q*float64(len(r.lat))))]
}

// load sends requests to t for d: closed loop with workers senders when
// rate is 0, else open loop, one request started every 1/rate seconds
// (up to workers in flight). Requests are prepared before the clock
// starts; a peak phase that outruns them prepares more between rounds.
func load(ctx context.Context, client *http.Client, t *target, m *mix, workers int, d time.Duration, rate float64) (*result, error) {
	estimate := 4000
	if rate > 0 {
		estimate = int(rate*d.Seconds()) + workers
	}
	res := &result{}
	var mu sync.Mutex
	var firstErr error
	deadline := time.Now().Add(d)
	var busy time.Duration // the rounds' time, without preparing them
	for time.Now().Before(deadline) {
		prepare := m.prepare
		if t.plain {
			prepare = m.preparePlain
		}
		reqs, err := prepare(estimate)
		if err != nil {
			return nil, err
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		var tick <-chan time.Time
		var ticker *time.Ticker
		if rate > 0 {
			ticker = time.NewTicker(time.Duration(float64(time.Second) / rate))
			tick = ticker.C
		}
		roundStart := time.Now()
		slots := make(chan struct{}, workers)
		send := func(r request) {
			t0 := time.Now()
			err := post(ctx, client, t, r)
			lat := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			res.n++
			res.lat = append(res.lat, lat)
			switch r.kind {
			case kindFresh, kindPlain:
				res.fresh++
				if t.checked && r.kind == kindFresh { // retransmissions are of offers the gateway has seen
					m.remember(r.body)
				}
			case kindRetrans:
				res.retrans++
			case kindForged:
				res.forged++
			}
		}
		if rate > 0 {
			for i := 0; i < len(reqs) && time.Now().Before(deadline); i++ {
				<-tick
				slots <- struct{}{}
				wg.Add(1)
				go func(r request) {
					defer func() { <-slots; wg.Done() }()
					send(r)
				}(reqs[i])
			}
			ticker.Stop()
		} else {
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(deadline) {
						i := next.Add(1) - 1
						if int(i) >= len(reqs) {
							return
						}
						send(reqs[i])
					}
				}()
			}
		}
		wg.Wait()
		busy += time.Since(roundStart)
		if firstErr != nil {
			return nil, firstErr
		}
		if rate > 0 {
			break
		}
		estimate *= 2
	}
	res.took = busy
	slices.Sort(res.lat)
	return res, nil
}

// post sends one request and checks the answer: from the bare upstream
// and nginx a JSON-RPC result; from the gateway, for a fresh offer a
// completed task or message with the signed statuses, for a forgery a
// rejected task, for a retransmission the recorded status.
func post(ctx context.Context, client *http.Client, t *target, r request) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(r.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Error != nil || env.Result == nil {
		return fmt.Errorf("not a JSON-RPC result: %.300s", b)
	}
	res := string(env.Result)
	if t.plain && strings.Contains(res, a2ahandoff.Key) {
		return fmt.Errorf("a handoff in the answer to a message with none: %.300s", res)
	}
	if !t.checked {
		return nil
	}
	switch r.kind {
	case kindForged:
		if !strings.Contains(res, `"rejected"`) {
			return fmt.Errorf("a forged offer was not rejected: %.300s", res)
		}
	default:
		if !strings.Contains(res, a2ahandoff.Key) {
			return fmt.Errorf("no signed status in the answer to a %s offer: %.300s", map[kind]string{kindFresh: "fresh", kindRetrans: "retransmitted"}[r.kind], res)
		}
		if strings.Contains(res, `"rejected"`) {
			return errors.New("an offer was rejected: " + res[:min(len(res), 300)])
		}
	}
	return nil
}

// startNginx runs nginx as a plain reverse proxy to upstream (host:port),
// in the foreground, with its files in dir.
func startNginx(bin, dir, upstream string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	nd := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(filepath.Join(nd, "logs"), 0o755); err != nil {
		return "", nil, err
	}
	conf := fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream up { server %[2]s; keepalive 128; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`, nd, upstream, addr)
	cf := filepath.Join(nd, "nginx.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "-p", nd, "-c", cf, "-e", filepath.Join(nd, "logs", "error.log"), "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("nginx: %w", err)
	}
	// SIGQUIT: nginx's graceful stop, in which the master ends its
	// workers (a killed master leaves them running, holding our stderr).
	stop := func() {
		cmd.Process.Signal(syscall.SIGQUIT)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			stop()
			log, _ := os.ReadFile(filepath.Join(nd, "logs", "error.log"))
			return "", nil, fmt.Errorf("nginx did not listen on %s: %s", addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "http://" + addr, stop, nil
}
