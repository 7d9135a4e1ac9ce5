// Command relayagent is an A2A agent with no handoff code that does its
// work by calling a tool on an MCP server, for trying the gateway's
// egress (docs/gateway.md, "Three agents in a row"): each message's text
// goes to the tool, and the tool's answer completes the task. It calls
// the tool through its gateway's egress, and passes on, with each call,
// the Handoff-Link and traceparent headers of the request it is doing the
// work of, as an agent that can does: that is how the gateway links the
// call to the work it serves.
//
//	go run ./cmd/handoff/internal/gateway/relayagent [-listen 127.0.0.1:7002] [-tool http://127.0.0.1:8603/tester/] [-name echo]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type relay struct {
	tool, name string
}

// passOn are the inbound request's headers each outbound call carries.
var passOn = []string{"Handoff-Link", "Traceparent", "Tracestate"}

func (r relay) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	var text []string
	for _, p := range rc.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			text = append(text, tp.Text)
		}
	}
	h := http.Header{}
	if cc, ok := a2asrv.CallContextFrom(ctx); ok {
		for _, k := range passOn {
			if v, ok := cc.RequestMeta().Get(strings.ToLower(k)); ok && len(v) == 1 {
				h.Set(k, v[0])
			}
		}
	}
	if rc.StoredTask == nil {
		if err := q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
	}
	say := func(state a2a.TaskState, s string) error {
		ev := a2a.NewStatusUpdateEvent(rc, state, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: s}))
		ev.Final = state.Terminal()
		return q.Write(ctx, ev)
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "relayagent", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.tool, HTTPClient: &http.Client{Transport: headers{h, http.DefaultTransport}}}, nil)
	if err != nil {
		return say(a2a.TaskStateFailed, "the tool server cannot be reached: "+err.Error())
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: r.name, Arguments: map[string]any{"text": strings.Join(text, " ")}})
	if err != nil {
		return say(a2a.TaskStateFailed, "the tool call failed: "+err.Error())
	}
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	if res.IsError {
		return say(a2a.TaskStateFailed, "the tool says: "+strings.Join(out, " "))
	}
	return say(a2a.TaskStateCompleted, "the tool says: "+strings.Join(out, " "))
}

func (relay) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// headers adds h to every request.
type headers struct {
	h    http.Header
	base http.RoundTripper
}

func (t headers) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.h {
		req.Header[k] = v
	}
	return t.base.RoundTrip(req)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:7002", "where the agent listens")
	tool := flag.String("tool", "http://127.0.0.1:8603/tester/", "the MCP endpoint it calls (its gateway's egress route)")
	name := flag.String("name", "echo", "the tool it calls, with the message's text as {\"text\": ...}")
	flag.Parse()
	card := &a2a.AgentCard{Name: "relay", Description: "asks a tool (no handoff code)", Version: "1",
		ProtocolVersion: "0.3.0", URL: "http://" + *listen + "/", PreferredTransport: a2a.TransportProtocolJSONRPC,
		Capabilities: a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "relay", Name: "relay", Description: "asks the tool", Tags: []string{"relay"}}}}
	mux := http.NewServeMux()
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(relay{tool: *tool, name: *name})))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	fmt.Printf("relayagent: an A2A agent with no handoff code on http://%s/, calling the tool %q at %s\n", *listen, *name, *tool)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
