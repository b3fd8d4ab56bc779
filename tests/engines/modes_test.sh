#!/usr/bin/env bash
# tests/engines/modes_test.sh: the sidecar (--rollout-engine sglang,
# docs/engines.md) in the job modes that receive only into device memory:
# broadcast and broadcast_packed (NCCL) and colocated (the trainer's CUDA IPC
# handoff), without a GPU.  libskein runs on tests/fakecuda's stand-ins
# (SKEIN_CUDART_LIB, SKEIN_NCCL_LIB: "device memory" is host shared memory);
# torch here has no CUDA, so the sidecar's copy is host shared memory declared
# to libskein as device memory (SKEIN_ENGINE_COPY=fake-device), and the
# trainer (trainer.py --fake-device) publishes tensors the stand-in allocated.
# One agent, one job per mode, all at once: broadcast modes a trainer GPU and
# two engines (three NCCL ranks), colocated one engine on the trainer's GPU
# (--colocate).
# Checked per mode: the engines become ready; every ready engine answers
# /generate with exactly the bytes of the committed version it reports; a
# SIGKILLed engine comes back ready only at the latest version, from its
# sidecar's copy.  First, without a job: the sidecar's one-line refusals of a
# host copy in these modes (and of a device copy without CUDA).
# Usage: modes_test.sh [MODE...] (default: broadcast broadcast_packed colocated).
. "$(dirname "$0")/../agent/lib.sh"
PY=/usr/bin/python3
E=$ROOT/tests/engines
"$PY" -c 'import torch' 2>/dev/null || skip_all "no torch for $PY (tools/deps.sh installs python3-torch)"
[ -e /usr/lib/x86_64-linux-gnu/libzmq.so.5 ] || ldconfig -p | grep -q libzmq.so.5 || skip_all "no libzmq.so.5"
FCU=${SKEIN_FAKE_CUDART:-$ROOT/build/release/tests/libfake_cudart.so}
FNC=${SKEIN_FAKE_NCCL:-$ROOT/build/release/tests/libfake_nccl.so}
[ -e "$FCU" ] && [ -e "$FNC" ] || skip_all "no stand-in CUDA runtime or NCCL (make builds them)"
export SKEIN_PYTHON=$PY PYTHONPATH=$ROOT/python SKEIN_ENGINE_APPLY_TIMEOUT=10 SKEIN_ENGINE_APPLY_RETRIES=3
T0=$(now_ms)

# --- refusals, one line each, no traceback (the sidecar exits before it starts an engine)
refusal() { # COPY MODE CUDART -> the sidecar's stderr
	env -i PATH="$PATH" PYTHONPATH="$ROOT/python" SKEIN_LIB="${SKEIN_LIB:-}" SKEIN_ENGINE_CMD=true \
		SKEIN_ENGINE_LAYOUT="$E/layout.json" SKEIN_TRANSFER_MODE="$2" SKEIN_ENGINE_COPY="$1" \
		${3:+SKEIN_CUDART_LIB=$3} "$PY" -m skein.sidecar 2>&1 >/dev/null
}
one_refusal() { # COPY MODE
	local out; out=$(refusal "$1" "$2")
	check "sidecar refuses copy '${1:-default}' in $2 without CUDA in one line: $out" \
		bash -c "[ \$(printf '%s\n' \"\$1\" | wc -l) = 1 ] && printf '%s' \"\$1\" | grep -q '^skein sidecar: .*\(device memory\|GPU\|stand-in\)'" _ "$out"
}
one_refusal pinned broadcast
one_refusal shared colocated
one_refusal "" broadcast_packed
one_refusal fake-device broadcast

export SKEIN_CUDART_LIB=$FCU SKEIN_CUDA_LIB=$FCU SKEIN_NCCL_LIB=$FNC SKEIN_ENGINE_COPY=fake-device
start_agent 1 --profile fast --head-eligible --bootstrap-expect 1 --gpus 7
head_known() { ctl 1 head 2>/dev/null | awk '$1 == "head:" { print $2 }' | grep -q '^n1$'; }
wait_until 20 head_known || { fail "no head"; finish; }
SD=$(dirname "$(ctl 1 info | awk '$1 == "control" && $2 == "socket:" { print $3 }')")/engines

st() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$SD/$1/$2.json" "$3" 2>/dev/null; }
digest_of() { awk -v v="$2" '$1 == "version" && $2 == v { print $4 }' "$T_DIR/n1/logs/$1/trainer-0.log"; }
latest() { awk '$1 == "version" { v = $2 } END { print v + 0 }' "$T_DIR/n1/logs/$1/trainer-0.log" 2>/dev/null; }
gen() { curl -s -m 2 -X POST "$(st "$1" "$2" url)/generate"; }
served_ok() {
	local j=$1 i=$2 r v d
	[ "$(st "$j" "$i" state)" = ready ] || return 1
	r=$(gen "$j" "$i") || return 1
	v=$(printf '%s' "$r" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["weight_version"])')
	d=$(printf '%s' "$r" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["digest"])')
	# the trainer logs v once its publish returned, which may be after an engine serves it
	has_digest() { [ -n "$(digest_of "$j" "$v")" ]; }
	[ -n "$v" ] && [ "$v" -gt 0 ] && wait_until 5 has_digest || { LAST_BAD="v$v: the trainer never logged it"; return 1; }
	[ "$d" = "$(digest_of "$j" "$v")" ] || { LAST_BAD="v$v: served ${d:0:12}, the trainer's $(digest_of "$j" "$v" | cut -c1-12)"; return 1; }
}
LAST_BAD=""
ready_at_least() { [ "$(st "$1" "$2" state)" = ready ] && [ "$(st "$1" "$2" weight_version)" -ge "$3" ]; }

# job_of MODE; submit MODE: its job (all three run at once, on GPUs of their own)
job_of() { printf 'm-%s' "$(printf '%s' "$1" | tr -d _ | cut -c1-10)"; }
nengines() { if [ "$1" = colocated ]; then echo 1; else echo 2; fi; }
submit() {
	local mode=$1 j shape
	j=$(job_of "$mode")
	shape="--actor-num-nodes 1 --actor-num-gpus-per-node 1 --num-gpus-per-node 3 --rollout-num-gpus 2"
	[ "$mode" = colocated ] && shape="--actor-num-nodes 1 --actor-num-gpus-per-node 1 --num-gpus-per-node 1 --rollout-num-gpus 1 --colocate"
	ctl 1 job submit --name "$j" $shape --rollout-num-gpus-per-engine 1 --update-weight-transfer-mode "$mode" \
		--restart-backoff 100ms:1s --stop-grace 2s --update-weight-timeout 5s \
		--rollout-engine sglang --rollout-engine-layout "$E/layout.json" \
		--trainer-cmd "i=0; while [ ! -e $T_DIR/go-$j ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i + 1)); done; exec $PY $E/trainer.py --layout $E/layout.json --interval-ms 400 --fake-device" \
		--rollout-cmd "exec $PY $E/fake_sglang.py" >/dev/null || fail "$mode: submit"
}

