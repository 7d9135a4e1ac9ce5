package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"

	"github.com/quantumlearningmachines/handoff/conformance"
)

// The conformance kit (conformance/v1) is made from the committed vectors
// under testdata/vectors, never by signing anew: it is a pure function of
// those files, the requirements file and the schema, so that a test can
// make it again and find it byte for byte equal (see conformance's
// TestKitIsGenerated):
//
//	go run ./cmd/vectorgen -kit conformance/v1
//
// Each vector becomes one JSON file under vectors/, with its inputs
// inline (octets in hex and in a readable form), its requirement ids, the
// SPEC.md decisions it relies on as flags, and for a negative vector the
// valid vector it mutates. The signing cases ask the implementation to
// sign; the harness judges their output by verifying it.

// kitVersion is the kit's format version: the folder's name.
const kitVersion = 1

type kitGen struct {
	src, out string
	reqs     *conformance.RequirementsFile
	// cited: the rows whose checks in the requirements file name a vector
	// by its test (handoff.TestVectors/NAME, TestStatusVectors/NAME): the
	// vector names them too, so that the file and the kit agree.
	cited map[string][]string
	files []conformance.ManifestFile
	cases map[string]bool
}

func makeKit(src, out, requirements, schema string) error {
	reqs, err := conformance.LoadRequirements(requirements)
	if err != nil {
		return err
	}
	k := &kitGen{src: src, out: out, reqs: reqs, cases: map[string]bool{}, cited: map[string][]string{}}
	for _, r := range reqs.Requirements {
		for _, c := range r.Checks {
			for _, prefix := range []string{"handoff.TestVectors/", "handoff.TestStatusVectors/"} {
				if name, ok := strings.CutPrefix(c, prefix); ok {
					k.cited[name] = append(k.cited[name], r.ID)
				}
			}
		}
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	for _, d := range []string{"vectors", "keys"} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return err
		}
	}
	var m manifest
	b, err := os.ReadFile(filepath.Join(src, "vectors.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for _, name := range []string{"trust.json"} {
		if err := k.copy(name, name); err != nil {
			return err
		}
	}
	keys, _ := filepath.Glob(filepath.Join(src, "keys", "*.jwk"))
	for _, f := range keys {
		if err := k.copy("keys/"+filepath.Base(f), "keys/"+filepath.Base(f)); err != nil {
			return err
		}
	}
	sb, err := os.ReadFile(schema)
	if err != nil {
		return err
	}
	k.write("vector.schema.json", sb)
	rb, err := jsonOut(conformance.RequirementsFile{Draft: reqs.Draft, Requirements: reqs.Requirements})
	if err != nil {
		return err
	}
	k.write("requirements.json", rb)
	byName := map[string]*vectorOut{}
	for i := range m.Vectors {
		byName[m.Vectors[i].Name] = &m.Vectors[i]
	}
	for i := range m.Vectors {
		if err := k.verifyCase(&m.Vectors[i], byName); err != nil {
			return fmt.Errorf("%s: %w", m.Vectors[i].Name, err)
		}
	}
	for i := range m.Statuses {
		// The harness presents the answered offer in a Handoff; one that
		// carries a status where its offer should be is not a Handoff
		// `handoff verify-status --from` takes (exit 2). TestStatusVectors
		// runs this vector.
		if m.Statuses[i].Name == "status-offer-is-status" {
			continue
		}
		if err := k.statusCase(&m.Statuses[i]); err != nil {
			return fmt.Errorf("%s: %w", m.Statuses[i].Name, err)
		}
	}
	if err := k.signCases(); err != nil {
		return err
	}
	man := conformance.Manifest{Kit: "handoff-conformance", Version: kitVersion, Draft: reqs.Draft,
		Generator: "go run ./cmd/vectorgen -kit conformance/v1", Files: k.files}
	sort.Slice(man.Files, func(i, j int) bool { return man.Files[i].Path < man.Files[j].Path })
	man.CorpusDigest = conformance.CorpusDigest(man.Files)
	mb, err := jsonOut(man)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "manifest.json"), mb, 0o644); err != nil {
		return err
	}
	fmt.Printf("vectorgen: kit %s: %d cases, corpus %s\n", out, len(k.cases), man.CorpusDigest)
	return nil
}

func jsonOut(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(v)
	return buf.Bytes(), err
}

func (k *kitGen) write(name string, b []byte) {
	if err := os.WriteFile(filepath.Join(k.out, filepath.FromSlash(name)), b, 0o644); err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	k.files = append(k.files, conformance.ManifestFile{Path: name, SHA256: hex.EncodeToString(sum[:])})
}

func (k *kitGen) copy(from, to string) error {
	b, err := os.ReadFile(filepath.Join(k.src, filepath.FromSlash(from)))
	if err != nil {
		return err
	}
	k.write(to, b)
	return nil
}

