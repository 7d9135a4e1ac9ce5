package handoff

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/quantumlearningmachines/handoff/internal/wire"
)

// Handoff is what the host protocol carries: the signed offer and,
// optionally, the chain of earlier signed offers, oldest first, ending with
// the one the offer's prev names (draft "The Handoff Object"). It is not
// signed; its elements are.
type Handoff struct {
	Offer Element
	Chain []Element      // nil when the Handoff has no chain member
	Extra map[string]any // unknown members, kept

	// size is the length of the octets ParseHandoff decoded it from (0 for
	// a Handoff built in memory), so that Receiver.ReceiveParsed can hold
	// a caller's parse to the receiver's own Handoff bound.
	size int
}

// PassOn returns the Handoff that carries next, an offer whose prev is
// h.Offer.Digest(): its chain is h's chain followed by h's offer, octets
// unchanged.
func (h *Handoff) PassOn(next Element) *Handoff {
	chain := make([]Element, 0, len(h.Chain)+1)
	chain = append(chain, h.Chain...)
	chain = append(chain, h.Offer)
	return &Handoff{Offer: next, Chain: chain}
}

// IsJSON reports whether b is a JSON text by SPEC.md section 4: its first
// byte other than JSON white space is '{'. Anything else is read as CBOR.
func IsJSON(b []byte) bool {
	b = trimSpace(b)
	return len(b) > 0 && b[0] == '{'
}

// looksLikeText reports whether b is printable ASCII and whitespace only,
// as no CBOR Handoff is (its first octet is a map head, 0xa0 or above).
func looksLikeText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	return len(b) > 0
}

// ParseHandoff strictly decodes a Handoff in JSON or CBOR (by content). It
// checks the Handoff's own shape (D3): offer present and carried as a signed
// element, chain absent or a non-empty array of elements. It does not look
// inside the elements; Receiver does.
//
// On error, the returned Handoff is not nil exactly when the input decoded
// as a map (a JSON object or a CBOR map, within the size bound and
// MaxNesting) that breaks the Handoff's CDDL: it then holds the offer
// element when it could be read, so that its digest can still be
// reported, and its Chain is nil exactly when the map has no "chain"
// member (not nil, possibly empty, when it has one, whatever its value).
// That is what chain quality "absent" stands on (D7).
func ParseHandoff(b []byte, lim Limits) (*Handoff, error) {
	lim = lim.withDefaults()
	if len(b) > lim.MaxHandoff {
		return nil, overBound("", "Handoff of %d octets exceeds the limit of %d", len(b), lim.MaxHandoff)
	}
	enc := CBOR
	if IsJSON(b) {
		enc = JSON
	}
	if h := readHandoff(b, enc, lim.MaxChain); h != nil {
		h.size = len(b)
		return h, nil
	}
	// The fast reader declined: the generic path decides and names the
	// fault (see readHandoff).
	h, err := parseHandoffTree(b, enc)
	if h != nil {
		h.size = len(b)
	}
	return h, err
}

