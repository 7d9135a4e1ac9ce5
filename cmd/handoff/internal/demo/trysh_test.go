package demo

import (
	"encoding/json"
	"os"
	"os/exec"
	"testing"
)

// try.sh builds its JSON-RPC body with json_string: whatever text it is
// given arrives as that text in a valid JSON string (RFC 8259 section 7:
// quotation mark, reverse solidus and the control characters U+0000
// through U+001F must be escaped). Run by sh, as the script runs it.
func TestJSONStringSh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, text := range []string{
		"",
		"plain words",
		`it"s`,
		`a \ backslash, \\ two, \n not a newline, \u0041 not an A`,
		"a newline\nand a second line\n",
		"tab\tcarriage return\r form feed\f bell\a escape\x1b unit separator\x1f",
		"\x01\x02\x7f",
		"'single' quotes, $HOME, $(echo no), `echo no`, %s %d %%",
		"UTF-8: é ✓ 漢字 😀",
		"-n", "-e", "--",
	} {
		cmd := exec.Command(sh, "-c", jsonStringSh+"\njson_string \"$1\"", "sh", text)
		cmd.Env = append(os.Environ(), "JSON_TEXT=ignored")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("json_string %q: %v", text, err)
		}
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Errorf("json_string %q wrote %s, not a JSON string: %v", text, out, err)
			continue
		}
		if got != text {
			t.Errorf("json_string %q wrote %s, which reads %q", text, out, got)
		}
	}
}

// shQuote makes any string one sh word, unchanged.
func TestShQuote(t *testing.T) {
	for _, s := range []string{"", "/tmp/handoff", "it's", "a b", `$HOME "x" \ ;|&`, "'"} {
		out, err := exec.Command("sh", "-c", "printf %s "+shQuote(s)).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != s {
			t.Errorf("shQuote(%q) reads %q", s, out)
		}
	}
}
