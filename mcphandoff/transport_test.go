package mcphandoff_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// inMemory connects a new planner client to the env's MCP server (the
// same *mcp.Server, handoff middleware and delegate as over HTTP) over the
// SDK's in-memory transports. wrap says whether the client transport goes
// through Client.Transport.
func (e *env) inMemory(wrap bool) (*mcphandoff.Client, *mcp.ClientSession) {
	e.t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := e.ms.Connect(ctx, st, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { ss.Close() })
	hc, err := mcphandoff.NewClient(mcphandoff.ClientConfig{Delegator: e.dl})
	if err != nil {
		e.t.Fatal(err)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "planner", Version: "1"}, nil)
	if err := hc.Attach(cl); err != nil {
		e.t.Fatal(err)
	}
	var t mcp.Transport = ct
	if wrap {
		t = hc.Transport(ct)
	}
	cs, err := cl.Connect(ctx, t, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return hc, cs
}

// TestCancelOverInMemoryTransport: the delegator's signed "canceled"
// (draft "Carrying the Element", MCP: in the params of
// notifications/cancelled; D9: the delegate verifies it against the hop's
// offer) reaches the server's middleware over a transport that is not
// HTTP, names the hop's tools/call by its JSON-RPC id, is verified, and
// stops the work. Without Client.Transport the id is never learned and the
// cancel is recorded, not sent (ErrNotSent).
func TestCancelOverInMemoryTransport(t *testing.T) {
	for _, m := range []struct {
		name string
		form handoff.Form
		enc  handoff.Encoding
	}{{"JWS/JSON", handoff.FormJWS, handoff.JSON}, {"COSE/CBOR", handoff.FormCOSE, handoff.CBOR}} {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, m.form, m.enc)
			ctx := context.Background()
			hc, cs := e.inMemory(true)
			if cs.ID() != "" {
				t.Fatalf("in-memory session id %q; the test assumes none (keying by session id would conflate sessions)", cs.ID())
			}
			h, hop, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Work: "in-memory cancel"})
			if err != nil {
				t.Fatal(err)
			}
			first, _ := e.startBlocking(t, hc, cs, h)
			st := e.cancelRunning(t, hc, cs, hop.Hop, first)
			e.mu.Lock()
			reports := append([]error(nil), e.reports...)
			e.mu.Unlock()
			if len(reports) != 0 {
				t.Fatalf("the middleware reported %v", reports)
			}
			// Canceled is set only by delegate.Cancel after the status
			// verified against the recorded offer.
			e.wantRecord(t, hop.Hop, true, store.Failed, "")
			// The HTTP session never carried the hop: nothing to name there.
			if err := hc.SendCancel(ctx, e.cs, hop.Hop, st); !errors.Is(err, mcphandoff.ErrNotSent) {
				t.Fatalf("cancel over a session the hop never went over: %v", err)
			}
		})
	}

	t.Run("unwrapped transport: recorded, not sent", func(t *testing.T) {
		e := newEnv(t, handoff.FormJWS, handoff.JSON)
		ctx := context.Background()
		hc, cs := e.inMemory(false)
		h, hop, err := e.dl.Offer(ctx, delegator.Offer{Aud: tester, Work: "in-memory, unwrapped"})
		if err != nil {
			t.Fatal(err)
		}
		first, release := e.startBlocking(t, hc, cs, h)
		if _, err := hc.Cancel(ctx, cs, hop.Hop); !errors.Is(err, mcphandoff.ErrNotSent) {
			t.Fatalf("cancel without Client.Transport: %v, want ErrNotSent", err)
		}
		close(release)
		if err := wait(t, first, "the call").err; err != nil {
			t.Fatalf("the call, not canceled, returned %v", err)
		}
		e.srv.Wait()
		e.wantRecord(t, hop.Hop, false, store.Completed, "; the unsent cancel reached the delegate")
	})
}

// headerRecorder notes the MCP-Protocol-Version header of each POST after
// the first (the initialize).
type headerRecorder struct {
	base     http.RoundTripper
	mu       sync.Mutex
	versions []string
}

func (r *headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost {
		r.mu.Lock()
		r.versions = append(r.versions, req.Header.Get("Mcp-Protocol-Version"))
		r.mu.Unlock()
	}
	return r.base.RoundTrip(req)
}

// wrapped is what a generic wrapper outside the SDK can do to a transport:
// forward the mcp.Connection's exported methods, and no others.
type wrapped struct{ mcp.Transport }

func (w wrapped) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := w.Transport.Connect(ctx)
	return struct{ mcp.Connection }{c}, err
}

// TestTransportLeavesStreamableConnection pins why Client.Transport does
// not wrap the connection of a *mcp.StreamableClientTransport (doc.go,
// "How the signed cancel travels"): go-sdk v1.8.0 tells that connection
// the negotiated protocol through an unexported method, so behind a
// generic wrapper its later POSTs lose the MCP-Protocol-Version header
// (and, below 2026-07-28, the standalone SSE stream). Through
// Client.Transport they keep it. If an SDK upgrade exports the method or
// stops needing it, the first half fails and the HTTP observer can go.
func TestTransportLeavesStreamableConnection(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		wrap        func(mcp.Transport) mcp.Transport
		wantVersion bool
	}{
		{"generic connection wrapper", func(t mcp.Transport) mcp.Transport { return wrapped{t} }, false},
		{"Client.Transport", e.hc.Transport, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &headerRecorder{base: bearer{"planner-token", http.DefaultTransport}}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx,
				c.wrap(&mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: &http.Client{Transport: rec}, DisableStandaloneSSE: true}), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if _, err := cs.ListTools(ctx, nil); err != nil {
				t.Fatal(err)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.versions) < 2 {
				t.Fatalf("%d POSTs, want initialize and more", len(rec.versions))
			}
			last := rec.versions[len(rec.versions)-1]
			if (last != "") != c.wantVersion {
				t.Fatalf("MCP-Protocol-Version on the last POST %q; want it set: %v", last, c.wantVersion)
			}
		})
	}
}
