package refs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	gocose "github.com/veraison/go-cose"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/wire"
	"github.com/quantumlearningmachines/handoff/trust"
)

const service = "https://ts.example/scitt"

// ---- an RFC 9162 Merkle tree, written from the RFC's definitions (section
// 2.1.1 MTH, 2.1.3.1 PATH), independent of the library that verifies ----

func leafHash(d []byte) []byte {
	h := sha256.Sum256(append([]byte{0}, d...))
	return h[:]
}

func nodeHash(l, r []byte) []byte {
	h := sha256.Sum256(append(append([]byte{1}, l...), r...))
	return h[:]
}

// split is the largest power of two smaller than n (n > 1).
func split(n int) int {
	k := 1
	for k*2 < n {
		k *= 2
	}
	return k
}

func mth(d [][]byte) []byte {
	switch len(d) {
	case 0:
		h := sha256.Sum256(nil)
		return h[:]
	case 1:
		return leafHash(d[0])
	}
	k := split(len(d))
	return nodeHash(mth(d[:k]), mth(d[k:]))
}

func path(m int, d [][]byte) [][]byte {
	if len(d) <= 1 {
		return nil
	}
	k := split(len(d))
	if m < k {
		return append(path(m, d[:k]), mth(d[k:]))
	}
	return append(path(m-k, d[k:]), mth(d[:k]))
}

// ---- statements and receipts ----

// signStatement makes a Signed Statement the way an issuer would: an ES256
// COSE_Sign1 with unprotected parameters (a receipt slot, 394, and a kid)
// that the dig must not depend on.
func signStatement(t testing.TB, issuer *ecdsa.PrivateKey, payload string, unprot gocose.UnprotectedHeader) []byte {
	t.Helper()
	s, err := gocose.NewSigner(gocose.AlgorithmES256, issuer)
	if err != nil {
		t.Fatal(err)
	}
	m := gocose.Sign1Message{
		Headers: gocose.Headers{
			Protected:   gocose.ProtectedHeader{gocose.HeaderLabelAlgorithm: gocose.AlgorithmES256, gocose.HeaderLabelContentType: "application/json"},
			Unprotected: unprot,
		},
		Payload: []byte(payload),
	}
	if err := m.Sign(rand.Reader, nil, s); err != nil {
		t.Fatal(err)
	}
	b, err := m.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// receiptSpec says how to build one (possibly broken) receipt.
type receiptSpec struct {
	key     *ecdsa.PrivateKey
	alg     gocose.Algorithm
	prot    gocose.ProtectedHeader   // nil: the profile's header
	unprot  gocose.UnprotectedHeader // nil: vdp with incl
	incl    []any                    // [size, index, path]
	root    []byte                   // what is signed
	attach  bool                     // leave the payload attached
	noKid   bool
	kidOf   *ecdsa.PublicKey // kid to write, default key's thumbprint
	mutateB func([]byte) []byte
}

func buildReceipt(t testing.TB, r receiptSpec) []byte {
	t.Helper()
	alg := r.alg
	if alg == 0 {
		alg = gocose.AlgorithmES256
	}
	prot := r.prot
	if prot == nil {
		prot = gocose.ProtectedHeader{gocose.HeaderLabelAlgorithm: alg, labelVDS: vdsRFC9162}
		if !r.noKid {
			kp := &r.key.PublicKey
			if r.kidOf != nil {
				kp = r.kidOf
			}
			prot[gocose.HeaderLabelKeyID] = []byte(trust.Thumbprint(kp))
		}
	}
	unprot := r.unprot
	if unprot == nil {
		ib, err := wire.EncodeCBOR(r.incl)
		if err != nil {
			t.Fatal(err)
		}
		unprot = gocose.UnprotectedHeader{labelVDP: map[any]any{vdpInclusion: []any{ib}}}
	}
	s, err := gocose.NewSigner(alg, r.key)
	if err != nil {
		t.Fatal(err)
	}
	m := gocose.Sign1Message{Headers: gocose.Headers{Protected: prot, Unprotected: unprot}, Payload: r.root}
	if err := m.Sign(rand.Reader, nil, s); err != nil {
		t.Fatal(err)
	}
	if !r.attach {
		m.Payload = nil
	}
	b, err := m.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	if r.mutateB != nil {
		b = r.mutateB(b)
	}
	return b
}

// tree is a log of several registered statements, ours at index 4.
type tree struct {
	issuer, ts, other *ecdsa.PrivateKey
	stmt              []byte   // our statement as delivered (with unprotected parameters)
	leaves            [][]byte // stripped statements, the log's entries
	index             int
}

func newTree(t testing.TB) *tree {
	tr := &tree{issuer: mustKey(t), ts: mustKey(t), other: mustKey(t), index: 4}
	for i := range 7 {
		st := signStatement(t, tr.issuer, fmt.Sprintf(`{"entry":%d}`, i), gocose.UnprotectedHeader{gocose.HeaderLabelKeyID: []byte("issuer-1")})
		if i == tr.index {
			tr.stmt = st
		}
		s, err := StrippedStatement(st)
		if err != nil {
			t.Fatal(err)
		}
		tr.leaves = append(tr.leaves, s)
	}
	return tr
}

func (tr *tree) incl() []any {
	p := path(tr.index, tr.leaves)
	ps := make([]any, len(p))
	for i, h := range p {
		ps[i] = h
	}
	return []any{uint64(len(tr.leaves)), uint64(tr.index), ps}
}

func (tr *tree) spec() receiptSpec {
	return receiptSpec{key: tr.ts, incl: tr.incl(), root: mth(tr.leaves)}
}

// The test's own tree agrees with github.com/transparency-dev/merkle, and
// SignReceipt's receipt carries the same proof.
func TestReceiptTreeAgreesWithLibrary(t *testing.T) {
	tr := newTree(t)
	lh, err := StatementLeafHash(tr.stmt)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(lh, rfc6962.DefaultHasher.HashLeaf(tr.leaves[tr.index])) || !bytes.Equal(lh, leafHash(tr.leaves[tr.index])) {
		t.Fatal("leaf hash differs")
	}
	for i := range tr.leaves {
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(i), uint64(len(tr.leaves)), leafHash(tr.leaves[i]), path(i, tr.leaves), mth(tr.leaves)); err != nil {
			t.Fatalf("leaf %d: %v", i, err)
		}
	}
	rb, err := SignReceipt(tr.ts, mth(tr.leaves), uint64(len(tr.leaves)), uint64(tr.index), path(tr.index, tr.leaves))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := parseReceipt(rb)
	if err != nil {
		t.Fatal(err)
	}
	if rc.size != 7 || rc.index != 4 || len(rc.path) != 3 || rc.kid != trust.Thumbprint(&tr.ts.PublicKey) {
		t.Fatalf("parsed %+v", rc)
	}
}