one_mode() {
	local mode=$1 j n
	j=$(job_of "$mode") n=$(nengines "$mode")
	local i ok=1
	for ((i = 0; i < n; i++)); do wait_until 40 ready_at_least "$j" $i 3 || ok=0; done
	if [ $ok = 1 ]; then
		pass "$mode: $n engine(s) ready at v$(st "$j" 0 weight_version) ($(( ($(now_ms) - T0) / 1000 )) s)"
	else fail "$mode: engines not ready" "states $(st "$j" 0 state) $(st "$j" 1 state): $(st "$j" 0 reason)"
		tail -n 8 "$T_DIR"/n1/logs/$j/engine-*.log "$T_DIR"/n1/logs/$j/trainer-0.log; ctl 1 job stop "$j" >/dev/null; return; fi
	check "$mode: the sidecar's copy is the declared device copy: $(st "$j" 0 copy)" [ "$(st "$j" 0 copy)" = fake-device ]
	check "$mode: the sidecar received through libskein's $mode path" \
		grep -q "sglang ($mode job mode): copy" "$T_DIR/n1/logs/$j/engine-0.log"
	local k bad=0
	for k in 1 2 3 4; do
		for ((i = 0; i < n; i++)); do served_ok "$j" $i || served_ok "$j" $i || bad=$((bad + 1)); done
		sleep 0.2
	done
	check "$mode: $((4 * n)) generate answers of ready engines carry exactly their committed version's bytes ($bad not$([ "$bad" = 0 ] || echo ": $LAST_BAD"))" [ "$bad" = 0 ]
}
# after_kill MODE PID0: engine 0 of MODE's job was SIGKILLed (pid PID0)
after_kill() {
	local mode=$1 pid0=$2 j
	j=$(job_of "$mode")
	back() { [ "$(st "$j" 0 pid)" != "$pid0" ] && ready_at_least "$j" 0 "$(( $(latest "$j") - 1 ))"; }
	if wait_until 20 back && { served_ok "$j" 0 || served_ok "$j" 0; }; then
		pass "$mode: engine 0 SIGKILLed (pid $pid0): restarted (pid $(st "$j" 0 pid)), ready at v$(st "$j" 0 weight_version) with its bytes"
	else fail "$mode: engine 0 not back" "$(st "$j" 0 state) $(st "$j" 0 reason)"; tail -n 5 "$T_DIR/n1/logs/$j/engine-0.log"; fi
	check "$mode: engine 0's restart was never listed ready before serving the committed version" \
		bash -c "! grep -A3 'engine restarted' '$T_DIR/n1/logs/$j/engine-0.log' | grep -q 'starting -> ready'"
	local js; js=$(ctl 1 transfers "$j" --format json 2>/dev/null)
	check "$mode: skeinctl transfers: mode $mode, $(grep -o '"state":"committed"' <<<"$js" | wc -l) committed" \
		bash -c "printf '%s' \"\$1\" | grep -q '\"mode\":\"$mode\"' && printf '%s' \"\$1\" | grep -q '\"state\":\"committed\"'" _ "$js"
	ctl 1 job stop "$j" >/dev/null
}
MODES=${*:-broadcast broadcast_packed colocated}
for m in $MODES; do submit "$m"; done
# each trainer starts once every sidecar of its job asks the head for work:
# an NCCL group whose participants change aborts that version (a new
# communicator, the stand-in's ranks waiting up to 20 s for the missing one)
go_when_synced() {
	local m j k gone=0
	for m in $MODES; do
		j=$(job_of "$m")
		[ -e "$T_DIR/go-$j" ] && continue
		for ((k = 0; k < $(nengines "$m"); k++)); do [ "$(st "$j" $k state)" = syncing ] || continue 2; done
		touch "$T_DIR/go-$j"
	done
	for m in $MODES; do [ -e "$T_DIR/go-$(job_of "$m")" ] || gone=1; done
	[ $gone = 0 ]
}
wait_until 60 go_when_synced || fail "sidecars not syncing" "$(cat "$SD"/*/0.json 2>/dev/null)"
for m in $MODES; do one_mode "$m"; done
declare -A P0
for m in $MODES; do P0[$m]=$(st "$(job_of "$m")" 0 pid); kill -9 "${P0[$m]}"; done
for m in $MODES; do after_kill "$m" "${P0[$m]}"; done
tb=$(grep -l Traceback "$T_DIR"/n1/logs/*/engine-*.log "$T_DIR"/n1/logs/*/trainer-*.log 2>/dev/null)
check "no sidecar, engine or trainer raised" [ -z "$tb" ]
[ -z "$tb" ] || grep -h -A8 Traceback $tb | head -n 30
echo "  total $(( ($(now_ms) - T0) / 1000 )) s"
finish
