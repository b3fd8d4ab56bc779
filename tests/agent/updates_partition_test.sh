#!/usr/bin/env bash
# A coordinated weight update through a partition (docs/updates.md), on five
# network-namespace hosts (netns.sh): 3 voters (h1-h3), h4 (--gpus 3: the
# trainer and 2 engines) and h5 (--gpus 2: 2 engines).  The job streams p2p
# versions (p2p-tcp: SKEIN_UCP_LIB=none, since UCX would pick shared memory
# between namespaces of one kernel and the cut would not touch the bytes).
# One of h5's engines is paused so that an update is open with it pending,
# h5 is cut off from every host, the engine resumed: the update goes on
# without it (dropped) and commits with the others, and versions go on while
# h5 is away.  After the heal every engine, h5's included, runs at the
# latest committed version (the cut-off ones caught up).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns.sh"
. "$(dirname "$0")/wv_lib.sh"

netns_hosts 5
for i in 1 2 3; do hstart $i --profile fast --head-eligible --bootstrap-expect 3 --gpus 0 --join 10.231.0.1:7946; done
hstart 4 --profile fast --gpus 3 --join 10.231.0.1:7946
hstart 5 --profile fast --gpus 2 --join 10.231.0.1:7946
wv_ctl() { hctl 4 "$@"; }
TMO=4
head_of() { hctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
agree() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ] || return 1
	for i in "$@"; do [ "$(head_of "$i")" = "$h" ] || return 1; done; }

if wait_until 20 agree 1 2 3 4 5; then pass "one head on five hosts"; else fail "one head on five hosts"; finish; fi
M="SKEIN_UCP_LIB=none SKEIN_BIN=$BIN exec $ROOT/tests/agent/wv_member.sh"
SIM="--bytes 256K --tensors 8"
hctl 4 job submit --name rl --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 4 \
	--rollout-num-gpus-per-engine 1 --update-weight-transfer-mode p2p --update-weight-timeout ${TMO}s \
	--restart-backoff 200ms:1s --max-restarts 100 --stop-grace 1s \
	--trainer-cmd "$M trainer $SIM --steps 1000000 --interval-ms 200" \
	--rollout-cmd "$M engine -- $SIM --steps 1000000000" >/dev/null 2>&1 || fail "submit"
check "versions commit, every engine at the latest" wait_until 30 at_latest rl 4
E=$(hctl 4 placement rl --format json 2>/dev/null | tr '{' '\n' | grep '"node":"h5"' | grep -o '"member":"[^"]*"' | cut -d'"' -f4 | head -1)
P=$(member_field "$E" pid)
[ -n "$E" ] && [ -n "$P" ] || { fail "no engine on h5"; hctl 4 placement rl; finish; }

kill -STOP "$P"
if wait_until 5 open_with rl "$E" >/dev/null; then
	K=$(open_with rl "$E")
	net_cut "5" "1 2 3 4"; t0=$(now_ms)
	kill -CONT "$P"
	dropped() { state_is rl "$K" committed && [ "$(q rl engine "$K" "$E")" = dropped ]; }
	if wait_until $((TMO + 8)) dropped; then
		pass "h5 cut off with v$K open: v$K committed with $E dropped, $(( $(now_ms) - t0 )) ms after the cut"
	else fail "v$K after the cut" "state $(q rl get "$K" state), $E $(q rl engine "$K" "$E"), $(q rl get "$K" reason)"; fi
	check "versions go on while h5 is away" wait_until 15 past rl $((K + 3))
else
	fail "no update held open by the paused engine $E"; kill -CONT "$P"; K=$(latest rl)
	net_cut "5" "1 2 3 4"
fi
net_heal "5" "1 2 3 4"; t0=$(now_ms)
check "healed: one head everywhere" wait_until 30 agree 1 2 3 4 5
if wait_until 40 at_latest rl 4; then
	pass "after the heal every engine, h5's too, runs at the latest version ($(( $(now_ms) - t0 )) ms; v$(latest rl))"
else fail "engines at the latest after the heal"; hctl 4 placement rl; hctl 4 transfers rl --last 5; fi
why=$(tj rl | $WVJ monotonic)
check "versions newest first, started in order ($why)" [ -z "$why" ]
hctl 4 job stop rl >/dev/null 2>&1
finish
