#!/usr/bin/env bash
# Jobs at a larger scale on loopback (fast profile): 3 voters without GPUs and
# N agents with --gpus 8 (JOBS_SCALE_NODES, default 27), one job of 64 trainer
# ranks (8 nodes x 8) and 24 engines of 4 GPUs (160 GPUs, 20 nodes):
#   submit --wait -> all 88 members running   (baseline: one committed write)
#   SIGKILL of a node with engines -> all 88 running again on other nodes
#                                             (baseline: detection, the head's log)
# and the voters' CPU and memory after it.  Usage: tests/agent/jobs_scale_bench.sh
. "$(dirname "$0")/lib.sh"
N=${JOBS_SCALE_NODES:-27}

V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 0"
for i in 1 2 3; do start_agent $i $V --join "127.0.0.1:$(gport 1)"; done
for i in $(seq 4 $((N + 3))); do start_agent $i --profile fast --gpus 8 --log-level warn --join "127.0.0.1:$(gport 1)"; done
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ]; }
all_alive_n() { [ "$(ctl 4 members 2>/dev/null | awk '$3 == "alive"' | wc -l)" -ge $((N + 3)) ]; }
wait_until 30 has_head || { echo "no head"; exit 1; }
wait_until 60 all_alive_n || { echo "the cluster did not form"; exit 1; }
pj() { ctl 4 placement big --format json 2>/dev/null; }

t0=$(now_ms); ctl 4 state put scale/warm x >/dev/null; put_ms=$(( $(now_ms) - t0 ))
t0=$(now_ms)
ctl 4 --timeout 30000 job submit --name big --actor-num-nodes 8 --actor-num-gpus-per-node 8 --rollout-num-gpus 96 \
	--rollout-num-gpus-per-engine 4 --restart-backoff 0:0 --trainer-cmd 'exec sleep 100000' \
	--rollout-cmd 'exec sleep 100000' --wait >/dev/null || { echo "submit failed"; exit 1; }
submit_ms=$(( $(now_ms) - t0 ))

node=$(pj | tr '{' '\n' | grep '"member":"big/engine-23"' | grep -o '"node":"[^"]*"' | cut -d'"' -f4)
pids=$(pj | tr '{' '\n' | grep "\"node\":\"$node\"" | grep -o '"pid":[0-9]*' | cut -d: -f2)
H=$(head_of 4)
t0=$(now_ms); kill_agent "${node#n}" 9; kill -9 $pids 2>/dev/null
moved() { [ "$(pj | grep -o '"state":"running"' | wc -l)" = 88 ] && ! pj | grep -q "\"node\":\"$node\""; }
wait_until 30 moved || { echo "members not re-placed"; exit 1; }
loss_ms=$(( $(now_ms) - t0 ))
line=$(grep -h "member $node failed" "$T_DIR/$H.log" | tail -1 | cut -c1-23)
det_ms=$([ -n "$line" ] && echo $(( $(date -d "${line}Z" +%s%3N) - t0 )) || echo -)
echo
echo "jobs at scale: 3 voters + $N agents x 8 GPUs, 64 trainer ranks + 24 engines x 4 GPUs (fast, loopback)"
printf '%-44s %8s   %-34s %8s\n' "figure (ms)" "value" "baseline (same run)" "value"
printf '%-44s %8s   %-34s %8s\n' "submit --wait -> 88 members running" "$submit_ms" "one committed write (skeinctl)" "$put_ms"
printf '%-44s %8s   %-34s %8s\n' "node SIGKILL -> 88 running, none on it" "$loss_ms" "detection (the head's log)" "$det_ms"
echo "voters after the run (RSS KiB, CPU % since start): $(ps -o rss=,pcpu= -p "${PIDS[1]},${PIDS[2]},${PIDS[3]}" | tr -s ' \n' ' ')"
ctl 4 job stop big >/dev/null 2>&1
