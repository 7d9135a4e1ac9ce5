package main

// CLI tests as testscript scripts (testdata/script/*.txtar), in the style of
// filippo.io/age's cmd/age tests. The `handoff` command runs the real run()
// of main.go. Keys, hops and signatures are random, so the scripts use the
// helper commands below, which read the wire formats independently of the
// handoff package (except twin, which signs with it, and mktrust, which
// builds a trust file with the trust package), to name digests and payloads
// and to build hostile inputs.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
	"github.com/rogpeppe/go-internal/testscript"
	"github.com/rogpeppe/go-internal/txtar"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/trust"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"handoff": func() {
			os.Exit(run(os.Args[1:], env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}))
		},
	})
}

// TestScriptFilesHoldNoCommands: a script's commands after its first
// "-- name --" line are the content of that file, and never run; two
// scripts lost their last checks that way.
func TestScriptFilesHoldNoCommands(t *testing.T) {
	paths, err := filepath.Glob("testdata/script/*.txtar")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	command := regexp.MustCompile(`^(! )?(exec|stdout|stderr|cmp|cp|exists) `)
	for _, p := range paths {
		a, err := txtar.ParseFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range a.Files {
			for i, line := range strings.Split(string(f.Data), "\n") {
				if command.MatchString(line) {
					t.Errorf("%s: file %s, line %d is a command that never runs: %s", p, f.Name, i+1, line)
				}
			}
		}
	}
}

func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			// Under -race, every command would sleep a second at exit
			// (the race runtime's default atexit_sleep_ms=1000).
			if g := e.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
				e.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"mktrust":   scriptMktrust,
			"checkjwk":  scriptCheckJWK,
			"digests":   scriptDigests,
			"payload":   scriptPayload,
			"mkhandoff": scriptMkhandoff,
			"tamper":    scriptTamper,
			"twin":      scriptTwin,
			"hexprefix": scriptHexprefix,
			"mkbig":     scriptMkbig,
			"truncate":  scriptTruncate,
			"hexfile":   scriptHexfile,
			"wsprefix":  scriptWsprefix,
			"checkref":  scriptCheckref,
			"keymode":   scriptKeymode,
			"mkoffer":   scriptMkoffer,
			"rawbytes":  scriptRawbytes,
			"mkstatus":  scriptMkstatus,
			"hostile":   scriptHostile,
			"bareoffer": scriptBareOffer,
		},
	})
}

var scriptB64 = base64.RawURLEncoding

func scriptNoNeg(ts *testscript.TestScript, neg bool, name string) {
	if neg {
		ts.Fatalf("%s does not support !", name)
	}
}

// mktrust OUT ID=KEYFILE[,kidof=OTHERKEYFILE] ...
//
// Writes a trust file binding each ID to the public key of KEYFILE (a
// private JWK as keygen writes it, or a public JWK as pubkey writes it),
// built with trust.New, trust.NewKey, Config.Add and Config.MarshalJSON.
// With kidof=, the key is bound under the kid of another key: a trusted key
// whose kid matches a message but whose public key does not.
func scriptMktrust(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "mktrust")
	if len(args) < 1 {
		ts.Fatalf("usage: mktrust OUT ID=KEYFILE[,kidof=KEYFILE] ...")
	}
	c := trust.New()
	for _, a := range args[1:] {
		id, spec, ok := strings.Cut(a, "=")
		if !ok {
			ts.Fatalf("mktrust: %q is not ID=KEYFILE", a)
		}
		file, kidof, _ := strings.Cut(spec, ",kidof=")
		k := scriptTrustKey(ts, file)
		if kidof != "" {
			k.Kid = scriptTrustKey(ts, kidof).Kid
		}
		ts.Check(c.Add(id, k))
	}
	b, err := c.MarshalJSON()
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), append(b, '\n'), 0o644))
}

func scriptTrustKey(ts *testscript.TestScript, file string) trust.Key {
	b := []byte(ts.ReadFile(file))
	if priv, _, err := trust.ParsePrivateJWK(b); err == nil {
		k, err := trust.NewKey(&priv.PublicKey)
		ts.Check(err)
		return k
	}
	k, err := trust.ParsePublicJWK(b)
	if err != nil {
		ts.Fatalf("mktrust: %s is neither a private nor a public JWK: %v", file, err)
	}
	return k
}

