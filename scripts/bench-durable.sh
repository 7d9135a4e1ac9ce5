#!/usr/bin/env bash
# bench-durable.sh: offers accepted per second with a durable hop record
# (full receiving checks of a fresh JWS offer, the record committed before
# the status may leave) on SQLite and on PostgreSQL, beside the raw
# single-row insert-if-absent rate of the same database at the same
# durability setting (SQLite WAL synchronous=FULL; PostgreSQL fsync and
# synchronous_commit on), with 1 and with 16 concurrent senders, in one run.
# Target: the durable rate within 1.5x of the raw rate (ratio <= 1.5).
#
# Starts a throwaway PostgreSQL (scripts/pg.sh). Environment: BENCHTIME
# (default 3s), COUNT (default 1), STRICT=1 to exit 1 on a missed target.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/pg.sh
source scripts/pg.sh
pg_start
trap pg_stop EXIT

out=$(mktemp)
go test -run '^$' -bench 'AcceptDurable|RawInsert' -benchtime "${BENCHTIME:-3s}" -count "${COUNT:-1}" ./delegate | tee "$out"

awk -v strict="${STRICT:-0}" '
/^Benchmark(AcceptDurable|RawInsert)/ {
  name = $1; sub(/-[0-9]+$/, "", name)
  for (i = 2; i <= NF; i++) if ($(i) == "ops/s") rate = $(i-1)
  split(name, p, "/"); kind = p[1]; senders = p[2]
  db = kind; sub(/^Benchmark(AcceptDurable|RawInsert)/, "", db)
  what = (kind ~ /AcceptDurable/) ? "durable" : "raw"
  key = db " " senders
  sum[what, key] += rate; n[what, key]++; keys[key] = 1
}
END {
  printf "\n%-22s %14s %14s %8s %8s\n", "database senders", "durable ops/s", "raw ops/s", "ratio", "target"
  miss = 0
  for (k in keys) {
    d = sum["durable", k] / n["durable", k]; r = sum["raw", k] / n["raw", k]
    ratio = r / d
    verdict = ratio <= 1.5 ? "PASS" : "MISS"; if (verdict == "MISS") miss = 1
    printf "%-22s %14.0f %14.0f %8.2f  <= 1.5 %s\n", k, d, r, ratio, verdict
  }
  if (strict && miss) exit 1
}' "$out"
rm -f "$out"
