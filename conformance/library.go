package conformance

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/refs"
	"github.com/quantumlearningmachines/handoff/trust"
)

// Library answers requests with this module's packages: the driver that
// `handoff conformance --driver` runs, and the model a driver in another
// language follows. Each request gets its own receiver, so a case's
// deliveries share one replay memory and cases share nothing.
type Library struct{}

// maxRequestLine bounds one request line: the largest vector is a few
// hundred KiB, in hex twice that.
const maxRequestLine = 64 << 20

// Serve answers the requests on in, one line each, on out, until in ends.
// It returns an error only for input it cannot read as requests or output
// it cannot write: a case that fails is an answer, not an error.
func Serve(in io.Reader, out io.Writer, impl interface {
	Do(*Request) (*Answer, error)
}) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), maxRequestLine)
	w := bufio.NewWriter(out)
	for line := 1; sc.Scan(); line++ {
		var req Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("request line %d: %w", line, err)
		}
		a, err := impl.Do(&req)
		if err != nil {
			a = &Answer{Error: err.Error()}
		}
		a.ID = req.ID
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		w.Write(append(b, '\n'))
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Do answers one request.
func (Library) Do(req *Request) (*Answer, error) {
	keys, err := trust.Parse(req.Trust)
	if err != nil {
		return nil, err
	}
	switch req.Kind {
	case KindVerify:
		return libVerify(req, keys)
	case KindVerifyStatus:
		return libVerifyStatus(req, keys)
	case KindSignOffer:
		return libSignOffer(req)
	case KindSignStatus:
		return libSignStatus(req)
	}
	return &Answer{Skip: fmt.Sprintf("unknown kind %q", req.Kind)}, nil
}

// ReceiverOptions are the receiver options a verify request asks for.
func ReceiverOptions(req *Request, keys handoff.KeySource, clock *int64) (handoff.Options, *refs.Material, error) {
	o := req.Options
	if o == nil {
		o = &VerifyOptions{}
	}
	opts := handoff.Options{Me: req.Me, Keys: keys, Now: func() time.Time { return time.Unix(*clock, 0) },
		RequireFullChain: o.RequireFullChain, Origins: o.Origins}
	if o.Skew != nil {
		opts.Skew = time.Duration(*o.Skew) * time.Second
		if *o.Skew == 0 {
			opts.Skew = handoff.NoSkew
		}
	}
	if o.MaxLifetime != nil {
		opts.MaxLifetime = time.Duration(*o.MaxLifetime) * time.Second
	}
	opts.Limits.MaxChain = o.MaxChain
	if o.MemorySince != 0 {
		opts.Since = time.Unix(o.MemorySince, 0)
	}
	m := &refs.Material{Octets: map[int][]byte{}, Salts: map[int][]byte{}}
	for name, from := range map[string]map[string]string{"refOctets": o.RefOctets, "refSalts": o.RefSalts} {
		to := m.Octets
		if name == "refSalts" {
			to = m.Salts
		}
		for k, v := range from {
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 {
				return opts, nil, fmt.Errorf("%s: %q is not an index", name, k)
			}
			if to[i], err = hex.DecodeString(v); err != nil {
				return opts, nil, fmt.Errorf("%s %s: %w", name, k, err)
			}
		}
	}
	checker, err := refs.NewChecker(refs.Policy{RequireAll: o.RequireRefs, Keys: keys})
	if err != nil {
		return opts, nil, err
	}
	opts.CheckRefs = checker.Check
	return opts, m, nil
}

func libVerify(req *Request, keys handoff.KeySource) (*Answer, error) {
	var clock int64
	opts, m, err := ReceiverOptions(req, keys, &clock)
	if err != nil {
		return nil, err
	}
	r, err := handoff.NewReceiver(opts)
	if err != nil {
		return nil, err
	}
	ctx := refs.WithMaterial(context.Background(), m)
	a := &Answer{}
	for i, d := range req.Deliveries {
		b, err := hex.DecodeString(d.Handoff)
		if err != nil {
			return nil, fmt.Errorf("delivery %d: %w", i, err)
		}
		clock = d.Now
		res, err := r.Receive(ctx, b, d.Dialog)
		if res == nil {
			return nil, fmt.Errorf("delivery %d: %w", i, err)
		}
		a.Deliveries = append(a.Deliveries, VerdictOf(res))
	}
	return a, nil
}

