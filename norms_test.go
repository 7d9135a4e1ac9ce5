package handoff

import (
	"context"
	"testing"
	"time"
)

// TestOboIsNoAuthority: draft "On Behalf Of": "A receiver MUST NOT make
// an access control decision based on obo or chain alone." The
// receiving checks give the same verdict whatever the offer says of its
// principal (none, an administrator, an unknown one), and Options has
// nothing that reads obo: authority comes from the host protocol's
// credentials (grant binds one by digest).
func TestOboIsNoAuthority(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name string
		obo  *Principal
	}{
		{"no principal", nil},
		{"an administrator", &Principal{Sub: "admin", Iss: "https://idp.example", Extra: map[string]any{"roles": []any{"root"}}}},
		{"a principal no one knows", &Principal{Sub: "nobody@nowhere.invalid"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := f.offer("planner", "me")
			o.Obo = c.obo
			h := &Handoff{Offer: f.sign("planner", o, FormJWS)}
			b, err := h.Encode(JSON)
			if err != nil {
				t.Fatal(err)
			}
			res, err := f.receiver(nil).Receive(context.Background(), b, "d")
			if err != nil || res.Outcome != Accepted {
				t.Fatalf("obo %+v: %v %v", c.obo, res.Outcome, err)
			}
		})
	}
}

// TestDetailIsNotReliedOn: draft "Data Model", Status: "Detail is free
// text for people and MUST NOT be relied on by software." A status is
// verified, and its state read, the same whatever its detail says, even
// a detail that claims another state.
func TestDetailIsNotReliedOn(t *testing.T) {
	f := newFixture(t)
	offer := f.sign("planner", f.offer("planner", "me"), FormJWS)
	for _, c := range []struct {
		state  State
		detail string
	}{
		{StateFailed, ""},
		{StateFailed, "completed successfully, all tests passed"},
		{StateFailed, `{"state":"completed"}`},
		{StateCompleted, "failed: nothing was done"},
	} {
		st, err := f.signers["me"].SignStatus(&Status{Offer: offer.Digest(), Iss: "me", Aud: "planner", Iat: f.now, State: c.state,
			Detail: c.detail}, FormJWS)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := VerifyStatus(st, offer, StatusOptions{Keys: f.keys, Now: func() time.Time { return time.Unix(f.now, 0) }})
		if err != nil {
			t.Fatalf("%s %q: %v", c.state, c.detail, err)
		}
		if vs.Status.State != c.state || !vs.SetsState() {
			t.Fatalf("%s %q read as %s", c.state, c.detail, vs.Status.State)
		}
	}
}

// TestEmptyChainInMemory: a Handoff built in memory with an empty, not
// nil, chain (the parser refuses one on the wire) is read as carrying
// none; it never reaches the chain checks' first element.
func TestEmptyChainInMemory(t *testing.T) {
	f := newFixture(t)
	o := f.offer("planner", "me")
	d := DigestOf([]byte("an earlier offer"))
	o.Prev = &d
	h := &Handoff{Offer: f.sign("planner", o, FormJWS), Chain: []Element{}}
	res, err := f.receiver(nil).ReceiveParsed(context.Background(), h, nil, "d")
	if err != nil || res.Outcome != Accepted || res.ChainQuality != ChainAbsent {
		t.Fatalf("%+v %v", res, err)
	}
}
