package refs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/fxamacker/cbor/v2"
	gocose "github.com/veraison/go-cose"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/wire"
	"github.com/quantumlearningmachines/handoff/trust"
)

// The scitt-receipt profile (draft appendix "Referencing a SCITT Receipt";
// COSE Receipts, RFC 9942 / draft-ietf-cose-merkle-tree-proofs; RFC 9162
// inclusion proofs). This package supports exactly one receipt shape:
//
// The statement. S is the Signed Statement as the draft's dig covers it:
// the tagged COSE_Sign1 (it must begin with tag 18 and a four-element
// array, octets 0xd2 0x84) with its unprotected header replaced by the
// empty map (0xa0); the protected header, payload and signature are kept
// octet for octet as received (StrippedStatement). dig = SHA-256(S). A
// statement supplied with receipts or other unprotected parameters is
// stripped before hashing, so it may be supplied either way. The
// statement's own signature is not checked: a receipt shows registration,
// not the issuer's identity or the truth of the statement.
//
// The leaf. The Merkle tree leaf is S itself: its RFC 9162 leaf hash is
// SHA-256(0x00 || S) (StatementLeafHash). The SCITT documents leave the
// leaf's content to the transparency service; this profile fixes it as S,
// the same octets dig names, so that the receipt and dig are about one
// thing and receipts attached later to the statement's unprotected header
// (label 394) change neither. A service that logs something else (a hash
// of S, a CCF ledger entry) issues receipts this profile reports as
// mismatch.
//
// The receipt: a tagged COSE_Sign1 (tag 18), decoded strictly (no
// duplicate map keys, definite lengths, no tags inside) with
//   - protected header: alg (1) = -7 (ES256), the only algorithm; vds
//     (395) = 1 (RFC9162_SHA256), the only verifiable data structure; kid
//     (4) optional, a byte string holding the UTF-8 key id; crit (2)
//     optional, listing only labels this profile processes (1, 4, 395,
//     396); other labels ignored;
//   - unprotected header: vdp (396) = a map with exactly one member, -1
//     (inclusion proofs), an array of exactly one byte string, which
//     holds the CBOR array [tree-size: uint, leaf-index: uint,
//     inclusion-path: [* bstr]] with leaf-index < tree-size and every path
//     entry 32 octets; crit is not allowed here (RFC 9052 section 3.1);
//     other labels ignored;
//   - payload: detached (nil). The signed payload is the Merkle root
//     computed from the leaf and the inclusion path (RFC 9162 section
//     2.1.3.2, via github.com/transparency-dev/merkle), so a wrong path, a
//     wrong leaf or a root of another tree all fail the signature;
//   - signature: ES256, 64 octets R||S, external AAD empty.
//
// proof is the receipt: a byte string (CBOR Handoff) or base64url text
// (JSON Handoff); either is accepted in either encoding.
//
// The key: for each of services in turn, the keys bound to it with the
// receipt's kid (D10), or, when none has that kid, those whose JWK
// thumbprint is the kid; without a kid, every key bound to the service.
//
// Outcomes. Unverifiable: no statement, no proof, dig alg not
// implemented, vds other than 1 (a data structure this implementation
// does not implement, as the draft treats an unimplemented digest), no
// key for any service. Mismatch: everything else that fails: a statement
// that is not a tagged COSE_Sign1, dig, a malformed receipt or inclusion
// proof, alg other than ES256 (the trusted key's algorithm decides, SPEC
// D2), a crit label not understood (D1), and a signature that does not
// verify with a trusted key (which covers a wrong path or root).

// COSE header labels of COSE Receipts (RFC 9942).
const (
	labelVDS     int64 = 395 // verifiable data structure
	labelVDP     int64 = 396 // verifiable data structure proofs
	vdsRFC9162   int64 = 1   // RFC9162_SHA256
	vdpInclusion int64 = -1  // inclusion proofs
)

