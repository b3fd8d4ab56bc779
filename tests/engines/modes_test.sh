#!/usr/bin/env bash
# tests/engines/modes_test.sh: the sidecar (--rollout-engine sglang,
# docs/engines.md) in the job modes that receive only into device memory:
# broadcast and broadcast_packed (NCCL) and colocated (the trainer's CUDA IPC
# handoff), without a GPU.  libskein runs on tests/fakecuda's stand-ins
# (SKEIN_CUDART_LIB, SKEIN_NCCL_LIB: "device memory" is host shared memory);
# torch here has no CUDA, so the sidecar's copy is host shared memory declared
# to libskein as device memory (SKEIN_ENGINE_COPY=fake-device), and the
# trainer (trainer.py --fake-device) publishes tensors the stand-in allocated.
# One agent, one job per mode: broadcast modes a trainer GPU and two engines
# (three NCCL ranks), colocated one engine on the trainer's GPU (--colocate).
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
start_agent 1 --profile fast --head-eligible --bootstrap-expect 1 --gpus 3
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
	[ -n "$v" ] && [ "$v" -gt 0 ] && [ "$d" = "$(digest_of "$j" "$v")" ]
}
ready_at_least() { [ "$(st "$1" "$2" state)" = ready ] && [ "$(st "$1" "$2" weight_version)" -ge "$3" ]; }

one_mode() {
	local mode=$1 j n=2 shape
	j=m-$(printf '%s' "$mode" | tr -d _ | cut -c1-10)
	shape="--actor-num-nodes 1 --actor-num-gpus-per-node 1 --num-gpus-per-node 3 --rollout-num-gpus 2"
	[ "$mode" = colocated ] && { n=1; shape="--actor-num-nodes 1 --actor-num-gpus-per-node 1 --num-gpus-per-node 1 --rollout-num-gpus 1 --colocate"; }
	ctl 1 job submit --name "$j" $shape --rollout-num-gpus-per-engine 1 --update-weight-transfer-mode "$mode" \
		--restart-backoff 100ms:1s --stop-grace 2s --update-weight-timeout 5s \
		--rollout-engine sglang --rollout-engine-layout "$E/layout.json" \
		--trainer-cmd "i=0; while [ ! -e $T_DIR/go-$j ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i + 1)); done; exec $PY $E/trainer.py --layout $E/layout.json --interval-ms 400 --fake-device" \
		--rollout-cmd "exec $PY $E/fake_sglang.py" >/dev/null || { fail "$mode: submit"; return; }
	# the trainer starts once every sidecar asks the head for work: an NCCL
	# group whose participants change aborts that version (a new communicator)
	local i ok=1
	syncing() { local k; for ((k = 0; k < n; k++)); do [ "$(st "$j" $k state)" = syncing ] || return 1; done; }
	wait_until 40 syncing || fail "$mode: sidecars not syncing" "$(st "$j" 0 state) $(st "$j" 0 reason)"
	touch "$T_DIR/go-$j"
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
	check "$mode: $((4 * n)) generate answers of ready engines carry exactly their committed version's bytes ($bad not)" [ "$bad" = 0 ]
	local pid0; pid0=$(st "$j" 0 pid)
	kill -9 "$pid0"
	back() { [ "$(st "$j" 0 pid)" != "$pid0" ] && ready_at_least "$j" 0 "$(( $(latest "$j") - 1 ))"; }
	if wait_until 20 back && { served_ok "$j" 0 || served_ok "$j" 0; }; then
		pass "$mode: engine 0 SIGKILLed (pid $pid0): restarted (pid $(st "$j" 0 pid)), ready at v$(st "$j" 0 weight_version) with its bytes"
	else fail "$mode: engine 0 not back" "$(st "$j" 0 state) $(st "$j" 0 reason)"; tail -n 5 "$T_DIR/n1/logs/$j/engine-0.log"; fi
	check "$mode: engine 0's restart was never listed ready before serving the committed version" \
		bash -c "! grep -A3 'engine restarted' '$T_DIR/n1/logs/$j/engine-0.log' | grep -q 'starting -> ready'"
	local js; js=$(ctl 1 transfers "$j" --format json 2>/dev/null)
	check "$mode: skeinctl transfers: $(grep -o '"state":"committed"' <<<"$js" | wc -l) committed with the engines in them" \
		bash -c "printf '%s' \"\$1\" | grep -q '\"mode\":\"$mode\"' && printf '%s' \"\$1\" | grep -q '\"state\":\"committed\"'" _ "$js"
	ctl 1 job stop "$j" >/dev/null
	stopped() { ! ctl 1 placement "$j" 2>/dev/null | grep -q running; }
	wait_until 20 stopped
}
for m in ${*:-broadcast broadcast_packed colocated}; do one_mode "$m"; done
tb=$(grep -l Traceback "$T_DIR"/n1/logs/*/engine-*.log "$T_DIR"/n1/logs/*/trainer-*.log 2>/dev/null)
check "no sidecar, engine or trainer raised" [ -z "$tb" ]
[ -z "$tb" ] || grep -h -A8 Traceback $tb | head -n 30
echo "  total $(( ($(now_ms) - T0) / 1000 )) s"
finish