// checkjwk FILE private|public [VAR]
//
// Checks that FILE is one JWK with exactly the members SPEC.md section 4
// names (kty, crv, x, y, [d,] alg "ES256", kid) and that kid is the RFC 7638
// thumbprint, computed here independently. Sets VAR to the kid.
func scriptCheckJWK(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "checkjwk")
	if len(args) < 2 || len(args) > 3 || (args[1] != "private" && args[1] != "public") {
		ts.Fatalf("usage: checkjwk FILE private|public [VAR]")
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(ts.ReadFile(args[0])))
	ts.Check(dec.Decode(&m))
	if dec.More() {
		ts.Fatalf("%s: more than one JSON value", args[0])
	}
	want := []string{"alg", "crv", "kid", "kty", "x", "y"}
	if args[1] == "private" {
		want = append(want, "d")
	}
	sort.Strings(want)
	var got []string
	for k, v := range m {
		got = append(got, k)
		if _, ok := v.(string); !ok {
			ts.Fatalf("%s: member %q is not a string", args[0], k)
		}
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		ts.Fatalf("%s: members %v, want %v", args[0], got, want)
	}
	if m["kty"] != "EC" || m["crv"] != "P-256" || m["alg"] != "ES256" {
		ts.Fatalf("%s: kty %v crv %v alg %v, want EC P-256 ES256", args[0], m["kty"], m["crv"], m["alg"])
	}
	for _, c := range []string{"x", "y", "d"} {
		if s, ok := m[c].(string); ok {
			if b, err := scriptB64.Strict().DecodeString(s); err != nil || len(b) != 32 {
				ts.Fatalf("%s: %s is not 32 octets of base64url: %q", args[0], c, s)
			}
		}
	}
	tp := fmt.Sprintf(`{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}`, m["x"], m["y"])
	sum := sha256.Sum256([]byte(tp))
	if kid := scriptB64.EncodeToString(sum[:]); m["kid"] != kid {
		ts.Fatalf("%s: kid %v is not the RFC 7638 thumbprint %s", args[0], m["kid"], kid)
	}
	if len(args) == 3 {
		ts.Setenv(args[2], m["kid"].(string))
	}
}

// scriptHandoff is a Handoff as read here: each element's octets as the
// draft's handoff digest covers them, and how it was carried.
type scriptHandoff struct {
	offer   any // string or []byte as carried; nil if absent
	chain   []any
	isCBOR  bool
	present bool // has a chain member
}

func scriptReadHandoff(ts *testscript.TestScript, file string) scriptHandoff {
	b := []byte(ts.ReadFile(file))
	t := bytes.TrimLeft(b, " \t\r\n")
	var h scriptHandoff
	var m map[string]any
	if len(t) > 0 && t[0] == '{' {
		ts.Check(json.Unmarshal(b, &m))
	} else {
		h.isCBOR = true
		dm, err := cbor.DecOptions{DefaultMapType: reflect.TypeOf(map[string]any{})}.DecMode()
		ts.Check(err)
		ts.Check(dm.Unmarshal(b, &m))
	}
	h.offer = m["offer"]
	if c, ok := m["chain"]; ok {
		h.present = true
		h.chain = c.([]any)
	}
	return h
}

// octets returns the signed octets of a carried element: the ASCII of a
// JWS, or the COSE_Sign1 that base64url text or a byte string holds.
func scriptOctets(ts *testscript.TestScript, v any) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		if strings.Contains(x, ".") {
			return []byte(x)
		}
		b, err := scriptB64.Strict().DecodeString(x)
		if err != nil {
			ts.Fatalf("carried text %.20q is neither a JWS nor base64url", x)
		}
		return b
	}
	ts.Fatalf("carried element is %T", v)
	return nil
}

func scriptDigest(b []byte) string {
	s := sha256.Sum256(b)
	return scriptB64.EncodeToString(s[:])
}

// scriptElement resolves SRC: FILE (the offer of the Handoff in FILE), FILE:i
// (its chain[i]), or, for a file that is not a Handoff, the signed element
// the file holds on its own (a status: JWS text, base64url or raw COSE).
func scriptElement(ts *testscript.TestScript, src string) any {
	file, idx, hasIdx := strings.Cut(src, ":")
	raw := []byte(ts.ReadFile(file))
	t := bytes.TrimSpace(raw)
	isHandoff := len(t) > 0 && (t[0] == '{' || (t[0]&0xe0 == 0xa0))
	if !isHandoff {
		if hasIdx {
			ts.Fatalf("%s is not a Handoff", file)
		}
		if len(raw) > 0 && raw[0] == 0xd2 {
			return raw
		}
		return string(t)
	}
	h := scriptReadHandoff(ts, file)
	if !hasIdx {
		return h.offer
	}
	i, err := strconv.Atoi(idx)
	ts.Check(err)
	if i >= len(h.chain) {
		ts.Fatalf("%s has no chain[%d]", file, i)
	}
	return h.chain[i]
}

