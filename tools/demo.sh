#!/usr/bin/env bash
# make demo: a local skein cluster doing the real work end to end.
#  1. five skeind agents on 127.0.0.1 (fast profile, 8 declared GPUs each)
#     join through the first one; skeinctl members shows them;
#  2. one is SIGKILLed: the others detect it (time printed);
#  3. it is restarted with the same name and data dir: alive again;
#  4. nodes 1-3 are head-eligible: a head is elected, a write goes through
#     it, the head is SIGKILLed, a new head is elected with the write intact;
#  5. the simulator runs the same membership code on 100 nodes and kills 3.
# Everything it started is stopped at the end, and on Ctrl-C.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SKEIN_BIN:-$ROOT/bin}
DIR=$(mktemp -d /tmp/skein-demo.XXXXXX)
BASE=${DEMO_PORT_BASE:-27900}
declare -A PIDS=()

cleanup() {
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
	rm -rf "$DIR"
}
trap cleanup EXIT
trap 'echo; echo "interrupted: stopping the agents"; exit 130' INT TERM

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
ctl() { "$BIN/skeinctl" --rpc "127.0.0.1:$((BASE + 50 + $1))" --timeout 2000 "${@:2}"; }
start() {
	mkdir -p "$DIR/n$1"
	"$BIN/skeind" --name "node$1" --bind "127.0.0.1:$((BASE + $1))" --rpc "127.0.0.1:$((BASE + 50 + $1))" \
		--data-dir "$DIR/n$1" --profile fast --gpus 8 --tag "rack=r$(( ($1 + 1) / 2 ))" \
		$( [ "$1" -le 3 ] && echo --head-eligible --bootstrap-expect 3 ) \
		--join "127.0.0.1:$((BASE + 1))" >>"$DIR/n$1.log" 2>&1 &
	PIDS[$1]=$!
}
alive_in() { ctl "$1" members 2>/dev/null | awk 'NR > 1 && $3 == "alive"' | wc -l; }
status_of() { ctl "$1" members 2>/dev/null | awk -v w="node$2" '$1 == w { print $3 }'; }
wait_for() { # SECS cmd...
	local end=$(( $(now_ms) + $1 * 1000 )); shift
	until "$@"; do [ "$(now_ms)" -ge $end ] && return 1; sleep 0.05; done
}
all_see_alive() { for i in "$@"; do [ "$(alive_in "$i")" -ge 5 ] || return 1; done; }
all_see() { local who=$1 st=$2 i; shift 2; for i in "$@"; do [ "$(status_of "$i" "$who")" = "$st" ] || return 1; done; }

echo "== 1. five agents join the cluster"
t0=$(now_ms)
for i in 1 2 3 4 5; do start "$i"; done
wait_for 15 all_see_alive 1 2 3 4 5 || { echo "the cluster did not form; logs:"; tail -n 5 "$DIR"/*.log; exit 1; }
echo "converged in $(( $(now_ms) - t0 )) ms"
ctl 1 members
echo
echo "== 2. SIGKILL node5"
kill -9 "${PIDS[5]}"; wait "${PIDS[5]}" 2>/dev/null; unset 'PIDS[5]'
t0=$(now_ms)
wait_for 15 all_see 5 failed 1 2 3 4 || { echo "not detected in 15 s"; exit 1; }
echo "every survivor lists node5 failed after $(( $(now_ms) - t0 )) ms"
ctl 1 members
echo
echo "== 3. restart node5 (same name, same data dir: a new generation)"
start 5
t0=$(now_ms)
wait_for 15 all_see 5 alive 1 2 3 4 || { echo "node5 did not come back"; exit 1; }
echo "node5 alive again everywhere after $(( $(now_ms) - t0 )) ms (generation $(cat "$DIR/n5/generation"))"
ctl 1 members --format json
echo
echo "== 4. the head: elected among node1-3, replicated state, failover"
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ]; }
wait_for 15 has_head || { echo "no head elected"; exit 1; }
ctl 4 head
ctl 4 state put job/demo "split layout, 16 GPUs"
H=$(head_of 4); HI=${H#node}
echo "SIGKILL the head $H"
kill -9 "${PIDS[$HI]}"; wait "${PIDS[$HI]}" 2>/dev/null; unset "PIDS[$HI]"
t0=$(now_ms)
new_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ] && [ "$h" != "$H" ]; }
wait_for 15 new_head || { echo "no new head"; exit 1; }
ctl 4 state put after/failover yes >/dev/null
echo "new head $(head_of 4) took a write $(( $(now_ms) - t0 )) ms after the kill; the state is intact:"
ctl 4 state list
echo
echo "== 5. the same membership code in the simulator: 100 nodes, 3 killed"
"$BIN/skein-sim" --nodes 100 --seed 1 --profile fast --duration 6 --kill 3 --text-every 0.5 --format text | sed -n "1,/^nodes:/p" | sed "$ d"
echo
echo "demo done: stopping the agents"
