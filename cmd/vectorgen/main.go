// Command vectorgen writes the test vectors of the handoff package:
//
//	go run ./cmd/vectorgen -out testdata/vectors
//
// It reads the fixed key set from OUT/keys/*.jwk (creating any missing key,
// once), writes OUT/trust.json, one file per vector (JSON Handoffs *.json,
// CBOR Handoffs *.cbor, signed statuses under OUT/status/), and the
// manifest OUT/vectors.json that vectors_test.go runs. Output is
// deterministic given the keys, except for ECDSA signature randomness;
// the files are committed, so the generator needs running only when the
// vectors change.
//
// The generator does not use the library it tests to encode or sign: it
// has its own JSON and CBOR writers (enc.go) and signs JWS and COSE by hand
// (sign.go), so that a vector can carry exactly the octets it means to,
// malformed or not, under a valid signature.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/quantumlearningmachines/handoff/trust"
)

// now is the receiving time of every vector unless one says otherwise:
// 2026-01-01T00:00:00Z.
const now int64 = 1767225600

type expect struct {
	Result string  `json:"result"`
	Reason *string `json:"reason"`
	Chain  string  `json:"chain"`
	Offer  *string `json:"offer"`
	Index  *int    `json:"index,omitempty"`
	Member *string `json:"member,omitempty"`
	// AlsoAccept: other reasons taken as right, only where SPEC.md leaves
	// two genuinely indistinguishable.
	AlsoAccept []string `json:"also_accept,omitempty"`
}

type options struct {
	MaxChain         int      `json:"max_chain"`
	RequireFullChain bool     `json:"require_full_chain"`
	Origins          []string `json:"origins,omitempty"` // with require_full_chain: who may start a chain
	// RequireRefs: every ref of the offer must verify (step 7), against
	// RefOctets: the octets of ref i (text), by index.
	RequireRefs bool              `json:"require_refs,omitempty"`
	RefOctets   map[string]string `json:"ref_octets,omitempty"`
	RefSalts    map[string]string `json:"ref_salts,omitempty"` // index to the salt of a salted-digest ref, in hex
	// MemorySince: the receiver's replay memory began at this Unix second.
	MemorySince int64 `json:"memory_since,omitempty"`
}

type step struct {
	File     string `json:"file"`
	Now      int64  `json:"now"`
	Dialog   string `json:"dialog,omitempty"`
	Expected expect `json:"expected"`
}

type vectorOut struct {
	Name     string  `json:"name"`
	Category string  `json:"category"`
	File     string  `json:"file"`
	Rule     string  `json:"rule"`
	Me       string  `json:"me"`
	Now      int64   `json:"now"`
	Dialog   string  `json:"dialog,omitempty"`
	Options  options `json:"options"`
	Before   []step  `json:"before,omitempty"`
	Expected expect  `json:"expected"`
	Note     string  `json:"note,omitempty"`
}

type statusOut struct {
	Name     string `json:"name"`
	File     string `json:"file"`
	Offer    string `json:"offer"`
	Rule     string `json:"rule"`
	Now      int64  `json:"now"`
	Expected struct {
		Result string  `json:"result"`
		Reason *string `json:"reason,omitempty"`
		State  string  `json:"state,omitempty"`
	} `json:"expected"`
	Note string `json:"note,omitempty"`
}

type manifest struct {
	Comment  []string    `json:"comment"`
	Trust    string      `json:"trust"`
	Skew     int         `json:"skew"`
	MaxLife  int         `json:"max_lifetime"`
	Agents   []agentOut  `json:"agents"`
	Vectors  []vectorOut `json:"vectors"`
	Statuses []statusOut `json:"statuses"`
}

type agentOut struct {
	ID      string `json:"id"`
	Key     string `json:"key"`
	Trusted bool   `json:"trusted"`
}

// V is a vector under construction.
type V struct {
	out      vectorOut
	data     []byte
	ext      string
	category string
}

func str(s string) *string { return &s }

// digestOf is the expected offer member: base64url SHA-256 of the octets.
func digestOf(b []byte) *string {
	h := sha256.Sum256(b)
	return str(b64.EncodeToString(h[:]))
}

func (v *V) accept(chain string) *V {
	v.out.Expected.Result, v.out.Expected.Reason, v.out.Expected.Chain = "accepted", nil, chain
	return v
}

func (v *V) reject(reason, chain string) *V {
	v.out.Expected.Result, v.out.Expected.Reason, v.out.Expected.Chain = "rejected", str(reason), chain
	return v
}

