// Package trust holds a receiver's trust configuration: the keys it binds to
// each AgentId.
//
// It implements the "Learning Keys" section of draft-agent-handoff-01. A
// receiver MUST use a key only if its own trust configuration binds that key
// to the iss of the message: [Config.Keys] answers exactly that question, for
// an iss and, where the message names one, a kid (SPEC.md D1(b), D10). A key
// carried inside a message is never trusted by itself; nothing in this
// package reads keys from messages.
//
// Each trusted key carries exactly one algorithm (the draft's "exactly one
// algorithm" rule, SPEC.md D2). Today that is always [ES256] on P-256; a
// trust-file key without "alg" takes ES256, the one algorithm of its curve.
// The verifier compares the message's alg with [Key.Alg]; the message header
// never chooses the algorithm.
//
// The trust file (SPEC.md section 4) is JSON:
//
//	{"agents": [
//	  {"id": "https://planner.example/agent",
//	   "keys": [{"kty": "EC", "crv": "P-256", "x": "...", "y": "...",
//	             "alg": "ES256", "kid": "<thumbprint>"}]}
//	]}
//
// It is read strictly: duplicate member names, invalid UTF-8, trailing data,
// unknown members of the file and agent objects, an agent without keys, and
// any key that is not a public EC P-256 ES256 key make the whole file
// invalid. Nothing is silently skipped, and every error names the agent and
// the key's position and kid (see [FileError]).
//
// A key's kid is the JWK's "kid" when given, else its RFC 7638 thumbprint
// ([Thumbprint]). The package also reads and writes the JWKs of the
// handoff keygen and pubkey commands.
package trust
