package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Terminal safety (issue 13, decision 52). Every member of an element is
// text its signer chose, and inspect decodes elements whose signature it
// has not checked, so a dialog, an aud or a detail may hold a newline, an
// ANSI escape sequence or a bidi override that, printed raw, draws a row
// the program never wrote ("key verified ... bound to <trusted agent>"
// over the real "NOT VERIFIED" one). Every text line the command writes
// goes through safeText; every JSON line through safeJSON.

// unsafeRune reports whether r must not reach a terminal raw: anything
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
func unsafeRune(r rune) bool { return !strconv.IsGraphic(r) || invisible(r) }

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

// baseless reports whether r, following prev, is a combining mark with no
// visible base to sit on.
func baseless(prev, r rune) bool {
	return unicode.In(r, unicode.Mn, unicode.Me) && (prev < 0 || prev == ' ' || unsafeRune(prev))
}

// safeText returns s with every unsafe rune written as an escape: \n \r \t
// and \xNN for the other C0 and DEL, \uNNNN (\UNNNNNNNN) for the rest, and
// \xNN for each octet that is not UTF-8. A backslash stays as it is: the
// escapes make the text safe, not reversible, and leaving it alone makes
// safeText idempotent, so text that %q or strconv.Quote already escaped
// (the library's error messages quote most members that way) passes
// through unchanged and a line escaped twice reads as escaped once.
func safeText(s string) string {
	i, prev := 0, rune(-1)
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafeRune(r) || baseless(prev, r) {
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
		bad := unsafeRune(r) || baseless(prev, r)
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

// safeJSON rewrites, in a JSON text the encoder wrote, every unsafe
// non-ASCII rune as a JSON \u escape (a surrogate pair beyond the BMP).
// The encoder already escapes C0; C1, bidi controls and U+2028/U+2029 it
// writes raw. Such runes can only stand inside strings (JSON's structure is
// ASCII), so the rewritten text decodes to the same values.
func safeJSON(b []byte) []byte {
	i, prev := 0, rune(-1)
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			if b[i] == 0x7f {
				break
			}
			i, prev = i+1, rune(b[i])
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if unsafeRune(r) || baseless(prev, r) {
			break
		}
		i, prev = i+n, r
	}
	if i == len(b) {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b) + 12)
	out.Write(b[:i])
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			if b[i] == 0x7f { // DEL, which the encoder writes raw
				out.WriteString(`\u007f`)
				prev = -1
			} else {
				out.WriteByte(b[i])
				prev = rune(b[i])
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		bad := unsafeRune(r) || baseless(prev, r)
		switch {
		case bad && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		case bad:
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			out.Write(b[i : i+n])
		}
		if bad {
			r = -1
		}
		i, prev = i+n, r
	}
	return out.Bytes()
}

// fileName is a file name as a JSON line carries it: a name that is not
// UTF-8 (any octets may name a file) gets \xNN escapes for the octets that
// are not, since JSON text cannot hold them; a valid name is unchanged.
func fileName(f string) string {
	if utf8.ValidString(f) {
		return f
	}
	var b strings.Builder
	for i := 0; i < len(f); {
		r, n := utf8.DecodeRuneInString(f[i:])
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, f[i])
		} else {
			b.WriteString(f[i : i+n])
		}
		i += n
	}
	return b.String()
}
