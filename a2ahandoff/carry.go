package a2ahandoff

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff"
)

// URI identifies the extension (draft "Carrying the Element", A2A). It is
// also the metadata key under which the Handoff and the statuses travel,
// and the value listed in Message.extensions and in the A2A-Extensions
// service parameter (HTTP header X-A2A-Extensions). Nothing is fetched
// from it.
const URI = "https://quantumlearningmachines.com/a2a/ext/agent-handoff/v1"

// Key is the metadata key: the extension URI itself.
const Key = URI

// CardExtension is the entry for an AgentCard's capabilities.extensions.
// required says the agent takes work only with a Handoff (see
// ServerConfig.AllowPlain).
func CardExtension(required bool) a2a.AgentExtension {
	return a2a.AgentExtension{
		URI:         URI,
		Required:    required,
		Description: "agent handoff context (draft-agent-handoff-01): a signed offer in Message.metadata, signed statuses in replies",
	}
}

// ErrNoHandoff: the message carries nothing under Key.
var ErrNoHandoff = errors.New("a2ahandoff: the message carries no Handoff under " + Key)

// ErrMetadata is wrapped by the error of a value under Key that is not a
// Handoff (or, for StatusFrom, a status) as this binding carries one: the
// peer's fault, D3. The message says what was found.
var ErrMetadata = errors.New("a2ahandoff: malformed metadata value")

func metadataErrorf(format string, a ...any) error {
	return kindError{fmt.Errorf(format, a...), ErrMetadata}
}

// ErrNotSent: this client has not sent the hop (its message is kept in
// memory only, so after a restart, too).
var ErrNotSent = errors.New("a2ahandoff: hop not sent by this client")

// ErrOutcomeUnknown, wrapped in the error an agent's Execute returns,
// says that the agent cannot tell what its work took effect (a proxy that
// lost contact with the agent behind it, say): the hop stays "accepted"
// and is flagged to the operator, and no "failed" is signed, even with
// ServerConfig.NoEffectUnlessCompleted. A Declare made before still wins.
var ErrOutcomeUnknown = errors.New("a2ahandoff: the outcome of the work is not known")

// AttachHandoff puts h into m.Metadata under Key and lists URI in
// m.Extensions. enc chooses how the Handoff travels (see the package
// documentation): handoff.JSON as a JSON object whose signed elements are
// strings, handoff.CBOR as base64url text of the CBOR Handoff's octets.
// The signed elements' octets are never changed.
func AttachHandoff(m *a2a.Message, h *handoff.Handoff, enc handoff.Encoding) error {
	if m == nil {
		return invalid("a2ahandoff: AttachHandoff needs the message to carry the Handoff, got nil")
	}
	v, err := handoffValue(h, enc)
	if err != nil {
		return err
	}
	m.SetMeta(Key, v)
	m.Extensions = withURI(m.Extensions)
	return nil
}

// handoffValue is the metadata value carrying h.
func handoffValue(h *handoff.Handoff, enc handoff.Encoding) (any, error) {
	if h == nil {
		return nil, invalid("a2ahandoff: no Handoff to carry: got nil")
	}
	b, err := h.Encode(enc)
	if err != nil {
		return nil, fmt.Errorf("a2ahandoff: encoding the Handoff: %w", err)
	}
	if enc == handoff.CBOR {
		return base64.RawURLEncoding.EncodeToString(b), nil
	}
	// The JSON Handoff as the object it is. Numbers (only in unknown
	// members) keep their text through json.Number.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("a2ahandoff: the JSON Handoff does not decode: %w", err)
	}
	return v, nil
}

// HandoffFrom returns the Handoff carried in m as octets for
// delegate.Delegate.Receive (JSON or CBOR, told apart by content). It
// fails with ErrNoHandoff when m carries none, and with a specific error
// when the value under Key is neither a JSON object nor base64url text of
// a CBOR Handoff: such a message is malformed (D3: bad-signature).
func HandoffFrom(m *a2a.Message) ([]byte, error) {
	if m == nil {
		return nil, ErrNoHandoff
	}
	v, ok := m.Metadata[Key]
	if !ok {
		return nil, ErrNoHandoff
	}
	return handoffOctets(v)
}

