package gateway

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/mcphandoff"
)

// The gateway reads each JSON-RPC message posted to an MCP route once,
// strictly, and acts on what it read; the upstream reads the same octets
// with its own decoder. Where two decoders could read one body two ways,
// a check here could pass one message while the upstream runs another:
// encoding/json matches member names case-insensitively and keeps the
// last of two equal names, the go-sdk, Python and TypeScript servers
// match exactly, and some keep the first. So a body with two members of
// one name (at any depth), invalid UTF-8, or a member whose name differs
// only in case from one the gateway reads ("METHOD", "_META", "PARAMS")
// is refused before anything is decided (decision 83), and request ids
// are compared by value, as servers compare them.

// rpcMessage is the part of a JSON-RPC message the gateway reads.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// rpcParams is the part of a request's params the gateway reads.
type rpcParams struct {
	Name      string                    // tools/call: the tool
	RequestID json.RawMessage           // notifications/cancelled: the request
	Meta      map[string]jsontext.Value // _meta
	obj       map[string]jsontext.Value // every member, as written
}

// carries returns the value under _meta mcphandoff.Key, if there is one.
func (p rpcParams) carries() (jsontext.Value, bool) {
	v, ok := p.Meta[mcphandoff.Key]
	return v, ok
}

// readRPC reads one JSON-RPC message (a request, a notification or a
// response) strictly; top holds its members as written.
func readRPC(b []byte) (msg rpcMessage, top map[string]jsontext.Value, err error) {
	top, err = readObject(b, "the JSON-RPC message", "jsonrpc", "id", "method", "params", "result", "error")
	if err != nil {
		return rpcMessage{}, nil, err
	}
	msg.ID = json.RawMessage(top["id"])
	if v, ok := top["method"]; ok {
		if err := jsonv2.Unmarshal(v, &msg.Method); err != nil {
			return rpcMessage{}, nil, fmt.Errorf("the JSON-RPC message's \"method\" is %s, not a string", shortJSON(json.RawMessage(v)))
		}
	}
	msg.Params = json.RawMessage(top["params"])
	msg.Result = json.RawMessage(top["result"])
	if v, ok := top["error"]; ok && v.Kind() != 'n' {
		msg.Error = new(rpcError)
		if err := jsonv2.Unmarshal(v, msg.Error); err != nil {
			return rpcMessage{}, nil, fmt.Errorf("the JSON-RPC message's \"error\" is not an error object: %v", err)
		}
	}
	return msg, top, nil
}

// readParams reads a request's params strictly (none: all zero).
func readParams(v json.RawMessage) (rpcParams, error) {
	var p rpcParams
	if len(v) == 0 || string(v) == "null" {
		return p, nil
	}
	obj, err := readObject(v, `the request's "params"`, "name", "arguments", "_meta", "requestId", "reason")
	if err != nil {
		return p, err
	}
	p.obj = obj
	if n, ok := obj["name"]; ok && n.Kind() == '"' {
		_ = jsonv2.Unmarshal(n, &p.Name)
	}
	p.RequestID = json.RawMessage(obj["requestId"])
	if mv, ok := obj["_meta"]; ok && mv.Kind() != 'n' {
		if p.Meta, err = readObject(mv, `"params._meta"`, mcphandoff.Key); err != nil {
			return p, err
		}
	}
	return p, nil
}

// readObject reads b as a JSON object (null: none) with unique member
// names, valid UTF-8 and no member whose name differs only in case from
// one of names.
func readObject(b []byte, what string, names ...string) (map[string]jsontext.Value, error) {
	var obj map[string]jsontext.Value
	if err := jsonv2.Unmarshal(b, &obj); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object with unique member names and valid UTF-8: %v", what, err)
	}
	for k := range obj {
		for _, n := range names {
			if k != n && strings.EqualFold(k, n) {
				return nil, fmt.Errorf("%s has a member %q, which a case-insensitive reader takes for %q: ambiguous", what, k, n)
			}
		}
	}
	return obj, nil
}

