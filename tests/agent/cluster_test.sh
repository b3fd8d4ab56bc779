#!/usr/bin/env bash
# Real agents on 127.0.0.1: convergence at 3 and 20, SIGKILL detection,
# SIGSTOP past the suspicion timeout and SIGCONT, restart with the same name
# and data dir, graceful leave.  Fast profile.
. "$(dirname "$0")/lib.sh"

# --- 3 agents converge
for i in 1 2 3; do start_agent $i --profile fast --gpus 8 --join "127.0.0.1:$(gport 1)"; done
t0=$(now_ms)
if wait_until 10 all_alive 1 2 3; then pass "3 agents converge ($(( $(now_ms) - t0 )) ms)"; else fail "3 agents converge"; fi
check "health is ok on a joined agent" quiet ctl 2 health

# --- 17 more: 20 converge
for i in $(seq 4 20); do start_agent $i --profile fast --join "127.0.0.1:$(gport 1)"; done
t0=$(now_ms)
if wait_until 30 all_alive $(seq 1 20); then pass "20 agents converge ($(( $(now_ms) - t0 )) ms)"; else fail "20 agents converge"; fi

# --- SIGKILL one: every survivor lists it failed.
# Bound: first probe + failed probe (~2 x 200 ms), suspicion at N=20:
# min = 3 x log10(20) x 200 ms = 0.78 s, max = 3 x min = 2.3 s, plus gossip;
# 8 s leaves room for a loaded 2-core machine.
kill_agent 20 9
t0=$(now_ms)
if wait_until 8 seen_by 20 failed 19 $(seq 1 19); then
	pass "SIGKILL seen as failed by all 19 survivors ($(( $(now_ms) - t0 )) ms)"
else
	fail "SIGKILL seen as failed" "$(count_seeing 20 failed $(seq 1 19))/19"
fi

# --- SIGSTOP one past the suspicion timeout: failed; SIGCONT: it refutes.
kill_agent 19 STOP
if wait_until 8 seen_by 19 failed 18 $(seq 1 18); then pass "SIGSTOPped agent is failed"; else fail "SIGSTOPped agent is failed"; fi
kill_agent 19 CONT
t0=$(now_ms)
if wait_until 10 seen_by 19 alive 18 $(seq 1 18); then
	pass "SIGCONT: it refutes and is alive again ($(( $(now_ms) - t0 )) ms)"
else
	fail "SIGCONT: alive again" "$(count_seeing 19 alive $(seq 1 18))/18"
fi
# n20 was killed before the pause; nobody else may be failed in n19's log.
check "the resumed agent accuses no one" bash -c "! grep 'member n[0-9]* failed at' '$T_DIR/n19.log' | grep -v 'member n20 '"

# --- restart the killed agent with the same name and data dir
gen_before=$(cat "$T_DIR/n20/generation")
start_agent 20 --profile fast --join "127.0.0.1:$(gport 1)"
t0=$(now_ms)
if wait_until 10 seen_by 20 alive 19 $(seq 1 19); then
	pass "restarted agent is alive everywhere ($(( $(now_ms) - t0 )) ms)"
else
	fail "restarted agent alive again" "$(count_seeing 20 alive $(seq 1 19))/19"
fi
check "its generation went up" [ "$(cat "$T_DIR/n20/generation")" -gt "$gen_before" ]

# --- graceful leave: left, not failed; the process exits by itself
ctl 18 leave >/dev/null
if wait_until 5 bash -c "! kill -0 ${PIDS[18]} 2>/dev/null"; then pass "leave: skeind exits"; else fail "leave: skeind exits"; fi
if wait_until 5 seen_by 18 left 19 $(seq 1 17) 19 20; then pass "leave shows left everywhere"; else
	fail "leave shows left" "$(count_seeing 18 left $(seq 1 17) 19 20)/19"; fi
check "nobody lists the leaver failed" [ "$(count_seeing 18 failed $(seq 1 17) 19 20)" = 0 ]

# --- SIGTERM is a graceful leave too
kill_agent 17 TERM
if wait_until 5 seen_by 17 left 18 $(seq 1 16) 19 20; then pass "SIGTERM leaves gracefully"; else fail "SIGTERM leaves gracefully"; fi

# --- JSON shape and filters
json=$(ctl 1 members --format json)
check "members JSON has the contract's keys" bash -c "echo '$json' | grep -q '\"members\":\[{\"name\":\"n' && \
	echo '$json' | grep -q '\"generation\":' && echo '$json' | grep -q '\"incarnation\":' && echo '$json' | grep -q '\"gpus\":8'"
check "--status filter" bash -c "[ \$('$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members --status left | tail -n +2 | wc -l) = 2 ]"
check "--tag filter with no match prints the header only" bash -c "[ \$('$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members --tag zone=x | wc -l) = 1 ]"

# --- seeds by name: looked up in the background (getaddrinfo_a), so a name that
# does not resolve neither blocks the agent nor stops its other seeds
start_agent 41 --profile fast
start_agent 42 --profile fast --join "localhost:$(gport 41)"
start_agent 43 --profile fast --join "no-such-host.invalid:$(gport 41)" --join "127.0.0.1:$(gport 41)"
check "join through a name (localhost)" wait_until 10 all_alive 41 42
check "an unresolvable seed beside a numeric one: joined" wait_until 10 all_alive 41 42 43
check "the agent answers while its lookup fails" quiet ctl 43 info
finish
