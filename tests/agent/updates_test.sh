#!/usr/bin/env bash
# Coordinated weight updates (docs/updates.md) on real agents (fast profile):
# 3 voters without GPUs and 3 agents with --gpus 5 run five jobs at once,
# each member a libskein stand-in (tests/agent/wv_member.sh):
#   dd  disk-delta, trainer + 3 engines      pp  p2p, trainer + 3 engines
#   ab  disk-delta, --update-on-engine-loss abort, trainer + 1 engine
#   pu  p2p as it runs by default (UCX here), trainer + 2 engines
#   gt  a trainer that runs the requests this test hands it (the gate)
# The trainers publish a stream of small versions.  Checked, each with a
# bounded wait: versions commit and are monotonic in `transfers --format
# json`, whose shape is issue #13's; every engine runs at the latest
# committed version in `placement`; engine 1 exits mid-receive of v4 (its
# first start only): v4 commits with it dropped, it shows syncing, then
# running at the latest version (from the disk chain on dd, from a peer
# engine on pp); v8 goes out with one wrong byte: aborted naming the member
# and the checksum, every participant back on v7 bit for bit, v9 commits; on
# ab an engine's exit aborts the update; the trainer SIGKILLed mid-update:
# that update aborted naming the sender, and the restarted trainer goes on;
# the head SIGKILLed mid-update: every update final within the watchdog and
# a margin, versions go on; the gate refuses whoever is not the member (on
# the Unix socket and over TCP); malformed and bad requests from a member get
# one clear error, and the agents stay up.
#
# p2p picks UCX shared memory between processes of one host, and the test
# switches (--corrupt-version, --crash-during) live in the p2p-tcp and disk
# paths: pp's members run with SKEIN_UCP_LIB=none, so p2p picks p2p-tcp; pu
# runs p2p as it is, and its engine is killed from here.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/wv_lib.sh"

MEMBER="SKEIN_BIN=$BIN exec $ROOT/tests/agent/wv_member.sh"
SIM="--bytes 256K --tensors 8"
TMO=4 # --update-weight-timeout, seconds

V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 0"
for i in 1 2 3; do start_agent $i $V --join "127.0.0.1:$(gport 1)"; done
for i in 4 5 6; do start_agent $i --profile fast --gpus 5 --join "127.0.0.1:$(gport 1)"; done

head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ]; }
logs() { ctl 4 logs "$1" 2>/dev/null; }

wait_until 20 has_head 4 || { fail "no head"; finish; }
JOB=(--actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus-per-engine 1 --update-weight-timeout ${TMO}s
	--restart-backoff 200ms:1s --max-restarts 100 --stop-grace 1s)
TR="$MEMBER trainer --wait-engines 3 $SIM --steps 1000000 --interval-ms 200 --corrupt-version 8"
EN="$MEMBER engine --crash 1:4 --restart-delay 1 -- $SIM --steps 1000000000"
mkdir -p "$T_DIR/dd" "$T_DIR/ab" "$T_DIR/gt"
ctl 4 job submit --name dd "${JOB[@]}" --rollout-num-gpus 3 --update-weight-transfer-mode disk-delta \
	--update-weight-disk-dir "$T_DIR/dd" --trainer-cmd "$TR" --rollout-cmd "$EN" >/dev/null || fail "submit dd"
ctl 4 job submit --name pp "${JOB[@]}" --rollout-num-gpus 3 --update-weight-transfer-mode p2p \
	--trainer-cmd "SKEIN_UCP_LIB=none $TR" --rollout-cmd "SKEIN_UCP_LIB=none $EN" >/dev/null || fail "submit pp"
ctl 4 job submit --name ab "${JOB[@]}" --rollout-num-gpus 1 --update-weight-transfer-mode disk-delta \
	--update-weight-disk-dir "$T_DIR/ab" --update-on-engine-loss abort \
	--trainer-cmd "$MEMBER trainer --wait-engines 1 $SIM --steps 6 --interval-ms 200" \
	--rollout-cmd "$MEMBER engine --crash 0:3 -- $SIM --steps 1000000000" >/dev/null || fail "submit ab"
ctl 4 job submit --name pu "${JOB[@]}" --rollout-num-gpus 2 --update-weight-transfer-mode p2p \
	--trainer-cmd "$MEMBER trainer --wait-engines 2 $SIM --steps 1000000 --interval-ms 200" \
	--rollout-cmd "$MEMBER engine -- $SIM --steps 1000000000" >/dev/null || fail "submit pu"
