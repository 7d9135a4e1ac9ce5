package mcphandoff

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// ClientConfig configures the delegator's side.
type ClientConfig struct {
	// Delegator keeps the hops this agent issued (package delegator):
	// statuses read from results go to its Intake, cancels come from its
	// Cancel. Required.
	Delegator *delegator.Delegator
	// Encoding is how Handoffs travel (see HandoffValue): handoff.JSON
	// (the default) or handoff.CBOR.
	Encoding handoff.Encoding
}

// ErrNotSent: this client has not sent the hop (over this session, for a
// cancel), so it has nothing to resend or no request to name.
var ErrNotSent = errors.New("mcphandoff: hop not sent by this client")

// Client is the delegator's side of the handoff over MCP. Attach it to the
// *mcp.Client and connect through Transport (or, for streamable HTTP, give
// its HTTPClient to the transport); then Call hands work over, Ask asks
// again, Cancel cancels. Safe for concurrent use.
type Client struct {
	cfg ClientConfig

	mu       sync.Mutex
	next     mcp.MethodHandler   // the SDK's sending chain below this middleware
	hops     map[string]*sentHop // by hop
	byDigest map[string]string   // offer digest -> hop
	seq      uint64
}

type sentHop struct {
	params mcp.CallToolParams // as first sent, without Key in Meta
	value  any                // the _meta value, identical on every send
	digest string             // offer digest key
	// ids: the JSON-RPC id of the last tools/call for the hop on each
	// session. Keyed by the session itself, not its ID(): sessions on
	// stdio or in-memory transports all have the ID "".
	ids      map[*mcp.ClientSession]json.RawMessage
	inflight map[uint64]context.CancelFunc
}

// NewClient validates cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Delegator == nil {
		return nil, invalid("mcphandoff: ClientConfig.Delegator is required")
	}
	if cfg.Encoding != handoff.JSON && cfg.Encoding != handoff.CBOR {
		return nil, invalid(fmt.Sprintf("mcphandoff: unknown encoding %v", cfg.Encoding))
	}
	return &Client{cfg: cfg, hops: map[string]*sentHop{}, byDigest: map[string]string{}}, nil
}

// usable reports why c cannot be used: nil, or not made by NewClient.
func (c *Client) usable() error {
	if c == nil || c.hops == nil || c.cfg.Delegator == nil {
		return invalid("mcphandoff: the Client is nil or was not made by NewClient")
	}
	return nil
}

// usableOn is usable, and a session to send over.
func (c *Client) usableOn(cs *mcp.ClientSession) error {
	if err := c.usable(); err != nil {
		return err
	}
	if cs == nil {
		return invalid("mcphandoff: the *mcp.ClientSession is nil")
	}
	return nil
}

// Attach adds the sending middleware to cl (once per Client). Cancel sends
// its notifications/cancelled through the SDK's sending chain from there.
func (c *Client) Attach(cl *mcp.Client) error {
	if err := c.usable(); err != nil {
		return err
	}
	if cl == nil {
		return invalid("mcphandoff: Attach needs an *mcp.Client, got nil")
	}
	c.mu.Lock()
	attached := c.next != nil
	c.mu.Unlock()
	if attached {
		return invalid("mcphandoff: this Client is already attached to an mcp.Client")
	}
	cl.AddSendingMiddleware(c.middleware)
	return nil
}

// middleware only keeps the sending chain below it, through which
// SendCancel sends its own notifications/cancelled. It changes nothing that
// passes through: go-sdk v1.8.0 sends its own notifications/cancelled (for
// a call whose context ends) with conn.Notify, below every sending
// middleware, so there is nothing of the SDK's here to add the signed
// status to.
func (c *Client) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	c.mu.Lock()
	c.next = next
	c.mu.Unlock()
	return next
}

// How the request id of a tools/call is learned. The SDK assigns JSON-RPC
// ids below every middleware, so only what writes the message sees it. The
// context of the call (Call and Ask put a *callNote in it) travels with the
// message down to the mcp.Connection's Write and, on streamable HTTP, to
// the *http.Request; whichever of the two this client wraps notes the id
// there, for the hop and the session the note names. Calls that did not go
// through Call or Ask carry no note and are not looked at.

type noteKey struct{}

// callNote names the hop and the session one Call or Ask sends over.
type callNote struct {
	c  *Client
	s  *sentHop
	cs *mcp.ClientSession
}

