package a2ahandoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-json-experiment/json/jsontext"
)

// MaxStrictBody bounds the request body StrictHandler reads to check it.
// A larger body is refused (fail safe: it is not passed on unchecked).
const MaxStrictBody = 8 << 20

// StrictHandler checks JSON-RPC request bodies that carry something under
// Key before next (a2asrv.NewJSONRPCHandler) sees them: the body must be
// strict JSON, as the draft's JSON Handoff is read (D3): no duplicate
// member names in any object at any depth, valid UTF-8, no escaped lone
// surrogate (\ud800). Otherwise it answers a JSON-RPC "invalid request"
// error (-32600) naming the check, and no work is taken; the delegator's offer is
// bad-signature (D3) and gets no status.
//
// Why it is needed: a2a-go decodes metadata into map[string]any, where a
// duplicate member is silently resolved (the last wins) and a lone
// surrogate becomes U+FFFD; the Executor sees only the result and cannot
// tell. Put it in front of the JSON-RPC handler:
//
//	http.Handle("/", a2ahandoff.StrictHandler(a2asrv.NewJSONRPCHandler(h)))
//
// A body that is not valid JSON at all gets a JSON-RPC "parse error"
// (-32700), whatever it mentions; a valid JSON body that does not carry
// Key passes unchecked.
//
// With a nil next, every request is answered 500 Internal Server Error:
// there is nothing to pass it to.
func StrictHandler(next http.Handler) http.Handler {
	if next == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "a2ahandoff: StrictHandler was given no handler to pass requests to", http.StatusInternalServerError)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxStrictBody+1))
		r.Body.Close()
		if err != nil {
			http.Error(w, "a2ahandoff: reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(b) > MaxStrictBody {
			rpcError(w, nil, codeInvalidRequest, fmt.Sprintf("a2ahandoff: the request body exceeds %d bytes and cannot be checked", MaxStrictBody))
			return
		}
		if err := strictJSON(b); err != nil {
			if !json.Valid(b) {
				// Not JSON at all: a JSON-RPC parse error, whatever the
				// text mentions (as the SDK answers one, and as
				// mcphandoff does).
				rpcError(w, nil, codeParseError, "a2ahandoff: the request body is not valid JSON: "+err.Error())
				return
			}
			if carriesKey(b) {
				rpcError(w, b, codeInvalidRequest, "a2ahandoff: the request carries "+Key+" and is not strict JSON (D3): "+err.Error())
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		next.ServeHTTP(w, r)
	})
}

// strictJSON checks that b is one JSON value with unique member names in
// every object and valid UTF-8 (jsontext's defaults: a duplicate name, an
// invalid UTF-8 sequence and an escaped lone surrogate are errors naming
// where they are).
func strictJSON(b []byte) error {
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(false), jsontext.AllowInvalidUTF8(false))
	if err := d.SkipValue(); err != nil {
		return err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return errors.New("text after the JSON value")
	}
	return nil
}

// carriesKey reports whether a member named Key (after unescaping) occurs
// anywhere in b, read leniently; a body that cannot be read at all is
// left to the SDK.
func carriesKey(b []byte) bool {
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for {
		tok, err := d.ReadToken()
		if err != nil {
			// Not readable even leniently: fail safe when the key's text
			// shows up at all.
			return err != io.EOF && bytes.Contains(b, []byte("agent-handoff"))
		}
		if tok.Kind() == '"' && tok.String() == Key {
			return true
		}
	}
}

// JSON-RPC 2.0 error codes StrictHandler answers with.
const (
	codeParseError     = -32700 // the body is not valid JSON
	codeInvalidRequest = -32600 // valid JSON, but not strict (or too large to check)
)

// rpcError answers a JSON-RPC 2.0 error with code for the body's id (null
// when it cannot be read).
func rpcError(w http.ResponseWriter, body []byte, code int, msg string) {
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	id := json.RawMessage("null")
	if body != nil && json.Unmarshal(body, &req) == nil && len(req.ID) > 0 && jsontext.Value(req.ID).IsValid() {
		id = req.ID
	}
	out, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"error":   map[string]any{"code": code, "message": msg},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}
