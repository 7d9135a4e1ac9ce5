package handoff

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestStatusWrongAudienceException checks the one exception to
// status.iss = offer.aud (D9): a "rejected" with reason wrong-audience
// signed by the agent the offer reached by mistake (any trusted agent but
// offer.iss), to offer.iss. It verifies, marked Misdelivered, and never
// sets the hop's state; everything else from a third party still fails.
func TestStatusWrongAudienceException(t *testing.T) {
	f := newFixture(t)
	// planner's offer for "me" reached "coder" by mistake.
	offer := f.sign("planner", f.offer("planner", "me"), FormJWS)
	other := f.sign("planner", f.offer("planner", "me"), FormJWS)
	opts := StatusOptions{Keys: f.keys, Now: func() time.Time { return time.Unix(f.now, 0) }}
	mk := func(signer, iss, aud string, st State, r Reason, about Element, iat int64, form Form) Element {
		el, err := f.signers[signer].SignStatus(&Status{Offer: about.Digest(), Iss: iss, Aud: aud, Iat: iat, State: st, Reason: r}, form)
		if err != nil {
			t.Fatal(err)
		}
		return el
	}
	cases := []struct {
		rule         string
		el           Element
		want         error
		misdelivered bool
		setsState    bool
	}{
		{"D9 exception: wrong-audience from the agent reached by mistake, to offer.iss",
			mk("coder", "coder", "planner", StateRejected, ReasonWrongAudience, offer, f.now, FormJWS), nil, true, false},
		{"D9 exception: COSE as well",
			mk("coder", "coder", "planner", StateRejected, ReasonWrongAudience, offer, f.now, FormCOSE), nil, true, false},
		{"D9: wrong-audience from offer.aud itself is the delegate's own word",
			mk("me", "me", "planner", StateRejected, ReasonWrongAudience, offer, f.now, FormJWS), nil, false, true},
		{"D9: rejected stale verifies and never sets the state",
			mk("me", "me", "planner", StateRejected, ReasonStale, offer, f.now, FormJWS), nil, false, false},
		{"D9: rejected replay verifies and never sets the state",
			mk("me", "me", "planner", StateRejected, ReasonReplay, offer, f.now, FormJWS), nil, false, false},
		{"D9: rejected policy from the delegate sets the state",
			mk("me", "me", "planner", StateRejected, ReasonPolicy, offer, f.now, FormJWS), nil, false, true},
		{"D9 exception: status.aud must be offer.iss",
			mk("coder", "coder", "me", StateRejected, ReasonWrongAudience, offer, f.now, FormJWS), ErrWrongAudience, false, false},
		{"D9 exception: not from offer.iss (it cannot be misdelivered to itself)",
			mk("planner", "planner", "planner", StateRejected, ReasonWrongAudience, offer, f.now, FormJWS), ErrPolicy, false, false},
		{"D9 exception: only rejected (a third party's failed is refused)",
			mk("coder", "coder", "planner", StateFailed, ReasonWrongAudience, offer, f.now, FormJWS), ErrPolicy, false, false},
		{"D9 exception: only reason wrong-audience (a third party's policy rejection is refused)",
			mk("coder", "coder", "planner", StateRejected, ReasonPolicy, offer, f.now, FormJWS), ErrPolicy, false, false},
		{"D9 exception: a third party's accepted is refused",
			mk("coder", "coder", "planner", StateAccepted, "", offer, f.now, FormJWS), ErrPolicy, false, false},
		{"D9 exception: the signer's key must be trusted",
			mk("outsider", "outsider", "planner", StateRejected, ReasonWrongAudience, offer, f.now, FormJWS), ErrUntrustedKey, false, false},
		{"D9 exception: signed with the key bound to its iss (coder's key, iss me-too)",
			mk("coder", "me", "planner", StateRejected, ReasonWrongAudience, offer, f.now, FormJWS), ErrUntrustedKey, false, false},
		{"D9 exception: status.offer must be the offer's digest",
			mk("coder", "coder", "planner", StateRejected, ReasonWrongAudience, other, f.now, FormJWS), ErrPolicy, false, false},
		{"D9 exception: iat later than now plus skew",
			mk("coder", "coder", "planner", StateRejected, ReasonWrongAudience, offer, f.now+61, FormJWS), ErrStale, false, false},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			vs, err := VerifyStatus(c.el, offer, opts)
			if c.want != nil {
				if !errors.Is(err, c.want) || vs != nil {
					t.Fatalf("got %v, %v; want %v", vs, err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("want verified, got %v", err)
			}
			if vs.Misdelivered != c.misdelivered || vs.SetsState() != c.setsState {
				t.Fatalf("Misdelivered %v SetsState %v, want %v %v", vs.Misdelivered, vs.SetsState(), c.misdelivered, c.setsState)
			}
		})
	}
}

