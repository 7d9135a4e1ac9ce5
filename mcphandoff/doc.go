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
// recorded. The dialog (step 5) is the MCP session id by default
// (ServerConfig.Dialog), and whether the host authenticated the sender as
// the offer's iss is ServerConfig.Authenticated (TokenUser for bearer
// tokens).
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
// Why Cancel needs Client.HTTPClient: the SDK sends the notifications/cancelled
// for a call whose context ends by itself, below any middleware, and a
// notifications/cancelled must name the JSON-RPC id of the request it
// cancels, which the SDK assigns below any middleware too. So the client
// learns each tools/call's id from the HTTP request that carries it (the
// HTTPClient only reads), cancels the call's context, and sends its own
// notifications/cancelled with the signed status through the SDK's sending
// chain (Attach). The SDK's plain notification for the same request is
// sent too; the server ignores a cancel without a signed status, beyond
// the request itself ending.
package mcphandoff
