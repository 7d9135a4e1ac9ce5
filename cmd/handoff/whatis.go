package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/quantumlearningmachines/handoff"
)

// What a file is, told from its content, so that a file given in the wrong
// place gets an answer that names it ("this is a signed status; use
// handoff verify-status") rather than only the parser's complaint. The
// look is a guess, never a check: it decides no verdict, and what it reads
// is only ever named, never trusted.

type fileKind int

const (
	kindUnknown fileKind = iota
	kindHandoff
	kindPrivateKey
	kindPublicKey
	kindTrustFile
	kindRefFile
	kindStatus
	kindOffer
)

var kindNames = map[fileKind]string{
	kindHandoff:    "a Handoff",
	kindPrivateKey: "a private key (JWK)",
	kindPublicKey:  "a public key (JWK)",
	kindTrustFile:  "a trust file",
	kindRefFile:    "a context reference file (from handoff ref)",
	kindStatus:     "a signed status",
	kindOffer:      "a bare signed offer, not carried in a Handoff",
}

// whatIs guesses what b is.
func whatIs(b []byte) fileKind {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) == nil {
			_, kty := m["kty"]
			_, d := m["d"]
			_, agents := m["agents"]
			_, ref := m["ref"]
			_, offer := m["offer"]
			switch {
			case kty && d:
				return kindPrivateKey
			case kty:
				return kindPublicKey
			case agents:
				return kindTrustFile
			case ref:
				return kindRefFile
			case offer:
				return kindHandoff
			}
		}
	}
	if _, err := handoff.ParseHandoff(b, handoff.Limits{}); err == nil {
		return kindHandoff
	}
	// A signed element: compact JWS text, base64url COSE text, or raw
	// COSE octets (one line of text, or a file's trailing newline).
	el := handoff.ParseElement(bytes.TrimRight(b, "\r\n"))
	switch o, s, err := handoff.UnsafeDecode(el); {
	case err != nil:
	case s != nil:
		return kindStatus
	case o != nil:
		return kindOffer
	}
	return kindUnknown
}

// hintFor is the advice for file, of kind k, given where want is expected
// ("" when it is what was wanted, or when nothing useful can be said).
func hintFor(file string, k fileKind, want fileKind) string { return hintAs(file, k, want, false) }

// hintAs is hintFor for a file given as --from (asFrom) or not.
func hintAs(file string, k fileKind, want fileKind, asFrom bool) string {
	if k == want || k == kindUnknown {
		return ""
	}
	what := fmt.Sprintf("%s is %s", safeText(file), kindNames[k])
	switch {
	case want == kindHandoff && k == kindStatus && asFrom:
		return what + ": --from takes the Handoff that carried the offer it answers, not a status"
	case want == kindHandoff && k == kindStatus:
		return what + "; check it with: handoff verify-status --trust TRUSTFILE --from HANDOFF " + safeText(file)
	case want == kindHandoff && k == kindOffer:
		return what + `: a Handoff carries an offer as {"offer": ...} with its chain; handoff offer writes one`
	case want == kindHandoff && k == kindTrustFile:
		return what + " (a receiver's own trust configuration, given as --trust)"
	case want == kindHandoff && k == kindRefFile:
		return what + "; give it to handoff offer --add-ref"
	case want == kindTrustFile && k == kindPublicKey:
		return what + ", not a trust file; make one with: handoff trust add --id ID " + safeText(file) + " trust.json"
	case want == kindTrustFile && k == kindPrivateKey:
		return what + ", not a trust file (which holds public keys): handoff pubkey " + safeText(file) +
			" > key.pub, then handoff trust add --id ID key.pub trust.json"
	case want == kindStatus && k == kindHandoff:
		return what + ", not a status: give it as --from, or check its offer with handoff verify"
	case want == kindPrivateKey && k == kindPublicKey:
		return what + "; this needs the private key (handoff keygen makes one; handoff pubkey prints its public half)"
	}
	return fmt.Sprintf("%s, not %s", what, kindNames[want])
}

// hinted is an error with a hint for its own line ("handoff: hint: ...").
type hinted struct {
	err  error
	hint string
}

func (h hinted) Error() string { return h.err.Error() }
func (h hinted) Unwrap() error { return h.err }

// withHint adds to err the hint for the file at path, when it is not the
// kind wanted.
func withHint(err error, path string, want fileKind) error { return withHintAs(err, path, want, false) }

// withHintAs is withHint for a file given as --from (asFrom) or not.
func withHintAs(err error, path string, want fileKind, asFrom bool) error {
	if err == nil {
		return nil
	}
	// Read again only a regular file: a pipe or device read twice may
	// block, or say something else the second time.
	if st, serr := os.Stat(path); serr != nil || !st.Mode().IsRegular() {
		return err
	}
	b, rerr := readBounded(path, handoff.DefaultLimits().MaxHandoff)
	if rerr != nil {
		return err
	}
	if h := hintAs(path, whatIs(b), want, asFrom); h != "" {
		return hinted{err, h}
	}
	return err
}

// printHint writes the hint err carries, if any.
func printHint(e env, err error) {
	var h hinted
	if errors.As(err, &h) {
		fmt.Fprintf(e.stderr, "handoff: hint: %s\n", h.hint)
	}
}

// hintFile prints, on stderr, the hint for the file at path whose octets
// are b, when it is not the kind wanted.
func hintFile(e env, path string, b []byte, want fileKind) {
	if h := hintFor(path, whatIs(b), want); h != "" {
		fmt.Fprintf(e.stderr, "handoff: hint: %s\n", h)
	}
}
