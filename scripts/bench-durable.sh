#!/usr/bin/env bash
# bench-durable.sh: what a durable accept costs (full receiving checks of
# a fresh JWS offer, the hop record committed before the status may
# leave) on SQLite and on PostgreSQL, beside the raw single-row
# insert-if-absent of the same database at the same durability setting
# (SQLite WAL synchronous=FULL; PostgreSQL fsync and synchronous_commit
# on) and the crypto floor (one offer verification and one status
# signature, which nothing overlaps with one sender), with 1 and with 16
# concurrent senders.
#
# Targets:
#   1 sender:   beyond = (durable - raw - floor) / floor <= 0.25: what the
#               delegate adds to the least any implementation could take;
#   16 senders: ratio = durable / raw <= 1.0: concurrent claims share a
#               commit, so a durable accept takes no longer than a raw
#               insert.
#
# Each reading is one benchmark (BenchmarkDurableSQLite and
# BenchmarkDurablePostgres in ./delegate) in which the three kinds
# alternate in short phases within one process on one database, so that
# the fsync latency of a shared machine, which drifts by 2x and more
# within minutes, hits them alike. The test binary is built once and run
# COUNT times; the verdict is on the median, printed with the range.
#
# Starts a throwaway PostgreSQL (scripts/pg.sh). Environment: BENCHTIME
# (default 3s), COUNT (rounds, default 3), RAW=file to keep the raw
# benchmark output, STRICT=1 to exit 1 on a missed target.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

count=${COUNT:-3}
if ! [[ $count =~ ^[1-9][0-9]*$ ]]; then
	echo "bench-durable.sh: COUNT must be a positive integer, not '$count'" >&2
	exit 2
fi

tmp=$(mktemp -d)
# shellcheck source=scripts/pg.sh
source scripts/pg.sh
trap 'pg_stop; rm -rf "$tmp"' EXIT
pg_start

bin=$tmp/delegate.test
if ! go test -c -o "$bin" ./delegate >"$tmp/build" 2>&1; then
	cat "$tmp/build" >&2
	echo "bench-durable.sh: go test -c failed" >&2
	exit 2
fi

raw=${RAW:-$tmp/raw}
: >"$raw"
for ((round = 1; round <= count; round++)); do
	if ! (cd delegate && "$bin" -test.run '^$' -test.benchtime "${BENCHTIME:-3s}" \
		-test.bench '^BenchmarkDurable(SQLite|Postgres)$') >"$tmp/out" 2>&1; then
		cat "$tmp/out" >&2
		echo "bench-durable.sh: round $round failed" >&2
		exit 2
	fi
	grep -E '^Benchmark' "$tmp/out" | sed "s/^/round=$round /" | tee -a "$raw"
done

awk -v strict="${STRICT:-0}" '
/^round=[0-9]+ BenchmarkDurable/ {
  name = $2; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkDurable/, "", name)
  split(name, p, "/"); k = p[1] " " p[2]
  n[k]++
  for (i = 3; i <= NF; i++) {
    if ($(i) == "durable-us") dur[k, n[k]] = $(i-1)
    if ($(i) == "raw-us") raw[k, n[k]] = $(i-1)
    if ($(i) == "floor-us") flo[k, n[k]] = $(i-1)
    if ($(i) == "beyond") bey[k, n[k]] = $(i-1)
    if ($(i) == "ratio") rat[k, n[k]] = $(i-1)
  }
}
function median(src, k, m,   a, i, j, t) {
  for (i = 1; i <= m; i++) a[i] = src[k, i]
  for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
  lo = a[1]; hi = a[m]
  return (m % 2) ? a[(m+1)/2] : (a[m/2] + a[m/2+1]) / 2
}
END {
  printf "\n%-20s %11s %9s %9s   %-22s %s\n", "database senders", "durable us", "raw us", "floor us", "measure (range)", "target"
  miss = 0
  split("SQLite senders=1,SQLite senders=16,Postgres senders=1,Postgres senders=16", order, ",")
  for (s = 1; s <= 4; s++) {
    k = order[s]; m = n[k]; if (!m) continue
    d = median(dur, k, m); r = median(raw, k, m); f = median(flo, k, m)
    if (k ~ /senders=1$/) { v = median(bey, k, m); what = "beyond"; target = 0.25 }
    else { v = median(rat, k, m); what = "ratio"; target = 1.0 }
    verdict = v <= target ? "PASS" : "MISS"; if (verdict == "MISS") miss = 1
    printf "%-20s %11.1f %9.1f %9.1f   %-6s %5.2f (%.2f-%.2f)  <= %.2f %s\n", k, d, r, f, what, v, lo, hi, target, verdict
  }
  if (strict && miss) exit 1
}' "$raw"
