#!/usr/bin/env bash
# tests/agent/updates_events_test.sh: the head looks at an open update's
# participants after events, not on a clock (issue 25, item 4).  One voter
# with two GPUs runs a disk-delta job, trainer + 1 engine; the engine holds
# its "verified" of v2 for 1.5 s (--stall-file), so v2 stays open that long.
# Checked: every version commits, v2 took at least the stall, and the head
# made few passes over the participants meanwhile
# (`skeinctl info --format json`: update_participant_passes; a pass every
# 20 ms tick, as before, is ~75 in 1.5 s; events make a handful).  A
# participant's loss found by an event is tested by updates_test.sh (an
# engine exits mid-receive: dropped, not timed out).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/wv_lib.sh"
wv_ctl() { ctl 1 "$@"; }

MEMBER="SKEIN_BIN=$BIN exec $ROOT/tests/agent/wv_member.sh"
SIM="--bytes 64K --tensors 4"
echo 2 >"$T_DIR/stall"
start_agent 1 --profile fast --head-eligible --bootstrap-expect 1 --gpus 2
passes() { ctl 1 info --format json 2>/dev/null | sed -nE 's/.*"update_participant_passes":([0-9]+).*/\1/p'; }
passes_known() { [ -n "$(passes)" ]; }
if ! wait_until 20 passes_known; then fail "no update_participant_passes in info"; finish; fi
mkdir -p "$T_DIR/dd"
ctl 1 job submit --name ev --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus-per-engine 1 \
	--rollout-num-gpus 1 --update-weight-timeout 10s --update-weight-transfer-mode disk-delta \
	--update-weight-disk-dir "$T_DIR/dd" --restart-backoff 200ms:1s --max-restarts 5 --stop-grace 1s \
	--trainer-cmd "$MEMBER trainer --wait-engines 1 $SIM --steps 3 --interval-ms 300" \
	--rollout-cmd "$MEMBER engine -- $SIM --steps 1000000000 --stall-file $T_DIR/stall" >/dev/null ||
	fail "submit"
p0=$(passes)
if wait_until 60 past ev 3; then pass "v1..v3 committed"; else fail "versions" "latest $(latest ev)"; ctl 1 transfers ev; finish; fi
p1=$(passes)
s=$(q ev get 2 seconds | $PY -c 'import ast, sys; print(ast.literal_eval(sys.stdin.read())["update_weights"])')
check "v2 stayed open for the engine's stall (${s} s)" awk "BEGIN { exit !(\"$s\" + 0 >= 1.4) }"
n=$((p1 - p0))
check "participant passes while v1..v3 were open: $n (a 20 ms tick would make ~75 in v2 alone)" [ "$n" -le 25 ]
finish
