package sqlhop

import (
	"bytes"
	"slices"
	"testing"

	"github.com/quantumlearningmachines/handoff"
)

// The chain column's value is read back as written: nil (NULL) as nil,
// an empty chain as an empty one (one octet, never an empty value),
// every element's octets and form in order.
func TestChainValueRoundTrips(t *testing.T) {
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	for _, c := range []struct {
		name  string
		chain [][]byte
		forms []handoff.Form
		size  int // len of the value; -1: nil
	}{
		{"none", nil, nil, -1},
		{"empty", [][]byte{}, []handoff.Form{}, 1},
		{"one empty element", [][]byte{{}}, []handoff.Form{handoff.FormInvalid}, 3},
		{"mixed", [][]byte{every, []byte("a.b.c"), bytes.Repeat(every, 300)},
			[]handoff.Form{handoff.FormCOSE, handoff.FormJWS, handoff.FormCOSE}, 1 + (1 + 2 + 256) + (1 + 1 + 5) + (1 + 3 + 256*300)},
	} {
		v := chainValue(c.chain, c.forms)
		if (v == nil) != (c.size < 0) || c.size >= 0 && len(v) != c.size {
			t.Errorf("%s: value of %d octets (nil %v); want %d", c.name, len(v), v == nil, c.size)
		}
		chain, forms, err := parseChain(v)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if (chain == nil) != (c.chain == nil) || (forms == nil) != (c.forms == nil) ||
			!slices.EqualFunc(chain, c.chain, bytes.Equal) || !slices.Equal(forms, c.forms) {
			t.Errorf("%s: read back %q %v; want %q %v", c.name, chain, forms, c.chain, c.forms)
		}
		// The elements do not overlap: appending to one leaves the next.
		if len(chain) > 1 {
			chain[0] = append(chain[0], 'x')
			if !bytes.Equal(chain[1], c.chain[1]) {
				t.Errorf("%s: appending to the first element changed the second", c.name)
			}
		}
	}
}

// A value that chainValue does not write is refused, never read as
// another chain.
func TestChainValueCorrupt(t *testing.T) {
	good := chainValue([][]byte{[]byte("ab"), []byte("c")}, []handoff.Form{handoff.FormJWS, handoff.FormCOSE})
	for _, c := range []struct {
		name string
		v    []byte
	}{
		{"empty value", []byte{}},
		{"count cut", []byte{0x80}},
		{"count beyond the octets", []byte{3, 0, 0, 0, 0}},
		{"huge count", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"overlong count", []byte{0x80, 0x00}},
		{"unknown form", []byte{1, 3, 0}},
		{"length past the end", []byte{1, 0, 2, 'a'}},
		{"overlong length", []byte{1, 0, 0x81, 0x00, 'a'}},
		{"element missing", good[:len(good)-2]},
		{"cut", good[:len(good)-1]},
		{"trailing octet", append(slices.Clone(good), 0)},
	} {
		if chain, forms, err := parseChain(c.v); err == nil {
			t.Errorf("%s: %x read as %q %v; want an error", c.name, c.v, chain, forms)
		}
	}
}

// FuzzChainValue: whatever parseChain accepts, chainValue writes again
// octet for octet (one encoding per chain), and no value makes it panic.
func FuzzChainValue(f *testing.F) {
	f.Add([]byte{0})
	f.Add(chainValue([][]byte{[]byte("ab"), {}}, []handoff.Form{handoff.FormJWS, handoff.FormInvalid}))
	f.Add([]byte{0x80, 0x00})
	f.Fuzz(func(t *testing.T, v []byte) {
		chain, forms, err := parseChain(v)
		if err != nil {
			return
		}
		if again := chainValue(chain, forms); !bytes.Equal(again, v) {
			t.Fatalf("parseChain(%x) then chainValue = %x", v, again)
		}
	})
}
