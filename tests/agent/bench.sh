#!/usr/bin/env bash
# Benchmark: skeind (fast and lan profiles) beside serf (Debian's package,
# LAN profile) in the same run, the same N agents on 127.0.0.1.
#   converge: first agent started -> every agent lists all N alive
#   detect:   SIGKILL of one agent -> every survivor lists it failed
# Every survivor is watched by its own polling loop (its CLI every 20 ms),
# the same for both systems; the CLIs' own latency is printed so the
# resolution is visible.  Then a soak: 20 skein agents (fast) with 10% of
# gossip datagrams dropped in and out (skeinctl debug drop) for
# BENCH_SOAK_S seconds (default 300), counting false failures; and the CPU
# and memory of an idle agent.
#   BENCH_NS="5 20" BENCH_SOAK_S=300 BENCH_ROUNDS=3 tests/agent/bench.sh
. "$(dirname "$0")/lib.sh"

NS=${BENCH_NS:-"5 20"}
SOAK_S=${BENCH_SOAK_S:-300}
ROUNDS=${BENCH_ROUNDS:-3}
SERF=$(command -v serf || true)
[ -n "$SERF" ] || { tools/deps.sh install >/dev/null 2>&1; SERF=$(command -v serf || true); }

declare -A SPID=()
bench_cleanup() {
	for p in "${SPID[@]}"; do kill -9 "$p" 2>/dev/null; done
	pkill -P $$ 2>/dev/null
	cleanup
}
trap bench_cleanup EXIT

# --- system adapters: start I N, list I (prints "name status" lines), stop_all
sk_start() { # I PROFILE
	mkdir -p "$T_DIR/n$1"
	"$SKEIND" --insecure --name "n$1" --bind "127.0.0.1:$(gport "$1")" --rpc "127.0.0.1:$(rport "$1")" \
		--profile "$2" --log-level warn --join "127.0.0.1:$(gport 1)" >>"$T_DIR/n$1.log" 2>&1 &
	SPID[$1]=$!
}
sk_list() { "$SKEINCTL" --rpc "127.0.0.1:$(rport "$1")" --timeout 1000 members 2>/dev/null | awk 'NR > 1 { print $1, $3 }'; }
serf_start() { # I
	local j=()
	[ "$1" != 1 ] && j=(-join "127.0.0.1:$(gport 1)")
	"$SERF" agent -node "n$1" -bind "127.0.0.1:$(gport "$1")" -rpc-addr "127.0.0.1:$(rport "$1")" \
		-log-level warn "${j[@]}" >>"$T_DIR/serf$1.log" 2>&1 &
	SPID[$1]=$!
}
serf_list() { "$SERF" members -rpc-addr "127.0.0.1:$(rport "$1")" 2>/dev/null | awk '{ print $1, $3 }'; }
stop_all() {
	for i in "${!SPID[@]}"; do kill -9 "${SPID[$i]}" 2>/dev/null; wait "${SPID[$i]}" 2>/dev/null; done
	SPID=()
	rm -rf "$T_DIR"/n* "$T_DIR"/serf*
}

# watch LIST_FN I WHO STATUS OUTFILE: poll until I sees WHO in STATUS, write the ms
watch() {
	local fn=$1 i=$2 who=$3 st=$4 out=$5 end=$(( $(now_ms) + 60000 ))
	while [ "$(now_ms)" -lt $end ]; do
		if $fn "$i" | grep -q "^$who $st\$"; then now_ms >"$out"; return; fi
		sleep 0.02
	done
}
watch_all_alive() { # LIST_FN I N OUTFILE
	local fn=$1 i=$2 n=$3 out=$4 end=$(( $(now_ms) + 60000 ))
	while [ "$(now_ms)" -lt $end ]; do
		[ "$($fn "$i" | grep -c ' alive$')" -ge "$n" ] && { now_ms >"$out"; return; }
		sleep 0.02
	done
}
latest() { local m=0 f v; for f in "$@"; do [ -s "$f" ] || { echo -1; return; }; v=$(cat "$f"); [ "$v" -gt $m ] && m=$v; done; echo $m; }

# one round: prints "converge_ms detect_ms" (-1 when it did not happen in 60 s).
# The watchers run at nice 19: the agents under test get the CPU first, so
# the polling (a CLI process per check) delays what it measures as little as
# possible, for both systems alike.
round() { # SYSTEM N
	local sys=$1 n=$2 i t0 tk
	local start=sk_start list=sk_list arg=""
	case $sys in
		skein-fast) arg=fast ;;
		skein-lan) arg=lan ;;
		serf-lan) start=serf_start list=serf_list ;;
	esac
	rm -f "$T_DIR"/w.*
	local w=()
	t0=$(now_ms)
	for i in $(seq 1 "$n"); do $start "$i" $arg; done
	for i in $(seq 1 "$n"); do nice -n 19 bash -c "$(declare -f now_ms sk_list serf_list watch_all_alive rport); \
		SKEINCTL='$SKEINCTL' SERF='$SERF' PORT_BASE=$PORT_BASE watch_all_alive $list $i $n '$T_DIR/w.c$i'" & w+=($!); done
	wait "${w[@]}"
	local conv; conv=$(latest $(for i in $(seq 1 "$n"); do echo "$T_DIR/w.c$i"; done))
	[ "$conv" -ge 0 ] && conv=$((conv - t0))
	sleep 2  # settle: let the first push-pulls and probes pass
	w=()
	for i in $(seq 1 $((n - 1))); do nice -n 19 bash -c "$(declare -f now_ms sk_list serf_list watch rport); \
		SKEINCTL='$SKEINCTL' SERF='$SERF' PORT_BASE=$PORT_BASE watch $list $i n$n failed '$T_DIR/w.d$i'" & w+=($!); done
	sleep 0.3
	tk=$(now_ms)
	kill -9 "${SPID[$n]}"
	wait "${w[@]}"
	local det; det=$(latest $(for i in $(seq 1 $((n - 1))); do echo "$T_DIR/w.d$i"; done))
	[ "$det" -ge 0 ] && det=$((det - tk))
	stop_all
	echo "$conv $det"
}