func (k *kitGen) read(name string) []byte {
	b, err := os.ReadFile(filepath.Join(k.src, filepath.FromSlash(name)))
	if err != nil {
		panic(err)
	}
	return b
}

// octets gives b in hex with a readable form: JSON and other UTF-8 text as
// it is, CBOR in diagnostic notation, null for neither.
func octets(b []byte) *conformance.Octets {
	o := &conformance.Octets{Hex: hex.EncodeToString(b)}
	if len(b) > 0 && utf8.Valid(b) && (bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")) || !bytes.ContainsAny(b, "\x00")) && b[0] < 0x80 {
		s := string(b)
		o.Diagnostic = &s
		return o
	}
	if d, err := (cbor.DiagOptions{ByteStringEncoding: cbor.ByteStringBase16Encoding, MaxNestedLevels: 256}).DiagMode(); err == nil {
		if s, err := d.Diagnose(b); err == nil {
			o.Diagnostic = &s
		}
	}
	return o
}

var (
	specFlag    = regexp.MustCompile(`\bD(10|[1-9])\b`)
	specSection = regexp.MustCompile(`\bSPEC ([1-6])\b`)
)

// flags are the parts of SPEC.md an expectation relies on where the draft
// is open: the decisions (SPEC-D1..D10) and sections (SPEC-1..6) its rule
// cites, the bounds (SPEC-BOUNDS), and D7 wherever a verdict's chain
// quality is "unchecked", a quality only D7 defines.
func flags(rule string, verdicts ...conformance.Verdict) []string {
	seen := map[string]bool{}
	for _, m := range specFlag.FindAllStringSubmatch(rule, -1) {
		seen["SPEC-D"+m[1]] = true
	}
	for _, m := range specSection.FindAllStringSubmatch(rule, -1) {
		seen["SPEC-"+m[1]] = true
	}
	if strings.Contains(rule, "Bounds") || strings.Contains(rule, "issue 13") {
		seen["SPEC-BOUNDS"] = true
		delete(seen, "SPEC-4") // the bounds are section 4's
	}
	for _, v := range verdicts {
		if v.Chain == "unchecked" {
			seen["SPEC-D7"] = true
		}
	}
	out := make([]string, 0, len(seen))
	for f := range seen {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// level is the strongest keyword among a case's requirements.
func (k *kitGen) level(ids []string) (string, error) {
	rank := map[string]int{"MUST": 5, "MUST NOT": 5, "REQUIRED": 5, "SHALL": 5, "SHALL NOT": 5, "SHOULD": 3, "SHOULD NOT": 3, "RECOMMENDED": 3, "NOT RECOMMENDED": 3, "MAY": 1, "OPTIONAL": 1}
	best, lvl := -1, ""
	if len(ids) == 0 {
		return "", fmt.Errorf("no requirement names this case")
	}
	for _, id := range ids {
		r := k.reqs.Find(id)
		if r == nil {
			return "", fmt.Errorf("requirement %s is not in the requirements file", id)
		}
		if rank[r.Level] > best {
			best, lvl = rank[r.Level], r.Level
		}
	}
	return lvl, nil
}

func (k *kitGen) add(c *conformance.Case) error {
	if k.cases[c.ID] {
		return fmt.Errorf("case %s twice", c.ID)
	}
	k.cases[c.ID] = true
	for _, id := range k.cited[c.ID] {
		if !slices.Contains(c.Requirements, id) {
			c.Requirements = append(c.Requirements, id)
		}
	}
	sort.Strings(c.Requirements)
	lvl, err := k.level(c.Requirements)
	if err != nil {
		return err
	}
	c.Level = lvl
	b, err := jsonOut(c)
	if err != nil {
		return err
	}
	k.write(pathpkg.Join("vectors", c.ID+".json"), b)
	return nil
}

// verdict is an expectation as `handoff verify` prints it (SPEC.md
// section 4): a reason only on a rejection.
func verdict(e expect) conformance.Verdict {
	v := conformance.Verdict{Result: e.Result, Reason: e.Reason, Chain: e.Chain, Offer: e.Offer}
	if e.Result != "rejected" {
		v.Reason = nil
	}
	return v
}

// offerForm says how a Handoff file carries its offer: "jws" (text with
// a dot), "cose", or "" when it cannot tell.
func offerForm(b []byte) string {
	var offer any
	if bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")) {
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			return ""
		}
		offer = m["offer"]
	} else {
		var m map[any]any
		if cbor.Unmarshal(b, &m) != nil {
			return ""
		}
		offer = m["offer"]
	}
	switch o := offer.(type) {
	case string:
		if strings.Contains(o, ".") {
			return "jws"
		}
		return "cose"
	case []byte:
		return "cose"
	}
	return ""
}

