package a2ahandoff_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/a2ahandoff"
)

// postAsAssistant POSTs a raw JSON-RPC body to url, authenticated as the
// assistant, and returns the reply's body: these bodies are written by
// hand, as no SDK client would send them.
func postAsAssistant(t testing.TB, url, body string) []byte {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer token-of-"+assistantID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// A JSON Handoff is read strictly (D3: a Handoff that is not strict JSON
// is bad-signature): StrictHandler refuses, before the SDK decodes the
// metadata into a map (where the last duplicate would win and a lone
// surrogate would become U+FFFD), any request carrying the key whose body
// has a duplicate member name at any depth, invalid UTF-8 or an escaped
// lone surrogate. No work is taken and no hop is recorded.
func TestStrictHandlerRefusesLaxJSON(t *testing.T) {
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	el := signOffer(t, w, "ctx-strict")
	offer := `"` + string(el.Octets) + `"`
	cases := []struct {
		name, handoff, check string
		coreRefuses          bool // the core parser refuses the Handoff itself
	}{
		{"duplicate offer member, the signed one last (D3)", `{"offer":"junk.junk.junk","offer":` + offer + `}`, "duplicate", true},
		{"duplicate member nested in an unknown member (D3)", `{"offer":` + offer + `,"x":{"a":1,"a":2}}`, "duplicate", true},
		{"escaped lone surrogate (D3)", `{"offer":` + offer + `,"x":"\ud800"}`, "surrogate", true},
		{"invalid UTF-8 (D3)", `{"offer":` + offer + `,"x":"` + "\xff" + `"}`, "UTF-8", true},
		{"key written with escapes, duplicate offer (D3)", `{"offer":"junk.junk.junk","offer":` + offer + `}`, "duplicate", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := handoff.ParseHandoff([]byte(tc.handoff), handoff.Limits{}); (err != nil) != tc.coreRefuses {
				t.Fatalf("core parser: %v", err)
			}
			key := a2ahandoff.Key
			if strings.Contains(tc.name, "escapes") {
				key = strings.ReplaceAll(key, "-", `\u002d`)
			}
			body := `{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"kind":"message","messageId":"m` + string(rune('0'+i)) +
				`","role":"user","contextId":"ctx-strict","parts":[{"kind":"text","text":"complete"}],"extensions":["` + a2ahandoff.URI +
				`"],"metadata":{"` + key + `":` + tc.handoff + `}}}}`
			b := postAsAssistant(t, srv.url, body)
			var out struct {
				ID     json.RawMessage
				Result json.RawMessage
				Error  *struct {
					Code    int
					Message string
				}
			}
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("reply %q: %v", b, err)
			}
			if out.Error == nil || out.Error.Code != -32600 || out.Result != nil {
				t.Fatalf("reply %s, want a JSON-RPC invalid request error", b)
			}
			if string(out.ID) != "7" {
				t.Errorf("error for id %s, want 7", out.ID)
			}
			if !strings.Contains(out.Error.Message, tc.check) || !strings.Contains(out.Error.Message, "D3") {
				t.Errorf("error %q does not name the check %q", out.Error.Message, tc.check)
			}
			if n := srv.agent.runs.Load(); n != 0 {
				t.Fatalf("the agent ran %d times", n)
			}
			if _, err := srv.st.Get(context.Background(), assistantID, hopOf(t, el).Hop); err == nil {
				t.Fatal("the hop was recorded")
			}
		})
	}

	t.Run("a strict Handoff passes", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":8,"method":"message/send","params":{"message":{"kind":"message","messageId":"ok","role":"user","contextId":"ctx-strict","parts":[{"kind":"text","text":"complete"}],"metadata":{"` +
			a2ahandoff.Key + `":{"offer":` + offer + `}}}}}`
		b := postAsAssistant(t, srv.url, body)
		if !strings.Contains(string(b), `"state":"completed"`) {
			t.Fatalf("reply %s, want a completed task", b)
		}

		// Composition with NewHandler: StrictHandler is outermost, so a
		// lax Handoff around the recorded offer, re-sent into its task,
		// is refused (D3) before the record could answer it; the strict
		// one is answered from the record.
		var done struct{ Result struct{ ID string } }
		if err := json.Unmarshal(b, &done); err != nil || done.Result.ID == "" {
			t.Fatalf("reply %s: no task id (%v)", b, err)
		}
		send := func(id, h string) []byte {
			body := `{"jsonrpc":"2.0","id":9,"method":"message/send","params":{"message":{"kind":"message","messageId":"` + id + `","role":"user","contextId":"ctx-strict","taskId":"` + done.Result.ID +
				`","parts":[{"kind":"text","text":"complete"}],"metadata":{"` + a2ahandoff.Key + `":` + h + `}}}}`
			return postAsAssistant(t, srv.url, body)
		}
		if b := send("again-lax", `{"offer":`+offer+`,"offer":`+offer+`}`); !strings.Contains(string(b), `"code":-32600`) || strings.Contains(string(b), "result") {
			t.Fatalf("lax retransmission: reply %s, want a JSON-RPC invalid request error", b)
		}
		if b := send("again-strict", `{"offer":`+offer+`}`); !strings.Contains(string(b), "answered from the record") || !strings.Contains(string(b), a2ahandoff.Key) {
			t.Fatalf("strict retransmission: reply %s, want a Message with the status from the record", b)
		}
		if n := srv.agent.runs.Load(); n != 1 {
			t.Fatalf("the agent ran %d times, want once", n)
		}
	})
}

// A request body that is not valid JSON is answered with a JSON-RPC
// "parse error" (-32700, JSON-RPC 2.0 section 5.1), whatever its text
// mentions: with or without the handoff key, truncated or followed by
// more text. No work is taken and no hop is recorded.
func TestInvalidJSONIsParseError(t *testing.T) {
	w := newWorld(t)
	srv := w.serve(t, plannerID, memStore(), handoff.FormJWS, nil)
	el := signOffer(t, w, "ctx-parse")
	whole := `{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"kind":"message","messageId":"p1","role":"user","contextId":"ctx-parse","parts":[{"kind":"text","text":"complete"}],"metadata":{"` +
		a2ahandoff.Key + `":{"offer":"` + string(el.Octets) + `"}}}}}`
	for _, tc := range []struct{ name, body string }{
		{"truncated, mentioning the handoff key", whole[:len(whole)-3]},
		{"truncated, not mentioning it", `{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":`},
		{"a valid request followed by more text", whole + ` {"more":1}`},
		{"not JSON at all", `agent-handoff, please`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := postAsAssistant(t, srv.url, tc.body)
			var out struct {
				Result json.RawMessage
				Error  *struct{ Code int }
			}
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("reply %q: %v", b, err)
			}
			if out.Error == nil || out.Error.Code != -32700 || out.Result != nil {
				t.Fatalf("reply %s, want a JSON-RPC parse error (-32700)", b)
			}
			if n := srv.agent.runs.Load(); n != 0 {
				t.Fatalf("the agent ran %d times", n)
			}
			if _, err := srv.st.Get(context.Background(), assistantID, hopOf(t, el).Hop); err == nil {
				t.Fatal("the hop was recorded")
			}
		})
	}
}
