package mcphandoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxStrictBody bounds the POST body StrictHandler reads to check it. A
// larger body that carries Key cannot be checked and is refused; one that
// does not is passed on untouched.
const MaxStrictBody = 8 << 20

// CodeNotStrict is the JSON-RPC error code of a request StrictHandler
// refuses: the JSON-RPC "parse error" code, since the body is not JSON in
// the strict profile the handoff's data model requires.
const CodeNotStrict = -32700

// StrictHandler wraps an MCP HTTP handler (mcp.NewStreamableHTTPHandler) so
// that a POST body carrying Key is strict JSON before the SDK sees it: no
// duplicate member names at any level, valid UTF-8 (no lone surrogates in
// escapes either), nesting at most 10,000 (jsontext's bound; the SDK's
// own decoder refuses more than 1,000), and no number beyond float64 range
// (the SDK decodes _meta into float64 and would fail the whole request). A
// body that breaks any of these is answered with a JSON-RPC error
// (CodeNotStrict) whose message names the check, and the SDK never sees it:
// no tool runs, nothing is recorded. Other bodies, and every body that
// passes, reach h with their octets unchanged.
//
// Why a wrapper: the SDK decodes _meta into map[string]any, where a second
// "offer" member silently replaces the first, nested duplicates vanish and
// a lone surrogate becomes U+FFFD. Without this wrapper the middleware
// sees only that decoded map, so it cannot tell such a Handoff from a
// clean one; the core parser (handoff.ParseHandoff) refuses all of them as
// bad-signature (step 1), and this wrapper holds MCP to the same rule.
//
// A POST body that is not valid JSON at all is answered with the same
// JSON-RPC parse error (-32700), whatever it mentions, where the SDK would
// answer a bare HTTP 400.
//
// "Carrying Key" is judged on a body that fails the strict check: it holds
// Key's octets, or decodes leniently to a member named Key (its name
// written with escapes), or cannot be read at all past MaxStrictBody while
// holding Key's octets. Fail safe: in doubt, refused.
//
// A nil h gives a handler that answers every request with HTTP 500.
func StrictHandler(h http.Handler) http.Handler {
	if h == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "mcphandoff: StrictHandler wraps a nil handler", http.StatusInternalServerError)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			h.ServeHTTP(w, r)
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxStrictBody+1))
		rest := r.Body
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), rest), rest}
		if err != nil {
			// The SDK would fail reading it too; let it answer.
			h.ServeHTTP(w, r)
			return
		}
		if len(b) > MaxStrictBody {
			if bytes.Contains(b, []byte(Key)) {
				refuse(w, nil, fmt.Sprintf("the request body is over %d bytes and carries %q: too large to check", MaxStrictBody, Key))
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		why := strictCheck(b)
		if why == "" {
			h.ServeHTTP(w, r)
			return
		}
		if !json.Valid(b) {
			// Not JSON at all: a JSON-RPC parse error, whatever the body
			// mentions (the SDK would answer a bare HTTP 400), as
			// a2ahandoff answers one.
			refuse(w, nil, "the request body is not valid JSON: "+why)
			return
		}
		id, carries := leniently(b)
		if !carries {
			h.ServeHTTP(w, r)
			return
		}
		refuse(w, id, "the body carries the agent handoff (_meta "+strconv.Quote(Key)+") but is not strict JSON: "+why)
	})
}

// strictCheck returns why b is not strict JSON, "" when it is. It reads
// b as a stream of tokens (jsontext: valid UTF-8 with no escaped lone
// surrogate, nesting at most 10,000) and builds no tree of it. Duplicate
// member names are found here, not by jsontext, which would keep every
// name of an object: each object keeps one 64-bit keyed hash per member
// name (hash/maphash, seeded per process, so no sender can choose names
// that collide), about 10 B per member where a member takes 4 octets at
// least. A body up to MaxStrictBody thus costs a few octets of memory per
// octet, whatever it holds (TestStrictCheckBounded).
func strictCheck(b []byte) string {
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(false))
	type level struct {
		object   bool
		wantName bool                // the next token in this object is a member name
		names    map[uint64]struct{} // the object's member names, hashed
	}
	var stack []level
	values := 0
	for {
		tok, err := d.ReadToken()
		if err == io.EOF {
			if values == 0 {
				return "no JSON value"
			}
			return ""
		}
		if err != nil {
			return err.Error()
		}
		if values > 0 {
			return "text after the JSON value"
		}
		k := tok.Kind()
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantName && k == '"' {
			top := &stack[n-1]
			name := tok.String()
			h := maphash.String(strictSeed, name)
			if _, dup := top.names[h]; dup {
				return fmt.Sprintf("duplicate object member name %s at %s", quoteShort(name), d.StackPointer())
			}
			if top.names == nil {
				top.names = map[uint64]struct{}{}
			}
			top.names[h] = struct{}{}
			top.wantName = false
			continue
		}
		switch k {
		case '{':
			stack = append(stack, level{object: true, wantName: true})
			continue
		case '[':
			stack = append(stack, level{})
			continue
		case '}', ']':
			stack = stack[:len(stack)-1]
		case '0':
			// The strict parser keeps a number as written; the SDK
			// decodes _meta into float64 and would fail the request.
			if f, err := strconv.ParseFloat(tok.String(), 64); err != nil && !errors.Is(err, strconv.ErrRange) || math.IsInf(f, 0) {
				return fmt.Sprintf("number %s at %s is beyond float64 range", quoteShort(tok.String()), d.StackPointer())
			}
		}
		// A value ended (a scalar, or the container just closed).
		if n := len(stack); n == 0 {
			values++
		} else if stack[n-1].object {
			stack[n-1].wantName = true
		}
	}
}

// maxWhy bounds the reason a refusal sends back.
const maxWhy = 1024

// strictSeed keys strictCheck's hashes of member names.
var strictSeed = maphash.MakeSeed()

// quoteShort quotes s for an error message, cut to 64 bytes: the message
// goes back to the sender, and a name or number may be megabytes long.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// leniently reads b (valid JSON) as the SDK would (last duplicate wins,
// invalid UTF-8 replaced) and reports the JSON-RPC id and whether any
// object in it has a member named Key, or b holds Key's octets. It reads
// tokens and builds no tree of b.
func leniently(b []byte) (json.RawMessage, bool) {
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(b, &msg)
	if bytes.Contains(b, []byte(Key)) {
		return msg.ID, true
	}
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for {
		tok, err := d.ReadToken()
		if err != nil {
			return msg.ID, false
		}
		if tok.Kind() == '"' && tok.String() == Key {
			// A member name or a string value: either way the body
			// names the key, and in doubt it is refused (fail safe).
			return msg.ID, true
		}
	}
}

// refuse answers a JSON-RPC error. With the request's id it is a JSON-RPC
// response (HTTP 200), which the SDK's client delivers to the call; without
// one (a notification, a batch, an unreadable id) HTTP 400.
func refuse(w http.ResponseWriter, id json.RawMessage, why string) {
	if len(why) > maxWhy {
		// A decoder's error may quote the offending text at length.
		why = strings.ToValidUTF8(why[:maxWhy], "") + "..."
	}
	status := http.StatusOK
	if len(id) == 0 || bytes.Equal(id, []byte("null")) {
		id, status = json.RawMessage("null"), http.StatusBadRequest
	}
	body, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{CodeNotStrict, "mcphandoff: request refused, no tool ran: " + why}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}
