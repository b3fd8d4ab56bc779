#!/usr/bin/env bash
# tests/transfer/bench.sh: libskein's benchmarks (make bench), each figure
# beside its baseline measured by the same runs of bin/skein-xfer-bench.
# REPEAT=N (default 1) takes the best of N runs for the figure and for the
# baseline (on a shared machine the best run is the least disturbed; the
# README's table is REPEAT=3).  Sizes: SKEIN_BENCH_DISK (default 1G; the
# issue's 4G takes about a minute a run here), SKEIN_BENCH_P2P (1G),
# SKEIN_BENCH_SUM (1G); DIR=... puts the disk-delta folder elsewhere;
# SKEIN_BENCH_SECTIONS (default "disk p2p sum"; also "threads": disk-delta
# end to end by thread count) picks the tables.
set -u
BIN=${BIN:-bin}
REPEAT=${REPEAT:-1}
DISK=${SKEIN_BENCH_DISK:-1G}
P2P=${SKEIN_BENCH_P2P:-1G}
SUM=${SKEIN_BENCH_SUM:-1G}
SECTIONS=" ${SKEIN_BENCH_SECTIONS:-disk p2p sum} "
DIRARG=()
[ -n "${DIR:-}" ] && DIRARG=(--dir "$DIR")

jget() { sed -E "s/.*\"$1\": \"?([^,\"}]*)\"?.*/\1/" <<<"$2"; }
# REPEAT runs: the JSON line of the fastest, with "baseline_seconds" and
# "ratio" replaced by the fastest baseline of the same runs (both sides get
# their least disturbed run; each run measures both).
best() {
	local b="" bs="" bb=""
	for _ in $(seq 1 "$REPEAT"); do
		local j s t
		j=$("$BIN/skein-xfer-bench" "$@" --format json) || { echo "skein-xfer-bench $* failed" >&2; exit 1; }
		s=$(jget seconds "$j")
		t=$(jget baseline_seconds "$j")
		if [ -z "$bs" ] || awk -v a="$s" -v b="$bs" 'BEGIN{exit !(a<b)}'; then b=$j; bs=$s; fi
		if [ -z "$bb" ] || awk -v a="$t" -v b="$bb" 'BEGIN{exit !(a<b)}'; then bb=$t; fi
	done
	local base_bytes; base_bytes=$(jget baseline_bytes "$b")
	b=$(sed -E "s/\"baseline_seconds\": [^,]*/\"baseline_seconds\": $bb/; s/\"ratio\": [^,]*/\"ratio\": $(awk -v a="$bb" -v s="$bs" 'BEGIN{printf "%.4f", a/s}')/; s/\"baseline_gbps\": [^,]*/\"baseline_gbps\": $(awk -v n="$base_bytes" -v a="$bb" 'BEGIN{printf "%.3f", n/a/1e9}')/" <<<"$b")
	echo "$b"
}

if [[ $SECTIONS == *" disk "* ]]; then
echo "disk-delta: $DISK of bf16 weights in 256 tensors; version 2 end to end (encode + write + fsync +"
echo "apply + verify) against writing the whole weights fsync'd to the same folder; best of $REPEAT"
printf "%-22s %8s %12s %8s %9s %9s %8s %7s %7s %7s %6s\n" encoding changed written "of full" "delta s" "full s" speedup "enc GB/s" "app GB/s" "memcpy" exact
for enc in "xor 1" "overwrite 1" "overwrite 0"; do
	set -- $enc
	for ch in 0.01 0.03; do
		j=$(best --mode disk-delta --bytes "$DISK" --changed "$ch" --encoding "$1" --zstd "$2" "${DIRARG[@]}")
		printf "%-22s %7.0f%% %12s %7.2f%% %9.3f %9.3f %7.1fx %8.2f %8.2f %7.2f %6s\n" "$1$([ "$2" = 1 ] && echo +zstd1)" \
			"$(awk -v c="$ch" 'BEGIN{print c*100}')" "$(jget bytes_moved "$j")" \
			"$(awk -v f="$(jget bytes_fraction "$j")" 'BEGIN{print f*100}')" "$(jget seconds "$j")" \
			"$(jget baseline_seconds "$j")" "$(jget ratio "$j")" "$(jget encode_gbps "$j")" \
			"$(jget apply_gbps "$j")" "$(jget memcpy_gbps "$j")" "$(jget exact "$j")"
	done
done

echo
fi

if [[ $SECTIONS == *" threads "* ]]; then
echo "disk-delta threads: $DISK, xor + zstd 1, 1% changed, end to end by encode/apply threads (--threads)"
echo "against the same fsync'd full write; best of $REPEAT"
printf "%-8s %9s %9s %9s %9s %8s %6s\n" threads "delta s" "send s" "recv s" "full s" speedup exact
for t in 1 2 4 8 16; do
	[ "$t" -gt "$(nproc)" ] && break
	j=$(best --mode disk-delta --bytes "$DISK" --changed 0.01 --encoding xor --zstd 1 --threads "$t" "${DIRARG[@]}")
	printf "%-8s %9.3f %9.3f %9.3f %9.3f %7.1fx %6s\n" "$t" "$(jget seconds "$j")" "$(jget send_seconds "$j")" \
		"$(jget receive_seconds "$j")" "$(jget baseline_seconds "$j")" "$(jget ratio "$j")" "$(jget exact "$j")"
done

echo
fi

if [[ $SECTIONS == *" p2p "* ]]; then
echo "p2p-tcp on 127.0.0.1: $P2P, 4 streams, version 2 verified bit for bit by the receiver process,"
echo "against a plain socket send of the same bytes between the same processes; best of $REPEAT"
echo "(peak extra memory: VmHWM beyond the weights, MiB, beside two 512 MiB buckets, the target)"
printf "%-34s %9s %9s %12s %12s %7s %6s %9s %9s\n" receiver seconds "GB/s" "plain s" "plain GB/s" ratio exact \
	"recv MiB" "send MiB"
for kp in 1 0; do
	j=$(best --mode p2p-tcp --bytes "$P2P" --changed 0.01 --keep-previous "$kp")
	printf "%-34s %9.3f %9.2f %12.3f %12.2f %6.2fx %6s %9.1f %9.1f\n" \
		"$([ "$kp" = 1 ] && echo "staged + undo journal (default)" || echo "direct into buffers (no undo)")" \
		"$(jget seconds "$j")" "$(jget gbps "$j")" "$(jget baseline_seconds "$j")" "$(jget baseline_gbps "$j")" \
		"$(jget ratio "$j")" "$(jget exact "$j")" \
		"$(awk -v b="$(jget receiver_extra_bytes "$j")" 'BEGIN{print b/1048576}')" \
		"$(awk -v b="$(jget sender_extra_bytes "$j")" 'BEGIN{print b/1048576}')"
done

echo
fi

if [[ $SECTIONS == *" sum "* ]]; then
echo "checksum: xxh3-128 (libxxhash) over $SUM against memcpy of the same bytes, one core; best of $REPEAT"
j=$(best --mode checksum --bytes "$SUM" --changed 0)
printf "%-12s %9s %12s %7s\n" "" "GB/s" "memcpy GB/s" ratio
printf "%-12s %9.2f %12.2f %6.2fx\n" xxh3-128 "$(jget gbps "$j")" "$(jget baseline_gbps "$j")" "$(jget ratio "$j")"
fi
