#!/usr/bin/env bash
# Trainer group restarts are counted, once per cause, and --max-restarts
# bounds every path.  n1 (the head, one voter) and n2, n3 offer 2 GPUs each;
# job rl has 2 trainer units of 2 ranks, on two of them (the third is the
# spare).  Each rank logs "start MEMBER gen=G" to an events file.  Steps,
# each followed by a settle time in which no further generation may start:
#   kill -9 a rank on the head's node          -> generation 2, exactly
#   kill -9 a rank on the other node           -> 3 (this one restarted twice)
#   SIGKILL + restart of the other node's agent -> 4 (its ranks run in new
#                                                 processes of generation 3)
#   SIGKILL of that agent for good              -> 5 (its unit moves to the spare)
#   kill -9 a rank: --max-restarts 4 is spent   -> the job fails, nothing starts
. "$(dirname "$0")/lib.sh"

start_agent 1 --profile fast --head-eligible --bootstrap-expect 1 --gpus 2
for i in 2 3; do start_agent $i --profile fast --gpus 2 --join "127.0.0.1:$(gport 1)"; done

EV=$T_DIR/events
touch "$EV"
M='echo "start $SKEIN_MEMBER gen=$SKEIN_GENERATION pid=$$" >> '"$EV"'; exec sleep 100000'
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { [ "$(head_of 2)" = n1 ]; }
pl() { ctl 1 placement rl --format json 2>/dev/null | tr '{' '\n' | grep '"member"' |
	sed -E 's/.*"member":"([^"]*)".*"node":"?([^",]*)"?,"gpus":\[([^]]*)\],"pid":([0-9-]*),"state":"([a-z]*)".*/\1 \2 \3 \4 \5/'; }
field() { pl | awk -v m="$2" -v f="$1" '$1 == m { print $f }'; }
job_gen() { ctl 1 job status rl 2>/dev/null | awk '$1 == "generation:" { print $2 }'; }
job_state() { ctl 1 job status rl 2>/dev/null | awk '$1 == "state:" { print $2 }'; }
max_gen() { grep -o 'gen=[0-9]*' "$EV" | cut -d= -f2 | sort -n | tail -1; }
# every rank running, in generation $1, each started once in it
all_at() {
	[ "$(job_gen)" = "$1" ] || return 1
	[ "$(pl | awk '$5 == "running" && $4 > 0' | wc -l)" = 4 ] || return 1
	[ "$(grep -c " gen=$1 " "$EV")" = 4 ]
}
settle() { local t=$(( $(now_ms) + $1 )); wait_until 10 bash -c "[ \$(( \$(date +%s%N) / 1000000 )) -ge $t ]"; }
# after a cause: generation $1 reached and nothing newer within the settle time
expect_gen() {
	local want=$1 what=$2
	if ! wait_until 20 all_at "$want"; then
		fail "$what: generation $want" "job generation $(job_gen), newest started $(max_gen), state $(job_state)"
		ctl 1 placement rl; return
	fi
	settle 2000
	if [ "$(job_gen)" = "$want" ] && [ "$(max_gen)" = "$want" ] && [ "$(grep -c " gen=$want " "$EV")" = 4 ]; then
		pass "$what: exactly one group restart (generation $want)"
	else
		fail "$what: exactly one group restart" "job generation $(job_gen), newest started $(max_gen)"
	fi
}

wait_until 20 has_head || { fail "no head"; finish; }
ctl 1 job submit --name rl --actor-num-nodes 2 --actor-num-gpus-per-node 2 --rollout-num-gpus 0 \
	--restart-backoff 0:0 --max-restarts 4 --stop-grace 1s --trainer-cmd "$M" >/dev/null 2>&1 || fail "submit"
if wait_until 20 all_at 1; then pass "4 ranks running in generation 1"; else fail "ranks running"; ctl 1 placement rl; finish; fi
# the two nodes with ranks: the head's (n1) and one other; the third is the spare
A=$(field 2 rl/trainer-0); B=$(field 2 rl/trainer-2)
if [ "$A" = n1 ]; then O=$B; elif [ "$B" = n1 ]; then O=$A; else O=""; fi
[ -n "$O" ] && [ "$O" != n1 ] || { fail "placement: expected ranks on n1 and another node, got $A and $B"; finish; }
OI=${O#n}
head_rank=$(pl | awk '$2 == "n1" { print $1; exit }')
other_rank=$(pl | awk -v o="$O" '$2 == o { print $1; exit }')

kill -9 "$(field 4 "$head_rank")"
expect_gen 2 "a rank killed on the head's node"
kill -9 "$(field 4 "$other_rank")"
expect_gen 3 "a rank killed on another node ($O)"

# the agent of the other node dies and comes back: its ranks run in new processes
old=$(pl | awk -v o="$O" '$2 == o { print $4 }')
kill_agent "$OI" 9
for p in $old; do kill -9 "$p" 2>/dev/null; done
start_agent "$OI" --profile fast --gpus 2 --join "127.0.0.1:$(gport 1)"
expect_gen 4 "the agent of $O restarted (its ranks reborn in generation 3)"

# that node is lost for good: its unit moves to the spare
old=$(pl | awk -v o="$O" '$2 == o { print $4 }')
kill_agent "$OI" 9
for p in $old; do kill -9 "$p" 2>/dev/null; done
expect_gen 5 "$O lost: its trainer unit moved to the spare node"
spare_ok() { local n; n=$(pl | awk '{ print $2 }' | sort -u | tr '\n' ' '); [ "$n" != "${n/$O/}" ] && return 1; return 0; }
check "no rank left on the lost node $O" spare_ok

# the fifth cause finds --max-restarts 4 spent: the job fails, nothing starts again
lines=$(wc -l < "$EV")
kill -9 "$(field 4 "$head_rank")"
failed() { [ "$(job_state)" = failed ]; }
if wait_until 10 failed; then
	settle 1500
	if [ "$(wc -l < "$EV")" = "$lines" ] && [ "$(job_gen)" = 5 ]; then
		pass "--max-restarts 4 spent: the job failed in generation 5, no rank started again"
	else fail "after the job failed" "$(( $(wc -l < "$EV") - lines )) starts, generation $(job_gen)"; fi
	check "the reason names --max-restarts" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) job status rl | grep -q 'max-restarts 4'"
else
	fail "the job fails once --max-restarts is spent" "state $(job_state), generation $(job_gen)"
fi
gone() { for p in $(grep -o 'pid=[0-9]*' "$EV" | cut -d= -f2); do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
check "no rank process left after the failure" wait_until 10 gone
finish
