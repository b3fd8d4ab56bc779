#!/usr/bin/env bash
# tests/engines/failover_test.sh: a stock-engine job (--rollout-engine
# sglang, disk-delta) whose trainer is skein-trainer-sim with one corrupted
# version (v8: a wrong byte after its checksum), on three head-eligible
# agents and a GPU node (n4: trainer and two fake SGLang engines; engine 0's
# loader is slow after v10).  Checked: v8 is aborted and never reaches an engine (no
# engine loads it, no sidecar applies it); the head is SIGKILLed while
# engine 0's apply runs: the apply completes (it needs no head), a new head
# takes over, versions go on, and both engines are ready at a version newer
# than the failover.
. "$(dirname "$0")/../agent/lib.sh"
PY=/usr/bin/python3
E=$ROOT/tests/engines
"$PY" -c 'import torch' 2>/dev/null || skip_all "no torch for $PY (tools/deps.sh installs python3-torch)"
export SKEIN_PYTHON=$PY PYTHONPATH=$ROOT/python SKEIN_ENGINE_APPLY_TIMEOUT=10
T0=$(now_ms)
V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 0"
for i in 1 2 3; do start_agent $i $V --join "127.0.0.1:$(gport 1)"; done
start_agent 4 --profile fast --gpus 3 --join "127.0.0.1:$(gport 1)"
head_of() { ctl 4 head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of); [ -n "$h" ] && [ "$h" != "(none)" ]; }
wait_until 20 has_head || { fail "no head"; finish; }
"$PY" "$E/sim_layout.py" 262144 8 1 >"$T_DIR/layout.json"
mkdir -p "$T_DIR/w"
L=$T_DIR/n4/logs/fo
ctl 4 job submit --name fo --actor-num-nodes 1 --actor-num-gpus-per-node 1 --num-gpus-per-node 3 \
	--rollout-num-gpus 2 --rollout-num-gpus-per-engine 1 --update-weight-transfer-mode disk-delta \
	--update-weight-disk-dir "$T_DIR/w" --update-weight-timeout 4s --restart-backoff 100ms:1s --stop-grace 1s \
	--rollout-engine sglang --rollout-engine-layout "$T_DIR/layout.json" \
	--trainer-cmd "SKEIN_BIN=$BIN exec $ROOT/tests/agent/wv_member.sh trainer --wait-engines 2 --bytes 256K --tensors 8 --steps 1000000 --interval-ms 700 --corrupt-version 8" \
	--rollout-cmd "FAKE_SLOW_AFTER=10 FAKE_SLOW_LOAD=\$([ \$SKEIN_ENGINE_ID = 0 ] && echo 1) exec $PY $E/fake_sglang.py" >/dev/null ||
	{ fail "submit"; finish; }
SD=$(dirname "$(ctl 4 info | awk '$1 == "control" && $2 == "socket:" { print $3 }')")/engines
st() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$SD/fo/$1.json" "$2" 2>/dev/null; }
ready_past() { [ "$(st "$1" state)" = ready ] && [ "$(st "$1" weight_version)" -gt "$2" ]; }
if wait_until 40 ready_past 0 9 && wait_until 10 ready_past 1 9; then pass "both engines ready past v9 ($(( ($(now_ms) - T0) / 1000 )) s)"
else fail "engines not ready past v9" "$(st 0 state) $(st 0 weight_version) $(st 1 state) $(st 1 weight_version)"; tail -n 5 "$L"/engine-*.log; finish; fi
v8=$(ctl 4 transfers fo --last 1000 --format json 2>/dev/null | "$PY" -c '
import json, sys
def walk(o):
    if isinstance(o, dict):
        if o.get("version") == 8 and "state" in o:
            print(o["state"], str(o.get("reason", ""))[:90], "participants:", o.get("participants", o.get("engines", "?")) if o["state"] != "aborted" else ""); sys.exit(0)
        for v in o.values(): walk(v)
    elif isinstance(o, list):
        for v in o: walk(v)
walk(json.load(sys.stdin))')
check "v8 (corrupted) aborted: $v8" bash -c "printf '%s' '$v8' | grep -q '^aborted'"
check "v8 never reached an engine (no load, no apply of v8)" \
	bash -c "! grep -h 'version 8 in\|applied version 8:' $L/engine-*.log | grep -q ."
# --- kill the head while engine 0 applies (its loader takes 1 s a bucket)
applying() { [ "$(st 0 state)" = updating ]; }
wait_until 10 applying || fail "engine 0 never seen updating"
H=$(head_of); VA=$(st 0 committed)
kill_agent "${H#n}" 9
t0=$(now_ms)
pass "head $H SIGKILLed while engine 0 applied v$VA"
new_head() { local h; h=$(head_of); [ -n "$h" ] && [ "$h" != "(none)" ] && [ "$h" != "$H" ]; }
check "a new head ($(wait_until 15 new_head; head_of)) in $(( $(now_ms) - t0 )) ms" new_head
applied() { grep -q "applied version $VA:" "$L/engine-0.log"; }
check "engine 0's apply of v$VA completed without the head" wait_until 10 applied
if wait_until 30 ready_past 0 $((VA + 1)) && wait_until 10 ready_past 1 $((VA + 1)); then
	pass "versions went on: engines ready at v$(st 0 weight_version), v$(st 1 weight_version) after the failover"
else fail "engines not ready after the failover" "$(st 0 state) $(st 0 weight_version) $(st 1 state) $(st 1 weight_version)"; fi
ctl 4 engines fo | sed 's/^/  /'
tb=$(grep -l Traceback "$L"/engine-*.log 2>/dev/null)
check "no sidecar or engine raised" [ -z "$tb" ]
[ -z "$tb" ] || grep -h -A8 Traceback $tb | head -n 30
ctl 4 job stop fo >/dev/null
echo "  total $(( ($(now_ms) - T0) / 1000 )) s"
finish
