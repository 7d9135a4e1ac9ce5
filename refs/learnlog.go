package refs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/es256"
	"github.com/quantumlearningmachines/handoff/internal/jcs"
	"github.com/quantumlearningmachines/handoff/internal/wire"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The learnlog-head profile (SPEC.md section 5; draft appendix "Referencing
// a Learnlog Signed Head"). The Learnlog document is not available here, so
// this is the project's profile of the appendix's description:
//
//	proof = SignedHead = {
//	  "head": { "record_hash": B64u, "seq": uint, "entry_hash": B64u,
//	            "time": Time, * text => any },
//	  "jws": JwsCompact
//	}
//
// The SignedHead is closed (exactly head and jws); the head is open.
// dig is the SHA-256 of the UTF-8 octets of the RFC 8785 (JCS) form of the
// whole SignedHead (package internal/jcs). jws is an RFC 7515 compact JWS
// whose protected header is one JSON object with alg "ES256" and a
// non-empty kid, the JWK thumbprint (RFC 7638) of the signing key; typ is
// optional and, when present, must not be the handoff typ
// (agent-handoff+jwt), so a signed handoff is never taken for a head; other
// header members are ignored, except crit, which is refused; the signature
// is the 64-octet R||S form. Its payload must equal JCS(head) octet for
// octet. seq and time are integers in [0, 2^53-1] (JSON integer literals,
// CBOR major type 0), so that every JSON implementation reads them exactly.
//
// The check, in order, and the outcome of each failure:
//
//  1. proof present, dig's alg "sha-256"; else unverifiable (nothing to
//     check / an unimplemented digest: draft "Data Model", Digest).
//  2. JCS(proof) computable and SHA-256 of it equal to dig; else mismatch.
//  3. proof is a SignedHead as above (members, types, B64u, ranges); else
//     mismatch: the object the delegator committed to is not a valid head.
//  4. The JWS header: JSON, alg ES256 (any other alg is refused because the
//     trusted key's algorithm decides, SPEC D2), kid present, no crit,
//     typ not the handoff typ; else mismatch (SPEC D1 makes these
//     bad-signature, which for a reference is "mismatch").
//  5. Keys: for each producer in turn, the keys the trust configuration
//     binds to it with the header's kid (D10); when none has that kid, the
//     producer's keys whose thumbprint is the kid (a trust file may name a
//     key otherwise). Either way a key is used only when its RFC 7638
//     thumbprint equals the kid: the profile's kid is the thumbprint, so a
//     kid that is only a trust file's label selects nothing. No such key
//     for any producer: unverifiable (SPEC D1 untrusted-key). Keys found but
//     none verifies the signature: mismatch (D1 bad-signature: a present,
//     wrong signature is evidence against the reference, never mere
//     inability to check).
//  6. The JWS payload equals JCS(head); else mismatch.
//
// A verified head shows that the producer committed to its record up to
// that entry; it does not show that the record is complete (draft, Limits).

// LearnlogHead is the head of a Learnlog record: the latest entry.
type LearnlogHead struct {
	RecordHash string         // B64u
	Seq        uint64         // at most 2^53-1
	EntryHash  string         // B64u
	Time       int64          // seconds since the epoch, in [0, 2^53-1]
	Extra      map[string]any // other members, kept in head and signed
}

// maxSafe is the largest integer the profile allows for seq and time.
const maxSafe = 1<<53 - 1

// handoff typ that a head's JWS must not carry (draft "Cross-Protocol
// Confusion").
const handoffTyp = "agent-handoff+jwt"

// Value returns the head as a value tree, ready for JCS or for a proof.
func (h LearnlogHead) Value() (map[string]any, error) {
	if err := checkB64u(h.RecordHash); err != nil {
		return nil, fmt.Errorf("record_hash: %v", err)
	}
	if err := checkB64u(h.EntryHash); err != nil {
		return nil, fmt.Errorf("entry_hash: %v", err)
	}
	if h.Seq > maxSafe {
		return nil, fmt.Errorf("seq %d beyond 2^53-1", h.Seq)
	}
	if h.Time < 0 || h.Time > maxSafe {
		return nil, fmt.Errorf("time %d outside [0, 2^53-1]", h.Time)
	}
	m := make(map[string]any, 4+len(h.Extra))
	for k, v := range h.Extra {
		m[k] = v
	}
	for _, k := range []string{"record_hash", "seq", "entry_hash", "time"} {
		if _, ok := m[k]; ok {
			return nil, fmt.Errorf("Extra member %q is a defined member", k)
		}
	}
	m["record_hash"] = h.RecordHash
	m["seq"] = h.Seq
	m["entry_hash"] = h.EntryHash
	m["time"] = uint64(h.Time)
	if _, err := jcs.Marshal(m); err != nil {
		return nil, err
	}
	return m, nil
}

// SignLearnlogHead signs h with key (P-256): the JWS has the protected
// header {"alg":"ES256","kid":<thumbprint>} and the payload JCS(head). It
// returns the SignedHead value tree {"head": ..., "jws": ...}, the proof of
// a learnlog-head reference, and its dig.
func SignLearnlogHead(h LearnlogHead, key *ecdsa.PrivateKey) (map[string]any, handoff.Digest, error) {
	if key == nil || key.Curve != elliptic.P256() {
		return nil, handoff.Digest{}, errors.New("refs: learnlog head signing key must be P-256 (ES256)")
	}
	head, err := h.Value()
	if err != nil {
		return nil, handoff.Digest{}, fmt.Errorf("refs: learnlog head: %w", err)
	}
	payload, err := jcs.Marshal(head)
	if err != nil {
		return nil, handoff.Digest{}, fmt.Errorf("refs: learnlog head: %w", err)
	}
	hdr := jcs.AppendString([]byte(`{"alg":"ES256","kid":`), trust.Thumbprint(&key.PublicKey))
	hdr = append(hdr, '}')
	var out []byte
	out = b64u.AppendEncode(out, hdr)
	out = append(out, '.')
	out = b64u.AppendEncode(out, payload)
	sum := sha256.Sum256(out)
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		return nil, handoff.Digest{}, fmt.Errorf("refs: learnlog head: sign: %w", err)
	}
	var sig [64]byte
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	out = append(out, '.')
	out = b64u.AppendEncode(out, sig[:])

	sh := map[string]any{"head": head, "jws": string(out)}
	dig, err := LearnlogHeadDigest(sh)
	if err != nil {
		return nil, handoff.Digest{}, err
	}
	return sh, dig, nil
}

