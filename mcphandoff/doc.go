// Package mcphandoff carries the agent handoff context in MCP traffic
// (draft-agent-handoff-01, "Carrying the Element", MCP), over the real
// MCP Go SDK (github.com/modelcontextprotocol/go-sdk).
//
// One _meta key, Key ("quantumlearningmachines.com/agent-handoff"), carries:
//
//   - the Handoff, in the params of tools/call: a JSON Handoff as the JSON
//     object itself; a CBOR Handoff as a string, the base64url (no
//     padding) of its CBOR octets (see HandoffValue);
//   - a status, in the CallToolResult: a string, the compact JWS or the
//     base64url COSE_Sign1, exact octets (see StatusValue);
//   - the delegator's "canceled", in the params of notifications/cancelled,
//     as a status string.
//
// The delegate's side is Server, a receiving middleware for an
// *mcp.Server. The receiving checks (package delegate, with its hop store)
// run, and the decision is recorded, before the tool handler sees the
// call. A rejection is a tool error (CallToolResult.IsError) with the
// signed "rejected" in _meta; accepted work runs the tool exactly once,
// under a context of its own that only a verified cancel (or an
// equivocation) ends, and its reply carries "completed" or "failed"; a
// retransmission is answered from the hop store with the identical status
// octets ("accepted" while the work runs) and never runs the tool again; a
// verified "canceled" in notifications/cancelled stops the work and is
// recorded. Build it with New, which sets the delegate's Config.Stop to
// Server.Stop, so that stops the delegate learns of another way (a
// duplicate delivery applying a held cancel, another carrier) reach the
// work too. The dialog (step 5) is the MCP session id by default
// (ServerConfig.Dialog), and whom the host authenticated as the sender is
// ServerConfig.Sender (TokenUser for bearer tokens); the delegate compares
// it with the verified offer's iss.
//
// Put StrictHandler in front of mcp.NewStreamableHTTPHandler. The SDK
// decodes _meta into map[string]any before any middleware runs, so a JSON
// Handoff with a duplicate member ("offer" twice: the last wins), a nested
// duplicate or a lone surrogate (\ud800) reaches Server looking clean,
// where the core parser refuses it as bad-signature (step 1). Without the
// wrapper these cannot be seen; with it such a request is answered with a
// JSON-RPC error naming the check and no tool runs.
//
// The delegator's side is Client: Call sends a tools/call with the Handoff
// and feeds the status in the reply to the delegator's Intake; Ask resends
// the identical call, which is how a delegator over MCP learns a status
// later than the one its call returned (a tool call gets one reply); Cancel
// sends the signed "canceled" in a notifications/cancelled.
//
// How the signed cancel travels. Client.Cancel (or SendCancel) sends a
// notifications/cancelled of its own, built by this package, whose params
// name the JSON-RPC id of the hop's last tools/call on that session and
// carry the signed "canceled" under Key in _meta. It goes down the
// *mcp.Client's sending middleware chain from where Attach installed it
// (the middlewares added after Attach, then the SDK's own sending), so it
// is sent on the same session as the call. The SDK assigns request ids
// below every middleware, so the id is learned where the message is
// written: connect through Client.Transport, which, for any transport
// (stdio, in-memory, command, ...), wraps each mcp.Connection so that its
// Write notes the id of a tools/call sent by Call or Ask. The one
// exception is *mcp.StreamableClientTransport: go-sdk v1.8.0 tells its
// connection the negotiated session through an unexported method
// (sessionUpdated: the MCP-Protocol-Version header, the standalone SSE
// stream), which no wrapper outside the SDK can forward, so Transport
// leaves that connection alone and gives the transport
// Client.HTTPClient instead, which notes the id from the HTTP request
// (HTTPClient on the transport by hand does the same). The call's context
// carries which hop and session a write belongs to, so ids are kept per
// *mcp.ClientSession (sessions off HTTP all have the ID ""). Cancel
// needs Attach on the mcp.Client, the transport through Transport (or
// HTTPClient), and the ClientSession the hop's tools/call went over;
// otherwise the cancel is signed and recorded but not sent (ErrNotSent).
// A call still in flight is canceled too, and the SDK then sends its own
// plain notifications/cancelled for it; go-sdk v1.8.0 sends that one with
// conn.Notify, below every sending middleware, so it cannot carry the
// signed status, and the server ignores a cancel without one beyond the
// request itself ending.
//
// Multi-round-trip tool calls (SEP-2322). A tool result with InputRequests
// is no outcome: the hop stays "accepted", and the same tools/call sent
// again with the answers (the same Handoff, so a retransmission to the
// delegate) runs the tool again under the same hop, if it comes from the
// sender authenticated as the offer's iss. This middleware sees the rounds
// only at protocol 2026-07-28 and later, where the SDK client answers and
// resends; go-sdk v1.8.0 serves that version only with
// StreamableHTTPOptions.Stateless. Below it, the SDK server's own
// multi-round-trip middleware, which mcp.NewServer installs inside this
// one, runs every round within the one tools/call this middleware sees.
// On a stateless handler go-sdk v1.8.0 closes the per-request session as
// soon as it answers a notification's POST with 202, so a
// notifications/cancelled reaches no middleware: Client.Cancel then
// records and sends the signed "canceled" without error, but the delegate
// never sees it and the work is not stopped.
package mcphandoff
