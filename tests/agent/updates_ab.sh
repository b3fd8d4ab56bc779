#!/usr/bin/env bash
# Two builds' coordinated updates side by side: the overhead rows of
# updates_bench.sh (4 engines, 16 MiB, disk-delta and p2p, medians of
# UPDATES_BENCH_VERSIONS versions, default 50) run alternately for build A
# (the baseline, e.g. main's binaries) and build B, ROUNDS times each, and
# a table of update_weights_time per build and their difference.
# Usage: AB_A=DIR_A/bin AB_B=DIR_B/bin [AB_A_LIB=..] [AB_B_LIB=..] [ROUNDS=2]
#        PORT_BASE=N tests/agent/updates_ab.sh
# Each DIR/bin holds skeind, skeinctl, skein-trainer-sim, skein-engine-sim
# and skein-xfer-bench; AB_*_LIB is prepended to LD_LIBRARY_PATH for it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${AB_A:?AB_A=the baseline's bin folder}" "${AB_B:?AB_B=the build's bin folder}"
ROUNDS=${ROUNDS:-2}
export UPDATES_BENCH_VERSIONS=${UPDATES_BENCH_VERSIONS:-50} UPDATES_BENCH_BIG=0 UPDATES_BENCH_FAULTS=0 \
	UPDATES_BENCH_SCALE_MODES=
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
port=${PORT_BASE:-9000}
for r in $(seq 1 "$ROUNDS"); do
	for s in A B; do
		bin=AB_$s lib=AB_${s}_LIB
		echo "== round $r, build $s (${!bin})"
		SKEIN_BIN=${!bin} LD_LIBRARY_PATH=${!lib:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PORT_BASE=$port \
			"$here/updates_bench.sh" >"$out/$s.$r" 2>&1
		grep -E '^overhead|passed' "$out/$s.$r"
		port=$((port + 200))
	done
done
# a row: "overhead MODE 16M, 4 engines (K versions)  OVER  update_weights_time / alone  C / B  ..."
uwt() { # BUILD MODE -> the median over rounds of its update_weights_time medians (ms)
	cat "$out/$1".* | awk -v m="$2" '$1 == "overhead" && $2 == m { for (i = 1; i <= NF; i++) if ($i == "alone") print $(i + 1) }' |
		sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo
echo "update_weights_time, 4 engines, 16 MiB, medians of $UPDATES_BENCH_VERSIONS versions, median of $ROUNDS rounds"
printf '%-12s %10s %10s %10s   %s\n' mode "A (ms)" "B (ms)" "B - A" "target"
for m in disk-delta p2p; do
	a=$(uwt A "$m") b=$(uwt B "$m")
	printf '%-12s %10s %10s %10s   %s\n' "$m" "$a" "$b" \
		"$(awk -v a="$a" -v b="$b" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.1f", b - a }')" "<= 2 ms"
done