# gt's trainer runs each request file the test drops in $T_DIR/gt (it is the
# member, so its children pass the gate), its output next to it
RUNNER='cd '"$T_DIR"'/gt && while :; do for f in *.req; do [ -e "$f" ] || continue; bash "$f" > "${f%.req}.tmp" 2>&1; mv "${f%.req}.tmp" "${f%.req}.out"; rm -f "$f"; done; sleep 0.05; done'
ctl 4 job submit --name gt "${JOB[@]}" --rollout-num-gpus 1 --update-weight-transfer-mode p2p \
	--trainer-cmd "$RUNNER" --rollout-cmd "SKEIN_UCP_LIB=none $MEMBER engine -- $SIM --steps 1000000000" \
	>/dev/null || fail "submit gt"

# the engines' placement states, every 100 ms, to see `syncing` go by
( while :; do
	ctl 4 placement --format json 2>/dev/null | tr '{' '\n' | grep '"role":"rollout"' |
		sed -nE 's/.*"member":"([^"]*)".*"state":"([a-z]*)".*"weight_version":([0-9]+|null).*/\1 \2 \3/p'
	sleep 0.1
done >> "$T_DIR/states" ) &
PIDS[poll]=$!

# ---- the stream, an engine lost mid-update, a corrupted version (dd and pp)
for j in dd pp; do
	if wait_until 40 past $j 9; then pass "$j: versions 1..9 went out (latest $(latest $j))"; else
		fail "$j: versions did not reach v9"; ctl 4 transfers $j; ctl 4 placement $j; continue; fi
	out=$(q $j engine 4 $j/engine-1)
	others=$(tj $j | $WVJ participants 4)
	ok=1; for m in $others; do [ "$(q $j engine 4 "$m")" = verified ] || ok=0; done
	if state_is $j 4 committed && [ "$out" = dropped ] && [ "$(echo $others | wc -w)" = 2 ] && [ $ok = 1 ]; then
		pass "$j: engine 1 exited mid-receive of v4: v4 committed, engine 1 dropped, the others verified"
	else fail "$j: v4 with engine 1 lost" "state $(q $j get 4 state), engine-1 $out, others '$others'"; fi
	r=$(q $j get 8 reason)
	if state_is $j 8 aborted && echo "$r" | grep -q "$j/engine-[0-9]" && echo "$r" | grep -q checksum &&
		[ "$(q $j get 8 cause)" = engine ]; then
		pass "$j: corrupted v8 aborted naming the member and the checksum ($r)"
	else fail "$j: corrupted v8" "state $(q $j get 8 state), reason '$r'"; fi
	ok=1; parts=$(tj $j | $WVJ participants 8)
	for m in $parts; do logs "$m" | grep -q "^engine: v8 aborted (.*): back on v7, verified bit for bit" || ok=0; done
	check "$j: every participant of v8 ($parts) logs back on v7, verified bit for bit" \
		bash -c "[ $ok = 1 ] && [ -n '$parts' ]"
	check "$j: the trainer heard v8 aborted" has "$(logs $j/trainer-0)" "^trainer: v8 aborted: "
	check "$j: v9 committed after the abort" state_is $j 9 committed
done
# the restarted engine 1: syncing, then running at the latest version,
# caught up (its first version was one it took no part in)
for j in dd pp; do
	al=no; wait_until 20 at_latest $j 3 && al=yes
	s=$(grep "^$j/engine-1 " "$T_DIR/states" | awk '{ print $2 }' | uniq | tr '\n' ' ')
	first=$(logs $j/engine-1 | sed -n '/restart 1 /,$p' | sed -nE 's/^engine: v([0-9]+) verified bit for bit.*/\1/p' | head -1)
	how=$([ $j = dd ] && echo "the disk chain" || echo "a peer engine")
	if echo "$s" | grep -q "syncing running" && [ $al = yes ] && [ -n "$first" ] &&
		[ -z "$(q $j engine "$first" $j/engine-1)" ]; then
		pass "$j: restarted engine 1 was syncing, caught up to v$first from $how, runs at the latest version"
	else fail "$j: restarted engine 1 catching up" "states '$s', at the latest: $al, first version '$first' ($(q $j engine "${first:-0}" $j/engine-1))"; fi
done

