#!/usr/bin/env bash
# tests/agent/updates_forge_test.sh: forged versions against coordinated
# updates (issue 23, docs/security.md), on one agent (fast profile) whose
# head refuses its first two final records as Raft does in a handover
# (SKEIN_TEST_WV_REFUSE) and takes at most 2 engines per update
# (SKEIN_TEST_WV_ENGINES_MAX):
#   dd  disk-delta, trainer + 2 engines: v3 is swapped, after the trainer's
#       rename, for a whole version another writer made (its data and sums
#       consistent with each other); the engines are stopped meanwhile so
#       that they read the forged one.  v3 aborts with a root mismatch (a
#       checksum error naming the engine), every engine back on v2 bit for
#       bit, and the next versions commit.
#   pf  p2p (p2p-tcp), its trainer a runner of hand-made requests: v1 is
#       begun, and a forged v1 is sent first to the engine's listener by a
#       process of another uid (setpriv): without the head's ticket it is
#       refused at the hello; with the ticket (an attacker who learned the
#       nonce) its bytes land and verify; the trainer's done carries its
#       root: v1 is not committed, the engine keeps its initial weights and
#       stays syncing.  v2 the same, the sender's done listing the engine as
#       never served: the engine is not counted verified, it never holds v2.
#   cp  p2p with 3 engines: its begin is refused at once, saying the cap.
# The refused final records are proposed again until they commit.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/wv_lib.sh"

MEMBER="SKEIN_BIN=$BIN exec $ROOT/tests/agent/wv_member.sh"
SIM="--bytes 256K --tensors 8"
TMO=6
TUID=${FORGE_UID:-47123} # the attacker: a uid no process of this test runs as

SKEIN_TEST_WV_REFUSE=2 SKEIN_TEST_WV_ENGINES_MAX=2 \
	start_agent 1 --profile fast --head-eligible --bootstrap-expect 1 --gpus 9
has_head() { ctl 1 head 2>/dev/null | grep -q "^head: n1"; }
wait_until 20 has_head || { fail "no head"; finish; }
logs() { ctl 1 logs "$1" 2>/dev/null; }
wv_ctl() { ctl 1 "$@"; }

JOB=(--actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus-per-engine 1 --update-weight-timeout ${TMO}s
	--restart-backoff 200ms:1s --max-restarts 5 --stop-grace 1s)
mkdir -p "$T_DIR/dd" "$T_DIR/forged" "$T_DIR/pf" "$T_DIR/cp"
ctl 1 job submit --name dd "${JOB[@]}" --rollout-num-gpus 2 --update-weight-transfer-mode disk-delta \
	--update-weight-disk-dir "$T_DIR/dd" \
	--trainer-cmd "$MEMBER trainer --wait-engines 2 $SIM --steps 1000000 --interval-ms 1500" \
	--rollout-cmd "$MEMBER engine -- $SIM --steps 1000000000" >/dev/null || fail "submit dd"
# pf's and cp's trainers run each request file the test drops in their folder
runner() { echo 'cd '"$T_DIR/$1"' && while :; do for f in *.req; do [ -e "$f" ] || continue; bash "$f" > "${f%.req}.tmp" 2>&1; mv "${f%.req}.tmp" "${f%.req}.out"; rm -f "$f"; done; sleep 0.05; done'; }
ctl 1 job submit --name pf "${JOB[@]}" --rollout-num-gpus 1 --update-weight-transfer-mode p2p \
	--trainer-cmd "$(runner pf)" --rollout-cmd "SKEIN_UCP_LIB=none $MEMBER engine -- $SIM --steps 1000000000" \
	>/dev/null || fail "submit pf"
ctl 1 job submit --name cp "${JOB[@]}" --rollout-num-gpus 3 --update-weight-transfer-mode p2p \
	--trainer-cmd "$(runner cp)" --rollout-cmd "SKEIN_UCP_LIB=none $MEMBER engine -- $SIM --steps 1000000000" \
	>/dev/null || fail "submit cp"

