#!/usr/bin/env bash
# Benchmark of jobs with real agents (fast profile, loopback): 3 voters
# without GPUs, 3 agents with --gpus 8, a split job (trainer 1x4, 4 engines
# of 2 GPUs), restart backoff 0 (the figures exclude it by construction).
# Each member writes "start MEMBER <ns timestamp>" as its first act, so every
# figure runs from the test's own clock at the kill/submit to that line:
#   engine restart     kill -9 of an engine -> its new process runs
#                      baseline: the same command spawned by this script
#   trainer restart    kill -9 of a trainer rank -> all 4 ranks run again
#                      baseline: the same (spawn of one process)
#   node loss          SIGKILL of the agent holding 2 engines -> both run on
#                      the spare node; baseline: detection (the head logs the
#                      node failed); target: detection + 1 s
#   submit             job submit -> all 8 members run
#                      baseline: one committed write (skeinctl state put)
# Usage: tests/agent/jobs_bench.sh [REPS]   (default 10; node loss REPS/2)
. "$(dirname "$0")/lib.sh"
REPS=${1:-10}

V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 0"
for i in 1 2 3; do start_agent $i $V --join "127.0.0.1:$(gport 1)"; done
for i in 4 5 6; do start_agent $i --profile fast --gpus 8 --join "127.0.0.1:$(gport 1)"; done
EV=$T_DIR/events
touch "$EV"
M='echo "start $SKEIN_MEMBER $(date +%s%N)" >> '"$EV"'; exec sleep 100000'
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ]; }
pl() { ctl 4 placement --format json 2>/dev/null | tr '{' '\n' | grep '"member"' |
	sed -E 's/.*"member":"([^"]*)".*"node":"?([^",]*)"?,"gpus":\[([^]]*)\],"pid":([0-9-]*),"state":"([a-z]*)".*/\1 \2 \4 \5/'; }
all_running() { [ "$(pl | awk '$4 == "running" && $3 > 0' | wc -l)" = 8 ]; }
pid_of() { pl | awk -v m="$1" '$1 == m { print $3 }'; }
node_of() { pl | awk -v m="$1" '$1 == m { print $2 }'; }
ns() { date +%s%N; }
nstarts() { grep -c "^start $1 " "$EV"; }
last_ts() { grep "^start $1 " "$EV" | tail -1 | awk '{ print $3 }'; }
stats() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) { print "- -"; exit } printf "%.0f %.0f\n", v[int((NR + 1) / 2)], v[NR] }'; }

wait_until 20 has_head || { echo "no head"; exit 1; }
submit() {
	ctl 4 job submit --name "$1" --actor-num-nodes 1 --actor-num-gpus-per-node 4 --rollout-num-gpus 8 \
		--rollout-num-gpus-per-engine 2 --restart-backoff 0:0 --max-restarts 100000 --stop-grace 1s \
		--trainer-cmd "$M" --rollout-cmd "$M" >/dev/null
}

# --- submit -> all members running, against one committed write
SUB=() PUT=()
for r in $(seq 1 $(( (REPS + 1) / 2 ))); do
	t0=$(ns); ctl 4 state put bench/k$r v >/dev/null; PUT+=($(( ($(ns) - t0) / 1000000 )))
	: > "$EV"
	t0=$(ns); submit "s$r"
	wait_until 20 all_running || { echo "submit $r: members did not run"; exit 1; }
	mx=0; for m in trainer-{0..3} engine-{0..3}; do t=$(last_ts "s$r/$m"); [ "$t" -gt "$mx" ] && mx=$t; done
	SUB+=($(( (mx - t0) / 1000000 )))
	ctl 4 job stop "s$r" >/dev/null
	wait_until 10 bash -c "[ -z \"\$('$SKEINCTL' --rpc 127.0.0.1:$(rport 4) placement --format json | grep -o '\"pid\":[1-9]')\" ]"
done

: > "$EV"
submit rl
wait_until 20 all_running || { echo "members did not run"; exit 1; }

# --- engine restart, and the spawn baseline
ENG=() BASE=()
for r in $(seq 1 "$REPS"); do
	m=rl/engine-$(( r % 2 ))
	n=$(nstarts "$m"); p=$(pid_of "$m")
	t0=$(ns); kill -9 "$p"
	wait_until 10 bash -c "[ \$(grep -c '^start $m ' '$EV') -gt $n ]" || { echo "engine did not restart"; exit 1; }
	ENG+=($(( ($(last_ts "$m") - t0) / 1000000 )))
	wait_until 5 all_running
	t0=$(ns); sh -c "echo \"start base \$(date +%s%N)\" >> '$EV'"
	BASE+=($(( ($(last_ts base) - t0) / 1000000 )))
