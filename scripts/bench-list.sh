#!/usr/bin/env bash
# bench-list.sh: an operator's listing at fleet size (issue 17). Fills a
# SQLite store and a PostgreSQL store (a throwaway server, scripts/pg.sh)
# with ROWS hop records (default a million; the shape is in
# store/storetest/listbench.go: 21 delegators, one of them with one hop in
# 500, states in a fleet's proportions, an open flag on one hop in 5000),
# then reads a page of 50 of each kind the operator console asks for
# (newest, by state, by delegator, flagged, a time window, a page deep in
# the listing) and prints each page's time; then the same for ROWS hops
# the gateway issued (store/storetest/listbench_issued.go: its egress's
# listing, by view, by downstream, unresolved, a window), in rows named
# issued/....
#
# Target: every page well under 50 ms.
#
# Environment: ROWS (default 1000000), BENCHTIME (default 20x), STRICT=1
# to exit 1 on a missed target. Filling takes about a minute a store.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
# shellcheck source=scripts/pg.sh
source scripts/pg.sh
trap 'pg_stop; rm -rf "$tmp"' EXIT
pg_start

for db in sqlite postgres; do
	if ! HANDOFF_LIST_ROWS=${ROWS:-1000000} go test -run '^$' -bench '^BenchmarkList(Issued)?$' \
		-benchtime "${BENCHTIME:-20x}" -timeout 60m "./store/$db" >"$tmp/$db" 2>&1; then
		cat "$tmp/$db" >&2
		echo "bench-list.sh: the $db benchmark failed" >&2
		exit 2
	fi
done

awk -v strict="${STRICT:-0}" -v rows="${ROWS:-1000000}" '
FNR == 1 { db = FILENAME; sub(/.*\//, "", db) }
/^BenchmarkList(Issued)?\// {
  name = $1; issued = (name ~ /^BenchmarkListIssued\//)
  sub(/^BenchmarkList(Issued)?\//, "", name); sub(/-[0-9]+$/, "", name)
  if (issued) name = "issued/" name
  for (i = 2; i <= NF; i++) if ($(i) == "ms/page") ms = $(i-1)
  if (!(name in seen)) { seen[name] = 1; order[++n] = name }
  t[name, db] = ms
}
END {
  printf "%d hop records, and as many issued hops; a page of 50 (ms)\n\n", rows
  printf "%-36s %10s %10s   target\n", "page", "SQLite", "PostgreSQL"
  miss = 0
  for (i = 1; i <= n; i++) {
    k = order[i]; s = t[k, "sqlite"]; p = t[k, "postgres"]
    ok = (s + 0 < 50 && p + 0 < 50) ? "< 50 PASS" : "< 50 MISS"
    if (ok ~ /MISS/) miss = 1
    printf "%-36s %10.2f %10.2f   %s\n", k, s, p, ok
  }
  if (strict == 1 && miss) exit 1
}' "$tmp/sqlite" "$tmp/postgres"