NASK=0
ask() { # JOB ARGS...: skein_forge wv run by JOB's trainer (the member), its answer printed
	local j=$1; shift
	NASK=$((NASK + 1))
	printf '%s\n' "$CRAFT unix:$T_DIR/n1/control.sock $*" > "$T_DIR/$j/$NASK.tmpreq"
	mv "$T_DIR/$j/$NASK.tmpreq" "$T_DIR/$j/$NASK.req"
	wait_until 10 test -e "$T_DIR/$j/$NASK.out" && cat "$T_DIR/$j/$NASK.out"
}
askv() { ask "$@" > "$T_DIR/ask.out"; out=$(cat "$T_DIR/ask.out"); } # sets out (NASK counts here, not in a subshell)
waiting() { # JOB N: N engines of JOB asked the head for work
	[ "$(wv_ctl placement "$1" --format json 2>/dev/null | grep -o '"weight_version"' | wc -l)" -ge "$2" ]
}
pid_of() { member_field "$1" pid; }
port_of() { # the TCP port the process PID listens on
	ss -Hltnp 2>/dev/null | grep "pid=$1," | awk '{ print $4 }' | sed 's/.*://' | head -1
}
eng_is() { [ "$(q "$1" engine "$2" "$3")" = "$4" ]; }   # JOB V MEMBER STATE
eng_left() { [ "$(q "$1" engine "$2" "$3")" != "$4" ]; } # ... no longer STATE
later() { past dd "$1" && at_latest dd 2; }
closed() { ! state_is "$1" "$2" preparing && [ -n "$(q "$1" get "$2" state)" ]; }
none_open() { q dd open >/dev/null && q pf open >/dev/null; }
no_mismatch() { ! { logs dd/engine-0; logs dd/engine-1; } | grep -q MISMATCH; }
# another uid needs root and setpriv; without them the attacker runs as us (said once)
AS=(setpriv --reuid="$TUID" --regid="$TUID" --clear-groups)
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	echo "# no uid switching here (not root, or no setpriv): the attacker runs as uid $(id -u)"
	AS=(env); TUID=$(id -u)
fi
attack() { # PORT VERSION [NONCE]: a forged version from uid TUID, uncoordinated;
	# with NONCE, an attacker who learned the update's ticket (it gets past the
	# engine's hello gate, so the root is what stops it)
	env -u SKEIN_JOB -u SKEIN_MEMBER -u SKEIN_RPC "${AS[@]}" \
		"$BIN/skein-trainer-sim" --path p2p-tcp --host 127.0.0.1 --port "$1" $SIM --changed 0.5 \
		--first-version "$2" --steps "$2" --timeout-ms 5000 ${3:+--ticket "pf:$3"} >> "$T_DIR/attack.log" 2>&1
}
nonce_of() { echo "$out" | sed -n 's/.* nonce=\([0-9a-f]*\).*/\1/p'; } # of the last begin's answer

