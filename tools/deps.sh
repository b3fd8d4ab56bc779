#!/usr/bin/env bash
# Checks for skein's build dependencies (Debian packages) and installs the
# missing ones with apt-get when run as root; otherwise prints the command.
#   tools/deps.sh check    exit 0 when everything is present
#   tools/deps.sh install  install what is missing (root), or print the command
#   tools/deps.sh ensure   check, then install when something is missing
set -u
PKGS_REQUIRED="build-essential pkg-config libev-dev libprotobuf-c-dev protobuf-c-compiler libssl-dev libxxhash-dev libzstd-dev libyaml-dev"
# serf and etcd are only the benchmarks' baselines (tests/agent/bench.sh,
# etcd_bench.sh); iproute2 gives `ip netns` to the partition tests.
PKGS_OPTIONAL="serf iproute2 etcd-server etcd-client"

missing() {
	local m=""
	for p in $PKGS_REQUIRED; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || m="$m $p"
	done
	echo "$m"
}

install() {
	local m; m=$(missing)
	[ -z "$m" ] && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "skein: missing build dependencies:$m" >&2
		echo "skein: run as root: apt-get update && apt-get install -y$m" >&2
		return 1
	fi
	echo "skein: installing$m" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2 || true
	apt-get install -y -qq --no-install-recommends $m >&2 || return 1
	# Optional packages: best effort, never fail the build for them.
	apt-get install -y -qq --no-install-recommends $PKGS_OPTIONAL >/dev/null 2>&1 || true
	# etcd_bench.sh starts its own members: not the package's service
	if command -v systemctl >/dev/null 2>&1; then systemctl disable --now etcd >/dev/null 2>&1 || true; fi
}

case "${1:-ensure}" in
	check) [ -z "$(missing)" ] ;;
	install) install ;;
	ensure) [ -z "$(missing)" ] || install ;;
	*) echo "usage: $0 check|install|ensure" >&2; exit 2 ;;
esac
