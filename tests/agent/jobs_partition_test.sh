#!/usr/bin/env bash
# A job through a partition, on five network-namespace hosts: 3 voters
# without GPUs (h1-h3) and 2 GPU hosts (h4, h5, --gpus 8) running a split
# job.  The head's host is cut from all others: the minority (the old head
# alone) changes nothing -- no member restarts, the job's committed state is
# unchanged -- while the majority elects a new head that keeps the job as it
# is.  After the heal: one head, and still no member restarted.  Then the GPU
# host h5 (started with --member-fence-after 3) is cut off: its agent stops its
# members for want of orders while the majority marks them pending (no free
# GPUs elsewhere); after the heal they run again, one process each.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns.sh"

netns_hosts 5
for i in 1 2 3; do hstart $i --profile fast --head-eligible --bootstrap-expect 3 --gpus 0 --join 10.231.0.1:7946; done
hstart 4 --profile fast --gpus 8 --join 10.231.0.1:7946
hstart 5 --profile fast --gpus 8 --member-fence-after 3 --join 10.231.0.1:7946

EV=$T_DIR/events
touch "$EV"
M='echo "start $SKEIN_MEMBER $$" >> '"$EV"'; exec sleep 100000'
head_of() { hctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
agree() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ] || return 1
	for i in "$@"; do [ "$(head_of "$i")" = "$h" ] || return 1; done; }
running() { [ "$(hctl "$1" placement --format json 2>/dev/null | grep -o '"state":"running"' | wc -l)" = "$2" ]; }
pids() { hctl "$1" placement --format json 2>/dev/null | grep -o '"pid":[0-9]*' | tr '\n' ' '; }

if wait_until 20 agree 1 2 3 4 5; then pass "one head on five hosts"; else fail "one head on five hosts"; fi
hctl 4 job submit --name rl --actor-num-nodes 1 --actor-num-gpus-per-node 4 --rollout-num-gpus 8 \
	--rollout-num-gpus-per-engine 2 --restart-backoff 0:1s --trainer-cmd "$M" --rollout-cmd "$M" >/dev/null 2>&1 ||
	fail "submit"
check "8 members running on h4 and h5" wait_until 15 running 4 8
P0=$(pids 4)
lines=$(wc -l < "$EV")
H=$(head_of 4); HI=${H#h}
others=$(for i in 1 2 3 4 5; do [ "$i" != "$HI" ] && echo "$i"; done | tr '\n' ' ')
first=$(echo $others | awk '{ print $1 }')

net_cut "$HI" "$others"
new_head() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ] && [ "$h" != "$H" ]; }
check "the majority elects a new head" wait_until 15 new_head "$first"
check "the new head sees the job with its 8 members running" wait_until 10 running "$first" 8
out=$(hctl "$HI" job stop rl 2>&1); rc=$?
check "the old head, cut off, cannot stop the job ($out)" [ $rc != 0 ]
# let the new head give orders for a while (3 rounds)
t=$(( $(now_ms) + 3000 )); wait_until 10 bash -c "[ \$(( \$(date +%s%N) / 1000000 )) -ge $t ]"
check "no member restarted during the partition" bash -c "[ \$(wc -l < '$EV') = $lines ] && [ '$(pids "$first")' = '$P0' ]"

net_heal "$HI" "$others"
check "healed: one head everywhere" wait_until 30 agree 1 2 3 4 5
check "job still running (asked at the old head's host)" wait_until 10 running "$HI" 8
t=$(( $(now_ms) + 2000 )); wait_until 10 bash -c "[ \$(( \$(date +%s%N) / 1000000 )) -ge $t ]"
check "no member restarted after the heal" bash -c "[ \$(wc -l < '$EV') = $lines ] && [ '$(pids 4)' = '$P0' ]"

# --- a GPU host cut off, with --member-fence-after 3
pid_of() { hctl 4 placement --format json 2>/dev/null | tr '{' '\n' | grep "\"member\":\"$1\"" | grep -o '"pid":[0-9]*' | cut -d: -f2; }
state_of() { hctl 4 placement --format json 2>/dev/null | tr '{' '\n' | grep "\"member\":\"$1\"" | grep -o '"state":"[a-z]*"' | cut -d'"' -f4; }
E2=$(pid_of rl/engine-2); E3=$(pid_of rl/engine-3)
net_cut "5" "1 2 3 4"
t0=$(now_ms)
gone() { ! kill -0 "$E2" 2>/dev/null && ! kill -0 "$E3" 2>/dev/null; }
if wait_until 10 gone; then pass "h5, cut off, stopped its members after $(( $(now_ms) - t0 )) ms without orders"; else
	fail "h5 fenced its members"; fi
pend() { [ "$(state_of rl/engine-2)" = pending ] && [ "$(state_of rl/engine-3)" = pending ]; }
check "the majority lists engines 2 and 3 pending (no free GPUs elsewhere)" wait_until 15 pend
net_heal "5" "1 2 3 4"
once_each() { # every member: exactly one live process among those that logged a start
	running 4 8 || return 1
	local m p n
	for m in rl/trainer-0 rl/trainer-1 rl/trainer-2 rl/trainer-3 rl/engine-0 rl/engine-1 rl/engine-2 rl/engine-3; do
		n=0; for p in $(awk -v m="$m" '$1 == "start" && $2 == m { print $3 }' "$EV"); do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
		[ $n = 1 ] || return 1
	done
}
check "after the heal engines 2 and 3 run again; every member in exactly one process" wait_until 30 once_each
finish
