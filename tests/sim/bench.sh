#!/usr/bin/env bash
# tests/sim/bench.sh: the membership benchmark on the simulator (make bench).
#
# Runs bin/skein-sim and prints four tables, each row: figure, baseline or
# target, ratio.
#   1. simulator speed: simulated node-seconds per wall second, 1,000 and
#      10,000 nodes (10,000 for a short run: see SIM_BIG_SECONDS);
#   2. bytes sent per node per second, after convergence, 100 and 1000 nodes;
#   3. kill until every survivor lists the node failed, against N, beside
#      the models of docs/reference.md, Gossip and serf's measured figures;
#   4. the issue's targets, with pass/MISS.
# Environment: SKEIN_SIM (default bin/skein-sim), SIM_BIG_NODES (10000),
# SIM_BIG_SECONDS (3), BENCH_SEEDS (seeds per small-N row, default 5).
# The model figures (all from docs/reference.md, Gossip, with the profile's numbers):
#   SWIM first detection   1.58 probe periods T (1/(1-1/e)), from the failure
#                          to the end of the probe that finds it
#   memberlist detection   1.58 T + suspicion min (mult x max(1,log10 N) x T:
#                          the confirmations arrive) + serf's dissemination
#   serf dissemination     rounds r with N/(1+(N+1)e^(-0.5 fanout r)) = 0.999 N,
#                          r = ln((N+1)/0.001001) / (0.5 fanout): 1.54 s at
#                          N=100 and 1.84 s at 1000 with 200 ms rounds, as serf
#                          quotes
set -u
SIM=${SKEIN_SIM:-bin/skein-sim}
BIG=${SIM_BIG_NODES:-10000}
BIG_S=${SIM_BIG_SECONDS:-3}
SEEDS=${BENCH_SEEDS:-5}
[ -x "$SIM" ] || { echo "bench: $SIM not built (make)" >&2; exit 1; }

# Fields of skein-sim's one-line JSON, without jq.
get() { grep -o "\"$2\":[^,}]*" <<<"$1" | head -n 1 | cut -d: -f2; }
getd() { grep -o "\"$2\":{[^}]*}" <<<"$1" | grep -o "\"$3\":[^],}]*" | head -n 1 | cut -d: -f2; }
values() { grep -o "\"$2\":{[^}]*}" <<<"$1" | grep -o '"values":\[[^]]*\]' | sed 's/.*\[//; s/\]//; s/,/ /g'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || a == "null" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
row() { printf "  %-52s %16s %14s %7s  %s\n" "$@"; }
run() { "$SIM" "$@" || { echo "bench: skein-sim $* failed" >&2; exit 1; }; }

# p50 / p99 / max of a list of numbers (nearest rank), "null" counted apart.
dist() {
	tr ' ' '\n' <<<"$1" | grep -v '^$' | grep -v null | sort -g | awk '
		{ v[NR] = $1 } END {
			if (NR == 0) { print "- - - 0"; exit }
			i50 = int(0.5 * NR + 0.999999); i99 = int(0.99 * NR + 0.999999)
			printf "%.2f %.2f %.2f %d\n", v[i50], v[i99], v[NR], NR }'
}

# Model figures (seconds); profile numbers come in as arguments.
serf_rounds() { # N fanout loss -> gossip rounds until 99.9% of N know
	awk -v n="$1" -v f="$2" -v l="$3" 'BEGIN { printf "%.2f", log((n + 1) / (1 / 0.999 - 1)) / (0.5 * f * (1 - l)) }'
}
model_detect() { # N T_ms mult gossip_ms fanout -> memberlist formula seconds
	local r; r=$(serf_rounds "$1" "$5" 0)
	awk -v n="$1" -v t="$2" -v m="$3" -v g="$4" -v r="$r" 'BEGIN {
		T = t / 1000; lg = log(n) / log(10); if (lg < 1) lg = 1
		printf "%.2f", 1.58 * T + m * lg * T + r * g / 1000 }'
}
# The profile's numbers, from the binary: T_ms mult gossip_ms fanout.
prof_args() {
	"$SIM" --profile "$1" --config | awk -F= '{ v[$1] = $2 } END {
		print v["probe_interval_ms"], v["suspicion_mult"], v["gossip_interval_ms"], v["gossip_nodes"] }'
}

echo "Simulator: the real membership code on a fake clock and network (tests/sim/)."
echo "Latency 0.5 ms +- 0.2 ms, no loss unless said; kills 1 s after convergence."
echo "Machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start."
echo

# ---- runs shared by several tables
echo "running (about 3-5 minutes on 2 cores) ..." >&2
J1000L=$(run --nodes 1000 --seed 1 --profile lan --duration 120 --kill 5)
J1000F=$(run --nodes 1000 --seed 1 --profile fast --duration 60 --kill 5)
J100L=$(run --nodes 100 --seed 1 --profile lan --duration 120)
J100F=$(run --nodes 100 --seed 1 --profile fast --duration 120)

# Speed is judged on CPU seconds (the machine may be shared); wall beside.
speed_rows() { # label json
	row "$1: node-s per wall s" "$(get "$2" node_s_per_wall_s)" "" "" ""
	row "$1: cpu s (wall s)" "$(get "$2" cpu_s) ($(get "$2" wall_s))" "" "" ""
}
echo "1. Simulator speed (simulated node-seconds per wall second)"
row "run" "figure" "target" "ratio" ""
speed_rows "1000 lan 120 s" "$J1000L"
c=$(get "$J1000L" cpu_s)
row "1000 lan 120 s: cpu s" "$c" "<= 30" "$(ratio "$c" 30)" "$(awk -v w="$c" 'BEGIN { print (w <= 30) ? "pass" : "MISS" }')"
speed_rows "1000 fast 60 s" "$J1000F"
JB=$("$SIM" --nodes "$BIG" --seed 1 --profile lan --duration "$BIG_S" 2>&1)
if grep -q '"wall_s"' <<<"$JB"; then
	speed_rows "$BIG lan, first $BIG_S s ($(get "$JB" live_end) up)" "$JB"
