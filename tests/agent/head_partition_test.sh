#!/usr/bin/env bash
# The head cut off with a minority: 3 voters and 2 plain agents on five
# network-namespace hosts.  The head's host is cut from all others: it must
# step down (before the majority elects a new head, by the logs' clocks), the
# majority elects one and takes writes, a write at the minority fails, and
# after the heal there is one head and no committed write is lost.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns.sh"

netns_hosts 5
for i in 1 2 3; do hstart $i --profile fast --head-eligible --bootstrap-expect 3 --join 10.231.0.1:7946; done
for i in 4 5; do hstart $i --profile fast --join 10.231.0.1:7946; done

head_of() { hctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
agree() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ] || return 1
	for i in "$@"; do [ "$(head_of "$i")" = "$h" ] || return 1; done; }
if wait_until 20 agree 1 2 3 4 5; then pass "one head on five hosts"; else fail "one head on five hosts"; fi
H=$(head_of 4); HI=${H#h}
for k in $(seq 1 10); do hctl 4 state put "k$k" "v$k" >/dev/null || fail "put k$k"; done

others=$(for i in 1 2 3 4 5; do [ "$i" != "$HI" ] && echo "$i"; done | tr '\n' ' ')
net_cut "$HI" "$others"
t_cut=$(now_ms)
not_head_at() { [ "$(head_of "$1")" != "h$1" ]; }
new_head() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ] && [ "$h" != "$H" ]; }
first=$(echo $others | awk '{ print $1 }')
if wait_until 10 not_head_at "$HI"; then pass "the minority head steps down ($(( $(now_ms) - t_cut )) ms)"; else
	fail "the minority head steps down"; fi
if wait_until 15 new_head "$first"; then pass "the majority elects a new head: $(head_of "$first")"; else
	fail "the majority elects a new head"; fi
# by the logs (one clock: one machine): the step-down came before the new head
t_down=$(grep -h 'stepped down' "$T_DIR/h$HI.log" | head -1 | cut -c1-23)
t_new=$(grep -h 'this agent is the head' "$T_DIR"/h[1-3].log | grep -v "^.\{25\}[a-z]* *h$HI " | sort | tail -1 | cut -c1-23)
check "step-down ($t_down) before the new head ($t_new)" bash -c "[ -n '$t_down' ] && [ -n '$t_new' ] && [[ '$t_down' < '$t_new' ]]"
for k in $(seq 11 20); do wait_until 5 quiet hctl "$first" state put "k$k" "v$k" || fail "majority put k$k"; done
out=$(hctl "$HI" state put minority x 2>&1); rc=$?
check "a write at the minority fails ($out)" [ $rc != 0 ]

net_heal "$HI" "$others"
t0=$(now_ms)
if wait_until 30 agree 1 2 3 4 5; then pass "healed: one head everywhere ($(( $(now_ms) - t0 )) ms)"; else fail "healed: one head"; fi
ok=1
for i in 1 2 3; do for k in $(seq 1 20); do
	wait_until 10 bash -c "[ \"\$(ip netns exec $NS_P-h$i '$SKEINCTL' --rpc 127.0.0.1:7373 state get k$k --stale 2>/dev/null)\" = v$k ]" || ok=0
done; done
check "all 20 committed writes on all 3 voters" [ $ok = 1 ]
check "the write tried at the minority was not committed" bash -c "! ip netns exec $NS_P-h4 '$SKEINCTL' --rpc 127.0.0.1:7373 state get minority >/dev/null 2>&1"
check "one head per term (logs)" bash -c "[ -z \"\$(for f in '$T_DIR'/h*.log; do grep -o 'this agent is the head (term [0-9]*)' \$f | sort -u; done | sort | uniq -d)\" ]"
finish
