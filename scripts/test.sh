#!/usr/bin/env bash
# Every test of the module: formatting, vet, the whole suite under the race
# detector against a throwaway PostgreSQL (started here, installed from
# Debian's packages if missing, stopped at the end), a short run of every
# fuzz target, and one iteration of every benchmark (so they keep compiling
# and running; ratios: scripts/bench.sh). Needs only Go, and root for
# what it installs when missing: a C compiler (the race detector needs cgo;
# Debian's gcc and libc6-dev), curl and jq (a docs walkthrough) and
# PostgreSQL. FUZZTIME overrides each fuzz
# target's budget: an execution count (default 5000x), which, unlike a
# duration, is not cut short by a loaded machine (see golang/go#75804).
set -euo pipefail
cd "$(dirname "$0")/.."

# The race detector needs cgo, and cgo a C compiler that can build
# against the C library's headers: install one as scripts/pg.sh installs
# PostgreSQL (as root, with apt-get), saying so in one line. go test -race
# fails with "-race requires cgo" without one. The probe compiles a file
# that includes <stdlib.h>, so a gcc without libc6-dev is caught as well.
cc_works() {
  local c
  c=${CC:-$(command -v gcc || command -v cc || true)}
  [ -n "$c" ] && printf '#include <stdlib.h>\nint main(void){return 0;}\n' |
    "$c" -x c - -o /dev/null >/dev/null 2>&1
}
if ! cc_works; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: no working C compiler (cc or gcc with the C library headers), which go test -race needs; install one (Debian: apt-get install gcc libc6-dev)" >&2
    exit 1
  fi
  echo "== installing a C compiler for go test -race (apt-get install gcc libc6-dev)"
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev >&2
  if ! cc_works; then
    echo "test.sh: still no working C compiler after installing gcc and libc6-dev; go test -race needs one" >&2
    exit 1
  fi
fi
# Go turns cgo off when it finds no compiler at its start, or when
# CGO_ENABLED=0 was inherited; -race needs it on.
export CGO_ENABLED=1
if [ -z "${CC:-}" ] && ! command -v "$(go env CC)" >/dev/null 2>&1; then
  # go env CC names gcc by default; a machine with only cc gets that.
  CC=$(command -v gcc || command -v cc)
  export CC
fi

# curl and jq run docs/gateway.md's walkthrough (TestGatewayWalkthrough),
# installed the same way when missing.
missing=()
for tool in curl jq; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: ${missing[*]} missing, which TestGatewayWalkthrough needs; install them (Debian: apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "== installing ${missing[*]} for the gateway walkthrough test (apt-get install ${missing[*]})"
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi

# Debian's chromium drives the operator console in a browser
# (TestConsoleInBrowser, which CI=true, set below, does not let skip),
# installed the same way when missing.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: /usr/bin/chromium missing, which TestConsoleInBrowser needs; install it (Debian: apt-get install chromium)" >&2
    exit 1
  fi
  echo "== installing chromium for the operator console's browser test (apt-get install chromium)"
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2
fi

echo "== PostgreSQL for the store tests"
# shellcheck source=scripts/pg.sh
source scripts/pg.sh
pg_start
trap pg_stop EXIT
# With a server up, no store test may skip (see postgresTarget and the
# store/postgres tests).
export CI="${CI:-true}"

echo "== gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race"
# -json, so that every test that passed is recorded (testlog prints what a
# plain go test would): those are the checks docs/conformance.md is made
# from, and the next step fails when a check a requirement counts on did
# not run.
checks=$(mktemp "${TMPDIR:-/tmp}/handoff-checks.XXXXXX")
go test -race -count=1 -timeout 20m -json ./... | go run ./conformance/internal/testlog -checks "$checks"

echo "== docs/conformance.md, from the checks this run emitted ($checks)"
HANDOFF_CHECKS="$checks" go test -count=1 -run '^TestConformanceDoc$' ./conformance

echo "== go test, tests the race detector cannot run"
# sync.Pool drops items under -race, so the allocation counts are checked
# in a plain run (internal/jws TestAllocs skips itself under -race).
go test -count=1 -run '^TestAllocs$' ./internal/jws

echo "== fuzz (${FUZZTIME:-5000x} per target)"
# Every Fuzz function, found in the test files, runs in its own package.
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for fn in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "-- $pkg $fn"
    go test -run '^$' -fuzz "^${fn}\$" -fuzztime "${FUZZTIME:-5000x}" "$pkg"
  done
done

echo "== benchmarks, one iteration each"
go test -run '^$' -bench . -benchtime 1x ./...