done

# --- trainer group restart
TRN=()
for r in $(seq 1 "$REPS"); do
	n=$(nstarts rl/trainer-3); p=$(pid_of rl/trainer-$(( r % 4 )))
	t0=$(ns); kill -9 "$p"
	up() { for k in 0 1 2 3; do [ "$(nstarts rl/trainer-$k)" -gt "$n" ] || return 1; done; }
	wait_until 10 up || { echo "trainer group did not restart"; exit 1; }
	mx=0; for k in 0 1 2 3; do t=$(last_ts rl/trainer-$k); [ "$t" -gt "$mx" ] && mx=$t; done
	TRN+=($(( (mx - t0) / 1000000 )))
	wait_until 5 all_running
done

# --- node loss: the node holding engines 2 and 3 (n5 or n6, alternately)
NL=() DET=()
for r in $(seq 1 $(( (REPS + 1) / 2 ))); do
	victim=$(node_of rl/engine-2); vi=${victim#n}
	n2=$(nstarts rl/engine-2); n3=$(nstarts rl/engine-3)
	H=$(head_of 4)
	t0=$(ns); kill_agent "$vi" 9
	moved() { [ "$(nstarts rl/engine-2)" -gt "$n2" ] && [ "$(nstarts rl/engine-3)" -gt "$n3" ]; }
	wait_until 20 moved || { echo "engines did not move"; exit 1; }
	t2=$(last_ts rl/engine-2); t3=$(last_ts rl/engine-3); mx=$(( t2 > t3 ? t2 : t3 ))
	NL+=($(( (mx - t0) / 1000000 )))
	# detection: the head's log line for the victim's failure
	line=$(grep -h "member $victim failed" "$T_DIR/${H}.log" | tail -1 | cut -c1-23)
	[ -n "$line" ] && DET+=($(( $(date -d "${line}Z" +%s%3N) - t0 / 1000000 )))
	wait_until 10 all_running
	start_agent "$vi" --profile fast --gpus 8 --join "127.0.0.1:$(gport 1)"
	back() { ctl 4 members 2>/dev/null | grep -q "^$victim .* alive"; }
	wait_until 15 back
done

read -r e50 emax < <(printf '%s\n' "${ENG[@]}" | stats)
read -r b50 bmax < <(printf '%s\n' "${BASE[@]}" | stats)
read -r t50 tmax < <(printf '%s\n' "${TRN[@]}" | stats)
read -r n50 nmax < <(printf '%s\n' "${NL[@]}" | stats)
read -r d50 dmax < <(printf '%s\n' "${DET[@]}" | stats)
read -r s50 smax < <(printf '%s\n' "${SUB[@]}" | stats)
read -r p50 pmax < <(printf '%s\n' "${PUT[@]}" | stats)
echo
echo "jobs benchmark (fast profile, loopback, backoff 0; ms; $REPS reps, node loss and submit $(( (REPS + 1) / 2 )))"
printf '%-34s %8s %8s   %-28s %8s %8s   %s\n' "figure" "median" "max" "baseline (same run)" "median" "max" "target"
printf '%-34s %8s %8s   %-28s %8s %8s   %s\n' "engine death -> running again" "$e50" "$emax" "spawn of the same command" "$b50" "$bmax" "<= 200"
printf '%-34s %8s %8s   %-28s %8s %8s   %s\n' "trainer rank death -> 4 ranks run" "$t50" "$tmax" "spawn of the same command" "$b50" "$bmax" "<= 200"
printf '%-34s %8s %8s   %-28s %8s %8s   %s\n' "node SIGKILL -> engines run again" "$n50" "$nmax" "detection (head marks it)" "$d50" "$dmax" "<= detection + 1000"
printf '%-34s %8s %8s   %-28s %8s %8s   %s\n' "submit -> 8 members running" "$s50" "$smax" "one committed write" "$p50" "$pmax" "-"
echo "node loss minus detection, per run (ms): $(for k in "${!NL[@]}"; do printf '%s ' $(( NL[k] - ${DET[k]:-0} )); done)"
