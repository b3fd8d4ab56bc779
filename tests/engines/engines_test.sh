#!/usr/bin/env bash
# tests/engines/engines_test.sh: stock-engine jobs (--rollout-engine sglang,
# docs/engines.md) with fake SGLang engines (tests/engines/fake_sglang.py)
# behind skein's sidecar, on two agents on 127.0.0.1: trainer on n1, three
# engines on n2.  Engine 2 never answers its probe.  Checked: every ready
# engine answers /generate with exactly the bytes of the committed version it
# reports (the trainer's sha256 of that version); engine 2 is never ready; an
# apply that fails (engine 1's loader) marks it dirty, then ready after a
# retry; a SIGKILLed engine process (engine 0) comes back ready only at the
# latest version, from its sidecar's copy (no byte from the trainer).
# Usage: engines_test.sh [disk-delta|p2p] (default: both, one job each).
. "$(dirname "$0")/../agent/lib.sh"
PY=/usr/bin/python3
E=$ROOT/tests/engines
"$PY" -c 'import torch' 2>/dev/null || skip_all "no torch for $PY (tools/deps.sh installs python3-torch)"
[ -e /usr/lib/x86_64-linux-gnu/libzmq.so.5 ] || ldconfig -p | grep -q libzmq.so.5 || skip_all "no libzmq.so.5"
export SKEIN_PYTHON=$PY PYTHONPATH=$ROOT/python SKEIN_ENGINE_APPLY_TIMEOUT=10 SKEIN_ENGINE_APPLY_RETRIES=3
T0=$(now_ms)
start_agent 1 --profile fast --head-eligible --bootstrap-expect 1 --gpus 1
MPORT=$(( $(rport 2) + 100 ))
start_agent 2 --profile fast --gpus 3 --join "127.0.0.1:$(gport 1)" --metrics "127.0.0.1:$MPORT"
head_known() { ctl 2 head 2>/dev/null | awk '$1 == "head:" { print $2 }' | grep -q '^n1$'; }
wait_until 20 head_known || { fail "no head"; finish; }
SD=$(dirname "$(ctl 2 info | awk '$1 == "control" && $2 == "socket:" { print $3 }')")/engines

# st JOB ID FIELD: a field of engine ID's state file
st() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$SD/$1/$2.json" "$3" 2>/dev/null; }
digest_of() { awk -v v="$2" '$1 == "version" && $2 == v { print $4 }' "$T_DIR/n1/logs/$1/trainer-0.log"; }
latest() { awk '$1 == "version" { v = $2 } END { print v + 0 }' "$T_DIR/n1/logs/$1/trainer-0.log" 2>/dev/null; }
gen() { curl -s -m 2 -X POST "$(st "$1" "$2" url)/generate"; }
# served_ok JOB ID: the engine is ready and /generate's bytes are the trainer's of its version
served_ok() {
	local j=$1 i=$2 r v d
	[ "$(st "$j" "$i" state)" = ready ] || return 1
	r=$(gen "$j" "$i") || return 1
	v=$(printf '%s' "$r" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["weight_version"])')
	d=$(printf '%s' "$r" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["digest"])')
	[ -n "$v" ] && [ "$d" = "$(digest_of "$j" "$v")" ]
}
ready_at_least() { [ "$(st "$1" "$2" state)" = ready ] && [ "$(st "$1" "$2" weight_version)" -ge "$3" ]; }

