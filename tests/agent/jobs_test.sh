#!/usr/bin/env bash
# Jobs with real agents (fast profile): 3 voters without GPUs (the control
# plane) and 3 agents declaring --gpus 8.  Members are shell commands that
# log their start (member, pid, generation, restart count, environment) to a
# shared events file and sleep.  Checked: submit errors name the flag; the
# placement and the environment each member gets; logs from any agent;
# kill -9 of a trainer rank restarts the trainer group (and only it);
# kill -9 of an engine restarts that engine alone; killing the head restarts
# nothing; SIGKILL of a node with engines runs them again on the spare node;
# a job bigger than the cluster stays pending with its reason; stop ends
# every process group.
. "$(dirname "$0")/lib.sh"

V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 0"
for i in 1 2 3; do start_agent $i $V --join "127.0.0.1:$(gport 1)"; done
for i in 4 5 6; do start_agent $i --profile fast --gpus 8 --join "127.0.0.1:$(gport 1)"; done

EV=$T_DIR/events
touch "$EV"
M='echo "start $SKEIN_MEMBER pid=$$ gen=$SKEIN_GENERATION restarts=$SKEIN_RESTART_COUNT rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK cuda=$CUDA_VISIBLE_DEVICES master=$MASTER_ADDR:$MASTER_PORT role=$SKEIN_ROLE engine=$SKEIN_ENGINE_ID base=$SKEIN_BASE_GPU_ID tp=$SKEIN_TP_SIZE rpc=$SKEIN_RPC" >> '"$EV"'; echo "torchrun $SKEIN_MEMBER $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE $ROLE_NAME $ROLE_RANK $ROLE_WORLD_SIZE $TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RUN_ID" >> '"$EV"'; echo "update $SKEIN_MEMBER $SKEIN_UPDATE_TIMEOUT_MS $SKEIN_ON_ENGINE_LOSS $SKEIN_NODE_ADDR" >> '"$EV"'; echo "hello from $SKEIN_MEMBER"; exec sleep 100000'

head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ]; }
# placement as "member node gpus pid state restarts" lines
pl() { ctl "${2:-4}" placement ${1:-} --format json 2>/dev/null | tr '{' '\n' | grep '"member"' | sed 's/"gpus":\[\]/"gpus":[-]/' |
	sed -E 's/.*"member":"([^"]*)".*"node":"?([^",]*)"?,"gpus":\[([^]]*)\],"pid":([0-9-]*),"state":"([a-z]*)","restarts":([0-9]*).*/\1 \2 \3 \4 \5 \6/'; }
running_count() { pl "$1" | awk '$5 == "running" && $4 > 0' | wc -l; }
all_running() { [ "$(running_count "$1")" = "$2" ]; }
pid_of() { pl "$1" | awk -v m="$2" '$1 == m { print $4 }'; }
field() { pl "$1" | awk -v m="$2" -v f="$3" '$1 == m { print $f }'; }
starts() { grep -c "^start $1 " "$EV"; }
last_start() { grep "^start $1 " "$EV" | tail -1; }

if wait_until 20 has_head 4; then pass "a head elected, known by the GPU agents"; else fail "no head"; finish; fi

# --- bad jobs: one line, exit 2, the flag named
out=$(ctl 4 job submit --trainer-cmd true --rollout-cmd true --rollout-num-gpus 6 --rollout-num-gpus-per-engine 4 2>&1); rc=$?
check "rollout GPUs not a multiple of GPUs per engine: exit 2 naming the flag" expect_err $rc 2 "$out" "rollout-num-gpus"
out=$(ctl 4 job submit --trainer-cmd true --rollout-cmd true --colocate --update-weight-transfer-mode broadcast_packed 2>&1); rc=$?
check "broadcast_packed with --colocate refused" expect_err $rc 2 "$out" "broadcast_packed"
out=$(ctl 4 job submit --trainer-cmd true --update-weight-transfer-mode disk-delta 2>&1); rc=$?
check "disk-delta without a disk dir refused" expect_err $rc 2 "$out" "update-weight-disk-dir"
out=$(ctl 4 job submit --trainer-cmd true --rollout-cmd true --rollout-num-gpus 16 --rollout-num-gpus-per-engine 16 2>&1); rc=$?
check "an engine wider than a node refused" expect_err $rc 2 "$out" "wider"
out=$(ctl 4 job submit --trainer-cmd true --bogus 1 2>&1); rc=$?
check "unknown flag refused" expect_err $rc 2 "$out" "bogus"
out=$(ctl 4 job submit --trainer-cmd true --update-weight-timeout 500ms 2>&1); rc=$?
check "an update timeout under 1s refused" expect_err $rc 2 "$out" "update-weight-timeout"
out=$(ctl 4 job submit --trainer-cmd true --update-on-engine-loss ignore 2>&1); rc=$?
check "an unknown engine-loss policy refused" expect_err $rc 2 "$out" "update-on-engine-loss"

