package conformance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The kinds of case.
const (
	KindVerify       = "verify"        // run the receiving checks on each delivery in order
	KindVerifyStatus = "verify-status" // check one signed status against an offer (D9)
	KindSignOffer    = "sign-offer"    // sign an offer; the output is checked by verification
	KindSignStatus   = "sign-status"   // sign a status; the output is checked by verification
)

// Case is one vector of the kit: one JSON file under vectors/, as
// vector.schema.json describes it.
type Case struct {
	ID           string   `json:"id"`
	Kind         string   `json:"kind"`
	Requirements []string `json:"requirements"`
	Level        string   `json:"level"`
	Category     string   `json:"category"`
	Description  string   `json:"description"`
	// Flags name the SPEC.md decisions (D1-D10) an expectation relies on
	// where the draft is open: an implementation that reads the draft
	// otherwise fails only these.
	Flags       []string `json:"flags,omitempty"`
	DerivedFrom string   `json:"derivedFrom,omitempty"` // the valid vector a negative one mutates
	Mutation    string   `json:"mutation,omitempty"`    // what was changed, by name
	Note        string   `json:"note,omitempty"`
	Inputs      Inputs   `json:"inputs"`
	Expected    Expected `json:"expected"`
}

// Octets are input octets, in hex, with a readable form: the text itself
// for JSON and JWS, CBOR diagnostic notation (RFC 8949 section 8) for CBOR;
// null when they are neither well-formed JSON nor well-formed CBOR.
type Octets struct {
	Hex        string  `json:"hex"`
	Diagnostic *string `json:"diagnostic"`
}

// Bytes decodes o.Hex.
func (o *Octets) Bytes() ([]byte, error) {
	if o == nil {
		return nil, nil
	}
	return hex.DecodeString(o.Hex)
}

// Inputs are what a case gives the implementation. Trust and Key name
// files of the kit (a trust file as SPEC.md section 4 describes, a private
// JWK); the harness sends their contents.
type Inputs struct {
	Trust      string         `json:"trust"`
	Me         string         `json:"me,omitempty"`
	Options    *VerifyOptions `json:"options,omitempty"`
	Deliveries []Delivery     `json:"deliveries,omitempty"` // verify
	From       *Octets        `json:"from,omitempty"`       // verify-status, sign-*: a Handoff carrying the offer answered or passed on
	Status     *Octets        `json:"status,omitempty"`     // verify-status
	Now        int64          `json:"now,omitempty"`        // verify-status, sign-*
	Sign       *SignInputs    `json:"sign,omitempty"`       // sign-*
}

// VerifyOptions configure the receiver of a verify case; absent members
// take SPEC.md's defaults (D4: skew 60 s, lifetime 300 s, chain 16).
type VerifyOptions struct {
	Skew             *int64   `json:"skew,omitempty"`
	MaxLifetime      *int64   `json:"maxLifetime,omitempty"`
	MaxChain         int      `json:"maxChain,omitempty"`
	RequireFullChain bool     `json:"requireFullChain,omitempty"`
	Origins          []string `json:"origins,omitempty"`
	// RequireRefs: every ref of the offer must verify (step 7), against
	// RefOctets: the octets of ref i, as hex, by index.
	RequireRefs bool              `json:"requireRefs,omitempty"`
	RefOctets   map[string]string `json:"refOctets,omitempty"`
	// RefSalts: the salt of a "salted-digest" ref i, as hex, by index.
	RefSalts map[string]string `json:"refSalts,omitempty"`
	// MemorySince: the receiver's replay memory began at this Unix
	// second (draft "Freshness and Replay": a delegate that lost its
	// memory rejects with "replay" what it cannot tell it has not seen).
	MemorySince int64 `json:"memorySince,omitempty"`
}

// Delivery is one Handoff received, at Now, in a host message whose
// dialog id is Dialog ("" when the host carries none: step 5 not checked).
type Delivery struct {
	Now     int64  `json:"now"`
	Dialog  string `json:"dialog,omitempty"`
	Handoff Octets `json:"handoff"`
}

// SignInputs ask for one signed offer or status.
type SignInputs struct {
	Key    string `json:"key"`              // a kit file: the signer's private JWK
	Form   string `json:"form"`             // "jws" or "cose"
	CBOR   bool   `json:"cbor,omitempty"`   // offer: a CBOR Handoff; status: raw COSE octets
	Iss    string `json:"iss,omitempty"`    // offer: required; status: the sender when not the default
	Aud    string `json:"aud,omitempty"`    // offer
	Dialog string `json:"dialog,omitempty"` // offer
	TTL    int64  `json:"ttl,omitempty"`    // offer
	State  string `json:"state,omitempty"`  // status
	Reason string `json:"reason,omitempty"` // status
	Detail string `json:"detail,omitempty"` // status
}

