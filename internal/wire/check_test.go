package wire

import "testing"

// FuzzCheckMatchesDecode: CheckJSON and CheckCBOR, which build no tree,
// give exactly the error DecodeJSON and DecodeCBOR give (or none), for
// every input: the validation the decoder's Recheck relies on.
func FuzzCheckMatchesDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"a":2}`, `[1,{"b":[]},"\u00e9"]`, `{"x":{}, "y":[{}]}`, `"\ud800"`, `01`, `{"a":1}x`} {
		f.Add([]byte(s), false)
	}
	for _, b := range [][]byte{
		{0xa2, 0x01, 0x01, 0x01, 0x02},             // duplicate integer keys
		{0xa2, 0x61, 'a', 0xa0, 0x61, 'a', 0x80},   // duplicate text keys
		{0xa1, 0x81, 0x01, 0x00},                   // an array key
		{0xa2, 0x81, 0x01, 0x00, 0x81, 0x01, 0x00}, // duplicate array keys
		{0x9f},                   // indefinite
		{0x62, 0xc3, 0x28},       // invalid UTF-8
		{0xc2, 0x41, 0x01, 0x00}, // a tag, then trailing data
		{0xf8, 0x10},             // a simple value below 32 in two octets
	} {
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, in []byte, cbor bool) {
		var derr, cerr error
		if cbor {
			_, derr = DecodeCBOR(in)
			cerr = CheckCBOR(in)
		} else {
			_, derr = DecodeJSON(in)
			cerr = CheckJSON(in)
		}
		if (derr == nil) != (cerr == nil) || derr != nil && derr.Error() != cerr.Error() {
			t.Fatalf("decode: %v\ncheck:  %v\nin: %q", derr, cerr, in)
		}
	})
}
