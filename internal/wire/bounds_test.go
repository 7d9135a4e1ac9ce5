package wire

// Issue 13, bounded decoding: hostile inputs of about 1 MiB (the Handoff
// bound) are refused or decoded with memory a small constant times their
// size and time linear in it, by each decoder: DecodeCBOR, DecodeJSON and
// the pull Reader (through Any, which is how unknown members are read).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// hostileSize is the size of each hostile input: the Handoff bound.
const hostileSize = 1 << 20

// fill pads b with octets c to hostileSize.
func fill(b []byte, c byte) []byte {
	return append(b, bytes.Repeat([]byte{c}, hostileSize-len(b))...)
}

// nestedHeads is n heads of the given initial byte (0xba: a map with a
// 4-octet count; 0x9a: an array), each claiming as many items as the rest
// of the input could hold were it alone, then zeros up to hostileSize.
func nestedHeads(ib byte, n, per int) []byte {
	var b []byte
	for i := range n {
		rest := hostileSize - (i+1)*5
		b = append(b, ib)
		b = binary.BigEndian.AppendUint32(b, uint32(rest/per))
	}
	return fill(b, 0)
}

// hostileShape is one hostile input and what its decoding must give.
type hostileShape struct {
	name string
	cbor bool
	in   []byte
	want error // nil: decodes; else errors.Is
}

func hostileShapes() []hostileShape {
	// A map of 90,000 keys, text ("k00000") or integers.
	var keysJ strings.Builder
	keysJ.WriteString("{")
	for i := range 90000 {
		if i > 0 {
			keysJ.WriteString(",")
		}
		fmt.Fprintf(&keysJ, `"k%05d":0`, i)
	}
	keysJ.WriteString("}")
	keysC := []byte{0xba, 0, 0x01, 0x5f, 0x90} // map of 90,000 pairs
	for i := range 90000 {
		keysC = append(keysC, 0x66, 'k')
		keysC = fmt.Appendf(keysC, "%05d", i)
		keysC = append(keysC, 0x00)
	}
	intKeys := []byte{0xba, 0, 0x01, 0x5f, 0x90}
	for i := range 90000 {
		intKeys = append(intKeys, 0x1a)
		intKeys = binary.BigEndian.AppendUint32(intKeys, uint32(i))
		intKeys = append(intKeys, 0x00)
	}
	// An array of as many empty arrays as fit: the densest tree CBOR
	// can ask for (one octet, one value).
	empties := fill(binary.BigEndian.AppendUint32([]byte{0x9a}, hostileSize-5), 0x80)
	emptyMaps := fill(binary.BigEndian.AppendUint32([]byte{0x9a}, hostileSize-5), 0xa0)
	tagged := binary.BigEndian.AppendUint32([]byte{0x9a}, (hostileSize-5)/2)
	for len(tagged)+2 <= hostileSize {
		tagged = append(tagged, 0xc0, 0x80) // tag 0 around an empty array
	}
	// Map keys that are tags nested MaxDepth-1 deep, as many as fit.
	var tagKeys []byte
	{
		one := bytes.Repeat([]byte{0xc5}, MaxDepth-2)
		n := (hostileSize - 5) / (len(one) + 6)
		tagKeys = binary.BigEndian.AppendUint32([]byte{0xba}, uint32(n))
		for i := range n {
			tagKeys = append(tagKeys, one...)
			tagKeys = append(tagKeys, 0x1a)
			tagKeys = binary.BigEndian.AppendUint32(tagKeys, uint32(i))
			tagKeys = append(tagKeys, 0x00)
		}
	}
	// Map keys that are arrays holding maps whose keys are arrays, and so
	// on, MaxDepth deep: each level's key is re-encoded for its identity.
	var deepKeys []byte
	{
		inner := []byte{0x00}
		for range (MaxDepth - 2) / 2 {
			inner = append(append([]byte{0x81, 0xa1}, inner...), 0x00) // [ {inner: 0} ]
		}
		n := (hostileSize - 5) / (len(inner) + 6)
		deepKeys = binary.BigEndian.AppendUint32([]byte{0xba}, uint32(n))
		for i := range n {
			deepKeys = append(deepKeys, 0x82)
			deepKeys = append(deepKeys, inner...)
			deepKeys = append(deepKeys, 0x1a)
			deepKeys = binary.BigEndian.AppendUint32(deepKeys, uint32(i))
			deepKeys = append(deepKeys, 0x00)
		}
	}
	return []hostileShape{
		{"cbor-nested-map-heads", true, nestedHeads(0xba, 128, 2), ErrSyntax},
		{"cbor-nested-array-heads", true, nestedHeads(0x9a, 128, 1), ErrSyntax},
		{"cbor-text-head-2^62", true, fill([]byte{0x7b, 0x40, 0, 0, 0, 0, 0, 0, 0}, 'a'), ErrSyntax},
		{"cbor-bytes-head-2^62", true, fill([]byte{0x5b, 0x40, 0, 0, 0, 0, 0, 0, 0}, 0), ErrSyntax},
		{"cbor-map-head-then-text-heads", true, fill([]byte{0xba, 0, 0x07, 0xff, 0xfd, 0x7a, 0, 0x0f, 0xff, 0xf0}, 0), ErrSyntax},
		{"cbor-array-of-empty-arrays", true, empties, nil},
		{"cbor-array-of-empty-maps", true, emptyMaps, nil},
		{"cbor-array-of-tagged-arrays", true, tagged, nil},
		{"cbor-90000-text-keys", true, keysC, nil},
		{"cbor-90000-integer-keys", true, intKeys, nil},
		{"cbor-nested-tag-keys", true, tagKeys, nil},
		{"cbor-nested-array-map-keys", true, deepKeys, nil},
		{"cbor-nested-arrays", true, fill(nil, 0x81), ErrNesting},
		{"json-200000-nested-arrays", false, []byte(strings.Repeat("[", 200000) + strings.Repeat("]", 200000)), ErrNesting},
		{"json-nested-objects", false, []byte(strings.Repeat(`{"a":`, 200000) + "0" + strings.Repeat("}", 200000)), ErrNesting},
		{"json-90000-keys", false, []byte(keysJ.String()), nil},
		{"json-90000-duplicate-last", false, []byte(keysJ.String()[:keysJ.Len()-1] + `,"k00000":1}`), ErrSyntax},
		{"json-array-of-empty-arrays", false, []byte("[" + strings.Repeat("[],", hostileSize/3-1) + "[]]"), nil},
	}
}

