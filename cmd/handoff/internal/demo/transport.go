package demo

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2asrv"
)

// The demo's transport: bearer tokens on A2A and HTTP, and a lossy link.

// bearerAuth is the host protocol's authentication of callers on the A2A
// servers: a bearer token names the calling agent (CallContext.User),
// which a2ahandoff.UserName reads.
type bearerAuth struct {
	a2asrv.PassthroughCallInterceptor
	tokens map[string]string
}

func (b bearerAuth) Before(ctx context.Context, cc *a2asrv.CallContext, _ *a2asrv.Request) (context.Context, error) {
	if v, ok := cc.RequestMeta().Get("authorization"); ok && len(v) == 1 {
		if id, ok := b.tokens[strings.TrimPrefix(v[0], "Bearer ")]; ok {
			cc.User = &a2asrv.AuthenticatedUser{UserName: id}
		}
	}
	return ctx, nil
}

// bearer is the A2A client's side: it sends the agent's token.
type bearer struct {
	a2aclient.PassthroughInterceptor
	token string
}

func (b bearer) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	req.Meta.Append("Authorization", "Bearer "+b.token)
	return ctx, nil
}

// withToken sends a bearer token on MCP's HTTP requests.
type withToken struct {
	base  http.RoundTripper
	token string
}

func (t withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(r)
}

// dropper is an HTTP transport that, once armed, loses the reply to the
// next A2A message/send: the request reaches the server and is answered,
// but the answer never reaches the client (a connection reset on the way
// back).
type dropper struct {
	base    http.RoundTripper
	armed   atomic.Bool
	dropped atomic.Int32
}

var errDropped = errors.New("demo: the reply was lost on the way back (simulated connection reset)")

func (d *dropper) RoundTrip(r *http.Request) (*http.Response, error) {
	if !d.armed.Load() || r.GetBody == nil {
		return d.base.RoundTrip(r)
	}
	body, err := r.GetBody()
	if err != nil {
		return d.base.RoundTrip(r)
	}
	b, _ := io.ReadAll(io.LimitReader(body, 1<<20))
	body.Close()
	if !strings.Contains(string(b), `"message/send"`) || !d.armed.CompareAndSwap(true, false) {
		return d.base.RoundTrip(r)
	}
	resp, err := d.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// Read the whole answer, so the server's work and its record are done,
	// then lose it.
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d.dropped.Add(1)
	return nil, errDropped
}

// a2aClient is the SDK's own JSON-RPC client for url, sending the agent's
// token, over hc.
func a2aClient(ctx context.Context, url, token string, hc *http.Client) (*a2aclient.Client, error) {
	return a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: url, Transport: a2a.TransportProtocolJSONRPC}},
		a2aclient.WithJSONRPCTransport(hc), a2aclient.WithInterceptors(bearer{token: token}))
}
