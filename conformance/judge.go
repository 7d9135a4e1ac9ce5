package conformance

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

// Judge compares an answer with the case's expectation. Signed outputs are
// judged by verifying them with this module's receiver and status checks.
func Judge(k *Kit, c *Case, a *Answer) error {
	switch {
	case a.misfit != "":
		return errors.New(a.misfit)
	case a.Error != "":
		return fmt.Errorf("the implementation answered with an error: %s", a.Error)
	}
	switch c.Kind {
	case KindVerify:
		want := c.Expected.Deliveries
		if len(a.Deliveries) != len(want) {
			return fmt.Errorf("%d verdicts for %d deliveries", len(a.Deliveries), len(want))
		}
		for i := range want {
			if err := judgeVerdict(&want[i], &a.Deliveries[i]); err != nil {
				if len(want) > 1 {
					return fmt.Errorf("delivery %d of %d: %w", i+1, len(want), err)
				}
				return err
			}
		}
		return nil
	case KindVerifyStatus:
		if a.Result != c.Expected.Result {
			return fmt.Errorf("result %q, want %q", a.Result, c.Expected.Result)
		}
		if a.Result == "verified" && a.State != c.Expected.State {
			return fmt.Errorf("state %q, want %q", a.State, c.Expected.State)
		}
		return nil
	case KindSignOffer:
		return judgeSignedOffer(k, c, a)
	case KindSignStatus:
		return judgeSignedStatus(k, c, a)
	}
	return fmt.Errorf("unknown kind %q", c.Kind)
}