var stmtDecMode = func() cbor.DecMode {
	m, err := cbor.DecOptions{
		DupMapKey:       cbor.DupMapKeyEnforcedAPF,
		IndefLength:     cbor.IndefLengthForbidden,
		MaxNestedLevels: 64,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return m
}()

// StrippedStatement returns S, the octets dig covers and the Merkle leaf
// holds: the tagged COSE_Sign1 statement with its unprotected header
// replaced by the empty map, every other item kept as received.
func StrippedStatement(statement []byte) ([]byte, error) {
	if !bytes.HasPrefix(statement, []byte{0xd2, 0x84}) {
		return nil, errors.New("not a tagged COSE_Sign1 (want tag 18 around a four-element array)")
	}
	var items []cbor.RawMessage
	if err := stmtDecMode.Unmarshal(statement[1:], &items); err != nil {
		return nil, fmt.Errorf("not a well-formed COSE_Sign1: %v", err)
	}
	if len(items) != 4 {
		return nil, fmt.Errorf("COSE_Sign1 has %d items, want 4", len(items))
	}
	major := func(b []byte) byte { return b[0] >> 5 }
	switch {
	case major(items[0]) != 2:
		return nil, errors.New("COSE_Sign1 protected header is not a byte string")
	case major(items[1]) != 5:
		return nil, errors.New("COSE_Sign1 unprotected header is not a map")
	case major(items[2]) != 2 && !bytes.Equal(items[2], []byte{0xf6}):
		return nil, errors.New("COSE_Sign1 payload is neither a byte string nor nil")
	case major(items[3]) != 2:
		return nil, errors.New("COSE_Sign1 signature is not a byte string")
	}
	var unprot map[any]any // duplicate keys are refused even in what is dropped
	if err := stmtDecMode.Unmarshal(items[1], &unprot); err != nil {
		return nil, fmt.Errorf("COSE_Sign1 unprotected header: %v", err)
	}
	out := make([]byte, 0, len(statement))
	out = append(out, 0xd2, 0x84)
	out = append(out, items[0]...)
	out = append(out, 0xa0)
	out = append(out, items[2]...)
	return append(out, items[3]...), nil
}

// StatementDigest returns the dig of a scitt-receipt reference to
// statement: SHA-256 of StrippedStatement(statement).
func StatementDigest(statement []byte) (handoff.Digest, error) {
	s, err := StrippedStatement(statement)
	if err != nil {
		return handoff.Digest{}, fmt.Errorf("refs: statement: %w", err)
	}
	return handoff.DigestOf(s), nil
}

// StatementLeafHash returns the RFC 9162 leaf hash of statement as this
// profile registers it: SHA-256(0x00 || StrippedStatement(statement)).
func StatementLeafHash(statement []byte) ([]byte, error) {
	s, err := StrippedStatement(statement)
	if err != nil {
		return nil, fmt.Errorf("refs: statement: %w", err)
	}
	return rfc6962.DefaultHasher.HashLeaf(s), nil
}

// SignReceipt issues a receipt of this profile, as a transparency service
// would: an ES256 COSE_Sign1 with protected {alg: -7, kid: thumbprint of
// key, vds: 1}, unprotected {vdp: {-1: [<<[treeSize, leafIndex, path]>>]}},
// detached payload, signed over root. The caller vouches that root is the
// tree's root; a verifier recomputes it from the leaf and path.
func SignReceipt(key *ecdsa.PrivateKey, root []byte, treeSize, leafIndex uint64, path [][]byte) ([]byte, error) {
	if key == nil || key.Curve != elliptic.P256() {
		return nil, errors.New("refs: receipt signing key must be P-256 (ES256)")
	}
	if leafIndex >= treeSize {
		return nil, fmt.Errorf("refs: leaf index %d not below tree size %d", leafIndex, treeSize)
	}
	p := make([]any, len(path))
	for i, h := range path {
		p[i] = h
	}
	incl, err := wire.EncodeCBOR([]any{treeSize, leafIndex, p})
	if err != nil {
		return nil, err
	}
	signer, err := gocose.NewSigner(gocose.AlgorithmES256, key)
	if err != nil {
		return nil, err
	}
	msg := gocose.Sign1Message{
		Headers: gocose.Headers{
			Protected: gocose.ProtectedHeader{
				gocose.HeaderLabelAlgorithm: gocose.AlgorithmES256,
				gocose.HeaderLabelKeyID:     []byte(trust.Thumbprint(&key.PublicKey)),
				labelVDS:                    vdsRFC9162,
			},
			Unprotected: gocose.UnprotectedHeader{
				labelVDP: map[any]any{vdpInclusion: []any{incl}},
			},
		},
		Payload: root,
	}
	if err := msg.Sign(rand.Reader, nil, signer); err != nil {
		return nil, fmt.Errorf("refs: sign receipt: %w", err)
	}
	msg.Payload = nil // detached: the verifier recomputes the root
	return msg.MarshalCBOR()
}

// NewSCITTReceiptRef makes a scitt-receipt reference to statement with its
// receipt as proof: a byte string for a CBOR Handoff, base64url text for a
// JSON one (draft appendix). loc is optional.
func NewSCITTReceiptRef(statement, receipt []byte, enc handoff.Encoding, loc string) (handoff.ContextRef, error) {
	dig, err := StatementDigest(statement)
	if err != nil {
		return handoff.ContextRef{}, err
	}
	if _, err := parseReceipt(receipt); err != nil {
		return handoff.ContextRef{}, fmt.Errorf("refs: receipt: %w", err)
	}
	var p any = append([]byte(nil), receipt...)
	if enc == handoff.JSON {
		p = b64u.EncodeToString(receipt)
	}
	return handoff.ContextRef{Kind: handoff.KindSCITTReceipt, Dig: dig, Loc: loc, Proof: p}, nil
}

// checkSCITTReceipt checks a "scitt-receipt" reference (draft appendix
// "Referencing a SCITT Receipt") as the profile above says: dig against
// statement (stripped of its unprotected header), then the Receipt in proof
// for that statement with a key trusted (in keys) for one of services.
// statement is nil when the octets could not be obtained. It returns
// RefVerified and nil, or RefMismatch / RefUnverifiable with an error
// wrapping handoff.ErrRefMismatch / handoff.ErrUnverifiableRef that names
// the failed check.
func checkSCITTReceipt(ref handoff.ContextRef, statement []byte, keys handoff.KeySource, services []string) (handoff.RefOutcome, error) {
	if statement == nil {
		return scUnverifiable("statement: not available (delivered with the task or fetched from loc)")
	}
	if ref.Proof == nil {
		return scUnverifiable("proof: missing; the receipt travels in proof")
	}
	if ref.Dig.Alg != handoff.AlgSHA256 {
		return scUnverifiable("dig: alg %q is not implemented", ref.Dig.Alg)
	}
	s, err := StrippedStatement(statement)
	if err != nil {
		return scMismatch("statement: %v", err)
	}
	if !ref.Dig.Matches(s) {
		return scMismatch("dig: not the SHA-256 of the statement with an empty unprotected header")
	}
	var raw []byte
	switch p := ref.Proof.(type) {
	case []byte:
		raw = p
	case string:
		if err := checkB64u(p); err != nil {
			return scMismatch("proof: %v", err)
		}
		raw, _ = b64u.DecodeString(p)
	default:
		return scMismatch("proof: is %s, want the receipt as a byte string or base64url text", wire.TypeName(ref.Proof))
	}
	rc, err := parseReceipt(raw)
	if err != nil {
		var u unsupported
		if errors.As(err, &u) {
			return scUnverifiable("proof: %v", err)
		}
		return scMismatch("proof: %v", err)
	}
	root, err := proof.RootFromInclusionProof(rfc6962.DefaultHasher, rc.index, rc.size, rfc6962.DefaultHasher.HashLeaf(s), rc.path)
	if err != nil {
		return scMismatch("proof: inclusion proof: %v", err)
	}
	if keys == nil || len(services) == 0 {
		return scUnverifiable("proof: no transparency service with trusted keys to check the receipt against")
	}
	rc.msg.Payload = root
	tried := 0
	var lastErr error
	for _, svc := range services {
		var ks []trust.Key
		if rc.hasKid {
			ks = producerKeys(keys, svc, rc.kid)
		} else {
			ks = keys.Keys(svc, "")
		}
		for _, k := range ks {
			tried++
			if k.Alg != jwsES256 {
				lastErr = fmt.Errorf("key %q of %q is for %s, the receipt uses ES256", k.Kid, svc, k.Alg)
				continue
			}
			v, err := gocose.NewVerifier(gocose.AlgorithmES256, k.Public)
			if err != nil {
				lastErr = fmt.Errorf("key %q of %q: %v", k.Kid, svc, err)
				continue
			}
			if err := rc.msg.Verify(nil, v); err != nil {
				lastErr = fmt.Errorf("the signature over the root computed from the inclusion proof does not verify with key %q of %q (wrong path, leaf, root or key)", k.Kid, svc)
				continue
			}
			return handoff.RefVerified, nil
		}
	}
	if tried == 0 {
		if rc.hasKid {
			return scUnverifiable("proof: no key trusted for service %s with kid %q", quoteList(services), rc.kid)
		}
		return scUnverifiable("proof: no key trusted for service %s", quoteList(services))
	}
	return scMismatch("proof: %v", lastErr)
}

func scMismatch(format string, args ...any) (handoff.RefOutcome, error) {
	return handoff.RefMismatch, fmt.Errorf("%w: scitt-receipt: "+format, append([]any{handoff.ErrRefMismatch}, args...)...)
}

func scUnverifiable(format string, args ...any) (handoff.RefOutcome, error) {
	return handoff.RefUnverifiable, fmt.Errorf("%w: scitt-receipt: "+format, append([]any{handoff.ErrUnverifiableRef}, args...)...)
}

// unsupported marks a receipt that is well-formed but outside what this
// implementation implements (a data structure other than RFC9162_SHA256):
// it cannot be checked, which is not evidence against it.
type unsupported struct{ msg string }

func (u unsupported) Error() string { return u.msg }

// receipt is a parsed, not yet verified, receipt of this profile.
type receipt struct {
	msg         gocose.Sign1Message
	kid         string
	hasKid      bool
	size, index uint64
	path        [][]byte
}

// intOf returns the int64 value of a header label or integer header value
// as go-cose decodes it (IntDecConvertSigned: every integer is an int64).
func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	}
	return 0, false
}

