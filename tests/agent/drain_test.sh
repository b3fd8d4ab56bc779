#!/usr/bin/env bash
# skeinctl drain / undrain with real agents (fast profile): 3 voters without
# GPUs, n4-n6 with 8 GPUs.  A job of a 4-rank trainer and 4 one-GPU engines
# starts on n4; `drain n4` must move the trainer ranks with one trainer
# group restart and the engines one at a time (from the members' own
# start/stop log: never two engines down at once), then exit 0 once nothing
# runs on n4; members and placement show the drain; nothing new lands on a
# drained node.  A drain that cannot complete (no free GPUs anywhere) waits,
# says why, and --deadline ends the wait with exit 1.  A drained head hands
# the head over first.  Prints the drain's time against the target
# 4 x (engine start) + 1 s (no catch-up yet: engines report no weight
# version before issue #13).
. "$(dirname "$0")/lib.sh"

for i in 1 2 3; do start_agent $i --profile fast --head-eligible --bootstrap-expect 3 --gpus 0 --join "127.0.0.1:$(gport 1)"; done
for i in 4 5 6; do start_agent $i --profile fast --gpus 8 --join "127.0.0.1:$(gport 1)"; done
EV=$T_DIR/events; touch "$EV"
# a member logs its start and its stop (SIGTERM) with a ns timestamp
M='trap "trap '"''"' TERM; echo stop $SKEIN_MEMBER \$(date +%s%N) >> '"$EV"'; exit 0" TERM; echo start $SKEIN_MEMBER $(date +%s%N) >> '"$EV"'; while :; do sleep 1 & wait; done'
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ]; }
pl() { ctl 4 placement d --format json 2>/dev/null | tr '{' '\n' | grep '"member"' |
	sed -E 's/.*"member":"([^"]*)".*"node":"?([^",]*)"?,"gpus":\[([^]]*)\],"pid":([0-9-]*),"state":"([a-z]*)".*/\1 \2 \3 \4 \5/'; }
all_running() { [ "$(pl | awk '$5 == "running" && $4 > 0' | wc -l)" = 8 ]; }
on_node() { pl | awk -v n="$1" '$2 == n' | wc -l; }
wait_until 20 has_head || { fail "no head"; finish; }
check "every agent alive" wait_until 20 all_alive 1 2 3 4 5 6

ctl 4 job submit --name d --actor-num-nodes 1 --actor-num-gpus-per-node 4 --rollout-num-gpus 4 \
	--rollout-num-gpus-per-engine 1 --restart-backoff 0:0 --stop-grace 2s --trainer-cmd "$M" --rollout-cmd "$M" >/dev/null
check "8 members running" wait_until 20 all_running
check "all 8 on n4" [ "$(on_node n4)" = 8 ]

out=$(ctl 4 drain nosuch 2>&1); rc=$?
check "drain of an unknown node: exit 1, one line" expect_err $rc 1 "$out" "no member named"
out=$(ctl 4 undrain n5 2>&1); rc=$?
check "undrain of a node not drained: exit 1" expect_err $rc 1 "$out" "not drained"

: >"$EV.before"; cp "$EV" "$EV.before"
t0=$(now_ms)
out=$("$SKEINCTL" --rpc "127.0.0.1:$(rport 5)" --timeout 5000 drain n4 --deadline 30 2>&1); rc=$?
drain_ms=$(( $(now_ms) - t0 ))
check "drain n4 completes (exit 0) in ${drain_ms} ms" [ "$rc" = 0 ]
echo "$out" | sed 's/^/  | /' | tail -6
check "nothing of the job left on n4" [ "$(on_node n4)" = 0 ]
check "8 members running elsewhere" wait_until 10 all_running
tr0=$(grep -c '^start d/trainer-0 ' "$EV")
check "the trainer group restarted exactly once (trainer-0 started twice)" [ "$tr0" = 2 ]
# engines down at once, from the members' own log: an engine is down while
# none of its processes runs (the new one may start before the old one stops);
# a process may log its stop twice (SIGTERM to its group and to each process
# of its cgroup can both reach the shell's trap): a stop counts once
maxdown=$(grep -E '^(start|stop) d/engine-' "$EV" | sort -k3,3n | awk '
	$1 == "start" { up[$2]++ } $1 == "stop" && up[$2] > 0 { up[$2]-- }
	{ n = 0; for (k in up) if (up[k] <= 0) n++; if (n > m) m = n } END { print m + 0 }')
check "never more than one engine down at once (max $maxdown)" [ "$maxdown" -le 1 ] || grep -E "^(start|stop) d/engine-" "$EV" | sort -k3,3n | sed "s/^/  ev: /"
# each engine's move: stop on n4 -> start elsewhere
moves=$(grep -E '^(start|stop) d/engine-' "$EV" | sort -k3,3n | awk '
	$1 == "start" && ($2 in s) { printf "%d ", ($3 - s[$2]) / 1000000; delete s[$2] }
	$1 == "start" { st[$2] = $3 } $1 == "stop" && ($2 in st) && !($2 in done) { s[$2] = $3; done[$2] = 1 }
	END { for (k in s) printf "(%s: new before old stopped) ", k }')
echo "  engine moves (old stopped -> new started, ms): $moves; drain total ${drain_ms} ms"
check "members shows n4 drained" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 6) members | awk '\$1 == \"n4\"' | grep -q ' drained '"
check "members JSON says drained" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 6) members --format json | grep -q '\"name\":\"n4\"[^}]*}[^}]*\"drained\":true'"
check "placement names the drained node" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 6) placement | grep -q '^drained nodes.* n4'"
out=$(ctl 4 drain status n4)
check "drain status: drained, nothing runs there" bash -c "echo '$out' | grep -q 'n4: drained, nothing runs there'"

