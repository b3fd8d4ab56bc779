#!/usr/bin/env bash
# Jobs under chaos, with real agents on loopback (fast profile): 3 voters and
# 3 agents, all declaring --gpus 8, run one split job (trainer 2x4, 4 engines
# of 2 GPUs).  For CHAOS_S seconds (default 60) a seeded random sequence
# kills member processes (kill -9), SIGKILLs agents with their members and
# restarts them, pauses agents (SIGSTOP, 1-3 s) and kills the head.  Then,
# within a bound: one head known by all, every member placed and running,
# and -- counted from /proc, not from skein's own view -- every member
# running in exactly one process.  CHAOS_SEED=... replays a sequence.
. "$(dirname "$0")/lib.sh"

SEED=${CHAOS_SEED:-1}
CHAOS_S=${CHAOS_S:-60}
RANDOM=$SEED
echo "# chaos seed $SEED (CHAOS_SEED=$SEED replays it), $CHAOS_S s"

V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 8"
start() { # I
	if [ "$1" -le 3 ]; then start_agent "$1" $V --join "127.0.0.1:$(gport 1)" --join "127.0.0.1:$(gport 2)"
	else start_agent "$1" --profile fast --gpus 8 --join "127.0.0.1:$(gport 1)" --join "127.0.0.1:$(gport 2)"; fi
}
for i in 1 2 3 4 5 6; do start $i; done

TAG="skchaos$$"
M="SKEIN_TAG=$TAG exec sleep 100000"
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ]; }
pl() { ctl "${1:-4}" placement --format json 2>/dev/null | tr '{' '\n' | grep '"member"' |
	sed -E 's/.*"member":"([^"]*)".*"node":"?([^",]*)"?,"gpus":\[([^]]*)\],"pid":([0-9-]*),"state":"([a-z]*)".*/\1 \2 \4 \5/'; }
live_agents() { for i in "${!PIDS[@]}"; do echo "$i"; done; }
any_live() { live_agents | head -1; }
# member ids of live processes carrying our tag, from /proc
proc_members() {
	local f
	for f in $(grep -l -s -a -z -x "SKEIN_TAG=$TAG" /proc/[0-9]*/environ); do
		{ tr '\0' '\n' < "$f"; } 2>/dev/null | grep '^SKEIN_MEMBER=' | cut -d= -f2
	done | sort
}
EXPECT=$(printf '%s\n' rl/trainer-{0..7} rl/engine-{0..3} | sort)
converged() {
	local o; o=$(any_live)
	[ "$(pl "$o" | awk '$4 == "running" && $3 > 0' | wc -l)" = 12 ] || return 1
	[ "$(proc_members)" = "$EXPECT" ] || return 1
	local h; h=$(head_of "$o"); [ -n "$h" ] && [ "$h" != "(none)" ] || return 1
	for i in $(live_agents); do [ "$(head_of "$i")" = "$h" ] || return 1; done
}

wait_until 20 has_head 4 || { fail "no head"; finish; }
ctl 4 job submit --name rl --actor-num-nodes 2 --actor-num-gpus-per-node 4 --rollout-num-gpus 8 \
	--rollout-num-gpus-per-engine 2 --restart-backoff 0:500ms --max-restarts 1000 --stop-grace 1s \
	--trainer-cmd "$M" --rollout-cmd "$M" >/dev/null 2>&1 || fail "submit"
if wait_until 20 converged; then pass "12 members running once each"; else fail "initial convergence"; ctl 4 placement; fi

declare -A DOWN=() PAUSED=()
voters_bad() { for v in "${!DOWN[@]}" "${!PAUSED[@]}"; do [ "$v" -le 3 ] && echo "$v"; done | wc -l; }
actions=0
end=$(( $(now_ms) + CHAOS_S * 1000 ))
while [ "$(now_ms)" -lt "$end" ]; do
	# restart what was killed, resume what was paused, when their time comes
	for i in "${!DOWN[@]}"; do [ "$(now_ms)" -ge "${DOWN[$i]}" ] && { start "$i"; unset "DOWN[$i]"; }; done
	for i in "${!PAUSED[@]}"; do [ "$(now_ms)" -ge "${PAUSED[$i]}" ] && { kill -CONT "${PIDS[$i]}" 2>/dev/null; unset "PAUSED[$i]"; }; done
	nbad=$(( ${#DOWN[@]} + ${#PAUSED[@]} ))
	a=$(( RANDOM % 10 ))
	i=$(( RANDOM % 6 + 1 ))
	if [ $a -le 4 ]; then # kill -9 a random member process
		p=$(pl "$(any_live)" | awk '$3 > 0 { print $3 }' | shuf -n 1 --random-source=<(yes $RANDOM))
		[ -n "$p" ] && kill -9 "$p" 2>/dev/null && actions=$((actions + 1))
	elif [ $a -le 6 ] && [ $nbad -lt 2 ] && [ -n "${PIDS[$i]:-}" ] && [ -z "${PAUSED[$i]:-}" ]; then
		# SIGKILL an agent (its members die with it), restart it in 1-4 s;
		# at most one voter down at a time
		if [ "$i" -gt 3 ] || [ "$(voters_bad)" = 0 ]; then
			kill_agent "$i" 9; DOWN[$i]=$(( $(now_ms) + 1000 + RANDOM % 3000 )); actions=$((actions + 1))
		fi
	elif [ $a -le 8 ] && [ $nbad -lt 2 ] && [ -n "${PIDS[$i]:-}" ] && [ -z "${PAUSED[$i]:-}" ] &&
		{ [ "$i" -gt 3 ] || [ "$(voters_bad)" = 0 ]; }; then
		kill -STOP "${PIDS[$i]}"; PAUSED[$i]=$(( $(now_ms) + 1000 + RANDOM % 2000 )); actions=$((actions + 1))
	elif [ $nbad = 0 ]; then # kill the head
		h=$(head_of "$(any_live)"); hi=${h#n}
		if [ -n "$hi" ] && [ -n "${PIDS[$hi]:-}" ]; then kill_agent "$hi" 9; DOWN[$hi]=$(( $(now_ms) + 2000 )); actions=$((actions + 1)); fi
	fi
	sleep 0.$(( 3 + RANDOM % 7 ))
done
for i in "${!PAUSED[@]}"; do kill -CONT "${PIDS[$i]}" 2>/dev/null; done
for i in "${!DOWN[@]}"; do start "$i"; done
echo "# $actions chaos actions"
t0=$(now_ms)
if wait_until 60 converged; then pass "after $actions actions: one head, every member running exactly once ($(( $(now_ms) - t0 )) ms to settle)"; else
	fail "convergence after chaos (seed $SEED)"
	ctl "$(any_live)" placement; proc_members | uniq -c
fi
ctl "$(any_live)" job stop rl >/dev/null 2>&1
stopped() { [ -z "$(proc_members)" ]; }
wait_until 15 stopped
check "stop ends every member process" [ -z "$(proc_members)" ]
finish
