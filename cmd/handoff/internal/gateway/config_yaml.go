package gateway

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// lineMap gives the line of each key path ("" is the document).
type lineMap map[string]int

// readYAML turns the document into the values JSON Schema validates
// (map[string]any, []any, string, int64, float64, bool, nil), noting
// the line of each. It refuses what a configuration has no use for and
// YAML would make subtle: several documents, aliases (and their
// expansion), duplicate keys, keys that are not text, custom tags.
func readYAML(b []byte) (any, lineMap, Problems) {
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, Problems{{Msg: "the file is empty"}}
		}
		return nil, nil, Problems{yamlProblem(err)}
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, nil, Problems{{Line: next.Line, Msg: "a second YAML document: the configuration is one document"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, nil, Problems{yamlProblem(err)}
	}
	r := yamlReader{lines: lineMap{}}
	v := r.value(&root, "")
	return v, r.lines, r.ps
}

// yamlProblem turns the YAML parser's "yaml: line N: what" into a Problem.
// yaml.v3 counts lines from 1 in a scanner's errors but from 0 in a
// parser's (and then leaves out "line 0"): the parser's problems are
// known by their text, and their line is set right here.
func yamlProblem(err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, what, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, msg = l, what
			}
		}
	}
	if yamlParserProblems[msg] {
		line++
	}
	return Problem{Line: line, Msg: "not YAML: " + msg}
}

// yamlParserProblems are the problems yaml.v3's parser (parserc.go)
// reports, with a line counted from 0.
var yamlParserProblems = map[string]bool{
	"did not find expected ',' or ']'": true, "did not find expected ',' or '}'": true,
	"did not find expected '-' indicator": true, "did not find expected <document start>": true,
	"did not find expected <stream-start>": true, "did not find expected key": true,
	"did not find expected node content": true, "found duplicate %TAG directive": true,
	"found duplicate %YAML directive": true, "found incompatible YAML document": true, "found undefined tag handle": true,
}

type yamlReader struct {
	lines lineMap
	ps    Problems
	depth int
}

func (r *yamlReader) fail(path string, line int, format string, args ...any) {
	r.ps = append(r.ps, Problem{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

func (r *yamlReader) value(n *yaml.Node, path string) any {
	r.lines[path] = n.Line
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > 32 {
		r.fail(path, n.Line, "nested more than 32 deep")
		return nil
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			r.fail(path, n.Line, "the file is empty")
			return nil
		}
		return r.value(n.Content[0], path)
	case yaml.AliasNode:
		r.fail(path, n.Line, "an alias (*%s): write the value out", n.Value)
		return nil
	}
	if n.Anchor != "" {
		// Refused like the aliases it exists for: one value, one place.
		r.fail(path, n.Line, "an anchor (&%s): anchors and aliases are not taken; write each value out", n.Anchor)
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "") {
				r.fail(path, k.Line, "a key that is not text")
				continue
			}
			if k.Value == "<<" {
				r.fail(path, k.Line, "a merge key (<<): write the keys out")
				continue
			}
			p := join(path, k.Value)
			if _, dup := m[k.Value]; dup {
				r.fail(p, k.Line, "given twice (first at line %d)", r.lines[p])
				continue
			}
			m[k.Value] = r.value(v, p)
			r.lines[p] = k.Line // a key's line is where it is written
		}
		return m
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			s[i] = r.value(c, fmt.Sprintf("%s[%d]", path, i))
		}
		return s
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return n.Value
		case "!!null":
			return nil
		case "!!bool":
			var v bool
			if err := n.Decode(&v); err != nil {
				r.fail(path, n.Line, "%v", err)
			}
			return v
		case "!!int":
			var v int64
			if err := n.Decode(&v); err != nil {
				r.fail(path, n.Line, "an integer out of range: %s", n.Value)
			}
			return v
		case "!!float":
			var v float64
			if err := n.Decode(&v); err != nil {
				r.fail(path, n.Line, "%v", err)
			}
			return v
		}
		r.fail(path, n.Line, "the tag %s: the configuration uses plain YAML values", n.Tag)
		return nil
	}
	r.fail(path, n.Line, "an unexpected YAML node")
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
