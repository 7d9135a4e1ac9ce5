package trust

import (
	"bytes"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	planner = "https://planner.example/agent"
	coder   = "https://coder.example/agent"
)

// file builds a trust file from agent ids and their keys (each key a JSON
// object as text).
func file(agents ...agentSpec) string {
	var b strings.Builder
	b.WriteString(`{"agents":[`)
	for i, a := range agents {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%q,"keys":[%s]}`, a.id, strings.Join(a.keys, ","))
	}
	b.WriteString("]}")
	return b.String()
}

type agentSpec struct {
	id   string
	keys []string
}

func TestParseValid(t *testing.T) {
	k1, k2, k3 := newPriv(t), newPriv(t), newPriv(t)
	plain := jwkMap(t, k2, false) // no alg, no kid: ES256 and the thumbprint
	delete(plain, "alg")
	delete(plain, "kid")
	plain["use"] = "sig"
	plain["x5t#S256"] = "ignored"
	named := jwkMap(t, k3, false)
	named["kid"] = "coder-2025"
	named["key_ops"] = []any{"verify"}
	src := " \n" + file(
		agentSpec{planner, []string{mustJSON(t, jwkMap(t, k1, false)), mustJSON(t, plain)}},
		agentSpec{coder, []string{mustJSON(t, named)}},
	) + "\n"
	c, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Agents(); !slices.Equal(got, []string{planner, coder}) {
		t.Fatalf("Agents = %q", got)
	}
	ks := c.Keys(planner, "")
	if len(ks) != 2 {
		t.Fatalf("Keys(planner) = %d keys", len(ks))
	}
	for i, k := range []*ecdsa.PrivateKey{k1, k2} {
		if ks[i].Kid != Thumbprint(&k.PublicKey) || ks[i].Alg != ES256 || !ks[i].Public.Equal(&k.PublicKey) {
			t.Errorf("key %d = %+v", i, ks[i])
		}
	}
	if ks := c.Keys(coder, "coder-2025"); len(ks) != 1 || !ks[0].Public.Equal(&k3.PublicKey) {
		t.Errorf("Keys(coder, coder-2025) = %+v", ks)
	}
}

func TestParseEmpty(t *testing.T) {
	c, err := Parse([]byte(`{"agents":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Keys(planner, "") != nil || c.Agents() != nil {
		t.Fatal("empty config binds keys")
	}
}

// Each case asserts that the error names the agent (by id or position) and
// the key (by position and kid where known).
func TestParseErrors(t *testing.T) {
	k, k2 := newPriv(t), newPriv(t)
	kid := Thumbprint(&k.PublicKey)
	good := mustJSON(t, jwkMap(t, k, false))
	good2 := mustJSON(t, jwkMap(t, k2, false))
	mut := func(f func(m map[string]any)) string {
		m := jwkMap(t, k, false)
		f(m)
		return mustJSON(t, m)
	}
	one := func(keys ...string) string { return file(agentSpec{planner, keys}) }
	second := func(key string) string { return one(good2, key) }
	rsa := `{"kty":"RSA","kid":"rsa-1","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw","e":"AQAB"}`
	y := offCurveY(k)
	cases := []struct {
		name  string
		src   string
		agent string // substring naming the agent
		key   string // substring naming the key ("" for agent- or file-level errors)
		what  string // substring saying what is wrong
		inval bool   // errors.Is(err, ErrInvalidKey)
	}{
		// File level.
		{"not JSON", `{"agents":`, "", "", "not valid JSON", false},
		{"trailing data", file(agentSpec{planner, []string{good}}) + `{}`, "", "", "not valid JSON", false},
		{"top-level array", `[]`, "", "", "not a JSON object", false},
		{"null", `null`, "", "", "not a JSON object", false},
		{"no agents", `{}`, "", "", `"agents" is missing`, false},
		{"Agents", `{"Agents":[]}`, "", "", `unknown member "Agents"`, false},
		{"agents object", `{"agents":{}}`, "", "", `"agents" is not an array`, false},
		{"agents null", `{"agents":null}`, "", "", `"agents" is not an array`, false},
		{"unknown member", `{"agents":[],"comment":"x"}`, "", "", `unknown member "comment"`, false},
		{"duplicate agents", `{"agents":[],"agents":[]}`, "", "", "duplicate", false},

		// Agent level.
		{"agent not object", `{"agents":[[]]}`, "agent 1", "", "not a JSON object", false},
		{"id missing", `{"agents":[{"keys":[` + good + `]}]}`, "agent 1", "", `"id" is missing`, false},
		{"id empty", file(agentSpec{planner, []string{good}}, agentSpec{"", []string{good}}), "agent 2", "", `"id" is empty`, false},
		{"id number", `{"agents":[{"id":1,"keys":[` + good + `]}]}`, "agent 1", "", `"id" is not a string`, false},
		{"duplicate id", file(agentSpec{planner, []string{good}}, agentSpec{coder, []string{good2}}, agentSpec{planner, []string{good2}}), `agent "` + planner + `"`, "", "listed twice (agents 1 and 3)", false},
		{"no keys", file(agentSpec{planner, nil}), `agent "` + planner + `"`, "", "no keys", false},
		{"keys missing", `{"agents":[{"id":"` + planner + `"}]}`, `agent "` + planner + `"`, "", `"keys" is missing`, false},
		{"keys object", `{"agents":[{"id":"` + planner + `","keys":` + good + `}]}`, `agent "` + planner + `"`, "", `"keys" is not an array`, false},
		{"unknown agent member", `{"agents":[{"id":"` + planner + `","key":[],"keys":[` + good + `]}]}`, `agent "` + planner + `"`, "", `unknown member "key"`, false},

		// Key level.
		{"key not object", one(`"abc"`), `agent "` + planner + `"`, "key 1", "not a JSON object", true},
		{"RSA", second(rsa), `agent "` + planner + `"`, `key 2 (kid "rsa-1")`, `kty is "RSA"`, true},
		{"oct", second(`{"kty":"oct","k":"c2VjcmV0"}`), `agent "` + planner + `"`, "key 2", `kty is "oct"`, true},
		{"no kty", one(mut(func(m map[string]any) { delete(m, "kty") })), `agent "` + planner + `"`, `key 1 (kid "` + kid + `")`, "kty is missing", true},
		{"P-384", one(mut(func(m map[string]any) { m["crv"] = "P-384" })), `agent "` + planner + `"`, `key 1 (kid "` + kid + `")`, `crv is "P-384"`, true},
		{"ES384", one(mut(func(m map[string]any) { m["alg"] = "ES384" })), `agent "` + planner + `"`, `key 1 (kid "` + kid + `")`, `alg is "ES384"`, true},
		{"HS256", one(mut(func(m map[string]any) { m["alg"] = "HS256" })), `agent "` + planner + `"`, `key 1 (kid "` + kid + `")`, `alg is "HS256"`, true},
		{"none", one(mut(func(m map[string]any) { m["alg"] = "none" })), `agent "` + planner + `"`, `key 1 (kid "` + kid + `")`, `alg is "none"`, true},
		{"alg es256", one(mut(func(m map[string]any) { m["alg"] = "es256" })), `agent "` + planner + `"`, `key 1`, `alg is "es256"`, true},
		{"alg null", one(mut(func(m map[string]any) { m["alg"] = nil })), `agent "` + planner + `"`, `key 1`, `alg is not a string`, true},
		{"private", second(mustJSON(t, jwkMap(t, k, true))), `agent "` + planner + `"`, `key 2 (kid "` + kid + `")`, "d is present", true},
		{"x short", one(mut(func(m map[string]any) { m["x"] = m["x"].(string)[:42] })), `agent "` + planner + `"`, `key 1 (kid "` + kid + `")`, "x is not", true},
		{"x 33 octets", one(mut(func(m map[string]any) { m["x"] = strings.Repeat("A", 44) })), `agent "` + planner + `"`, "key 1", "x is not 32 octets", true},
		{"x padded", one(mut(func(m map[string]any) { m["x"] = m["x"].(string) + "=" })), `agent "` + planner + `"`, "key 1", "x is not base64url without padding", true},
		{"x std base64", one(mut(func(m map[string]any) { m["x"] = "+" + m["x"].(string)[1:] })), `agent "` + planner + `"`, "key 1", "x is not base64url", true},
		{"x newline", one(mut(func(m map[string]any) { m["x"] = m["x"].(string)[:20] + "\n" + m["x"].(string)[20:] })), `agent "` + planner + `"`, "key 1", "x is not base64url", true},
		{"y missing", one(mut(func(m map[string]any) { delete(m, "y") })), `agent "` + planner + `"`, `key 1 (kid "` + kid + `")`, "y is missing", true},
		{"y number", one(mut(func(m map[string]any) { m["y"] = 7 })), `agent "` + planner + `"`, "key 1", "y is not a string", true},
		{"off curve", second(mut(func(m map[string]any) { m["y"] = y })), `agent "` + planner + `"`, `key 2 (kid "` + kid + `")`, "not a point on P-256", true},
		{"kid empty", one(mut(func(m map[string]any) { m["kid"] = "" })), `agent "` + planner + `"`, "key 1", "kid is empty", true},
		{"kid number", one(mut(func(m map[string]any) { m["kid"] = 1 })), `agent "` + planner + `"`, "key 1", "kid is not a string", true},
		{"use enc", one(mut(func(m map[string]any) { m["use"] = "enc" })), `agent "` + planner + `"`, "key 1", `use is "enc"`, true},
		{"key_ops encrypt", one(mut(func(m map[string]any) { m["key_ops"] = []any{"encrypt"} })), `agent "` + planner + `"`, "key 1", `key_ops does not include "verify"`, true},
		{"key_ops string", one(mut(func(m map[string]any) { m["key_ops"] = "verify" })), `agent "` + planner + `"`, "key 1", `key_ops is not an array`, true},
		{"key_ops twice", one(mut(func(m map[string]any) { m["key_ops"] = []any{"verify", "verify"} })), `agent "` + planner + `"`, "key 1", `twice`, true},
		{"same key twice", one(good2, good, good), `agent "` + planner + `"`, `key 3 (kid "` + kid + `")`, "kid already used by key 2", false},
		{"same kid twice", one(
			mut(func(m map[string]any) { m["kid"] = "k1" }),
			strings.Replace(good2, `"kid":"`+Thumbprint(&k2.PublicKey)+`"`, `"kid":"k1"`, 1)),
			`agent "` + planner + `"`, `key 2 (kid "k1")`, "kid already used by key 1", false},

		// Strict JSON inside a key still names the agent and the key.
		{"duplicate member in key", second(strings.Replace(good, `"kty":"EC"`, `"kty":"EC","kty":"EC"`, 1)), `agent "` + planner + `"`, `key 2 (kid "` + kid + `")`, "duplicate", false},
		{"invalid UTF-8 in key", second(strings.Replace(good, `"kty":"EC"`, "\"kty\":\"EC\",\"note\":\"\xff\"", 1)), `agent "` + planner + `"`, `key 2 (kid "` + kid + `")`, "UTF-8", false},
		{"case-variant member", one(strings.Replace(good, `"kty":"EC"`, `"KTY":"EC"`, 1)), `agent "` + planner + `"`, "key 1", "kty is missing", true},
		{"duplicate id member", `{"agents":[{"id":"` + planner + `","id":"` + coder + `","keys":[` + good + `]}]}`, "agent", "", "duplicate", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.src))
			if err == nil {
				t.Fatalf("Parse accepted %s: %v", tc.src, c.Agents())
			}
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FileError", err)
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.HasPrefix(msg, "trust: ") {
				t.Errorf("error %q lacks the package prefix", msg)
			}
			for _, want := range []string{tc.agent, tc.key, tc.what} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if tc.agent != "" && fe.AgentIndex == 0 {
				t.Errorf("FileError %+v has no agent position", fe)
			}
			if tc.key != "" && fe.Key == 0 {
				t.Errorf("FileError %+v has no key position", fe)
			}
			if tc.key == "" && fe.Key != 0 {
				t.Errorf("FileError %+v names a key", fe)
			}
			if got := errors.Is(err, ErrInvalidKey); got != tc.inval {
				t.Errorf("errors.Is(%v, ErrInvalidKey) = %v, want %v", err, got, tc.inval)
			}
		})
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := New()
	for i, agent := range []string{coder, planner, "urn:agent:tester"} {
		for j := 0; j <= i; j++ {
			k, err := NewKey(&newPriv(t).PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			if j == 1 {
				k.Kid = "custom-" + agent
			}
			if err := c.Add(agent, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"alg":"ES256"`); n != 6 {
		t.Errorf("alg written %d times, want 6: %s", n, b)
	}
	if n := strings.Count(string(b), `"kid":`); n != 6 {
		t.Errorf("kid written %d times, want 6: %s", n, b)
	}
	c2, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse(MarshalJSON): %v\n%s", err, b)
	}
	if !slices.Equal(c.Agents(), c2.Agents()) {
		t.Fatalf("agents %q != %q", c.Agents(), c2.Agents())
	}
	for _, a := range c.Agents() {
		k1, k2 := c.Keys(a, ""), c2.Keys(a, "")
		if len(k1) != len(k2) {
			t.Fatalf("%s: %d keys != %d", a, len(k1), len(k2))
		}
		for i := range k1 {
			if k1[i].Kid != k2[i].Kid || k1[i].Alg != k2[i].Alg || !k1[i].Public.Equal(k2[i].Public) {
				t.Errorf("%s key %d: %+v != %+v", a, i, k1[i], k2[i])
			}
		}
	}
	b2, err := c2.MarshalJSON()
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("second marshal differs (%v):\n%s\n%s", err, b, b2)
	}

	for _, empty := range []*Config{nil, New(), {}} {
		if b, err := empty.MarshalJSON(); err != nil || string(b) != `{"agents":[]}` {
			t.Errorf("empty MarshalJSON = %s, %v", b, err)
		}
	}
}

func TestKeys(t *testing.T) {
	c := New()
	var keys []Key
	for range 3 {
		k, err := NewKey(&newPriv(t).PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Add(planner, k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if got := c.Keys(planner, ""); len(got) != 3 || got[0].Kid != keys[0].Kid || got[2].Kid != keys[2].Kid {
		t.Fatalf("Keys(planner, \"\") = %+v", got)
	}
	for _, k := range keys {
		got := c.Keys(planner, k.Kid)
		if len(got) != 1 || got[0].Kid != k.Kid || !got[0].Public.Equal(k.Public) {
			t.Fatalf("Keys(planner, %s) = %+v", k.Kid, got)
		}
		// A kid bound to another agent is not found for this one.
		if got := c.Keys(coder, k.Kid); got != nil {
			t.Fatalf("Keys(coder, %s) = %+v", k.Kid, got)
		}
	}
	if got := c.Keys(planner, "nope"); got != nil {
		t.Fatalf("unknown kid: %+v", got)
	}
	if got := c.Keys(coder, ""); got != nil {
		t.Fatalf("unknown agent: %+v", got)
	}

	// Appending to the result never writes into the Config.
	got := c.Keys(planner, keys[0].Kid)
	_ = append(got, Key{Kid: "intruder"})
	got = c.Keys(planner, "")
	_ = append(got, Key{Kid: "intruder"})
	if c.Keys(planner, "")[1].Kid != keys[1].Kid || len(c.Keys(planner, "intruder")) != 0 {
		t.Fatal("append to Keys result changed the Config")
	}

	// No panic on nil or zero configs.
	var nilc *Config
	if nilc.Keys(planner, "") != nil || nilc.Agents() != nil || (&Config{}).Keys(planner, "x") != nil {
		t.Fatal("empty config returned keys")
	}
}

func TestKeysDoesNotAllocate(t *testing.T) {
	c := New()
	k, _ := NewKey(&newPriv(t).PublicKey)
	k2, _ := NewKey(&newPriv(t).PublicKey)
	if err := c.Add(planner, k); err != nil {
		t.Fatal(err)
	}
	if err := c.Add(planner, k2); err != nil {
		t.Fatal(err)
	}
	iss := strings.Clone(planner)
	n := testing.AllocsPerRun(100, func() {
		if len(c.Keys(iss, "")) != 2 || len(c.Keys(iss, k2.Kid)) != 1 || c.Keys("other", "") != nil {
			panic("wrong keys")
		}
	})
	if n != 0 {
		t.Fatalf("Keys allocates %v times per run", n)
	}
}

func TestAdd(t *testing.T) {
	p := newPriv(t)
	good, _ := NewKey(&p.PublicKey)
	c := New()
	if err := c.Add(planner, good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		agent string
		key   Key
		inval bool
	}{
		{"empty agent", "", good, false},
		{"invalid UTF-8 agent", "\xff", good, false},
		{"duplicate kid", planner, good, false},
		{"no kid", coder, Key{Alg: ES256, Public: good.Public}, true},
		{"alg empty", coder, Key{Kid: "a", Public: good.Public}, true},
		{"alg ES384", coder, Key{Kid: "a", Alg: "ES384", Public: good.Public}, true},
		{"nil public", coder, Key{Kid: "a", Alg: ES256}, true},
		{"P-384", coder, Key{Kid: "a", Alg: ES256, Public: &newP384(t).PublicKey}, true},
	} {
		err := c.Add(tc.agent, tc.key)
		if err == nil {
			t.Errorf("%s: Add accepted", tc.name)
			continue
		}
		if errors.Is(err, ErrInvalidKey) != tc.inval {
			t.Errorf("%s: errors.Is(%v, ErrInvalidKey) != %v", tc.name, err, tc.inval)
		}
		if tc.agent != "" && tc.agent != "\xff" && !strings.Contains(err.Error(), tc.agent) {
			t.Errorf("%s: error %q does not name the agent", tc.name, err)
		}
	}
	if got := c.Agents(); !slices.Equal(got, []string{planner}) {
		t.Fatalf("failed Adds changed the agents: %q", got)
	}
	var nilc *Config
	if err := nilc.Add(planner, good); err == nil {
		t.Fatal("Add on nil Config accepted")
	}
	var zero Config
	if err := zero.Add(planner, good); err != nil || len(zero.Keys(planner, good.Kid)) != 1 {
		t.Fatalf("Add on zero Config: %v", err)
	}
	// Agents returns a copy.
	a := c.Agents()
	a[0] = "changed"
	if c.Agents()[0] != planner {
		t.Fatal("Agents exposed internal storage")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	k := newPriv(t)
	path := filepath.Join(dir, "trust.json")
	if err := os.WriteFile(path, []byte(file(agentSpec{planner, []string{mustJSON(t, jwkMap(t, k, false))}})), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Keys(planner, Thumbprint(&k.PublicKey))) != 1 {
		t.Fatal("Load lost the key")
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(file(agentSpec{planner, nil})), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	var fe *FileError
	if !errors.As(err, &fe) || fe.File != bad || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), planner) {
		t.Fatalf("Load(bad) = %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load(missing) = %v", err)
	}
}

func TestConcurrentReads(t *testing.T) {
	c := New()
	k, _ := NewKey(&newPriv(t).PublicKey)
	if err := c.Add(planner, k); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if len(c.Keys(planner, k.Kid)) != 1 || len(c.Agents()) != 1 {
					t.Error("wrong keys")
					return
				}
				if _, err := c.MarshalJSON(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestGeneration: every Config with keys has a generation of its own,
// and Add gives it a new one (handoff.ChainCache keys on it, so that a
// change of trust is never answered from what other keys verified).
func TestGeneration(t *testing.T) {
	a, err := Parse([]byte(`{"agents":[]}`))
	if err != nil || a.Generation() != 0 || (*Config)(nil).Generation() != 0 {
		t.Fatalf("an empty Config: %v %d", err, a.Generation())
	}
	k, _ := NewKey(&newPriv(t).PublicKey)
	b, c := New(), New()
	if err := b.Add("https://a.example", k); err != nil {
		t.Fatal(err)
	}
	if err := c.Add("https://a.example", k); err != nil {
		t.Fatal(err)
	}
	g := b.Generation()
	if g == 0 || c.Generation() == g {
		t.Fatalf("generations %d and %d", g, c.Generation())
	}
	js, err := b.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(js)
	if err != nil || d.Generation() == 0 || d.Generation() == g {
		t.Fatalf("a parsed Config: %v, generation %d", err, d.Generation())
	}
	k2, _ := NewKey(&newPriv(t).PublicKey)
	if err := b.Add("https://b.example", k2); err != nil || b.Generation() == g {
		t.Fatalf("Add kept generation %d: %v", g, err)
	}
}