// understood are the labels this profile processes, the only ones crit may
// list.
var understood = map[int64]bool{
	gocose.HeaderLabelAlgorithm: true,
	gocose.HeaderLabelKeyID:     true,
	labelVDS:                    true,
	labelVDP:                    true,
}

// parseReceipt checks a receipt's structure against the profile, without a
// key.
func parseReceipt(b []byte) (*receipt, error) {
	rc := &receipt{}
	if err := rc.msg.UnmarshalCBOR(b); err != nil {
		return nil, fmt.Errorf("not a tagged COSE_Sign1: %v", err)
	}
	if rc.msg.Payload != nil {
		return nil, errors.New("payload is attached; a receipt's payload is detached (the Merkle root)")
	}
	p, u := rc.msg.Headers.Protected, rc.msg.Headers.Unprotected
	if _, ok := u[gocose.HeaderLabelCritical]; ok {
		return nil, errors.New("crit (2) in the unprotected header")
	}
	if c, ok := p[gocose.HeaderLabelCritical]; ok {
		list, ok := c.([]any)
		if !ok || len(list) == 0 {
			return nil, errors.New("crit (2) is not a non-empty array")
		}
		for _, l := range list {
			n, ok := intOf(l)
			if !ok || !understood[n] {
				return nil, fmt.Errorf("crit lists label %v, which this profile does not process (SPEC D1)", l)
			}
		}
	}
	alg, err := p.Algorithm()
	if err != nil {
		return nil, fmt.Errorf("protected alg (1): %v", err)
	}
	if alg != gocose.AlgorithmES256 {
		return nil, fmt.Errorf("protected alg (1) is %v; the trusted keys are ES256 (SPEC D2)", alg)
	}
	vds, ok := p[labelVDS]
	if !ok {
		return nil, errors.New("protected vds (395) missing")
	}
	if n, ok := intOf(vds); !ok {
		return nil, fmt.Errorf("protected vds (395) is %T, want an integer", vds)
	} else if n != vdsRFC9162 {
		return nil, unsupported{fmt.Sprintf("vds (395) is %d; only 1 (RFC9162_SHA256) is implemented", n)}
	}
	if k, ok := p[gocose.HeaderLabelKeyID]; ok {
		kb, ok := k.([]byte)
		if !ok || len(kb) == 0 {
			return nil, errors.New("protected kid (4) is not a non-empty byte string")
		}
		rc.kid, rc.hasKid = string(kb), true
	}
	vdp, ok := u[labelVDP]
	if !ok {
		return nil, errors.New("unprotected vdp (396) missing")
	}
	vm, ok := vdp.(map[any]any)
	if !ok {
		return nil, fmt.Errorf("vdp (396) is %T, want a map", vdp)
	}
	if len(vm) != 1 {
		return nil, fmt.Errorf("vdp (396) has %d members; the profile has exactly one, inclusion proofs (-1)", len(vm))
	}
	var proofs any
	for k, v := range vm {
		if n, ok := intOf(k); !ok || n != vdpInclusion {
			return nil, fmt.Errorf("vdp (396) member %v; the profile has only inclusion proofs (-1)", k)
		}
		proofs = v
	}
	list, ok := proofs.([]any)
	if !ok || len(list) != 1 {
		return nil, errors.New("vdp inclusion proofs (-1) is not an array of exactly one proof")
	}
	ib, ok := list[0].([]byte)
	if !ok {
		return nil, errors.New("inclusion proof is not a byte string")
	}
	iv, err := wire.DecodeCBOR(ib)
	if err != nil {
		return nil, fmt.Errorf("inclusion proof: %v", err)
	}
	arr, ok := iv.([]any)
	if !ok || len(arr) != 3 {
		return nil, errors.New("inclusion proof is not [tree-size, leaf-index, inclusion-path]")
	}
	size, ok1 := arr[0].(uint64)
	index, ok2 := arr[1].(uint64)
	path, ok3 := arr[2].([]any)
	if !ok1 || !ok2 || !ok3 {
		return nil, errors.New("inclusion proof is not [uint, uint, [* bstr]]")
	}
	if index >= size {
		return nil, fmt.Errorf("inclusion proof: leaf index %d not below tree size %d", index, size)
	}
	for i, h := range path {
		hb, ok := h.([]byte)
		if !ok || len(hb) != sha256.Size {
			return nil, fmt.Errorf("inclusion path entry %d is not a 32-octet byte string", i)
		}
		rc.path = append(rc.path, hb)
	}
	rc.size, rc.index = size, index
	if len(rc.msg.Signature) != 64 {
		return nil, fmt.Errorf("signature is %d octets, want 64 (ES256 R||S)", len(rc.msg.Signature))
	}
	return rc, nil
}
