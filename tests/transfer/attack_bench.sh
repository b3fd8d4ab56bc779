#!/usr/bin/env bash
# Issue 23's target for the p2p hello gate, on real agents (loopback, fast
# profile): a p2p job of ATTACK_BENCH_BYTES (64M) with ATTACK_BENCH_ENGINES
# (4) engines; before the trainer's first publish an attacker opens, on
# every engine's p2p listener, a silent connection and one that sends a
# forged version (a p2p-tcp hello without the head's ticket, a manifest,
# then bytes).  Target: the first publish (update_weights_time of v1) takes
# at most 2x its time without the attacker.  ATTACK_BENCH_ROUNDS (3) jobs of
# each kind, alternated; the medians and their ratio in a table.  The
# attacked jobs also check what the gate did: v1 committed with every
# engine, and each engine logged the forged connection's refusal (so the
# head's nonce reached the receivers, and the sender presented it).
# SKEIN_BIN=DIR runs other binaries (another build: its figures, same table).
# Usage: PORT_BASE=N tests/transfer/attack_bench.sh
. "$(dirname "$0")/../agent/lib.sh"
BYTES=${ATTACK_BENCH_BYTES:-64M}
ENGINES=${ATTACK_BENCH_ENGINES:-4}
ROUNDS=${ATTACK_BENCH_ROUNDS:-3}
TENSORS=64
PY=/usr/bin/python3

V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 0"
for i in 1 2 3; do start_agent $i $V --join "127.0.0.1:$(gport 1)"; done
for i in 4 5; do start_agent $i --profile fast --gpus 4 --join "127.0.0.1:$(gport 1)"; done
C=4
head_of() { ctl "$C" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of); [ -n "$h" ] && [ "$h" != "(none)" ]; }
wait_until 30 has_head || { fail "no head"; finish; }

mlog() { cat $(find "$T_DIR" -path "*/logs/$1/$2.log" 2>/dev/null) /dev/null 2>/dev/null; } # JOB MEMBER

# the attacker: PORT... -> on each a silent connection and a forged version;
# touches $1 once all are connected, holds them until killed
cat >"$T_DIR/attacker.py" <<'EOF'
import socket, struct, sys, time
ready, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
held = []
manifest = b"t0 f32 16x1024 65536\n"
for p in ports:
    s = socket.create_connection(("127.0.0.1", p)); held.append(s)   # silent
    f = socket.create_connection(("127.0.0.1", p)); held.append(f)   # a forged version
    hello = struct.pack("<8sIIIIQQQ", b"SKXFER4\0", 0, 0, 1, 0, 7, 1 << 20, len(manifest))
    hello += struct.pack("<IIQQ16s", 0, 0, 0, 1, bytes(16))          # no ticket
    try:
        f.sendall(hello + manifest + b"\xff" * 65536)
    except OSError:
        pass
open(ready, "w").close()
while True:
    time.sleep(1)
EOF