// NewLearnlogHeadRef makes a learnlog-head reference: h signed with key
// (see SignLearnlogHead) as proof, and dig over its JCS form. loc is
// optional. The proof is a value tree that encodes in JSON and CBOR
// Handoffs alike.
func NewLearnlogHeadRef(h LearnlogHead, key *ecdsa.PrivateKey, loc string) (handoff.ContextRef, error) {
	sh, dig, err := SignLearnlogHead(h, key)
	if err != nil {
		return handoff.ContextRef{}, err
	}
	return handoff.ContextRef{Kind: handoff.KindLearnlogHead, Dig: dig, Loc: loc, Proof: sh}, nil
}

// LearnlogHeadDigest returns the dig of a SignedHead: SHA-256 of its JCS
// form. signedHead is a value tree (as decoded from JSON or CBOR, or as
// SignLearnlogHead returns it).
func LearnlogHeadDigest(signedHead any) (handoff.Digest, error) {
	b, err := jcs.Marshal(signedHead)
	if err != nil {
		return handoff.Digest{}, fmt.Errorf("refs: learnlog head: %w", err)
	}
	return handoff.DigestOf(b), nil
}

// checkLearnlogHead checks a "learnlog-head" reference (SPEC.md section 5)
// as the profile above says: dig against the JCS form of the SignedHead in
// proof, then the head's JWS against a key trusted (in keys) for one of
// producers, then that the JWS payload equals JCS(head). It returns
// RefVerified and nil, or RefMismatch / RefUnverifiable with an error
// wrapping handoff.ErrRefMismatch / handoff.ErrUnverifiableRef that names
// the failed check.
func checkLearnlogHead(ref handoff.ContextRef, keys handoff.KeySource, producers []string) (handoff.RefOutcome, error) {
	// 1. Something to check, with a digest we implement.
	if ref.Proof == nil {
		return llUnverifiable("proof: missing; the SignedHead travels in proof")
	}
	if ref.Dig.Alg != handoff.AlgSHA256 {
		return llUnverifiable("dig: alg %q is not implemented", ref.Dig.Alg)
	}
	// 2. dig.
	canon, err := jcs.Marshal(ref.Proof)
	if err != nil {
		return llMismatch("dig: the proof has no JCS form: %v", err)
	}
	if !ref.Dig.Matches(canon) {
		return llMismatch("dig: not the SHA-256 of the JCS form of proof")
	}
	// 3. The SignedHead's shape.
	head, compact, err := decodeSignedHead(ref.Proof)
	if err != nil {
		return llMismatch("proof: %v", err)
	}
	// 4. The JWS.
	tok, err := parseHeadJWS(compact)
	if err != nil {
		return llMismatch("proof.jws: %v", err)
	}
	// 5. A trusted key for a producer, and the signature.
	if keys == nil || len(producers) == 0 {
		return llUnverifiable("proof.jws: no producer with trusted keys to check the head against")
	}
	tried := 0
	var lastErr error
	for _, p := range producers {
		for _, k := range producerKeys(keys, p, tok.kid) {
			tried++
			if k.Alg != jwsES256 {
				lastErr = fmt.Errorf("key %q of %q is for %s, the head uses ES256", k.Kid, p, k.Alg)
				continue
			}
			if !verifyES256(k.Public, tok.signingInput, tok.sig[:]) {
				lastErr = fmt.Errorf("the signature does not verify with key %q of %q", k.Kid, p)
				continue
			}
			// 6. The payload is the head.
			headJCS, _ := jcs.Marshal(head) // part of proof, which has a JCS form
			if !bytes.Equal(tok.payload, headJCS) {
				return llMismatch("proof.jws: the payload is not the JCS form of proof.head")
			}
			return handoff.RefVerified, nil
		}
	}
	if tried == 0 {
		return llUnverifiable("proof.jws: no key trusted for producer %s with kid %q", quoteList(producers), tok.kid)
	}
	return llMismatch("proof.jws: %v", lastErr)
}

