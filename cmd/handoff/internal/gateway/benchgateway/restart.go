package main

// The restart phase (issue 16: "restart of the gateway in the middle of
// that load loses no hop record and runs no work twice, checked against
// the upstream's own count of the work it ran"). It runs the real
// `handoff serve` binary, twice stopped under load: once drained
// (SIGTERM) and once killed (SIGKILL, a crash), each time started again
// on the same store and address. Its senders behave as delegators do:
// a request that got no answer is sent again, octet for octet, until it
// is answered; at the end every offer is sent once more.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/sqlite"
	"github.com/quantumlearningmachines/handoff/trust"
)

// ledger is the upstream of the restart phase: it answers at once, and
// counts the work it ran by message id (the gateway forwards the
// message as sent), the count the gateway's records are checked against.
type ledger struct {
	mu   sync.Mutex
	runs map[string]int
}

func (l *ledger) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	l.mu.Lock()
	l.runs[rc.Message.ID]++
	l.mu.Unlock()
	return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "done"}))
}

func (l *ledger) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	return q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil))
}

// sentOffer is one fresh offer of the restart phase.
type sentOffer struct {
	hop, msgID string
	body       []byte
}

// gatewayProcess is one `handoff serve` run.
type gatewayProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// restartPhase runs the restart check for d with workers senders, and
// prints what it found; an error means a record was lost, work ran
// twice, or the gateway did not come back.
func restartPhase(ctx context.Context, bin string, workers, bodySize int, d time.Duration) error {
	dir, err := os.MkdirTemp("", "benchgateway-restart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	up := &ledger{runs: map[string]int{}}
	upURL, stopUp, err := serve(a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(up)))
	if err != nil {
		return err
	}
	defer stopUp()

	plannerPriv, err := trust.GenerateKey()
	if err != nil {
		return err
	}
	coderPriv, err := trust.GenerateKey()
	if err != nil {
		return err
	}
	plannerKey, err := handoff.NewSigner(plannerPriv)
	if err != nil {
		return err
	}
	files, err := writeGatewayFiles(dir, plannerPriv, coderPriv, upURL)
	if err != nil {
		return err
	}

	gw, err := startGateway(bin, files)
	if err != nil {
		return err
	}
	defer func() { gw.stop(syscall.SIGKILL) }()

	text := strings.Repeat("x", bodySize)
	m := &mix{text: text, planner: plannerKey}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers * 2, IdleConnTimeout: time.Minute}}
	t := &target{name: "gateway", url: files.url, checked: true}

	var (
		mu      sync.Mutex
		sent    []sentOffer
		retries atomic.Int64
		failure error
	)
	fail := func(err error) {
		mu.Lock()
		if failure == nil {
			failure = err
		}
		mu.Unlock()
	}
	// deliver sends one request until it is answered: an error while the
	// gateway is down (refused, reset, cut off mid-answer) is retried; a
	// wrong answer is a failure of the run.
	deliver := func(r request) {
		for give := time.Now().Add(time.Minute); ; {
			err := post(ctx, client, t, r)
			if err == nil {
				return
			}
			if !transient(err) || time.Now().After(give) {
				fail(fmt.Errorf("restart: %w", err))
				return
			}
			retries.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}

	// The load runs until a third of d after the last restart, so that
	// both stops come under load however long a start takes.
	var loading atomic.Bool
	loading.Store(true)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loading.Load() {
				o, err := m.freshOffer()
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				sent = append(sent, o)
				mu.Unlock()
				deliver(request{kind: kindFresh, body: o.body})
			}
		}()
	}

	// A drain after a third of d, a crash a third of d after the new
	// gateway is ready; each time a new gateway on the same store and
	// address.
	downRetries := map[syscall.Signal]int64{}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		time.Sleep(d / 3)
		before := retries.Load()
		if err := gw.stop(sig); err != nil && sig == syscall.SIGTERM {
			fail(fmt.Errorf("restart: the drained gateway: %w", err))
		}
		next, err := startGateway(bin, files)
		if err != nil {
			fail(err)
			break
		}
		gw = next
		downRetries[sig] = retries.Load() - before
	}
	time.Sleep(d / 3)
	loading.Store(false)
	wg.Wait()
	if failure != nil {
		return failure
	}
	// Each stop must have cut off requests (sent again after it), or the
	// phase checked nothing.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if downRetries[sig] == 0 {
			return fmt.Errorf("restart: no request was refused or cut off by the %s: the stop did not come under load", sig)
		}
	}

	// Every offer once more, as a delegator that lost the reply asks
	// again: each is answered from its record, none is forwarded.
	asked := make(chan sentOffer)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range asked {
				deliver(request{kind: kindRetrans, body: o.body})
			}
		}()
	}
	for _, o := range sent {
		asked <- o
	}
	close(asked)
	wg.Wait()
	if failure != nil {
		return failure
	}
	if err := gw.stop(syscall.SIGTERM); err != nil {
		return fmt.Errorf("restart: the last gateway: %w", err)
	}
	return checkRestart(ctx, files.db, sent, up, retries.Load(), d)
}