// The dig ignores the statement's unprotected header and keeps every other
// octet.
func TestStrippedStatement(t *testing.T) {
	issuer := mustKey(t)
	a := signStatement(t, issuer, "x", gocose.UnprotectedHeader{394: []any{[]byte{1, 2, 3}}})
	sa, err := StrippedStatement(a)
	if err != nil {
		t.Fatal(err)
	}
	var m gocose.Sign1Message
	if err := m.UnmarshalCBOR(sa); err != nil {
		t.Fatalf("stripped statement is not a COSE_Sign1: %v", err)
	}
	if len(m.Headers.Unprotected) != 0 || string(m.Payload) != "x" {
		t.Fatalf("stripped: %+v", m)
	}
	v, _ := gocose.NewVerifier(gocose.AlgorithmES256, &issuer.PublicKey)
	if err := m.Verify(nil, v); err != nil {
		t.Fatalf("stripping broke the issuer's signature: %v", err)
	}
	again, _ := StrippedStatement(sa)
	if !bytes.Equal(again, sa) {
		t.Fatal("not idempotent")
	}
	for _, bad := range [][]byte{nil, {0xd2}, {0xd2, 0x84}, {0xd2, 0x83, 0x40, 0xa0, 0x40}, {0xd2, 0x84, 0x40, 0xa0, 0x40, 0x40, 0x00}, {0xd2, 0x84, 0xa0, 0xa0, 0x40, 0x40}, {0xd2, 0x84, 0x40, 0xa2, 1, 1, 1, 1, 0x40, 0x40}} {
		if _, err := StrippedStatement(bad); err == nil {
			t.Errorf("StrippedStatement(%x) accepted", bad)
		}
	}
}