// saw records id as the hop's last tools/call on the session.
func (n *callNote) saw(id json.RawMessage) {
	n.c.mu.Lock()
	n.s.ids[n.cs] = id
	n.c.mu.Unlock()
}

func noteFrom(ctx context.Context) *callNote {
	n, _ := ctx.Value(noteKey{}).(*callNote)
	return n
}

// Transport returns t prepared so that Cancel can name the hop's
// tools/call by its JSON-RPC id, for any client transport (stdio,
// in-memory, command, streamable HTTP, ...): connect the *mcp.Client
// through it. Nothing is changed in what is sent.
//
// For every transport but *mcp.StreamableClientTransport, each
// mcp.Connection it opens is wrapped, and its Write notes the id of a
// tools/call sent by Call or Ask. A *mcp.StreamableClientTransport is
// instead returned as a copy whose HTTPClient is c.HTTPClient(t.HTTPClient):
// go-sdk v1.8.0 tells its streamable connection the negotiated session
// through an unexported method (clientConnection.sessionUpdated, which
// sets the MCP-Protocol-Version header and opens the standalone SSE
// stream), which a wrapper outside the SDK cannot forward, so that
// connection is left as it is and the id is read from the HTTP request.
//
// A nil t gives a transport whose Connect fails.
func (c *Client) Transport(t mcp.Transport) mcp.Transport {
	switch x := t.(type) {
	case nil:
		return failing{}
	case *mcp.StreamableClientTransport:
		if x == nil {
			return failing{}
		}
		cp := *x
		cp.HTTPClient = c.HTTPClient(x.HTTPClient)
		return &cp
	}
	return noting{base: t}
}

type failing struct{}

func (failing) Connect(context.Context) (mcp.Connection, error) {
	return nil, invalid("mcphandoff: Client.Transport was given a nil transport")
}

// noting wraps a client transport: its connections note the ids of the
// tools/calls made by Call and Ask.
type noting struct{ base mcp.Transport }

func (t noting) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return notingConn{conn}, nil
}

// notingConn forwards everything to the connection it embeds (SessionID
// included, which the SDK reads for ClientSession.ID).
type notingConn struct{ mcp.Connection }

func (c notingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() && r.Method == methodCallTool {
		if n := noteFrom(ctx); n != nil {
			if id, err := json.Marshal(r.ID.Raw()); err == nil {
				// Noted before the write: a cancel may race with the
				// reply, never with the request.
				n.saw(id)
			}
		}
	}
	return c.Connection.Write(ctx, msg)
}

// HTTPClient returns an HTTP client for mcp.StreamableClientTransport that
// sends through base (nil: http.DefaultClient's transport) and notes, for
// each tools/call sent by Call or Ask, its JSON-RPC request id. It is what
// Transport does for a *mcp.StreamableClientTransport; use either.
// Nothing is changed in what is sent.
func (c *Client) HTTPClient(base *http.Client) *http.Client {
	var hc http.Client
	if base != nil {
		hc = *base
	}
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	hc.Transport = observer{base: rt}
	return &hc
}

type observer struct{ base http.RoundTripper }

func (o observer) RoundTrip(req *http.Request) (*http.Response, error) {
	if n := noteFrom(req.Context()); n != nil && req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, err := io.ReadAll(io.LimitReader(body, 8<<20))
			body.Close()
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if err == nil && json.Unmarshal(b, &msg) == nil && msg.Method == methodCallTool &&
				len(msg.ID) != 0 && !bytes.Equal(msg.ID, []byte("null")) {
				n.saw(msg.ID)
			}
		}
	}
	return o.base.RoundTrip(req)
}

// Reply is the answer to a tools/call that carried a Handoff.
type Reply struct {
	Result *mcp.CallToolResult
	// Status is the signed status in the result's _meta, exact octets;
	// nil when the delegate sent none (an equivocation, a rejection at
	// step 1, a retransmission from a sender it did not authenticate, a
	// hop not yet decided).
	Status *handoff.Element
	// State and Reason are the status's, once the delegator verified it.
	State  handoff.State
	Reason handoff.Reason
	// Hop is the hop as the delegator now sees it, after Intake.
	Hop *store.Issued
}

