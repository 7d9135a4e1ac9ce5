package main

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/quantumlearningmachines/handoff/cmd/handoff/internal/safetext"
)

// Terminal safety (issue 13, decision 52): package safetext says which
// runes never reach a terminal raw, and how they are written instead.
// Every text line the command writes goes through safeText; every JSON
// line through safeJSON.

func unsafeRune(r rune) bool { return safetext.Unsafe(r) }

func baseless(prev, r rune) bool { return safetext.Baseless(prev, r) }

func safeText(s string) string { return safetext.Text(s) }

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
