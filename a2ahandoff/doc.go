// Package a2ahandoff carries the agent handoff context inside real
// Agent2Agent (A2A) traffic, with the a2a-go SDK (A2A protocol 0.3), as the
// draft's "Carrying the Element" section says for A2A:
//
//   - the Handoff travels in Message.metadata under the key URI (the
//     extension URI), URI is listed in Message.extensions and in the
//     A2A-Extensions service parameter of the request (HTTP header
//     X-A2A-Extensions);
//   - a status travels under the same key in the metadata of the reply
//     Message, or of TaskStatus.message of the returned Task;
//   - the delegator's "canceled" travels under the same key in the
//     metadata of its Cancel Task request.
//
// # Carriage: what the metadata value is
//
// A2A metadata is JSON, decoded by the SDK into map[string]any, so every
// signed element travels as a string, whose characters (and so octets and
// handoff digest) survive any JSON decoder:
//
//   - a JSON Handoff is the JSON object itself, {"offer": "<element>",
//     "chain": ["<element>", ...], ...}, each element a compact JWS or the
//     base64url (no padding) of a tagged COSE_Sign1, exactly as the
//     draft's JSON Handoff writes it. The Handoff object is not signed, so
//     the receiver writes the decoded object back to JSON and reads it;
//     member order and white space do not matter, element octets do not
//     change;
//   - a CBOR Handoff is a string: the base64url (no padding) of its exact
//     CBOR octets. JSON metadata cannot hold CBOR byte strings, and this
//     keeps the CBOR form, unknown members included, octet for octet. A
//     string that decodes to JSON is refused (a JSON Handoff is an object);
//   - a status (and "canceled") is a string: the compact JWS, or the
//     base64url of the tagged COSE_Sign1 (handoff.Element.Text).
//
// Anything else under the key is a malformed Handoff (D3, bad-signature):
// the task is REJECTED with no status, since nothing verified names a
// party to address one to.
//
// The SDK decodes the request before the Executor sees it, so a JSON
// Handoff with a duplicate member name (the last wins), or with an
// escaped lone surrogate (it becomes U+FFFD), reaches the Executor as if
// it were strict: the Executor alone cannot see these, which the core
// parser refuses as bad-signature. StrictHandler, put in front of
// a2asrv.NewJSONRPCHandler, refuses such a request with a JSON-RPC error
// before the SDK reads it. Use it (other transports, such as gRPC, carry
// no JSON text to check).
//
// # Asking again into the hop's own task
//
// A retransmission sent into the hop's own A2A task (a message carrying
// the same Handoff and the original taskId, as a client re-sending after
// a lost reply does) is refused by a2a-go before any executor runs:
// "internal error" while the task runs, "invalid params" once it is
// terminal. Serve the Executor with NewHandler (in place of
// a2asrv.NewHandler): it answers every retransmission from the hop's
// record before a2a-go looks at the task, with or without a taskId. With
// a2asrv.NewHandler alone only a retransmission in a new message (no
// taskId, as Client.Ask sends it) is answered.
//
// The answer is a standalone Message (not added to any task's history)
// whose taskId names the A2A task carrying the hop, when the sender is
// authenticated as the offer's iss and the delegate (in this process)
// made that task: Client learns the task there after a lost first reply,
// and can then Poll and Cancel the hop.
//
// # Cancel
//
// A verified "canceled" is recorded, the agent's run stopped, and the
// task answered CANCELED before ServerConfig.OnCancel (passing the cancel
// down the chain) starts: OnCancel runs detached from the request, within
// ServerConfig.OnCancelTimeout, so a Cancel Task request never waits on
// the hops below.
//
// The layers, outermost first:
//
//	StrictHandler(a2asrv.NewJSONRPCHandler(NewHandler(x, a2asrv.WithCallInterceptor(auth))))
//
// # The two sides
//
// The delegate wraps its a2asrv.AgentExecutor in an Executor and serves
// it with NewHandler: the receiving checks (package delegate, with its
// durable hop store) run before the agent's code sees the task, and the
// A2A task states follow the draft's mapping table (offered SUBMITTED, accepted WORKING, rejected REJECTED,
// completed COMPLETED, failed FAILED, canceled CANCELED).
//
// The delegator wraps its a2aclient.Client in a Client, which carries the
// offers of a delegator.Delegator, feeds every status of the replies to
// its Intake, asks again with the identical octets, and cancels.
package a2ahandoff
