#!/usr/bin/env bash
# The wall clock steps (an NTP correction, a VM restored from a snapshot, an
# operator's `date -s`) and nothing happens: no node fences itself, no member
# restarts, no write waits, the head and its term stay (common/sk_time.h:
# every deadline is on the monotonic clock).
#
#  1. The seam holds: outside common/sk_time.c no code of the agent or its
#     cores reads the wall clock (ev_now, CLOCK_REALTIME, time(), gettimeofday)
#     or the monotonic one on its own.
#  2. A cluster whose agents run --member-fence-after 2 has its wall clocks
#     stepped +1 hour on every agent, then -2 hours (`skeinctl debug
#     clock-step`, which moves sk_wall_ms in that process as an NTP step
#     does): nothing fences, restarts or elects; writes commit.
. "$(dirname "$0")/lib.sh"

hits=$(cd "$ROOT" && grep -rnE 'ev_now *\(|CLOCK_REALTIME|CLOCK_MONOTONIC|gettimeofday *\(|[^_a-z]time *\( *(NULL|0) *\)' \
	agent common jobs raft membership --include='*.c' | grep -v '^common/sk_time.c:')
check "only common/sk_time.c reads a clock${hits:+: $hits}" [ -z "$hits" ]

V="--profile fast --enable-debug --member-fence-after 2"
for i in 1 2 3; do start_agent "$i" $V --head-eligible --bootstrap-expect 3 --join "127.0.0.1:$(gport 1)"; done
start_agent 4 $V --gpus 2 --join "127.0.0.1:$(gport 1)"
head_and_term() { ctl 4 head 2>/dev/null | awk '$1 == "head:" { h = $2 } $1 == "term:" { t = $2 } END { if (h != "" && h != "(none)") print h, t }'; }
has_head() { [ -n "$(head_and_term)" ]; }
wait_until 20 has_head
ctl 4 job submit --name c --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 1 \
	--trainer-cmd 'exec sleep 100000' --rollout-cmd 'exec sleep 100000' >/dev/null
pids() { ctl 4 placement c --format json 2>/dev/null | grep -o '"pid":[0-9]*,"state":"running"' | sort | tr '\n' ' '; }
both_running() { [ "$(pids | grep -o running | wc -l)" = 2 ]; }
check "the job's two members run" wait_until 20 both_running
H0=$(head_and_term); P0=$(pids)
check "a head is known ($H0)" [ -n "$H0" ]

something_happened() {
	grep -q 'no order from a head' "$T_DIR"/n*.log && return 0       # a fence
	[ "$(pids)" != "$P0" ] && return 0                                # a member restarted or stopped
	[ "$(head_and_term)" != "$H0" ] && return 0                       # an election
	return 1
}
for step in 3600 -7200; do
	for i in 1 2 3 4; do ctl "$i" debug clock-step "$step" >/dev/null; done
	# the log line of the step carries the stepped time: an hour ahead, then one behind
	want=$(date -u -d "@$(( $(date +%s) + (step == 3600 ? 3600 : -3600) ))" +%Y-%m-%dT%H)
	check "the step by $step s shows in the logs' time stamps ($want)" \
		bash -c "grep -h 'wall clock stepped by $step' '$T_DIR'/n4.log | grep -q '^$want'"
	# 5 s with the fence at 2 s: long enough for a wall-clock deadline to fire
	if wait_until 5 something_happened; then
		fail "wall clock stepped by $step s: something happened (fenced: $(grep -c 'no order from a head' "$T_DIR"/n*.log | tr '\n' ' '); pids $P0 -> $(pids); head $H0 -> $(head_and_term))"
	else
		pass "wall clock stepped by $step s: no fence, no restart, head and term the same ($H0)"
	fi
	check "a write commits after the step by $step s" quiet ctl 2 state put clock "$step"
done
finish
