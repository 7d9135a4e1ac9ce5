package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"math/big"
	"slices"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
	"github.com/x448/float16"
)

var encMode = func() cbor.EncMode {
	m, err := cbor.EncOptions{
		Sort:          cbor.SortCoreDeterministic,
		IndefLength:   cbor.IndefLengthForbidden,
		ShortestFloat: cbor.ShortestFloatNone,
		BigIntConvert: cbor.BigIntConvertShortest,
		Time:          cbor.TimeUnixDynamic,
		TimeTag:       cbor.EncTagRequired,
	}.EncMode()
	if err != nil {
		panic(err)
	}
	return m
}()

// DecodeCBOR strictly decodes one CBOR data item: well-formed (RFC 8949
// section 5.3.1), definite lengths only, text valid UTF-8, no duplicate map
// keys (compared by value, so 1 and a non-minimal 1 are the same key),
// nesting at most MaxDepth, no trailing data. Non-minimal integer heads
// are accepted.
//
// Lengths are bounded by the octets present, not trusted (issue 13): the
// whole input is one budget, from which every array element and map key
// or value an open array or map still claims holds one octet, and a
// string its octets, so that a head claiming more than the rest of the
// input can hold (counting what the heads around it already claim) is
// refused as truncated when it is read. Nothing is allocated from a
// claimed count beyond a small first room (firstCap); a decoded array or
// map grows with the items actually read. Decoding costs time linear in
// len(b), and memory a small constant times len(b).
func DecodeCBOR(b []byte) (any, error) {
	d := cborDecoder{b: b}
	v, err := d.value(0)
	if err != nil {
		return nil, fmt.Errorf("%w: CBOR: %w", ErrSyntax, err)
	}
	if d.off != len(b) {
		return nil, fmt.Errorf("%w: CBOR: %d octets of trailing data", ErrSyntax, len(b)-d.off)
	}
	return v, nil
}

type cborDecoder struct {
	b   []byte
	off int
	s   string // b as a string, or ""; texts are then its substrings

	// claimed is the octets that the open arrays and maps still claim
	// beyond off: one for each element or map key or value not yet begun
	// (each has a head of at least one octet). A claim, a string or a
	// head must fit in len(b) - off - claimed, the budget; one that does
	// not is truncated input whatever follows.
	claimed int

	// keys is the state of decoding inside map keys that are arrays,
	// maps or tags; allocated when first needed, so that the Reader that
	// embeds a cborDecoder stays small.
	keys *keyState

	// discard is validation only: every check is made (duplicate keys
	// included: keys are still decoded), but no value outside a key is
	// kept, so that checking input costs no tree (see CheckCBOR).
	discard bool
}

// CheckCBOR reports the error DecodeCBOR would give for b, without
// building the value tree: validation within a small constant of memory
// per map (its keys), whatever the rest of b holds.
func CheckCBOR(b []byte) error {
	d := cborDecoder{b: b, discard: true}
	if _, err := d.value(0); err != nil {
		return fmt.Errorf("%w: CBOR: %w", ErrSyntax, err)
	}
	if d.off != len(b) {
		return fmt.Errorf("%w: CBOR: %d octets of trailing data", ErrSyntax, len(b)-d.off)
	}
	return nil
}

// keyState is what computing keyDigests needs, one of each per depth (at
// most one array, map or tag is open at a depth): reused, so that a
// digest costs no allocation of its own.
type keyState struct {
	hashers [MaxDepth]hash.Hash
	digests [MaxDepth][2]keyDigest // an array's element, a map's key and value
	entries [MaxDepth][]keyEntry   // a map's entries
	scratch [sha256.Size]byte      // for writeHead and sum
}

// keyEntry is a map entry's key and value digests.
type keyEntry struct{ k, v keyDigest }

// keyState returns d.keys, allocating it.
func (d *cborDecoder) keyState() *keyState {
	if d.keys == nil {
		d.keys = new(keyState)
	}
	return d.keys
}

// hasher returns the reset hasher of depth.
func (ks *keyState) hasher(depth int) hash.Hash {
	h := ks.hashers[depth]
	if h == nil {
		h = sha256.New()
		ks.hashers[depth] = h
	}
	h.Reset()
	return h
}

// sum sets *id to h's digest.
func (ks *keyState) sum(h hash.Hash, id *keyDigest) {
	copy(id[:], h.Sum(ks.scratch[:0]))
}

// writeHead writes a kind octet and a count or number to h.
func (ks *keyState) writeHead(h hash.Hash, kind byte, n uint64) {
	b := ks.scratch[:9]
	b[0] = kind
	binary.BigEndian.PutUint64(b[1:], n)
	h.Write(b)
}

