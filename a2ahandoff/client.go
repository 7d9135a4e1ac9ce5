package a2ahandoff

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aext"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/delegator"
	"github.com/quantumlearningmachines/handoff/store"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Encoding of the Handoffs it sends: handoff.JSON (default, a JSON
	// object) or handoff.CBOR (base64url text of the CBOR octets).
	Encoding handoff.Encoding
}

// Client is the delegator's side over A2A: it carries the offers that a
// delegator.Delegator issues in messages sent with an a2aclient.Client,
// takes in the signed statuses of the replies (Intake), asks again with
// the identical octets, and cancels with the signed "canceled" in the
// Cancel Task request. Safe for concurrent use.
//
// What it keeps per hop (the message and Handoff sent, the A2A task id)
// is in process memory: after a restart, Ask and Cancel need the hop to
// be sent again by the application (the tracker's record of the hop is
// durable; the A2A message is not).
type Client struct {
	a2a *a2aclient.Client
	dl  *delegator.Delegator
	enc handoff.Encoding

	mu   sync.Mutex
	hops map[string]*sent
}

// sent is what the client keeps for a hop it carried.
type sent struct {
	msg  *a2a.Message           // the message as first sent, Handoff included
	cfg  *a2a.MessageSendConfig // its send configuration, used again by Ask
	task a2a.TaskID             // the A2A task the delegate made for it, once known
}

// NewClient wraps c for the hops of dl. It adds to c a call interceptor
// that lists URI in the A2A-Extensions service parameter (header
// X-A2A-Extensions) of every request carrying a Handoff or a status under
// Key; call it before c is used concurrently.
func NewClient(c *a2aclient.Client, dl *delegator.Delegator, o ClientOptions) (*Client, error) {
	if c == nil || dl == nil {
		return nil, invalid("a2ahandoff: NewClient needs an a2aclient.Client and a delegator")
	}
	if o.Encoding != handoff.JSON && o.Encoding != handoff.CBOR {
		return nil, fmt.Errorf("a2ahandoff: unknown encoding %d", o.Encoding)
	}
	c.AddCallInterceptor(ExtensionHeader{})
	return &Client{a2a: c, dl: dl, enc: o.Encoding, hops: map[string]*sent{}}, nil
}

// errNilClient: a nil Client, or one not made by NewClient.
var errNilClient = invalid("a2ahandoff: the Client is nil or was not made by NewClient")

// usable reports why c cannot send: nil, not made by NewClient, or no
// context to send with.
func (c *Client) usable(ctx context.Context) error {
	if c == nil || c.a2a == nil || c.dl == nil || c.hops == nil {
		return errNilClient
	}
	if ctx == nil {
		return invalid("a2ahandoff: the context is nil")
	}
	return nil
}

// ExtensionHeader is an a2aclient.CallInterceptor that lists URI in the
// A2A-Extensions service parameter of requests whose payload carries
// something under Key (a Message's or a Cancel Task request's metadata).
// NewClient installs it; use it directly with a plain a2aclient.Client.
type ExtensionHeader struct {
	a2aclient.PassthroughInterceptor
}

// Before implements a2aclient.CallInterceptor.
func (ExtensionHeader) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	if req == nil {
		return ctx, nil // nothing to list it in
	}
	carries := false
	switch p := req.Payload.(type) {
	case *a2a.MessageSendParams:
		if p != nil && p.Message != nil {
			_, carries = p.Message.Metadata[Key]
		}
	case *a2a.TaskIDParams:
		if p != nil {
			_, carries = p.Metadata[Key]
		}
	}
	if carries {
		if req.Meta == nil {
			req.Meta = a2aclient.CallMeta{}
		}
		req.Meta.Append(a2aext.CallMetaKey, URI)
	}
	return ctx, nil
}

// Reply is what came back for a hop.
type Reply struct {
	Hop    string
	Result a2a.SendMessageResult // the A2A reply: a *a2a.Task or a *a2a.Message
	Task   *a2a.Task             // Result as a task; nil for a message
	// Statuses are the signed statuses the reply carried, in order.
	Statuses []handoff.Element
	// Issued is the hop as the tracker holds it after taking them in;
	// nil when the reply carried no status it accepted.
	Issued *store.Issued
	// Refused holds, for each status the tracker did not take (D9) and
	// each value under Key that was not a status, why.
	Refused []error
}

