package refs

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

const (
	delegator = "https://planner.example"
	delegate  = "https://coder.example"
)

func mustChecker(t testing.TB, p Policy) *Checker {
	t.Helper()
	c, err := NewChecker(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustSalted(t testing.TB, octets []byte, loc string) (handoff.ContextRef, []byte) {
	t.Helper()
	r, salt, err := NewSaltedRef(octets, loc)
	if err != nil {
		t.Fatal(err)
	}
	return r, salt
}

// TestCheckOutcomes checks each kind's outcomes for one reference (draft
// "Context References": verified, mismatch, unverifiable, not checked; a
// receiver MUST NOT report verified unless it performed the check).
func TestCheckOutcomes(t *testing.T) {
	prompt := []byte("summarise the incident report for the on-call engineer")
	other := []byte("something else")
	plain := NewDigestRef(prompt, "")
	salted, salt := mustSalted(t, prompt, "")
	sha512 := plain
	sha512.Dig = handoff.Digest{Alg: "sha-512", Val: bytes.Repeat([]byte{1}, 64)}
	uriKind := handoff.ContextRef{Kind: "https://example.org/kinds/model-card", Dig: handoff.DigestOf(prompt)}
	badKind := handoff.ContextRef{Kind: "not a uri", Dig: handoff.DigestOf(prompt)}
	head := handoff.ContextRef{Kind: handoff.KindLearnlogHead, Dig: handoff.DigestOf(prompt)}
	headProof := handoff.ContextRef{Kind: handoff.KindLearnlogHead, Dig: handoff.DigestOf(prompt),
		Proof: map[string]any{"head": map[string]any{"seq": uint64(1)}, "jws": "a.b.c"}}
	receipt := handoff.ContextRef{Kind: handoff.KindSCITTReceipt, Dig: handoff.DigestOf(prompt), Proof: []byte{0xd2}}
	keys := trust.New()

	all := Policy{RequireAll: true, Keys: keys}
	none := Policy{Keys: keys}
	at := func(b []byte) map[int][]byte { return map[int][]byte{0: b} }

	tests := []struct {
		name    string
		rule    string
		policy  Policy
		ref     handoff.ContextRef
		m       *Material
		want    handoff.RefOutcome // "": checked, and anything but verified (the profile decides which)
		wantErr error              // cause, for errors.Is; nil: no error expected
	}{
		{"digest, octets by index", "digest: dig = SHA-256 of the octets", all, plain, &Material{Octets: at(prompt)}, handoff.RefVerified, nil},
		{"digest, other octets", "digest: dig = SHA-256 of the octets", all, plain, &Material{Octets: at(other)}, handoff.RefMismatch, handoff.ErrRefMismatch},
		{"digest, empty octets supplied", "an empty object is an object", all, plain, &Material{Octets: at([]byte{})}, handoff.RefMismatch, handoff.ErrRefMismatch},
		{"digest, by object", "octets delivered with the task", all, plain, &Material{Objects: []Object{{Octets: other}, {Octets: prompt}}}, handoff.RefVerified, nil},
		{"digest, no matching object", "could not obtain the object", all, plain, &Material{Objects: []Object{{Octets: other}}}, handoff.RefUnverifiable, ErrNoOctets},
		{"digest, nothing supplied, required", "could not obtain the object", all, plain, nil, handoff.RefUnverifiable, ErrNoOctets},
		{"digest, nothing supplied, not required", "not checked", none, plain, nil, handoff.RefNotChecked, nil},
		{"digest, octets at hand, not required", "checked when at hand", none, plain, &Material{Octets: at(prompt)}, handoff.RefVerified, nil},
		{"digest, wrong octets at hand, not required", "honest outcome, no rejection", none, plain, &Material{Octets: at(other)}, handoff.RefMismatch, handoff.ErrRefMismatch},
		{"digest, a salt supplied", "digest has no salt", all, plain, &Material{Octets: at(prompt), Salts: at(salt)}, handoff.RefUnverifiable, ErrSaltForDigest},
		{"digest, sha-512", "unimplemented alg: unverifiable for refs", all, sha512, &Material{Octets: at(prompt)}, handoff.RefUnverifiable, ErrUnsupportedAlg},
		{"salted, octets and salt", "salted-digest: SHA-256 of salt then octets", all, salted, &Material{Octets: at(prompt), Salts: at(salt)}, handoff.RefVerified, nil},
		{"salted, other octets", "salted-digest", all, salted, &Material{Octets: at(other), Salts: at(salt)}, handoff.RefMismatch, handoff.ErrRefMismatch},
		{"salted, other salt", "salted-digest", all, salted, &Material{Octets: at(prompt), Salts: at(bytes.Repeat([]byte{7}, SaltSize))}, handoff.RefMismatch, handoff.ErrRefMismatch},
		{"salted, no salt", "the salt is delivered with the octets", all, salted, &Material{Octets: at(prompt)}, handoff.RefUnverifiable, ErrNoSalt},
		{"salted, short salt", "a salt is SaltSize octets", all, salted, &Material{Octets: at(prompt), Salts: at(salt[:15])}, handoff.RefUnverifiable, ErrSaltSize},
		// The boundary between salt and octets is not signed: with salts of
		// more than one length, the salt followed by the prompt's first
		// octet and the prompt without it would verify (decision 98).
		{"salted, boundary moved into the salt", "a salt is SaltSize octets", all, salted, &Material{Octets: at(prompt[1:]), Salts: at(append(append([]byte(nil), salt...), prompt[0]))}, handoff.RefUnverifiable, ErrSaltSize},
		{"salted, as a plain object", "salted-digest", all, salted, &Material{Objects: []Object{{Octets: prompt}}}, handoff.RefUnverifiable, ErrNoSalt},
		{"salted, by object", "salted-digest", all, salted, &Material{Objects: []Object{{Octets: prompt, Salt: salt}}}, handoff.RefVerified, nil},
		{"salted, object with short salt", "a salt is SaltSize octets", all, salted, &Material{Objects: []Object{{Octets: prompt, Salt: salt[:8]}}}, handoff.RefUnverifiable, ErrNoSalt},
		{"salted, only salt at hand, not required", "not required: never fetched, a salt alone is nothing to check", none, salted, &Material{Salts: at(salt)}, handoff.RefNotChecked, nil},
		{"salted, only salt at hand, required", "could not obtain the object", all, salted, &Material{Salts: at(salt)}, handoff.RefUnverifiable, ErrNoOctets},
		{"absolute-URI kind, required", "unknown kinds are unverifiable", all, uriKind, &Material{Octets: at(prompt)}, handoff.RefUnverifiable, ErrUnsupportedKind},
		{"absolute-URI kind, not required", "unknown kinds are unverifiable and reported as such", none, uriKind, &Material{Octets: at(prompt)}, handoff.RefUnverifiable, ErrUnsupportedKind},
		{"absolute-URI kind, not required, nothing at hand", "unknown kinds are unverifiable and reported as such", none, uriKind, nil, handoff.RefUnverifiable, ErrUnsupportedKind},
		{"kind that is no URI, required", "other kinds MUST be absolute URIs", all, badKind, nil, handoff.RefUnverifiable, ErrUnsupportedKind},
		{"kind that is no URI, not required", "unknown kinds are unverifiable and reported as such", none, badKind, nil, handoff.RefUnverifiable, ErrUnsupportedKind},
		{"learnlog-head, no trust", "signed by a trusted producer", Policy{RequireAll: true}, head, nil, handoff.RefUnverifiable, ErrNoTrust},
		{"learnlog-head, no proof, not required", "not checked", none, head, nil, handoff.RefNotChecked, nil},
		{"learnlog-head, bogus proof, required", "never verified without the check", all, headProof, nil, "", nil},
		{"learnlog-head, sha-512", "unimplemented alg", all, handoff.ContextRef{Kind: handoff.KindLearnlogHead, Dig: sha512.Dig, Proof: "x"}, nil, handoff.RefUnverifiable, ErrUnsupportedAlg},
		{"scitt-receipt, no statement, not required", "not checked", none, receipt, nil, handoff.RefNotChecked, nil},
		{"scitt-receipt, no statement, required", "could not obtain the statement", all, receipt, nil, "", nil},
		{"scitt-receipt, no trust", "a service key from the trust configuration", Policy{RequireAll: true}, receipt, &Material{Octets: at(prompt)}, handoff.RefUnverifiable, ErrNoTrust},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustChecker(t, tc.policy)
			fs := c.CheckRefs(context.Background(), delegator, []handoff.ContextRef{tc.ref}, tc.m)
			f := fs[0]
			if tc.want == "" {
				if f.Outcome != handoff.RefMismatch && f.Outcome != handoff.RefUnverifiable || f.Err == nil {
					t.Fatalf("%s: outcome %q (%v), want mismatch or unverifiable with a reason", tc.rule, f.Outcome, f.Err)
				}
				return
			}
			if f.Outcome != tc.want {
				t.Fatalf("%s: outcome %q (%v), want %q", tc.rule, f.Outcome, f.Err, tc.want)
			}
			if tc.wantErr == nil {
				if f.Err != nil {
					t.Fatalf("%s: unexpected error %v", tc.rule, f.Err)
				}
			} else if !errors.Is(f.Err, tc.wantErr) {
				t.Fatalf("%s: error %v, want %v", tc.rule, f.Err, tc.wantErr)
			}
			var re *RefError
			if f.Err != nil && (!errors.As(f.Err, &re) || re.Index != 0 || re.Kind != tc.ref.Kind || re.Outcome != f.Outcome) {
				t.Fatalf("error %#v does not name refs[0], its kind and outcome", f.Err)
			}
			if f.Outcome == handoff.RefMismatch && !errors.Is(f.Err, handoff.ErrRefMismatch) ||
				f.Outcome == handoff.RefUnverifiable && !errors.Is(f.Err, handoff.ErrUnverifiableRef) {
				t.Fatalf("error %v does not wrap the outcome's sentinel", f.Err)
			}
			// Only a required reference's failure is an error for step 7.
			if err := fs.Err(); (err != nil) != (f.Required && f.Outcome != handoff.RefVerified) {
				t.Fatalf("Findings.Err() = %v for required=%v outcome %s", err, f.Required, f.Outcome)
			}
		})
	}
}

