package a2ahandoff

import (
	"encoding/json"
	"testing"
)

// FuzzStrictJSON: the strict check never panics, accepts only JSON, and
// what it accepts that names the key is found by carriesKey's lenient
// reading too.
func FuzzStrictJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, `{"x":"\ud800"}`, "{\"x\":\"\xff\"}", `{"` + Key + `":{"offer":"a.b.c"}}`, `[`, `{"a":{"b":[1,{"c":1,"c":2}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if strictJSON(b) == nil && !json.Valid(b) {
			t.Fatalf("strict check accepts %q, which is not JSON", b)
		}
		carriesKey(b)
	})
}
