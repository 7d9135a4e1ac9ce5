// Package demo is `handoff demo`: four agents on loopback (an assistant,
// a planner, a coder and a tester), each with its own P-256 key, trust
// file, SQLite hop store and HTTP listener, talking through the real A2A
// (a2a-go) and MCP (go-sdk) servers and clients with packages a2ahandoff
// and mcphandoff.
//
// The assistant hands a task to the planner over A2A, the planner passes
// it on to the coder over A2A, and the coder calls the tester's MCP tool:
// the chain grows hop by hop and each receiver verifies it. Then the demo
// shows, each with a real message through the real servers, what the
// protocol prevents: a replayed offer answered from the record, an
// equivocating offer refused, an offer copied to the wrong agent refused,
// a hop removed from the chain detected, a lost status recovered by asking
// again, and a cancel that follows the chain down.
//
// Run returns the Timeline: one Step per message, with its carrier, the
// receiver's verdict and the verdict wanted, so that tests check
// structured entries; the same steps are printed as they happen.
package demo