// VerdictOf is a Result as `handoff verify` prints it.
func VerdictOf(res *handoff.Result) Verdict {
	v := Verdict{Result: string(res.Outcome), Chain: string(res.ChainQuality)}
	if res.Outcome == handoff.Rejected {
		r := string(res.Reason)
		v.Reason = &r
	}
	if res.OfferDigest != nil {
		d := res.OfferDigest.String()
		v.Offer = &d
	}
	return v
}

func offerIn(from string) (*handoff.Handoff, error) {
	b, err := hex.DecodeString(from)
	if err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	h, err := handoff.ParseHandoff(b, handoff.Limits{})
	if err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	return h, nil
}

func libVerifyStatus(req *Request, keys handoff.KeySource) (*Answer, error) {
	h, err := offerIn(req.From)
	if err != nil {
		return nil, err
	}
	b, err := hex.DecodeString(req.Status)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	vs, err := handoff.VerifyStatus(handoff.ParseElement(b), h.Offer, handoff.StatusOptions{Keys: keys,
		Now: func() time.Time { return time.Unix(req.Now, 0) }})
	var ce *handoff.CheckError
	switch {
	case err == nil:
		return &Answer{Result: "verified", State: string(vs.Status.State)}, nil
	case errors.As(err, &ce):
		return &Answer{Result: "rejected"}, nil
	}
	return nil, err
}

func signer(s *RequestSign) (*handoff.Signer, handoff.Form, error) {
	if s == nil {
		return nil, 0, errors.New("no sign inputs")
	}
	key, _, err := trust.ParsePrivateJWK(s.Key)
	if err != nil {
		return nil, 0, fmt.Errorf("key: %w", err)
	}
	sg, err := handoff.NewSigner(key)
	if err != nil {
		return nil, 0, err
	}
	f := handoff.FormJWS
	if s.Form == "cose" {
		f = handoff.FormCOSE
	}
	return sg, f, nil
}

func libSignOffer(req *Request) (*Answer, error) {
	sg, f, err := signer(req.Sign)
	if err != nil {
		return nil, err
	}
	s := req.Sign
	o := &handoff.Offer{Hop: handoff.NewHop(), Dialog: s.Dialog, Iss: s.Iss, Aud: s.Aud, Iat: req.Now, Exp: req.Now + s.TTL}
	var from *handoff.Handoff
	if req.From != "" {
		if from, err = offerIn(req.From); err != nil {
			return nil, err
		}
		d := from.Offer.Digest()
		o.Prev = &d
	}
	el, err := sg.SignOffer(o, f)
	if err != nil {
		return nil, err
	}
	h := &handoff.Handoff{Offer: el}
	if from != nil {
		h = from.PassOn(el)
	}
	enc := handoff.JSON
	if s.CBOR {
		enc = handoff.CBOR
	}
	b, err := h.Encode(enc)
	if err != nil {
		return nil, err
	}
	return &Answer{Output: hex.EncodeToString(b)}, nil
}

func libSignStatus(req *Request) (*Answer, error) {
	sg, f, err := signer(req.Sign)
	if err != nil {
		return nil, err
	}
	h, err := offerIn(req.From)
	if err != nil {
		return nil, err
	}
	o, _, err := handoff.UnsafeDecode(h.Offer)
	if err != nil || o == nil {
		return nil, fmt.Errorf("from: no offer to answer: %v", err)
	}
	s := req.Sign
	st := &handoff.Status{Offer: h.Offer.Digest(), Iss: o.Aud, Aud: o.Iss, Iat: req.Now,
		State: handoff.State(s.State), Reason: handoff.Reason(s.Reason), Detail: s.Detail}
	switch {
	case st.State == handoff.StateCanceled:
		st.Iss, st.Aud = o.Iss, o.Aud
	case st.State == handoff.StateRejected && st.Reason == handoff.ReasonWrongAudience:
		st.Iss, st.Aud = s.Iss, o.Iss // D9: the agent the offer reached by mistake
	}
	el, err := sg.SignStatus(st, f)
	if err != nil {
		return nil, err
	}
	out := []byte(el.Text())
	if s.CBOR {
		out = el.Octets
	}
	return &Answer{Output: hex.EncodeToString(out)}, nil
}