// TestRequiredBy checks policy selection (draft step 7: the references
// that local policy requires) by kind and by loc scheme.
func TestRequiredBy(t *testing.T) {
	a := NewDigestRef([]byte("a"), "https://store.example/a")
	b := NewDigestRef([]byte("b"), "ipfs://bafy")
	s, _ := mustSalted(t, []byte("c"), "")
	u := handoff.ContextRef{Kind: "urn:example:kind", Dig: handoff.DigestOf([]byte("d"))}
	refs := []handoff.ContextRef{a, b, s, u}
	tests := []struct {
		name string
		p    Policy
		want []bool
	}{
		{"nothing", Policy{}, []bool{false, false, false, false}},
		{"all", Policy{RequireAll: true}, []bool{true, true, true, true}},
		{"kind salted-digest", Policy{RequireKinds: []string{handoff.KindSaltedDigest}}, []bool{false, false, true, false}},
		{"kind URI", Policy{RequireKinds: []string{"urn:example:kind"}}, []bool{false, false, false, true}},
		{"loc scheme HTTPS", Policy{RequireLocSchemes: []string{"HTTPS"}}, []bool{true, false, false, false}},
		{"loc scheme ipfs and kind digest", Policy{RequireLocSchemes: []string{"ipfs"}, RequireKinds: []string{handoff.KindDigest}}, []bool{true, true, false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := mustChecker(t, tc.p).CheckRefs(context.Background(), delegator, refs, nil)
			for i, f := range fs {
				if f.Required != tc.want[i] {
					t.Errorf("refs[%d] required = %v, want %v", i, f.Required, tc.want[i])
				}
				// An unknown kind is unverifiable whether or not required.
				if !f.Required && f.Outcome != handoff.RefNotChecked && refs[i].Kind != u.Kind {
					t.Errorf("refs[%d]: not required, nothing at hand: %s, want not-checked", i, f.Outcome)
				}
				if refs[i].Kind == u.Kind && f.Outcome != handoff.RefUnverifiable {
					t.Errorf("refs[%d]: unknown kind: %s, want unverifiable", i, f.Outcome)
				}
				if f.Required && f.Outcome != handoff.RefUnverifiable {
					t.Errorf("refs[%d]: required, nothing at hand: %s, want unverifiable", i, f.Outcome)
				}
			}
		})
	}
}