# median of the valid (>= 0) values; "n/a" when there is none
median() { awk '$1 >= 0' | sort -n | awk '{ v[NR] = $1 } END { if (!NR) print "n/a"; else print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

echo "## Membership: skein beside serf ($(serf version 2>/dev/null | head -1)), loopback, median of $ROUNDS rounds"
echo
# CLI latency, for the resolution of the polling
sk_start 1 fast; wait_until 5 bash -c "[ -n \"\$('$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members 2>/dev/null)\" ]"
t0=$(now_ms); for k in 1 2 3 4 5 6 7 8 9 10; do sk_list 1 >/dev/null; done; sk_cli=$(( ($(now_ms) - t0) / 10 ))
stop_all
if [ -n "$SERF" ]; then
	serf_start 1; wait_until 5 bash -c "'$SERF' members -rpc-addr 127.0.0.1:$(rport 1) >/dev/null 2>&1"
	t0=$(now_ms); for k in 1 2 3 4 5 6 7 8 9 10; do serf_list 1 >/dev/null; done; serf_cli=$(( ($(now_ms) - t0) / 10 ))
	stop_all
else
	serf_cli="n/a"
fi
echo "CLI latency per call: skeinctl ${sk_cli} ms, serf members ${serf_cli} ms"
echo
echo "| N | system | converge (ms) | kill -> all survivors know (ms) | detect vs serf |"
echo "|---|---|---|---|---|"
for n in $NS; do
	declare -A DET=()
	for sys in serf-lan skein-lan skein-fast; do
		if [ "$sys" = serf-lan ] && [ -z "$SERF" ]; then echo "| $n | serf-lan | (serf not installed) | | |"; continue; fi
		cs=(); ds=()
		for r in $(seq 1 "$ROUNDS"); do
			read -r c d < <(round "$sys" "$n")
			cs+=("$c"); ds+=("$d")
		done
		cm=$(printf '%s\n' "${cs[@]}" | median); dm=$(printf '%s\n' "${ds[@]}" | median)
		DET[$sys]=$dm
		ratio=""
		[ -n "${DET[serf-lan]:-}" ] && [ "${DET[serf-lan]}" != n/a ] && [ "$dm" != n/a ] && ratio=$(awk -v a="$dm" -v b="${DET[serf-lan]}" 'BEGIN { printf "%.3fx", a / b }')
		echo "| $n | $sys | $cm (${cs[*]}) | $dm (${ds[*]}) | $ratio |"
	done
	unset DET
done
echo

# --- idle agent: CPU and memory (20 agents, fast and lan, 30 s)
for prof in fast lan; do
	for i in $(seq 1 20); do sk_start "$i" "$prof"; done
	wait_until 20 bash -c "[ \$('$SKEINCTL' --rpc 127.0.0.1:$(rport 20) members 2>/dev/null | grep -c alive) -ge 20 ]"
	sleep 2
	p=${SPID[10]}
	t1=$(awk '{ print $14 + $15 }' "/proc/$p/stat"); s1=$(now_ms)
	sleep 30
	t2=$(awk '{ print $14 + $15 }' "/proc/$p/stat"); s2=$(now_ms)
	rss=$(awk '/VmRSS/ { print $2 }' "/proc/$p/status")
	hz=$(getconf CLK_TCK)
	cpu=$(awk -v t="$((t2 - t1))" -v hz="$hz" -v ms="$((s2 - s1))" 'BEGIN { printf "%.2f", 100 * t / hz / (ms / 1000) }')
	echo "idle agent in a 20-agent cluster, $prof profile: CPU ${cpu}% of one core, RSS $((rss / 1024)) MB ($rss kB) (targets: < 1%, < 20 MB)"
	stop_all
done
echo

# --- soak: 20 agents, 10% drop in and out, false failures
for i in $(seq 1 20); do
	mkdir -p "$T_DIR/n$i"
	"$SKEIND" --insecure --name "n$i" --bind "127.0.0.1:$(gport "$i")" --rpc "127.0.0.1:$(rport "$i")" --profile fast \
		--enable-debug --join "127.0.0.1:$(gport 1)" >>"$T_DIR/n$i.log" 2>&1 &
	SPID[$i]=$!
done
wait_until 20 bash -c "[ \$('$SKEINCTL' --rpc 127.0.0.1:$(rport 20) members 2>/dev/null | grep -c alive) -ge 20 ]"
for i in $(seq 1 20); do "$SKEINCTL" --rpc "127.0.0.1:$(rport "$i")" debug drop --in 0.1 --out 0.1 >/dev/null; done
start_soak=$(now_ms)
sleep "$SOAK_S"
ff=$(cat "$T_DIR"/n*.log | grep -c 'failed at' || true)
sus=$(cat "$T_DIR"/n*.log | grep -c 'suspect at' || true)
alive=$("$SKEINCTL" --rpc "127.0.0.1:$(rport 1)" members | grep -c alive)
echo "soak: 20 agents (fast), 10% of datagrams dropped in and 10% out, $(( ($(now_ms) - start_soak) / 1000 )) s:" \
	"false failures $ff (target 0), suspicions raised and refuted $sus, alive at the end $alive/20"
stop_all