# ---- dd: a forged disk-delta version swapped in after the trainer's rename
if wait_until 40 at_latest dd 2 && wait_until 20 past dd 2; then
	F=$(( $(latest dd) + 2 ))
	E0=$(pid_of dd/engine-0); E1=$(pid_of dd/engine-1)
	# the attacker's whole version F, consistent with itself (another model)
	env -u SKEIN_JOB -u SKEIN_MEMBER -u SKEIN_RPC "$BIN/skein-trainer-sim" --path disk-delta --dir "$T_DIR/forged" \
		$SIM --changed 0.5 --first-version "$F" --steps "$F" > "$T_DIR/forger.log" 2>&1 || fail "the forger" "$(cat "$T_DIR/forger.log")"
	# the engines stopped between v$((F - 1))'s commit and v$F (the trainer's step: 1.5 s)
	wait_until 20 past dd $((F - 1)) || fail "dd: v$((F - 1)) never committed"
	kill -STOP "$E0" "$E1"
	VD=$(printf '%s/dd/weight_v%06d' "$T_DIR" "$F")
	if wait_until 10 test -e "$VD/index"; then
		rm -rf "$VD" && mv "$(printf '%s/forged/weight_v%06d' "$T_DIR" "$F")" "$VD"
	else fail "dd: the trainer never wrote v$F"; fi
	kill -CONT "$E0" "$E1"
	wait_until 15 state_is dd "$F" aborted
	r=$(q dd get "$F" reason)
	if state_is dd "$F" aborted && has "$r" "root mismatch" && has "$r" "dd/engine-[01]" && [ "$(q dd get "$F" cause)" = engine ]; then
		pass "dd: the forged v$F aborted with a root mismatch naming the engine ($r)"
	else fail "dd: the forged v$F" "state $(q dd get "$F" state), reason '$r'"; fi
	# an engine the head told "receive v$F" before the abort took it and is back
	# on v$((F - 1)); one told after it never touched its buffers
	back() {
		local m n=0
		for m in dd/engine-0 dd/engine-1; do
			logs $m | grep -q "^engine: v$F verified" && return 1
			logs $m | grep -q "^engine: v$F aborted" || continue
			logs $m | grep -q "^engine: v$F aborted (.*): back on v$((F - 1)), verified bit for bit" || return 1
			n=$((n + 1))
		done
		[ $n -ge 1 ]
	}
	check "dd: no engine took v$F; each that received it is back on v$((F - 1)), bit for bit" wait_until 10 back
	check "dd: no engine says MISMATCH" no_mismatch
	check "dd: later versions commit, every engine at the latest" wait_until 20 later $((F + 2))
else fail "dd: versions 1..2 with both engines"; ctl 1 transfers dd; fi