# ---- pu: p2p as it runs by default (UCX shared memory between processes of
# one host); a restarted engine catches up from a peer over p2p-tcp, then
# takes the trainer's next versions over UCX (that next version used to fail:
# "the first connection is not a skein p2p sender's control stream")
if wait_until 20 at_latest pu 2; then
	K=$(latest pu); kill -9 "$(member_field pu/engine-1 pid)"
	back() { past pu $((K + 4)) && at_latest pu 2 && [ "$(q pu engine "$(latest pu)" pu/engine-1)" = verified ]; }
	check "pu: engine 1 killed after v$K: back, caught up, takes part in later versions" wait_until 20 back
	ab=$(q pu aborted)
	check "pu: no version aborted ($ab)" [ -z "$ab" ]
else fail "pu: engines at the latest version"; ctl 4 transfers pu; fi
ctl 4 job stop pu >/dev/null 2>&1

# ---- transfers JSON and placement
why=$(tj dd | $WVJ shape)
check "transfers JSON has issue #13's shape, perf/* included, on every record ($why)" [ -z "$why" ]
why=$(tj pp | $WVJ shape)
check "... and on p2p's ($why)" [ -z "$why" ]
why=$(tj dd | $WVJ split 2>&1; tj pp | $WVJ split 2>&1)
check "transfers JSON: the data path's split of the sender and every engine, prepare + commit within the update ($why)" [ -z "$why" ]
# each engine's undo journal (issue 27): host memory on these stand-ins, past their first version
check "transfers JSON: engines' journal figures ($(tj dd | grep -o '"journal_bytes":[0-9]*,"journal_spilled_bytes":[0-9]*,"journal_where":"[a-z+]*"' | sort | uniq -c | sort -rn | head -1))" \
	has "$(tj dd)" '"journal_bytes":[1-9][0-9]*,"journal_spilled_bytes":0,"journal_where":"host"'
# ... and in `updates JOB VERSION`: that update alone, a journal line per engine
JV=$(latest dd); out=$(wv_ctl updates dd "$JV" 2>&1)
check "updates dd $JV: one record, its engines' journal lines ($(echo "$out" | grep -c '^dd ') records)" \
	bash -c "[ \$(printf '%s\n' \"\$1\" | grep -c '^dd ') = 1 ] && printf '%s\n' \"\$1\" | grep -q '^dd  *$JV ' &&
		printf '%s\n' \"\$1\" | grep -q '^  journal: dd/engine-[0-9]* [1-9][0-9]* bytes, 0 spilled, host$'" _ "$out"
out=$(wv_ctl updates dd "$JV" --format json 2>&1)
check "updates dd $JV --format json: that version alone" \
	bash -c "[ \$(printf %s \"\$1\" | grep -o '\"job\":' | wc -l) = 1 ]" _ "$out"
check "... with its engines' journal figures" \
	has "$out" "^{\"transfers\":\[{\"job\":\"dd\",\"version\":$JV,.*\"journal_where\":\"host\""
check "updates dd 0: refused with its usage" has "$(wv_ctl updates dd 0 2>&1)" "usage: transfers \[JOB \[VERSION\]\]"
for j in dd pp; do
	why=$(tj $j | $WVJ monotonic)
	check "$j: versions newest first, started in order ($why)" [ -z "$why" ]
	check "$j: placement gives every engine weight_version = the latest committed, running" wait_until 10 at_latest $j 3
done

# ---- ab: --update-on-engine-loss abort
if wait_until 20 state_is ab 3 aborted && echo "$(q ab get 3 reason)" | grep -q "ab/engine-0"; then
	pass "ab: its engine lost mid-update with --update-on-engine-loss abort: v3 aborted ($(q ab get 3 reason))"
else fail "ab: v3 aborted by the engine's loss" "state $(q ab get 3 state), reason '$(q ab get 3 reason)'"; fi
check "ab: the next versions commit" wait_until 20 state_is ab 5 committed
ctl 4 job stop ab >/dev/null 2>&1

# ---- the trainer SIGKILLed mid-update (pp): engine 2 paused holds the update open
E2=$(member_field pp/engine-2 pid); TP=$(member_field pp/trainer-0 pid)
kill -STOP "$E2"
if wait_until 5 open_with pp pp/engine-2 >/dev/null; then
	K=$(open_with pp pp/engine-2); kill -9 "$TP"
	aborted_sender() { state_is pp "$K" aborted && q pp get "$K" reason | grep -q "pp/trainer-0.*sender"; }
	if wait_until $((TMO + 5)) aborted_sender; then pass "pp: trainer SIGKILLed mid-update: v$K aborted ($(q pp get "$K" reason))"
	else fail "pp: v$K after the trainer's death" "state $(q pp get "$K" state), reason '$(q pp get "$K" reason)'"; fi
