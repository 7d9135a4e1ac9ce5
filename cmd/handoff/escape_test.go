package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// Decision 52: what safeText and safeJSON escape, and that they keep the
// rest (readable Unicode, backslashes, text already quoted).
func TestSafeText(t *testing.T) {
	for _, c := range []struct{ rule, in, want string }{
		{"plain text is unchanged", "https://a.example/agent", "https://a.example/agent"},
		{"non-ASCII letters and symbols stay readable", "café ☕ 日本 │▼…", "café ☕ 日本 │▼…"},
		{"the ordinary space stays", "a b", "a b"},
		{"newline, CR and tab", "a\nb\rc\td", `a\nb\rc\td`},
		{"C0 and ESC (ANSI sequences)", "\x00\x07\x1b[2K", `\x00\x07\x1b[2K`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"C1, CSI U+009B and NEL U+0085", "\u009b2J\u0085", `\u009b2J\u0085`},
		{"bidi embeddings and overrides U+202A-U+202E", "\u202a\u202b\u202c\u202d\u202e", `\u202a\u202b\u202c\u202d\u202e`},
		{"bidi isolates U+2066-U+2069", "\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`},
		{"bidi marks U+200E U+200F U+061C", "\u200e\u200f\u061c", `\u200e\u200f\u061c`},
		{"line and paragraph separators", "\u2028\u2029", `\u2028\u2029`},
		{"zero-width characters and BOM", "\u200b\ufeff", `\u200b\ufeff`},
		{"a format character beyond the BMP", "\U000e0001", `\U000e0001`},
		{"invalid UTF-8, octet by octet", "a\xff\xc3", `a\xff\xc3`},
		{"U+FFFD itself is printable", "\ufffd", "\ufffd"},
		{"a backslash stays (idempotence)", `a\nb`, `a\nb`},
		{"%q output passes unchanged", `"\u202e\n"`, `"\u202e\n"`},
		{"spaces other than U+0020 (review)", "a\u00a0b\u3000c\u2007", `a\u00a0b\u3000c\u2007`},
		{"graphic but invisible: CGJ, Hangul fillers, braille blank", "a\u034f\u3164\u115f\u1160\uffa0\u2800", `a\u034f\u3164\u115f\u1160\uffa0\u2800`},
		{"variation selectors", "a\ufe0f\U000e0100", `a\ufe0f\U000e0100`},
		{"Khmer and Mongolian invisibles", "\u17b4\u17b5\u180b\u180e", `\u17b4\u17b5\u180b\u180e`},
		{"a combining mark on a letter stays", "e\u0301", "e\u0301"},
		{"a combining mark with no base is escaped", "\u0301a \u0301", `\u0301a \u0301`},
		{"a combining mark after an escape is escaped", "\x1b\u0301", `\x1b\u0301`},
	} {
		if got := safeText(c.in); got != c.want {
			t.Errorf("%s: safeText(%q) = %q, want %q", c.rule, c.in, got, c.want)
		}
		if got := safeText(safeText(c.in)); got != c.want {
			t.Errorf("%s: safeText twice = %q, want %q", c.rule, got, c.want)
		}
	}
}

func TestSafeJSON(t *testing.T) {
	for _, in := range []string{
		"plain", "café", "\u202etxt\u2028\u0085\u200f", "\U000e0001 tag", "a\"b\\c\n",
	} {
		b, err := json.Marshal(map[string]string{"k": in})
		if err != nil {
			t.Fatal(err)
		}
		out := safeJSON(b)
		if s := safeText(string(out)); s != string(out) {
			t.Errorf("safeJSON(%q) = %s: not terminal-safe", in, out)
		}
		var m map[string]string
		if err := json.Unmarshal(out, &m); err != nil || m["k"] != in {
			t.Errorf("safeJSON(%s) = %s decodes to %q (%v), want %q", b, out, m["k"], err, in)
		}
	}
}

// TestSafeJSONDEL: the JSON encoder writes DEL raw; safeJSON escapes it
// (review of issue 13).
func TestSafeJSONDEL(t *testing.T) {
	b, err := json.Marshal(map[string]string{"reason": "pol\x7f\x7ficy"})
	if err != nil {
		t.Fatal(err)
	}
	out := safeJSON(b)
	if bytes.IndexByte(out, 0x7f) >= 0 {
		t.Fatalf("safeJSON left DEL raw: %q", out)
	}
	var m map[string]string
	if err := json.Unmarshal(out, &m); err != nil || m["reason"] != "pol\x7f\x7ficy" {
		t.Fatalf("safeJSON(%s) = %s, decoding to %q (%v)", b, out, m["reason"], err)
	}
}

// TestFold: inspect folds long values itself (at display columns, a wide
// rune counting two), so that a terminal's wrap never starts a line with
// text the signer chose.
func TestFold(t *testing.T) {
	for _, c := range []struct {
		in    string
		width int
		want  []string
	}{
		{"short", 8, []string{"short"}},
		{"", 8, []string{""}},
		{"abcdefgh", 8, []string{"abcdefgh"}},
		{"abcdefghi", 8, []string{"abcdefgh", "i"}},
		{"日本語日本", 4, []string{"日本", "語日", "本"}},
	} {
		if got := fold(c.in, c.width); !slices.Equal(got, c.want) {
			t.Errorf("fold(%q, %d) = %q, want %q", c.in, c.width, got, c.want)
		}
	}
}

// TestFileName: a file name that is not UTF-8 still gets its verify line
// (review of issue 13), its invalid octets as \xNN.
func TestFileName(t *testing.T) {
	if got := fileName("bad\xff.json"); got != `bad\xff.json` {
		t.Errorf("fileName = %q", got)
	}
	if got := fileName("ok ☃.json"); got != "ok ☃.json" {
		t.Errorf("fileName changed a valid name: %q", got)
	}
}
