package mcphandoff_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// TestStrictHandoffJSON: a JSON Handoff that the core parser refuses as
// bad-signature (step 1: the strict profile, no duplicate member names,
// valid UTF-8) is refused over MCP too, before the SDK decodes it into a
// map that would hide the fault, and the tool never runs.
func TestStrictHandoffJSON(t *testing.T) {
	e := newEnv(t, handoff.FormJWS, handoff.JSON)
	ctx := context.Background()
	h, _ := e.offer(e.dl, tester, "strict")
	offer := string(h.Offer.Octets)
	cases := []struct {
		name, handoff, check string
		core                 bool // the core parser refuses it too
	}{
		// draft data model, strict JSON: member names are unique.
		{"duplicate offer, the real one last", `{"offer":"junk.junk.junk","offer":"` + offer + `"}`, `duplicate object member name "offer"`, true},
		{"nested duplicate in an unknown member", `{"offer":"` + offer + `","x":{"a":1,"a":2}}`, `duplicate object member name "a"`, true},
		// strict JSON: valid UTF-8, also after unescaping.
		{"lone surrogate in an unknown member", `{"offer":"` + offer + `","x":"\ud800"}`, "surrogate", true},
		// The SDK cannot decode it into float64; refused with a clear
		// reason instead of a bare SDK error.
		{"number beyond float64 in an unknown member", `{"offer":"` + offer + `","x":1e400}`, "beyond float64 range", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := handoff.ParseHandoff([]byte(c.handoff), handoff.Limits{}); (err != nil) != c.core {
				t.Fatalf("core parser: %v", err)
			}
			runs := e.runs.Load()
			_, err := e.cs.CallTool(ctx, callCarrying("ok", json.RawMessage(c.handoff)))
			if err == nil || !strings.Contains(err.Error(), "not strict JSON") || !strings.Contains(err.Error(), c.check) {
				t.Fatalf("got %v, want a JSON-RPC error naming %q", err, c.check)
			}
			if e.runs.Load() != runs {
				t.Fatal("the tool ran")
			}
		})
	}
	// The session still works, and the clean Handoff goes through.
	r, err := e.hc.Call(ctx, e.cs, call("ok"), h)
	if err != nil || r.State != handoff.StateCompleted {
		t.Fatalf("clean call after refusals: %v %+v", err, r)
	}
	<-e.entered
}

// TestStrictHandlerBodies checks StrictHandler on raw HTTP bodies: which
// are passed on (octets unchanged), which refused, and how (decisions 40,
// 54: every refusal is a JSON-RPC error with code -32700).
func TestStrictHandlerBodies(t *testing.T) {
	var got []byte
	h := mcphandoff.StrictHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	k := mcphandoff.Key
	escaped := strings.Replace(k, "q", `\u0071`, 1)
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"` + k + `":{"offer":"a"}},"pad":"` + strings.Repeat("x", mcphandoff.MaxStrictBody) + `"}}`
	cases := []struct {
		name, body string
		status     int // 202: passed on
		id         string
	}{
		{"clean call with the key", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"` + k + `":{"offer":"a"}}}}`, 202, ""},
		{"duplicates without the key are not this wrapper's business", `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"a":1,"a":2}}`, 202, ""},
		// JSON-RPC 2.0 section 5.1: invalid JSON is a parse error
		// (-32700), whatever the body mentions (the SDK would answer a
		// bare HTTP 400); no id can be read, so HTTP 400.
		{"not JSON at all, without the key: parse error", `{"jsonrpc":`, 400, "null"},
		{"truncated, with the key: parse error", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"` + k + `":{"offer":"a"}}}`, 400, "null"},
		{"a valid request followed by more text: parse error", `{"jsonrpc":"2.0","id":7,"method":"tools/list"} {}`, 400, "null"},
		{"duplicate in a body with the key", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"` + k + `":{"offer":"a","offer":"b"}}}}`, 200, "7"},
		{"the key's name written with an escape", `{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"_meta":{"` + escaped + `":{"offer":"a","offer":"b"}}}}`, 200, `"x"`},
		{"a notification: no id, HTTP 400", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"_meta":{"` + k + `":"a"},"x":"\udc00"}}`, 400, "null"},
		{"too large to check", big, 400, "null"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got = nil
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body)))
			if w.Code != c.status {
				t.Fatalf("status %d, want %d: %s", w.Code, c.status, w.Body)
			}
			if c.status == 202 {
				if !bytes.Equal(got, []byte(c.body)) {
					t.Fatal("the body reached the handler changed")
				}
				return
			}
			if got != nil {
				t.Fatal("a refused body reached the handler")
			}
			var resp struct {
				ID    json.RawMessage
				Error struct {
					Code    int
					Message string
				}
			}
			if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatal(err)
			}
			if string(resp.ID) != c.id || resp.Error.Code != mcphandoff.CodeNotStrict || !strings.Contains(resp.Error.Message, "no tool ran") {
				t.Fatalf("response %s", w.Body)
			}
		})
	}
}

// FuzzStrictHandler: for any POST body StrictHandler never panics; a body
// it passes on reaches the handler with its octets unchanged, and one it
// refuses is answered with a JSON-RPC error (valid JSON) and carries Key.
func FuzzStrictHandler(f *testing.F) {
	k := mcphandoff.Key
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"` + k + `":{"offer":"a","offer":"b"}}}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"` + k + `":{"offer":"a","x":"\ud800"}}}}`))
	f.Add([]byte(`{"id":[1],"` + k + `":1e400}`))
	f.Add([]byte(`[{"` + k + `":{"a":1,"a":1}}]`))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var got []byte
		h := mcphandoff.StrictHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, _ = io.ReadAll(r.Body)
		}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
		if got != nil {
			if !bytes.Equal(got, body) {
				t.Fatal("the body changed on the way")
			}
			return
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("refusal is not JSON: %q", w.Body)
		}
	})
}
