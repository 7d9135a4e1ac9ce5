package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/quantumlearningmachines/handoff"
	"github.com/quantumlearningmachines/handoff/refs"
)

// cmdRef is `handoff ref [--salted] [--loc URI] FILE`: a ContextRef over
// the file's octets, and with --salted the salt that goes with the octets
// (never into an element).
func cmdRef(e env, args []string) error {
	fs := newFlags("ref", e)
	salted := fs.Bool("salted", false, "make a salted-digest reference with a new random salt")
	loc := fs.String("loc", "", "where the delegate may fetch the octets (an absolute URI)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one FILE")
	}
	// The project's RFC 3986 check, not url.Parse, which lets spaces,
	// quotes and backslashes through. It also refuses a fragment and an
	// IP-literal host ("[...]"), which a loc to fetch from does not need.
	if *loc != "" && !handoff.IsAbsoluteURI(*loc) {
		return usagef("--loc %q is not an RFC 3986 absolute URI", *loc)
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return err
	}
	defer f.Close()
	var salt []byte
	kind := handoff.KindDigest
	if *salted {
		if salt, err = refs.NewSalt(); err != nil {
			return err
		}
		kind = handoff.KindSaltedDigest
	}
	dig, err := refs.DigestReader(salt, f)
	if err != nil {
		return fmt.Errorf("%s: %w", pos[0], err)
	}
	b, err := refs.RefFile{Ref: handoff.ContextRef{Kind: kind, Dig: dig, Loc: *loc}, Salt: salt}.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(append(b, '\n'))
	return err
}

// readRefFile reads a file `handoff ref` wrote, for offer --add-ref.
func readRefFile(path string) (handoff.ContextRef, error) {
	b, err := readBounded(path, refs.MaxRefFile)
	if err != nil {
		return handoff.ContextRef{}, err
	}
	f, err := refs.ParseRefFile(b)
	if err != nil {
		return handoff.ContextRef{}, fmt.Errorf("%s: %w", path, err)
	}
	return f.Ref, nil
}

// maxRefOctets bounds a --ref-octets file: the CLI holds the octets in
// memory to check them.
const maxRefOctets = 64 << 20

// parseIndexed splits a flag value INDEX=VALUE: INDEX a reference's
// position in the outer offer's refs, 0-based, in plain decimal (no sign,
// no leading zeros), below the refs bound; VALUE not empty.
func parseIndexed(v string) (int, string, error) {
	is, val, ok := strings.Cut(v, "=")
	if !ok {
		return 0, "", errors.New("not INDEX=VALUE")
	}
	if is == "" || len(is) > 1 && is[0] == '0' || strings.TrimLeft(is, "0123456789") != "" {
		return 0, "", fmt.Errorf("INDEX %q is not a 0-based decimal index", is)
	}
	i, err := strconv.Atoi(is)
	if err != nil || i >= handoff.DefaultLimits().MaxRefs {
		return 0, "", fmt.Errorf("INDEX %s is out of range: an offer has at most %d refs (0-%d)", is, handoff.DefaultLimits().MaxRefs, handoff.DefaultLimits().MaxRefs-1)
	}
	if val == "" {
		return 0, "", errors.New("the VALUE after = is empty")
	}
	return i, val, nil
}

// indexedFlag is a repeatable INDEX=VALUE flag; an INDEX given twice is an
// error. parse turns each VALUE into what the map keeps.
type indexedFlag struct {
	vals  map[int]string
	parse func(string) error // checks VALUE's form; nil: any
}

func (f *indexedFlag) String() string { return "" }
func (f *indexedFlag) Set(v string) error {
	i, val, err := parseIndexed(v)
	if err != nil {
		return err
	}
	if _, dup := f.vals[i]; dup {
		return fmt.Errorf("INDEX %d is given twice", i)
	}
	if f.parse != nil {
		if err := f.parse(val); err != nil {
			return fmt.Errorf("INDEX %d: %w", i, err)
		}
	}
	if f.vals == nil {
		f.vals = map[int]string{}
	}
	f.vals[i] = val
	return nil
}

// material reads the --ref-octets files and decodes the --ref-salt values.
func material(octets, salts *indexedFlag) (*refs.Material, error) {
	m := &refs.Material{Octets: map[int][]byte{}, Salts: map[int][]byte{}}
	for i, path := range octets.vals {
		b, err := readBounded(path, maxRefOctets)
		if err != nil {
			return nil, fmt.Errorf("--ref-octets %d=%s: %w", i, path, err)
		}
		m.Octets[i] = b
	}
	for i, s := range salts.vals {
		b, err := refs.ParseSalt(s)
		if err != nil {
			return nil, fmt.Errorf("--ref-salt %d: %w", i, err)
		}
		m.Salts[i] = b
	}
	return m, nil
}