// emptyBytes and emptyArray are the decoded empty byte string and empty
// array, boxed once: every empty one decodes to these (nothing can be
// written into a slice of capacity 0), so that an input of empty values,
// one octet each, does not cost an allocation per octet.
var (
	emptyBytes any = []byte{}
	emptyArray any = []any{}
)

// firstCap is the most room an array or map is given from its claimed
// count before any of its items is read: a count that fits the budget
// still says nothing about what follows (issue 13: no decoder allocates
// from a claimed length). Past it, appendCapped doubles the room.
const firstCap = 64

// appendCapped appends v to a, doubling a's capacity when it is full but
// never past max, the claimed count: an array of n items costs at most
// 2n slots over its growth (append's own growth, by a quarter for large
// slices, would cost five times n).
func appendCapped[T any](a []T, v T, max uint64) []T {
	if len(a) == cap(a) {
		c := uint64(2 * cap(a))
		if c > max {
			c = max
		}
		if c <= uint64(len(a)) {
			c = uint64(len(a)) + 1 // more items than claimed cannot happen; be safe
		}
		a = append(make([]T, 0, c), a...)
	}
	return append(a, v)
}

// free is the budget: the octets after off that no open array or map
// claims.
func (d *cborDecoder) free() int { return len(d.b) - d.off - d.claimed }

// claim reserves per octets for each of n items of an array (per 1) or
// map (per 2) just opened, or fails when the budget cannot hold them.
func (d *cborDecoder) claim(n uint64, per int) bool {
	f := d.free()
	if f < 0 || n > uint64(f/per) {
		return false
	}
	d.claimed += int(n) * per
	return true
}

var errTruncated = errors.New("truncated")

// head reads an initial byte and its argument.
func (d *cborDecoder) head() (major, ai byte, arg uint64, err error) {
	if d.off >= len(d.b) {
		return 0, 0, 0, errTruncated
	}
	ib := d.b[d.off]
	d.off++
	major, ai = ib>>5, ib&0x1f
	switch {
	case ai < 24:
		return major, ai, uint64(ai), nil
	case ai <= 27:
		n := 1 << (ai - 24)
		if len(d.b)-d.off < n {
			return 0, 0, 0, errTruncated
		}
		for _, c := range d.b[d.off : d.off+n] {
			arg = arg<<8 | uint64(c)
		}
		d.off += n
		return major, ai, arg, nil
	case ai == 31:
		return 0, 0, 0, errors.New("indefinite length")
	}
	return 0, 0, 0, fmt.Errorf("reserved additional information %d", ai)
}

func (d *cborDecoder) take(n uint64) ([]byte, error) {
	if f := d.free(); f < 0 || n > uint64(f) {
		return nil, errTruncated
	}
	s := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return s, nil
}

func (d *cborDecoder) value(depth int) (any, error) { return d.item(depth, nil) }

// keyDigest is the identity of a value inside a map key that is an array,
// a map or a tag (see mapValue): a SHA-256 over its kind and the digests
// of its parts, computed as the value is decoded, so that each part is
// looked at once however deeply keys nest inside keys.
type keyDigest [sha256.Size]byte

// item decodes one value; with id, it also sets *id to the value's
// keyDigest.
func (d *cborDecoder) item(depth int, id *keyDigest) (any, error) {
	major, ai, arg, err := d.head()
	if err != nil {
		return nil, err
	}
	if major >= 4 && major <= 6 && depth >= MaxDepth {
		return nil, errNesting
	}
	if d.discard && id == nil {
		return nil, d.skip(major, ai, arg, depth)
	}
	var v any
	switch major {
	case 0:
		v = arg
	case 1:
		if arg > math.MaxInt64 {
			v = cbor.Tag{Number: 3, Content: new(big.Int).SetUint64(arg).Bytes()}
		} else {
			v = -1 - int64(arg)
		}
	case 2:
		s, err := d.take(arg)
		if err != nil {
			return nil, err
		}
		if len(s) == 0 {
			v = emptyBytes
		} else {
			v = append([]byte{}, s...)
		}
	case 3:
		s, err := d.take(arg)
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(s) {
			return nil, errors.New("text string is not valid UTF-8")
		}
		if d.s != "" {
			v = d.s[d.off-len(s) : d.off]
		} else {
			v = string(s)
		}
	case 4:
		if !d.claim(arg, 1) { // each element takes an octet at least
			return nil, errTruncated
		}
		a := make([]any, 0, min(arg, firstCap))
		var h hash.Hash
		var ks *keyState
		var cid *keyDigest
		if id != nil {
			ks = d.keyState()
			h, cid = ks.hasher(depth), &ks.digests[depth][0]
			ks.writeHead(h, 'a', arg)
		}
		for i := uint64(0); i < arg; i++ {
			d.claimed--
			v, err := d.item(depth+1, cid)
			if err != nil {
				return nil, err
			}
			a = appendCapped(a, v, arg)
			if h != nil {
				h.Write(cid[:])
			}
		}
		if h != nil {
			ks.sum(h, id)
		}
		if len(a) == 0 {
			return emptyArray, nil
		}
		return a, nil
	case 5:
		if !d.claim(arg, 2) { // each key and each value an octet at least
			return nil, errTruncated
		}
		return d.mapValue(arg, depth, id)
	case 6:
		c, err := d.item(depth+1, id) // the content's digest, then the tag's
		if err != nil {
			return nil, err
		}
		if id != nil {
			ks := d.keyState()
			h := ks.hasher(depth)
			ks.writeHead(h, 'g', arg)
			h.Write(id[:])
			ks.sum(h, id)
		}
		return cbor.Tag{Number: arg, Content: c}, nil
	default: // major 7: simple values and floats.
		switch ai {
		case 20:
			v = false
		case 21:
			v = true
		case 22:
			v = nil
		case 25:
			v = float64(float16.Frombits(uint16(arg)).Float32())
		case 26:
			v = float64(math.Float32frombits(uint32(arg)))
		case 27:
			v = math.Float64frombits(arg)
		case 24:
			if arg < 32 {
				return nil, errors.New("simple value in two octets below 32")
			}
			v = cbor.SimpleValue(arg)
		default:
			v = cbor.SimpleValue(arg)
		}
	}
	if id != nil {
		*id = leafDigest(v)
	}
	return v, nil
}