func (v *V) outcome(result, reason, chain string) *V {
	v.out.Expected.Result, v.out.Expected.Chain = result, chain
	v.out.Expected.Reason = nil
	if reason != "" {
		v.out.Expected.Reason = str(reason)
	}
	return v
}

// at sets the expected CheckError index (-1: the offer) and member prefix.
func (v *V) at(index int, member string) *V {
	v.out.Expected.Index = &index
	if member != "" {
		v.out.Expected.Member = &member
	}
	return v
}

func (v *V) me(id string) *V    { v.out.Me = id; return v }
func (v *V) at_now(t int64) *V  { v.out.Now = t; return v }
func (v *V) dialog(d string) *V { v.out.Dialog = d; return v }
func (v *V) maxChain(n int) *V  { v.out.Options.MaxChain = n; return v }
func (v *V) full() *V           { v.out.Options.RequireFullChain = true; return v }
func (v *V) note(s string) *V   { v.out.Note = s; return v }
func (v *V) alsoAccept(r string) *V {
	v.out.Expected.AlsoAccept = append(v.out.Expected.AlsoAccept, r)
	return v
}
func (v *V) offerDigest(b []byte) *V { v.out.Expected.Offer = digestOf(b); return v }
func (v *V) nullOffer() *V           { v.out.Expected.Offer = nil; return v }

func (v *V) before(file string, t int64, dialog string, e expect) *V {
	v.out.Before = append(v.out.Before, step{File: file, Now: t, Dialog: dialog, Expected: e})
	return v
}

type gen struct {
	dir      string
	agents   map[string]*agent // by key name
	byID     map[string]*agent
	vectors  []*V
	statuses []statusOut
	files    map[string]bool
	category string
}

func main() {
	out := flag.String("out", "testdata/vectors", "output directory")
	kit := flag.String("kit", "", "instead: make the conformance kit in `DIR` (e.g. conformance/v1) from the vectors in -out, without signing anything")
	requirements := flag.String("requirements", "conformance/requirements.yaml", "with -kit: the requirements file")
	schema := flag.String("schema", "conformance/vector.schema.json", "with -kit: the vector schema")
	flag.Parse()
	if *kit != "" {
		if err := makeKit(*out, *kit, *requirements, *schema); err != nil {
			fmt.Fprintln(os.Stderr, "vectorgen:", err)
			os.Exit(1)
		}
		return
	}
	g := &gen{dir: *out, agents: map[string]*agent{}, byID: map[string]*agent{}, files: map[string]bool{}}
	if err := g.run(); err != nil {
		fmt.Fprintln(os.Stderr, "vectorgen:", err)
		os.Exit(1)
	}
}

// The key set. Every agent but the outsider is trusted; the planner has a
// second key (rotation), and the sixteen relays of the long chains share
// one key, bound to each relay's id in trust.json.
var keyNames = []struct {
	name, id string
	trusted  bool
}{
	{"assistant", "https://assistant.example", true},
	{"planner", "https://planner.example", true},
	{"planner2", "https://planner.example", true},
	{"coder", "https://coder.example", true},
	{"tester", "https://tester.example", true},
	{"outsider", "https://outsider.example", false},
	{"relay", "", true},
}

const numRelays = 16

func relayID(i int) string { return fmt.Sprintf("https://relay%02d.example", i) }