// parseHandoffTree is ParseHandoff over the value tree.
func parseHandoffTree(b []byte, enc Encoding) (*Handoff, error) {
	v, err := decodeTree(b, enc)
	if err != nil {
		if enc == CBOR && looksLikeText(b) && !errors.Is(err, wire.ErrNesting) {
			// Most likely a text file that is not a JSON object (a bare
			// compact JWS, say): say so, not only what CBOR made of it.
			return nil, malformed("", "Handoff: neither a JSON object (the first octet is not '{') nor CBOR (%v)", err)
		}
		return nil, decodeError("", "Handoff: ", err)
	}
	// A map, even one that breaks the CDDL, is a Handoff as far as D7 is
	// concerned: its chain quality is "absent" when it has no chain.
	h := &Handoff{}
	if !isMap(v) {
		h = nil
	} else if hasChainMember(v) {
		h.Chain = []Element{}
	}
	m, err := asMembers(v, "the Handoff")
	if err != nil {
		return h, err
	}
	ov, ok := m.take("offer")
	if !ok {
		return h, malformed("offer", "missing from the Handoff")
	}
	var offerErr error
	h.Offer, offerErr = carried(ov, enc)
	if offerErr != nil && h.Offer.Octets == nil {
		return h, prefixMember("offer", offerErr)
	}
	if cv, ok := m.take("chain"); ok {
		a, ok := cv.([]any)
		if !ok {
			return h, malformed("chain", "is %s, want an array", wire.TypeName(cv))
		}
		if len(a) == 0 {
			return h, malformed("chain", "empty array")
		}
		chain := make([]Element, len(a))
		for i, x := range a {
			el, err := carried(x, enc)
			if el.Octets == nil {
				h.Chain = chain[:i]
				return h, prefixMember(fmt.Sprintf("chain[%d]", i), err)
			}
			if err != nil {
				// Text that is not a signed element in this encoding (base64url
				// in CBOR, a malformed JWS) is a broken chain element (D6).
				el = Element{Form: FormInvalid, Octets: []byte(x.(string))}
			}
			// Text that is neither a JWS nor base64url is a broken chain
			// element (D6), not a malformed Handoff: keep it as FormInvalid.
			chain[i] = el
		}
		h.Chain = chain
	}
	if offerErr != nil {
		return h, prefixMember("offer", offerErr)
	}
	if h.Offer.Form == FormInvalid {
		return h, malformed("offer", "text is neither a compact JWS nor base64url")
	}
	h.Extra = m.extra()
	return h, nil
}

// isMap reports whether a decoded value is a map (of any keys).
func isMap(v any) bool {
	switch v.(type) {
	case map[string]any, map[any]any, wire.Pairs:
		return true
	}
	return false
}

// hasChainMember reports whether a decoded map has the text key "chain".
func hasChainMember(v any) bool {
	switch m := v.(type) {
	case map[string]any:
		_, ok := m["chain"]
		return ok
	case map[any]any:
		_, ok := m["chain"]
		return ok
	case wire.Pairs:
		for _, p := range m {
			if k, ok := p.Key.(string); ok && k == "chain" {
				return true
			}
		}
	}
	return false
}

// readHandoff decodes a Handoff straight from its octets with a
// wire.Reader, reading each carried element's octets once. It accepts
// exactly the Handoffs the generic path (value tree, then carried) accepts,
// with the same result (FuzzDecodeFastMatchesTree), and declines the rest:
// ParseHandoff then decodes again to decide and name the fault. It also
// declines a chain of more than maxChain elements (which Receive rejects
// as too-deep anyway), so that what it builds stays within the elements
// a receiver checks; the generic path returns such a chain whole.
func readHandoff(b []byte, enc Encoding, maxChain int) *Handoff {
	var r wire.Reader
	r.Reset(b, enc == CBOR, false)
	h := &Handoff{}
	var offer, chain bool
	r.Map()
	for {
		k, ok := r.Key()
		if !ok {
			break
		}
		switch {
		case k == "offer" && !offer:
			offer = true
			var bad bool
			h.Offer, bad = readCarried(&r, enc)
			if bad || h.Offer.Form == FormInvalid {
				r.Fail()
			}
		case k == "chain" && !chain:
			chain = true
			h.Chain = []Element{}
			r.Array()
			for r.More() {
				if len(h.Chain) == maxChain {
					r.Fail()
					break
				}
				el, bad := readCarried(&r, enc)
				if bad {
					// Text that is not a signed element in this encoding is a
					// broken chain element (D6), kept as its text.
					el.Form = FormInvalid
				}
				h.Chain = append(h.Chain, el)
			}
			if len(h.Chain) == 0 {
				r.Fail()
			}
		case k == "offer" || k == "chain":
			r.Fail()
		default:
			extraMember(&r, &h.Extra, k)
		}
	}
	if !r.End() || !offer {
		return nil
	}
	return h
}