func llMismatch(format string, args ...any) (handoff.RefOutcome, error) {
	return handoff.RefMismatch, fmt.Errorf("%w: learnlog-head: "+format, append([]any{handoff.ErrRefMismatch}, args...)...)
}

func llUnverifiable(format string, args ...any) (handoff.RefOutcome, error) {
	return handoff.RefUnverifiable, fmt.Errorf("%w: learnlog-head: "+format, append([]any{handoff.ErrUnverifiableRef}, args...)...)
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// producerKeys returns the keys bound to p that the kid selects: those
// named kid, else those whose thumbprint is kid; and of those only the keys
// whose RFC 7638 thumbprint is kid. The profile's kid is the signing key's
// thumbprint (SPEC.md section 5), so a head whose kid is a trust file's
// label for the key, not its thumbprint, finds no key: unverifiable, as for
// an untrusted key (SPEC D1 untrusted-key), never verified.
func producerKeys(keys handoff.KeySource, p, kid string) []trust.Key {
	var out []trust.Key
	for _, k := range keys.Keys(p, kid) {
		if k.Public != nil && trust.Thumbprint(k.Public) == kid {
			out = append(out, k)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, k := range keys.Keys(p, "") {
		if k.Public != nil && trust.Thumbprint(k.Public) == kid {
			out = append(out, k)
		}
	}
	return out
}

// decodeSignedHead checks the SignedHead shape and returns head (as given)
// and the JWS text.
func decodeSignedHead(proof any) (head any, compact string, err error) {
	m, ok := wire.Members(proof)
	if !ok {
		return nil, "", fmt.Errorf("is %s, want a SignedHead map", wire.TypeName(proof))
	}
	for k := range m {
		if k != "head" && k != "jws" {
			return nil, "", fmt.Errorf("member %q: a SignedHead has exactly head and jws", k)
		}
	}
	head, ok = m["head"]
	if !ok {
		return nil, "", errors.New("head: missing")
	}
	j, ok := m["jws"]
	if !ok {
		return nil, "", errors.New("jws: missing")
	}
	compact, ok = j.(string)
	if !ok {
		return nil, "", fmt.Errorf("jws: is %s, want text", wire.TypeName(j))
	}
	h, ok := wire.Members(head)
	if !ok {
		return nil, "", fmt.Errorf("head: is %s, want a map", wire.TypeName(head))
	}
	for _, name := range []string{"record_hash", "entry_hash"} {
		v, ok := h[name]
		if !ok {
			return nil, "", fmt.Errorf("head.%s: missing", name)
		}
		s, ok := v.(string)
		if !ok {
			return nil, "", fmt.Errorf("head.%s: is %s, want B64u text", name, wire.TypeName(v))
		}
		if err := checkB64u(s); err != nil {
			return nil, "", fmt.Errorf("head.%s: %v", name, err)
		}
	}
	for _, name := range []string{"seq", "time"} {
		v, ok := h[name]
		if !ok {
			return nil, "", fmt.Errorf("head.%s: missing", name)
		}
		n, ok := v.(uint64)
		if !ok {
			return nil, "", fmt.Errorf("head.%s: is %s, want a non-negative integer", name, wire.TypeName(v))
		}
		if n > maxSafe {
			return nil, "", fmt.Errorf("head.%s: %d is beyond 2^53-1", name, n)
		}
	}
	return head, compact, nil
}

var b64u = base64.RawURLEncoding.Strict()

// checkB64u checks strict base64url: the alphabet only (the decoder would
// skip CR and LF), no padding, canonical trailing bits, not empty.
func checkB64u(s string) error {
	if s == "" {
		return errors.New("empty base64url")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("character %q at offset %d is not base64url", c, i)
		}
	}
	if _, err := b64u.DecodeString(s); err != nil {
		return errors.New("not strict base64url without padding")
	}
	return nil
}

const jwsES256 = "ES256"

// headJWS is a parsed, not yet verified, compact JWS of a head.
type headJWS struct {
	kid          string
	payload      []byte
	signingInput []byte
	sig          [64]byte
}

// parseHeadJWS checks a head's compact JWS without a key. It is written
// here, not in internal/jws, because that package's profile is the
// handoff's (typ agent-handoff+jwt required, no other header member) and
// must stay so.
func parseHeadJWS(compact string) (*headJWS, error) {
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		return nil, fmt.Errorf("%d parts, want a compact JWS of 3", len(parts))
	}
	raw := make([][]byte, 3)
	for i, name := range []string{"header", "payload", "signature"} {
		if err := checkB64u(parts[i]); err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		raw[i], _ = b64u.DecodeString(parts[i])
	}
	hv, err := wire.DecodeJSON(raw[0])
	if err != nil {
		return nil, fmt.Errorf("header: %v", err)
	}
	h, ok := hv.(map[string]any)
	if !ok {
		return nil, errors.New("header: not a JSON object")
	}
	if _, ok := h["crit"]; ok {
		return nil, errors.New("header: crit is not allowed (no extension is understood)")
	}
	alg, ok := h["alg"].(string)
	if !ok {
		return nil, errors.New("header: alg missing or not text")
	}
	if alg != jwsES256 {
		return nil, fmt.Errorf("header: alg %q; the trusted keys are ES256 (SPEC D2)", alg)
	}
	kid, ok := h["kid"].(string)
	if !ok || kid == "" {
		return nil, errors.New("header: kid missing, empty or not text (the profile's kid is the key's thumbprint)")
	}
	if t, present := h["typ"]; present {
		ts, ok := t.(string)
		if !ok {
			return nil, errors.New("header: typ is not text")
		}
		if strings.EqualFold(strings.TrimPrefix(strings.ToLower(ts), "application/"), handoffTyp) {
			return nil, fmt.Errorf("header: typ %q is a signed handoff's, not a head's", ts)
		}
	}
	if len(raw[2]) != 64 {
		return nil, fmt.Errorf("signature: %d octets, want 64 (R||S)", len(raw[2]))
	}
	t := &headJWS{kid: kid, payload: raw[1], signingInput: []byte(compact[:len(parts[0])+1+len(parts[1])])}
	copy(t.sig[:], raw[2])
	return t, nil
}

// verifyES256 checks a 64-octet R||S signature over msg.
func verifyES256(pub *ecdsa.PublicKey, msg, sig []byte) bool {
	if pub == nil || pub.Curve == nil || pub.Curve.Params() != elliptic.P256().Params() || pub.X == nil || pub.Y == nil || len(sig) != 64 {
		return false
	}
	r, s := sig[:32], sig[32:]
	if !es256.InRange(r) || !es256.InRange(s) {
		return false
	}
	h := sha256.Sum256(msg)
	return ecdsa.VerifyASN1(pub, h[:], es256.AppendDER(nil, r, s))
}
