// Package handoff implements the agent handoff context
// (draft-agent-handoff-01): what one AI agent signs when it hands a task to
// another, what the other checks before it takes the work, and what it
// answers.
//
// # The protocol on one page
//
// A delegator hands work to a delegate in a host protocol's message (an A2A
// message, an MCP tool call). With it goes a [Handoff]:
//
//	Handoff { offer, chain? }
//
// The offer is an [Element]: an [Offer] signed by the delegator, as a JWS
// compact serialization ([FormJWS]) or a COSE_Sign1 ([FormCOSE]), ES256
// only. An offer names one hop of the work: its [Offer.Hop] (fresh for
// every offer, never signed twice), [Offer.Iss] (the delegator) and
// [Offer.Aud] (the delegate), the host protocol's [Offer.Dialog], a short
// lifetime ([Offer.Iat], [Offer.Exp]), the principal it acts for
// ([Offer.Obo]), and, when the delegator itself received the work, the
// [Digest] of the offer that reached it ([Offer.Prev]). The offers that led
// here travel as the chain, oldest first, each linked to the next by those
// digests ([Handoff.PassOn] builds it). A Handoff is encoded in strict JSON
// or deterministic CBOR ([Encoding]); [ParseHandoff] decodes either, within
// [Limits], and nothing it decodes costs more than a small constant times
// its size.
//
// The delegate checks a Handoff in the draft's order ([Receiver.Receive]):
//
//  1. the offer's signature, with a key bound to its iss ([KeySource],
//     package trust): untrusted-key when no key is bound, bad-signature
//     when the signature (or the element's form) does not hold;
//  2. its audience is this agent (wrong-audience);
//  3. it is fresh: issued lately, not expired, a lifetime within bounds
//     (stale);
//  4. its (iss, hop) was not seen before ([ReplayMemory]): the same signed
//     content again is a retransmission, answered with the hop's status,
//     never processed again; other signed content is an equivocation; an
//     offer the memory may have lost (issued before [Options.Since]) is
//     replay;
//  5. the dialog is the host message's (policy);
//  6. the chain: each element verifies, and each links to the next
//     (broken-chain), with no cycle (cycle) and within the length bound
//     (too-deep); [ChainQuality] says how much of it was checked;
//  7. the offer's context references ([ContextRef]) against what they
//     name ([RefCheck], package refs): unverifiable-ref, ref-mismatch.
//
// Each failure is a [*CheckError] that names its [Reason] (one per draft
// code), the step, the hop, the chain index and the member; errors.Is
// matches the reason's sentinel ([ErrBadSignature] and the others).
//
// The delegate answers with a [Status] signed by itself, addressed to the
// offer's iss and naming the offer by digest: accepted or rejected (with a
// reason), then completed or failed once the outcome is known
// ([Signer.SignStatus]). The delegator can cancel a hop with a status it
// signs itself (canceled). [VerifyStatus] checks a status against the offer
// it answers: signer, audience, digest, freshness, and whether it may set
// the hop's state at all ([VerifiedStatus.SetsState]).
//
// # Where the rest lives
//
// This package is the element: the data model, its encodings and
// signatures, and the stateless checks. Around it:
//
//   - trust: keys bound to agent identifiers, and the trust file;
//   - refs: step 7, checking and making context references;
//   - delegate: the durable receiving side (records every hop before it
//     answers, so that nothing is done twice or lost in a crash);
//   - delegator: the handing-over side (tracks each hop, asks again,
//     passes cancels down the chain);
//   - store, store/sqlite, store/postgres: where the two sides keep their
//     records;
//   - a2ahandoff, mcphandoff: carriage in A2A and MCP.
//
// # A worked example
//
// A planner that received work from an assistant passes it to a coder;
// the coder checks the chain of both offers:
//
//	first, _ := assistant.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
//		Iss: "https://assistant.example", Aud: "https://planner.example", Iat: now, Exp: now + 300}, handoff.FormJWS)
//	prev := first.Digest()
//	next, _ := planner.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx-42",
//		Iss: "https://planner.example", Aud: "https://coder.example", Iat: now, Exp: now + 300, Prev: &prev}, handoff.FormJWS)
//	b, _ := (&handoff.Handoff{Offer: first}).PassOn(next).Encode(handoff.CBOR)
//
//	coder, _ := handoff.NewReceiver(handoff.Options{Me: "https://coder.example", Keys: keys, RequireFullChain: true})
//	res, err := coder.Receive(ctx, b, "ctx-42") // accepted, chain full
//	res, _ = coder.Receive(ctx, b, "ctx-42")    // retransmission: never processed again
//
// The examples of [Receiver.Receive], [Signer.SignOffer], [Handoff.PassOn]
// and [VerifyStatus] run this flow in full.
package handoff

// DraftRevision is the revision of the agent handoff draft this package
// implements.
const DraftRevision = "draft-agent-handoff-01"