func (g *gen) run() error {
	if err := os.MkdirAll(filepath.Join(g.dir, "keys"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(g.dir, "status"), 0o755); err != nil {
		return err
	}
	for _, k := range keyNames {
		a, err := g.loadKey(k.name)
		if err != nil {
			return err
		}
		a.id = k.id
		g.agents[k.name] = a
		if k.id != "" && g.byID[k.id] == nil {
			g.byID[k.id] = a
		}
	}
	for i := 1; i <= numRelays; i++ {
		r := *g.agents["relay"]
		r.id = relayID(i)
		g.byID[r.id] = &r
	}
	if err := g.writeTrust(); err != nil {
		return err
	}
	// Remove stale vector files so that the directory holds exactly what
	// the manifest lists.
	for _, pat := range []string{"*.json", "*.cbor", "status/*"} {
		old, _ := filepath.Glob(filepath.Join(g.dir, pat))
		for _, f := range old {
			if b := filepath.Base(f); b == "trust.json" {
				continue
			}
			os.Remove(f)
		}
	}
	g.cases()
	g.statusCases()
	return g.writeManifest()
}

func (g *gen) loadKey(name string) (*agent, error) {
	path := filepath.Join(g.dir, "keys", name+".jwk")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		k, err := trust.GenerateKey()
		if err != nil {
			return nil, err
		}
		if b, err = trust.MarshalPrivateJWK(k); err != nil {
			return nil, err
		}
		b = append(b, '\n')
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	k, _, err := trust.ParsePrivateJWK(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &agent{name: name, key: k, kid: trust.Thumbprint(&k.PublicKey)}, nil
}

func (g *gen) writeTrust() error {
	type jwk = json.RawMessage
	type ag struct {
		ID   string `json:"id"`
		Keys []jwk  `json:"keys"`
	}
	var agents []ag
	add := func(id string, a *agent) {
		pub, err := trust.MarshalPublicJWK(&a.key.PublicKey)
		if err != nil {
			panic(err)
		}
		for i := range agents {
			if agents[i].ID == id {
				agents[i].Keys = append(agents[i].Keys, pub)
				return
			}
		}
		agents = append(agents, ag{ID: id, Keys: []jwk{pub}})
	}
	for _, k := range keyNames {
		if k.trusted && k.id != "" {
			add(k.id, g.agents[k.name])
		}
	}
	for i := 1; i <= numRelays; i++ {
		add(relayID(i), g.agents["relay"])
	}
	b, err := json.MarshalIndent(map[string]any{"agents": agents}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(g.dir, "trust.json"), append(b, '\n'), 0o644)
}

// writeFile writes one data file; names are unique.
func (g *gen) writeFile(name string, data []byte) {
	if g.files[name] {
		panic("duplicate file " + name)
	}
	g.files[name] = true
	if err := os.WriteFile(filepath.Join(g.dir, name), data, 0o644); err != nil {
		panic(err)
	}
}

// newV registers a vector whose file is name.ext holding data.
func (g *gen) newV(name, rule, ext string, data []byte) *V {
	v := &V{data: data, ext: ext, category: g.category}
	v.out = vectorOut{Name: name, Category: g.category, File: name + "." + ext, Rule: rule, Me: T, Now: now,
		Options: options{MaxChain: 16}}
	g.vectors = append(g.vectors, v)
	return v
}

func (g *gen) writeManifest() error {
	m := manifest{
		Comment: []string{
			"Test vectors for draft-agent-handoff-01 as SPEC.md reads it. Generated by",
			"go run ./cmd/vectorgen -out testdata/vectors; see README.md here.",
			"Each vector: run a fresh Receiver (Options{Me: me, Keys: trust.json, Now: now,",
			"Limits.MaxChain: options.max_chain, RequireFullChain: options.require_full_chain},",
			"default skew 60 s and max lifetime 300 s) first on each 'before' file in order, then on",
			"'file' with 'dialog'; compare result, reason, chain quality and the offer digest",
			"(base64url SHA-256 of the offer's signed octets, or null). 'index' (-1: the offer,",
			"i: chain[i]) and 'member' (a prefix) name where the first failure is, when given.",
		},
		Trust: "trust.json", Skew: 60, MaxLife: 300,
	}
	for _, k := range keyNames {
		if k.id != "" {
			m.Agents = append(m.Agents, agentOut{ID: k.id, Key: "keys/" + k.name + ".jwk", Trusted: k.trusted})
		}
	}
	for i := 1; i <= numRelays; i++ {
		m.Agents = append(m.Agents, agentOut{ID: relayID(i), Key: "keys/relay.jwk", Trusted: true})
	}
	names := map[string]bool{}
	for _, v := range g.vectors {
		if names[v.out.Name] {
			return fmt.Errorf("duplicate vector name %s", v.out.Name)
		}
		names[v.out.Name] = true
		if v.out.Expected.Result == "" {
			return fmt.Errorf("vector %s has no expected result", v.out.Name)
		}
		g.writeFile(v.out.File, v.data)
		for _, s := range v.out.Before {
			if !g.files[s.File] {
				return fmt.Errorf("vector %s: before-file %s not written", v.out.Name, s.File)
			}
		}
		m.Vectors = append(m.Vectors, v.out)
	}
	m.Statuses = g.statuses
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(g.dir, "vectors.json"), buf.Bytes(), 0o644); err != nil {
		return err
	}
	counts := map[string]int{}
	for _, v := range g.vectors {
		counts[v.category]++
	}
	var cats []string
	for c := range counts {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	var parts []string
	for _, c := range cats {
		parts = append(parts, fmt.Sprintf("%s %d", c, counts[c]))
	}
	fmt.Printf("vectorgen: %d vectors (%s), %d status vectors\n", len(g.vectors), strings.Join(parts, ", "), len(g.statuses))
	return nil
}