# --- submit: trainer 1x4, 4 engines of 2 GPUs: n4 GPUs 0-3 trainer, 4-7 engines 0-1; n5 engines 2-3
out=$(ctl 6 job submit --name rl --actor-num-nodes 1 --actor-num-gpus-per-node 4 --rollout-num-gpus 8 \
	--rollout-num-gpus-per-engine 2 --restart-backoff 0:2s --stop-grace 2s --update-weight-timeout 90s \
	--update-on-engine-loss abort --trainer-cmd "$M" --rollout-cmd "$M" 2>&1)
check "job submitted through a non-voter" bash -c "echo '$out' | grep -q 'job rl submitted'"
t0=$(now_ms)
if wait_until 15 all_running rl 8; then pass "8 members running ($(( $(now_ms) - t0 )) ms after submit)"; else
	fail "members running"; ctl 4 placement rl; ctl 4 job status rl; fi
check "trainer rank 0 on n4 GPU 0" [ "$(field rl rl/trainer-0 2) $(field rl rl/trainer-0 3)" = "n4 0" ]
check "trainer rank 3 on n4 GPU 3" [ "$(field rl rl/trainer-3 2) $(field rl rl/trainer-3 3)" = "n4 3" ]
check "engine 1 on n4 GPUs 6,7" [ "$(field rl rl/engine-1 2) $(field rl rl/engine-1 3)" = "n4 6,7" ]
check "engine 2 on n5 GPUs 0,1" [ "$(field rl rl/engine-2 2) $(field rl rl/engine-2 3)" = "n5 0,1" ]
s=$(last_start rl/trainer-2)
check "trainer rank env: RANK WORLD_SIZE LOCAL_RANK CUDA_VISIBLE_DEVICES MASTER role" \
	bash -c "echo '$s' | grep -q 'rank=2 world=4 local=2 cuda=2 master=127.0.0.1:[1-9][0-9]* role=trainer engine=-1 base=2 tp=1 rpc=unix:$T_DIR/n4/control.sock'"
s=$(last_start rl/engine-3)
check "engine env: engine id, GPUs, base GPU, TP size, restart count 0" \
	bash -c "echo '$s' | grep -q 'gen=1 restarts=0 rank=3 world=4 local=0 cuda=2,3 master=[0-9.:]* role=rollout engine=3 base=2 tp=2'"
# torchrun's: LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_NAME ROLE_RANK ROLE_WORLD_SIZE RESTART_COUNT MAX_RESTARTS RUN_ID
check "trainer rank 2: torchrun's variables" bash -c "grep -q '^torchrun rl/trainer-2 4 0 1 trainer 2 4 0 10 rl\$' '$EV'"
check "engine 3: torchrun's variables (a group of one)" bash -c "grep -q '^torchrun rl/engine-3 1 3 4 rollout 3 4 0 10 rl\$' '$EV'"
check "update policy and node address in the environment" \
	bash -c "grep -q '^update rl/engine-3 90000 abort 127.0.0.1\$' '$EV' && grep -q '^update rl/trainer-0 90000 abort 127.0.0.1\$' '$EV'"