// base names the valid vector a negative vector mutates: the one of the
// same offer form and encoding, in a chain when it carries one.
func base(v *vectorOut, data []byte, byName map[string]*vectorOut) string {
	enc := strings.TrimPrefix(pathpkg.Ext(v.File), ".")
	f := offerForm(data)
	if f == "" {
		f = map[string]string{"json": "jws", "cbor": "cose"}[enc]
	}
	name := fmt.Sprintf("valid-%s-in-%s", f, enc)
	if strings.HasPrefix(v.Category, "chain") || v.Category == "cycle" || v.Category == "too-deep" {
		name = fmt.Sprintf("chain-full-03-%s-%s", f, enc)
	}
	if byName[name] == nil {
		return ""
	}
	return name
}

func (k *kitGen) verifyCase(v *vectorOut, byName map[string]*vectorOut) error {
	c := &conformance.Case{ID: v.Name, Kind: conformance.KindVerify, Category: v.Category, Description: v.Rule,
		Note: v.Note, Requirements: requirementsOf(v)}
	opts := &conformance.VerifyOptions{MaxChain: v.Options.MaxChain, RequireFullChain: v.Options.RequireFullChain,
		Origins: v.Options.Origins, RequireRefs: v.Options.RequireRefs, MemorySince: v.Options.MemorySince}
	if len(v.Options.RefSalts) > 0 {
		opts.RefSalts = v.Options.RefSalts
	}
	if len(v.Options.RefOctets) > 0 {
		opts.RefOctets = map[string]string{}
		for i, s := range v.Options.RefOctets {
			opts.RefOctets[i] = hex.EncodeToString([]byte(s))
		}
	}
	c.Inputs = conformance.Inputs{Trust: "trust.json", Me: v.Me, Options: opts}
	for _, s := range v.Before {
		c.Inputs.Deliveries = append(c.Inputs.Deliveries, conformance.Delivery{Now: s.Now, Dialog: s.Dialog, Handoff: *octets(k.read(s.File))})
		c.Expected.Deliveries = append(c.Expected.Deliveries, verdict(s.Expected))
	}
	data := k.read(v.File)
	c.Inputs.Deliveries = append(c.Inputs.Deliveries, conformance.Delivery{Now: v.Now, Dialog: v.Dialog, Handoff: *octets(data)})
	want := verdict(v.Expected)
	want.AlsoAccept = v.Expected.AlsoAccept
	c.Expected.Deliveries = append(c.Expected.Deliveries, want)
	c.Flags = flags(v.Rule, c.Expected.Deliveries...)
	if slices.ContainsFunc(c.Expected.Deliveries, func(d conformance.Verdict) bool { return d.Result != "accepted" }) {
		if c.DerivedFrom = base(v, data, byName); c.DerivedFrom == v.Name {
			c.DerivedFrom = ""
		}
		if c.Mutation = strings.TrimPrefix(strings.TrimPrefix(v.Name, v.Category), "-"); c.Mutation == "" {
			c.Mutation = v.Name
		}
	}
	return k.add(c)
}

// handoffOf wraps an offer element in a Handoff, as `handoff verify-status
// --from` reads it: a JSON Handoff for a JWS, a CBOR one for COSE octets.
func handoffOf(el []byte) []byte {
	if t := bytes.TrimSpace(el); utf8.Valid(t) && bytes.Contains(t, []byte(".")) {
		b, _ := json.Marshal(map[string]string{"offer": string(t)})
		return b
	}
	b, err := cbor.Marshal(map[string][]byte{"offer": el})
	if err != nil {
		panic(err)
	}
	return b
}

func (k *kitGen) statusCase(s *statusOut) error {
	c := &conformance.Case{ID: strings.TrimPrefix(s.Name, "status-"), Kind: conformance.KindVerifyStatus, Category: "status",
		Description: s.Rule, Flags: flags(s.Rule), Note: s.Note, Requirements: statusRequirements(s)}
	c.ID = "status-" + c.ID
	c.Inputs = conformance.Inputs{Trust: "trust.json", Now: s.Now, From: octets(handoffOf(k.read(s.Offer))), Status: octets(k.read(s.File))}
	c.Expected = conformance.Expected{Result: s.Expected.Result, State: s.Expected.State}
	if s.Expected.Result == "rejected" {
		c.Mutation = strings.TrimPrefix(s.Name, "status-")
		c.DerivedFrom = "status-accepted-jws" // the delegate's own status, as it should be
		if strings.HasSuffix(s.File, ".cose") || strings.HasSuffix(s.File, ".b64") {
			c.DerivedFrom = "status-completed-cose"
		}
	}
	return k.add(c)
}

