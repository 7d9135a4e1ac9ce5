package trust

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Key is a trusted public key with its one algorithm.
type Key struct {
	Kid    string           // the key id: the JWK's kid if given, else its RFC 7638 thumbprint
	Alg    string           // always ES256 today
	Public *ecdsa.PublicKey // P-256, validated on-curve
}

// Config binds AgentIds to keys. Build it with [New] and [Config.Add], or
// with [Parse] or [Load]; once built it is immutable and safe for
// concurrent use by any number of readers. Add must not run concurrently
// with anything else on the same Config. A nil *Config binds no keys.
type Config struct {
	keys   map[string][]Key
	agents []string // in the order first added
	gen    uint64   // see Generation
}

// generations numbers the states of every Config in the process.
var generations atomic.Uint64

// Generation identifies this Config's current set of keys: no two
// non-empty Configs share one, and Add gives a Config a new one. A cache
// of verifications (handoff.ChainCache) keys its entries by it, so that a
// change of trust, a reloaded file or an added key, is never answered
// from what the old keys verified. An empty Config's generation is 0,
// which such a cache takes as "none" and is then not used.
func (c *Config) Generation() uint64 {
	if c == nil {
		return 0
	}
	return c.gen
}

// New returns an empty Config.
func New() *Config {
	return &Config{keys: make(map[string][]Key)}
}

// Add binds k to agent. agent must be a non-empty UTF-8 string; k must have
// a non-empty UTF-8 Kid not yet bound to agent, Alg ES256 and a valid P-256
// public key (the Config keeps its own copy of it). Key validation failures
// match [ErrInvalidKey].
func (c *Config) Add(agent string, k Key) error {
	if c == nil {
		return errors.New("trust: Add on a nil Config")
	}
	if agent == "" {
		return errors.New("trust: empty agent id")
	}
	if !utf8.ValidString(agent) {
		return fmt.Errorf("trust: agent id %q is not valid UTF-8", agent)
	}
	fail := func(err error) error {
		return fmt.Errorf("trust: agent %q%s: %w", agent, kidSuffix(k.Kid), err)
	}
	switch {
	case k.Kid == "":
		return fail(keyError("key has no kid (NewKey sets it to the thumbprint)"))
	case !utf8.ValidString(k.Kid):
		return fail(keyError("kid is not valid UTF-8"))
	case k.Alg != ES256:
		return fail(keyErrorf("alg is %q, want %q", k.Alg, ES256))
	}
	pub, _, err := cleanPublic(k.Public)
	if err != nil {
		return fail(err)
	}
	k.Public = pub
	for _, old := range c.keys[agent] {
		if old.Kid == k.Kid {
			return fail(errors.New("kid already bound to this agent"))
		}
	}
	c.add(agent, k)
	return nil
}

// add binds a validated key; the caller has checked for duplicates.
func (c *Config) add(agent string, k Key) {
	if c.keys == nil {
		c.keys = make(map[string][]Key)
	}
	if _, ok := c.keys[agent]; !ok {
		c.agents = append(c.agents, agent)
	}
	c.keys[agent] = append(c.keys[agent], k)
	c.gen = generations.Add(1)
}

// Keys returns the keys bound to iss; when kid != "" only those whose Kid
// equals kid (at most one, since kids are unique per agent). It returns
// nil when none are bound. The result shares storage with the Config and
// is not allocated: callers must not modify its elements (appending is
// safe, its capacity is its length).
func (c *Config) Keys(iss, kid string) []Key {
	if c == nil {
		return nil
	}
	ks := c.keys[iss]
	if kid == "" {
		if len(ks) == 0 {
			return nil
		}
		return ks[:len(ks):len(ks)]
	}
	for i := range ks {
		if ks[i].Kid == kid {
			return ks[i : i+1 : i+1]
		}
	}
	return nil
}

// Agents returns the AgentIds that have keys, in the order they were
// added (trust-file order for a parsed Config). The slice is a copy.
func (c *Config) Agents() []string {
	if c == nil || len(c.agents) == 0 {
		return nil
	}
	return append([]string(nil), c.agents...)
}