func TestNewCheckerRejectsBadPolicy(t *testing.T) {
	for _, p := range []Policy{
		{RequireKinds: []string{"no kind"}},
		{Fetch: FetchPolicy{Schemes: []string{"ftp"}}},
		{Fetch: FetchPolicy{Hosts: []string{"*.example"}}},
		{Fetch: FetchPolicy{Hosts: []string{""}}},
		{Fetch: FetchPolicy{MaxSize: -1}},
		{Fetch: FetchPolicy{Timeout: -time.Second}},
	} {
		if _, err := NewChecker(p); err == nil {
			t.Errorf("NewChecker(%+v) accepted a bad policy", p)
		}
	}
}

// receiveEnv is a real delegator key, trust file and receiver with the
// Checker as its step 7 hook.
type receiveEnv struct {
	signer *handoff.Signer
	r      *handoff.Receiver
	now    time.Time
}

func newReceiveEnv(t testing.TB, p Policy) *receiveEnv {
	t.Helper()
	k, err := trust.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := trust.NewKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	tc := trust.New()
	if err := tc.Add(delegator, tk); err != nil {
		t.Fatal(err)
	}
	s, err := handoff.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	if p.Keys == nil {
		p.Keys = tc
	}
	now := time.Unix(1_800_000_000, 0)
	r, err := handoff.NewReceiver(handoff.Options{Me: delegate, Keys: tc, Now: func() time.Time { return now },
		CheckRefs: mustChecker(t, p).Check})
	if err != nil {
		t.Fatal(err)
	}
	return &receiveEnv{signer: s, r: r, now: now}
}