one_mode() {
	local mode=$1 j=eng-${1%%-*} extra=""
	[ "$mode" = disk-delta ] && { mkdir -p "$T_DIR/w-$j"; extra="--update-weight-disk-dir $T_DIR/w-$j"; }
	echo 0 >"$T_DIR/fail-$j-1"
	ctl 2 job submit --name "$j" --actor-num-nodes 1 --actor-num-gpus-per-node 1 --num-gpus-per-node 3 \
		--rollout-num-gpus 3 --rollout-num-gpus-per-engine 1 --update-weight-transfer-mode "$mode" $extra \
		--restart-backoff 100ms:1s --stop-grace 2s --rollout-engine sglang --rollout-engine-layout "$E/layout.json" \
		--trainer-cmd "exec $PY $E/trainer.py --layout $E/layout.json --interval-ms 300" \
		--rollout-cmd "FAKE_FAIL_FILE=$T_DIR/fail-$j-\$SKEIN_ENGINE_ID FAKE_NO_PROBE=\$([ \$SKEIN_ENGINE_ID = 2 ] && echo 1) exec $PY $E/fake_sglang.py" \
		>/dev/null || { fail "$mode: submit"; return; }
	if wait_until 40 ready_at_least "$j" 0 3 && wait_until 20 ready_at_least "$j" 1 3; then
		pass "$mode: engines 0 and 1 ready at v$(st "$j" 0 weight_version), v$(st "$j" 1 weight_version) ($(( ($(now_ms) - T0) / 1000 )) s)"
	else fail "$mode: engines not ready" "states $(st "$j" 0 state) $(st "$j" 1 state)"; tail -n 5 "$T_DIR"/n2/logs/$j/engine-*.log; return; fi
	local k bad=0
	for k in 1 2 3 4 5 6; do served_ok "$j" 0 || served_ok "$j" 0 || bad=$((bad + 1)); served_ok "$j" 1 || served_ok "$j" 1 || bad=$((bad + 1)); sleep 0.2; done
	check "$mode: 12 generate answers of ready engines carry exactly their committed version's bytes ($bad not)" [ "$bad" = 0 ]
	check "$mode: engine 2 (no probe answer) is not ready: $(st "$j" 2 state)" [ "$(st "$j" 2 state)" = starting ]
	# skeinctl engines, asked of the head (n1): each engine's state comes from n2's agent
	rl() { ctl 1 engines "$j" --ready --format json | "$PY" -c 'import json,sys; print(" ".join(e["member"].split("/")[1] + ":" + e["state"] for e in json.load(sys.stdin)["engines"]))'; }
	both_listed() { [ "$(rl)" = "engine-0:ready engine-1:ready" ]; }
	wait_until 5 both_listed
	check "$mode: skeinctl engines --ready (from the head): $(rl)" both_listed
	ctl 1 engines "$j" | sed 's/^/  /'
	# attacks: the engine's admin endpoints without the sidecar's key; the sidecar's socket folder
	local code; code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 -X POST -d '{"zmq_handles":{"cpu":"ipc:///tmp/x"}}' "$(st "$j" 0 url)/update_weights_from_ipc")
	check "$mode: update_weights_from_ipc without the admin key refused ($code)" [ "$code" = 401 ]
	local sdir; sdir=$(st "$j" 0 ipc_dir)
	check "$mode: the sidecar's ipc folder $sdir is 0700 ($(stat -c %a "$sdir" 2>/dev/null))" [ "$(stat -c %a "$sdir" 2>/dev/null)" = 700 ]
	# sampled while versions go on: an instant where both apply reads 0 ready
	ready_metric() { curl -s -m 2 "http://127.0.0.1:$MPORT/metrics" | grep '^skein_engines{state="ready"}' | awk '{ print $2 }'; }
	metric_two() { [ "$(ready_metric)" = 2 ]; }
	local mr=2
	wait_until 10 metric_two || mr=$(ready_metric) # the sample that succeeded, not a later one
	check "$mode: n2's metrics count the ready engines: skein_engines{state=\"ready\"} $mr" [ "$mr" = 2 ]
	check "$mode: skeinctl engines lists engine 2 starting" bash -c "$(printf '%q ' "$SKEINCTL" --rpc "127.0.0.1:$(rport 1)" engines "$j") | grep -q 'engine-2 .* starting '"
	# --- a failed apply: dirty, then ready after a retry
	echo 1 >"$T_DIR/fail-$j-1"
	dirty_seen() { grep -q -- '-> dirty: apply of version' "$T_DIR/n2/logs/$j/engine-1.log"; }
	local v0
	if wait_until 15 dirty_seen; then
		v0=$(latest "$j")
		if wait_until 15 ready_at_least "$j" 1 "$v0" && served_ok "$j" 1; then
			pass "$mode: engine 1's failed apply: dirty, then ready at v$(st "$j" 1 weight_version) with its bytes"
		else fail "$mode: engine 1 not ready after dirty" "$(st "$j" 1 state) $(st "$j" 1 reason)"; fi
	else fail "$mode: engine 1 never dirty"; fi
	# --- the engine's port: its agent picked it (the sidecar's own environment has it) and it is the URL's
	agent_port() { tr '\0' '\n' <"/proc/$(st "$j" 0 sidecar_pid)/environ" 2>/dev/null | sed -n 's/^SKEIN_ENGINE_PORT=//p'; }
	local port0; port0=$(agent_port)
	port_ok() { [ -n "$port0" ] && [ "$(st "$j" 0 url)" = "http://127.0.0.1:$port0" ]; }
	check "$mode: engine 0's port ${port0:-?} picked by its agent, in its URL $(st "$j" 0 url)" port_ok
	# --- SIGKILL engine 0's server: the sidecar restarts it, ready only at the latest version, from its copy
	local pid0; pid0=$(st "$j" 0 pid)
	kill -9 "$pid0"
	back() { [ "$(st "$j" 0 pid)" != "$pid0" ] && ready_at_least "$j" 0 "$(( $(latest "$j") - 1 ))"; }
	if wait_until 20 back && served_ok "$j" 0; then
		pass "$mode: engine 0 SIGKILLed (pid $pid0): restarted (pid $(st "$j" 0 pid)), ready at v$(st "$j" 0 weight_version) with its bytes"
	else fail "$mode: engine 0 not back" "$(st "$j" 0 state) $(st "$j" 0 reason)"; tail -n 5 "$T_DIR/n2/logs/$j/engine-0.log"; fi
	check "$mode: engine 0 restarted on the same port: $(st "$j" 0 url)" port_ok
	check "$mode: engine 0's restart was never listed ready before serving the committed version" \
		bash -c "! grep -A3 'engine restarted' '$T_DIR/n2/logs/$j/engine-0.log' | grep -q 'starting -> ready'"
	"$PY" -c "import sys, skein; e = skein.engines('$j', wait_for=$(latest "$j"), timeout=10, state_dir_='$SD'); sys.exit(0 if e else 1)" &&
		pass "$mode: skein.engines(wait_for=v$(latest "$j")) returned ready engines" || fail "$mode: skein.engines long poll"
	"$PY" -c "import sys, skein; e = skein.engines('$j', ready=False, state_dir_='$SD'); print('  ', e[0])"
	# the same through skeinctl (every node's): asked of the head
	SKEIN_RPC=127.0.0.1:$(rport 1) SKEIN_CTL=$SKEINCTL "$PY" -c "import sys, skein; e = skein.engines('$j', wait_for=$(latest "$j"), timeout=10); sys.exit(0 if e and all(x['state'] == 'ready' for x in e) else 1)" &&
		pass "$mode: skein.engines through skeinctl (from the head) returned ready engines" || fail "$mode: skein.engines through skeinctl"
	check "$mode: engine 2 still never ready: $(st "$j" 2 state)" [ "$(st "$j" 2 state)" = starting ]
	grep -h 'applied version' "$T_DIR"/n2/logs/$j/engine-0.log | tail -n 1 | sed 's/^/  /'
	ctl 1 job stop "$j" >/dev/null
}
for m in ${1:-disk-delta p2p}; do one_mode "$m"; done
tb=$(grep -l Traceback "$T_DIR"/n2/logs/*/engine-*.log 2>/dev/null)
check "no sidecar or engine raised" [ -z "$tb" ]
[ -z "$tb" ] || grep -h -A8 Traceback $tb | head -n 30
echo "  total $(( ($(now_ms) - T0) / 1000 )) s"
finish