// FileError is an error in a trust file. It names the agent (by id, or by
// position when the id itself is the problem) and, for a key, its position
// and kid. Positions count from 1. Key errors wrap errors that match
// [ErrInvalidKey].
type FileError struct {
	File       string // the path given to Load; "" for Parse
	Agent      string // the agent's id; "" when unknown or when the error is about the whole file
	AgentIndex int    // position of the agent in "agents"; 0 when the error is about the whole file
	Key        int    // position of the key in the agent's "keys"; 0 when the error is about the agent
	Kid        string // the key's kid (given, else its thumbprint) when known
	Err        error
}

func (e *FileError) Error() string {
	var b strings.Builder
	b.WriteString("trust: ")
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	switch {
	case e.Agent != "":
		fmt.Fprintf(&b, "agent %q", e.Agent)
	case e.AgentIndex > 0:
		fmt.Fprintf(&b, "agent %d", e.AgentIndex)
	default:
		b.WriteString("invalid trust file")
	}
	if e.Key > 0 {
		fmt.Fprintf(&b, " key %d", e.Key)
		if e.Kid != "" {
			fmt.Fprintf(&b, " (kid %q)", e.Kid)
		}
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *FileError) Unwrap() error { return e.Err }

// MaxFileSize bounds the trust file Load reads.
const MaxFileSize = 8 << 20

// Load reads and parses the trust file at path (see [Parse]). A file
// larger than [MaxFileSize] is an error.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trust: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("trust: %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, &FileError{File: path, Err: fmt.Errorf("larger than %d octets", MaxFileSize)}
	}
	c, err := Parse(b)
	if fe := (*FileError)(nil); errors.As(err, &fe) {
		fe.File = path
	}
	return c, err
}

// Parse reads a trust file (SPEC.md section 4):
//
//	{"agents": [{"id": AgentId, "keys": [JWK, ...]}, ...]}
//
// Every error is a [*FileError]. The file is invalid when it is not one
// strict JSON object (duplicate names, invalid UTF-8, trailing data), when
// "agents" is missing or not an array, when an agent is not an object, has
// a missing, non-string or empty id, an id already listed, or a "keys"
// that is missing, not an array or empty, when the file or an agent has a
// member other than these, and when any key fails the checks of
// [ParsePublicJWK] (so an RSA or P-384 key, an alg other than ES256, or a
// private key in the file are all errors) or repeats a kid of its agent.
// An empty "agents" array is valid: it trusts no one.
func Parse(b []byte) (*Config, error) {
	fileErr := func(err error) error { return &FileError{Err: err} }
	v, err := decodeValue(b)
	if err != nil {
		return nil, locate(b, err)
	}
	top, err := object(v)
	if err != nil {
		return nil, fileErr(err)
	}
	if name := top.unknown("agents"); name != "" {
		return nil, fileErr(fmt.Errorf("unknown member %q", name))
	}
	raw, ok := top["agents"]
	if !ok {
		return nil, fileErr(errors.New(`"agents" is missing`))
	}
	agents, err := array(raw)
	if err != nil {
		return nil, fileErr(fmt.Errorf(`"agents" is %w`, err))
	}

	c := New()
	firstAt := make(map[string]int, len(agents))
	for i, rawAgent := range agents {
		pos := i + 1
		agentErr := func(id string, err error) error {
			return &FileError{Agent: id, AgentIndex: pos, Err: err}
		}
		a, err := object(rawAgent)
		if err != nil {
			return nil, agentErr("", err)
		}
		id, present, err := a.str("id")
		switch {
		case err != nil:
			return nil, agentErr("", errors.New(`"id" is not a string`))
		case !present:
			return nil, agentErr("", errors.New(`"id" is missing`))
		case id == "":
			return nil, agentErr("", errors.New(`"id" is empty`))
		}
		if first, dup := firstAt[id]; dup {
			return nil, agentErr(id, fmt.Errorf("listed twice (agents %d and %d)", first, pos))
		}
		firstAt[id] = pos
		if name := a.unknown("id", "keys"); name != "" {
			return nil, agentErr(id, fmt.Errorf("unknown member %q", name))
		}
		rawKeys, ok := a["keys"]
		if !ok {
			return nil, agentErr(id, errors.New(`"keys" is missing`))
		}
		keys, err := array(rawKeys)
		if err != nil {
			return nil, agentErr(id, fmt.Errorf(`"keys" is %w`, err))
		}
		if len(keys) == 0 {
			return nil, agentErr(id, errors.New("no keys"))
		}
		bound := make([]Key, 0, len(keys))
		for j, rawKey := range keys {
			keyErr := func(kid string, err error) error {
				return &FileError{Agent: id, AgentIndex: pos, Key: j + 1, Kid: kid, Err: err}
			}
			m, err := object(rawKey)
			if err != nil {
				return nil, keyErr("", keyError(err.Error()))
			}
			pub, _, kid, err := parseJWK(m, false)
			if err != nil {
				return nil, keyErr(kid, err)
			}
			for n, old := range bound {
				if old.Kid == kid {
					return nil, keyErr(kid, fmt.Errorf("kid already used by key %d", n+1))
				}
			}
			bound = append(bound, Key{Kid: kid, Alg: ES256, Public: pub})
		}
		c.agents = append(c.agents, id)
		c.keys[id] = bound
	}
	if len(c.keys) > 0 {
		c.gen = generations.Add(1)
	}
	return c, nil
}