json=$(ctl 5 placement --format json)
check "placement JSON shape" bash -c "echo '$json' | grep -q '^{\"members\":\[{\"member\":\"rl/trainer-0\",\"job\":\"rl\",\"role\":\"trainer\",\"rank\":0,\"engine\":-1,\"node\":\"n4\",\"gpus\":\[0\],\"pid\":[0-9]*,\"state\":\"running\",\"restarts\":0'"
check "job list shows rl running" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 2) job list | grep -q '^rl  *running'"
check "logs of a member on n5, asked on n1" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) logs rl/engine-2 | grep -q 'hello from rl/engine-2'"
out=$(ctl 4 logs rl/engine-99 2>&1); rc=$?
check "logs of an unknown member: exit 1" expect_err $rc 1 "$out" "no such member"
grep -q "^start rl/trainer-1 .*master=127.0.0.1:0 " "$EV" && fail "a member started before MASTER_PORT was chosen"

# --- kill -9 of a trainer rank: the whole trainer group restarts, engines do not
declare -A P0=()
for m in rl/trainer-{0..3} rl/engine-{0..3}; do P0[$m]=$(pid_of rl $m); done
t0=$(now_ms)
kill -9 "${P0[rl/trainer-2]}"
group_restarted() {
	for m in rl/trainer-{0..3}; do
		[ "$(starts $m)" -ge 2 ] || return 1
		last_start $m | grep -q 'gen=2 restarts=1' || return 1
	done
	all_running rl 8
}
if wait_until 10 group_restarted; then pass "trainer group restarted with SKEIN_RESTART_COUNT=1 ($(( $(now_ms) - t0 )) ms)"; else
	fail "trainer group restart"; ctl 4 placement rl; fi
ok=1; for m in rl/trainer-{0..3}; do [ "$(pid_of rl $m)" != "${P0[$m]}" ] || ok=0; kill -0 "${P0[$m]}" 2>/dev/null && ok=0; done
check "every trainer rank has a new pid; the old ones are gone" [ $ok = 1 ]
ok=1; for m in rl/engine-{0..3}; do [ "$(pid_of rl $m)" = "${P0[$m]}" ] || ok=0; [ "$(starts $m)" = 1 ] || ok=0; done
check "engines untouched by the trainer restart" [ $ok = 1 ]

# --- kill -9 of an engine: it alone restarts
for m in rl/trainer-{0..3} rl/engine-{0..3}; do P0[$m]=$(pid_of rl $m); done
kill -9 "${P0[rl/engine-1]}"
eng_restarted() { [ "$(starts rl/engine-1)" = 2 ] && last_start rl/engine-1 | grep -q 'restarts=1' && all_running rl 8 &&
	[ "$(field rl rl/engine-1 6)" = 1 ]; }
check "engine 1 restarted, restarts=1 in placement and its environment" wait_until 10 eng_restarted
ok=1; for m in rl/trainer-{0..3} rl/engine-0 rl/engine-2 rl/engine-3; do [ "$(pid_of rl $m)" = "${P0[$m]}" ] || ok=0; done
check "nothing else restarted" [ $ok = 1 ]

# --- a job bigger than the cluster stays pending, with the reason
ctl 4 job submit --name big --actor-num-nodes 4 --actor-num-gpus-per-node 8 --trainer-cmd "$M" >/dev/null 2>&1
big_pending() { ctl 4 job status big 2>/dev/null | grep -q '^state: *pending' && ctl 4 job status big | grep -q '^reason: .*GPU'; }
check "a job bigger than the cluster is pending, with a reason" wait_until 10 big_pending
ctl 4 job stop big >/dev/null 2>&1

# --- kill the head: a new head, and no member restarted
lines=$(wc -l < "$EV")
for m in rl/trainer-{0..3} rl/engine-{0..3}; do P0[$m]=$(pid_of rl $m); done
H=$(head_of 4); HI=${H#n}
kill_agent "$HI" 9
new_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ] && [ "$h" != "$H" ]; }
check "a new head after killing $H" wait_until 15 new_head
wait_until 5 all_running rl 8
ok=1; for m in rl/trainer-{0..3} rl/engine-{0..3}; do [ "$(pid_of rl $m)" = "${P0[$m]}" ] || ok=0; done
sleep_until() { local t=$(( $(now_ms) + $1 )); wait_until 10 bash -c "[ \$(( \$(date +%s%N) / 1000000 )) -ge $t ]"; }
sleep_until 1500 # two order rounds of the new head
check "the new head restarted no member (same pids, no new start)" bash -c "[ $ok = 1 ] && [ \$(wc -l < '$EV') = $lines ]"

