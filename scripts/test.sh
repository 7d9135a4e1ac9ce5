#!/usr/bin/env bash
# Every test of the module: formatting, vet, the whole suite under the race
# detector, a short run of every fuzz target, and one iteration of every
# benchmark (so they keep compiling and running; ratios: scripts/bench.sh).
# Needs only Go. FUZZTIME overrides the per-target fuzz time (default 5s).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race"
go test -race -count=1 -timeout 20m ./...

echo "== fuzz (${FUZZTIME:-5s} per target)"
# Every Fuzz function, found in the test files, runs in its own package.
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for fn in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "-- $pkg $fn"
    go test -run '^$' -fuzz "^${fn}\$" -fuzztime "${FUZZTIME:-5s}" "$pkg"
  done
done

echo "== benchmarks, one iteration each"
go test -run '^$' -bench . -benchtime 1x ./...
