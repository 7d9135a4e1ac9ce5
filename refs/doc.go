// Package refs checks the context references of offers and statuses (draft
// "Context References", step 7 of "Receiving an Offer", "Resource Use" and
// "Privacy Considerations").
//
// A ContextRef says "the sender asserts that this work depends on the
// object with this digest". Checking one has four honest outcomes:
// verified (the digest matched, and any proof checked against a trusted
// key), mismatch, unverifiable (the object could not be obtained or
// checked), and not checked. Nothing is reported verified unless the check
// was performed.
//
// # Kinds
//
//   - "digest": dig is SHA-256 of the octets.
//   - "salted-digest": dig is SHA-256 of a salt (32 random octets: SaltSize)
//     followed by the octets. The salt travels with the octets, never in
//     the element.
//   - "learnlog-head": dig is SHA-256 of the JCS (RFC 8785) form of the
//     SignedHead in proof, whose ES256 JWS a key trusted for the record's
//     producer signed (SPEC.md section 5; see learnlog.go for the profile).
//   - "scitt-receipt": a COSE Receipt with an RFC 9162 inclusion proof over
//     the Signed Statement (see scitt.go for the exact profile).
//   - any other kind is an absolute URI naming its definition; this
//     package does not check such references, so they are "unverifiable"
//     whether or not policy requires them (only a required one rejects the
//     offer). A Digest alg other than
//     sha-256 is unverifiable for every kind.
//
// # Policy
//
// A Checker applies a Policy. A reference is required by kind, by the
// scheme of its loc, or because all are. A required reference is checked
// with everything the policy allows, including a fetch from loc, and if it
// is not verified the offer is rejected: "ref-mismatch" when a required
// reference mismatched, "unverifiable-ref" otherwise. A reference that is
// not required is checked only with what is already at hand (octets the
// host supplied, a learnlog head's proof; a salt without its octets is not
// enough), never fetched, and never rejects. The host supplies octets and salts with the task, by index in
// refs or as objects found by digest (Material, passed through the
// context with WithMaterial).
//
// # Fetching
//
// Fetching from loc is off unless the policy turns it on, and then runs
// under safeguards that are all on by default: only senders on a
// trusted-fetch list, only allowed schemes (https) and hosts (none by
// default), a size cap (1 MiB), a timeout (10 s) per fetch and one deadline
// (30 s) for all the fetches of a check, at most 3 redirects,
// only within the same host, never from https to http and never to a URL
// with credentials, and no loopback, private, link-local or other
// non-public address (IPv6 forms that embed an IPv4 address included),
// checked at connection time so that DNS rebinding cannot get
// past it. Each refusal is an unverifiable outcome whose error names the
// safeguard (ErrUntrustedSender, ErrSchemeNotAllowed, ErrHostNotAllowed,
// ErrPrivateAddress, ErrRedirect, ErrTooLarge, ErrTimeout) and the
// reference's index (RefError).
//
// # Privacy: guessable digests
//
// A digest of low-entropy content, such as a short prompt, an instruction
// template or a yes/no answer, can be reversed by hashing guesses. Prompts
// and other sensitive content must be named by digest only, never
// included, and must be named with kind "salted-digest": make such
// references with NewSaltedRef (or `handoff ref --salted`) and deliver the
// salt with the octets, never in the element. NewDigestRef is for content
// nobody could guess, such as a whole document or a build artifact.
//
// # Status refs
//
// A "completed" status names its result in refs and a "failed" one lists
// what took effect. Checker.CheckStatus checks them against the objects
// the delegator received with the status.
package refs
