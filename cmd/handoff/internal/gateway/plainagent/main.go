// Command plainagent is an A2A agent with no handoff code at all, for
// trying the gateway (docs/gateway.md): it answers each message with a
// completed task whose artifact echoes the message's text. Run it, then
// put `handoff serve --config docs/gateway.yaml` in front of it.
//
//	go run ./cmd/handoff/internal/gateway/plainagent [-listen 127.0.0.1:7000]
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
)

type echo struct{}

func (echo) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	var text []string
	for _, p := range rc.Message.Parts {
		if tp, ok := p.(a2a.TextPart); ok {
			text = append(text, tp.Text)
		}
	}
	if rc.StoredTask == nil {
		if err := q.Write(ctx, a2a.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
	}
	if err := q.Write(ctx, a2a.NewArtifactEvent(rc, a2a.TextPart{Text: "you said: " + strings.Join(text, " ")})); err != nil {
		return err
	}
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: "done"}))
	ev.Final = true
	return q.Write(ctx, ev)
}

func (echo) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:7000", "where the agent listens")
	flag.Parse()
	card := &a2a.AgentCard{Name: "echo", Description: "echoes the text of each message (no handoff code)", Version: "1",
		ProtocolVersion: "0.3.0", URL: "http://" + *listen + "/", PreferredTransport: a2a.TransportProtocolJSONRPC,
		Capabilities: a2a.AgentCapabilities{Streaming: true}, DefaultInputModes: []string{"text"}, DefaultOutputModes: []string{"text"},
		Skills: []a2a.AgentSkill{{ID: "echo", Name: "echo", Description: "echoes the text", Tags: []string{"echo"}}}}
	mux := http.NewServeMux()
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(echo{})))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	fmt.Printf("plainagent: an A2A agent with no handoff code on http://%s/\n", *listen)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
