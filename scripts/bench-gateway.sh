#!/usr/bin/env bash
# bench-gateway.sh: the gateway's load test (issue 16), in the style of
# agentgateway's published benchmark. One run measures four targets with
# the same requests (A2A message/send with 1 KB of text: 80% fresh
# offers, 10% retransmissions, 10% forgeries):
#   bare     the upstream agent itself;
#   nginx    the upstream behind Debian's nginx as a plain reverse proxy
#            (the cost of one proxy hop with no checks at all);
#   pass     the upstream behind the same gateway on a route with
#            without_handoff: pass, sent the messages with no handoff (what
#            the gateway's a2a-go machinery costs before any check);
#   gateway  the upstream behind handoff serve's gateway (a verification
#            and a durable SQLite record per fresh offer).
# It prints each target's peak requests/s (and its ratio to bare), then
# p50 and p99 at half the gateway's peak rate and what each adds to bare.
# Last, the restart phase (twice DURATION): the handoff binary built from
# this tree serves as the gateway, in a process of its own, and is
# drained (SIGTERM) and killed (SIGKILL) under load,
# started again on its store each time; the run fails if a hop record is
# lost or the upstream ran any work twice.
# Targets: added p50 under 1 ms at half the gateway's peak, and a peak of
# at least 0.5x the bare upstream's.
#
# nginx is installed from Debian's packages when missing (as root).
# Environment: DURATION (each phase, default 5s), WORKERS (default 16),
# BODY (octets of text, default 1024), STRICT=1 to exit 1 on a missed
# target. The tool is cmd/handoff/internal/gateway/benchgateway.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

nginx=$(command -v nginx || true)
if [[ -z $nginx && -x /usr/sbin/nginx ]]; then
	nginx=/usr/sbin/nginx
fi
if [[ -z $nginx ]]; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "bench-gateway.sh: installing nginx from Debian's packages" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null 2>&1 ||
			{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >/dev/null; }
		# The package starts a server on port 80; this script runs its own.
		{ systemctl stop nginx || service nginx stop || /usr/sbin/nginx -s stop; } >/dev/null 2>&1 || true
		nginx=/usr/sbin/nginx
	else
		echo "bench-gateway.sh: nginx is missing and cannot be installed here (not root, or no apt-get): the nginx target is skipped" >&2
	fi
fi

tmp=$(mktemp -d)
out=$tmp/out
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/handoff" ./cmd/handoff
go run ./cmd/handoff/internal/gateway/benchgateway \
	-duration "${DURATION:-5s}" -workers "${WORKERS:-16}" -body "${BODY:-1024}" \
	-handoff "$tmp/handoff" ${nginx:+-nginx "$nginx"} | tee "$out"
if [[ ${STRICT:-0} == 1 ]] && grep -q MISSED "$out"; then
	exit 1
fi