# ---- pf: a forged first p2p version sent first by another uid
G="job=pf member=pf/trainer-0"
wait_until 20 waiting pf 1 || fail "pf/engine-0 never asked the head"
PE=$(pid_of pf/engine-0)
PORT=$(port_of "$PE")
[ -n "$PORT" ] || fail "pf: the engine's port" "$(ss -Hltnp | head -5)"
askv pf begin begin $G version=1 mode=p2p bytes=262144 tensors=8
check "pf: v1 begun with pf/engine-0 ($out)" eng_is pf 1 pf/engine-0 pending
N1=$(nonce_of)
check "pf: the head's answer to begin carries a 16-byte nonce" test ${#N1} = 32
# first without the ticket: refused at the engine's hello gate, before any data
attack "$PORT" 1
check "pf: a forger without the head's ticket is refused before its data" \
	grep -q "v1: the receiver reported: its hello carries no ticket" "$T_DIR/attack.log"
check "pf: ... and the engine is still waiting for v1" eng_is pf 1 pf/engine-0 pending
attack "$PORT" 1 "$N1"
check "pf: the attacker ran as uid $TUID" bash -c "[ \"\$(${AS[*]} id -u)\" = $TUID ] && grep -q published '$T_DIR/attack.log'"
wait_until 10 eng_left pf 1 pf/engine-0 pending
# the trainer's own root: any other than the forged version's
askv pf done done $G version=1 ok=true root=hex:00112233445566778899aabbccddeeff
wait_until 10 state_is pf 1 aborted
r=$(q pf get 1 reason)
if state_is pf 1 aborted && has "$r" "pf/engine-0" && has "$r" "root mismatch"; then
	pass "pf: the forged first version refused: v1 aborted ($r)"
else fail "pf: the forged first version" "state $(q pf get 1 state), reason '$r', done: $out"; fi
initial() { logs pf/engine-0 | grep -q "^engine: v$1 aborted (.*): back on v0, its initial weights intact bit for bit"; }
check "pf: the engine keeps its initial weights" wait_until 10 initial 1
holds() { wv_ctl placement pf --format json 2>/dev/null | tr '{' '\n' | grep '"member":"pf/engine-0"' |
	grep -q "\"weight_version\":$1[,}]"; }
syncing() { wv_ctl placement pf --format json 2>/dev/null | tr '{' '\n' | grep '"member":"pf/engine-0"' |
	grep -q '"state":"syncing"'; }
check "pf: the engine holds no version (weight_version 0)" holds 0

# v2: the engine verified the attacker's bytes; the sender's done says it never served it
wait_until 10 waiting pf 1
askv pf begin begin $G version=2 mode=p2p bytes=262144 tensors=8
if [ "$(q pf engine 2 pf/engine-0)" = pending ]; then
	attack "$PORT" 2 "$(nonce_of)"
	wait_until 10 eng_left pf 2 pf/engine-0 pending
	seen=$(q pf engine 2 pf/engine-0)
	askv pf done done $G version=2 ok=true "'failed=pf/engine-0:never served'"
	wait_until 10 closed pf 2
	st=$(q pf engine 2 pf/engine-0)
	if [ "$st" != verified ] && [ -n "$st" ]; then
		pass "pf: an engine the sender never served is not counted verified (it said $seen; the record: $st)"
	else fail "pf: the sender's never-served engine" "record state '$st' (v2 $(q pf get 2 state))"; fi
	check "pf: the engine never holds v2" wait_until 10 initial 2
	check "pf: v2 committed without it: the engine syncing, on weight_version 0" wait_until 5 syncing
	check "pf: ... weight_version 0" holds 0
else fail "pf: v2 did not take pf/engine-0" "$out"; ctl 1 transfers pf; ctl 1 placement pf; fi

# v3: a root in the begin reaches the engine (Instruction.root), which refuses
# the attacker's bytes itself before it says staged; v4: a done whose root is
# not its begin's
R1=hex:0123456789abcdef0123456789abcdef
wait_until 10 waiting pf 1
askv pf begin begin $G version=3 mode=p2p bytes=262144 tensors=8 root=$R1
if [ "$(q pf engine 3 pf/engine-0)" = pending ]; then
	attack "$PORT" 3 "$(nonce_of)"
	wait_until 10 eng_left pf 3 pf/engine-0 pending
	askv pf done done $G version=3 ok=true root=$R1
	wait_until 10 closed pf 3
	r=$(q pf get 3 reason)
	if state_is pf 3 aborted && has "$r" "pf/engine-0 on n1: version 3: root mismatch: .*(root 0123456789ab)"; then
		pass "pf: the begin's root: the engine refused the forged v3 itself ($r)"
	else fail "pf: the begin's root" "state $(q pf get 3 state), reason '$r'"; fi
	check "pf: ... and keeps its initial weights" wait_until 10 initial 3
else fail "pf: v3 did not take pf/engine-0" "$out"; fi
askv pf begin begin $G version=4 mode=p2p bytes=262144 tensors=8 root=$R1
askv pf done done $G version=4 ok=true root=hex:00000000000000000000000000000001
wait_until 10 closed pf 4
r=$(q pf get 4 reason)
if state_is pf 4 aborted && [ "$(q pf get 4 cause)" = sender ] && has "$r" "the root in its done differs from its begin's"; then
	pass "pf: a done whose root is not its begin's: aborted ($r)"
else fail "pf: a done with another root" "state $(q pf get 4 state), reason '$r'"; fi

# ---- cp: over the engine cap, refused at begin
wait_until 20 waiting cp 3 || fail "cp: 3 engines never asked the head"
askv cp begin begin job=cp member=cp/trainer-0 version=1 mode=p2p
check "cp: 3 engines over a cap of 2: refused at begin ($out)" has "$out" "code=1 error=update v1 of cp: 3 engines would take part, at most 2 per update"

# ---- the refused final records, proposed again
check "the head refused two final records (the test's handover)" \
	bash -c "[ \$(grep -c 'refused (SKEIN_TEST_WV_REFUSE)' '$T_DIR/n1.log') = 2 ]"
check "and proposed them again" grep -q "record proposed again" "$T_DIR/n1.log"
check "nothing left open" wait_until 5 none_open

finish
