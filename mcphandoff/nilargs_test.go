package mcphandoff_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegate"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
	"github.com/quantumlearningmachines/handoff/store"
)

// TestNilAndZeroArguments: every exported function and method of the
// package, given a nil or zero value where it needs a real one (a nil
// Client or Server, a nil session, params, Handoff or transport, an empty
// hop, a zero status), returns an error that names what is missing, and
// never panics (developers' guide: bad input gets a clear, specific error,
// never a panic). Nothing is sent or signed for such a call.
func TestNilAndZeroArguments(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()

	// A hop really sent over e.cs, and its "accepted" status: a status
	// that is not "canceled" must not go out as a cancel.
	h, sent := e.offer(e.dl, tester, "nil-table")
	r, err := e.hc.Call(ctx, e.cs, call("ok"), h)
	if err != nil || r.Status == nil {
		t.Fatalf("call: %v, %+v", err, r)
	}
	completed := *r.Status
	// An offer that names no hop: the signer refuses to make one, so its
	// payload is written by hand (the signature does not matter: the
	// client reads its own offer back without verifying it).
	parts := strings.Split(string(h.Offer.Octets), ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "hop")
	payload, _ = json.Marshal(m)
	noHop := handoff.ParseElement([]byte(parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]))
	var nilClient *mcphandoff.Client
	var zeroClient mcphandoff.Client
	var nilServer *mcphandoff.Server
	var nilHop *mcphandoff.Hop
	connect := func(tr mcp.Transport) error {
		_, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, tr, nil)
		return err
	}
	mwErr := func(s *mcphandoff.Server) error {
		called := false
		next := func(context.Context, string, mcp.Request) (mcp.Result, error) {
			called = true
			return &mcp.CallToolResult{}, nil
		}
		_, err := s.Middleware()(next)(ctx, "tools/call", &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: "run-tests"}})
		if called {
			return errors.New("the tool ran behind an unusable Server")
		}
		return err
	}

	for _, c := range []struct {
		name string
		want error // errors.Is of the error; nil for none
		call func() error
	}{
		{"Client nil: Attach", mcphandoff.ErrInvalid, func() error { return nilClient.Attach(mcp.NewClient(&mcp.Implementation{Name: "c"}, nil)) }},
		{"Client nil: Call", mcphandoff.ErrInvalid, func() error { _, err := nilClient.Call(ctx, e.cs, call("ok"), h); return err }},
		{"Client zero value: Call", mcphandoff.ErrInvalid, func() error { _, err := zeroClient.Call(ctx, e.cs, call("ok"), h); return err }},
		{"Client nil: Ask", mcphandoff.ErrInvalid, func() error { _, err := nilClient.Ask(ctx, e.cs, sent.Hop); return err }},
		{"Client nil: Cancel", mcphandoff.ErrInvalid, func() error { _, err := nilClient.Cancel(ctx, e.cs, sent.Hop); return err }},
		{"Client nil: SendCancel", mcphandoff.ErrInvalid, func() error { return nilClient.SendCancel(ctx, e.cs, sent.Hop, completed) }},
		{"Client nil: Retransmitter", mcphandoff.ErrInvalid, func() error {
			return nilClient.Retransmitter(e.cs)(ctx, delegator.Ask{Hop: sent})
		}},
		{"Client nil: Forget is a no-op", nil, func() error { nilClient.Forget(sent.Hop); return nil }},
		{"Attach: nil *mcp.Client", mcphandoff.ErrInvalid, func() error { return e.hc.Attach(nil) }},
		{"Call: nil session", mcphandoff.ErrInvalid, func() error { _, err := e.hc.Call(ctx, nil, call("ok"), h); return err }},
		{"Call: nil params", mcphandoff.ErrInvalid, func() error { _, err := e.hc.Call(ctx, e.cs, nil, h); return err }},
		{"Call: no tool name", mcphandoff.ErrInvalid, func() error {
			_, err := e.hc.Call(ctx, e.cs, &mcp.CallToolParams{}, h)
			return err
		}},
		{"Call: nil Handoff", mcphandoff.ErrInvalid, func() error { _, err := e.hc.Call(ctx, e.cs, call("ok"), nil); return err }},
		{"Call: zero Handoff", mcphandoff.ErrInvalid, func() error {
			_, err := e.hc.Call(ctx, e.cs, call("ok"), &handoff.Handoff{})
			return err
		}},
		{"Call: a status as the offer", mcphandoff.ErrInvalid, func() error {
			_, err := e.hc.Call(ctx, e.cs, call("ok"), &handoff.Handoff{Offer: completed})
			return err
		}},
		{"Call: offer without a hop (the core reads it as no offer)", mcphandoff.ErrInvalid, func() error {
			_, err := e.hc.Call(ctx, e.cs, call("ok"), &handoff.Handoff{Offer: noHop})
			return err
		}},
		{"Ask: nil session", mcphandoff.ErrInvalid, func() error { _, err := e.hc.Ask(ctx, nil, sent.Hop); return err }},
		{"Ask: empty hop", mcphandoff.ErrNotSent, func() error { _, err := e.hc.Ask(ctx, e.cs, ""); return err }},
		{"Retransmitter: nil session", mcphandoff.ErrInvalid, func() error {
			return e.hc.Retransmitter(nil)(ctx, delegator.Ask{Hop: sent})
		}},
		{"Cancel: nil session", mcphandoff.ErrInvalid, func() error { _, err := e.hc.Cancel(ctx, nil, sent.Hop); return err }},
		{"Cancel: empty hop", mcphandoff.ErrInvalid, func() error { _, err := e.hc.Cancel(ctx, e.cs, ""); return err }},
		{"SendCancel: nil session", mcphandoff.ErrInvalid, func() error { return e.hc.SendCancel(ctx, nil, sent.Hop, completed) }},
		{"SendCancel: empty hop", mcphandoff.ErrInvalid, func() error { return e.hc.SendCancel(ctx, e.cs, "", completed) }},
		{"SendCancel: zero status", mcphandoff.ErrInvalid, func() error {
			return e.hc.SendCancel(ctx, e.cs, sent.Hop, handoff.Element{})
		}},
		{"SendCancel: a status other than canceled", mcphandoff.ErrInvalid, func() error {
			return e.hc.SendCancel(ctx, e.cs, sent.Hop, completed)
		}},
		{"Transport: nil", mcphandoff.ErrInvalid, func() error { return connect(e.hc.Transport(nil)) }},
		{"Transport: nil *StreamableClientTransport", mcphandoff.ErrInvalid, func() error {
			return connect(e.hc.Transport((*mcp.StreamableClientTransport)(nil)))
		}},
		{"Server nil: Attach", mcphandoff.ErrInvalid, func() error { return nilServer.Attach(mcp.NewServer(&mcp.Implementation{Name: "s"}, nil)) }},
		{"Server zero value: Attach", mcphandoff.ErrInvalid, func() error {
			return new(mcphandoff.Server).Attach(mcp.NewServer(&mcp.Implementation{Name: "s"}, nil))
		}},
		{"Server: Attach nil *mcp.Server", mcphandoff.ErrInvalid, func() error { return e.srv.Attach(nil) }},
		{"Server nil: Middleware refuses, runs no tool", mcphandoff.ErrInvalid, func() error { return mwErr(nilServer) }},
		{"Server zero value: Middleware refuses, runs no tool", mcphandoff.ErrInvalid, func() error { return mwErr(new(mcphandoff.Server)) }},
		{"Server nil: Wait returns", nil, func() error { nilServer.Wait(); return nil }},
		{"Hop nil: Declare", mcphandoff.ErrInvalid, func() error { return nilHop.Declare(delegate.Outcome{State: store.Completed}) }},
		{"HandoffValue: nil Handoff", mcphandoff.ErrInvalid, func() error { _, err := mcphandoff.HandoffValue(nil, handoff.JSON); return err }},
		{"HandoffOctets: empty RawMessage", mcphandoff.ErrMeta, func() error { _, err := mcphandoff.HandoffOctets(json.RawMessage(nil)); return err }},
		{"HandoffOctets: nil", mcphandoff.ErrMeta, func() error { _, err := mcphandoff.HandoffOctets(nil); return err }},
		{"StatusFrom: a nil value", mcphandoff.ErrMeta, func() error { _, _, err := mcphandoff.StatusFrom(map[string]any{mcphandoff.Key: nil}); return err }},
		{"StrictHandler: nil handler answers 500", errHTTP500, func() error {
			w := httptest.NewRecorder()
			mcphandoff.StrictHandler(nil).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}")))
			if w.Code != http.StatusInternalServerError {
				return fmt.Errorf("status %d: %s", w.Code, w.Body)
			}
			return errHTTP500
		}},
		{"TokenUser: nil request is not authenticated", nil, func() error {
			if mcphandoff.TokenUser(ctx, nil) != "" {
				return errors.New("a nil request authenticated")
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				err = c.call()
			}()
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}

	// None of it touched the hop that was really sent: still asked about
	// normally, not canceled at the delegate.
	if _, err := e.hc.Ask(ctx, e.cs, sent.Hop); err != nil {
		t.Fatal(err)
	}
	e.srv.Wait()
	e.wantRecord(t, sent.Hop, false, store.Completed, "")
}

// errHTTP500 stands for an HTTP answer 500 in the table.
var errHTTP500 = errors.New("HTTP 500")
