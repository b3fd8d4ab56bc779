#!/usr/bin/env bash
# Checks for skein's build dependencies (Debian packages) and installs the
# missing ones with apt-get when run as root; otherwise prints the command.
#   tools/deps.sh check    exit 0 when everything is present
#   tools/deps.sh install  install what is missing (root), or print the command
#   tools/deps.sh ensure   check, then install when something is missing
# As root it also installs the packages only tests use (PKGS_TEST), unless
# SKEIN_DEPS_TESTS=0 (an image's build stage).
set -u
PKGS_REQUIRED="build-essential pkg-config libev-dev libprotobuf-c-dev protobuf-c-compiler libssl-dev libxxhash-dev libzstd-dev libyaml-dev clang libclang-rt-14-dev libucx-dev"
# clang and its runtime (libFuzzer, ASan, UBSan) build tests/fuzz/, whose short runs are part of
# make test; libclang-rt-14-dev is only recommended by clang-14, so it is named.
# libucx-dev: UCX's headers for p2p-ucx (libskein loads libucp.so.0 at run time,
# and builds without them: p2p-ucx then says it was built without UCX).
# The Python package's tests and the torch example (make test): Debian's CPU torch
# (1.13; 172 packages on this build machine) and a real BLAS for it: without
# OpenBLAS, torch's matmuls go to the reference BLAS, 10-20x slower; the serial
# build keeps one thread per process (four processes share the cores).
PKGS_REQUIRED="$PKGS_REQUIRED python3-torch python3-numpy libopenblas0-serial"
# serf and etcd are only the benchmarks' baselines (tests/agent/bench.sh,
# etcd_bench.sh); iproute2 gives `ip netns` to the partition tests.
PKGS_OPTIONAL="serf iproute2 etcd-server etcd-client"
# Used only by tests, which fail (not skip) without them: prometheus and promtool
# (tests/agent/metrics_test.sh), curl (metrics), dnsmasq-base (the Kubernetes test's
# DNS), libzmq5 (tests/engines: checkpoint-engine's ZeroMQ protocol; libskein loads it
# with dlopen, so the build needs no headers), binutils (readelf: the container test), systemd (systemd-analyze verify; procps
# gives the unit's /bin/kill), faketime (tests/agent/clock_test.sh steps the wall clock).
PKGS_TEST="prometheus curl dnsmasq-base binutils systemd procps faketime libzmq5"

missing() { # [LIST]
	local m=""
	for p in ${1:-$PKGS_REQUIRED}; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || m="$m $p"
	done
	echo "$m"
}

install() {
	local m t; m=$(missing); t=$([ "${SKEIN_DEPS_TESTS:-1}" = 0 ] || missing "$PKGS_TEST")
	[ -z "$m" ] && [ -z "$t" ] && return 0
	if [ -z "$m" ] && [ "$(id -u)" != 0 ]; then
		echo "skein: the tests need:$t (as root: apt-get install -y$t)" >&2
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "skein: missing build dependencies:$m" >&2
		echo "skein: run as root: apt-get update && apt-get install -y$m" >&2
		return 1
	fi
	echo "skein: installing$m$t" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2 || true
	[ -z "$m" ] || apt-get install -y -qq --no-install-recommends $m >&2 || return 1
	[ -z "$t" ] || apt-get install -y -qq --no-install-recommends $t >&2 || echo "skein: test packages not installed:$t" >&2
	# Optional packages: best effort, never fail the build for them.
	apt-get install -y -qq --no-install-recommends $PKGS_OPTIONAL >/dev/null 2>&1 || true
	# etcd_bench.sh starts its own members: not the package's service
	if command -v systemctl >/dev/null 2>&1; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi
}

case "${1:-ensure}" in
	check) [ -z "$(missing)" ] ;;
	install) install ;;
	ensure) { [ -z "$(missing)" ] && { [ "$(id -u)" != 0 ] || [ "${SKEIN_DEPS_TESTS:-1}" = 0 ] ||
		[ -z "$(missing "$PKGS_TEST")" ]; }; } || install ;;
	*) echo "usage: $0 check|install|ensure" >&2; exit 2 ;;
esac
