package a2ahandoff_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
)

// roundTrip sends a message through JSON and back, as the SDK's
// transport does: metadata values come back as map[string]any, strings
// and float64.
func roundTrip(t testing.TB, m *a2a.Message) *a2a.Message {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var got a2a.Message
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// Handoff digest: "a party that forwards a signed handoff in a chain MUST
// forward these octets unchanged". Carried over A2A's JSON metadata, every
// element of a JSON or CBOR Handoff, offer and chain, keeps its octets, and
// the Handoff reads back to the same elements.
func TestCarriageKeepsOctets(t *testing.T) {
	w := newWorld(t)
	now := time.Now().Unix()
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			first := w.sign(t, assistantID, handoff.Offer{Hop: handoff.NewHop(), Dialog: "d",
				Iss: assistantID, Aud: plannerID, Iat: now, Exp: now + 60}, f.form)
			prev := first.Digest()
			next := w.sign(t, plannerID, handoff.Offer{Hop: handoff.NewHop(), Dialog: "d",
				Iss: plannerID, Aud: coderID, Iat: now, Exp: now + 60, Prev: &prev}, f.form)
			h := (&handoff.Handoff{Offer: first}).PassOn(next)
			m := carrying(t, a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: "x"}), h, f.enc)
			got := roundTrip(t, m)
			v := got.Metadata[a2ahandoff.Key]
			switch f.enc {
			case handoff.JSON:
				if _, ok := v.(map[string]any); !ok {
					t.Fatalf("a JSON Handoff travels as a %T, want an object", v)
				}
			case handoff.CBOR:
				if _, ok := v.(string); !ok {
					t.Fatalf("a CBOR Handoff travels as a %T, want base64url text", v)
				}
			}
			if len(got.Extensions) != 1 || got.Extensions[0] != a2ahandoff.URI {
				t.Errorf("extensions %v", got.Extensions)
			}
			b, err := a2ahandoff.HandoffFrom(got)
			if err != nil {
				t.Fatal(err)
			}
			if handoff.IsJSON(b) != (f.enc == handoff.JSON) {
				t.Fatalf("the Handoff arrived in the other encoding")
			}
			back, err := handoff.ParseHandoff(b, handoff.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.Offer.Octets, next.Octets) || len(back.Chain) != 1 || !bytes.Equal(back.Chain[0].Octets, first.Octets) {
				t.Fatal("element octets changed in carriage")
			}
			if f.enc == handoff.CBOR {
				orig, _ := h.Encode(handoff.CBOR)
				if !bytes.Equal(orig, b) {
					t.Fatal("the CBOR Handoff's octets changed in carriage")
				}
			}

			// A status, as the draft's JSON carries an element.
			st, err := w.signers[plannerID].SignStatus(&handoff.Status{Offer: next.Digest(), Iss: coderID, Aud: plannerID,
				Iat: now, State: handoff.StateAccepted}, f.form)
			if err != nil {
				t.Fatal(err)
			}
			reply := a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "ok"})
			a2ahandoff.AttachStatus(reply, st)
			sts, errs := a2ahandoff.Statuses(roundTrip(t, reply))
			if len(errs) != 0 || len(sts) != 1 || !bytes.Equal(sts[0].Octets, st.Octets) || sts[0].Form != st.Form {
				t.Fatalf("status carried as %v %v", sts, errs)
			}
		})
	}
}

// Values under the key that are not a Handoff or a status are refused
// with an error naming the key and what was found (D3), never a panic.
func TestCarriageRefusesOtherValues(t *testing.T) {
	handoffs := []struct {
		name  string
		value any
		want  string
	}{
		{"number", 1.5, "is a number"},
		{"boolean", true, "is a boolean"},
		{"array", []any{}, "is a array"},
		{"null", nil, "is null"},
		{"padded base64url", "oWVvZmZlcg==", "not base64url"},
		{"base64url of JSON", base64.RawURLEncoding.EncodeToString([]byte(`{"offer":"a.b.c"}`)), "JSON Handoff travels as an object"},
		{"empty text", "", "empty CBOR Handoff"},
	}
	for _, tc := range handoffs {
		t.Run("Handoff "+tc.name, func(t *testing.T) {
			_, err := a2ahandoff.HandoffFrom(&a2a.Message{Metadata: map[string]any{a2ahandoff.Key: tc.value}})
			// The message names the key and what was found there: what a
			// person reads first (a behaviour, checked as such).
			if !errors.Is(err, a2ahandoff.ErrMetadata) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), a2ahandoff.Key) {
				t.Fatalf("error %v, want ErrMetadata naming the key and %q", err, tc.want)
			}
		})
	}
	if _, err := a2ahandoff.HandoffFrom(&a2a.Message{}); err != a2ahandoff.ErrNoHandoff {
		t.Fatalf("no Handoff: %v", err)
	}
	statuses := []struct {
		name  string
		value any
		want  string
	}{
		{"object", map[string]any{}, "a status is text"},
		{"empty", "", "a status of 0 characters"},
		{"spaces", "a.b c", "neither base64url nor a JWS period"},
		{"padding", "abc=", "neither base64url nor a JWS period"},
		{"bad base64url", "a", "neither a compact JWS nor base64url"},
	}
	for _, tc := range statuses {
		t.Run("status "+tc.name, func(t *testing.T) {
			_, ok, err := a2ahandoff.StatusFrom(map[string]any{a2ahandoff.Key: tc.value})
			if !ok || !errors.Is(err, a2ahandoff.ErrMetadata) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ok=%v error %v, want ErrMetadata saying %q", ok, err, tc.want)
			}
		})
	}
}

// FuzzHandoffFrom: any metadata value is either refused with an error or
// yields octets; never a panic. Strings are tried as CBOR carriage, and
// JSON text as the object it decodes to.
func FuzzHandoffFrom(f *testing.F) {
	f.Add(`{"offer":"a.b.c"}`)
	f.Add(`{"offer":"oWE","chain":["x.y.z"],"extra":1e400}`)
	f.Add(`"oWVvZmZlcmNhLmIuYw"`)
	f.Add(`[1,2]`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			v = s
		}
		b, err := a2ahandoff.HandoffFrom(&a2a.Message{Metadata: map[string]any{a2ahandoff.Key: v}})
		if err == nil && len(b) == 0 {
			t.Fatal("no error and no octets")
		}
		if err == nil {
			_, _ = handoff.ParseHandoff(b, handoff.Limits{})
		}
	})
}

// FuzzStatusFrom: a status value is a signed element in text form or an
// error; never a panic, and never an element of FormInvalid.
func FuzzStatusFrom(f *testing.F) {
	f.Add("a.b.c")
	f.Add("0oRDoQEmoFhAQ")
	f.Add("")
	f.Add("a..b")
	f.Fuzz(func(t *testing.T, s string) {
		el, ok, err := a2ahandoff.StatusFrom(map[string]any{a2ahandoff.Key: s})
		if !ok {
			t.Fatal("the key was not found")
		}
		if err == nil && el.Form == handoff.FormInvalid {
			t.Fatal("an invalid element passed")
		}
	})
}