// signCases ask the implementation to sign, each judged by verifying its
// output: offers that start a chain and offers that pass a received
// Handoff on (its chain and offer carried unchanged), statuses of each
// form, and D9's third-party wrong-audience status.
func (k *kitGen) signCases() error {
	valid := func(name string) *conformance.Octets {
		for _, ext := range []string{".json", ".cbor"} {
			if b, err := os.ReadFile(filepath.Join(k.src, name+ext)); err == nil {
				return octets(b)
			}
		}
		panic("no vector " + name)
	}
	type so struct {
		id, desc, key, iss, aud, form, from, chain string
		cbor                                       bool
		reqs                                       []string
	}
	for _, s := range []so{
		{"sign-offer-jws-json", "sign an offer that starts a chain: JWS in a JSON Handoff", "coder", C, T, "jws", "", "absent", false, reqSignOffer},
		{"sign-offer-cose-cbor", "sign an offer that starts a chain: COSE_Sign1 in a CBOR Handoff", "coder", C, T, "cose", "", "absent", true, reqSignOffer},
		{"sign-offer-pass-on-jws", "pass a received Handoff on: its offer becomes the chain, octets unchanged, prev its digest", "tester", T, relayID(2), "jws", "valid-jws-in-json", "full", false, reqPassOn},
		{"sign-offer-pass-on-cose-cbor", "pass a received COSE offer on in a CBOR Handoff", "tester", T, relayID(2), "cose", "valid-cose-in-cbor", "full", true, reqPassOn},
		{"sign-offer-pass-on-chain-cbor", "pass on a JSON Handoff whose chain holds three JWS elements, in a CBOR Handoff: every element's octets stay as received", "tester", T, relayID(2), "jws", "chain-full-03-jws-json", "full", true, reqPassOn},
		{"sign-offer-pass-on-unknown-members", "pass on a chain whose elements carry unknown members: a forwarder removes none (the octets stay as received)", "tester", T, relayID(2), "jws", "chain-unknown-members", "full", false, reqPassOn},
		{"sign-offer-pass-on-chain-json", "pass on a CBOR Handoff whose chain holds three COSE elements, in a JSON Handoff: every element's octets stay as received", "tester", T, relayID(2), "cose", "chain-full-03-cose-cbor", "full", false, reqPassOn},
	} {
		c := &conformance.Case{ID: s.id, Kind: conformance.KindSignOffer, Category: "sign", Description: s.desc, Requirements: s.reqs,
			Inputs: conformance.Inputs{Trust: "trust.json", Now: now,
				Sign: &conformance.SignInputs{Key: "keys/" + s.key + ".jwk", Form: s.form, CBOR: s.cbor, Iss: s.iss, Aud: s.aud, Dialog: dialogID, TTL: 300}},
			Expected: conformance.Expected{Result: "accepted", Chain: s.chain}}
		if s.from != "" {
			c.Inputs.From = valid(s.from)
		}
		if err := k.add(c); err != nil {
			return err
		}
	}
	type ss struct {
		id, desc, key, iss, form, state, reason string
		cbor                                    bool
		reqs                                    []string
	}
	for _, s := range []ss{
		{"sign-status-accepted-jws", "the delegate signs accepted (JWS)", "tester", "", "jws", "accepted", "", false, reqSignStatus},
		{"sign-status-completed-cose", "the delegate signs completed (COSE, base64url text)", "tester", "", "cose", "completed", "", false, reqSignStatus},
		{"sign-status-failed-cose-raw", "the delegate signs failed (raw COSE_Sign1 octets)", "tester", "", "cose", "failed", "policy", true, reqSignStatus},
		{"sign-status-rejected-jws", "the delegate signs rejected with a reason", "tester", "", "jws", "rejected", "stale", false, reqSignStatus},
		{"sign-status-canceled-by-delegator", "the delegator signs canceled (status.iss = offer.iss)", "coder", "", "jws", "canceled", "", false, reqSignStatus},
		{"sign-status-wrong-audience-third-party", "D9: the agent an offer reached by mistake signs rejected/wrong-audience to offer.iss", "planner", P, "jws", "rejected", "wrong-audience", false, reqSignStatus},
	} {
		c := &conformance.Case{ID: s.id, Kind: conformance.KindSignStatus, Category: "sign", Description: s.desc, Requirements: s.reqs,
			Inputs: conformance.Inputs{Trust: "trust.json", Now: now, From: valid("valid-jws-in-json"),
				Sign: &conformance.SignInputs{Key: "keys/" + s.key + ".jwk", Form: s.form, CBOR: s.cbor, Iss: s.iss, State: s.state, Reason: s.reason}},
			Expected: conformance.Expected{Result: "verified", State: s.state}}
		if strings.Contains(s.desc, "D9") {
			c.Flags = []string{"SPEC-D9"}
		}
		if err := k.add(c); err != nil {
			return err
		}
	}
	return nil
}
