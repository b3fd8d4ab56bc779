# tests/agent/lib.sh: helpers for tests that run real skeind processes on
# 127.0.0.1.  Every wait is bounded and polls a condition; every process a
# test starts is killed by the EXIT trap, and its folder removed (kept, with
# the agents' logs, when a test failed: the path is printed).
#
#   start_agent I [flags...]   start agent "n$I": gossip port PORT_BASE+I, control PORT_BASE+500+I
#   ctl I args...              skeinctl against agent I
#   status_of OBS WHO          WHO's status in OBS's view ("" if unknown)
#   wait_until SECS cmd...     poll cmd every 50 ms until it succeeds; 1 on timeout
#   check NAME cmd...          record a pass or a failure
#   finish                     print "# N passed, M failed" and exit

set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${SKEIN_BIN:-$ROOT/bin}
SKEIND=$BIN/skeind
SKEINCTL=$BIN/skeinctl
# Ports of our own: one block of 1000 per test process, from its pid, below
# the ephemeral range (32768+) so that no outgoing connection takes them.
PORT_BASE=${PORT_BASE:-$((10000 + ($$ % 22) * 1000))}
T_DIR=$(mktemp -d /tmp/skein-test.XXXXXX)
T_PASS=0
T_FAIL=0
declare -A PIDS=()
# Tests of everything but security run their agents --insecure (every command
# from anyone, no key needed to --join): set INSECURE= before start_agent to
# get the safe defaults.
INSECURE=${INSECURE---insecure}

cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
	# the (empty) member cgroups of agents killed with SIGKILL: named in their state file
	local cg d
	for cg in $(sed -n 's/^cgroup //p' "$T_DIR"/*/members 2>/dev/null); do
		for d in "$cg"/m-*; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
		[ -d "$cg" ] && rmdir "$cg" 2>/dev/null
	done
	if [ "$T_FAIL" = 0 ]; then rm -rf "$T_DIR"; else echo "  logs kept in $T_DIR"; fi
}
trap cleanup EXIT

gport() { echo $((PORT_BASE + $1)); }
rport() { echo $((PORT_BASE + 500 + $1)); }

start_agent() {
	local i=$1; shift
	mkdir -p "$T_DIR/n$i"
	"$SKEIND" --name "n$i" --bind "127.0.0.1:$(gport "$i")" --rpc "127.0.0.1:$(rport "$i")" \
		--data-dir "$T_DIR/n$i" $INSECURE "$@" >>"$T_DIR/n$i.log" 2>&1 &
	PIDS[$i]=$!
}

kill_agent() { # I SIGNAL
	kill "-${2:-9}" "${PIDS[$1]}" 2>/dev/null
	if [ "${2:-9}" = 9 ] || [ "${2:-9}" = KILL ]; then wait "${PIDS[$1]}" 2>/dev/null; unset "PIDS[$1]"; fi
}

ctl() { local i=$1; shift; "$SKEINCTL" --rpc "127.0.0.1:$(rport "$i")" --timeout 2000 "$@"; }

status_of() {
	local name addr st rest
	while read -r name addr st rest; do
		[ "$name" = "n$2" ] && { echo "$st"; return; }
	done < <(ctl "$1" members 2>/dev/null)
}

# how many of the agents listed in $3.. see agent $1 in status $2
count_seeing() {
	local who=$1 st=$2 n=0 o; shift 2
	for o in "$@"; do [ "$(status_of "$o" "$who")" = "$st" ] && n=$((n + 1)); done
	echo $n
}

# true when every agent in the list sees all of them alive
all_alive() {
	local o name addr st rest alive
	for o in "$@"; do
		alive=0
		while read -r name addr st rest; do
			[ "$st" = alive ] && alive=$((alive + 1))
		done < <(ctl "$o" members 2>/dev/null)
		[ "$alive" -ge $# ] || return 1
	done
}

wait_until() {
	local secs=$1; shift
	local end=$(( $(date +%s%N) / 1000000 + secs * 1000 ))
	while :; do
		"$@" && return 0
		[ $(( $(date +%s%N) / 1000000 )) -ge $end ] && return 1
		sleep 0.05
	done
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

check() {
	local name=$1; shift
	if "$@"; then
		T_PASS=$((T_PASS + 1)); echo "ok   $name"
	else
		T_FAIL=$((T_FAIL + 1)); echo "FAIL $name"
	fi
}

pass() { T_PASS=$((T_PASS + 1)); echo "ok   $1"; }
fail() { T_FAIL=$((T_FAIL + 1)); echo "FAIL $1${2:+: $2}"; }

finish() {
	# a sanitizer report in any agent's log (BUILD=asan) fails the file
	local san
	san=$(grep -l -E 'runtime error:|ERROR: AddressSanitizer|ERROR: LeakSanitizer' "$T_DIR"/*.log "$T_DIR"/*/*.log 2>/dev/null | head -3)
	[ -n "$san" ] && fail "sanitizer report in $(echo $san | tr '\n' ' ')"
	# a failure on a CI machine leaves only this output: the agents' last
	# warnings and errors go with it (5 lines a log at most)
	if [ "$T_FAIL" != 0 ]; then
		local f
		for f in "$T_DIR"/*.log; do
			[ -e "$f" ] || continue
			grep -E ' (warn|error|WARN|ERROR) ' "$f" 2>/dev/null | grep -v 'no key:' | tail -n 5 | sed "s|^|  $(basename "$f"): |"
		done
	fi
	echo "# $T_PASS passed, $T_FAIL failed"
	[ "$T_FAIL" = 0 ]
	exit $?
}

# Skips the whole file with a reason (counted as neither pass nor failure).
skip_all() {
	echo "skip: $1"
	echo "# 0 passed, 0 failed, 1 skipped"
	exit 0
}

# true when exactly/at least COUNT of the observers see WHO in STATUS
seen_by() { # WHO STATUS COUNT OBS...
	local who=$1 st=$2 want=$3; shift 3
	[ "$(count_seeing "$who" "$st" "$@")" -ge "$want" ]
}

quiet() { "$@" >/dev/null 2>&1; }

# nobody_copy PROGRAM: a copy nobody may run (the clone may sit in a 0700
# folder, as a mktemp -d one does); prints its path.  T_DIR becomes 0755:
# put nothing secret in it but 0600 files.
nobody_copy() {
	mkdir -p "$T_DIR/nobody-bin" && chmod 755 "$T_DIR" "$T_DIR/nobody-bin" &&
		install -m 755 "$1" "$T_DIR/nobody-bin/" && echo "$T_DIR/nobody-bin/$(basename "$1")"
}

# expect_err RC WANT OUTPUT PATTERN: exit code as wanted, one line, pattern in it
expect_err() {
	[ "$1" = "$2" ] && [ "$(printf '%s\n' "$3" | wc -l)" = 1 ] && printf '%s' "$3" | grep -q -- "$4"
}

# the generation OBS knows for WHO, and a test of it
gen_seen() {
	ctl "$1" members --format json 2>/dev/null | sed 's/"tags":{[^}]*}//g' | tr '}' '\n' |
		grep "\"name\":\"n$2\"" | grep -o '"generation":[0-9]*' | cut -d: -f2
}
gen_is() { [ "$(gen_seen "$1" "$2")" = "$3" ]; }