else fail "pp: no update held open by the paused engine"; K=$(q pp newest); fi
kill -CONT "$E2"
check "pp: the restarted trainer resumes after v$K and versions commit" wait_until 20 past pp $((K + 2))
check "pp: every engine at the latest version after the trainer's restart" wait_until 15 at_latest pp 3

# ---- the head SIGKILLed while an update is open (dd): engine 2 paused holds it
E2=$(member_field dd/engine-2 pid); DT=$(member_field dd/trainer-0 pid)
kill -STOP "$E2"
if wait_until 5 open_with dd dd/engine-2 >/dev/null; then
	K=$(open_with dd dd/engine-2); H=$(head_of 4); kill_agent "${H#n}" 9; t0=$(now_ms)
	new_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ] && [ "$h" != "$H" ]; }
	wait_until 15 new_head || fail "no new head after killing $H"
	kill -CONT "$E2"
	final_upto() { q dd final-upto "$K" >/dev/null; }
	if wait_until $((TMO + 6)) final_upto; then
		pass "dd: head $H killed with v$K open: every update final $(( $(now_ms) - t0 )) ms later (v$K $(q dd get "$K" state))"
	else fail "dd: updates open after the head's death" "$(q dd open)"; fi
	# every member lived through it: the new head finishes the update (the
	# trainer's done, said again, reaches it), and the trainer is not restarted
	check "dd: v$K committed by the new head ($(q dd get "$K" reason))" state_is dd "$K" committed
	check "dd: the trainer lived through the failover" kill -0 "$DT"
	check "dd: versions go on after the failover" wait_until 15 past dd $((K + 2))
	check "pp: ... on pp too" wait_until 15 past pp $(( $(q pp latest) + 1 ))
else fail "dd: no update held open by the paused engine"; kill -CONT "$E2"; fi
check "dd: every engine at the latest version after the failover" wait_until 15 at_latest dd 3

