package handoff

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

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
	// warm holds what Receiver.ParseHandoff found in its cache while it
	// read this Handoff (nil otherwise), for that receiver's ReceiveParsed,
	// which takes it once.
	warm *warmBox
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
	h, err := decodeHandoff(b, enc)
	if h != nil {
		h.size = len(b)
	}
	return h, err
}

// handoffShape lists the members of a Handoff.
var handoffShape = shape{"offer", "chain"}

// decodeHandoff decodes a Handoff (see ParseHandoff for what it returns
// on error).
func decodeHandoff(b []byte, enc Encoding) (*Handoff, error) {
	var d decoder
	d.r.Reset(b, enc == CBOR, false)
	h, fault := d.handoff(enc)
	if d.r.End(); d.r.Err() != nil {
		err := d.r.Err()
		if enc == CBOR && looksLikeText(b) && !errors.Is(err, wire.ErrNesting) {
			// Most likely a text file that is not a JSON object (a bare
			// compact JWS, say): say so, not only what CBOR made of it.
			return nil, malformed("", "Handoff: neither a JSON object (the first octet is not '{') nor CBOR (%v)", err)
		}
		return nil, decodeError("", "Handoff: ", err)
	}
	return h, fault
}

// handoff reads a Handoff. A map, even one that breaks the CDDL, is a
// Handoff as far as D7 is concerned: its chain quality is "absent" when
// it has no chain member. Of the faults, an offer that is not a signed
// element at all comes first, then the chain's, then an offer whose
// carriage breaks the data model.
func (d *decoder) handoff(enc Encoding) (*Handoff, error) {
	if d.r.Peek() != wire.KindMap {
		v := d.r.Any()
		return nil, malformed("", "the Handoff is %s, want a map with text keys", wire.TypeName(v))
	}
	d.r.Map()
	h := &Handoff{}
	var f fields
	for {
		k, ok := d.r.Key()
		if !ok {
			break
		}
		i := handoffShape.index(k)
		switch {
		case i < 0:
			d.extra(&h.Extra, k)
		case !f.first(&d.r, i, k):
		case i == 0:
			el, err := d.carried(enc, false)
			h.Offer = el
			switch {
			case err != nil && el.Octets == nil:
				f.fail(0, prefixMember("offer", err))
			case err != nil:
				f.fail(2, prefixMember("offer", err))
			case el.Form == FormInvalid:
				f.fail(3, malformed("offer", "text is neither a compact JWS nor base64url"))
			}
		default:
			h.Chain = []Element{}
			f.fail(1, d.chain(h, enc))
		}
	}
	if rest, ok := d.r.NotText(); ok {
		chain := f.seen&2 != 0 || slices.Contains(rest, "chain")
		h = &Handoff{}
		if chain {
			h.Chain = []Element{}
		}
		return h, malformed("", "the Handoff is map, want a map with text keys")
	}
	if f.seen&1 == 0 {
		f.fail(0, malformed("offer", "missing from the Handoff"))
	}
	if f.fault != nil {
		h.Extra = nil
		return h, f.fault
	}
	return h, nil
}

// chain reads the chain member into h.Chain: elements up to the first
// that is not a signed element at all (the rest are read and dropped).
// Text that is not a signed element in this encoding is a broken chain
// element (D6), not a malformed Handoff: it is kept as FormInvalid.
func (d *decoder) chain(h *Handoff, enc Encoding) error {
	if d.r.Peek() != wire.KindArray {
		return d.wrongType("chain", "an array")
	}
	var fault error
	n := 0
	d.r.Array()
	for d.r.More() {
		if fault != nil {
			d.r.Skip()
			continue
		}
		el, err := d.carried(enc, true)
		if err != nil {
			fault = prefixMember(fmt.Sprintf("chain[%d]", n), err)
			continue
		}
		if len(h.Chain) == cap(h.Chain) {
			// Doubling: a hostile chain of one-octet elements costs two
			// Elements per element over its growth (append's own growth,
			// by a quarter for large slices, would cost five).
			h.Chain = append(make([]Element, 0, max(4, 2*cap(h.Chain))), h.Chain...)
		}
		h.Chain = append(h.Chain, el)
		n++
	}
	if n == 0 && fault == nil {
		return malformed("chain", "empty array")
	}
	return fault
}