// checkRestart compares the store's records with what was sent and
// what the upstream ran.
func checkRestart(ctx context.Context, db string, sent []sentOffer, up *ledger, retries int64, d time.Duration) error {
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		return err
	}
	defer st.Close()
	flagged := map[string]bool{}
	flags, err := st.Flags(ctx, false)
	if err != nil {
		return err
	}
	for _, f := range flags {
		flagged[f.Hop] = true
	}
	ours := map[string]bool{}
	var completed, cutOff int
	for _, o := range sent {
		ours[o.msgID] = true
		r, err := st.Get(ctx, planner, o.hop)
		if err != nil {
			return fmt.Errorf("restart: hop %s was answered but its record is gone: %w", o.hop, err)
		}
		ran := up.runs[o.msgID]
		switch {
		case ran > 1:
			return fmt.Errorf("restart: hop %s ran %d times upstream", o.hop, ran)
		case r.State == store.Completed && ran != 1:
			return fmt.Errorf("restart: hop %s is recorded completed but the upstream ran it %d times", o.hop, ran)
		case r.State == store.Accepted && !flagged[o.hop]:
			return fmt.Errorf("restart: hop %s was left accepted (upstream runs: %d) and not flagged for the operator", o.hop, ran)
		case r.State == store.Accepted:
			cutOff++
		case r.State == store.Completed:
			completed++
		default:
			return fmt.Errorf("restart: hop %s is recorded %s", o.hop, r.State)
		}
	}
	total := 0
	for id, n := range up.runs {
		if !ours[id] {
			return fmt.Errorf("restart: the upstream ran message %s, which no offer carried", id)
		}
		total += n
	}
	fmt.Printf("\nrestart under load (%s; the gateway drained with SIGTERM, then killed with SIGKILL, each %s after the last start, and started again on the same store each time):\n", d, d/3)
	fmt.Printf("  %d fresh offers sent, %d requests sent again while the gateway was down, then every offer sent once more\n", len(sent), retries)
	fmt.Printf("  records: %d of %d hops (none lost): %d completed, %d left accepted by the crash and flagged 'unknown outcome'\n", len(sent), len(sent), completed, cutOff)
	fmt.Printf("  upstream ran %d works for %d offers: none twice, every completed hop once: met\n", total, len(sent))
	return nil
}

// transient: the gateway was not there to answer (it is restarting).
func transient(err error) bool {
	s := err.Error()
	for _, w := range []string{"connection refused", "connection reset", "EOF", "broken pipe", "HTTP 503", "server closed"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// freshOffer signs a new offer and makes its message/send request.
func (m *mix) freshOffer() (sentOffer, error) {
	now := time.Now().Unix()
	hop := handoff.NewHop()
	el, err := m.planner.SignOffer(&handoff.Offer{Hop: hop, Dialog: "bench", Iss: planner, Aud: coder, Iat: now, Exp: now + 300}, handoff.FormJWS)
	if err != nil {
		return sentOffer{}, err
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: m.text})
	msg.ContextID = "bench"
	if err := a2ahandoff.AttachHandoff(msg, &handoff.Handoff{Offer: el}, handoff.JSON); err != nil {
		return sentOffer{}, err
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.seq.Add(1), "method": "message/send",
		"params": a2a.MessageSendParams{Message: msg}})
	return sentOffer{hop: hop, msgID: msg.ID, body: b}, err
}

