package conformance

import (
	"bytes"
	"fmt"
	"os"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// RequirementsFile is conformance/requirements.yaml (hand-written) and the
// kit's requirements.json (generated from it).
type RequirementsFile struct {
	Draft        string        `json:"draft" yaml:"draft"`
	Requirements []Requirement `json:"requirements" yaml:"requirements"`
}

// Requirement is one normative sentence of the draft (or one of its
// obligations, when a sentence has two).
type Requirement struct {
	ID      string `json:"id" yaml:"id"`
	Section string `json:"section" yaml:"section"`
	Level   string `json:"level" yaml:"level"`
	Text    string `json:"text" yaml:"text"` // verbatim
	// Checks are the tests of this implementation that check the row:
	// `<package dir>.<Test>[/<subtest>]`, as `go test -json` names them.
	Checks []string `json:"checks,omitempty" yaml:"checks,omitempty"`
	// Excluded says why the row is neither implemented nor tested here.
	Excluded string `json:"excluded,omitempty" yaml:"excluded,omitempty"`
	// Departure says where SPEC.md deliberately reads the row otherwise.
	Departure string `json:"departure,omitempty" yaml:"departure,omitempty"`
	Note      string `json:"note,omitempty" yaml:"note,omitempty"`
}

// Must reports whether the row is an absolute requirement (RFC 2119:
// MUST, MUST NOT, REQUIRED, SHALL, SHALL NOT).
func (r *Requirement) Must() bool {
	switch r.Level {
	case "MUST", "MUST NOT", "REQUIRED", "SHALL", "SHALL NOT":
		return true
	}
	return false
}

// Should reports whether the row is a recommendation (SHOULD, SHOULD NOT,
// RECOMMENDED, NOT RECOMMENDED).
func (r *Requirement) Should() bool {
	switch r.Level {
	case "SHOULD", "SHOULD NOT", "RECOMMENDED", "NOT RECOMMENDED":
		return true
	}
	return false
}

var (
	levels  = map[string]bool{"MUST": true, "MUST NOT": true, "REQUIRED": true, "SHALL": true, "SHALL NOT": true, "SHOULD": true, "SHOULD NOT": true, "RECOMMENDED": true, "NOT RECOMMENDED": true, "MAY": true, "OPTIONAL": true}
	idShape = regexp.MustCompile(`^R-[A-Z0-9]+-[0-9]+[a-z]?$`)
	// A check id: a package directory ("handoff" for the module root),
	// a dot, a top-level test, and optionally its subtests.
	checkShape = regexp.MustCompile(`^[a-z0-9_/.-]*[a-z0-9_-]\.Test[A-Za-z0-9_]*(/[^\s]+)?$`)
)

// LoadRequirements reads and checks the hand-written requirements file.
func LoadRequirements(name string) (*RequirementsFile, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var rf RequirementsFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := rf.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &rf, nil
}

// Check enforces the file's rules: unique ids of the shape R-AREA-n, a
// known keyword level, verbatim text present, checks or an exclusion for
// every MUST-level row and never both.
func (rf *RequirementsFile) Check() error {
	if len(rf.Requirements) == 0 {
		return fmt.Errorf("no requirements")
	}
	seen := map[string]bool{}
	for i := range rf.Requirements {
		r := &rf.Requirements[i]
		switch {
		case !idShape.MatchString(r.ID):
			return fmt.Errorf("row %d: id %q is not of the shape R-AREA-n", i+1, r.ID)
		case seen[r.ID]:
			return fmt.Errorf("%s: id repeated", r.ID)
		case !levels[r.Level]:
			return fmt.Errorf("%s: level %q is not an RFC 2119 keyword", r.ID, r.Level)
		case r.Text == "" || r.Section == "":
			return fmt.Errorf("%s: text and section are required", r.ID)
		case len(r.Checks) > 0 && r.Excluded != "":
			return fmt.Errorf("%s: has both checks and excluded", r.ID)
		case r.Must() && len(r.Checks) == 0 && r.Excluded == "":
			return fmt.Errorf("%s (%s): a %s row needs checks or `excluded: <reason>`", r.ID, r.Section, r.Level)
		}
		seen[r.ID] = true
		for _, c := range r.Checks {
			if !checkShape.MatchString(c) {
				return fmt.Errorf("%s: check %q is not <package dir>.<Test>[/<subtest>]", r.ID, c)
			}
		}
	}
	return nil
}

// Find returns the row with id, or nil.
func (rf *RequirementsFile) Find(id string) *Requirement {
	for i := range rf.Requirements {
		if rf.Requirements[i].ID == id {
			return &rf.Requirements[i]
		}
	}
	return nil
}