# job NAME ATTACK(0/1): the first publish's update_weights_time in JOB_T ("-": none)
job() {
	local name=$1 attack=$2 go="$T_DIR/go-$1" sim="--bytes $BYTES --tensors $TENSORS"
	JOB_T=-
	ctl $C --timeout 30000 job submit --name "$name" --actor-num-nodes 1 --actor-num-gpus-per-node 1 \
		--rollout-num-gpus "$ENGINES" --rollout-num-gpus-per-engine 1 --update-weight-transfer-mode p2p \
		--update-weight-timeout 20s --restart-backoff 0:0 \
		--trainer-cmd "while [ ! -e $go ]; do sleep 0.05; done; env SKEIN_UCP_LIB=/nonexistent $BIN/skein-trainer-sim $sim --steps 1; exec sleep 100000" \
		--rollout-cmd "exec env SKEIN_UCP_LIB=/nonexistent $BIN/skein-engine-sim $sim --steps 1000000 --port-file $T_DIR/port-$name-\$SKEIN_ENGINE_ID" \
		>/dev/null || { fail "$name: submit"; return 1; }
	ports_ready() { [ "$(ls "$T_DIR"/port-"$name"-* 2>/dev/null | wc -l)" = "$ENGINES" ]; }
	wait_until 120 ports_ready || { fail "$name: the engines never listened"; return 1; }
	local apid=""
	if [ "$attack" = 1 ]; then
		$PY "$T_DIR/attacker.py" "$T_DIR/attacked-$name" $(cat "$T_DIR"/port-"$name"-*) &
		apid=$!
		PIDS[a$name]=$apid
		wait_until 20 test -e "$T_DIR/attacked-$name" || fail "$name: the attacker did not connect"
	fi
	sleep 1.5 # every engine has asked the head (it waits at most 1 s a call)
	touch "$go"
	v1() { mlog "$name" trainer-0 | grep -qE "trainer: v1 (committed|aborted)|trainer: error"; }
	wait_until 90 v1 || fail "$name: v1 had no verdict"
	local line t
	line=$(mlog "$name" trainer-0 | grep -E "trainer: v1 committed" | head -n 1)
	t=$(echo "$line" | sed -n 's/.*update_weights_time=\([0-9.]*\) .*/\1/p')
	if [ -z "$t" ]; then
		fail "$name: v1 did not commit" "$(mlog "$name" trainer-0 | tail -n 3 | tr '\n' ' ')"
	elif ! echo "$line" | grep -q "participants=$ENGINES dropped=0"; then
		fail "$name: v1 without all $ENGINES engines" "$line"
	fi
	if [ "$attack" = 1 ]; then
		local e n=0
		for ((e = 0; e < ENGINES; e++)); do
			mlog "$name" "engine-$e" | grep -q "refused a connection .*carries no ticket" && n=$((n + 1))
		done
		[ "$n" = "$ENGINES" ] && pass "$name: every engine refused the forged version before its data ($n)" ||
			fail "$name: $n of $ENGINES engines refused the forged version"
		kill "$apid" 2>/dev/null; wait "$apid" 2>/dev/null; unset "PIDS[a$name]"
	fi
	ctl $C --timeout 30000 job stop "$name" >/dev/null 2>&1
	gone() { ! ctl $C placement "$name" 2>/dev/null | grep -q running; }
	wait_until 30 gone
	JOB_T=${t:--}
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
UN=()
AT=()
for ((r = 1; r <= ROUNDS; r++)); do
	job "un$r" 0; UN+=("$JOB_T"); echo "  round $r unattacked: first publish $JOB_T s"
	job "at$r" 1; AT+=("$JOB_T"); echo "  round $r attacked:   first publish $JOB_T s"
done
mu=$(printf '%s\n' "${UN[@]}" | grep -v '^-$' | median)
ma=$(printf '%s\n' "${AT[@]}" | grep -v '^-$' | median)
ratio=$(awk -v a="$ma" -v u="$mu" 'BEGIN { if (a == "-" || u == "-" || u == 0) print "-"; else printf "%.2f", a / u }')
verdict=$(awk -v x="$ratio" 'BEGIN { if (x == "-") print "no figure"; else if (x + 0 <= 2) print "met"; else print "MISSED" }')
echo
printf '%-44s %12s %12s %8s   %s\n' "p2p $BYTES, $ENGINES engines, first publish (s)" unattacked attacked ratio "target <= 2x"
printf '%-44s %12s %12s %8s   %s\n' "  each round" "${UN[*]}" "${AT[*]}" "" ""
printf '%-44s %12s %12s %8s   %s\n' "  median of $ROUNDS" "$mu" "$ma" "$ratio" "$verdict"
[ "$verdict" = met ] && pass "attacked first publish within 2x (ratio $ratio)" || fail "attacked first publish" "ratio $ratio"
finish
