package handoff

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/quantumlearningmachines/handoff/internal/malleate"
)

// copyCase is one way to make other octets that verify as the same offer
// (SPEC D5, "Same signed content is the same offer"), and so a
// retransmission, never equivocation.
type copyCase struct {
	name string
	form Form
	// make returns the copy of first; re signs o again where it needs
	// the key (an honest re-signature).
	make func(t *testing.T, first Element, re func() Element) Element
}

// must(t)(b, err) is b, failing t on err.
func must(t *testing.T) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

var copyCases = []copyCase{
	{"D5 malleated JWS signature (r, N-s)", FormJWS, func(t *testing.T, e Element, _ func() Element) Element {
		return Element{Form: FormJWS, Octets: must(t)(malleate.JWS(e.Octets))}
	}},
	{"D5 malleated COSE signature (r, N-s)", FormCOSE, func(t *testing.T, e Element, _ func() Element) Element {
		return Element{Form: FormCOSE, Octets: must(t)(malleate.COSESignature(e.Octets))}
	}},
	{"D5 edited COSE unprotected header (a label added)", FormCOSE, func(t *testing.T, e Element, _ func() Element) Element {
		return Element{Form: FormCOSE, Octets: must(t)(malleate.COSEUnprotected(e.Octets, int64(-70000), "added on the path"))}
	}},
	{"D5 edited COSE unprotected header (a label changed)", FormCOSE, func(t *testing.T, e Element, _ func() Element) Element {
		once := must(t)(malleate.COSEUnprotected(e.Octets, int64(-70000), "one"))
		return Element{Form: FormCOSE, Octets: must(t)(malleate.COSEUnprotected(once, int64(-70000), "two"))}
	}},
	{"D5 honest JWS re-signature of the same payload", FormJWS, func(t *testing.T, _ Element, re func() Element) Element {
		return re()
	}},
	{"D5 honest COSE re-signature of the same payload", FormCOSE, func(t *testing.T, _ Element, re func() Element) Element {
		return re()
	}},
}

// TestSignedContent: a copy has other octets (another handoff digest) and
// the same signed content; another payload, another protected header or
// the other form is other content.
func TestSignedContent(t *testing.T) {
	f := newFixture(t)
	for _, c := range copyCases {
		t.Run(c.name, func(t *testing.T) {
			o := f.offer("planner", "me")
			first := f.sign("planner", o, c.form)
			cp := c.make(t, first, func() Element { return f.sign("planner", o, c.form) })
			if bytes.Equal(cp.Octets, first.Octets) {
				t.Fatal("the copy has the first's octets")
			}
			if _, err := VerifyElement(cp, f.keys); err != nil {
				t.Fatalf("the copy does not verify: %v", err)
			}
			same, err := SameContent(first, cp)
			if err != nil || !same {
				t.Fatalf("SameContent = %v, %v; want true", same, err)
			}
		})
	}
	o := f.offer("planner", "me")
	o2 := *o
	o2.Task = "another task"
	for _, tt := range []struct {
		name string
		a, b Element
	}{
		{"another payload (JWS)", f.sign("planner", o, FormJWS), f.sign("planner", &o2, FormJWS)},
		{"another payload (COSE)", f.sign("planner", o, FormCOSE), f.sign("planner", &o2, FormCOSE)},
		{"another signer's protected header (kid)", f.sign("planner", o, FormJWS), f.sign("coder", o, FormJWS)},
		{"the other form", f.sign("planner", o, FormJWS), f.sign("planner", o, FormCOSE)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if same, err := SameContent(tt.a, tt.b); err != nil || same {
				t.Fatalf("SameContent = %v, %v; want false", same, err)
			}
		})
	}
	for _, bad := range []Element{{Form: FormJWS, Octets: []byte("a.b")}, {Form: FormCOSE, Octets: []byte{0xd2}}, {Form: FormInvalid, Octets: []byte("x")}} {
		if _, err := SignedContent(bad); err == nil {
			t.Errorf("SignedContent(%v %q) = nil error; want one", bad.Form, bad.Octets)
		}
	}
}

