#!/usr/bin/env bash
# tests/sim/coord.sh: `skein-sim coord` (issue 25, item 5) at a size make
# test can afford (100 agents x 8 engines, 10 updates with an engine exit,
# node failures and the head's failover): the last line's format, the same
# seed giving the same line but for the measured CPU figures, every update
# final, the log bytes within the issue's budget, the head's messages
# O(nodes) (the fan-in by node), bad flags one line and exit 2.  Prints "# N passed, M failed" for tests/run.sh.
set -u
SIM=${SKEIN_SIM:-${SKEIN_BIN:-bin}/skein-sim}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }

a=$("$SIM" coord --agents 100 --engines-per-agent 8 --updates 10 --seed 5) || bad run "exit $?"
b=$("$SIM" coord --agents 100 --engines-per-agent 8 --updates 10 --seed 5)
last=$(tail -1 <<<"$a")
re='^coord: engines=800 updates=10 raft_bytes_per_update=[0-9]+ head_cpu_ms_per_update=[0-9.]+ idle_head_cpu_pct=[0-9.]+ head_msgs_per_update=[0-9]+ commit_ms_p99=[0-9.]+$'
[[ "$last" =~ $re ]] && ok "last line: $last" || bad "last line" "$last"
strip() { sed -E 's/head_cpu_ms_per_update=[0-9.]+|idle_head_cpu_pct=[0-9.]+|head cpu [0-9.]+ ms//g'; }
[ "$(strip <<<"$a")" = "$(strip <<<"$b")" ] && ok "same seed, same run (but the CPU figures)" ||
	bad "same seed" "$(diff <(strip <<<"$a") <(strip <<<"$b") | head -5)"
c=$("$SIM" coord --agents 100 --engines-per-agent 8 --updates 10 --seed 6 | tail -1)
[ "$(strip <<<"$c")" != "$(strip <<<"$last")" ] && ok "another seed, another run" || bad "another seed" "$c"
n=$(grep -c '^update v[0-9]*: \(committed\|aborted\)' <<<"$a")
[ "$n" = 10 ] && ok "10 updates final" || bad "updates final" "$n"
grep -q ' [1-9][0-9]* dropped' <<<"$a" && ok "faults dropped participants" || bad "faults" "none dropped"
# the fan-in by node (item 2): the head's messages grow with nodes, not
# engines (per engine, 3 each: 2,400 here; per node about 5)
msgs=$(sed -nE 's/.* head_msgs_per_update=([0-9]+) .*/\1/p' <<<"$last")
[ -n "$msgs" ] && [ "$msgs" -le 600 ] && ok "messages at the head per update O(nodes) ($msgs <= 6 x 100)" || bad "messages" "$msgs"
max=$(sed -nE 's/^raft bytes per update: median ([0-9]+), max ([0-9]+).*/\2/p' <<<"$a")
[ -n "$max" ] && [ "$max" -le 16384 ] && ok "log bytes per update at most 16 KB ($max)" || bad "log bytes" "$max"
for args in "--agents" "--agents 2" "--engines-per-agent 99" "--bogus 1" "--agents 2000 --engines-per-agent 8"; do
	err=$("$SIM" coord $args 2>&1 >/dev/null); rc=$?
	if [ "$rc" = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && [[ "$err" == skein-sim\ coord:* ]]; then
		ok "bad flag '$args' -> exit 2, one line"
	else
		bad "bad flag '$args'" "rc $rc, stderr: $err"
	fi
done
echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