// gatewayFiles are the files of the gateway under test.
type gatewayFiles struct {
	config, db, log string
	url, admin      string
}

func writeGatewayFiles(dir string, plannerPriv, coderPriv *ecdsa.PrivateKey, upURL string) (*gatewayFiles, error) {
	type agentKeys struct {
		ID   string            `json:"id"`
		Keys []json.RawMessage `json:"keys"`
	}
	var agents []agentKeys
	for _, a := range []struct {
		id string
		k  *ecdsa.PrivateKey
	}{{planner, plannerPriv}, {coder, coderPriv}} {
		pub, err := trust.MarshalPublicJWK(&a.k.PublicKey)
		if err != nil {
			return nil, err
		}
		agents = append(agents, agentKeys{ID: a.id, Keys: []json.RawMessage{pub}})
	}
	trustJSON, err := json.Marshal(map[string]any{"agents": agents})
	if err != nil {
		return nil, err
	}
	coderJWK, err := trust.MarshalPrivateJWK(coderPriv)
	if err != nil {
		return nil, err
	}
	tokens, err := json.Marshal(map[string]string{token: planner})
	if err != nil {
		return nil, err
	}
	f := &gatewayFiles{config: filepath.Join(dir, "gateway.yaml"), db: filepath.Join(dir, "hops.db"), log: filepath.Join(dir, "gateway.log")}
	for name, b := range map[string][]byte{"trust.json": trustJSON, "coder.jwk": coderJWK, "tokens.json": tokens} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	listen, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	f.url, f.admin = "http://"+listen+"/", "http://"+admin
	// An empty store whose memory began a minute ago: offers signed just
	// now are not "replay" by the restart rule. The gateways that follow
	// find it as the last one left it.
	pre, err := sqlite.Open(context.Background(), f.db)
	if err != nil {
		return nil, err
	}
	if err := pre.Forget(context.Background(), time.Now().Add(-time.Minute)); err != nil {
		pre.Close()
		return nil, err
	}
	if err := pre.Close(); err != nil {
		return nil, err
	}
	config := fmt.Sprintf(`listen: %s
admin: %s
identity: {id: %q, key_file: %s}
trust_file: %s
store: sqlite:%s
recover_on_start: true
inbound: {bearer_tokens_file: %s}
routes:
  - {name: coder, protocol: a2a, path: /, upstream: %q}
`, listen, admin, coder, filepath.Join(dir, "coder.jwk"), filepath.Join(dir, "trust.json"), f.db, filepath.Join(dir, "tokens.json"), upURL+"/")
	return f, os.WriteFile(f.config, []byte(config), 0o600)
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startGateway runs `handoff serve` and waits until /readyz says ready.
func startGateway(bin string, f *gatewayFiles) (*gatewayProcess, error) {
	logf, err := os.OpenFile(f.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(bin, "serve", "--config", f.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("restart: starting the gateway: %w", err)
	}
	p := &gatewayProcess{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(f.admin + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("restart: the gateway exited at start (%v): %s", p.err, tail(f.log))
		default:
		}
		if time.Now().After(deadline) {
			p.stop(syscall.SIGKILL)
			return nil, fmt.Errorf("restart: the gateway was not ready in 30s: %s", tail(f.log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig and waits for the process to end; for SIGTERM, a clean
// exit (the drain finished) is expected.
func (p *gatewayProcess) stop(sig syscall.Signal) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(45 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not stop within 45s of %s", sig)
	}
	if sig == syscall.SIGKILL {
		return nil
	}
	return p.err
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}