// digests FILE [VAR]
//
// Prints the handoff digest (base64url SHA-256 of the signed octets) of
// each chain element and of the offer of the Handoff in FILE, one per line
// ("chain[i] D", then "offer D"), and sets VAR to the offer's digest.
func scriptDigests(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "digests")
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: digests FILE [VAR]")
	}
	h := scriptReadHandoff(ts, args[0])
	w := ts.Stdout()
	for i, el := range h.chain {
		fmt.Fprintf(w, "chain[%d] %s\n", i, scriptDigest(scriptOctets(ts, el)))
	}
	d := scriptDigest(scriptOctets(ts, h.offer))
	fmt.Fprintf(w, "offer %s\n", d)
	if len(args) == 2 {
		ts.Setenv(args[1], d)
	}
}

// payload SRC
//
// Decodes the signed element SRC (see scriptElement) without checking its
// signature and prints its protected header and payload as JSON with
// sorted keys, on lines "header: {...}" and "payload: {...}". COSE header
// labels print as decimal strings, byte strings as text. Sets $HOP to the
// payload's hop, when it has one.
// bareoffer SRC DST writes the offer of the Handoff SRC to DST as it is
// carried, without the Handoff around it: a compact JWS's text, or a
// COSE_Sign1's octets.
func scriptBareOffer(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "bareoffer")
	if len(args) != 2 {
		ts.Fatalf("usage: bareoffer SRC DST")
	}
	var b []byte
	switch el := scriptElement(ts, args[0]).(type) {
	case string:
		b = []byte(el + "\n")
	case []byte:
		b = el
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, 0o644))
}

func scriptPayload(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "payload")
	if len(args) != 1 {
		ts.Fatalf("usage: payload SRC")
	}
	el := scriptElement(ts, args[0])
	var hdr, pl any
	if s, ok := el.(string); ok && strings.Contains(s, ".") {
		parts := strings.Split(s, ".")
		if len(parts) != 3 {
			ts.Fatalf("not a compact JWS: %d parts", len(parts))
		}
		h, err := scriptB64.Strict().DecodeString(parts[0])
		ts.Check(err)
		p, err := scriptB64.Strict().DecodeString(parts[1])
		ts.Check(err)
		ts.Check(json.Unmarshal(h, &hdr))
		d := json.NewDecoder(bytes.NewReader(p))
		d.UseNumber()
		ts.Check(d.Decode(&pl))
	} else {
		var msg struct {
			_           struct{} `cbor:",toarray"`
			Protected   []byte
			Unprotected cbor.RawMessage
			Payload     []byte
			Signature   []byte
		}
		var tag cbor.RawTag
		ts.Check(cbor.Unmarshal(scriptOctets(ts, el), &tag))
		if tag.Number != 18 {
			ts.Fatalf("COSE tag %d, want 18", tag.Number)
		}
		ts.Check(cbor.Unmarshal(tag.Content, &msg))
		var ph map[any]any
		ts.Check(cbor.Unmarshal(msg.Protected, &ph))
		hm := map[string]any{}
		for k, v := range ph {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			hm[fmt.Sprint(k)] = v
		}
		hdr = hm
		dm, err := cbor.DecOptions{DefaultMapType: reflect.TypeOf(map[string]any{})}.DecMode()
		ts.Check(err)
		ts.Check(dm.Unmarshal(msg.Payload, &pl))
	}
	hb, err := json.Marshal(hdr)
	ts.Check(err)
	pb, err := json.Marshal(pl)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "header: %s\npayload: %s\n", hb, pb)
	if m, ok := pl.(map[string]any); ok {
		if hop, ok := m["hop"].(string); ok {
			ts.Setenv("HOP", hop)
		}
	}
}

// scriptCarried is an element as JSON carries it.
func scriptCarried(v any) any {
	if b, ok := v.([]byte); ok {
		return scriptB64.EncodeToString(b)
	}
	return v
}