else
	row "$BIG nodes lan, $BIG_S s simulated" "failed" "runs" "" "MISS: $(tail -n 1 <<<"$JB")"
fi
echo

echo "2. Bytes sent per node per second after convergence (UDP + streams)"
echo "   (no published baseline; streams are the push-pull states, N x ~40 B)"
row "run" "B/node/s" "streams part" "" "whole run incl. join"
for p in lan fast; do
	for n in 100 1000; do
		case "$n$p" in 100lan) j=$J100L ;; 100fast) j=$J100F ;; 1000lan) j=$J1000L ;; 1000fast) j=$J1000F ;; esac
		row "$n nodes $p" "$(get "$j" bytes_per_node_s_steady)" "$(get "$j" stream_bytes_per_node_s_steady)" "" \
			"$(get "$j" bytes_per_node_s)"
	done
done
echo

echo "3. Kill until every survivor lists it failed (s), against N"
row "N, profile (kills)" "p50 / p99" "model p50" "ratio" "model"
LAN_RATIOS=""
det_row() { # N profile kills-per-run seeds [json...]
	local n=$1 p=$2 k=$3 seeds=$4 all="" j s
	if [ "$seeds" = reuse ]; then all=$(values "$5" detect_s); else
		for s in $(seq 1 "$seeds"); do
			j=$(run --nodes "$n" --seed "$s" --profile "$p" --duration 60 --kill "$k")
			all="$all $(values "$j" detect_s)"
		done
	fi
	read -r p50 p99 mx cnt <<<"$(dist "$all")"
	local m; m=$(model_detect "$n" $(prof_args "$p"))
	local r; r=$(ratio "$p50" "$m")
	[ "$p" = lan ] && LAN_RATIOS="$LAN_RATIOS $n:$r"
	row "$n $p ($cnt)" "$p50 / $p99" "$m" "$r" "memberlist formula"
}
for p in lan fast; do
	det_row 10 "$p" 1 "$SEEDS"
	det_row 100 "$p" 3 3
	if [ "$p" = lan ]; then det_row 1000 lan 5 reuse "$J1000L"; else det_row 1000 fast 5 reuse "$J1000F"; fi
done
for n in 5 20; do
	all=""
	for s in $(seq 1 "$SEEDS"); do all="$all $(values "$(run --nodes $n --seed $s --duration 60 --kill 1)" detect_s)"; done
	read -r p50 p99 mx cnt <<<"$(dist "$all")"
	base=$([ $n = 5 ] && echo 5.9 || echo 9.2)
	row "$n lan ($cnt)" "$p50 / $p99" "$base" "$(ratio "$p50" "$base")" "serf 0.8.2 measured, docs/reference.md"
done
read -r TL _ GL FL <<<"$(prof_args lan)"
read -r TF _ _ _ <<<"$(prof_args fast)"
row "SWIM: first detection" "" "1.58 T" "" "$(awk -v a="$TL" -v b="$TF" 'BEGIN { printf "%.2f s lan, %.2f s fast", 1.58 * a / 1000, 1.58 * b / 1000 }')"
for n in 100 1000; do
	r=$(serf_rounds $n "$FL" 0)
	row "serf model: 99.9% informed, N=$n" "" "$(awk -v r="$r" -v g="$GL" 'BEGIN { printf "%.2f", r * g / 1000 }')" "" \
		"$r rounds of $GL ms"
done
echo

echo "4. Targets (issue 2)"
row "target" "figure" "target" "ratio" ""
t100=$(run --nodes 100 --seed 1 --profile fast --duration 300 --loss 0.1 --kill 10)
t1000=$(run --nodes 1000 --seed 1 --profile fast --duration 60 --loss 0.1 --kill 10)
for pair in "100:$t100:3" "1000:$t1000:5"; do
	n=${pair%%:*}; rest=${pair#*:}; lim=${rest##*:}; j=${rest%:*}
	p99=$(getd "$j" detect_s p99); und=$(getd "$j" detect_s undetected); ff=$(get "$j" false_failures)
	ok=$(awk -v a="$p99" -v l="$lim" -v u="$und" 'BEGIN { print (a <= l && u == 0) ? "pass" : "MISS" }')
	row "fast $n nodes 10% loss: detect p99 s" "$p99" "<= $lim" "$(ratio "$p99" "$lim")" "$ok"
	row "fast $n nodes 10% loss: false failures" "$ff" "0" "" "$([ "$ff" = 0 ] && echo pass || echo MISS)"
done
for nr in $LAN_RATIOS; do
	n=${nr%%:*}; r=${nr#*:}
	ok=$(awk -v r="$r" 'BEGIN { print (r >= 0.8 && r <= 1.2) ? "pass" : "MISS" }')
	row "lan N=$n detection vs memberlist formula" "$r" "0.80-1.20" "$r" "$ok"
done
row "simulator 1000 nodes x 120 s: cpu s" "$c" "<= 30" "$(ratio "$c" 30)" \
	"$(awk -v w="$c" 'BEGIN { print (w <= 30) ? "pass" : "MISS" }')"