// Call calls a tool with the Handoff h (from delegator.Offer) under Key in
// the params' _meta, reads the status from the result's _meta and feeds it
// to the delegator's Intake. params are not modified. A reply that
// arrived is returned even when its status fails verification (the error
// says why). A call whose context ends returns the context's error; the
// work may go on at the delegate, and Ask learns its outcome.
func (c *Client) Call(ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams, h *handoff.Handoff) (*Reply, error) {
	if err := c.usableOn(cs); err != nil {
		return nil, err
	}
	if params == nil || params.Name == "" {
		return nil, invalid("mcphandoff: Call needs the tools/call params with the tool's name")
	}
	if h == nil {
		return nil, invalid("mcphandoff: Call needs the Handoff (from delegator.Offer), got nil")
	}
	o, _, err := handoff.UnsafeDecode(h.Offer) // our own offer, read back
	if err != nil {
		return nil, invalidf("mcphandoff: the Handoff's offer cannot be read: %w", err)
	}
	if o == nil {
		return nil, invalid("mcphandoff: the Handoff's offer element is a status, not an offer")
	}
	if o.Hop == "" { // the data model forbids it; a map keyed by "" would mix such hops
		return nil, errors.New("mcphandoff: the Handoff's offer names no hop")
	}
	v, err := HandoffValue(h, c.cfg.Encoding)
	if err != nil {
		return nil, err
	}
	d := h.Offer.Digest()
	dk := d.Alg + ":" + d.String()
	c.mu.Lock()
	s, ok := c.hops[o.Hop]
	if ok && s.digest != dk {
		c.mu.Unlock()
		// Two offers for one hop are equivocation (draft "Forks,
		// Concurrency, and Equivocation"): a retransmission resends the
		// identical octets, never a second offer.
		return nil, fmt.Errorf("mcphandoff: hop %s was sent with another offer; refusing to send a second one", o.Hop)
	}
	if !ok {
		s = &sentHop{params: *params, value: v, digest: dk, ids: map[*mcp.ClientSession]json.RawMessage{}, inflight: map[uint64]context.CancelFunc{}}
		c.hops[o.Hop] = s
		c.byDigest[dk] = o.Hop
	}
	c.mu.Unlock()
	return c.send(ctx, cs, o.Hop, s)
}

// Ask asks the delegate again about a hop this client sent: the identical
// tools/call (same tool, arguments and Handoff octets), a retransmission
// the delegate answers from its record without running the tool again
// (draft "Asking Again"). Over MCP this is how a delegator learns a status
// later than the one its call returned. A hop this client did not send
// (after a restart, say) is ErrNotSent: send the Handoff rebuilt from
// store.Issued.Offer with Call; only the offer's octets count.
func (c *Client) Ask(ctx context.Context, cs *mcp.ClientSession, hop string) (*Reply, error) {
	if err := c.usableOn(cs); err != nil {
		return nil, err
	}
	c.mu.Lock()
	s, ok := c.hops[hop]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: hop %q", ErrNotSent, hop)
	}
	return c.send(ctx, cs, hop, s)
}