// readCarried reads one signed element as carried does. bad reports text
// whose carriage breaks the data model (D3); its Octets are then the text.
// Anything but text (or, in CBOR, a byte string) fails the reader.
func readCarried(r *wire.Reader, enc Encoding) (el Element, bad bool) {
	switch r.Peek() {
	case wire.KindBytes:
		return Element{Form: FormCOSE, Octets: r.Bytes()}, false // Bytes fails in JSON
	case wire.KindText:
	default:
		r.Fail()
		return Element{}, false
	}
	span, dots, ok := r.CompactText()
	if !ok {
		// Other characters, or escapes (in JSON): the general case.
		text := r.Text()
		el, err := carried(text, enc)
		if err != nil {
			return Element{Form: FormInvalid, Octets: []byte(text)}, true
		}
		return el, false
	}
	if dots > 0 {
		el := Element{Form: FormJWS, Octets: append([]byte{}, span...)}
		if dots != 2 || span[0] == '.' || span[len(span)-1] == '.' || bytes.Contains(span, []byte("..")) {
			return el, true
		}
		return el, false
	}
	if dec, ok := (*digestSlab)(nil).b64uDecode(span); ok {
		if enc == CBOR {
			return Element{Form: FormInvalid, Octets: append([]byte{}, span...)}, true
		}
		return Element{Form: FormCOSE, Octets: dec}, false
	}
	return Element{Form: FormInvalid, Octets: append([]byte{}, span...)}, false
}

// isJWSCompact reports whether s matches the CDDL's JwsCompact: three
// non-empty runs of base64url characters separated by periods.
func isJWSCompact(s string) bool {
	parts, run := 0, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.':
			if run == 0 {
				return false
			}
			parts, run = parts+1, 0
		case isB64uChar(c):
			run++
		default:
			return false
		}
	}
	return parts == 2 && run > 0
}

// carried reads one signed element as a Handoff carries it. JSON: text
// (JWS, or base64url COSE). CBOR: text (JWS) or a byte string (COSE). The
// returned element has Octets set whenever its octets are known, even if
// the carriage itself breaks the data model (err != nil).
func carried(v any, enc Encoding) (Element, error) {
	switch x := v.(type) {
	case string:
		el := elementFromText(x)
		if el.Form == FormJWS && !isJWSCompact(x) {
			// Text with a period is a JWS (its octets give the digest), but
			// one that is not three base64url parts breaks the CDDL (D3).
			return el, malformed("", "text with a period is not a JWS Compact Serialization")
		}
		if enc == CBOR && el.Form == FormCOSE {
			// In CBOR a COSE_Sign1 travels as a byte string; text must be
			// a JWS (D3). Keep the octets for the digest.
			return el, malformed("", "CBOR carries COSE as a byte string, not base64url text")
		}
		return el, nil // FormInvalid text is judged where it is checked
	case []byte:
		if enc == JSON {
			return Element{}, malformed("", "is a byte string")
		}
		return Element{Form: FormCOSE, Octets: x}, nil
	}
	return Element{}, malformed("", "is %s, want a signed element", wire.TypeName(v))
}

// Encode writes the Handoff in JSON or CBOR. The elements are written with
// their octets unchanged.
func (h *Handoff) Encode(enc Encoding) ([]byte, error) {
	m := &wire.Map{}
	m.Add("offer", carriedValue(h.Offer, enc))
	if len(h.Chain) > 0 {
		a := make([]any, len(h.Chain))
		for i, e := range h.Chain {
			a[i] = carriedValue(e, enc)
		}
		m.Add("chain", a)
	}
	if err := addExtra(m, h.Extra); err != nil {
		return nil, err
	}
	return encodeTree(m, enc)
}

func carriedValue(e Element, enc Encoding) any {
	if e.Form == FormCOSE && enc == CBOR {
		return e.Octets
	}
	return e.Text()
}
