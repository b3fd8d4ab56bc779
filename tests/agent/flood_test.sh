#!/usr/bin/env bash
# Floods of a seed's TCP endpoints (issue 11): during each flood the seed
# must answer `skeinctl members` within 1 s, keep VmRSS (and VmHWM at the
# end) below 64 MB, and let a NEW agent join the cluster through it.
#
#   gossip: 300 idle connections (reopened when shed) from 50 addresses,
#   then from one; 20 MiB streams, 8 at once; claims of 64 MiB; streams and
#   slow claims just under the 8 MiB cap (the largest legitimate stream),
#   which the byte budget must absorb.
#   control (agent/agent_wire.c): claims of 64 MiB frames, 2,000 idle
#   connections (FLOOD_CONTROL=0 leaves them out).
#
# The seed runs with 1,024 fds (prlimit), like a default node, and a cluster
# key.  Figures (latency, RSS, join time, the seed's CPU) are printed per
# flood; SKEIN_BIN=<older build> prints them for an older agent.
. "$(dirname "$0")/lib.sh"

FLOOD=${SKEIN_FLOOD:-$ROOT/build/release/tests/skein_flood}
[ -x "$FLOOD" ] || skip_all "no $FLOOD (make builds it)"
command -v prlimit >/dev/null || skip_all "no prlimit (util-linux)"
LIMIT_KB=62500   # 64 MB
# AddressSanitizer's shadow and quarantine make RSS meaningless: not checked
ASAN=0; ldd "$SKEIND" 2>/dev/null | grep -q libasan && ASAN=1
HOLD_MS=${FLOOD_HOLD_MS:-6000}

"$SKEINCTL" keygen >"$T_DIR/key"
export SKEIN_KEY_FILE="$T_DIR/key"
# the seed through prlimit, which execs skeind: PIDS[1] is skeind's pid
printf '#!/bin/sh\nexec prlimit --nofile=1024:1024 "%s" "$@"\n' "$SKEIND" >"$T_DIR/skeind-1024"
chmod +x "$T_DIR/skeind-1024"
SKEIND="$T_DIR/skeind-1024" start_agent 1 --profile fast --key-file "$T_DIR/key"
start_agent 2 --profile fast --key-file "$T_DIR/key" --join "127.0.0.1:$(gport 1)"
wait_until 10 all_alive 1 2 || { fail "2 agents converge"; finish; }
SEED=${PIDS[1]}