// idKey is a request id's value, the same however it is written: a
// string's text, an integer's decimal digits (7, 7.0 and 7e0 alike, and
// the string "7", which lax servers take for 7). ok is false for any
// other id: null, a fraction, an integer of 2^53 or more in magnitude
// (where float64 readers merge neighbours), an object or an array.
func idKey(v json.RawMessage) (key string, ok bool) {
	if len(v) == 0 {
		return "", false
	}
	switch c := v[0]; {
	case c == '"':
		var s string
		if jsonv2.Unmarshal(v, &s) != nil {
			return "", false
		}
		return s, true
	case c == '-' || c >= '0' && c <= '9':
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			return "", false
		}
		return strconv.FormatInt(int64(f), 10), true
	}
	return "", false
}

// withoutHandoff is the message top (a tools/call whose params are p)
// without the Handoff in its _meta: the upstream takes work, not the
// gateway's checks.
func (p rpcParams) withoutHandoff(top map[string]jsontext.Value) ([]byte, error) {
	meta := maps.Clone(p.Meta)
	delete(meta, mcphandoff.Key)
	params := maps.Clone(p.obj)
	if len(meta) == 0 {
		delete(params, "_meta")
	} else {
		b, err := jsonv2.Marshal(meta, jsonv2.Deterministic(true))
		if err != nil {
			return nil, err
		}
		params["_meta"] = b
	}
	pb, err := jsonv2.Marshal(params, jsonv2.Deterministic(true))
	if err != nil {
		return nil, err
	}
	out := maps.Clone(top)
	out["params"] = pb
	return jsonv2.Marshal(out, jsonv2.Deterministic(true))
}

// withStatus is res with st under _meta mcphandoff.Key (none when st is
// nil), and isError set for a "failed" or "rejected" st.
func withStatus(res map[string]json.RawMessage, st *handoff.Element) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(res)+1)
	for k, v := range res {
		out[k] = v
	}
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(res["_meta"], &meta)
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	delete(meta, mcphandoff.Key)
	if st != nil {
		meta[mcphandoff.Key] = mustJSON(mcphandoff.StatusValue(*st))
		if _, s, err := handoff.UnsafeDecode(*st); err == nil && s != nil && (s.State == handoff.StateFailed || s.State == handoff.StateRejected) {
			out["isError"] = json.RawMessage("true")
		}
	}
	if len(meta) == 0 {
		delete(out, "_meta")
	} else {
		out["_meta"] = mustJSON(meta)
	}
	if _, ok := out["content"]; !ok {
		out["content"] = json.RawMessage("[]")
	}
	return out
}

// toolResult is a CallToolResult with one text content and st in _meta.
func toolResult(st *handoff.Element, isError bool, text string) map[string]json.RawMessage {
	res := map[string]json.RawMessage{"content": mustJSON([]map[string]string{{"type": "text", "text": text}})}
	if isError {
		res["isError"] = json.RawMessage("true")
	}
	return withStatus(res, st)
}

func rpcResponse(id json.RawMessage, result any) []byte {
	return mustJSON(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
}

func writeResult(w http.ResponseWriter, id json.RawMessage, result any) {
	writeJSON(w, http.StatusOK, rpcResponse(id, result))
}

// writeRPCError answers a JSON-RPC error (id null when the request had
// none to answer).
func writeRPCError(w http.ResponseWriter, id json.RawMessage, status, code int, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	writeJSON(w, status, mustJSON(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}}))
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// mustJSON marshals values that always marshal (maps of raw JSON,
// strings).
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("gateway: marshaling %T: %v", v, err))
	}
	return b
}

// shortJSON is v cut to 32 bytes, for messages.
func shortJSON(v json.RawMessage) string {
	if len(v) > 32 {
		return string(v[:32]) + "..."
	}
	return string(v)
}

// hopByHop are the headers a proxy does not pass on (RFC 9110 7.6.1),
// with the caller's credentials, which are the gateway's to check.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization", "Content-Length", "Host"}

func copyHeaders(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append([]string(nil), vs...)
	}
	for _, f := range src.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			dst.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopByHop {
		dst.Del(k)
	}
}
