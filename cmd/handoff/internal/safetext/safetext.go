// Package safetext escapes the text a signer chose before a person sees
// it: in the terminal (handoff's commands) and on a page (the chain
// picture's SVG), the same runes the same way.
package safetext

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Terminal safety (issue 13, decision 52). Every member of an element is
// text its signer chose, and inspect decodes elements whose signature it
// has not checked, so a dialog, an aud or a detail may hold a newline, an
// ANSI escape sequence or a bidi override that, printed raw, draws a row
// the program never wrote ("key verified ... bound to <trusted agent>"
// over the real "NOT VERIFIED" one). Every text line the command writes
// goes through Text; every JSON line through the command's safeJSON.
// The chain picture's SVG (package picture) goes through Text too: a page
// shows a bidi override as the terminal would.

// Unsafe reports whether r must not reach a terminal (or a page) raw: anything
// that is not graphic (strconv.IsGraphic: letters, marks, numbers,
// punctuation, symbols and spaces), that is C0 and DEL, C1 (ESC-free CSI
// U+009B included), the format characters (bidi embeddings and overrides
// U+202A-U+202E, isolates U+2066-U+2069, marks U+200E, U+200F, U+061C,
// zero-width characters, U+FEFF), the line and paragraph separators U+2028
// and U+2029, private use and unassigned code points. The ordinary space
// stays.
//
// Some graphic runes draw nothing either, and would let a value look like
// another ("https://a.example" followed by a Hangul filler is not
// "https://a.example"): every space but U+0020 (U+00A0, U+3000, ...),
// the variation selectors, the combining grapheme joiner, the Hangul
// fillers, the blank braille pattern, and the Khmer and Mongolian
// invisible vowels and selectors. They are escaped as well. So is a
// combining mark with no visible base (first in the text, or after a rune
// that was escaped or is a space), which would otherwise sit on the
// program's own punctuation.
func Unsafe(r rune) bool { return !strconv.IsGraphic(r) || invisible(r) }

func invisible(r rune) bool {
	switch {
	case r == ' ':
		return false
	case unicode.Is(unicode.Zs, r),
		0xfe00 <= r && r <= 0xfe0f, 0xe0100 <= r && r <= 0xe01ef, // variation selectors
		r == 0x034f,                                        // combining grapheme joiner
		r == 0x115f, r == 0x1160, r == 0x3164, r == 0xffa0, // Hangul fillers
		r == 0x2800,                                          // braille pattern blank
		r == 0x17b4, r == 0x17b5, 0x180b <= r && r <= 0x180f: // Khmer, Mongolian
		return true
	}
	return false
}

// Baseless reports whether r, following prev, is a combining mark with no
// visible base to sit on.
func Baseless(prev, r rune) bool {
	return unicode.In(r, unicode.Mn, unicode.Me) && (prev < 0 || prev == ' ' || Unsafe(prev))
}

// Text returns s with every unsafe rune written as an escape: \n \r \t
// and \xNN for the other C0 and DEL, \uNNNN (\UNNNNNNNN) for the rest, and
// \xNN for each octet that is not UTF-8. A backslash stays as it is: the
// escapes make the text safe, not reversible, and leaving it alone makes
// Text idempotent, so text that %q or strconv.Quote already escaped
// (the library's error messages quote most members that way) passes
// through unchanged and a line escaped twice reads as escaped once.
func Text(s string) string {
	i, prev := 0, rune(-1)
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || Unsafe(r) || Baseless(prev, r) {
			break
		}
		i, prev = i+n, r
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		bad := Unsafe(r) || Baseless(prev, r)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
			r = -1
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && bad:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r > 0xffff && bad:
			fmt.Fprintf(&b, `\U%08x`, r)
		case bad:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		if bad {
			r = -1 // an escape is no base for a mark
		}
		i, prev = i+n, r
	}
	return b.String()
}
