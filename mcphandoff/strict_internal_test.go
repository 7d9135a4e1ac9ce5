package mcphandoff

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// StrictHandler reads any POST body up to MaxStrictBody before the SDK
// does, authenticated or not; its check must cost no more than a small
// constant per input octet whatever the body holds (issue 13: every
// resource bounded). It used to build the whole value tree: 34 B per
// octet for a body of empty objects, 14.5 for one of many member names
// (jsontext's own duplicate check keeps every name).
func TestStrictCheckBounded(t *testing.T) {
	fill := func(item string) []byte {
		n := (MaxStrictBody - 200) / (len(item) + 1)
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"` + Key + `":"x"},"arguments":{"a":[` +
			strings.TrimSuffix(strings.Repeat(item+",", n), ",") + `]}}}`)
	}
	// Allocated per input octet, at most: nothing but the decoder's buffer
	// for bodies without names; a hash kept per member name (and the
	// name's string while it is hashed) for objects of many names.
	limit := map[string]float64{"names": 6, "long": 2}
	for _, c := range []struct{ name, item string }{
		{"empty objects", "{}"}, {"empty arrays", "[]"}, {"zeros", "0"}, {"empty strings", `""`},
		{"nested arrays", ""}, // filled below
		{"many names", "names"},
		{"long names", "long"},
	} {
		var b []byte
		switch c.item {
		case "names", "long":
			// One object of distinct member names, each kept (hashed)
			// for the duplicate check: the costliest strict body.
			var sb strings.Builder
			sb.WriteString(`{"id":1,"params":{"_meta":{"` + Key + `":"x"},"a":{`)
			pad := ""
			if c.item == "long" {
				pad = strings.Repeat("n", 200)
			}
			for i := 0; sb.Len() < MaxStrictBody-300; i++ {
				if i > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, `"%s%d":0`, pad, i)
			}
			sb.WriteString(`}}}`)
			b = []byte(sb.String())
		default:
			b = fill(c.item)
		}
		if c.item == "" {
			const depth = 9000 // within encoding/json's 10,000
			b = []byte(`{"id":1,"params":{"_meta":{"` + Key + `":"x"},"a":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}`)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		why := strictCheck(b)
		runtime.ReadMemStats(&after)
		if why != "" {
			t.Fatalf("%s: a strict body refused: %s", c.name, why)
		}
		total := after.TotalAlloc - before.TotalAlloc
		per := float64(total) / float64(len(b))
		t.Logf("%s: %d octets, %d B allocated, %.2f per octet", c.name, len(b), total, per)
		if c.item == "" {
			// The decoder's stack: a constant per level, and the levels
			// are capped (10,000), whatever the body's size.
			if total > 2<<20 {
				t.Errorf("%s: %d B allocated for %d levels, want at most 2 MiB", c.name, total, 9000)
			}
			continue
		}
		want, ok := limit[c.item]
		if !ok {
			want = 1
		}
		if per > want {
			t.Errorf("%s: %.2f B allocated per input octet, want at most %g", c.name, per, want)
		}
	}
}