// Expected is a case's expectation.
type Expected struct {
	// Deliveries: verify, one verdict per delivery.
	Deliveries []Verdict `json:"deliveries,omitempty"`
	// Result: verify-status "verified" | "rejected"; sign-offer "accepted"
	// (the output, received by its aud at now, is accepted); sign-status
	// "verified".
	Result string `json:"result,omitempty"`
	State  string `json:"state,omitempty"` // verify-status, sign-status: the status's state when verified
	Chain  string `json:"chain,omitempty"` // sign-offer: the chain quality its receiver finds
}

// Verdict is what a receiver answers for one delivery, as `handoff
// verify` prints it (SPEC.md section 4).
type Verdict struct {
	Result string  `json:"result"`
	Reason *string `json:"reason"`
	Chain  string  `json:"chain"`
	Offer  *string `json:"offer"`
	// AlsoAccept lists other reasons taken as a pass, only where SPEC.md
	// leaves two genuinely indistinguishable.
	AlsoAccept []string `json:"alsoAccept,omitempty"`
}

// Manifest lists every file of the kit with its SHA-256; CorpusDigest is
// the SHA-256 of the lines "<sha256 hex>  <path>\n", sorted by path.
type Manifest struct {
	Kit          string         `json:"kit"`
	Version      int            `json:"version"`
	Draft        string         `json:"draft"`
	Generator    string         `json:"generator"`
	Files        []ManifestFile `json:"files"`
	CorpusDigest string         `json:"corpusDigest"`
}

// ManifestFile is one file of the kit.
type ManifestFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// CorpusDigest computes the digest of a file list, as Manifest says.
func CorpusDigest(files []ManifestFile) string {
	sorted := append([]ManifestFile(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	h := sha256.New()
	for _, f := range sorted {
		fmt.Fprintf(h, "%s  %s\n", f.SHA256, f.Path)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Kit is a loaded kit: its cases in file order, its requirements and the
// files cases name.
type Kit struct {
	Dir          string
	Manifest     Manifest
	Cases        []*Case
	Requirements []Requirement
	files        map[string][]byte
}

// File returns the contents of a kit file that a case names.
func (k *Kit) File(name string) ([]byte, error) {
	b, ok := k.files[name]
	if !ok {
		return nil, fmt.Errorf("the kit has no file %q", name)
	}
	return b, nil
}

// maxKitFile bounds what the loader reads of one kit file.
const maxKitFile = 16 << 20

// LoadKit reads the kit in dir: every file the manifest lists, each
// checked against its SHA-256, the corpus digest, and no file under dir
// that the manifest leaves out (a stray vector would go unrun).
func LoadKit(dir string) (*Kit, error) {
	mb, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("conformance kit %s: %w (the kit is the folder conformance/v1 of the repository, not built into the binary: run from a checkout, or give --kit its path)", dir, err)
	}
	k := &Kit{Dir: dir, files: map[string][]byte{}}
	if err := strictJSON(mb, &k.Manifest); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "manifest.json"), err)
	}
	if got := CorpusDigest(k.Manifest.Files); got != k.Manifest.CorpusDigest {
		return nil, fmt.Errorf("%s: corpusDigest %s does not match its file list (%s)", filepath.Join(dir, "manifest.json"), k.Manifest.CorpusDigest, got)
	}
	listed := map[string]bool{"manifest.json": true}
	for _, f := range k.Manifest.Files {
		if f.Path != path.Clean(f.Path) || strings.HasPrefix(f.Path, "../") || path.IsAbs(f.Path) || listed[f.Path] {
			return nil, fmt.Errorf("manifest: bad or repeated path %q", f.Path)
		}
		listed[f.Path] = true
		b, err := readAtMost(filepath.Join(dir, filepath.FromSlash(f.Path)), maxKitFile)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != f.SHA256 {
			return nil, fmt.Errorf("%s: SHA-256 differs from the manifest's: the kit was changed by hand or is incomplete", f.Path)
		}
		k.files[f.Path] = b
	}
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel = filepath.ToSlash(rel); !listed[rel] {
			return fmt.Errorf("%s is not in the manifest: every kit file is listed, so that none goes unrun", rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if b, ok := k.files["requirements.json"]; ok {
		var rf RequirementsFile
		if err := strictJSON(b, &rf); err != nil {
			return nil, fmt.Errorf("requirements.json: %w", err)
		}
		k.Requirements = rf.Requirements
	}
	ids := map[string]bool{}
	for _, f := range k.Manifest.Files {
		if !strings.HasPrefix(f.Path, "vectors/") {
			continue
		}
		var c Case
		if err := strictJSON(k.files[f.Path], &c); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		if want := "vectors/" + c.ID + ".json"; f.Path != want || ids[c.ID] {
			return nil, fmt.Errorf("%s: its id %q is repeated or does not match its file name", f.Path, c.ID)
		}
		ids[c.ID] = true
		k.Cases = append(k.Cases, &c)
	}
	if len(k.Cases) == 0 {
		return nil, fmt.Errorf("conformance kit %s has no vectors", dir)
	}
	return k, nil
}

func readAtMost(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d octets", name, max)
	}
	return b, nil
}

// strictJSON decodes one JSON value into v, refusing unknown members and
// trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}