# nothing new on a drained node: a second job must avoid n4 (and fit on n6)
ctl 4 job submit --name e --actor-num-nodes 1 --actor-num-gpus-per-node 2 --rollout-num-gpus 0 \
	--trainer-cmd 'exec sleep 100000' >/dev/null 2>&1 ||
	ctl 4 job submit --name e --actor-num-nodes 1 --actor-num-gpus-per-node 2 --trainer-cmd 'exec sleep 100000' >/dev/null 2>&1
sleep_until_placed() { ctl 4 placement e 2>/dev/null | grep -q 'e/trainer-0 .* running'; }
wait_until 15 sleep_until_placed
check "a new job is not placed on the drained node" bash -c "! '$SKEINCTL' --rpc 127.0.0.1:$(rport 4) placement e | grep -q ' n4 '"
ctl 4 job stop e >/dev/null 2>&1

# a drain that cannot complete: n6 drained too, then n5 has nowhere to go
ctl 4 drain n6 --deadline 10 >/dev/null 2>&1
t0=$(now_ms)
out=$(ctl 4 drain n5 --deadline 2 2>&1); rc=$?
el=$(( $(now_ms) - t0 ))
check "a drain with no room exits 1 at its --deadline (${el} ms)" [ "$rc" = 1 -a "$el" -ge 2000 -a "$el" -lt 6000 ]
check "... and says why (no room)" bash -c "echo '$out' | tail -1 | grep -q 'not complete within --deadline.*no room'"
check "... while the members keep running on n5" all_running
ctl 4 undrain n4 >/dev/null
check "undrain: members shows n4 undrained" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 6) members | awk '\$1 == \"n4\"' | grep -q ' - '"
check "the waiting drain of n5 completes once n4 is back" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 4) drain n5 --deadline 30 >/dev/null"
ctl 4 undrain n5 >/dev/null; ctl 4 undrain n6 >/dev/null

# a drained voter that is the head hands it over first
H=$(head_of 4)
out=$(ctl 4 drain "$H" --deadline 15 2>&1); rc=$?
check "drain of the head's node ($H) completes" [ "$rc" = 0 ]
H2=$(head_of 4)
check "the head moved to another voter ($H -> $H2)" [ -n "$H2" -a "$H2" != "$H" -a "$H2" != "(none)" ]
check "no member restarted for the handover" [ "$(grep -c '^start d/trainer-0 ' "$EV")" -le 3 ]
ctl 4 undrain "$H" >/dev/null

# skeinctl status: the operator's first screen, text and JSON, from any agent
out=$(ctl 5 status)
check "status: members by status" bash -c "echo '$out' | grep -q '^members: 6 alive, 0 suspect, 0 dead, 0 left'"
check "status: the head and its term" bash -c "echo '$out' | grep -q '^head: $H2 (term [0-9]*)'"
check "status: job d running 8/8, no weight version yet ('-')" bash -c "echo '$out' | grep -qE '^d +running +8/8 +- +- '"
out=$(ctl 6 status --format json)
check "status JSON" bash -c "echo '$out' | grep -q '^{\"members\":{\"alive\":6,\"suspect\":0,\"dead\":0,\"left\":0},\"drained\":\[\],\"head\":\"$H2\",\"term\":[0-9]*,\"jobs\":\[{\"name\":\"d\",\"state\":\"running\",\"members\":8,\"running\":8,\"weight_version\":null'"
start_agent 7 --profile fast --gpus 0
out=$(wait_until 5 quiet ctl 7 health; ctl 7 status)
check "status of an agent with no head: members, 'head: none', jobs unknown" \
	bash -c "echo '$out' | grep -q '^members: 1 alive' && echo '$out' | grep -q '^head: none' && echo '$out' | grep -q '^jobs: unknown'"
finish