// Forget drops what this client keeps for a hop (the call to resend, the
// request ids for a cancel), once the hop needs no more asking.
func (c *Client) Forget(hop string) {
	if c.usable() != nil {
		return // nothing kept
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.hops[hop]; ok {
		delete(c.byDigest, s.digest)
		delete(c.hops, hop)
	}
}

// Retransmitter returns the send function for delegator.RunRetransmitter
// over one session: each due hop is asked about again with Ask.
func (c *Client) Retransmitter(cs *mcp.ClientSession) func(context.Context, delegator.Ask) error {
	return func(ctx context.Context, a delegator.Ask) error {
		_, err := c.Ask(ctx, cs, a.Hop.Hop)
		return err
	}
}

func (c *Client) send(ctx context.Context, cs *mcp.ClientSession, hop string, s *sentHop) (*Reply, error) {
	// A fresh _meta map per call: the SDK may add its own keys to it.
	params := s.params
	params.Meta = withMeta(params.Meta, Key, s.value)
	cctx, cancel := context.WithCancel(context.WithValue(ctx, noteKey{}, &callNote{c: c, s: s, cs: cs}))
	defer cancel()
	c.mu.Lock()
	c.seq++
	id := c.seq
	s.inflight[id] = cancel
	c.mu.Unlock()
	res, err := cs.CallTool(cctx, &params)
	c.mu.Lock()
	delete(s.inflight, id)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	r := &Reply{Result: res}
	el, ok, err := StatusFrom(res.Meta)
	if !ok {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	r.Status = &el
	if r.Hop, err = c.cfg.Delegator.Intake(ctx, hop, el); err != nil {
		return r, fmt.Errorf("mcphandoff: status for hop %s: %w", hop, err)
	}
	if _, st, err := handoff.UnsafeDecode(el); err == nil && st != nil { // verified by Intake
		r.State, r.Reason = st.State, st.Reason
	}
	return r, nil
}

// Cancel cancels a hop this client sent over cs: the delegator signs and
// records "canceled" (delegator.Cancel), the notifications/cancelled that
// names the hop's last tools/call on this session carries it under Key in
// its _meta, sent through the SDK's sending chain, and a call still in
// flight for the hop is canceled (the SDK then sends its own, plain
// notifications/cancelled as well). The hop stays unresolved: a cancel
// does not show that the work took no effect, and MCP suppresses the
// reply to a canceled request, so Ask learns the delegate's last status.
//
// If no tools/call for the hop went over cs through a transport given by
// Transport (or HTTPClient), the cancel is signed and recorded but not
// sent, and the error wraps ErrNotSent. A nil cs or an empty hop is
// refused before anything is signed.
func (c *Client) Cancel(ctx context.Context, cs *mcp.ClientSession, hop string) (handoff.Element, error) {
	// Refused before anything is signed: a missing session or hop is the
	// caller's mistake, and a cancel recorded but sendable nowhere helps no
	// one.
	if err := c.usableOn(cs); err != nil {
		return handoff.Element{}, err
	}
	if hop == "" {
		return handoff.Element{}, invalid("mcphandoff: Cancel needs a hop, got \"\"")
	}
	st, _, err := c.cfg.Delegator.Cancel(ctx, hop)
	if err != nil {
		return handoff.Element{}, err
	}
	return st, c.SendCancel(ctx, cs, hop, st)
}

// SendCancel sends a "canceled" already signed and recorded for a hop this
// client sent (a delegator.Downstream from delegator.CancelDown, when a
// cancel received for this agent's own offer follows the chain down), as
// Cancel does after signing.
func (c *Client) SendCancel(ctx context.Context, cs *mcp.ClientSession, hop string, st handoff.Element) error {
	if err := c.usableOn(cs); err != nil {
		return err
	}
	if hop == "" {
		return invalid("mcphandoff: SendCancel needs a hop, got \"\"")
	}
	// Only a "canceled" goes out as a cancel; its signature is the
	// delegate's to check.
	switch _, s, err := handoff.UnsafeDecode(st); {
	case err != nil:
		return invalidf("mcphandoff: SendCancel for hop %s needs a signed \"canceled\" status; this one cannot be read: %w", hop, err)
	case s == nil:
		return invalidf("mcphandoff: SendCancel for hop %s needs a signed \"canceled\" status, got an offer", hop)
	case s.State != handoff.StateCanceled:
		return invalidf("mcphandoff: SendCancel for hop %s needs a signed \"canceled\" status, got %q", hop, s.State)
	}
	c.mu.Lock()
	s, ok := c.hops[hop]
	var id json.RawMessage
	var inflight []context.CancelFunc
	if ok {
		id = s.ids[cs]
		for _, f := range s.inflight {
			inflight = append(inflight, f)
		}
	}
	next := c.next
	c.mu.Unlock()
	if !ok || id == nil {
		return fmt.Errorf("%w: no tools/call for hop %s went over this session (session id %q) through Client.Transport or Client.HTTPClient; the cancel is recorded, not sent", ErrNotSent, hop, cs.ID())
	}
	if next == nil {
		return errors.New("mcphandoff: Client.Attach was not called; the cancel is recorded, not sent")
	}
	// The call first: canceled, it returns at once and ignores a late
	// reply (MCP). Then the signed cancel, which is what stops the work.
	for _, f := range inflight {
		f()
	}
	_, err := next(ctx, methodCancelled, &mcp.ClientRequest[*mcp.CancelledParams]{Session: cs, Params: &mcp.CancelledParams{
		Meta:      mcp.Meta{Key: StatusValue(st)},
		Reason:    "the delegator canceled hop " + hop,
		RequestID: id,
	}})
	if err != nil {
		return fmt.Errorf("mcphandoff: sending the cancel for hop %s: %w", hop, err)
	}
	return nil
}