// State is the A2A task state of the reply ("" for a message, and for a
// nil Reply).
func (r *Reply) State() a2a.TaskState {
	if r == nil || r.Task == nil {
		return ""
	}
	return r.Task.Status.State
}

// Offer signs a new offer (delegator.Offer) and sends it in msg, a new
// message to the delegate, with cfg as the send configuration (nil: the
// client's default, blocking). The offer's dialog is the message's
// contextId: when one is empty it takes the other, when both are empty a
// new context id is made for both; when they differ it is an error. As
// with Send, an error with a non-nil Reply means the offer was issued and
// sent but no reply arrived.
func (c *Client) Offer(ctx context.Context, spec delegator.Offer, msg *a2a.Message, cfg *a2a.MessageSendConfig) (*Reply, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if msg == nil {
		return nil, invalid("a2ahandoff: Offer needs the message that carries the work")
	}
	switch {
	case spec.Dialog == "" && msg.ContextID == "":
		spec.Dialog = a2a.NewContextID()
	case spec.Dialog == "":
		spec.Dialog = msg.ContextID
	case msg.ContextID != "" && msg.ContextID != spec.Dialog:
		return nil, fmt.Errorf("a2ahandoff: the offer's dialog %q is not the message's contextId %q", spec.Dialog, msg.ContextID)
	}
	h, issued, err := c.dl.Offer(ctx, spec)
	if err != nil {
		return nil, err // nothing issued
	}
	m := cloneMessage(msg)
	m.ContextID = spec.Dialog
	return c.Send(ctx, issued.Hop, h, m, cfg)
}

// Send carries h, the Handoff of a hop issued by the delegator, in msg
// and takes in the statuses of the reply. msg.ContextID must be the
// offer's dialog. An error means the reply did not arrive: the returned
// Reply names the hop, which is unresolved; asking again (Ask) finds out.
//
// The client keeps copies of msg and cfg for Ask: changing them after
// Send returns does not change what Ask sends.
func (c *Client) Send(ctx context.Context, hop string, h *handoff.Handoff, msg *a2a.Message, cfg *a2a.MessageSendConfig) (*Reply, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if hop == "" {
		return nil, invalid(`a2ahandoff: Send needs the hop the delegator issued, got ""`)
	}
	if msg == nil {
		return nil, invalidf("a2ahandoff: Send for hop %s needs the message that carries the work, got nil", hop)
	}
	if h == nil {
		return nil, invalidf("a2ahandoff: Send for hop %s needs its Handoff (from delegator.Offer), got nil", hop)
	}
	// The Handoff must carry an offer for this hop: what is kept here
	// for the hop is sent again by Ask, so a wrong one would replace the
	// right one. Its signature is the delegate's to check.
	switch o, s, err := handoff.UnsafeDecode(h.Offer); {
	case err != nil:
		return nil, invalidf("a2ahandoff: Send for hop %s: the Handoff's offer cannot be read: %w", hop, err)
	case o == nil && s == nil:
		return nil, invalidf("a2ahandoff: Send for hop %s: the Handoff's offer cannot be read", hop)
	case o == nil:
		return nil, invalidf("a2ahandoff: Send for hop %s: the Handoff's offer is a status, not an offer", hop)
	case o.Hop != hop:
		return nil, invalidf("a2ahandoff: Send for hop %s: the Handoff's offer is for hop %q", hop, o.Hop)
	}
	m := cloneMessage(msg)
	if m.ID == "" {
		m.ID = a2a.NewMessageID()
	}
	if m.Role == "" {
		m.Role = a2a.MessageRoleUser
	}
	if err := AttachHandoff(m, h, c.enc); err != nil {
		return nil, err
	}
	// A copy of the configuration: the caller may change (or reuse) its
	// own after Send, and Ask must send what was first sent.
	cfg = cloneConfig(cfg)
	c.mu.Lock()
	c.hops[hop] = &sent{msg: m, cfg: cfg}
	c.mu.Unlock()
	res, err := c.a2a.SendMessage(ctx, &a2a.MessageSendParams{Message: m, Config: cfg})
	if err != nil {
		// The Reply still names the hop: it is issued and unresolved, and
		// asking again (Ask, RunRetransmitter with Resend) finds out.
		return &Reply{Hop: hop}, fmt.Errorf("a2ahandoff: sending hop %s: %w", hop, err)
	}
	return c.take(ctx, hop, res), nil
}