// mkhandoff OUT OFFERSRC [CHAINSRC...]
//
// Writes a JSON Handoff whose offer is the element OFFERSRC and whose chain
// is the CHAINSRC elements in the order given (no chain member when none is
// given). A SRC is FILE (that Handoff's offer), FILE:i (its chain[i]) or
// text:STRING (that text as carried). Elements are copied with their octets
// unchanged (COSE byte strings become base64url text).
func scriptMkhandoff(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "mkhandoff")
	if len(args) < 2 {
		ts.Fatalf("usage: mkhandoff OUT OFFERSRC [CHAINSRC...]")
	}
	get := func(src string) any {
		if s, ok := strings.CutPrefix(src, "text:"); ok {
			return s
		}
		return scriptCarried(scriptElement(ts, src))
	}
	m := map[string]any{"offer": get(args[1])}
	if len(args) > 2 {
		var chain []any
		for _, src := range args[2:] {
			chain = append(chain, get(src))
		}
		m["chain"] = chain
	}
	b, err := json.Marshal(m)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), append(b, '\n'), 0o644))
}

// tamper IN OUT
//
// Copies IN to OUT with one bit of a signature flipped: the offer's, when
// IN is a JSON Handoff, else that of the signed element IN holds on its own
// (a status). In a JWS the bit is in the signature segment; in a COSE_Sign1
// it is its last octet, the last octet of its signature.
func scriptTamper(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "tamper")
	if len(args) != 2 {
		ts.Fatalf("usage: tamper IN OUT")
	}
	flipText := func(s string) string {
		if parts := strings.Split(s, "."); len(parts) == 3 {
			sig, err := scriptB64.Strict().DecodeString(parts[2])
			ts.Check(err)
			sig[5] ^= 0x01
			parts[2] = scriptB64.EncodeToString(sig)
			return strings.Join(parts, ".")
		}
		b := scriptOctets(ts, s)
		b[len(b)-1] ^= 0x01
		return scriptB64.EncodeToString(b)
	}
	in := []byte(ts.ReadFile(args[0]))
	var out []byte
	switch t := bytes.TrimSpace(in); {
	case len(t) > 0 && t[0] == '{':
		var m map[string]any
		ts.Check(json.Unmarshal(in, &m))
		m["offer"] = flipText(m["offer"].(string))
		b, err := json.Marshal(m)
		ts.Check(err)
		out = append(b, '\n')
	case len(in) > 0 && in[0] == 0xd2:
		out = bytes.Clone(in)
		out[len(out)-1] ^= 0x01
	default:
		out = []byte(flipText(string(t)) + "\n")
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), out, 0o644))
}

// twin IN OUT KEYFILE
//
// Signs, with KEYFILE and the handoff package, a second offer with the same
// iss and hop as the offer of the Handoff IN but another task, in the same
// signed form, and writes it as a JSON Handoff with IN's chain: two
// different offers for one (iss, hop), the draft's equivocation.
func scriptTwin(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "twin")
	if len(args) != 3 {
		ts.Fatalf("usage: twin IN OUT KEYFILE")
	}
	h, err := handoff.ParseHandoff([]byte(ts.ReadFile(args[0])), handoff.Limits{})
	ts.Check(err)
	o, _, err := handoff.UnsafeDecode(h.Offer)
	ts.Check(err)
	if o == nil {
		ts.Fatalf("%s: no offer", args[0])
	}
	o.Task = "twin-of-" + o.Task
	key, _, err := trust.ParsePrivateJWK([]byte(ts.ReadFile(args[2])))
	ts.Check(err)
	s, err := handoff.NewSigner(key)
	ts.Check(err)
	el, err := s.SignOffer(o, h.Offer.Form)
	ts.Check(err)
	out := &handoff.Handoff{Offer: el, Chain: h.Chain}
	b, err := out.Encode(handoff.JSON)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), append(b, '\n'), 0o644))
}

// hexprefix FILE HEX
//
// The file's first octets must (or, with !, must not) be HEX.
func scriptHexprefix(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: hexprefix FILE HEX")
	}
	want, err := hex.DecodeString(args[1])
	ts.Check(err)
	got := []byte(ts.ReadFile(args[0]))
	if bytes.HasPrefix(got, want) == neg {
		n := min(len(got), len(want)+4)
		ts.Fatalf("%s starts with %x; want prefix %s (negated: %v)", args[0], got[:n], args[1], neg)
	}
}