// Signing refuses what no receiver accepts (issue 15): a status without
// its parties, state or offer digest (D9 checks each), an offer without
// its parties or hop; every empty member is named.
func TestSignRefusesWhatNoReceiverAccepts(t *testing.T) {
	s := newFixture(t).signers["coder"]
	dg := DigestOf([]byte("an offer"))
	good := Status{Offer: dg, Iss: "coder", Aud: "planner", Iat: 1, State: StateAccepted}
	for _, tc := range []struct {
		rule string
		mut  func(*Status)
		want string
	}{
		{"D9: iss names a party", func(s *Status) { s.Iss = "" }, "a status needs iss"},
		{"D9: aud names the other party", func(s *Status) { s.Aud = "" }, "a status needs aud"},
		{"D9: both named at once", func(s *Status) { s.Iss, s.Aud = "", "" }, "a status needs iss, aud"},
		{"Status: state", func(s *Status) { s.State = "" }, "a status needs state"},
		{"D9: the offer digest", func(s *Status) { s.Offer = Digest{} }, "a status needs offer digest"},
		{"D9: the offer digest's value", func(s *Status) { s.Offer.Val = nil }, "offer digest's value"},
	} {
		st := good
		tc.mut(&st)
		if _, err := s.SignStatus(&st, FormJWS); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: SignStatus = %v; want an error containing %q", tc.rule, err, tc.want)
		}
	}
	if _, err := s.SignStatus(&good, FormCOSE); err != nil {
		t.Fatalf("a complete status: %v", err)
	}
	o := Offer{Hop: NewHop(), Dialog: "d", Iss: "planner", Aud: "coder", Iat: 1, Exp: 2}
	for _, tc := range []struct {
		rule string
		mut  func(*Offer)
		want string
	}{
		{"Offer: iss", func(o *Offer) { o.Iss = "" }, "an offer needs iss"},
		{"Offer: aud", func(o *Offer) { o.Aud = "" }, "an offer needs aud"},
		{"Offer: hop", func(o *Offer) { o.Hop = "" }, "an offer needs hop"},
	} {
		oo := o
		tc.mut(&oo)
		if _, err := s.SignOffer(&oo, FormJWS); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: SignOffer = %v; want an error containing %q", tc.rule, err, tc.want)
		}
	}
}

// TestParseElementText: a status carried as text (draft "Signing": text
// with a period is a JWS, text without one base64url COSE) is read as text
// only: a string whose first octet is 0xd2 is not raw COSE_Sign1 octets,
// which text cannot hold (FuzzMeta found "ҿ" read as such).
func TestParseElementText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		form Form
	}{
		{"eyJhbGciOiJFUzI1NiJ9.e30.AA", FormJWS},
		{" 0oRDoQEmoFBAAA \n", FormCOSE},
		{"ҿ", FormInvalid},
		{"a=", FormInvalid},
	} {
		if el := ParseElementText(tc.in); el.Form != tc.form {
			t.Errorf("ParseElementText(%q) is %v, want %v", tc.in, el.Form, tc.form)
		}
	}
	if el := ParseElement([]byte("ҿ")); el.Form != FormCOSE {
		t.Errorf("ParseElement of octets d2 bf is %v: raw COSE by its tag", el.Form)
	}
}
