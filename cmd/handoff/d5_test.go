package main

import (
	"os"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/internal/malleate"
	"github.com/quantumlearningmachines/handoff/trust"
)

// TestScriptD5 runs the scripts of testdata/d5: SPEC D5, "same signed
// content is the same offer", as `handoff verify` reports it. They use the
// commands of TestScript and copyof.
func TestScriptD5(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/d5",
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			if g := e.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
				e.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"mktrust": scriptMktrust,
			"digests": scriptDigests,
			"twin":    scriptTwin,
			"copyof":  scriptCopyOf,
		},
	})
}

// copyof KIND IN OUT [KEYFILE]
//
// Writes to OUT, as a JSON Handoff with IN's chain, other octets that
// verify as the offer of the Handoff IN, the same signed content (D5):
// KIND jws-signature or cose-signature rewrites the ECDSA signature
// (r, s) as (r, N-s); cose-unprotected adds a label to the COSE
// unprotected header; resign signs the same payload again with KEYFILE.
func scriptCopyOf(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "copyof")
	if len(args) < 3 || len(args) > 4 || (args[0] == "resign") != (len(args) == 4) {
		ts.Fatalf("usage: copyof jws-signature|cose-signature|cose-unprotected IN OUT, or copyof resign IN OUT KEYFILE")
	}
	h, err := handoff.ParseHandoff([]byte(ts.ReadFile(args[1])), handoff.Limits{})
	ts.Check(err)
	el := h.Offer
	var b []byte
	switch args[0] {
	case "jws-signature":
		b, err = malleate.JWS(el.Octets)
	case "cose-signature":
		b, err = malleate.COSESignature(el.Octets)
	case "cose-unprotected":
		b, err = malleate.COSEUnprotected(el.Octets, "note", "added on the path")
	case "resign":
		o, _, derr := handoff.UnsafeDecode(el)
		ts.Check(derr)
		key, _, kerr := trust.ParsePrivateJWK([]byte(ts.ReadFile(args[3])))
		ts.Check(kerr)
		s, serr := handoff.NewSigner(key)
		ts.Check(serr)
		var re handoff.Element
		re, err = s.SignOffer(o, el.Form)
		b = re.Octets
	default:
		ts.Fatalf("copyof: unknown kind %q", args[0])
	}
	ts.Check(err)
	out, err := (&handoff.Handoff{Offer: handoff.Element{Form: el.Form, Octets: b}, Chain: h.Chain}).Encode(handoff.JSON)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[2]), append(out, '\n'), 0o644))
}
