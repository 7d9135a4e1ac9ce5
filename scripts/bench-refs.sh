#!/usr/bin/env bash
# bench-refs.sh: run the reference-checking benchmarks of refs/bench_test.go
# and print the cost of checking one required reference against the floor,
# one SHA-256 over the same octets, at 1 KiB, 64 KiB and 1 MiB:
#
#   digest    / SHA-256   BenchmarkCheckDigest/SIZE    octets supplied by index
#   salted    / SHA-256   BenchmarkCheckSalted/SIZE    salt then octets
#   by-object / SHA-256   BenchmarkCheckByObject/SIZE  object found by digest
#
# Targets: <= 1.50 at 1 KiB (a fixed cost per check shows there), <= 1.05
# at 64 KiB and 1 MiB (the hash is the cost).
#
# The signed kinds are printed beside their own floor, one bare P-256
# (ES256) verification, which each check performs once; these ratios have
# no target and never fail the run (the rest is JCS, COSE decoding and
# Merkle hashing over small inputs):
#
#   learnlog-head / P-256 verify   BenchmarkLearnlogHeadCheck
#   scitt-receipt / P-256 verify   BenchmarkSCITTReceiptCheck The benchmarks run in one
# `go test` invocation with -count N; each ratio uses the median ns/op, and
# the ratio of the fastest runs ("best") is printed beside it: on a shared
# machine, noise only ever adds time.
#
# Environment:
#   COUNT=N       runs of each benchmark (default 5)
#   BENCHTIME=d   go test -benchtime (default: go's, 1s)
#   CPU=n         go test -cpu, one value (default: GOMAXPROCS)
#   RAW=file      also keep the raw go test output in file
#   STRICT=1      exit 1 when a ratio misses its target (default: exit 0
#                 whatever the ratios). A build or benchmark failure exits 2.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

count=${COUNT:-5}
if ! [[ $count =~ ^[1-9][0-9]*$ ]]; then
	echo "bench-refs.sh: COUNT must be a positive integer, not '$count'" >&2
	exit 2
fi

args=(test -run '^$' -bench '^Benchmark(SHA256|CheckDigest|CheckSalted|CheckByObject|P256Verify|LearnlogHeadCheck|SCITTReceiptCheck)$' -count "$count")
[[ -n ${BENCHTIME:-} ]] && args+=(-benchtime "$BENCHTIME")
[[ -n ${CPU:-} ]] && args+=(-cpu "$CPU")
args+=(./refs)

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

echo "+ go ${args[*]}" >&2
if ! go "${args[@]}" >"$raw" 2>&1; then
	cat "$raw" >&2
	echo "bench-refs.sh: go test failed" >&2
	exit 2
fi
[[ -n ${RAW:-} ]] && cp "$raw" "$RAW"
grep -E '^(goos|goarch|cpu|Benchmark)' "$raw" || true
echo

# A benchmark line is
#   BenchmarkName/SIZE-P  iters  X ns/op  Y MB/s  [Z B/op  W allocs/op]
# (the -P GOMAXPROCS suffix is absent when P is 1).
awk -v strict="${STRICT:-0}" '
function median(list,    a, n, i, j, t) {
	n = split(list, a, " ")
	for (i = 2; i <= n; i++) {
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
/^Benchmark/ {
	name = $1
	sub(/^Benchmark/, "", name)
	sub(/-[0-9]+$/, "", name)
	for (i = 3; i < NF; i++) if ($(i + 1) == "ns/op") ns[name] = ns[name] " " $i
}
END {
	nsizes = split("1KiB 64KiB 1MiB", sizes, " ")
	split("1.50 1.05 1.05", target, " ")
	nk = split("CheckDigest CheckSalted CheckByObject", kinds, " ")
	split("digest salted by-object", label, " ")
	printf "%-26s %12s %12s %7s %9s  %-7s %6s\n", "ratio (of medians)", "check ns/op", "sha256 ns/op", "value", "target", "verdict", "best"
	miss = 0
	for (s = 1; s <= nsizes; s++) {
		f = "SHA256/" sizes[s]
		if (!(f in ns)) { printf "bench-refs.sh: no result for Benchmark%s\n", f > "/dev/stderr"; exit 2 }
		fm = median(ns[f]); fl = minimum(ns[f])
		for (k = 1; k <= nk; k++) {
			b = kinds[k] "/" sizes[s]
			if (!(b in ns)) { printf "bench-refs.sh: no result for Benchmark%s\n", b > "/dev/stderr"; exit 2 }
			m = median(ns[b]); r = m / fm; q = minimum(ns[b]) / fl
			v = (r <= target[s] + 0) ? "PASS" : "MISS"
			if (v == "MISS") miss++
			printf "%-26s %12.0f %12.0f %7.3f  <= %.2f  %-7s %6.3f\n", label[k] " " sizes[s] " / sha256", m, fm, r, target[s], v, q
		}
	}
	printf "\n%-30s %12s %12s %7s %6s\n", "signed kinds (of medians)", "check ns/op", "p256 ns/op", "value", "best"
	f = "P256Verify"
	if (!(f in ns)) { printf "bench-refs.sh: no result for Benchmark%s\n", f > "/dev/stderr"; exit 2 }
	fm = median(ns[f]); fl = minimum(ns[f])
	ns2 = split("LearnlogHeadCheck SCITTReceiptCheck", signed, " ")
	split("learnlog-head scitt-receipt", slabel, " ")
	for (k = 1; k <= ns2; k++) {
		b = signed[k]
		if (!(b in ns)) { printf "bench-refs.sh: no result for Benchmark%s\n", b > "/dev/stderr"; exit 2 }
		m = median(ns[b])
		printf "%-30s %12.0f %12.0f %7.3f %6.3f\n", slabel[k] " / p256 verify", m, fm, m / fm, minimum(ns[b]) / fl
	}
	if (miss && strict == "1") exit 1
	exit 0
}' "$raw"
