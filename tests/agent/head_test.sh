#!/usr/bin/env bash
# Head election with real agents (fast profile): 3 voters (bootstrap-expect 3)
# and 2 agents that only follow.  One head per term; writes from any agent go
# through the head and survive its SIGKILL; a new head within a bound; stale
# orders refused (fencing); a paused voter does not disturb the head; a
# restarted voter catches up; voters added and removed one at a time.
. "$(dirname "$0")/lib.sh"

V="--profile fast --head-eligible --bootstrap-expect 3 --enable-debug"
for i in 1 2 3; do start_agent $i $V --join "127.0.0.1:$(gport 1)"; done
for i in 4 5; do start_agent $i --profile fast --enable-debug --join "127.0.0.1:$(gport 1)"; done

head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
term_of() { ctl "$1" head 2>/dev/null | awk '$1 == "term:" { print $2 }'; }
all_agree() { # every agent in the list names the same head, not "(none)"
	local h; h=$(head_of "$1")
	[ -n "$h" ] && [ "$h" != "(none)" ] || return 1
	for i in "$@"; do [ "$(head_of "$i")" = "$h" ] || return 1; done
}
put_ok() { ctl "$1" state put "$2" "$3" >/dev/null 2>&1; }
get_is() { [ "$(ctl "$1" state get "$2" ${4:+"$4"} 2>/dev/null)" = "$3" ]; }
one_head_per_term() { # from the logs: no term claimed by two agents
	[ -z "$(grep -ho 'this agent is the head (term [0-9]*)' "$T_DIR"/n*.log | sort | uniq -d)" ] &&
	[ -z "$(for f in "$T_DIR"/n*.log; do grep -o 'this agent is the head (term [0-9]*)' "$f" | sort -u; done | sort | uniq -d)" ]
}

t0=$(now_ms)
if wait_until 20 all_agree 1 2 3 4 5; then pass "one head, known by all 5 agents ($(( $(now_ms) - t0 )) ms)"; else
	fail "one head known by all"; for i in 1 2 3 4 5; do ctl $i head; done; fi
H=$(head_of 4); HI=${H#n}
check "the head is a voter" bash -c "[ $HI -ge 1 ] && [ $HI -le 3 ]"
json=$(ctl 5 head --format json)
check "head JSON: head, term, voters with state and last contact" bash -c "echo '$json' | grep -q '\"head\":\"$H\",\"term\":[0-9]*,\"voters\":\[{\"name\":\"n1\",\"state\":\"[a-z]*\",\"last_contact_ms\":'"

# --- writes from any agent, through the head
for k in $(seq 1 20); do put_ok $(( (k % 5) + 1 )) "key$k" "value$k" || fail "put key$k"; done

ok=1; for i in 1 2 3 4 5; do get_is $i key7 value7 || ok=0; done
check "get key7 from all 5 agents" [ $ok = 1 ]
stale_err=$(ctl 2 state get key7 --stale 2>&1 >/dev/null)
case "$stale_err" in *"stale read"*) pass "a --stale read says so on stderr" ;;
	*) fail "a --stale read says so on stderr: '$stale_err'" ;; esac
check "state list has the 20 keys" bash -c "[ \$(SKEIN_BIN='$BIN' '$SKEINCTL' --rpc 127.0.0.1:$(rport 4) state list | grep -c '^key') = 20 ]"
out=$(ctl 4 state get nope 2>&1); rc=$?
check "get of a missing key: exit 1, one line" expect_err $rc 1 "$out" "no such key"
out=$(ctl 4 state put onlykey 2>&1); rc=$?
check "put without a value: exit 2" expect_err $rc 2 "$out" "usage"

# --- fencing: an order is taken only from the known head at exactly its term
# (the same check as a real assign), on every agent
T=$(term_of 4)
ok=1; for i in 1 2 3 4 5; do
	out=$(ctl $i debug order $((T - 1)) 2>&1) && ok=0
	echo "$out" | grep -q "stale order" || ok=0
	ctl $i debug order "$T" >/dev/null 2>&1 || ok=0