// carried reads one signed element as a Handoff carries it. JSON: text
// (a JWS, or base64url COSE). CBOR: text (a JWS) or a byte string (COSE).
// An element whose carriage breaks the data model has an error and,
// where its octets are known, Octets; in the chain (inChain) such text
// is a FormInvalid element instead, with no error. Only a value that is
// not a signed element at all has neither octets nor, then, a form.
func (d *decoder) carried(enc Encoding, inChain bool) (Element, error) {
	switch d.r.Peek() {
	case wire.KindBytes:
		return Element{Form: FormCOSE, Octets: d.r.Bytes()}, nil
	case wire.KindText:
	default:
		v := d.r.Any()
		return Element{}, malformed("", "is %s, want a signed element", wire.TypeName(v))
	}
	if inChain && d.raw {
		if t, ok := d.r.RawText(); ok {
			return Element{Form: FormInvalid, Octets: t}, nil
		}
	}
	var el Element
	var err error
	var dots int
	t, compact := d.r.TextIn(&notCompact) // JSON, one pass: the string and its alphabet
	if !compact {
		t = d.r.TextBytes()
		compact = wire.AllIn(&notCompact, t)
	}
	if compact {
		dots = bytes.Count(t, dot)
	}
	if dots > 0 || !compact && bytes.IndexByte(t, '.') >= 0 {
		if inChain {
			el = Element{Form: FormJWS, Octets: d.keep(t)}
		} else {
			el = Element{Form: FormJWS, Octets: bytes.Clone(t)}
		}
		if !compact || dots != 2 || t[0] == '.' || t[len(t)-1] == '.' || bytes.Contains(t, dotdot) {
			// Text with a period is a JWS (its octets give the digest), but
			// one that is not three base64url parts breaks the CDDL (D3).
			err = malformed("", "text with a period is not a JWS Compact Serialization")
		}
	} else if dec, ok := (*digestSlab)(nil).b64uDecode(t); !ok {
		return Element{Form: FormInvalid, Octets: bytes.Clone(t)}, nil // judged where it is checked
	} else {
		el = Element{Form: FormCOSE, Octets: dec}
		if enc == CBOR {
			// In CBOR a COSE_Sign1 travels as a byte string; text must be
			// a JWS (D3). Keep the octets for the digest.
			err = malformed("", "CBOR carries COSE as a byte string, not base64url text")
		}
	}
	if err != nil && inChain {
		if el.Form == FormJWS { // its octets are already a copy (keep)
			return Element{Form: FormInvalid, Octets: el.Octets}, nil
		}
		return Element{Form: FormInvalid, Octets: bytes.Clone(t)}, nil
	}
	return el, err
}

// compactText reports whether b holds only base64url characters and
// periods (what a JWS Compact Serialization is made of) and counts the
// periods: one pass (wire.AllIn: an octet's entry in notCompact is 0
// when it belongs), the count a vectorized bytes.Count. Text with two
// periods, neither first nor last nor side by side, is then the CDDL's
// JwsCompact: three non-empty base64url runs.
func compactText(b []byte) (dots int, ok bool) {
	if !wire.AllIn(&notCompact, b) {
		return 0, false
	}
	return bytes.Count(b, dot), true
}

var (
	dot    = []byte{'.'}
	dotdot = []byte{'.', '.'}
)

// notCompact is 1 for the octets outside the base64url alphabet and '.'.
var notCompact = func() (t [256]byte) {
	for c := range t {
		if !isB64uChar(byte(c)) && c != '.' {
			t[c] = 1
		}
	}
	return t
}()
