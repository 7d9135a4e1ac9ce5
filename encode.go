package handoff

import (
	"fmt"
	"slices"

	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// Encoding names a wire encoding of payloads and Handoffs.
type Encoding int

// The two encodings. A JWS carries a JSON payload; a COSE_Sign1 a CBOR one.
const (
	JSON Encoding = iota
	CBOR
)

func (e Encoding) String() string {
	if e == CBOR {
		return "CBOR"
	}
	return "JSON"
}

// Encoding: one writer per map of the data model, in the order of its
// shape (decode.go), straight to the octets; an optional member that is
// empty (a zero text, a nil pointer, no refs) is not written, and the
// unknown members (Extra) follow the defined ones in sorted order. Encode
// then decodes what it wrote, with the decoder that every receiver runs,
// so that it never writes a payload that does not decode: the rules of
// the data model are written once, in the decoder.

// Encode writes the offer payload in the given encoding. It refuses an
// offer whose payload would not decode (a hop that is not base64url of
// 16 octets, a kind that is not a URI, text that is not UTF-8...).
func (o *Offer) Encode(enc Encoding) ([]byte, error) {
	b, err := o.write(enc)
	if err == nil {
		_, err = DecodeOffer(b, enc)
	}
	if err != nil {
		return nil, fmt.Errorf("handoff: offer does not fit the data model: %w", err)
	}
	return b, nil
}

// Encode writes the status payload in the given encoding, as Offer.Encode.
func (s *Status) Encode(enc Encoding) ([]byte, error) {
	b, err := s.write(enc)
	if err == nil {
		_, err = DecodeStatus(b, enc)
	}
	if err != nil {
		return nil, fmt.Errorf("handoff: status does not fit the data model: %w", err)
	}
	return b, nil
}

// count returns how many of present are true.
func count(present ...bool) int {
	n := 0
	for _, p := range present {
		if p {
			n++
		}
	}
	return n
}

// extraKeys returns the keys of extra in the order they are written, or
// an error for one that names a member s defines (written or not: it
// would decode as that member).
func extraKeys(s shape, extra map[string]any) ([]string, error) {
	if len(extra) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if s.index(k) >= 0 {
			return nil, fmt.Errorf("extra member %q is a member the data model defines", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// writeExtra writes the unknown members in the order of keys.
func writeExtra(w *wire.Writer, keys []string, extra map[string]any) {
	for _, k := range keys {
		w.Key(k)
		w.Any(extra[k])
	}
}

func (o *Offer) write(enc Encoding) ([]byte, error) {
	if o.Iat < 0 {
		return nil, malformed("iat", "%d: a Time is not negative", o.Iat)
	}
	if o.Exp < 0 {
		return nil, malformed("exp", "%d: a Time is not negative", o.Exp)
	}
	keys, err := extraKeys(offerShape, o.Extra)
	if err != nil {
		return nil, err
	}
	var oboKeys []string
	if o.Obo != nil {
		if oboKeys, err = extraKeys(principalShape, o.Obo.Extra); err != nil {
			return nil, fmt.Errorf("obo: %w", err)
		}
	}
	w := wire.NewWriter(make([]byte, 0, 512), enc == CBOR)
	w.Map(8 + count(o.Task != "", o.Obo != nil, o.Grant != nil, o.Prev != nil, len(o.Refs) > 0) + len(keys))
	w.Key("v")
	w.Uint(Version)
	w.Key("type")
	w.Text("offer")
	w.Key("hop")
	w.Text(o.Hop)
	w.Key("dialog")
	w.Text(o.Dialog)
	if o.Task != "" {
		w.Key("task")
		w.Text(o.Task)
	}
	w.Key("iss")
	w.Text(o.Iss)
	w.Key("aud")
	w.Text(o.Aud)
	w.Key("iat")
	w.Uint(uint64(o.Iat))
	w.Key("exp")
	w.Uint(uint64(o.Exp))
	if o.Obo != nil {
		w.Key("obo")
		w.Map(1 + count(o.Obo.Iss != "") + len(oboKeys))
		w.Key("sub")
		w.Text(o.Obo.Sub)
		if o.Obo.Iss != "" {
			w.Key("iss")
			w.Text(o.Obo.Iss)
		}
		writeExtra(w, oboKeys, o.Obo.Extra)
		w.End()
	}
	if o.Grant != nil {
		w.Key("grant")
		writeDigest(w, o.Grant)
	}
	if o.Prev != nil {
		w.Key("prev")
		writeDigest(w, o.Prev)
	}
	if err := writeRefs(w, o.Refs); err != nil {
		return nil, err
	}
	writeExtra(w, keys, o.Extra)
	w.End()
	return w.Bytes()
}

func (s *Status) write(enc Encoding) ([]byte, error) {
	if s.Iat < 0 {
		return nil, malformed("iat", "%d: a Time is not negative", s.Iat)
	}
	keys, err := extraKeys(statusShape, s.Extra)
	if err != nil {
		return nil, err
	}
	w := wire.NewWriter(make([]byte, 0, 256), enc == CBOR)
	w.Map(7 + count(s.Reason != "", s.Detail != "", len(s.Refs) > 0) + len(keys))
	w.Key("v")
	w.Uint(Version)
	w.Key("type")
	w.Text("status")
	w.Key("offer")
	writeDigest(w, &s.Offer)
	w.Key("iss")
	w.Text(s.Iss)
	w.Key("aud")
	w.Text(s.Aud)
	w.Key("iat")
	w.Uint(uint64(s.Iat))
	w.Key("state")
	w.Text(string(s.State))
	if s.Reason != "" {
		w.Key("reason")
		w.Text(string(s.Reason))
	}
	if s.Detail != "" {
		w.Key("detail")
		w.Text(s.Detail)
	}
	if err := writeRefs(w, s.Refs); err != nil {
		return nil, err
	}
	writeExtra(w, keys, s.Extra)
	w.End()
	return w.Bytes()
}

func writeDigest(w *wire.Writer, d *Digest) {
	w.Map(2)
	w.Key("alg")
	w.Text(d.Alg)
	w.Key("val")
	w.TextBase64URL(d.Val)
	w.End()
}

// writeRefs writes the refs member, if there are refs.
func writeRefs(w *wire.Writer, refs []ContextRef) error {
	if len(refs) == 0 {
		return nil
	}
	w.Key("refs")
	w.Array(len(refs))
	for i := range refs {
		r := &refs[i]
		keys, err := extraKeys(refShape, r.Extra)
		if err != nil {
			return fmt.Errorf("refs[%d]: %w", i, err)
		}
		w.Map(2 + count(r.Loc != "", r.Proof != nil) + len(keys))
		w.Key("kind")
		w.Text(r.Kind)
		w.Key("dig")
		writeDigest(w, &r.Dig)
		if r.Loc != "" {
			w.Key("loc")
			w.Text(r.Loc)
		}
		if r.Proof != nil {
			w.Key("proof")
			w.Any(r.Proof)
		}
		writeExtra(w, keys, r.Extra)
		w.End()
	}
	w.End()
	return nil
}

// Encode writes the Handoff in JSON or CBOR. The elements are written with
// their octets unchanged: in CBOR a COSE_Sign1 as a byte string, else as
// text (a JWS as it is, a COSE_Sign1 in JSON as base64url). Like the
// payloads' Encode it decodes what it wrote, and refuses a Handoff that
// would not decode (an element with no octets, unknown members that
// break the encoding's rules).
func (h *Handoff) Encode(enc Encoding) ([]byte, error) {
	b, err := h.write(enc)
	if err == nil {
		_, err = decodeHandoff(b, enc)
	}
	if err != nil {
		return nil, fmt.Errorf("handoff: Handoff does not fit the data model: %w", err)
	}
	return b, nil
}

func (h *Handoff) write(enc Encoding) ([]byte, error) {
	keys, err := extraKeys(handoffShape, h.Extra)
	if err != nil {
		return nil, err
	}
	size := len(h.Offer.Octets)
	for _, e := range h.Chain {
		size += len(e.Octets)
	}
	w := wire.NewWriter(make([]byte, 0, size*4/3+64), enc == CBOR)
	w.Map(1 + count(len(h.Chain) > 0) + len(keys))
	w.Key("offer")
	writeCarried(w, h.Offer, enc)
	if len(h.Chain) > 0 {
		w.Key("chain")
		w.Array(len(h.Chain))
		for _, e := range h.Chain {
			writeCarried(w, e, enc)
		}
		w.End()
	}
	writeExtra(w, keys, h.Extra)
	w.End()
	return w.Bytes()
}

func writeCarried(w *wire.Writer, e Element, enc Encoding) {
	switch {
	case e.Form == FormCOSE && enc == CBOR:
		w.ByteString(e.Octets)
	case e.Form == FormCOSE:
		w.TextBase64URL(e.Octets)
	default:
		w.Text(string(e.Octets))
	}
}
