package conformance

import (
	"encoding/json"
	"fmt"
)

// The driver protocol (`handoff conformance --exec COMMAND`): the harness
// writes one Request per line, JSON, to the driver's stdin and reads one
// Answer per line from its stdout, echoing the request's id, before it
// sends the next. Octets travel as hex, the trust file and keys as the
// JSON objects the kit's files hold. The driver exits non-zero only on an
// internal error of its own; a case it cannot run it answers with skip.

// Request is one case as a driver receives it.
type Request struct {
	ID         string            `json:"id"`
	Kind       string            `json:"kind"`
	Trust      json.RawMessage   `json:"trust"`
	Me         string            `json:"me,omitempty"`
	Options    *VerifyOptions    `json:"options,omitempty"`
	Deliveries []RequestDelivery `json:"deliveries,omitempty"`
	From       string            `json:"from,omitempty"`   // hex
	Status     string            `json:"status,omitempty"` // hex
	Now        int64             `json:"now,omitempty"`
	Sign       *RequestSign      `json:"sign,omitempty"`
}

// RequestDelivery is a Delivery with its octets in hex.
type RequestDelivery struct {
	Now     int64  `json:"now"`
	Dialog  string `json:"dialog,omitempty"`
	Handoff string `json:"handoff"`
}

// RequestSign is SignInputs with the key inlined.
type RequestSign struct {
	SignInputs
	Key json.RawMessage `json:"key"`
}

// Answer is a driver's reply to one Request.
type Answer struct {
	ID string `json:"id"`
	// Deliveries: verify, one verdict per delivery, in order.
	Deliveries []Verdict `json:"deliveries,omitempty"`
	// Result and State: verify-status ("verified" | "rejected").
	Result string `json:"result,omitempty"`
	State  string `json:"state,omitempty"`
	// Output: sign-offer, the Handoff's octets; sign-status, the status as
	// carried (compact JWS or base64url COSE text, or raw COSE octets).
	Output string `json:"output,omitempty"`
	// Skip: the driver cannot run this case, and why. It counts as not
	// tested, which counts against the score.
	Skip string `json:"skip,omitempty"`
	// Error: the implementation ran the case but could not answer it (it
	// refused the input, or failed); the case fails with this text.
	Error string `json:"error,omitempty"`

	misfit string // the harness's: the line does not fit this struct
}

// NewRequest builds the request for c, reading the kit files it names.
func (k *Kit) NewRequest(c *Case) (*Request, error) {
	in := &c.Inputs
	trust, err := k.File(in.Trust)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.ID, err)
	}
	r := &Request{ID: c.ID, Kind: c.Kind, Trust: trust, Me: in.Me, Options: in.Options, Now: in.Now}
	if in.From != nil {
		r.From = in.From.Hex
	}
	if in.Status != nil {
		r.Status = in.Status.Hex
	}
	for _, d := range in.Deliveries {
		r.Deliveries = append(r.Deliveries, RequestDelivery{Now: d.Now, Dialog: d.Dialog, Handoff: d.Handoff.Hex})
	}
	if in.Sign != nil {
		key, err := k.File(in.Sign.Key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.ID, err)
		}
		r.Sign = &RequestSign{SignInputs: *in.Sign, Key: key}
	}
	return r, nil
}