# --- SIGKILL of node n5 (agent and members): its engines run again on n6
for m in rl/engine-2 rl/engine-3; do P0[$m]=$(pid_of rl $m); done
t0=$(now_ms)
kill_agent 5 9
kill -9 "${P0[rl/engine-2]}" "${P0[rl/engine-3]}" 2>/dev/null
moved() { [ "$(field rl rl/engine-2 2)" = n6 ] && [ "$(field rl rl/engine-3 2)" = n6 ] && all_running rl 8; }
if wait_until 20 moved; then pass "engines 2 and 3 running on n6 ($(( $(now_ms) - t0 )) ms after the kill)"; else
	fail "engines re-placed"; ctl 4 placement rl; fi
check "moved engine: GPUs 0,1 of n6, SKEIN_RESTART_COUNT went up" \
	bash -c "[ '$(field rl rl/engine-2 3)' = 0,1 ] && grep '^start rl/engine-2 ' '$EV' | tail -1 | grep -q 'restarts=1'"
check "trainer untouched by the engine node's loss" [ "$(starts rl/trainer-0)" = 2 ]

# --- no capacity left: the engines of a lost node wait, pending, until a node joins
for m in rl/engine-2 rl/engine-3; do P0[$m]=$(pid_of rl $m); done
kill_agent 6 9
kill -9 "${P0[rl/engine-2]}" "${P0[rl/engine-3]}" 2>/dev/null
eng_pending() { [ "$(field rl rl/engine-2 5)" = pending ] && [ "$(field rl rl/engine-3 5)" = pending ] &&
	ctl 4 job status rl | grep -q '^reason: .*GPU'; }
check "engines of a lost node pending while no GPUs are free, reason in job status" wait_until 15 eng_pending
start_agent 7 --profile fast --gpus 8 --join "127.0.0.1:$(gport 4)"
on_n7() { [ "$(field rl rl/engine-2 2)" = n7 ] && [ "$(field rl rl/engine-3 2)" = n7 ] && all_running rl 8; }
check "a new node joins: the pending engines run on it" wait_until 15 on_n7
out=$(timeout 1.5 "$SKEINCTL" --rpc "127.0.0.1:$(rport 4)" logs rl/engine-3 --follow 2>&1); rc=$?
check "logs --follow prints the log and keeps following" bash -c "[ $rc = 124 ] && echo '$out' | grep -q 'hello from rl/engine-3'"

# --- YAML: the same keys in a file, flags after --file override it
cat > "$T_DIR/job.yaml" <<EOF
name: from-yaml
actor-num-nodes: 1
actor_num_gpus_per_node: 2
rollout-num-gpus: 0
trainer-cmd: exec sleep 100000
EOF
out=$(ctl 4 job submit --file "$T_DIR/job.yaml" --name yaml2 2>&1)
yaml_ok() { ctl 4 job status yaml2 2>/dev/null | grep -q '^state: *running' && [ "$(running_count yaml2)" = 2 ]; }
check "a job from a YAML file (name overridden by a flag) runs its 2 ranks" wait_until 10 yaml_ok
printf 'actor-num-nodes: [1, 2]\n' > "$T_DIR/bad.yaml"
out=$(ctl 4 job submit --file "$T_DIR/bad.yaml" --trainer-cmd true 2>&1); rc=$?
check "a bad YAML file: exit 2, the key and line named" expect_err $rc 2 "$out" "actor-num-nodes"
ctl 4 job stop yaml2 >/dev/null 2>&1
ctlw() { "$SKEINCTL" --rpc "127.0.0.1:$(rport "$1")" --timeout 10000 "${@:2}"; } # a longer bound for --wait
out=$(ctlw 4 job submit --name waited --actor-num-nodes 1 --actor-num-gpus-per-node 1 --trainer-cmd 'exec sleep 100000' --wait 2>&1); rc=$?
check "job submit --wait returns once every member runs" bash -c "[ $rc = 0 ] && echo '$out' | grep -q 'job waited: 1 members running'"
ctl 4 job stop waited >/dev/null 2>&1
out=$("$SKEINCTL" --rpc "127.0.0.1:$(rport 4)" --timeout 1500 job submit --name toobig --actor-num-nodes 9 \
	--actor-num-gpus-per-node 8 --trainer-cmd 'exec sleep 100000' --wait 2>&1); rc=$?