done
check "order of term $((T - 1)) refused, term $T accepted, on all agents" [ $ok = 1 ]
ok=1; for i in 1 4; do
	out=$(ctl $i debug order $((T + 1)) 2>&1) && ok=0
	echo "$out" | grep -q "newer than head $H's term $T" || ok=0
	out=$(ctl $i debug order "$T" n9 2>&1) && ok=0
	echo "$out" | grep -q "from 'n9', but the head is $H" || ok=0
done
check "an order of term $((T + 1)), or of term $T from another agent, refused" [ $ok = 1 ]

# --- a paused follower voter does not disturb the head
F=1; [ "$HI" = 1 ] && F=2
kill_agent $F STOP
put_ok 4 during-pause yes || fail "write while a follower voter is paused"
# held until the head sees it unreachable (no contact for a heartbeat timeout)
wait_until 10 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 4) head | grep -q '^n$F .*unreachable'"
check "the head sees the paused voter unreachable" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 4) head | grep -q '^n$F .*unreachable'"
kill_agent $F CONT
wait_until 10 get_is $F during-pause yes --stale
check "the paused voter catches up (stale read of a write made while it was stopped)" get_is $F during-pause yes --stale
check "the head did not change (still $H, term $T)" bash -c "[ '$(head_of 4)' = '$H' ] && [ '$(term_of 4)' = '$T' ]"

# --- SIGKILL the head: a new head answers a write within a bound
S=1; [ "$HI" = 1 ] && S=2
kill_agent "$HI" 9
t0=$(now_ms)
if wait_until 10 put_ok $S after-kill yes; then
	pass "new head commits a write $(( $(now_ms) - t0 )) ms after the head's SIGKILL"
else
	fail "no write within 10 s of the head's SIGKILL"
fi
wait_until 10 all_agree $(for i in 1 2 3 4 5; do [ $i != "$HI" ] && echo $i; done)
H2=$(head_of 4)
check "a different head ($H -> $H2) with a higher term" bash -c "[ '$H2' != '$H' ] && [ \$('$SKEINCTL' --rpc 127.0.0.1:$(rport 4) head | awk '\$1 == \"term:\" { print \$2 }') -gt $T ]"
ok=1; for k in $(seq 1 20); do get_is 4 "key$k" "value$k" || ok=0; done
check "every write committed before the kill is still there" [ $ok = 1 ]
check "at most one head per term (logs)" one_head_per_term

# --- the killed voter restarts from its data dir and catches up from the log
for k in $(seq 21 40); do put_ok 5 "key$k" "value$k"; done
start_agent "$HI" $V --join "127.0.0.1:$(gport 4)"
if wait_until 15 get_is "$HI" key40 value40 --stale; then pass "the restarted voter caught up"; else fail "the restarted voter caught up"; fi
check "it follows the new head" wait_until 5 bash -c "[ \"\$('$SKEINCTL' --rpc 127.0.0.1:$(rport $HI) head | awk '\$1 == \"head:\" { print \$2 }')\" = '$H2' ]"

# --- voters: add an eligible agent, then remove it
start_agent 6 --profile fast --head-eligible --join "127.0.0.1:$(gport 4)"
wait_until 10 bash -c "[ -n \"\$('$SKEINCTL' --rpc 127.0.0.1:$(rport 4) members | grep '^n6 .*alive')\" ]"
# the head (not only n4) must see n6 alive before it accepts it; retried, as an
# operator would, while gossip or a voter change in flight says "retry"
vadd_out=
vadd() { vadd_out=$(ctl 4 voters add n6 2>&1) && return 0; echo "$vadd_out" | grep -q "voter already"; }
if wait_until 15 vadd; then pass "voters add n6"; else fail "voters add n6" "$vadd_out"; fi
check "n6 is a voter" wait_until 5 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 4) head | grep -q '^n6 '"
wait_until 10 get_is 6 key40 value40 --stale
check "the new voter has the state" get_is 6 key40 value40 --stale
wait_until 5 quiet ctl 4 voters remove n6
check "n6 removed" wait_until 5 bash -c "! '$SKEINCTL' --rpc 127.0.0.1:$(rport 4) head | grep -q '^n6 '"
out=$(ctl 4 voters add nosuch 2>&1); rc=$?
check "voters add of an unknown agent: exit 1" expect_err $rc 1 "$out" "not an alive member"
check "at most one head per term (logs, at the end)" one_head_per_term