// Ask sends the hop's Handoff again, with the identical octets, in a new
// message with the same content, contextId and send configuration (draft
// "Asking Again"), and takes in the statuses of the reply. The delegate
// answers from its record without running the work again; a delegate that
// never got the first message processes this one as new.
//
// The answer from the record names the hop's A2A task (Message.TaskID)
// when the delegate is served by this package and authenticated the
// sender as the offer's iss: after a lost first reply, Ask is how the
// client learns the task that Poll and Cancel need.
func (c *Client) Ask(ctx context.Context, hop string) (*Reply, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	s := c.hops[hop]
	c.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w (its message is kept in memory only): hop %s", ErrNotSent, hop)
	}
	m := cloneMessage(s.msg)
	m.ID = a2a.NewMessageID()
	// A fresh request: a delegate served with a2asrv.NewHandler rather
	// than NewHandler refuses a message into the hop's task once it ended.
	m.TaskID = ""
	// The kept configuration is copied again: the SDK and its interceptors
	// may change what they are given.
	res, err := c.a2a.SendMessage(ctx, &a2a.MessageSendParams{Message: m, Config: cloneConfig(s.cfg)})
	if err != nil {
		return nil, fmt.Errorf("a2ahandoff: asking again about hop %s: %w", hop, err)
	}
	return c.take(ctx, hop, res), nil
}

// Resend is a send function for delegator.RunRetransmitter: it asks
// again about a due hop.
func (c *Client) Resend(ctx context.Context, a delegator.Ask) error {
	if err := c.usable(ctx); err != nil {
		return err
	}
	if a.Hop == nil {
		return invalid("a2ahandoff: Resend needs the hop to ask about (delegator.Ask.Hop), got nil")
	}
	_, err := c.Ask(ctx, a.Hop.Hop)
	return err
}

// Poll reads the hop's A2A task (Get Task) and takes in its statuses: the
// way to learn "completed" after a non-blocking send.
func (c *Client) Poll(ctx context.Context, hop string) (*Reply, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	task, err := c.taskOf(hop)
	if err != nil {
		return nil, err
	}
	t, err := c.a2a.GetTask(ctx, &a2a.TaskQueryParams{ID: task})
	if err != nil {
		return nil, fmt.Errorf("a2ahandoff: reading task %s of hop %s: %w", task, hop, err)
	}
	return c.take(ctx, hop, t), nil
}

// Cancel signs "canceled" for the hop (delegator.Cancel) and sends it in
// the metadata of a Cancel Task request for the hop's A2A task. The hop
// stays unresolved until a verified completed or failed: a cancel does
// not show that the work took no effect.
func (c *Client) Cancel(ctx context.Context, hop string) (*Reply, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if _, err := c.taskOf(hop); err != nil {
		return nil, err
	}
	st, _, err := c.dl.Cancel(ctx, hop)
	if err != nil {
		return nil, err
	}
	return c.SendCancel(ctx, hop, st)
}

// SendCancel sends an already signed "canceled" (from delegator.Cancel or
// delegator.CancelDown) for a hop this client carried. If the delegate
// refuses (its task already ended, say), the task is read and its
// statuses are taken in, since its final status may have crossed the
// cancel; the error is returned with that reply.
//
// The client learns a hop's task id only from a reply (the task, or the
// answer to Ask, which names it), so a hop whose blocking send is still
// waiting cannot be canceled yet: an agent that may have to pass a cancel
// down sends non-blocking (a2a.MessageSendConfig{Blocking: new(false)})
// and follows with Poll. After a lost first reply, Ask first (the
// delegator's retransmitter does); until a reply named the task,
// SendCancel fails and the caller keeps the signed "canceled" to send
// again.
func (c *Client) SendCancel(ctx context.Context, hop string, cancel handoff.Element) (*Reply, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	task, err := c.taskOf(hop)
	if err != nil {
		return nil, err
	}
	// Only a "canceled" goes out as a cancel; its signature is the
	// delegate's to check (D9).
	switch _, s, err := handoff.UnsafeDecode(cancel); {
	case err != nil:
		return nil, invalidf("a2ahandoff: SendCancel for hop %s needs a signed \"canceled\" status; this one cannot be read: %w", hop, err)
	case s == nil:
		return nil, invalidf("a2ahandoff: SendCancel for hop %s needs a signed \"canceled\" status, got an offer", hop)
	case s.State != handoff.StateCanceled:
		return nil, invalidf("a2ahandoff: SendCancel for hop %s needs a signed \"canceled\" status, got %q", hop, s.State)
	}
	t, err := c.a2a.CancelTask(ctx, &a2a.TaskIDParams{ID: task, Metadata: map[string]any{Key: cancel.Text()}})
	if err != nil {
		err = fmt.Errorf("a2ahandoff: canceling task %s of hop %s: %w", task, hop, err)
		if t2, gerr := c.a2a.GetTask(ctx, &a2a.TaskQueryParams{ID: task}); gerr == nil {
			return c.take(ctx, hop, t2), err
		}
		return nil, err
	}
	return c.take(ctx, hop, t), nil
}