func str(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

func judgeVerdict(want, got *Verdict) error {
	var diffs []string
	if got.Result != want.Result {
		diffs = append(diffs, fmt.Sprintf("result %s, want %s", got.Result, want.Result))
	}
	if str(got.Reason) != str(want.Reason) && !slices.Contains(want.AlsoAccept, str(got.Reason)) {
		diffs = append(diffs, fmt.Sprintf("reason %s, want %s", str(got.Reason), str(want.Reason)))
	}
	if got.Chain != want.Chain {
		diffs = append(diffs, fmt.Sprintf("chain %s, want %s", got.Chain, want.Chain))
	}
	if str(got.Offer) != str(want.Offer) {
		diffs = append(diffs, fmt.Sprintf("offer %s, want %s", str(got.Offer), str(want.Offer)))
	}
	if len(diffs) > 0 {
		return errors.New(strings.Join(diffs, "; "))
	}
	return nil
}

func (k *Kit) trust(c *Case) (*trust.Config, error) {
	b, err := k.File(c.Inputs.Trust)
	if err != nil {
		return nil, err
	}
	return trust.Parse(b)
}

// judgeSignedOffer: the output is a Handoff its aud accepts at now with
// the expected chain quality, whose offer says what was asked (iss, aud,
// dialog, lifetime, form), and which passes the received Handoff on with
// its octets unchanged: chain = from's chain + from's offer, prev = the
// digest of from's offer.
func judgeSignedOffer(k *Kit, c *Case, a *Answer) error {
	out, err := hex.DecodeString(a.Output)
	if err != nil || len(out) == 0 {
		return fmt.Errorf("no output Handoff (hex): %v", err)
	}
	s := c.Inputs.Sign
	if handoff.IsJSON(out) == s.CBOR {
		return fmt.Errorf("the Handoff is not in %s", map[bool]string{true: "CBOR", false: "JSON"}[s.CBOR])
	}
	keys, err := k.trust(c)
	if err != nil {
		return err
	}
	now := c.Inputs.Now
	r, err := handoff.NewReceiver(handoff.Options{Me: s.Aud, Keys: keys, Now: func() time.Time { return time.Unix(now, 0) }})
	if err != nil {
		return err
	}
	res, _ := r.Receive(context.Background(), out, s.Dialog)
	if res == nil || res.Outcome != handoff.Accepted || string(res.ChainQuality) != c.Expected.Chain {
		v := VerdictOf(res)
		return fmt.Errorf("its aud %s does not accept it with chain %s: result %s, reason %s, chain %s: %v", s.Aud, c.Expected.Chain, v.Result, str(v.Reason), v.Chain, res.Err)
	}
	o, h := res.Offer, res.Handoff
	switch {
	case o.Iss != s.Iss || o.Aud != s.Aud || o.Dialog != s.Dialog:
		return fmt.Errorf("the offer names iss %q aud %q dialog %q, asked %q %q %q", o.Iss, o.Aud, o.Dialog, s.Iss, s.Aud, s.Dialog)
	case o.Iat != now || o.Exp-o.Iat != s.TTL:
		return fmt.Errorf("iat %d exp %d, asked iat %d and a lifetime of %d s", o.Iat, o.Exp, now, s.TTL)
	case (h.Offer.Form == handoff.FormCOSE) != (s.Form == "cose"):
		return fmt.Errorf("the offer is not signed as %s", s.Form)
	}
	if c.Inputs.From == nil {
		if h.Chain != nil || o.Prev != nil {
			return errors.New("an offer that passes nothing on carries a chain or a prev")
		}
		return nil
	}
	fb, _ := c.Inputs.From.Bytes()
	from, err := handoff.ParseHandoff(fb, handoff.Limits{})
	if err != nil {
		return fmt.Errorf("the kit's from: %w", err)
	}
	want := append(append([]handoff.Element(nil), from.Chain...), from.Offer)
	if len(h.Chain) != len(want) {
		return fmt.Errorf("chain of %d elements, want %d (the received chain and offer)", len(h.Chain), len(want))
	}
	for i := range want {
		if !bytes.Equal(h.Chain[i].Octets, want[i].Octets) {
			return fmt.Errorf("chain[%d] is not the received element's octets, unchanged (draft: elements are passed on as received)", i)
		}
	}
	if d := from.Offer.Digest(); o.Prev == nil || !o.Prev.Equal(d) {
		return errors.New("prev is not the handoff digest of the received offer")
	}
	return nil
}

// judgeSignedStatus: the output verifies against the offer (D9), with
// the state and reason asked.
func judgeSignedStatus(k *Kit, c *Case, a *Answer) error {
	out, err := hex.DecodeString(a.Output)
	if err != nil || len(out) == 0 {
		return fmt.Errorf("no output status (hex): %v", err)
	}
	s := c.Inputs.Sign
	if s.CBOR && out[0] != 0xd2 {
		return errors.New("not raw COSE_Sign1 octets (tag 18)")
	}
	keys, err := k.trust(c)
	if err != nil {
		return err
	}
	fb, _ := c.Inputs.From.Bytes()
	from, err := handoff.ParseHandoff(fb, handoff.Limits{})
	if err != nil {
		return fmt.Errorf("the kit's from: %w", err)
	}
	el := handoff.ParseElement(out)
	if (el.Form == handoff.FormCOSE) != (s.Form == "cose") {
		return fmt.Errorf("the status is not signed as %s", s.Form)
	}
	vs, err := handoff.VerifyStatus(el, from.Offer, handoff.StatusOptions{Keys: keys, Now: func() time.Time { return time.Unix(c.Inputs.Now, 0) }})
	if err != nil {
		return fmt.Errorf("it does not verify against the offer: %w", err)
	}
	if string(vs.Status.State) != c.Expected.State || string(vs.Status.Reason) != s.Reason {
		return fmt.Errorf("state %s reason %q, asked %s %q", vs.Status.State, vs.Status.Reason, c.Expected.State, s.Reason)
	}
	if s.Iss != "" && vs.Status.Iss != s.Iss {
		return fmt.Errorf("iss %s, asked %s", vs.Status.Iss, s.Iss)
	}
	if vs.Status.Iat != c.Inputs.Now || vs.Status.Detail != s.Detail {
		return fmt.Errorf("iat %d detail %q, asked %d %q", vs.Status.Iat, vs.Status.Detail, c.Inputs.Now, s.Detail)
	}
	return nil
}
