#!/usr/bin/env bash
# A short walkthrough of the handoff command: three agents make keys, trust
# one another, the assistant hands a task to the planner, the planner passes
# it on to the coder, and the coder checks the chain and answers.
# Needs only Go. Works in a temporary directory and leaves nothing behind.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
(cd "$repo" && go build -o "$work/handoff" ./cmd/handoff)
# Bold only on a terminal: redirected to a file, the text stays plain.
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s$ %s%s\n' "$bold" "$*" "$plain"; }
run() { say "$*"; "$@"; }

A=https://assistant.example P=https://planner.example C=https://coder.example
for n in assistant planner coder; do run ./handoff keygen --out $n.jwk; done
say "build trust.json from each agent's public key"
for n in assistant planner coder; do ./handoff pubkey $n.jwk > $n.pub; done
run ./handoff trust add --id $A assistant.pub trust.json
run ./handoff trust add --id $P planner.pub trust.json
run ./handoff trust add --id $C coder.pub trust.json
run ./handoff trust list trust.json

say "the assistant hands the task to the planner (JWS)"
./handoff offer --key assistant.jwk --iss $A --aud $P --dialog ctx-1 --task t-1 --obo user-7f3a > h1.json
cat h1.json
run ./handoff verify --trust trust.json --me $P --dialog ctx-1 h1.json

say "the planner passes it on to the coder (COSE, carried in CBOR)"
./handoff offer --key planner.jwk --iss $P --aud $C --dialog ctx-1 --from h1.json --cose --cbor > h2.cbor
run ./handoff verify --trust trust.json --me $C --dialog ctx-1 --require-full-chain --state state h2.cbor
run ./handoff inspect --trust trust.json h2.cbor

say "the same offer again, in a later run: answered from the record (exit 1)"
./handoff verify --trust trust.json --me $C --state state h2.cbor || echo "(exit $?)"

say "the offer copied to the wrong agent is refused (exit 1)"
./handoff verify --trust trust.json --me $P h2.cbor || echo "(exit $?)"

say "the coder accepts, and the planner checks the signed status"
./handoff status --key coder.jwk --from h2.cbor --state accepted > accepted.jws
cat accepted.jws
run ./handoff verify-status --trust trust.json --from h2.cbor accepted.jws
