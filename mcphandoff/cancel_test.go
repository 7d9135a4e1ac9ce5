package mcphandoff_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// recorder notes the POST bodies a client sends.
type recorder struct {
	base  http.RoundTripper
	mu    sync.Mutex
	posts [][]byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			body, _ := io.ReadAll(b)
			r.mu.Lock()
			r.posts = append(r.posts, body)
			r.mu.Unlock()
		}
	}
	return r.base.RoundTrip(req)
}

func (r *recorder) count(sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, b := range r.posts {
		if bytes.Contains(b, []byte(sub)) {
			n++
		}
	}
	return n
}

// TestSDKCancelBypassesSendingMiddleware pins the SDK fact the cancel
// design rests on (doc.go, "How the signed cancel travels"): when a call's
// context ends, go-sdk v1.8.0 sends notifications/cancelled below every
// sending middleware, so no middleware can add the signed status to it,
// and Client sends its own. If an SDK upgrade routes it through the
// middleware chain, this fails and the design can be simplified.
func TestSDKCancelBypassesSendingMiddleware(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	var mu sync.Mutex
	var seen []string
	cl := mcp.NewClient(&mcp.Implementation{Name: "watcher", Version: "1"}, nil)
	cl.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			mu.Lock()
			seen = append(seen, method)
			mu.Unlock()
			return next(ctx, method, req)
		}
	})
	rec := &recorder{base: bearer{"planner-token", http.DefaultTransport}}
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: &http.Client{Transport: rec}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	release := e.gate()
	h, _, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Dialog: cs.ID(), Work: "sdk-cancel"})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := mcphandoff.HandoffValue(h, handoff.JSON)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, callCarrying("block", v))
		done <- err
	}()
	wait(t, e.entered, "the tool to start")
	cancel()
	if err := wait(t, done, "the canceled call"); !errors.Is(err, context.Canceled) {
		t.Fatalf("call: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rec.count(`"notifications/cancelled"`) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if rec.count(`"notifications/cancelled"`) != 1 {
		t.Fatal("the SDK sent no notifications/cancelled")
	}
	mu.Lock()
	for _, m := range seen {
		if m == "notifications/cancelled" {
			t.Error("the SDK's notifications/cancelled passed through the sending middleware: the SDK changed")
		}
	}
	mu.Unlock()
	close(release) // the work goes on (only a signed cancel stops it)
	e.srv.Wait()
}