# ---- the gate: only the member's own process speaks for it
N=$(member_field dd/trainer-0 node); NI=${N#n}
B="job=dd member=dd/trainer-0 version=999999 mode=disk-delta"
out=$($CRAFT "unix:$T_DIR/$N/control.sock" begin begin $B)
check "a process that is not the member, on its node's socket: refused ($out)" \
	has "$out" "code=1 error=wv begin refused: process [0-9]* is not dd/trainer-0"
out=$($CRAFT "127.0.0.1:$(rport "$NI")" begin begin $B)
check "the same over TCP: refused ($out)" has "$out" "code=1 error=wv begin is for a job's members"
out=$($CRAFT "unix:$T_DIR/$N/control.sock" begin raw hex=ffffffff0a)
check "a payload that is no message: a clear error ($out)" has "$out" "code=1 error=wv begin: malformed request"

# from gt's trainer (a member): the head checks what the gate let through
GS="unix:$T_DIR/$(member_field gt/trainer-0 node)/control.sock"
NASK=0
ask() { # ARGS...: run skein_forge wv as gt's trainer, print its answer
	NASK=$((NASK + 1))
	printf '%s\n' "$CRAFT $GS $*" > "$T_DIR/gt/$NASK.tmpreq"
	mv "$T_DIR/gt/$NASK.tmpreq" "$T_DIR/gt/$NASK.req"
	wait_until 10 test -e "$T_DIR/gt/$NASK.out" && cat "$T_DIR/gt/$NASK.out"
}
G="job=gt member=gt/trainer-0"
expect() { # NAME PATTERN ARGS...
	local name=$1 pat=$2 out; shift 2
	ask "$@" > "$T_DIR/ask.out"; out=$(cat "$T_DIR/ask.out")
	if echo "$out" | grep -q -- "$pat"; then pass "gt: $name: $out"; else fail "gt: $name" "'$out', wanted '$pat'"; fi
}
expect "begin naming another job's member" "code=1 error=wv begin refused: " begin begin $B
expect "begin in the wrong mode" "code=1 error=mode disk-delta: job gt moves weights with p2p" begin begin $G version=1 mode=disk-delta
expect "a 5-byte digest" "code=1 error=manifest digest: 16 bytes expected" begin begin $G version=1 mode=p2p digest=hex:0102030405
expect "a setup over 512 KiB" "code=1 error=setup: at most 524288 bytes" begin begin $G version=1 mode=p2p setup=zeros:524289
expect "version 0" "code=1 error=version 0 of gt: versions must grow" begin begin $G version=0 mode=p2p
expect "a trainer's wait" "code=1 error=gt/trainer-0 is not an engine of a running job gt" wait status $G
expect "a wait with an unknown journal place" "code=1 error=journal_where '.x1b\\[31mdisk' is not one of" \
	wait status $G "journal_where=$(printf '\033[31mdisk')"
expect "a wait spilling more than its journal" "code=1 error=journal_spilled_bytes 9 over journal_bytes 8" \
	wait status $G journal_bytes=8 journal_spilled_bytes=9 journal_where=host
expect "done of no update" "code=1 error=no update v77 of gt" done done $G version=77 ok=true
expect "a truncated message" "code=1 error=wv done: malformed request" done raw hex=0a0567
expect "a job name of 5000 bytes" "code=1 error=wv begin: malformed request" begin begin job=$(printf 'x%.0s' $(seq 5000)) member=gt/trainer-0
expect "an unknown verb" "code=1 error=wv bogus: malformed request" bogus begin $G
expect "two verbs" "code=2 error=usage: wv begin" begin begin $G args=2
# the sender's done naming a receiver that reported a checksum mismatch:
# aborted, as that receiver's own report would have done (a done that
# overtook it committed the version with the receiver dropped)
engine_waits() { wv_ctl placement --format json 2>/dev/null | tr '{' '\n' | grep '"member":"gt/engine-0"' | grep -q '"weight_version":0'; }
# a begin takes the engine once the head heard its wait (after the failover
# above, from its next one): a begin without it is done and tried again
V1=0
for v in 1 2 3 4; do
	wait_until 15 engine_waits || fail "gt/engine-0 never asked its agent"
	ask begin begin $G version=$v mode=p2p > "$T_DIR/ask.out"
	[ "$(q gt engine $v gt/engine-0)" = pending ] && { V1=$v; break; }
	ask done done $G version=$v ok=true > "$T_DIR/ask.out"
done
check "gt: a begin taking gt/engine-0 (v$V1)" [ $V1 != 0 ]
expect "done: gt/engine-0 reported a checksum mismatch" "code=0 error= payload=" done done $G version=$V1 ok=true \
	"'failed=!gt/engine-0:p2p-tcp send v$V1: the receiver reported: version $V1 tensor t0: checksum mismatch on arrival'"
v1_aborted() { state_is gt $V1 aborted && [ "$(q gt engine $V1 gt/engine-0)" = failed ] &&
	q gt get $V1 reason | grep -q "gt/engine-0 on .*checksum mismatch"; }
if v1_aborted; then pass "gt: v$V1 aborted naming gt/engine-0 and the checksum ($(q gt get $V1 reason))"
else fail "gt: v$V1 with a receiver's checksum mismatch in done" "$(q gt get $V1 state) ($(q gt get $V1 reason))"; fi
# a begin that is never done (its engine paused): the watchdog ends it, naming the sender
GE=$(member_field gt/engine-0 pid); kill -STOP "$GE"
expect "a begin never done" "code=0 error= payload=" begin begin $G version=9 mode=p2p
wd() { state_is gt 9 aborted && q gt get 9 reason | grep -q "watchdog: .*gt/trainer-0 (sender)" &&
	[ "$(q gt get 9 cause)" = timeout ]; }
if wait_until $((TMO + 4)) wd; then pass "gt: v9 never done: aborted by the watchdog, naming the sender ($(q gt get 9 reason))"
else fail "gt: v9 never done" "state $(q gt get 9 state), reason '$(q gt get 9 reason)'"; fi
kill -CONT "$GE"
ok=1; for i in 1 2 3 4 5 6; do [ -n "${PIDS[$i]:-}" ] && ! kill -0 "${PIDS[$i]}" 2>/dev/null && ok=0; done
check "every agent is still up, and answers" bash -c "[ $ok = 1 ] && '$SKEINCTL' --rpc 127.0.0.1:$(rport 4) members >/dev/null"
check "dd: still committing after all that" wait_until 10 past dd $(( $(latest dd) + 1 ))

kill -9 "${PIDS[poll]}" 2>/dev/null; wait "${PIDS[poll]}" 2>/dev/null; unset "PIDS[poll]"
for j in dd pp gt; do ctl 4 job stop $j >/dev/null 2>&1; done
finish