// allocated returns the octets f allocates (the less of two runs, so
// that a collection or another goroutine's allocation does not count).
func allocated(f func()) uint64 {
	var best uint64
	for i := range 2 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; i == 0 || n < best {
			best = n
		}
	}
	return best
}

// maxBytesPerOctet is the bound on what decoding may allocate per input
// octet, for any input. The densest trees cost up to 80: an array of
// empty maps (one map per octet) is up to two 16-octet slots per element
// over the array's growth (its room doubles from firstCap, never past
// its claimed count) and a 48-octet map per element; an array of empty
// arrays 32 + 24. The rest is headroom for the runtime's size classes.
// Hostile heads, refused, cost nothing: no room is made from a claim.
const maxBytesPerOctet = 96

// TestHostileInputsBounded: each hostile shape is decoded, or refused
// with the error its rule gives (a claim the input cannot hold: ErrSyntax,
// truncated; nesting past MaxDepth: ErrNesting), with at most
// maxBytesPerOctet allocated per input octet, by the tree decoders and by
// a Reader reading the input with Any (as it reads an unknown member).
func TestHostileInputsBounded(t *testing.T) {
	for _, s := range hostileShapes() {
		t.Run(s.name, func(t *testing.T) {
			decode := DecodeJSON
			if s.cbor {
				decode = DecodeCBOR
			}
			var err error
			n := allocated(func() { _, err = decode(s.in) })
			switch {
			case s.want == nil && err != nil:
				t.Fatalf("decode: %v, want a value", err)
			case s.want != nil && !errors.Is(err, s.want):
				t.Fatalf("decode: %v, want %v", err, s.want)
			}
			perOctet := float64(n) / float64(len(s.in))
			t.Logf("%d octets: %.2f B/octet (tree), err %v", len(s.in), perOctet, err)
			if perOctet > maxBytesPerOctet {
				t.Errorf("tree decoder allocated %d octets for %d: %.1f per octet, want at most %d", n, len(s.in), perOctet, maxBytesPerOctet)
			}
			var ok bool
			n = allocated(func() {
				var r Reader
				r.Reset(s.in, s.cbor, false)
				r.Any()
				ok = r.End()
			})
			if ok != (s.want == nil) {
				t.Errorf("Reader: End %v, want %v", ok, s.want == nil)
			}
			if perOctet := float64(n) / float64(len(s.in)); perOctet > maxBytesPerOctet {
				t.Errorf("Reader allocated %d octets for %d: %.1f per octet, want at most %d", n, len(s.in), perOctet, maxBytesPerOctet)
			}
		})
	}
}

// BenchmarkHostileInputs reports, for each hostile shape, the time and
// the octets allocated per input octet (B/octet) of DecodeJSON or
// DecodeCBOR.
func BenchmarkHostileInputs(b *testing.B) {
	for _, s := range hostileShapes() {
		b.Run(s.name, func(b *testing.B) {
			decode := DecodeJSON
			if s.cbor {
				decode = DecodeCBOR
			}
			b.SetBytes(int64(len(s.in)))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				decode(s.in)
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(len(s.in)), "B/octet")
		})
	}
}