if [ $rc = 1 ] && echo "$out" | grep -q 'not every member running within --timeout'; then
	pass "job submit --wait on a job that cannot run: exit 1 at --timeout"
else fail "job submit --wait on a job that cannot run" "rc $rc, output: $(echo "$out" | tr '\n' '|')"; fi
ctl 4 job stop toobig >/dev/null 2>&1

# --- stop: every process group ends
pids=$(pl rl | awk '{ print $4 }')
out=$(ctl 4 job stop rl 2>&1)
check "job stop answers" bash -c "echo '$out' | grep -q 'job rl stopped'"
gone() { for p in $pids; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
check "every member process ended after stop" wait_until 10 gone
check "job list: rl stopped" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 4) job list | grep -q '^rl  *stopped'"
check "logs of a stopped job's member, from the node that ran it" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 7) logs rl/trainer-1 | grep -q 'hello from rl/trainer-1'"
out=$(ctl 4 job delete big 2>&1)
check "job delete of a stopped job" bash -c "echo '$out' | grep -q 'job big deleted' && ! '$SKEINCTL' --rpc 127.0.0.1:$(rport 4) job list | grep -q '^big '"
ctl 4 job submit --name live --actor-num-nodes 1 --actor-num-gpus-per-node 1 --trainer-cmd 'exec sleep 100000' >/dev/null 2>&1
out=$(ctl 4 job delete live 2>&1); rc=$?
check "job delete of a running job refused: stop it first" expect_err $rc 1 "$out" "stop it first"
ctl 4 job stop live >/dev/null 2>&1

# --- a retried submit (skeinctl resends it after a head failover) finds its job
SUB=(job submit --actor-num-nodes 1 --actor-num-gpus-per-node 1 --trainer-cmd 'exec sleep 100000')
n1=$(SKEIN_SUBMIT_TOKEN=tok-1 ctl 4 "${SUB[@]}" 2>&1 | awk '{ print $2 }')
n2=$(SKEIN_SUBMIT_TOKEN=tok-1 ctl 7 "${SUB[@]}" 2>&1 | awk '{ print $2 }')
n3=$(SKEIN_SUBMIT_TOKEN=tok-2 ctl 4 "${SUB[@]}" 2>&1 | awk '{ print $2 }')
nj=$(ctl 4 job list 2>/dev/null | grep -c '^job-')
if [ -n "$n1" ] && [ "$n1" = "$n2" ] && [ -n "$n3" ] && [ "$n3" != "$n1" ] && [ "$nj" = 2 ]; then
	pass "an unnamed submit resent with its token answers with the job it made ($n1), a new token makes $n3"
else fail "submit tokens" "first $n1, resent $n2, new token $n3, $nj unnamed jobs listed"; fi
for j in $n1 $n3; do ctl 4 job stop "$j" >/dev/null 2>&1; done

# --- a stopped job's GPUs stay taken while its processes live out their grace
ctl 4 job submit --name slow --actor-num-nodes 1 --actor-num-gpus-per-node 8 --stop-grace 3s \
	--trainer-cmd 'trap "" TERM; exec sleep 100000' --wait >/dev/null 2>&1 || fail "slow job did not start"
ctl 4 job stop slow >/dev/null 2>&1
ctl 4 job submit --name next --actor-num-nodes 2 --actor-num-gpus-per-node 8 --trainer-cmd 'exec sleep 100000' >/dev/null 2>&1
t0=$(now_ms)
next_state() { ctl 4 job status next 2>/dev/null | awk '$1 == "state:" { print $2 }'; }
t=$(( t0 + 1500 )); wait_until 5 bash -c "[ \$(( \$(date +%s%N) / 1000000 )) -ge $t ]"
check "a job needing a stopping job's GPUs waits through the grace" [ "$(next_state)" = pending ]
if wait_until 15 bash -c "[ \"\$('$SKEINCTL' --rpc 127.0.0.1:$(rport 4) job status next 2>/dev/null | awk '\$1 == \"state:\" { print \$2 }')\" = running ]"; then
	pass "then it runs ($(( $(now_ms) - t0 )) ms after the stop; grace 3 s)"; else fail "next job runs after the grace"; fi
ctl 4 job stop next >/dev/null 2>&1
finish
