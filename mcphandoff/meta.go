package mcphandoff

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/quantumlearningmachines/handoff"
)

// Key is the _meta key under which the handoff context travels in MCP
// (draft "Carrying the Element", MCP): the Handoff in the params of
// tools/call, a status in the CallToolResult, the delegator's "canceled" in
// the params of notifications/cancelled. Its prefix is not one MCP
// reserves.
const Key = "quantumlearningmachines.com/agent-handoff"

// ErrMeta is the sentinel of a _meta value that does not carry the handoff
// context in the form this package defines (see HandoffOctets and
// StatusFrom).
var ErrMeta = errors.New("mcphandoff: malformed _meta value")

// b64 is base64url without padding, strict (no padding, canonical bits):
// the form the data model uses for octets in text.
var b64 = base64.RawURLEncoding.Strict()

// HandoffValue returns the _meta value that carries h in the given
// encoding:
//
//   - JSON: the Handoff object itself, as a json.RawMessage of
//     h.Encode(handoff.JSON), so it is sent exactly as encoded. Its
//     elements are JSON strings (compact JWS, base64url COSE), so their
//     octets survive any decoding and re-encoding of the object on the
//     way: the Handoff is not signed, its elements are.
//   - CBOR: a JSON string, the base64url (no padding) of the CBOR Handoff's
//     octets. A CBOR Handoff carries COSE elements as byte strings, which a
//     JSON _meta cannot hold, so the whole Handoff travels as octets.
func HandoffValue(h *handoff.Handoff, enc handoff.Encoding) (any, error) {
	if h == nil {
		return nil, invalid("mcphandoff: HandoffValue needs a Handoff, got nil")
	}
	b, err := h.Encode(enc)
	if err != nil {
		return nil, err
	}
	switch enc {
	case handoff.JSON:
		return json.RawMessage(b), nil
	case handoff.CBOR:
		return b64.EncodeToString(b), nil
	}
	return nil, invalidf("mcphandoff: unknown encoding %v", enc)
}

// HandoffOctets reads a _meta value back into the Handoff octets that the
// receiving checks take: an object (as the SDK decodes it, a
// map[string]any, or a json.RawMessage) is the JSON Handoff, written again
// as JSON; a string is the base64url of a CBOR Handoff. Anything else
// wraps ErrMeta. The octets are not checked here: handoff.ParseHandoff and
// the receiver do that.
//
// Re-encoding the object is safe because the Handoff is not signed: its
// elements are strings and keep their octets. Unknown members with numbers
// beyond float64 precision may change on the way (the SDK decodes _meta as
// map[string]any); unknown members are ignored. What the re-encoding
// cannot show is a body that was not strict JSON (duplicate members, a
// lone surrogate): the SDK's decoding has already hidden it. StrictHandler
// refuses such bodies before the SDK decodes them.
func HandoffOctets(v any) ([]byte, error) {
	switch x := v.(type) {
	case json.RawMessage:
		if len(x) == 0 {
			return nil, fmt.Errorf("%w: %q is empty, want the Handoff object or base64url CBOR", ErrMeta, Key)
		}
		return x, nil
	case map[string]any:
		b, err := json.Marshal(x)
		if err != nil {
			return nil, fmt.Errorf("%w: the Handoff object under %q cannot be written as JSON: %v", ErrMeta, Key, err)
		}
		return b, nil
	case string:
		b, err := b64.DecodeString(x)
		if err != nil {
			return nil, fmt.Errorf("%w: the string under %q is not base64url (no padding) of a CBOR Handoff: %v", ErrMeta, Key, err)
		}
		return b, nil
	case nil:
		return nil, fmt.Errorf("%w: %q is null, want the Handoff object or base64url CBOR", ErrMeta, Key)
	}
	return nil, fmt.Errorf("%w: %q is a %T, want the Handoff object or base64url CBOR", ErrMeta, Key, v)
}

// StatusValue returns the _meta value that carries a signed status: the
// compact JWS, or the COSE_Sign1 in base64url (handoff.Element.Text).
func StatusValue(st handoff.Element) string { return st.Text() }

// StatusFrom reads the signed status under Key in a _meta map (of a tool
// result or a notifications/cancelled), as a2ahandoff.StatusFrom reads
// A2A metadata: ok is false when there is none; a value that is not a
// string holding a compact JWS or a base64url COSE_Sign1 is an error
// wrapping ErrMeta. The signature and parties are not checked here
// (delegator.Intake, delegate.Cancel and handoff.VerifyStatus do that).
func StatusFrom(meta map[string]any) (st handoff.Element, ok bool, err error) {
	v, ok := meta[Key]
	if !ok {
		return handoff.Element{}, false, nil
	}
	st, err = statusValue(v)
	return st, true, err
}

func statusValue(v any) (handoff.Element, error) {
	s, ok := v.(string)
	if !ok {
		return handoff.Element{}, fmt.Errorf("%w: the status under %q is a %T, want a string (compact JWS or base64url COSE)", ErrMeta, Key, v)
	}
	el := handoff.ParseElementText(s)
	if el.Form == handoff.FormInvalid || len(el.Octets) == 0 {
		return handoff.Element{}, fmt.Errorf("%w: the status under %q is neither a compact JWS nor base64url COSE", ErrMeta, Key)
	}
	return el, nil
}

// withMeta returns a copy of m with key set to v. The SDK's Meta may be
// nil, and a map the caller passed in is never written to.
func withMeta(m mcp.Meta, key string, v any) mcp.Meta {
	out := make(mcp.Meta, len(m)+1)
	for k, x := range m {
		out[k] = x
	}
	out[key] = v
	return out
}