# --- automatic replacement: a fresh cluster whose head replaces a voter
# failed for 2 s by the eligible spare (first the removal, then the addition)
for i in 1 2 3 4 5 6; do [ -n "${PIDS[$i]:-}" ] && kill_agent $i 9; done
R="--profile fast --head-eligible --bootstrap-expect 3 --voter-replace-after 2"
for i in 11 12 13; do start_agent $i $R --join "127.0.0.1:$(gport 11)"; done
wait_until 20 all_agree 11 12 13
start_agent 14 --profile fast --head-eligible --voter-replace-after 2 --join "127.0.0.1:$(gport 11)"
wait_until 10 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 11) members | grep -q '^n14 .*alive'"
RH=$(head_of 11); RHI=${RH#n}
VICTIM=11; [ "$RHI" = 11 ] && VICTIM=12
kill_agent $VICTIM 9
voters_are() { # the head's voter list, sorted, equals the arguments
	local got; got=$(ctl "$RHI" head 2>/dev/null | awk 'NR > 3 && !/^\(/ { print $1 }' | sort | tr '\n' ' ')
	[ "$got" = "$* " ]
}
want=$(for i in 11 12 13 14; do [ $i != $VICTIM ] && echo "n$i"; done | sort | tr '\n' ' ')
if wait_until 20 voters_are $want; then pass "the head replaced failed voter n$VICTIM by n14"; else
	fail "automatic voter replacement" "voters: $(ctl "$RHI" head | awk 'NR > 3 { print $1 }' | tr '\n' ' ')"; fi
check "a write commits with the new voter set" wait_until 10 put_ok "$RHI" after-replace yes

# --- handover: skeinctl head transfer, then a head that leaves on SIGTERM
ALIVE=$(for i in 11 12 13 14; do [ $i != $VICTIM ] && echo $i; done)
T1=$(term_of "$RHI")
out=$(ctl "$RHI" head transfer 2>&1); rc=$?
TO=$(echo "$out" | awk '{ print $NF }')
t0=$(now_ms)
new_head_is() { for i in $ALIVE; do [ "$(head_of $i)" = "$1" ] || return 1; done; }
check "head transfer: handing over to another voter" bash -c "[ $rc = 0 ] && [ -n '$TO' ] && [ '$TO' != '$RH' ]"
if wait_until 10 new_head_is "$TO"; then pass "every agent follows $TO ($(( $(now_ms) - t0 )) ms)"; else
	fail "every agent follows $TO" "$(for i in $ALIVE; do echo -n "n$i: $(head_of $i) "; done)"; fi
term_is() { [ "$(term_of "$1")" = "$2" ]; }
check "one election: term $T1 -> $((T1 + 1))" term_is "${TO#n}" $((T1 + 1))
check "the old head logged the handover" grep -q "stepped down as head (term $T1): handing over to $TO" "$T_DIR/$RH.log"
check "a write right after the handover commits" wait_until 10 put_ok "${TO#n}" after-handover yes
out=$(ctl "$RHI" head handover "$TO" 2>&1); rc=$?
check "head handover (the new name) to itself (asked through a follower): exit 1" expect_err $rc 1 "$out" "leader already"
out=$(ctl "$RHI" head handover nosuch 2>&1); rc=$?
check "head handover to a non-voter: exit 1" expect_err $rc 1 "$out" "not a voter"
THI=${TO#n}
kill_agent "$THI" TERM
wait "${PIDS[$THI]}" 2>/dev/null; unset "PIDS[$THI]"
REST=$(for i in $ALIVE; do [ $i != "$THI" ] && echo $i; done)
LH=$(grep -o "leaving: handing the head over to [^ ]*" "$T_DIR/$TO.log" | awk '{ print $NF }')
check "a head that leaves on SIGTERM hands over first (to ${LH:-nobody})" bash -c "[ -n '$LH' ] && [ '$LH' != '$TO' ]"
all_follow_lh() { for i in $REST; do [ "$(head_of $i)" = "$LH" ] || return 1; done; }
lh_leads() { all_follow_lh && term_is "${LH#n}" $((T1 + 2)); }
check "the rest follow $LH in term $((T1 + 2))" wait_until 10 lh_leads
check "a write after the leave commits" wait_until 10 put_ok "${LH#n}" after-leave yes
finish
