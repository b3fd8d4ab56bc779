#!/usr/bin/env bash
# make demo: a local skein cluster doing the real work end to end.
#  1. six skeind agents on loopback addresses (fast profile): node1-3 are the
#     head-eligible control plane (no GPUs), node4-6 declare 8 GPUs each, at
#     127.0.0.4-6 (so node4 has the lowest address, as node A of docs/reference.md);
#  2. a head is elected; skeinctl members and head show the cluster;
#  3. the worked example of docs/reference.md, split: trainer 1x8, 8 rollout GPUs,
#     2 per engine.  Placement puts trainer ranks 0-7 on node4 and engines
#     0-3 on node5's GPU pairs; trainer rank 0 publishes a new version of the
#     weights every 500 ms through libskein (disk-delta), every version a
#     coordinated update the head commits once every engine verified it bit
#     for bit (docs/updates.md; tools/demo_member.sh); skeinctl transfers;
#     then, on purpose: engine 1 exits in the middle of v8 (v8 commits with the
#     others; engine 1 restarts syncing, then runs at the latest version), and
#     the trainer corrupts v14 (aborted; every engine back on v13);
#  4. node5 is SIGKILLed with its engines: the survivors detect it, the head
#     places the engines on node6's free GPUs, they catch up and verify again;
#  5. the head is SIGKILLed while an update is open: a new head is elected,
#     finishes the update, and no member restarts; then `skeinctl head
#     transfer` moves the head on purpose, at once;
#  6. the simulator runs the same membership code on 100 nodes and kills 3;
#  7. a stock HTTP engine (SGLang's endpoints: tests/engines/fake_sglang.py)
#     behind skein's sidecar (--rollout-engine sglang, docs/engines.md) takes
#     each committed version through checkpoint-engine's ZeroMQ protocol.
# Everything it started is stopped at the end, and on Ctrl-C (DEMO_KEEP=1
# keeps the agents' logs and data folders).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${SKEIN_BIN:-$ROOT/bin}
DIR=$(mktemp -d /tmp/skein-demo.XXXXXX)
BASE=${DEMO_PORT_BASE:-27900}
declare -A PIDS=()
# The cluster key: agents refuse to form a cluster without one (docs/security.md);
# skeinctl presents it over TCP (each agent's own Unix socket needs none).
"$BIN/skeinctl" keygen >"$DIR/cluster.key" && chmod 600 "$DIR/cluster.key"

cleanup() {
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
	if [ -n "${DEMO_KEEP:-}" ]; then echo "logs kept in $DIR"; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
trap 'echo; echo "interrupted: stopping the agents"; exit 130' INT TERM

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
ctl() { SKEIN_KEY_FILE="$DIR/cluster.key" "$BIN/skeinctl" --rpc "127.0.0.1:$((BASE + 50 + $1))" --timeout 3000 "${@:2}"; }
start() {
	mkdir -p "$DIR/n$1"
	local gpus=0; [ "$1" -ge 4 ] && gpus=8
	SKEIN_DEMO_BIN=$BIN DEMO_STALL=$DIR/stall SKEIN_PYTHON=/usr/bin/python3 PYTHONPATH=$ROOT/python "$BIN/skeind" --name "node$1" --bind "127.0.0.$1:$((BASE + $1))" \
		--rpc "127.0.0.1:$((BASE + 50 + $1))" --data-dir "$DIR/n$1" --profile fast --gpus $gpus \
		--key-file "$DIR/cluster.key" \
		$( [ "$1" -le 3 ] && echo --head-eligible --bootstrap-expect 3 ) \
		--join "127.0.0.1:$((BASE + 1))" >>"$DIR/n$1.log" 2>&1 &
	PIDS[$1]=$!
}
wait_for() { # SECS cmd...
	local end=$(( $(now_ms) + $1 * 1000 )); shift
	until "$@"; do [ "$(now_ms)" -ge $end ] && return 1; sleep 0.05; done
}
alive_in() { ctl "$1" members 2>/dev/null | awk 'NR > 1 && $3 == "alive"' | wc -l; }
all_see_alive() { for i in "$@"; do [ "$(alive_in "$i")" -ge 6 ] || return 1; done; }
status_of() { ctl "$1" members 2>/dev/null | awk -v w="node$2" '$1 == w { print $3 }'; }
all_see() { local who=$1 st=$2 i; shift 2; for i in "$@"; do [ "$(status_of "$i" "$who")" = "$st" ] || return 1; done; }
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ]; }
running() { [ "$(ctl 4 placement demo 2>/dev/null | awk '$6 == "running"' | wc -l)" = "$1" ]; }
node_of() { ctl 4 placement demo 2>/dev/null | awk -v m="$1" '$1 == m { print $3 }'; }
verified() { ctl 4 logs "$1" 2>/dev/null | grep -c 'verified bit for bit'; }
pids() { ctl 4 placement demo --format json 2>/dev/null | grep -o '"pid":[0-9]*' | tr '\n' ' '; }