// mkbig FILE N
//
// Writes {"offer":"aaaa…a.b.c"} with N letters a: a Handoff whose offer is
// JWS-shaped text of about N octets, to exceed the size bounds.
func scriptMkbig(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "mkbig")
	if len(args) != 2 {
		ts.Fatalf("usage: mkbig FILE N")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	b := []byte(`{"offer":"` + strings.Repeat("a", n) + `.b.c"}`)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), b, 0o644))
}

// truncate IN N OUT
//
// Writes the first N octets of IN to OUT.
func scriptTruncate(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "truncate")
	if len(args) != 3 {
		ts.Fatalf("usage: truncate IN N OUT")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	b := []byte(ts.ReadFile(args[0]))
	if n > len(b) {
		ts.Fatalf("%s has only %d octets", args[0], len(b))
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[2]), b[:n], 0o644))
}

// hexfile OUT HEX
//
// Writes the octets HEX to OUT (a hand-made CBOR input, say).
func scriptHexfile(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "hexfile")
	if len(args) != 2 {
		ts.Fatalf("usage: hexfile OUT HEX")
	}
	b, err := hex.DecodeString(args[1])
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), b, 0o644))
}

// wsprefix IN OUT
//
// Writes IN to OUT after the four JSON white space characters (space, tab,
// CR, LF): SPEC.md section 4 reads such a file as JSON when the first other
// octet is '{'.
func scriptWsprefix(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "wsprefix")
	if len(args) != 2 {
		ts.Fatalf("usage: wsprefix IN OUT")
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(" \t\r\n"+ts.ReadFile(args[0])), 0o644))
}

// checkref REFFILE FILE KIND [LOC] [VAR]
//
// Checks, independently of the handoff packages, that REFFILE is what
// `handoff ref` prints for FILE: one JSON object with exactly "ref" (and
// "salt" iff KIND is salted-digest); ref has exactly kind KIND, dig
// {alg: "sha-256", val: base64url SHA-256 of FILE's octets, after the
// salt for salted-digest}, and loc LOC when LOC is given and not "-"; the
// salt is strict base64url of 32 octets (refs.SaltSize). Sets VAR to the salt.
func scriptCheckref(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "checkref")
	if len(args) < 3 || len(args) > 5 {
		ts.Fatalf("usage: checkref REFFILE FILE KIND [LOC] [VAR]")
	}
	var top map[string]json.RawMessage
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[0])), &top))
	kind := args[2]
	wantTop := 1
	if kind == "salted-digest" {
		wantTop = 2
	}
	if len(top) != wantTop {
		ts.Fatalf("%s: %d members, want %d", args[0], len(top), wantTop)
	}
	var ref struct {
		Kind string            `json:"kind"`
		Dig  map[string]string `json:"dig"`
		Loc  *string           `json:"loc"`
	}
	var members map[string]any
	ts.Check(json.Unmarshal(top["ref"], &members))
	ts.Check(json.Unmarshal(top["ref"], &ref))
	loc := ""
	if len(args) >= 4 && args[3] != "-" {
		loc = args[3]
	}
	wantMembers := 2
	if loc != "" {
		wantMembers = 3
		if ref.Loc == nil || *ref.Loc != loc {
			ts.Fatalf("%s: loc %v, want %q", args[0], ref.Loc, loc)
		}
	}
	if len(members) != wantMembers || ref.Kind != kind || len(ref.Dig) != 2 || ref.Dig["alg"] != "sha-256" {
		ts.Fatalf("%s: ref %s, want kind %q, dig {alg sha-256, val}, loc %q", args[0], top["ref"], kind, loc)
	}
	var salt []byte
	if kind == "salted-digest" {
		var s string
		ts.Check(json.Unmarshal(top["salt"], &s))
		var err error
		if salt, err = scriptB64.Strict().DecodeString(s); err != nil || len(salt) != 32 || strings.ContainsAny(s, "=\r\n") {
			ts.Fatalf("%s: salt %q is not base64url of 32 octets", args[0], s)
		}
		if len(args) == 5 {
			ts.Setenv(args[4], s)
		}
	}
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(ts.ReadFile(args[1])))
	if want := scriptB64.EncodeToString(h.Sum(nil)); ref.Dig["val"] != want {
		ts.Fatalf("%s: dig val %s, want %s", args[0], ref.Dig["val"], want)
	}
}