// handoffOctets turns the metadata value back into Handoff octets.
//
// The JSON Handoff is not signed (its elements are), so it is written
// again from the decoded object: every element is a JSON string and comes
// back with the same characters, hence the same octets and digest. A CBOR
// Handoff is carried as base64url text of its exact octets; that text must
// not decode to a JSON Handoff, which travels as an object.
func handoffOctets(v any) ([]byte, error) {
	switch x := v.(type) {
	case map[string]any:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(x); err != nil {
			return nil, metadataErrorf("a2ahandoff: metadata %s: the Handoff object cannot be written as JSON: %w", Key, err)
		}
		return bytes.TrimRight(buf.Bytes(), "\n"), nil
	case string:
		b, err := base64.RawURLEncoding.Strict().DecodeString(x)
		if err != nil {
			return nil, metadataErrorf("a2ahandoff: metadata %s: text is base64url of a CBOR Handoff, and this is not base64url without padding: %w", Key, err)
		}
		if len(b) == 0 {
			return nil, metadataErrorf("a2ahandoff: metadata %s: empty CBOR Handoff", Key)
		}
		if handoff.IsJSON(b) {
			return nil, metadataErrorf("a2ahandoff: metadata %s: base64url text decodes to JSON; a JSON Handoff travels as an object", Key)
		}
		return b, nil
	case nil:
		return nil, metadataErrorf("a2ahandoff: metadata %s is null, not a Handoff", Key)
	default:
		return nil, metadataErrorf("a2ahandoff: metadata %s is a %s; a Handoff is a JSON object (or base64url text of a CBOR Handoff)", Key, jsonType(v))
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case bool:
		return "boolean"
	case float64, json.Number, int, int64:
		return "number"
	case []any:
		return "array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// AttachStatus puts a signed status into m.Metadata under Key, as the
// draft's JSON carries an element (Element.Text): the compact JWS, or the
// COSE_Sign1 in base64url. URI is listed in m.Extensions.
//
// A nil m, or a zero st (no octets: nothing signed), is left alone and
// nothing is attached: an empty status under Key would only be refused by
// the receiver.
func AttachStatus(m *a2a.Message, st handoff.Element) {
	if m == nil || len(st.Octets) == 0 {
		return
	}
	m.SetMeta(Key, st.Text())
	m.Extensions = withURI(m.Extensions)
}

// StatusFrom reads the signed status under Key in a metadata map (of a
// reply Message, a TaskStatus.message, or a Cancel Task request). ok is
// false when there is none; an error says why the value is not a signed
// element in text form. The status is not verified here.
func StatusFrom(meta map[string]any) (st handoff.Element, ok bool, err error) {
	v, ok := meta[Key]
	if !ok {
		return handoff.Element{}, false, nil
	}
	st, err = statusValue(v)
	return st, true, err
}

// maxStatusText bounds a status's text before it is looked at; the
// element bound proper (64 KiB of octets) is checked on verification.
const maxStatusText = 128 << 10

func statusValue(v any) (handoff.Element, error) {
	s, ok := v.(string)
	if !ok {
		return handoff.Element{}, metadataErrorf("a2ahandoff: metadata %s is a %s; a status is text (compact JWS or base64url COSE_Sign1)", Key, jsonType(v))
	}
	if s == "" || len(s) > maxStatusText {
		return handoff.Element{}, metadataErrorf("a2ahandoff: metadata %s: a status of %d characters", Key, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return handoff.Element{}, metadataErrorf("a2ahandoff: metadata %s: character %q at %d is neither base64url nor a JWS period", Key, c, i)
		}
	}
	el := handoff.ParseElementText(s)
	if el.Form == handoff.FormInvalid {
		return handoff.Element{}, metadataErrorf("a2ahandoff: metadata %s: text is neither a compact JWS nor base64url", Key)
	}
	return el, nil
}

// Statuses collects the signed statuses a reply carries, in the order
// they were sent: for a Message, its metadata; for a Task, the agent's
// messages in its history (earlier statuses, such as "accepted" on the
// way to "completed") and then its TaskStatus.message. Identical octets
// are listed once. Values under Key that are not statuses are reported in
// errs and skipped; the request's own Handoff (a user message) is not a
// status and is not looked at. A nil result (or a nil *a2a.Task or
// *a2a.Message in it) carries none.
func Statuses(res a2a.SendMessageResult) (sts []handoff.Element, errs []error) {
	add := func(m *a2a.Message) {
		if m == nil || m.Role == a2a.MessageRoleUser {
			return
		}
		st, ok, err := StatusFrom(m.Metadata)
		if !ok {
			return
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("message %s: %w", m.ID, err))
			return
		}
		for _, s := range sts {
			if bytes.Equal(s.Octets, st.Octets) {
				return
			}
		}
		sts = append(sts, st)
	}
	switch r := res.(type) {
	case *a2a.Message:
		add(r)
	case *a2a.Task:
		if r == nil {
			break
		}
		for _, m := range r.History {
			add(m)
		}
		add(r.Status.Message)
	}
	return sts, errs
}

func withURI(exts []string) []string {
	if slices.Contains(exts, URI) {
		return exts
	}
	return append(slices.Clone(exts), URI)
}