// locate turns an error from the strict JSON decoding of the whole file
// (a duplicate member name, invalid UTF-8, a syntax error) into a FileError
// that names the agent and key it lies in: their positions come from the
// error's JSON pointer, and the agent's id and the key's kid, best effort,
// from a second decoding without the strictness that failed.
func locate(b []byte, err error) *FileError {
	fe := &FileError{Err: err}
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return fe
	}
	var toks []string
	for t := range se.JSONPointer.Tokens() {
		if toks = append(toks, t); len(toks) == 4 {
			break
		}
	}
	if len(toks) < 2 || toks[0] != "agents" {
		return fe
	}
	ai, ok := pointerIndex(toks[1])
	if !ok {
		return fe
	}
	fe.AgentIndex = ai + 1
	ki := -1
	if len(toks) == 4 && toks[2] == "keys" {
		if ki, ok = pointerIndex(toks[3]); ok {
			fe.Key = ki + 1
		}
	}

	lenient := json.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	var f struct {
		Agents []jsontext.Value `json:"agents"`
	}
	if json.Unmarshal(b, &f, lenient) != nil || ai >= len(f.Agents) {
		return fe
	}
	var a struct {
		ID   jsontext.Value   `json:"id"`
		Keys []jsontext.Value `json:"keys"`
	}
	if json.Unmarshal(f.Agents[ai], &a, lenient) != nil {
		return fe
	}
	fe.Agent = lenientString(a.ID, lenient)
	if fe.Key > 0 && ki < len(a.Keys) {
		var k struct {
			Kid jsontext.Value `json:"kid"`
		}
		if json.Unmarshal(a.Keys[ki], &k, lenient) == nil {
			fe.Kid = lenientString(k.Kid, lenient)
		}
	}
	return fe
}

// lenientString returns v as a string if it is a JSON string of valid
// UTF-8, else "".
func lenientString(v jsontext.Value, opts json.Options) string {
	var s string
	if v.Kind() != '"' || json.Unmarshal(v, &s, opts) != nil || !utf8.ValidString(s) {
		return ""
	}
	return s
}

// pointerIndex parses a JSON pointer array index (RFC 6901: "0" or digits
// without a leading zero).
func pointerIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
		n = n*10 + int(tok[i]-'0')
	}
	return n, true
}

// fileOut and agentOut are the trust file as MarshalJSON writes it.
type fileOut struct {
	Agents []agentOut `json:"agents"`
}

type agentOut struct {
	ID   string   `json:"id"`
	Keys []jwkOut `json:"keys"`
}

// MarshalJSON writes c in the trust file format that [Parse] reads, agents
// in order, each key with kty, crv, x, y, alg and kid. A nil or empty
// Config is {"agents":[]}.
func (c *Config) MarshalJSON() ([]byte, error) {
	out := fileOut{Agents: []agentOut{}}
	if c != nil {
		for _, id := range c.agents {
			a := agentOut{ID: id, Keys: make([]jwkOut, 0, len(c.keys[id]))}
			for _, k := range c.keys[id] {
				point, err := publicBytes(k.Public)
				if err != nil {
					return nil, fmt.Errorf("trust: agent %q%s: %w", id, kidSuffix(k.Kid), err)
				}
				a.Keys = append(a.Keys, newJWKOut(point, k.Kid))
			}
			out.Agents = append(out.Agents, a)
		}
	}
	return json.Marshal(out, jsonOptions)
}
