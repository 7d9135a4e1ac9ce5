package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/quantumlearningmachines/handoff/a2ahandoff"
)

// WriteTryScript writes try.sh into the directory: it signs an offer as
// the assistant with the handoff command at handoffCmd (`handoff offer`)
// and sends it to the planner in an A2A message/send with curl, for
// exploring the running agents by hand. Sending the same file twice shows
// a retransmission. The script says "sent" only when curl delivered the
// request and the planner answered with a JSON-RPC result; the answer is
// printed and kept in reply-<file>. It returns the script's path.
func (w *World) WriteTryScript(handoffCmd string) (string, error) {
	p := filepath.Join(w.dir, "try.sh")
	script := fmt.Sprintf(`#!/bin/sh
# Hand a task to the demo's planner over A2A, as the assistant:
#   sh try.sh "Write a changelog entry"    sign a new offer, send it
#   sh try.sh --again offer-ctx-NNN.json   send that Handoff again (a retransmission)
# The planner's answer is printed and kept in reply-<file>.
set -e
cd "$(dirname "$0")"
handoff=%s
planner=%s
token=%s
uri=%s
%s
if [ "$1" = --again ]; then
  [ -f "$2" ] || { echo "try.sh: no Handoff file ${2:-given}" >&2; exit 2; }
  file=$2 text="the same task"
else
  file=offer-ctx-$$.json text=${1:-Write a changelog entry}
  "$handoff" offer --key assistant.jwk --iss %s --aud %s --dialog "ctx-$$" > "$file" || { rm -f "$file"; exit 2; }
fi
ctx=$(basename "$file" .json); ctx=${ctx#offer-}
body='{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":'"$(json_string "m-$$")"',"role":"user","contextId":'"$(json_string "$ctx")"',"parts":[{"kind":"text","text":'"$(json_string "$text")"'}],"extensions":['"$(json_string "$uri")"'],"metadata":{'"$(json_string "$uri")"':'"$(cat "$file")"'}}}}'
reply=reply-$(basename "$file")
if ! code=$(curl -sS -o "$reply" -w '%%{http_code}' "$planner" \
  -H 'Content-Type: application/json' \
  -H "Authorization: Bearer $token" \
  -H "X-A2A-Extensions: $uri" \
  --data-binary "$body"); then
  echo "try.sh: curl failed: nothing reached the planner" >&2
  exit 1
fi
cat "$reply"; echo
if [ "$code" != 200 ]; then
  echo "try.sh: the planner answered HTTP $code: not taken" >&2
  exit 1
fi
# A JSON-RPC answer is a result or an error; a2a-go writes its members in
# this order, with no spaces.
case $(cat "$reply") in
'{"jsonrpc":"2.0","id":1,"result":'*) ;;
*)
  echo "try.sh: the planner answered with a JSON-RPC error (above): not taken" >&2
  exit 1
  ;;
esac
echo "(sent $file; again: sh try.sh --again $file)" >&2
`, shQuote(handoffCmd), shQuote(w.agents[Planner].URL), shQuote(w.agents[Assistant].Token), shQuote(a2ahandoff.URI),
		jsonStringSh, shQuote(idOf(Assistant)), shQuote(idOf(Planner)))
	return p, os.WriteFile(p, []byte(script), 0o700)
}

// jsonStringSh defines the shell function json_string, which prints its
// argument as a JSON string: \ and " escaped, control characters as
// \u00XX, every other byte as it is (UTF-8 stays UTF-8). The text goes to
// awk (POSIX, present wherever sh is; jq often is not) through the
// environment, where no escapes are processed, and awk works on bytes
// (LC_ALL=C).
const jsonStringSh = `json_string() {
  JSON_TEXT=$1 LC_ALL=C awk 'BEGIN {
    s = ENVIRON["JSON_TEXT"]; out = ""
    for (i = 1; i < 32; i++) ctl[sprintf("%c", i)] = sprintf("\\u%04x", i)
    n = length(s)
    for (i = 1; i <= n; i++) {
      c = substr(s, i, 1)
      if (c == "\\" || c == "\"") out = out "\\" c
      else if (c in ctl) out = out ctl[c]
      else out = out c
    }
    printf "\"%s\"", out
  }'
}`

// shQuote quotes s for sh: in single quotes, each ' in s closing the
// quotes, escaped, then reopening them.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