echo "== 1. six agents join: node1-3 the control plane, node4-6 with 8 GPUs each"
t0=$(now_ms)
for i in 1 2 3 4 5 6; do start "$i"; done
wait_for 15 all_see_alive 1 2 3 4 5 6 || { echo "the cluster did not form; logs:"; tail -n 5 "$DIR"/*.log; exit 1; }
echo "converged in $(( $(now_ms) - t0 )) ms"
ctl 1 members
echo
echo "== 2. the head, elected among node1-3"
wait_for 15 has_head || { echo "no head elected"; exit 1; }
ctl 4 head
echo
echo "== 3. the worked example, split layout: trainer 1x8 GPUs, 4 engines of 2 GPUs"
mkdir -p "$DIR/weights"
ctl 6 job submit --name demo --actor-num-nodes 1 --actor-num-gpus-per-node 8 --rollout-num-gpus 8 \
	--rollout-num-gpus-per-engine 2 --num-gpus-per-node 8 --update-weight-transfer-mode disk-delta \
	--update-weight-disk-dir "$DIR/weights" --update-weight-timeout 10s --restart-backoff 200ms:5s --stop-grace 2s \
	--trainer-cmd "$ROOT/tools/demo_member.sh" --rollout-cmd "$ROOT/tools/demo_member.sh"
t0=$(now_ms)
wait_for 20 running 12 || { echo "the members did not start"; ctl 4 job status demo; exit 1; }
echo "12 members running $(( $(now_ms) - t0 )) ms after submit"
ctl 4 placement demo
tx() { ctl 4 transfers demo "$@" 2>/dev/null; }
state_of_v() { tx --last 64 | awk -v v="$1" '$2 == v { print $4 }'; }
final_v() { local st; st=$(state_of_v "$1"); [ "$st" = committed ] || [ "$st" = aborted ]; }
latest_v() { tx --last 64 | awk '$4 == "committed" { print $2; exit }'; }
eng_state() { ctl 4 placement demo 2>/dev/null | awk -v m="$1" '$1 == m { print $6 }'; }
wv_of() { ctl 4 placement demo --format json 2>/dev/null | tr '{' '\n' | grep "\"member\":\"$1\"" | grep -o '"weight_version":[0-9a-z]*' | cut -d: -f2; }
wait_for 30 final_v 3 || { echo "v3 did not commit"; tx; ctl 4 logs demo/engine-3 | tail; exit 1; }
echo "every version is an update the head commits once every engine verified it (skeinctl transfers):"
tx --last 3
echo
echo "skeinctl logs demo/trainer-0 (what the publish call returns, Miles's perf/update_weights_*):"
ctl 4 logs demo/trainer-0 | grep committed | tail -n 2
echo
echo "== 3b. engine 1 exits in the middle of v8 (it was told to, once)"
wait_for 30 final_v 8 || { echo "v8 did not end"; tx; exit 1; }
tx --last 64 | awk 'NR == 1 || $2 == 8'
back() { [ "$(eng_state demo/engine-1)" = running ] && [ "$(wv_of demo/engine-1)" = "$(latest_v)" ]; }
t0=$(now_ms)
wait_for 20 back || { echo "engine 1 did not come back"; ctl 4 placement demo; exit 1; }
echo "engine 1 restarted, caught up from the disk chain and runs at v$(wv_of demo/engine-1), the latest"
echo "(its state in skeinctl placement was syncing until it held that version):"
ctl 4 placement demo | awk 'NR == 1 || /engine/'
echo
echo "== 3c. the trainer corrupts one byte of v14 after checksumming it"
wait_for 30 final_v 15 || { echo "v15 did not end"; tx; exit 1; }
tx --last 64 | awk 'NR == 1 || $2 == 14 || $2 == 15'
echo "skeinctl logs demo/engine-3:"
ctl 4 logs demo/engine-3 | grep -E "v1[345] " | tail -n 3
echo
echo "== 4. SIGKILL node5 and its engines"
kill -9 "${PIDS[5]}"; wait "${PIDS[5]}" 2>/dev/null; unset 'PIDS[5]'
t0=$(now_ms)
wait_for 15 all_see 5 failed 1 2 3 4 6 || { echo "not detected in 15 s"; exit 1; }
echo "every survivor lists node5 failed after $(( $(now_ms) - t0 )) ms"
moved() { [ "$(node_of demo/engine-3)" = node6 ] && running 12; }
wait_for 15 moved || { echo "the engines did not move"; ctl 4 placement demo; exit 1; }
echo "engines 0-3 running on node6 $(( $(now_ms) - t0 )) ms after the kill"
ctl 4 placement demo
before=$(verified demo/engine-3)
caught_up() { [ "$(verified demo/engine-3)" -ge $((before + 3)) ]; }
wait_for 30 caught_up || { echo "the moved engine did not verify new versions"; ctl 4 logs demo/engine-3 | tail; exit 1; }
echo
echo "skeinctl logs demo/engine-3 (now on node6; it caught up from the newest full version, then took part again):"
ctl 4 logs demo/engine-3 | tail -n 4
echo
echo "== 5. SIGKILL the head while an update is open: the new head finishes it, no member restarts"
P0=$(pids)
S=$(( $(latest_v) + 2 ))
echo "$S" >"$DIR/stall" # every engine holds its word on v$S for 1.5 s: the update stays open
open_v() { local st; st=$(state_of_v "$S"); [ "$st" = moving ] || [ "$st" = preparing ]; }
wait_for 15 open_v || { echo "v$S was not seen open"; tx; exit 1; }
H=$(head_of 4); HI=${H#node}
echo "v$S is $(state_of_v "$S") on head $H: SIGKILL $H"
kill -9 "${PIDS[$HI]}"; wait "${PIDS[$HI]}" 2>/dev/null; unset "PIDS[$HI]"
t0=$(now_ms)
new_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ] && [ "$h" != "$H" ]; }
wait_for 15 new_head || { echo "no new head"; exit 1; }
echo "new head $(head_of 4) $(( $(now_ms) - t0 )) ms after killing $H"
wait_for 15 final_v "$S" || { echo "v$S stayed open"; tx; exit 1; }
echo "v$S $(state_of_v "$S") by the new head $(( $(now_ms) - t0 )) ms after the kill (it adopted the open record):"
tx --last 64 | awk -v v="$S" 'NR == 1 || $2 == v'
rm -f "$DIR/stall"
# the new head learns each member's process from its node's next report
wait_for 10 running 12
if [ "$(pids)" = "$P0" ]; then echo "all 12 members kept their processes (same pids)"; else echo "pids changed:"; echo "$P0"; pids; fi
ctl 4 job list
echo
echo "== 5b. a planned change of head (say, before the head's node is serviced): skeinctl head handover"
H=$(head_of 4); t0=$(now_ms)
ctl 4 head handover
moved() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ] && [ "$h" != "$H" ]; }
wait_for 5 moved || { echo "the head did not move"; exit 1; }
echo "head $H -> $(head_of 4) in $(( $(now_ms) - t0 )) ms, without an election timeout"
wait_for 10 running 12
if [ "$(pids)" = "$P0" ]; then echo "all 12 members kept their processes (same pids)"; else echo "pids changed:"; echo "$P0"; pids; fi
echo
echo "== 6. the same membership code in the simulator: 100 nodes, 3 killed"
"$BIN/skein-sim" --nodes 100 --seed 1 --profile fast --duration 6 --kill 3 --text-every 0.5 --format text | sed -n "1,/^nodes:/p" | sed "$ d"
echo
ctl 4 job stop demo
echo
echo "== 7. a stock HTTP engine taking versions: --rollout-engine sglang (docs/engines.md)"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	E=$ROOT/tests/engines
	gone() { ! ctl 4 placement demo 2>/dev/null | grep -q running; }
	wait_for 15 gone
	mkdir -p "$DIR/http"
	ctl 4 job submit --name http --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 2 \
		--rollout-num-gpus-per-engine 1 --update-weight-transfer-mode disk-delta --update-weight-disk-dir "$DIR/http" \
		--rollout-engine sglang --rollout-engine-layout "$E/layout.json" \
		--trainer-cmd "exec /usr/bin/python3 $E/trainer.py --layout $E/layout.json --interval-ms 500" \
		--rollout-cmd "exec /usr/bin/python3 $E/fake_sglang.py" >/dev/null
	ready2() { [ "$(ctl 4 engines http --ready 2>/dev/null | awk 'NR > 1 && $5 >= 3' | wc -l)" -ge 2 ]; }
	if wait_for 60 ready2; then
		ctl 4 engines http
		url=$(ctl 4 engines http --format json | grep -o '"url":"[^"]*"' | head -n 1 | cut -d'"' -f4)
		echo "POST $url/generate: $(curl -s -m 2 -X POST "$url/generate")"
		echo "the sidecar of engine 0 (skeinctl logs http/engine-0):"
		ctl 4 logs http/engine-0 | grep -E 'copy of|applied version' | tail -n 4 | sed 's/^/  /'
	else
		echo "the engines were not ready in 60 s"; ctl 4 engines http
	fi
	ctl 4 job stop http
else
	echo "(skipped: no torch for /usr/bin/python3)"
fi
echo "demo done: stopping the agents"
