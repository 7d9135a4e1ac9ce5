// Command plainmcp is an MCP server with no handoff code at all, for
// trying the gateway's MCP routes (docs/gateway.md): one tool, "echo",
// that answers with the text it was given, over streamable HTTP. Run it,
// then put `handoff serve --config docs/gateway.yaml` in front of it.
//
//	go run ./cmd/handoff/internal/gateway/plainmcp [-listen 127.0.0.1:7001]
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoArgs struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

func echo(_ context.Context, _ *mcp.CallToolRequest, a echoArgs) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "you said: " + a.Text}}}, nil, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:7001", "where the server listens (its endpoint is /mcp)")
	flag.Parse()
	s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echoes the text (no handoff code)"}, echo)
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	log.Printf("plainmcp: an MCP server with no handoff code on http://%s/mcp", *listen)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