// Forget drops what the client keeps in memory for a hop (its message and
// A2A task id). Call it once the hop is resolved (a verified "completed"
// or "failed" was taken in: Reply.Issued.Resolved) or abandoned; after it,
// Ask, Poll and Cancel no longer know the hop. The delegator's record of
// the hop is not touched. Without it the client's memory grows with every
// hop it carries. On a nil Client (or one not made by NewClient) it does
// nothing.
func (c *Client) Forget(hop string) {
	if c.usable(context.Background()) != nil {
		return
	}
	c.mu.Lock()
	delete(c.hops, hop)
	c.mu.Unlock()
}

// Carries reports whether this client carried the hop (and so can Ask,
// Poll and Cancel it). A nil Client (or one not made by NewClient)
// carries nothing.
func (c *Client) Carries(hop string) bool {
	if c.usable(context.Background()) != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hops[hop] != nil
}

// TaskID returns the A2A task of a hop, once a reply named it; "", false
// on a nil Client (or one not made by NewClient).
func (c *Client) TaskID(hop string) (a2a.TaskID, bool) {
	if c.usable(context.Background()) != nil {
		return "", false
	}
	t, err := c.taskOf(hop)
	return t, err == nil
}

func (c *Client) taskOf(hop string) (a2a.TaskID, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.hops[hop]
	if s == nil {
		return "", fmt.Errorf("%w: hop %s", ErrNotSent, hop)
	}
	if s.task == "" {
		return "", fmt.Errorf("a2ahandoff: no A2A task is known for hop %s (no reply named one)", hop)
	}
	return s.task, nil
}

// take feeds the statuses of a reply to the tracker.
func (c *Client) take(ctx context.Context, hop string, res a2a.SendMessageResult) *Reply {
	r := &Reply{Hop: hop, Result: res}
	// The first task that answered the offer is the hop's task; the
	// answer to a retransmission is a Message that names it in TaskID
	// (when the delegate knows it and authenticated this client as iss).
	var task a2a.TaskID
	switch v := res.(type) {
	case *a2a.Task:
		if v != nil {
			r.Task, task = v, v.ID
		}
	case *a2a.Message:
		if v != nil {
			task = v.TaskID
		}
	}
	if task != "" {
		c.mu.Lock()
		if s := c.hops[hop]; s != nil && s.task == "" {
			s.task = task
		}
		c.mu.Unlock()
	}
	sts, errs := Statuses(res)
	r.Statuses, r.Refused = sts, errs
	for _, st := range sts {
		iss, err := c.dl.Intake(ctx, hop, st)
		if err != nil {
			r.Refused = append(r.Refused, fmt.Errorf("status %s for hop %s: %w", st.Digest(), hop, err))
			continue
		}
		r.Issued = iss
	}
	return r
}

// cloneConfig is a deep copy of cfg (nil stays nil).
func cloneConfig(cfg *a2a.MessageSendConfig) *a2a.MessageSendConfig {
	if cfg == nil {
		return nil
	}
	c := *cfg
	c.AcceptedOutputModes = slices.Clone(cfg.AcceptedOutputModes)
	if cfg.Blocking != nil {
		c.Blocking = new(*cfg.Blocking)
	}
	if cfg.HistoryLength != nil {
		c.HistoryLength = new(*cfg.HistoryLength)
	}
	if cfg.PushConfig != nil {
		p := *cfg.PushConfig
		if p.Auth != nil {
			a := *p.Auth
			a.Schemes = slices.Clone(a.Schemes)
			p.Auth = &a
		}
		c.PushConfig = &p
	}
	return &c
}

// cloneMessage copies m (its metadata, extensions and parts lists).
func cloneMessage(m *a2a.Message) *a2a.Message {
	c := *m
	c.Metadata = maps.Clone(m.Metadata)
	c.Extensions = slices.Clone(m.Extensions)
	c.Parts = slices.Clone(m.Parts)
	return &c
}