// TestReceiveCopyIsRetransmission: the Receiver with its Memory answers
// each copy as a retransmission (Copy, Remembered the first's digest),
// also after exp; and other content under the remembered (iss, hop) is
// still equivocation.
func TestReceiveCopyIsRetransmission(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, c := range copyCases {
		t.Run(c.name, func(t *testing.T) {
			r := f.receiver(nil)
			o := f.offer("planner", "me")
			first := f.sign("planner", o, c.form)
			res, err := r.Receive(ctx, encode(t, &Handoff{Offer: first}, JSON), "")
			if err != nil || res.Outcome != Accepted {
				t.Fatalf("first: %v %v", res.Outcome, err)
			}
			cp := c.make(t, first, func() Element { return f.sign("planner", o, c.form) })
			for _, enc := range []Encoding{JSON, CBOR} {
				res, err = r.Receive(ctx, encode(t, &Handoff{Offer: cp}, enc), "")
				if err != nil || res.Outcome != Retransmission || !res.Copy {
					t.Fatalf("copy in %v: %v copy=%v %v", enc, res.Outcome, res.Copy, err)
				}
				if !res.Remembered.Equal(first.Digest()) || !res.OfferDigest.Equal(cp.Digest()) {
					t.Fatalf("copy: remembered %v offer %v; want %v and %v", res.Remembered, res.OfferDigest, first.Digest(), cp.Digest())
				}
			}
			// The first's octets again: a plain retransmission.
			if res, err = r.Receive(ctx, encode(t, &Handoff{Offer: first}, JSON), ""); err != nil || res.Outcome != Retransmission || res.Copy {
				t.Fatalf("first again: %v copy=%v %v", res.Outcome, res.Copy, err)
			}
			// After exp (step 3 skipped for a remembered pair), the same.
			late := *f
			late.now = o.Exp + 1000
			lr := late.receiver(func(opt *Options) { opt.Memory = r.o.Memory })
			if res, err = lr.Receive(ctx, encode(t, &Handoff{Offer: cp}, JSON), ""); err != nil || res.Outcome != Retransmission || !res.Copy {
				t.Fatalf("copy after exp: %v copy=%v %v", res.Outcome, res.Copy, err)
			}
			o2 := *o
			o2.Task = "another task"
			res, err = r.Receive(ctx, encode(t, &Handoff{Offer: f.sign("planner", &o2, c.form)}, JSON), "")
			if res.Outcome != Equivocation || res.Copy || !errors.Is(err, ErrEquivocation) {
				t.Fatalf("other content: %v copy=%v %v", res.Outcome, res.Copy, err)
			}
		})
	}
}

// A memory that returns no content digest (zero) never makes a copy: a
// second offer with other octets is equivocation, as before D5's amendment.
func TestClassifyZeroContentIsNotACopy(t *testing.T) {
	f := newFixture(t)
	o := f.offer("planner", "me")
	res := &Result{Offer: o}
	a, b := DigestOf([]byte("a")), DigestOf([]byte("b"))
	if _, err := res.Classify(Seen{Digest: a}, Seen{Digest: b}); res.Outcome != Equivocation || !errors.Is(err, ErrEquivocation) {
		t.Fatalf("zero contents: %v %v", res.Outcome, err)
	}
	if _, err := res.Classify(Seen{Digest: a, Content: b}, Seen{Digest: b, Content: b}); err != nil || res.Outcome != Retransmission || !res.Copy {
		t.Fatalf("same content: %v copy=%v %v", res.Outcome, res.Copy, err)
	}
	if _, err := res.Classify(Seen{Digest: a, Content: b}, Seen{Digest: a, Content: b}); err != nil || res.Outcome != Retransmission || res.Copy {
		t.Fatalf("same digest: %v copy=%v %v", res.Outcome, res.Copy, err)
	}
}