func TestSCITTReceipt(t *testing.T) {
	tr := newTree(t)
	keys := trustFor(t, service, &tr.ts.PublicKey)
	otherTree := newTree(t)

	type fixture struct {
		statement []byte   // delivered to the check
		receipt   []byte   // proof
		services  []string // trusted services to try
		keys      handoff.KeySource
		ref       func(*handoff.ContextRef) // after carriage
	}
	cases := []struct {
		rule  string
		setup func(f *fixture)
		want  handoff.RefOutcome
		where string
	}{
		{rule: "draft appendix: dig, inclusion and signature all check", want: handoff.RefVerified},
		{rule: "draft appendix: statement supplied already stripped", setup: func(f *fixture) { f.statement = tr.leaves[tr.index] }, want: handoff.RefVerified},
		{rule: "draft appendix: statement supplied with receipts attached (394)", setup: func(f *fixture) {
			var m gocose.Sign1Message
			_ = m.UnmarshalCBOR(tr.stmt)
			m.Headers.Unprotected[int64(394)] = []any{f.receipt}
			m.Headers.RawUnprotected = nil
			f.statement, _ = m.MarshalCBOR()
		}, want: handoff.RefVerified},
		{rule: "profile: receipt without kid tries every key of the service", setup: func(f *fixture) {
			s := tr.spec()
			s.noKid = true
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefVerified},
		{rule: "profile: crit may list labels the profile processes", setup: func(f *fixture) {
			s := tr.spec()
			s.prot = gocose.ProtectedHeader{gocose.HeaderLabelAlgorithm: gocose.AlgorithmES256, labelVDS: vdsRFC9162, gocose.HeaderLabelCritical: []any{labelVDS}}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefVerified},
		{rule: "profile: other unprotected labels are ignored", setup: func(f *fixture) {
			ib, _ := wire.EncodeCBOR(tr.incl())
			f.receipt = replaceUnprotected(t, f.receipt, map[any]any{uint64(7777): "x", uint64(396): map[any]any{int64(-1): []any{ib}}})
		}, want: handoff.RefVerified},
		{rule: "profile: the second of several services", setup: func(f *fixture) { f.services = []string{"https://ts2.example", service} }, want: handoff.RefVerified},

		{rule: "draft appendix: statement not obtained is unverifiable", setup: func(f *fixture) { f.statement = nil }, want: handoff.RefUnverifiable, where: "statement"},
		{rule: "draft appendix: no receipt in proof", setup: func(f *fixture) { f.ref = func(r *handoff.ContextRef) { r.Proof = nil } }, want: handoff.RefUnverifiable, where: "proof"},
		{rule: "draft Digest: dig alg not implemented", setup: func(f *fixture) { f.ref = func(r *handoff.ContextRef) { r.Dig.Alg = "sha3-256" } }, want: handoff.RefUnverifiable, where: "dig"},
		{rule: "draft appendix: dig over the statement (wrong dig)", setup: func(f *fixture) { f.ref = func(r *handoff.ContextRef) { r.Dig.Val[3] ^= 0x40 } }, want: handoff.RefMismatch, where: "dig"},
		{rule: "draft appendix: dig over the statement (another statement supplied)", setup: func(f *fixture) { f.statement = tr.leaves[0] }, want: handoff.RefMismatch, where: "dig"},
		{rule: "draft appendix: statement is a tagged COSE_Sign1", setup: func(f *fixture) { f.statement = []byte("not cose") }, want: handoff.RefMismatch, where: "statement"},
		{rule: "RFC 9162 2.1.3.2: wrong inclusion path", setup: func(f *fixture) {
			s := tr.spec()
			p := s.incl[2].([]any)
			bad := bytes.Clone(p[1].([]byte))
			bad[0] ^= 1
			p[1] = bad
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "signature"},
		{rule: "RFC 9162 2.1.3.2: path of another leaf", setup: func(f *fixture) {
			s := tr.spec()
			s.incl = []any{uint64(7), uint64(5), toAny(path(5, tr.leaves))}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "signature"},
		{rule: "RFC 9162 2.1.3.2: path too short for the tree size", setup: func(f *fixture) {
			s := tr.spec()
			s.incl[2] = s.incl[2].([]any)[:2]
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "inclusion proof"},
		{rule: "RFC 9942: signed root of another tree", setup: func(f *fixture) {
			s := tr.spec()
			s.root = mth(otherTree.leaves)
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "signature"},
		{rule: "RFC 9942: receipt from another tree, same statement position", setup: func(f *fixture) {
			s := otherTree.spec()
			s.key = tr.ts
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "signature"},
		{rule: "RFC 9162 2.1.3.2: tree size that does not fit the path", setup: func(f *fixture) {
			s := tr.spec()
			s.incl[0] = uint64(16)
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "inclusion proof"},
		{rule: "D1: receipt signed by another key under the trusted kid", setup: func(f *fixture) {
			s := tr.spec()
			s.key, s.kidOf = tr.other, &tr.ts.PublicKey
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "signature"},
		{rule: "D1 untrusted-key: receipt from an untrusted key", setup: func(f *fixture) {
			s := tr.spec()
			s.key = tr.other
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefUnverifiable, where: "kid"},
		{rule: "D1 untrusted-key: service not trusted", setup: func(f *fixture) { f.services = []string{"https://other-ts.example"} }, want: handoff.RefUnverifiable, where: "no key trusted"},
		{rule: "D1 untrusted-key: no trust configuration", setup: func(f *fixture) { f.keys = nil }, want: handoff.RefUnverifiable, where: "service"},
		{rule: "D1: unknown crit label", setup: func(f *fixture) {
			s := tr.spec()
			s.prot = gocose.ProtectedHeader{gocose.HeaderLabelAlgorithm: gocose.AlgorithmES256, labelVDS: vdsRFC9162, gocose.HeaderLabelCritical: []any{int64(99)}, int64(99): int64(1)}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "crit"},
		{rule: "RFC 9052 3.1: crit in the unprotected header", setup: func(f *fixture) {
			// go-cose will not write this; the test writes the header itself.
			ib, _ := wire.EncodeCBOR(tr.incl())
			f.receipt = replaceUnprotected(t, f.receipt, map[any]any{uint64(2): []any{uint64(1)}, uint64(396): map[any]any{int64(-1): []any{ib}}})
		}, want: handoff.RefMismatch, where: "crit"},
		{rule: "D2: alg other than ES256", setup: func(f *fixture) {
			k384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
			s := tr.spec()
			s.key, s.alg, s.kidOf = k384, gocose.AlgorithmES384, &tr.ts.PublicKey
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "alg"},
		{rule: "RFC 9942: vds other than RFC9162_SHA256 is not implemented", setup: func(f *fixture) {
			s := tr.spec()
			s.prot = gocose.ProtectedHeader{gocose.HeaderLabelAlgorithm: gocose.AlgorithmES256, labelVDS: int64(2)}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefUnverifiable, where: "vds"},
		{rule: "RFC 9942: vds required", setup: func(f *fixture) {
			s := tr.spec()
			s.prot = gocose.ProtectedHeader{gocose.HeaderLabelAlgorithm: gocose.AlgorithmES256}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "vds"},
		{rule: "RFC 9942: vdp required", setup: func(f *fixture) {
			s := tr.spec()
			s.unprot = gocose.UnprotectedHeader{int64(7777): int64(1)}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "vdp"},
		{rule: "profile: exactly one inclusion proof", setup: func(f *fixture) {
			s := tr.spec()
			ib, _ := wire.EncodeCBOR(s.incl)
			s.unprot = gocose.UnprotectedHeader{labelVDP: map[any]any{vdpInclusion: []any{ib, ib}}}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "exactly one"},
		{rule: "profile: no consistency proofs in an inclusion receipt", setup: func(f *fixture) {
			s := tr.spec()
			ib, _ := wire.EncodeCBOR(s.incl)
			s.unprot = gocose.UnprotectedHeader{labelVDP: map[any]any{vdpInclusion: []any{ib}, int64(-2): []any{ib}}}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "vdp"},
		{rule: "RFC 9942: payload detached", setup: func(f *fixture) {
			s := tr.spec()
			s.attach = true
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "detached"},
		{rule: "RFC 9942: leaf index below tree size", setup: func(f *fixture) {
			s := tr.spec()
			s.incl[1] = uint64(7)
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "leaf index"},
		{rule: "RFC 9942: inclusion proof shape", setup: func(f *fixture) {
			s := tr.spec()
			s.incl = []any{uint64(7), uint64(4)}
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "inclusion proof"},
		{rule: "RFC 9162: path entries are 32 octets", setup: func(f *fixture) {
			s := tr.spec()
			s.incl[2].([]any)[0] = make([]byte, 31)
			f.receipt = buildReceipt(t, s)
		}, want: handoff.RefMismatch, where: "path entry"},
		{rule: "RFC 9052: receipt truncated", setup: func(f *fixture) { f.receipt = f.receipt[:len(f.receipt)-5] }, want: handoff.RefMismatch, where: "COSE_Sign1"},
		{rule: "RFC 9052: receipt untagged", setup: func(f *fixture) { f.receipt = f.receipt[1:] }, want: handoff.RefMismatch, where: "COSE_Sign1"},
		{rule: "draft appendix: proof is a byte string or base64url", setup: func(f *fixture) { f.ref = func(r *handoff.ContextRef) { r.Proof = uint64(5) } }, want: handoff.RefMismatch, where: "proof"},
		{rule: "draft appendix: proof text is strict base64url", setup: func(f *fixture) { f.ref = func(r *handoff.ContextRef) { r.Proof = "AAA=" } }, want: handoff.RefMismatch, where: "proof"},
	}
	for _, enc := range []handoff.Encoding{handoff.JSON, handoff.CBOR} {
		for _, c := range cases {
			t.Run(enc.String()+"/"+c.rule, func(t *testing.T) {
				f := &fixture{statement: tr.stmt, receipt: buildReceipt(t, tr.spec()), services: []string{service}, keys: keys}
				if c.setup != nil {
					c.setup(f)
				}
				ref0 := handoff.ContextRef{Kind: handoff.KindSCITTReceipt, Proof: f.receipt}
				if enc == handoff.JSON {
					ref0.Proof = b64u.EncodeToString(f.receipt)
				}
				var err error
				if ref0.Dig, err = StatementDigest(tr.stmt); err != nil {
					t.Fatal(err)
				}
				ref := carry(t, ref0, enc)
				if f.ref != nil {
					f.ref(&ref)
				}
				got, err := checkSCITTReceipt(ref, f.statement, f.keys, f.services)
				if got != c.want {
					t.Fatalf("outcome %s (%v), want %s", got, err, c.want)
				}
				switch c.want {
				case handoff.RefVerified:
					if err != nil {
						t.Fatalf("verified with error %v", err)
					}
					return
				case handoff.RefMismatch:
					if !errors.Is(err, handoff.ErrRefMismatch) {
						t.Fatalf("error %v does not wrap ErrRefMismatch", err)
					}
				case handoff.RefUnverifiable:
					if !errors.Is(err, handoff.ErrUnverifiableRef) {
						t.Fatalf("error %v does not wrap ErrUnverifiableRef", err)
					}
				}
				if !strings.Contains(err.Error(), c.where) {
					t.Fatalf("error %q does not name %q", err, c.where)
				}
			})
		}
	}
}

// replaceUnprotected rewrites a receipt's unprotected header, keeping the
// other items' octets (so the signature still verifies).
func replaceUnprotected(t testing.TB, receipt []byte, unprot map[any]any) []byte {
	t.Helper()
	var items []cbor.RawMessage
	if err := cbor.Unmarshal(receipt[1:], &items); err != nil || len(items) != 4 {
		t.Fatalf("receipt items: %v", err)
	}
	u, err := wire.EncodeCBOR(unprot)
	if err != nil {
		t.Fatal(err)
	}
	out := []byte{0xd2, 0x84}
	out = append(out, items[0]...)
	out = append(out, u...)
	out = append(out, items[2]...)
	return append(out, items[3]...)
}

func toAny(p [][]byte) []any {
	out := make([]any, len(p))
	for i, h := range p {
		out[i] = h
	}
	return out
}

// Every leaf of trees of sizes 1..17 verifies with SignReceipt's receipts,
// and no leaf verifies with another's receipt.
func TestSCITTReceiptEveryLeaf(t *testing.T) {
	issuer, ts := mustKey(t), mustKey(t)
	keys := trustFor(t, service, &ts.PublicKey)
	var stmts, leaves [][]byte
	for n := 1; n <= 17; n++ {
		st := signStatement(t, issuer, fmt.Sprintf("s%d", n), nil)
		s, _ := StrippedStatement(st)
		stmts, leaves = append(stmts, st), append(leaves, s)
		root := mth(leaves)
		for i := range n {
			rb, err := SignReceipt(ts, root, uint64(n), uint64(i), path(i, leaves))
			if err != nil {
				t.Fatal(err)
			}
			ref, err := NewSCITTReceiptRef(stmts[i], rb, handoff.CBOR, "")
			if err != nil {
				t.Fatal(err)
			}
			if got, err := checkSCITTReceipt(ref, stmts[i], keys, []string{service}); got != handoff.RefVerified {
				t.Fatalf("size %d leaf %d: %s, %v", n, i, got, err)
			}
			if n > 1 {
				j := (i + 1) % n
				wrong, _ := NewSCITTReceiptRef(stmts[j], rb, handoff.CBOR, "")
				if got, _ := checkSCITTReceipt(wrong, stmts[j], keys, []string{service}); got != handoff.RefMismatch {
					t.Fatalf("size %d: leaf %d verified with the receipt of leaf %d: %s", n, j, i, got)
				}
			}
		}
	}
}

func TestNewSCITTReceiptRefForms(t *testing.T) {
	tr := newTree(t)
	rb := buildReceipt(t, tr.spec())
	j, err := NewSCITTReceiptRef(tr.stmt, rb, handoff.JSON, "https://ts.example/entries/4")
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := j.Proof.(string); !ok || s != b64u.EncodeToString(rb) || j.Kind != handoff.KindSCITTReceipt || j.Loc == "" {
		t.Fatalf("JSON ref %+v", j)
	}
	c, err := NewSCITTReceiptRef(tr.stmt, rb, handoff.CBOR, "")
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := c.Proof.([]byte); !ok || !bytes.Equal(b, rb) || !c.Dig.Equal(j.Dig) {
		t.Fatalf("CBOR ref %+v", c)
	}
	if _, err := NewSCITTReceiptRef(tr.stmt, []byte{0xd2}, handoff.CBOR, ""); err == nil {
		t.Fatal("made a ref with a malformed receipt")
	}
	if _, err := NewSCITTReceiptRef([]byte("x"), rb, handoff.CBOR, ""); err == nil {
		t.Fatal("made a ref to a statement that is not COSE")
	}
}

// FuzzReceiptParse: the receipt parser never panics, and what it accepts
// is within the profile.
func FuzzReceiptParse(f *testing.F) {
	tr := newTree(f)
	f.Add(buildReceipt(f, tr.spec()))
	s := tr.spec()
	s.noKid = true
	f.Add(buildReceipt(f, s))
	f.Add([]byte{0xd2, 0x84, 0x40, 0xa0, 0xf6, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		rc, err := parseReceipt(b)
		if err != nil {
			return
		}
		if rc.index >= rc.size || rc.msg.Payload != nil || len(rc.msg.Signature) != 64 {
			t.Fatalf("accepted out of profile: %+v", rc)
		}
		for _, h := range rc.path {
			if len(h) != 32 {
				t.Fatalf("path entry of %d octets", len(h))
			}
		}
	})
}

// FuzzStrippedStatement: never a panic; the result is stable.
func FuzzStrippedStatement(f *testing.F) {
	tr := newTree(f)
	f.Add(tr.stmt)
	f.Add(tr.leaves[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := StrippedStatement(b)
		if err != nil {
			return
		}
		again, err := StrippedStatement(s)
		if err != nil || !bytes.Equal(again, s) {
			t.Fatalf("not idempotent: %x -> %x -> %x, %v", b, s, again, err)
		}
	})
}

func BenchmarkSCITTReceiptCheck(b *testing.B) {
	tr := newTree(b)
	keys := trustFor(b, service, &tr.ts.PublicKey)
	ref, err := NewSCITTReceiptRef(tr.stmt, buildReceipt(b, tr.spec()), handoff.CBOR, "")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if got, err := checkSCITTReceipt(ref, tr.stmt, keys, []string{service}); got != handoff.RefVerified {
			b.Fatal(err)
		}
	}
}
