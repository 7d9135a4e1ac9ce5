package trust

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and that whatever it accepts
// survives MarshalJSON -> Parse unchanged.
func FuzzParse(f *testing.F) {
	k, k2 := newPriv(f), newPriv(f)
	good := mustJSON(f, jwkMap(f, k, false))
	good2 := mustJSON(f, jwkMap(f, k2, false))
	bare := jwkMap(f, k2, false)
	delete(bare, "kid")
	delete(bare, "alg")
	off := jwkMap(f, k, false)
	off["y"] = offCurveY(k)
	seeds := []string{
		file(agentSpec{planner, []string{good, mustJSON(f, bare)}}, agentSpec{coder, []string{good2}}),
		file(agentSpec{planner, []string{good}}),
		`{"agents":[]}`,
		file(agentSpec{planner, nil}),
		file(agentSpec{planner, []string{mustJSON(f, off)}}),
		file(agentSpec{planner, []string{mustJSON(f, jwkMap(f, k, true))}}),
		file(agentSpec{planner, []string{strings.Replace(good, `"ES256"`, `"ES384"`, 1)}}),
		file(agentSpec{planner, []string{strings.Replace(good, `"kty":"EC"`, `"kty":"EC","kty":"EC"`, 1)}}),
		file(agentSpec{planner, []string{good}}, agentSpec{planner, []string{good2}}),
		`{"agents":[{"id":"a","keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}]}`,
		`{"agents":{}}`,
		`[]`,
		``,
		"{\"agents\":[{\"id\":\"\xff\",\"keys\":[]}]}",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if c != nil {
				t.Fatal("Parse returned both a Config and an error")
			}
			if !strings.HasPrefix(err.Error(), "trust: ") {
				t.Fatalf("error without prefix: %v", err)
			}
			return
		}
		out, err := c.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON of a parsed Config: %v", err)
		}
		c2, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(MarshalJSON) = %v\n%s", err, out)
		}
		out2, err := c2.MarshalJSON()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("round trip differs (%v):\n%s\n%s", err, out, out2)
		}
		for _, a := range c.Agents() {
			for _, key := range c.Keys(a, "") {
				if key.Alg != ES256 || key.Kid == "" || Thumbprint(key.Public) == "" {
					t.Fatalf("bad key bound to %q: %+v", a, key)
				}
				if got := c.Keys(a, key.Kid); len(got) != 1 || got[0].Kid != key.Kid {
					t.Fatalf("Keys(%q, %q) = %+v", a, key.Kid, got)
				}
			}
		}
	})
}