func (e *receiveEnv) handoff(t testing.TB, refs ...handoff.ContextRef) []byte {
	t.Helper()
	n := e.now.Unix()
	el, err := e.signer.SignOffer(&handoff.Offer{Hop: handoff.NewHop(), Dialog: "ctx", Iss: delegator, Aud: delegate,
		Iat: n, Exp: n + 60, Refs: refs}, handoff.FormJWS)
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReceiveStep7 runs the Checker as the Receiver's step 7 hook on real
// signed offers: a required reference that is not verified rejects the
// offer ("ref-mismatch" for a mismatch, else "unverifiable-ref"), a
// mismatch outranks an unverifiable one, and every outcome is reported.
func TestReceiveStep7(t *testing.T) {
	task := []byte("the task's input document")
	prompt := []byte("be brief")
	d := NewDigestRef(task, "")
	s, salt := mustSalted(t, prompt, "")
	u := handoff.ContextRef{Kind: "urn:example:kind", Dig: handoff.DigestOf(task)}

	tests := []struct {
		name       string
		p          Policy
		refs       []handoff.ContextRef
		m          *Material
		outcome    handoff.Outcome
		reason     handoff.Reason
		refOutcome []handoff.RefOutcome
	}{
		{"all verified", Policy{RequireAll: true}, []handoff.ContextRef{d, s},
			&Material{Octets: map[int][]byte{0: task, 1: prompt}, Salts: map[int][]byte{1: salt}},
			handoff.Accepted, "", []handoff.RefOutcome{handoff.RefVerified, handoff.RefVerified}},
		{"required mismatch", Policy{RequireAll: true}, []handoff.ContextRef{d, s},
			&Material{Octets: map[int][]byte{0: prompt, 1: prompt}, Salts: map[int][]byte{1: salt}},
			handoff.Rejected, handoff.ReasonRefMismatch, []handoff.RefOutcome{handoff.RefMismatch, handoff.RefVerified}},
		{"required missing", Policy{RequireAll: true}, []handoff.ContextRef{d, s},
			&Material{Octets: map[int][]byte{0: task}},
			handoff.Rejected, handoff.ReasonUnverifiableRef, []handoff.RefOutcome{handoff.RefVerified, handoff.RefUnverifiable}},
		{"mismatch outranks unverifiable", Policy{RequireAll: true}, []handoff.ContextRef{u, d},
			&Material{Octets: map[int][]byte{1: prompt}},
			handoff.Rejected, handoff.ReasonRefMismatch, []handoff.RefOutcome{handoff.RefUnverifiable, handoff.RefMismatch}},
		{"unsupported kind required", Policy{RequireAll: true}, []handoff.ContextRef{u}, nil,
			handoff.Rejected, handoff.ReasonUnverifiableRef, []handoff.RefOutcome{handoff.RefUnverifiable}},
		{"not required mismatch accepted", Policy{RequireKinds: []string{handoff.KindSaltedDigest}}, []handoff.ContextRef{d, s},
			&Material{Octets: map[int][]byte{0: prompt, 1: prompt}, Salts: map[int][]byte{1: salt}},
			handoff.Accepted, "", []handoff.RefOutcome{handoff.RefMismatch, handoff.RefVerified}},
		{"nothing required nothing supplied", Policy{}, []handoff.ContextRef{d, s, u}, nil,
			handoff.Accepted, "", []handoff.RefOutcome{handoff.RefNotChecked, handoff.RefNotChecked, handoff.RefUnverifiable}},
		{"unknown kind not required: unverifiable, accepted", Policy{}, []handoff.ContextRef{u},
			&Material{Octets: map[int][]byte{0: task}},
			handoff.Accepted, "", []handoff.RefOutcome{handoff.RefUnverifiable}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newReceiveEnv(t, tc.p)
			ctx := WithMaterial(context.Background(), tc.m)
			res, err := e.r.Receive(ctx, e.handoff(t, tc.refs...), "ctx")
			if res.Outcome != tc.outcome || res.Reason != tc.reason {
				t.Fatalf("outcome %s reason %q (%v), want %s %q", res.Outcome, res.Reason, err, tc.outcome, tc.reason)
			}
			if tc.reason != "" {
				var ce *handoff.CheckError
				if !errors.As(err, &ce) || ce.Step != 7 || !errors.Is(err, tc.reason.Sentinel()) {
					t.Fatalf("error %v is not a step 7 %s", err, tc.reason)
				}
				var re *RefError
				if !errors.As(err, &re) {
					t.Fatalf("error %v names no reference", err)
				}
			}
			if len(res.Refs) != len(tc.refOutcome) {
				t.Fatalf("refs %v, want %v", res.Refs, tc.refOutcome)
			}
			for i := range res.Refs {
				if res.Refs[i] != tc.refOutcome[i] {
					t.Fatalf("refs %v, want %v", res.Refs, tc.refOutcome)
				}
			}
		})
	}
}