kb_of() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$SEED/status"; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$SEED/stat"; }
counter() { local v; v=$(ctl 1 info --format json | grep -o "\"$1\":[0-9]*" | cut -d: -f2); echo "${v:-0}"; }
# counters as they were when the current flood started, and what they grew by
declare -A BASE=()
snapshot() {
	local kv
	BASE=()
	for kv in $(ctl 1 info --format json | grep -o '"[a-z_]*":[0-9]*' | tr -d '"'); do BASE[${kv%%:*}]=${kv#*:}; done
}
grew() { # N COUNTER...: the counters together grew by N or more
	local want=$1 s=0 c; shift
	for c in "$@"; do s=$((s + $(counter "$c") - ${BASE[$c]:-0})); done
	[ "$s" -ge "$want" ]
}

# One sample: how long `members` took, the seed's RSS and open gossip
# connections; true once the new agent NEW is alive in the seed's view and
# the seed in NEW's.
MAX_MS=0; MAX_RSS=0; SAMPLES=0; SLOW=0; MAX_OPEN=0; MAX_ONE=0
sample() {
	local t0 t1 out rss open info
	t0=$(now_ms)
	out=$(ctl 1 members 2>/dev/null)
	t1=$(now_ms)
	SAMPLES=$((SAMPLES + 1))
	[ -n "$out" ] && [ $((t1 - t0)) -gt "$MAX_MS" ] && MAX_MS=$((t1 - t0))
	[ -z "$out" ] && SLOW=$((SLOW + 1))   # no answer within ctl's 2 s
	rss=$(kb_of VmRSS)
	[ "${rss:-0}" -gt "$MAX_RSS" ] && MAX_RSS=$rss
	info=$(ctl 1 info --format json 2>/dev/null)
	open=$(printf '%s' "$info" | grep -o '"tcp_in_open":[0-9]*' | cut -d: -f2)
	[ "${open:-0}" -gt "$MAX_OPEN" ] && MAX_OPEN=$open
	open=$(printf '%s' "$info" | grep -o '"tcp_in_open_one_source":[0-9]*' | cut -d: -f2)
	[ "${open:-0}" -gt "$MAX_ONE" ] && MAX_ONE=$open
	printf '%s\n' "$out" | grep -q "^n$NEW .* alive" &&
		ctl "$NEW" members 2>/dev/null | grep -q '^n1 .* alive'
}

# flood_case NAME NEW HOLD_CHECK FLOOD-ARGS...: HOLD_CHECK is a command that
# is true once the flood has taken hold (seen in the seed's counters).
NEW=10
flood_case() {
	local name=$1 held=$2; shift 2
	NEW=$((NEW + 1)); MAX_MS=0; MAX_RSS=0; SAMPLES=0; SLOW=0; MAX_OPEN=0; MAX_ONE=0
	# the last flood's stragglers (handshakes the kernel completes late) first
	wait_until 5 no_inbound
	local c0 t0 fp joined=0 join_ms=0 hwm
	snapshot
	c0=$(cpu_ticks); t0=$(now_ms)
	"$FLOOD" "$@" --hold-ms "$HOLD_MS" >"$T_DIR/flood-$NEW.out" 2>&1 &
	fp=$!
	wait_until 4 $held || echo "  (the flood did not show in the counters within 4 s)"
	start_agent "$NEW" --profile fast --key-file "$T_DIR/key" --join "127.0.0.1:$(gport 1)"
	local j0; j0=$(now_ms)
	while kill -0 "$fp" 2>/dev/null; do
		if sample && [ "$joined" = 0 ]; then joined=1; join_ms=$(($(now_ms) - j0)); fi
		sleep 0.1
	done
	# the flood was shorter than the join: keep trying for a bounded while
	[ "$joined" = 0 ] && wait_until 5 sample && { joined=2; join_ms=$(($(now_ms) - j0)); }
	wait "$fp"
	hwm=$(kb_of VmHWM)
	local cpu=$(( ($(cpu_ticks) - c0) * 1000 / $(getconf CLK_TCK) * 100 / ($(now_ms) - t0 + 1) ))
	echo "  flood: $(cat "$T_DIR/flood-$NEW.out")"
	CLOSED=$(grep -o '[0-9]* closed by the peer' "$T_DIR/flood-$NEW.out" | cut -d' ' -f1)
	echo "  seed: members max ${MAX_MS} ms over $SAMPLES samples ($SLOW unanswered), VmRSS max ${MAX_RSS} kB," \
		"VmHWM ${hwm} kB, CPU ${cpu}% of a core, at most $MAX_OPEN inbound gossip connections open ($MAX_ONE from one address); join ${join_ms} ms$([ "$joined" = 2 ] && echo ' (after the flood)')"
	check "$name: members answered within 1 s (max $MAX_MS ms, $SLOW unanswered)" answered_fast
	[ "$ASAN" = 0 ] && check "$name: VmRSS below 64 MB (max $MAX_RSS kB)" [ "$MAX_RSS" -lt "$LIMIT_KB" ]
	check "$name: a new agent joined through the seed during the flood (${join_ms} ms)" [ "$joined" = 1 ]
	[ "$ASAN" = 0 ] && check "$name: VmHWM below 64 MB ($hwm kB)" [ "${hwm:-$LIMIT_KB}" -lt "$LIMIT_KB" ]
	kill_agent "$NEW"
}

no_inbound() { [ "$(counter tcp_in_open)" = 0 ]; }
answered_fast() { [ "$SLOW" = 0 ] && [ "$MAX_MS" -lt 1000 ] && [ "$SAMPLES" -gt 0 ]; }
G=127.0.0.1:$(gport 1)

# every connection the seed closed must be counted under one of these
REASONS="tcp_in_shed_idle tcp_in_shed_busy tcp_in_dropped_budget
	tcp_in_first_byte_timeouts tcp_in_idle_timeouts tcp_timeouts dropped_oversize dropped_stream_type dropped_auth"
all_counted() { check "$1: the $CLOSED connections the seed closed are counted by reason" grew "$CLOSED" $REASONS; }

# from 50 addresses (6 each, under the per-source cap): the total cap sheds
flood_case "300 idle gossip connections from 50 addresses" "grew 100 tcp_in_open" \
	idle "$G" 300 --reopen --src 127.0.1.1 --srcs 50
all_counted "idle"
check "idle: quiet connections shed for newcomers" grew 100 tcp_in_shed_idle
check "idle: at most 128 inbound connections open (the cap at 1,024 fds; $MAX_OPEN seen)" [ "$MAX_OPEN" -le 128 ]
# from the new agent's own address: the per-source cap sheds
flood_case "300 idle gossip connections from 127.0.0.1" "grew 16 tcp_in_open" idle "$G" 300 --reopen
all_counted "idle, one address"
one_source_capped() { [ "$MAX_ONE" -le 16 ] && [ "$MAX_ONE" -ge 8 ]; }
check "idle, one address: 8 to 16 connections from it, the per-source cap ($MAX_ONE seen)" one_source_capped

flood_case "20 MiB gossip streams, 4 at once" "grew 4 dropped_oversize" stream "$G" 4 20M --reopen --reopen-ms 200
all_counted "20 MiB streams"
check "20 MiB streams: refused at their header as oversize" grew "$CLOSED" dropped_oversize

flood_case "64 MiB gossip claims, 50 connections" "grew 50 dropped_oversize" claim "$G" 50 64M --rate 64K --reopen
all_counted "64 MiB claims"
check "64 MiB claims: refused at their header as oversize" grew 50 dropped_oversize

# under the cap: the junk is buffered (it looks sealed), so the byte budget
# and the timeouts are what bound it
flood_case "7 MiB gossip streams (under the cap), 8 at once" "grew 4000000 bytes_received" \
	stream "$G" 8 7M --reopen --reopen-ms 500
all_counted "7 MiB streams"

# 40 x 512 KiB/s from 10 addresses (under the caps): the byte budget is spent in 1 s
flood_case "8 MiB gossip claims at 512 KiB/s, 40 connections" "grew 1 tcp_in_dropped_budget" \
	claim "$G" 40 8M --rate 512K --reopen --reopen-ms 200 --src 127.0.2.1 --srcs 10
all_counted "8 MiB slow claims"
check "8 MiB slow claims: over the byte budget, the largest dropped" grew 10 tcp_in_dropped_budget

if [ "${FLOOD_CONTROL:-1}" = 1 ]; then
	R=127.0.0.1:$(rport 1)
	flood_case "64 MiB control frame claims, 20 connections" "grew 20 control_oversize" \
		claim "$R" 20 64M --proto control --rate 1M --reopen
	flood_case "2,000 idle control connections" "grew 1000 control_shed_idle" idle "$R" 2000 --proto control
	flood_case "8 MiB control frames at 1 MiB/s, 40 connections" "grew 1 control_shed_idle" \
		claim "$R" 40 7M --proto control --rate 1M --reopen --reopen-ms 200
fi

check "the seed is still running" kill -0 "$SEED"
check "the first two agents still see each other" all_alive 1 2
finish
