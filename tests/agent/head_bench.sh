#!/usr/bin/env bash
# Benchmark of the head election, fast profile, loopback:
#   failover: SIGKILL of the head -> a write committed through a plain agent
#             (it forwards to whichever head it knows), over KILLS kills, with
#             3 and 5 voters; the killed voter restarts from its data dir and
#             is a follower again before the next kill;
#   handover: skeinctl head transfer, and SIGTERM of the head (which hands
#             over before it leaves), each until a write through the plain
#             agent commits, beside the SIGKILL failover of the same run;
#   commit:   sequential writes (skeinctl state bench), each answered once a
#             majority of voters has it on disk (fsync), at the head and
#             through a plain agent.
#   HEAD_BENCH_KILLS=20 HEAD_BENCH_VOTERS="3 5" tests/agent/head_bench.sh
. "$(dirname "$0")/lib.sh"

KILLS=${HEAD_BENCH_KILLS:-20}
VOTERS=${HEAD_BENCH_VOTERS:-"3 5"}
C=9   # the plain agent writes go through
ROWS2=()

head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%d %d %d", v[int((NR + 1) / 2)], v[NR], v[1] }'; }

echo "## Head election (fast profile, loopback, $KILLS kills per row)"
echo
echo "| voters | failover median (ms) | max (ms) | min (ms) | target | commit p50 at head (ms) | p99 | through a plain agent p50 | p99 |"
echo "|---|---|---|---|---|---|---|---|---|"
for n in $VOTERS; do
	V="--profile fast --head-eligible --bootstrap-expect $n"
	for i in $(seq 1 "$n"); do start_agent "$i" $V --log-level warn --join "127.0.0.1:$(gport 1)"; done
	start_agent $C --profile fast --log-level warn --join "127.0.0.1:$(gport 1)"
	wait_until 20 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport $C) state put warm up >/dev/null 2>&1"
	H=$(head_of $C); HI=${H#n}
	read -r _ _ hp50 _ hp99 _ < <(ctl "$HI" state bench 500 | awk '{ print $3, $4, $6, $7, $8, $9 }')
	read -r _ _ cp50 _ cp99 _ < <(ctl $C state bench 500 | awk '{ print $3, $4, $6, $7, $8, $9 }')
	times=()
	for k in $(seq 1 "$KILLS"); do
		H=$(head_of $C); HI=${H#n}
		[ -n "$HI" ] || { wait_until 10 bash -c "[ -n \"\$('$SKEINCTL' --rpc 127.0.0.1:$(rport $C) head | awk '\$1 == \"head:\" && \$2 != \"(none)\"')\" ]"; H=$(head_of $C); HI=${H#n}; }
		kill_agent "$HI" 9
		t0=$(now_ms)
		until ctl $C state put "fail$k" x >/dev/null 2>&1; do [ $(( $(now_ms) - t0 )) -gt 20000 ] && break; done
		times+=($(( $(now_ms) - t0 )))
		start_agent "$HI" $V --log-level warn --join "127.0.0.1:$(gport $C)"
		# back as a follower with recent contact before the next kill
		wait_until 20 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport $C) head | awk -v w=$H '\$1 == w && \$2 == \"follower\" && \$3 >= 0 && \$3 < 150 { f = 1 } END { exit !f }'"
	done
	read -r med max min < <(printf '%s\n' "${times[@]}" | stats)
	echo "| $n | $med | $max | $min | median <= 1500, max <= 3000 | $hp50 | $hp99 | $cp50 | $cp99 |"
	ROWS2+=("$n $med $max")
	# handovers: skeinctl head transfer, and a head stopped with SIGTERM (it
	# hands over before it leaves), each until a write through C commits
	hand=(); term=()
	for k in $(seq 1 "$KILLS"); do
		t0=$(now_ms)
		ctl $C head transfer >/dev/null 2>&1
		until ctl $C state put "hand$k" x >/dev/null 2>&1; do [ $(( $(now_ms) - t0 )) -gt 20000 ] && break; done
		hand+=($(( $(now_ms) - t0 )))
		wait_until 10 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport $C) head | awk '\$1 == \"head:\" && \$2 != \"(none)\" { f = 1 } END { exit !f }'"
	done
	for k in $(seq 1 "$KILLS"); do
		H=$(head_of $C); HI=${H#n}
		t0=$(now_ms)
		kill -TERM "${PIDS[$HI]}"
		until ctl $C state put "term$k" x >/dev/null 2>&1; do [ $(( $(now_ms) - t0 )) -gt 20000 ] && break; done
		term+=($(( $(now_ms) - t0 )))
		wait "${PIDS[$HI]}" 2>/dev/null
		start_agent "$HI" $V --log-level warn --join "127.0.0.1:$(gport $C)"
		wait_until 20 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport $C) head | awk -v w=$H '\$1 == w && \$2 == \"follower\" && \$3 >= 0 && \$3 < 150 { f = 1 } END { exit !f }'"
	done
	read -r hmed hmax _ < <(printf '%s\n' "${hand[@]}" | stats)
	read -r tmed tmax _ < <(printf '%s\n' "${term[@]}" | stats)
	ROWS2[-1]="${ROWS2[-1]} $hmed $hmax $tmed $tmax"
	echo "  (handovers: ${hand[*]}; SIGTERM: ${term[*]})" >&2
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	PIDS=()
	rm -rf "$T_DIR"/n*
	echo "  (kills: ${times[*]})" >&2
done
echo
echo "commit target: median under 5 ms on loopback"
echo
echo "| voters | SIGKILL of the head: failover median / max (ms) | skeinctl head transfer: median / max | SIGTERM of the head (hands over, then leaves): median / max |"
echo "|---|---|---|---|"
for r in "${ROWS2[@]}"; do
	set -- $r
	echo "| $1 | $2 / $3 | $4 / $5 | $6 / $7 |"
done
echo "(each: until a write sent to a plain agent commits)"
