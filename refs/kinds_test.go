package refs

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"net/http"
	"testing"

	gocose "github.com/veraison/go-cose"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// These tests drive the learnlog-head and scitt-receipt profiles through
// the Checker, built with the profiles' exported makers only: how policy,
// material, fetching and the producer default reach them.

func bind(t *testing.T, tc *trust.Config, id string, k *ecdsa.PrivateKey) {
	t.Helper()
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.Add(id, tk); err != nil {
		t.Fatal(err)
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestCheckerLearnlogHead: the head's JWS must be signed by a key trusted
// for the producer, by default the offer's iss (the delegator produced
// the record); a head with its proof at hand is checked even when not
// required.
func TestCheckerLearnlogHead(t *testing.T) {
	producer, stranger := newKey(t), newKey(t)
	keys := trust.New()
	bind(t, keys, delegator, producer)
	head := LearnlogHead{RecordHash: "AAAA", Seq: 3, EntryHash: "BBBB", Time: 1_800_000_000}
	good, err := NewLearnlogHeadRef(head, producer, "")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := NewLearnlogHeadRef(head, stranger, "")
	if err != nil {
		t.Fatal(err)
	}
	rs := []handoff.ContextRef{good, forged}
	ctx := context.Background()

	fs := mustChecker(t, Policy{RequireKinds: []string{handoff.KindLearnlogHead}, Keys: keys}).CheckRefs(ctx, delegator, rs, nil)
	if fs[0].Outcome != handoff.RefVerified || fs[1].Outcome == handoff.RefVerified || fs.Err() == nil {
		t.Fatalf("producer = iss: %+v", fs)
	}
	var re *RefError
	if !errors.As(fs.Err(), &re) || re.Index != 1 {
		t.Fatalf("the failure names refs[1]: %v", fs.Err())
	}
	// The same head from another sender is not that sender's record.
	fs = mustChecker(t, Policy{RequireAll: true, Keys: keys}).CheckRefs(ctx, "https://other.example", rs[:1], nil)
	if fs[0].Outcome == handoff.RefVerified {
		t.Fatal("a head verified for a sender who did not produce it")
	}
	// Producers set by policy.
	fs = mustChecker(t, Policy{RequireAll: true, Keys: keys, Producers: []string{delegator}}).CheckRefs(ctx, "https://other.example", rs[:1], nil)
	if fs[0].Outcome != handoff.RefVerified {
		t.Fatalf("policy producer: %+v", fs[0])
	}
	// Not required: the proof is at hand, so it is checked, and a
	// failure does not reject.
	fs = mustChecker(t, Policy{Keys: keys}).CheckRefs(ctx, delegator, rs, nil)
	if fs[0].Outcome != handoff.RefVerified || fs[1].Outcome == handoff.RefVerified || fs[1].Outcome == handoff.RefNotChecked || fs.Err() != nil {
		t.Fatalf("not required: %+v", fs)
	}
}

// signedStatement is a tagged COSE_Sign1 Signed Statement.
func signedStatement(t *testing.T, issuer *ecdsa.PrivateKey) []byte {
	t.Helper()
	s, err := gocose.NewSigner(gocose.AlgorithmES256, issuer)
	if err != nil {
		t.Fatal(err)
	}
	m := gocose.Sign1Message{
		Headers: gocose.Headers{Protected: gocose.ProtectedHeader{gocose.HeaderLabelAlgorithm: gocose.AlgorithmES256,
			gocose.HeaderLabelContentType: "application/json"}},
		Payload: []byte(`{"artifact":"build 42"}`),
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

// TestCheckerSCITTReceipt: the Signed Statement comes from the host by
// index or is fetched from loc under the safeguards, and the receipt is
// checked with the policy's transparency services (a one-leaf tree here;
// the profile's own tests use larger ones).
func TestCheckerSCITTReceipt(t *testing.T) {
	const ts = "https://ts.example"
	issuer, service := newKey(t), newKey(t)
	keys := trust.New()
	bind(t, keys, ts, service)
	statement := signedStatement(t, issuer)
	leaf, err := StatementLeafHash(statement)
	if err != nil {
		t.Fatal(err)
	}
	receipt, err := SignReceipt(service, leaf, 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, false, func(w http.ResponseWriter, r *http.Request) { w.Write(statement) })
	ref, err := NewSCITTReceiptRef(statement, receipt, handoff.JSON, srv.URL+"/statement")
	if err != nil {
		t.Fatal(err)
	}
	rs := []handoff.ContextRef{ref}
	ctx := context.Background()
	p := Policy{RequireKinds: []string{handoff.KindSCITTReceipt}, Keys: keys, Services: []string{ts}}

	// Supplied by the host.
	fs := mustChecker(t, p).CheckRefs(ctx, delegator, rs, &Material{Octets: map[int][]byte{0: statement}})
	if fs[0].Outcome != handoff.RefVerified || fs[0].Fetched || srv.hits.Load() != 0 {
		t.Fatalf("supplied: %+v", fs[0])
	}
	// Another statement supplied: not verified.
	fs = mustChecker(t, p).CheckRefs(ctx, delegator, rs, &Material{Octets: map[int][]byte{0: signedStatement(t, issuer)}})
	if fs[0].Outcome == handoff.RefVerified || fs.Err() == nil {
		t.Fatalf("another statement: %+v", fs[0])
	}
	// Fetched from loc, for a trusted sender.
	pf := p
	pf.Fetch = fetchPolicy(srv.host())
	fs = mustChecker(t, pf).CheckRefs(ctx, delegator, rs, nil)
	if fs[0].Outcome != handoff.RefVerified || !fs[0].Fetched {
		t.Fatalf("fetched: %+v", fs[0])
	}
	// Not fetched for an untrusted sender: unverifiable, naming the safeguard.
	fs = mustChecker(t, pf).CheckRefs(ctx, "https://stranger.example", rs, nil)
	if fs[0].Outcome != handoff.RefUnverifiable || !errors.Is(fs[0].Err, ErrUntrustedSender) {
		t.Fatalf("untrusted sender: %+v", fs[0])
	}
	// No transparency service in the policy: never verified.
	fs = mustChecker(t, Policy{RequireAll: true, Keys: keys}).CheckRefs(ctx, delegator, rs, &Material{Octets: map[int][]byte{0: statement}})
	if fs[0].Outcome == handoff.RefVerified {
		t.Fatal("verified without a trusted transparency service")
	}
	// Not required and no statement at hand: not checked, not fetched.
	before := srv.hits.Load()
	fs = mustChecker(t, Policy{Keys: keys, Services: []string{ts}, Fetch: pf.Fetch}).CheckRefs(ctx, delegator, rs, nil)
	if fs[0].Outcome != handoff.RefNotChecked || srv.hits.Load() != before {
		t.Fatalf("not required: %+v", fs[0])
	}
}