// skip checks the rest of an item whose head was read, keeping nothing
// (d.discard, outside keys): the checks of item, in the same order.
func (d *cborDecoder) skip(major, ai byte, arg uint64, depth int) error {
	switch major {
	case 2:
		_, err := d.take(arg)
		return err
	case 3:
		s, err := d.take(arg)
		if err == nil && !utf8.Valid(s) {
			err = errors.New("text string is not valid UTF-8")
		}
		return err
	case 4:
		if !d.claim(arg, 1) {
			return errTruncated
		}
		for i := uint64(0); i < arg; i++ {
			d.claimed--
			if _, err := d.item(depth+1, nil); err != nil {
				return err
			}
		}
		return nil
	case 5:
		if !d.claim(arg, 2) {
			return errTruncated
		}
		_, err := d.mapValue(arg, depth, nil)
		return err
	case 6:
		_, err := d.item(depth+1, nil)
		return err
	case 7:
		if ai == 24 && arg < 32 {
			return errors.New("simple value in two octets below 32")
		}
	}
	return nil
}

// leafDigest is the keyDigest of a value that is not an array, a map or
// a tag.
func leafDigest(v any) keyDigest {
	var buf [64]byte
	b, _ := appendLeafID(buf[:0], v)
	return sha256.Sum256(b)
}

// Pairs is a CBOR map with a key that cannot be a Go map key (an array,
// a map, a byte string, a tag around one), kept as its pairs in order.
type Pairs []Pair

// Pair is one member of Pairs.
type Pair struct{ Key, Val any }