// keymode FILE MODE
//
// FILE's permission bits must be MODE (octal), read with os.Lstat.
func scriptKeymode(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "keymode")
	if len(args) != 2 {
		ts.Fatalf("usage: keymode FILE MODE")
	}
	want, err := strconv.ParseUint(args[1], 8, 32)
	ts.Check(err)
	fi, err := os.Lstat(ts.MkAbs(args[0]))
	ts.Check(err)
	if !fi.Mode().IsRegular() || uint64(fi.Mode().Perm()) != want {
		ts.Fatalf("%s: mode %v, want a regular file with mode %#o", args[0], fi.Mode(), want)
	}
}

// scriptMembers reads MEMBER=VALUE arguments; a VALUE in double quotes is a
// Go string literal (strconv.Unquote), so that a script can write control
// characters, escape sequences and bidi overrides into a member.
func scriptMembers(ts *testscript.TestScript, args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			ts.Fatalf("%q is not MEMBER=VALUE", a)
		}
		if strings.HasPrefix(v, `"`) {
			u, err := strconv.Unquote(v)
			ts.Check(err)
			v = u
		}
		m[k] = v
	}
	return m
}

// mkoffer OUT KEYFILE [MEMBER=VALUE ...]
//
// Signs with KEYFILE and the handoff package a JWS offer with the members
// given (iss, aud, dialog, task, iat, obo (its sub), and extra:NAME for an
// unknown member NAME, a Go string literal when quoted; default iss https://a.example, aud
// https://b.example, dialog ctx-1, iat 1700000000, exp iat + 300) and
// writes it as a JSON Handoff: offers with hostile text in their members.
// MEMBER=VALUE splits at the first '=', so a quoted NAME holds no '='.
func scriptMkoffer(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "mkoffer")
	if len(args) < 2 {
		ts.Fatalf("usage: mkoffer OUT KEYFILE [MEMBER=VALUE ...]")
	}
	m := scriptMembers(ts, args[2:])
	get := func(k, def string) string {
		if v, ok := m[k]; ok {
			delete(m, k)
			return v
		}
		return def
	}
	iat, err := strconv.ParseInt(get("iat", "1700000000"), 10, 64)
	ts.Check(err)
	o := &handoff.Offer{Hop: handoff.NewHop(), Iss: get("iss", "https://a.example"), Aud: get("aud", "https://b.example"),
		Dialog: get("dialog", "ctx-1"), Task: get("task", ""), Iat: iat, Exp: iat + 300}
	if sub, ok := m["obo"]; ok {
		o.Obo = &handoff.Principal{Sub: sub}
		delete(m, "obo")
	}
	for k, v := range m {
		if name, ok := strings.CutPrefix(k, "extra:"); ok {
			if strings.HasPrefix(name, `"`) {
				u, err := strconv.Unquote(name)
				ts.Check(err)
				name = u
			}
			if o.Extra == nil {
				o.Extra = map[string]any{}
			}
			o.Extra[name] = v
			delete(m, k)
		}
	}
	if len(m) > 0 {
		ts.Fatalf("mkoffer: unknown members %v", m)
	}
	key, _, err := trust.ParsePrivateJWK([]byte(ts.ReadFile(args[1])))
	ts.Check(err)
	s, err := handoff.NewSigner(key)
	ts.Check(err)
	el, err := s.SignOffer(o, handoff.FormJWS)
	ts.Check(err)
	b, err := (&handoff.Handoff{Offer: el}).Encode(handoff.JSON)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), append(b, '\n'), 0o644))
}

// rawbytes FILE
//
// FILE must hold (or, with !, must not hold) only text that is safe on a
// terminal: valid UTF-8 with no C0 control other than newline, no DEL, no
// C1, no bidi control (U+061C, U+200E, U+200F, U+202A-U+202E,
// U+2066-U+2069) and no U+2028/U+2029. The set is spelled out here, not
// taken from the command's own escaping.
func scriptRawbytes(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: rawbytes FILE")
	}
	s := ts.ReadFile(args[0])
	bad := ""
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			bad = fmt.Sprintf("invalid UTF-8 at octet %d", i)
		case r < 0x20 && r != '\n', r == 0x7f, r >= 0x80 && r <= 0x9f,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e,
			r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
			bad = fmt.Sprintf("raw %U at octet %d", r, i)
		}
		if bad != "" {
			break
		}
	}
	if (bad == "") == neg {
		if neg {
			ts.Fatalf("%s holds only terminal-safe text", args[0])
		}
		ts.Fatalf("%s: %s", args[0], bad)
	}
}

