#!/usr/bin/env bash
# bench.sh: run the receive-path benchmarks of bench_test.go and print the
# cost ratios against the floor (one bare P-256 verification), with their
# targets:
#
#   JWS offer  / floor        <= 1.10   BenchmarkVerifyOfferJWS
#   COSE offer / floor        <= 1.20   BenchmarkVerifyOfferCOSE
#   chain16 / (17 x floor)    <= 1.15   BenchmarkVerifyChain16
#
# The four benchmarks run in one `go test` invocation with -count N, and
# each ratio uses the median ns/op of its benchmarks; the verdict is on
# that. The ratio of the fastest runs ("best") is printed beside it, for
# information: on a shared machine, noise only ever adds time. Pure bash
# and awk; for a statistical comparison of two runs keep the raw output
# (RAW=file) and use benchstat (golang.org/x/perf/cmd/benchstat), which is
# not needed here.
#
# Environment:
#   COUNT=N       runs of each benchmark (default 5)
#   BENCHTIME=d   go test -benchtime (default: go's, 1s)
#   CPU=n         go test -cpu, one value (default: GOMAXPROCS)
#   RAW=file      also keep the raw go test output in file
#   STRICT=1      exit 1 when a ratio misses its target; by default the
#                 exit status is 0 whatever the ratios, since the machine
#                 is shared and noisy. A build or benchmark failure exits 2
#                 in either case.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

count=${COUNT:-5}
if ! [[ $count =~ ^[1-9][0-9]*$ ]]; then
	echo "bench.sh: COUNT must be a positive integer, not '$count'" >&2
	exit 2
fi

names=(ECDSAVerifyP256 VerifyOfferJWS VerifyOfferCOSE VerifyChain16)
regex="^Benchmark($(
	IFS='|'
	echo "${names[*]}"
))\$"

args=(test -run '^$' -bench "$regex" -count "$count")
[[ -n ${BENCHTIME:-} ]] && args+=(-benchtime "$BENCHTIME")
[[ -n ${CPU:-} ]] && args+=(-cpu "$CPU")
args+=(.)

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

echo "+ go ${args[*]}" >&2
if ! go "${args[@]}" >"$raw" 2>&1; then
	cat "$raw" >&2
	echo "bench.sh: go test failed" >&2
	exit 2
fi
[[ -n ${RAW:-} ]] && cp "$raw" "$RAW"
grep -E '^(goos|goarch|cpu|Benchmark)' "$raw" || true
echo

# Medians per benchmark, then the ratios. A benchmark line is
#   BenchmarkName-P  iters  X ns/op  [Y unit]...  Z B/op  W allocs/op
# (the -P GOMAXPROCS suffix is absent when P is 1).
awk -v strict="${STRICT:-0}" -v names="${names[*]}" '
function median(list,    a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) {          # insertion sort, n is small
		t = a[i] + 0
		for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]
		a[j + 1] = t
	}
	if (n % 2) return a[(n + 1) / 2] + 0
	return (a[n / 2] + a[n / 2 + 1]) / 2
}
function minimum(list,    a, n, i, lo) {
	n = split(list, a, " ")
	lo = a[1] + 0
	for (i = 2; i <= n; i++) if (a[i] + 0 < lo) lo = a[i] + 0
	return lo
}
function maximum(list,    a, n, i, hi) {
	n = split(list, a, " ")
	hi = a[1] + 0
	for (i = 2; i <= n; i++) if (a[i] + 0 > hi) hi = a[i] + 0
	return hi
}
/^Benchmark/ {
	name = $1
	sub(/^Benchmark/, "", name)
	sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i++) {
		if ($(i + 1) == "ns/op") ns[name] = ns[name] " " $i
		else if ($(i + 1) == "B/op") bytes[name] = $i
		else if ($(i + 1) == "allocs/op") allocs[name] = $i
	}
	runs[name]++
}
END {
	nn = split(names, want, " ")
	printf "%-16s %4s %13s %11s %11s %8s %9s\n", "benchmark", "runs", "median ns/op", "min", "max", "B/op", "allocs/op"
	for (k = 1; k <= nn; k++) {
		b = want[k]
		if (!(b in ns)) {
			printf "bench.sh: no result for Benchmark%s\n", b > "/dev/stderr"
			exit 2
		}
		med[b] = median(ns[b])
		lo[b] = minimum(ns[b])
		hi = maximum(ns[b])
		printf "%-16s %4d %13.0f %11.0f %11.0f %8s %9s\n", b, runs[b], med[b],
			lo[b], hi, bytes[b], allocs[b]
		if (hi > 1.25 * lo[b]) noisy = noisy " " b
	}
	f = "ECDSAVerifyP256"
	r[1] = med["VerifyOfferJWS"] / med[f];        q[1] = lo["VerifyOfferJWS"] / lo[f]
	r[2] = med["VerifyOfferCOSE"] / med[f];       q[2] = lo["VerifyOfferCOSE"] / lo[f]
	r[3] = med["VerifyChain16"] / (17 * med[f]);  q[3] = lo["VerifyChain16"] / (17 * lo[f])
	t[1] = 1.10; l[1] = "JWS offer / floor"
	t[2] = 1.20; l[2] = "COSE offer / floor"
	t[3] = 1.15; l[3] = "chain16 / (17 x floor)"
	print ""
	printf "%-24s %7s %9s  %-7s %6s\n", "ratio (of medians)", "value", "target", "verdict", "best"
	miss = 0
	for (k = 1; k <= 3; k++) {
		v = (r[k] <= t[k]) ? "PASS" : "MISS"
		if (v == "MISS") miss++
		printf "%-24s %7.3f  <= %.2f  %-7s %6.3f\n", l[k], r[k], t[k], v, q[k]
	}
	if (noisy != "") {
		printf "\nnote: the slowest run is over 25%% slower than the fastest for%s;\n", noisy
		print "the machine was busy, so the medians are unreliable (see \"best\")."
	}
	if (miss && strict == "1") exit 1
	exit 0
}' "$raw"
