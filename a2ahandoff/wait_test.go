package a2ahandoff_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// Executor.Wait returns only when no detached OnCancel call runs (draft
// "Lifecycle": the delegate passes "canceled" down after answering the
// Cancel Task request; on shutdown that call must end before the stores
// it uses close): it waits while OnCancel is blocked and returns after it
// ended, also when OnCancel panicked.
func TestWaitForOnCancel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		panic bool
	}{
		{"OnCancel returns", false},
		{"OnCancel panics", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			entered, release := make(chan struct{}, 1), make(chan struct{})
			var ended atomic.Bool
			srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, func(c *a2ahandoff.ServerConfig) {
				c.OnCancelTimeout = time.Hour // only release ends it
				c.OnCancel = func(ctx context.Context, iss, hop string, offer handoff.Digest) {
					entered <- struct{}{}
					<-release
					ended.Store(true)
					if tc.panic {
						panic("OnCancel broke")
					}
				}
			})
			srv.x.Wait() // nothing started: returns at once
			c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), handoff.JSON)
			r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "wait"}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
			if err != nil {
				t.Fatal(err)
			}
			<-srv.agent.started
			if cr, err := c.Cancel(ctx, r.Hop); err != nil || cr.State() != a2a.TaskStateCanceled {
				t.Fatalf("cancel: %v, want canceled", err)
			}
			<-entered // OnCancel runs, blocked until release
			waited := make(chan struct{})
			go func() {
				srv.x.Wait()
				close(waited)
			}()
			select {
			case <-waited:
				t.Fatal("Wait returned while OnCancel was blocked")
			default:
			}
			close(release)
			<-waited
			if !ended.Load() {
				t.Fatal("Wait returned before OnCancel ended")
			}
			<-srv.agent.stopped
			srv.x.Wait() // again: nothing runs, returns at once
		})
	}
}

// sentConfigs records, as JSON at the moment each message/send leaves,
// the send configuration of the request.
type sentConfigs struct {
	a2aclient.PassthroughInterceptor
	mu   *sync.Mutex
	seen *[]string
}

func (s sentConfigs) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	if p, ok := req.Payload.(*a2a.MessageSendParams); ok && p != nil {
		b, err := json.Marshal(p.Config)
		if err != nil {
			return ctx, err
		}
		s.mu.Lock()
		*s.seen = append(*s.seen, string(b))
		s.mu.Unlock()
	}
	return ctx, nil
}

// Ask sends the hop again with the send configuration of the first
// message (draft "Asking Again": the identical request), even when the
// application changes the configuration it passed after the first send:
// the client keeps its own copy.
func TestAskKeepsCopyOfSendConfiguration(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	var mu sync.Mutex
	var seen []string
	ac := a2aClient(t, srv.url, "token-of-"+assistantID)
	ac.AddCallInterceptor(sentConfigs{mu: &mu, seen: &seen})
	c, err := a2ahandoff.NewClient(ac, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), a2ahandoff.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &a2a.MessageSendConfig{Blocking: new(true), HistoryLength: new(5), AcceptedOutputModes: []string{"text/plain"}}
	r := offered(t, c, "copy the configuration", "complete", cfg)
	wantTaskState(t, r, a2a.TaskStateCompleted)
	// The application reuses its configuration for something else.
	*cfg.Blocking = false
	*cfg.HistoryLength = 0
	cfg.AcceptedOutputModes[0] = "image/png"
	cfg.PushConfig = &a2a.PushConfig{URL: "https://elsewhere.example/push"}
	a, err := c.Ask(ctx, r.Hop)
	if err != nil {
		t.Fatal(err)
	}
	noRefusals(t, a)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("%d messages sent, want 2", len(seen))
	}
	if seen[1] != seen[0] {
		t.Fatalf("asked again with configuration %s, want the first's %s", seen[1], seen[0])
	}
	if want := `{"acceptedOutputModes":["text/plain"],"blocking":true,"historyLength":5}`; seen[0] != want {
		t.Fatalf("first configuration %s, want %s", seen[0], want)
	}
}

// Executor.Drain waits for the agent's runs, which a2a-go starts after
// answering a non-blocking request (so an HTTP Shutdown does not wait for
// them), and says how many are left when its ctx ends first.
func TestDrain(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	if err := srv.x.Drain(ctx); err != nil {
		t.Fatalf("Drain with nothing running: %v", err)
	}
	c := w.client(t, srv.url, assistantID, w.delegator(t, assistantID, store.NewMemory(time.Now()), handoff.FormJWS), handoff.JSON)
	r, err := c.Offer(ctx, delegator.Offer{Aud: plannerID, Work: "wait"}, say("block"), &a2a.MessageSendConfig{Blocking: new(false)})
	if err != nil {
		t.Fatal(err)
	}
	<-srv.agent.started
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := srv.x.Drain(short); err == nil || !strings.Contains(err.Error(), "1 runs") {
		t.Fatalf("Drain while the agent runs: %v, want 1 run still in progress", err)
	}
	drained := make(chan error, 1)
	go func() { drained <- srv.x.Drain(ctx) }()
	if _, err := c.Cancel(ctx, r.Hop); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return after the run ended")
	}
}