// mkstatus OUT KEYFILE HANDOFF [MEMBER=VALUE ...]
//
// Signs with KEYFILE and the handoff package a JWS status answering the
// offer of HANDOFF, with the members given (iss, aud, state, reason,
// detail, iat; default iss the offer's aud, aud its iss, state rejected,
// iat the offer's), and writes its compact JWS on one line: statuses with
// hostile text in their members, or from any signer.
func scriptMkstatus(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "mkstatus")
	if len(args) < 3 {
		ts.Fatalf("usage: mkstatus OUT KEYFILE HANDOFF [MEMBER=VALUE ...]")
	}
	h, err := handoff.ParseHandoff([]byte(ts.ReadFile(args[2])), handoff.Limits{})
	ts.Check(err)
	o, _, err := handoff.UnsafeDecode(h.Offer)
	ts.Check(err)
	if o == nil {
		ts.Fatalf("%s: no offer", args[2])
	}
	m := scriptMembers(ts, args[3:])
	get := func(k, def string) string {
		if v, ok := m[k]; ok {
			delete(m, k)
			return v
		}
		return def
	}
	iat, err := strconv.ParseInt(get("iat", strconv.FormatInt(o.Iat, 10)), 10, 64)
	ts.Check(err)
	s := &handoff.Status{Offer: h.Offer.Digest(), Iss: get("iss", o.Aud), Aud: get("aud", o.Iss), Iat: iat,
		State: handoff.State(get("state", "rejected")), Reason: handoff.Reason(get("reason", "")), Detail: get("detail", "")}
	if len(m) > 0 {
		ts.Fatalf("mkstatus: unknown members %v", m)
	}
	key, _, err := trust.ParsePrivateJWK([]byte(ts.ReadFile(args[1])))
	ts.Check(err)
	signer, err := handoff.NewSigner(key)
	ts.Check(err)
	el, err := signer.SignStatus(s, handoff.FormJWS)
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(el.Text()+"\n"), 0o644))
}

// hostile SHAPE FILE
//
// Writes a hostile input of about 1 MiB (issue 13): cbor-nested-maps and
// cbor-nested-arrays (a CBOR Handoff {"offer": h'00', "x": ...} whose "x"
// is 128 nested heads, each claiming the rest of the input), cbor-bstr
// (an offer byte string head claiming 2^62 octets), json-nested-arrays
// (an unknown member of 200,000 nested arrays), json-keys (90,000
// unknown members beside a malformed offer).
func scriptHostile(ts *testscript.TestScript, neg bool, args []string) {
	scriptNoNeg(ts, neg, "hostile")
	if len(args) != 2 {
		ts.Fatalf("usage: hostile SHAPE FILE")
	}
	const size = 1 << 20
	pad := func(b []byte) []byte { return append(b, make([]byte, size-len(b))...) }
	nested := func(major byte, per int) []byte {
		b := []byte{0xa2, 0x65, 'o', 'f', 'f', 'e', 'r', 0x41, 0x00, 0x61, 'x'}
		for range 128 {
			b = binary.BigEndian.AppendUint32(append(b, major<<5|26), uint32((size-len(b)-5)/per))
		}
		return pad(b)
	}
	var b []byte
	switch args[0] {
	case "cbor-nested-maps":
		b = nested(5, 2)
	case "cbor-nested-arrays":
		b = nested(4, 1)
	case "cbor-bstr":
		b = pad([]byte{0xa1, 0x65, 'o', 'f', 'f', 'e', 'r', 0x5b, 0x40, 0, 0, 0, 0, 0, 0, 0})
	case "json-nested-arrays":
		b = []byte(`{"offer":"a.b.c","x":` + strings.Repeat("[", 200000) + strings.Repeat("]", 200000) + "}")
	case "json-keys":
		var sb strings.Builder
		sb.WriteString(`{"offer":"a.b.c"`)
		for i := range 90000 {
			fmt.Fprintf(&sb, `,"k%05d":0`, i)
		}
		sb.WriteString("}")
		b = []byte(sb.String())
	default:
		ts.Fatalf("hostile: unknown shape %q", args[0])
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), b, 0o644))
}
