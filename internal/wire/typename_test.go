package wire

import "testing"

// Error messages name what was found: an integer too large for 64 bits is
// "integer out of range", not a non-integer (draft Data Model: times and
// v are integers).
func TestTypeNameNumbers(t *testing.T) {
	cases := []struct {
		lit  string
		want string
	}{
		{"18446744073709551616", "integer out of range"},
		{"-9223372036854775809", "integer out of range"},
		{"1.5", "non-integer number"},
		{"1e3", "non-integer number"},
		{"-0", "non-integer number"},
	}
	for _, c := range cases {
		v := parseJSONNumber(c.lit)
		if got := TypeName(v); got != c.want {
			t.Errorf("TypeName(%s) = %q, want %q", c.lit, got, c.want)
		}
	}
	if got := TypeName(parseJSONNumber("42")); got != "integer" {
		t.Errorf("TypeName(42) = %q", got)
	}
}