// mapValue reads n pairs. A map whose keys are all text (every map of the
// data model) becomes map[string]any; one with other hashable keys,
// map[any]any; one with an unhashable key, Pairs. Keys are unique by
// value (RFC 8949 section 5.6: 1 and a non-minimal 1 are the same key; a
// map's entries in any order): a key that is not an array, a map or a
// tag is named by appendLeafID, one that is by its keyDigest, computed
// as it is decoded (so that keys nested in keys cost their size once, not
// once per enclosing key). n has been claimed from the budget: what is
// allocated for it is bounded by the octets present. With id, *id is set
// to the map's keyDigest.
func (d *cborDecoder) mapValue(n uint64, depth int, id *keyDigest) (any, error) {
	var text map[string]any
	var other []Pair
	var seen map[string]bool // the identities of the keys in other, from the second
	var firstBuf [48]byte
	var first []byte   // the identity of other[0]
	var ids []keyEntry // with id: each entry's key and value digests
	var kd, vd *keyDigest
	if id != nil {
		ks := d.keyState()
		ids = ks.entries[depth][:0]
		kd, vd = &ks.digests[depth][0], &ks.digests[depth][1]
	}
	var buf []byte
	hashable := true
	for i := uint64(0); i < n; i++ {
		d.claimed--
		structured := d.off < len(d.b) && d.b[d.off]>>5 >= 4 && d.b[d.off]>>5 <= 6
		var k any
		var err error
		discard := d.discard
		d.discard = false // a key is decoded whole: its identity tells duplicates apart
		if structured {
			if kd == nil {
				kd = &d.keyState().digests[depth][0]
			}
			k, err = d.item(depth+1, kd)
		} else {
			k, err = d.item(depth+1, nil)
		}
		d.discard = discard
		if err != nil {
			return nil, err
		}
		d.claimed--
		v, err := d.item(depth+1, vd)
		if err != nil {
			return nil, err
		}
		if id != nil {
			if !structured {
				*kd = leafDigest(k)
			}
			ids = append(ids, keyEntry{*kd, *vd})
		}
		if s, ok := k.(string); ok {
			if text == nil {
				text = make(map[string]any, min(n-i, firstCap))
			} else if _, dup := text[s]; dup {
				return nil, fmt.Errorf("duplicate map key %q", s)
			}
			text[s] = v // nil when discarding: the key is what counts
			continue
		}
		var h bool
		if structured {
			buf, h = append(append(buf[:0], 'd'), kd[:]...), tagsAroundLeaf(k)
		} else {
			buf, h = appendLeafID(buf[:0], k)
		}
		switch {
		case other == nil:
			// One such key cannot be a duplicate: its identity is kept
			// for the next one, if any.
			other, first = make([]Pair, 0, min(n-i, firstCap)), append(firstBuf[:0], buf...)
		case seen == nil:
			seen = make(map[string]bool, min(n-i+1, firstCap))
			seen[string(first)] = true
			fallthrough
		default:
			if seen[string(buf)] {
				return nil, fmt.Errorf("duplicate map key %s", describeKey(k))
			}
			seen[string(buf)] = true
		}
		hashable = hashable && h
		other = appendCapped(other, Pair{k, v}, n)
	}
	if id != nil {
		// The entries in the order of their key digests (unique keys:
		// a strict order), so that the digest does not depend on it.
		slices.SortFunc(ids, func(a, b keyEntry) int { return bytes.Compare(a.k[:], b.k[:]) })
		ks := d.keyState()
		h := ks.hasher(depth)
		ks.writeHead(h, 'm', n)
		for i := range ids {
			h.Write(ids[i].k[:])
			h.Write(ids[i].v[:])
		}
		ks.sum(h, id)
		ks.entries[depth] = ids[:0] // kept for the next map at this depth
	}
	if d.discard {
		return nil, nil
	}
	if len(other) == 0 {
		if text == nil {
			text = map[string]any{}
		}
		return text, nil
	}
	if !hashable {
		if len(text) == 0 {
			return Pairs(other), nil
		}
		out := make(Pairs, 0, n) // n pairs were read
		for k, v := range text {
			out = append(out, Pair{k, v})
		}
		return append(out, other...), nil
	}
	m := make(map[any]any, n)
	for k, v := range text {
		m[k] = v
	}
	for _, p := range other {
		m[p.Key] = p.Val
	}
	return m, nil
}

// tagsAroundLeaf reports whether k, a decoded array, map or tag, is tags
// around a value that can be a Go map key.
func tagsAroundLeaf(k any) bool {
	for {
		t, ok := k.(cbor.Tag)
		if !ok {
			break
		}
		k = t.Content
	}
	switch k.(type) {
	case []any, map[string]any, map[any]any, Pairs, []byte:
		return false
	}
	return true
}

// appendLeafID appends to b the identity of a decoded value that is not
// an array, a map or a tag, for duplicate detection: equal exactly for
// values equal by value. hashable says whether the value can be a Go map
// key (a byte string cannot).
func appendLeafID(b []byte, k any) ([]byte, bool) {
	switch x := k.(type) {
	case string:
		b = binary.AppendUvarint(append(b, 't'), uint64(len(x)))
		return append(b, x...), true
	case uint64:
		return binary.BigEndian.AppendUint64(append(b, 'u'), x), true
	case int64:
		return binary.BigEndian.AppendUint64(append(b, 'n'), uint64(x)), true
	case bool:
		if x {
			return append(b, 'T'), true
		}
		return append(b, 'F'), true
	case nil:
		return append(b, 'N'), true
	case float64:
		bits := math.Float64bits(x)
		if x != x {
			bits = 0x7ff8000000000000 // NaN: every NaN is the same key
		}
		return binary.BigEndian.AppendUint64(append(b, 'f'), bits), true
	case cbor.SimpleValue:
		return append(b, 's', byte(x)), true
	case []byte:
		b = binary.AppendUvarint(append(b, 'b'), uint64(len(x)))
		return append(b, x...), false
	}
	// Not a leaf DecodeCBOR returns; named by its type and value.
	return fmt.Appendf(append(b, '?'), "%T:%v", k, k), false
}

// describeKey names a duplicate map key for an error message, briefly.
func describeKey(k any) string {
	switch x := k.(type) {
	case uint64, int64, bool, nil, float64, cbor.SimpleValue:
		return fmt.Sprintf("%v", x)
	case cbor.Tag:
		return fmt.Sprintf("tag %d", x.Number)
	}
	return "of type " + TypeName(k)
}
