package main

import (
	"strconv"
	"testing"
)

// FuzzParseIndexed: an INDEX=VALUE flag value is read only when INDEX is a
// plain 0-based decimal below the refs bound and VALUE is not empty, and
// then it is exactly what was given.
func FuzzParseIndexed(f *testing.F) {
	for _, s := range []string{"0=doc.txt", "63=a=b", "64=x", "01=x", "-1=x", "0=", "=x", "x", "1e1=x", "+1=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		i, v, err := parseIndexed(s)
		if err != nil {
			return
		}
		if i < 0 || i >= 64 || v == "" || strconv.Itoa(i)+"="+v != s {
			t.Fatalf("parseIndexed(%q) = %d, %q", s, i, v)
		}
	})
}
