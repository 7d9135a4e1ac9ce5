package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
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
func unsafeRune(r rune) bool { return !strconv.IsGraphic(r) }

// safeText returns s with every unsafe rune written as an escape: \n \r \t
// and \xNN for the other C0 and DEL, \uNNNN (\UNNNNNNNN) for the rest, and
// \xNN for each octet that is not UTF-8. A backslash stays as it is: the
// escapes make the text safe, not reversible, and leaving it alone makes
// safeText idempotent, so text that %q or strconv.Quote already escaped
// (the library's error messages quote most members that way) passes
// through unchanged and a line escaped twice reads as escaped once.
func safeText(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || unsafeRune(r) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r > 0xffff && unsafeRune(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// safeJSON rewrites, in a JSON text the encoder wrote, every unsafe
// non-ASCII rune as a JSON \u escape (a surrogate pair beyond the BMP).
// The encoder already escapes C0; C1, bidi controls and U+2028/U+2029 it
// writes raw. Such runes can only stand inside strings (JSON's structure is
// ASCII), so the rewritten text decodes to the same values.
func safeJSON(b []byte) []byte {
	i := 0
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if unsafeRune(r) {
			break
		}
		i += n
	}
	if i == len(b) {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b) + 12)
	out.Write(b[:i])
	for i < len(b) {
		if b[i] < utf8.RuneSelf {
			out.WriteByte(b[i])
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case unsafeRune(r) && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		case unsafeRune(r):
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			out.Write(b[i : i+n])
		}
		i += n
	}
	return out.Bytes()
}
