#!/usr/bin/env bash
# Coordinated weight updates on real agents (issue #13, "Targets"), each
# figure beside its baseline from the same run, on loopback (fast profile):
#  1. coordination overhead: the trainer's perf/update_weights_time (what
#     xfer_publish returns) minus the same data path run alone
#     (skein-xfer-bench --mode fanout: the same bytes, mode and model, one
#     sender to the same number of receiver processes, no agents), medians
#     of 10 versions; 4 engines at 16 MiB and UPDATES_BENCH_BIG (1G; 0
#     skips), disk-delta and p2p: <= 15 ms.  Then 96 engines on 100 agents
#     (UPDATES_BENCH_SCALE_MODES, default "disk-delta p2p"; "" skips) at
#     UPDATES_BENCH_SCALE_BYTES (1M: 96 stand-ins generating 16 MiB models
#     at once starve 100 agents of 2 cores): <= 100 ms.
#  2. an engine that exits mid-update (skein-engine-sim --crash-during): its
#     exit (its agent's log) to the trainer told of the commit: <= 300 ms
#  3. that engine, restarted: its process start (its agent's log) to
#     `running` at the latest version (the head's "caught up" line):
#     <= its catch-up's data-path time + 100 ms
#  4. a corrupted version (--corrupt-version): from the last byte moved (the
#     head's record: begin, its answer, the sender's data path, or the run's
#     median data path when an engine's failure ended the update before the
#     sender's done) to the trainer told and every engine back on v-1 (their
#     lines): <= 500 ms
# 2-4 run at 16 MiB on disk-delta and p2p-tcp (where the test switches are).  Members' lines are stamped with the wall
# clock by a wrapper; the agents' log lines carry it too.
# UPDATES_BENCH_DUMP=DIR keeps each overhead job's trainer and engine-0 lines
# and its `transfers --format json` there.
# Usage: PORT_BASE=N tests/agent/updates_bench.sh   (about 4 minutes here
# without the scale part, 1 GiB included)
. "$(dirname "$0")/lib.sh"
BIG=${UPDATES_BENCH_BIG:-1G}
SCALE_MODES=${UPDATES_BENCH_SCALE_MODES-disk-delta p2p}
SCALE_BYTES=${UPDATES_BENCH_SCALE_BYTES:-1M}
MODES=${UPDATES_BENCH_MODES-disk-delta p2p}
FAULTS=${UPDATES_BENCH_FAULTS:-1}
VERSIONS=${UPDATES_BENCH_VERSIONS:-10} # timed; version 1 (full, sessions set up) is not
TENSORS=64
ROWS=()
JOB_ENV= # members' environment (VAR=value ...)

V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 0"
for i in 1 2 3; do start_agent $i $V --join "127.0.0.1:$(gport 1)"; done
for i in 4 5; do start_agent $i --profile fast --gpus 4 --join "127.0.0.1:$(gport 1)"; done
C=4 # the agent skeinctl asks
head_of() { ctl "$C" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of); [ -n "$h" ] && [ "$h" != "(none)" ]; }
wait_until 30 has_head || { fail "no head"; finish; }

# members' output, each line stamped "EPOCH.micros line"
cat >"$T_DIR/stamp" <<'EOF'
#!/usr/bin/env bash
set -o pipefail
"$@" 2>&1 | while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done
EOF
chmod 755 "$T_DIR/stamp"

mlog() { cat $(find "$T_DIR" -path "*/logs/$1/$2.log" 2>/dev/null) /dev/null 2>/dev/null; } # JOB MEMBER
alog() { cat "$T_DIR"/n*.log 2>/dev/null; }
iso_ms() { date -d "$1" +%s%3N; }                  # 2026-12-01T17:11:54.241Z -> epoch ms
st_ms() { awk '{ printf "%.0f\n", $1 * 1000 }'; }   # a stamped line -> epoch ms
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { awk -v x="$1" 'BEGIN { if (x == "-" || x == "") print "-"; else printf "%.1f", x * 1000 }'; }
row() { ROWS+=("$(printf '%-52s %9s   %-34s %9s   %s' "$@")"); } # figure value baseline value target
verdict() { # VALUE LIMIT -> "met" / "MISSED"
	awk -v v="$1" -v l="$2" 'BEGIN { if (v == "-" || v == "") print "no figure"; else if (v + 0 <= l + 0) print "met"; else print "MISSED" }'
}

# job NAME MODE BYTES ENGINES STEPS INTERVAL_MS [TRAINER_EXTRA] [ENGINE_EXTRA]: runs until
# the trainer's last version has a verdict (the trainer then sleeps)
job() {
	local name=$1 mode=$2 bytes=$3 engines=$4 steps=$5 iv=$6 trx=${7:-} enx=${8:-} dir=""
	[ "$mode" = disk-delta ] && { dir="$T_DIR/w-$name"; mkdir -p "$dir"; }
	local sim="--bytes $bytes --tensors $TENSORS"
	ctl $C --timeout 30000 job submit --name "$name" --actor-num-nodes 1 --actor-num-gpus-per-node 1 \
		--rollout-num-gpus "$engines" --rollout-num-gpus-per-engine 1 --update-weight-transfer-mode "$mode" \
		${dir:+--update-weight-disk-dir "$dir"} --update-weight-timeout 20s --restart-backoff 0:0 \
		--trainer-cmd "env $JOB_ENV $T_DIR/stamp $BIN/skein-trainer-sim $sim --steps $steps --interval-ms $iv $trx; exec sleep 100000" \
		--rollout-cmd "$enx exec env $JOB_ENV $T_DIR/stamp $BIN/skein-engine-sim $sim --steps 1000000 \$X" >/dev/null ||
		{ fail "$name: submit"; return 1; }
	last() { mlog "$name" trainer-0 | grep -qE "trainer: v$steps (committed|aborted)|trainer: error"; }
	wait_until $((60 + steps * (iv / 1000 + 3))) last || { fail "$name: v$steps had no verdict"; return 1; }
	mlog "$name" trainer-0 | grep -q "trainer: error" && { fail "$name: the trainer failed"; return 1; }
	return 0
}
stop_job() {
	ctl $C --timeout 30000 job stop "$1" >/dev/null 2>&1
	gone() { ! ctl $C placement "$1" 2>/dev/null | grep -q running; }
	wait_until 30 gone "$1" || echo "  (job $1 still has members running)"
}

# the trainer's update_weights_time of its last VERSIONS committed versions
# above 1 in which all N engines took part
pub_times() { # JOB N
	mlog "$1" trainer-0 | sed -n "s/.* trainer: v\([0-9]*\) committed: update_weights_time=\([0-9.]*\) .* participants=$2 dropped=0.*/\1 \2/p" |
		awk '$1 > 1 { print $2 }' | tail -n "$VERSIONS"
}

# 1. overhead: NAME MODE BYTES ENGINES INTERVAL TARGET_MS
overhead() {
	local name=$1 mode=$2 bytes=$3 n=$4 iv=$5 target=$6
	job "$name" "$mode" "$bytes" "$n" $((VERSIONS + 5)) "$iv" || { stop_job "$name"; return; }
	local times k coord base
	times=$(pub_times "$name" "$n")
	k=$(echo "$times" | grep -c .)
	coord=$(echo "$times" | median)
	if [ -n "${UPDATES_BENCH_DUMP:-}" ]; then # the trainer's lines and the records, to look into
		mkdir -p "$UPDATES_BENCH_DUMP"
		mlog "$name" trainer-0 >"$UPDATES_BENCH_DUMP/$name.trainer"
		mlog "$name" engine-0 >"$UPDATES_BENCH_DUMP/$name.engine-0"
		ctl "$C" transfers "$name" --last 20 --format json >"$UPDATES_BENCH_DUMP/$name.json" 2>&1
	fi
	stop_job "$name"
	base=$("$BIN/skein-xfer-bench" --mode fanout --path "$mode" --bytes "$bytes" --tensors "$TENSORS" \
		--receivers "$n" --versions $((VERSIONS + 1)) --format json | sed -n 's/.*"seconds": \([0-9.]*\),.*/\1/p')
	local over
	over=$(awk -v c="$coord" -v b="$base" 'BEGIN { if (c == "-" || b == "") print "-"; else printf "%.6f", c - b }')
	row "overhead $mode $bytes, $n engines ($k versions)" "$(ms "$over")" \
		"update_weights_time / alone" "$(ms "$coord") / $(ms "$base")" "<= $target ms: $(verdict "$(ms "$over")" "$target")"
	[ "$k" = "$VERSIONS" ] || fail "$name: $k of $VERSIONS versions with all $n engines"
}

# 2-4 in one job: engine-3 exits mid-update of version CRASH (its first
# process only), the trainer corrupts version CORRUPT.
CRASH=4
CORRUPT=7
faults() { # MODE
	local mode=$1 name="faults-$1" steps=9 label=$1
	[ -n "$JOB_ENV" ] && label="$1 (tcp)"
	local enx="X=; [ \$SKEIN_ENGINE_ID = 3 ] && [ \${SKEIN_RESTART_COUNT:-0} = 0 ] && X=\"--crash-during $CRASH\";"
	job "$name" "$mode" 16M 4 $steps 1500 "--corrupt-version $CORRUPT" "$enx" || { stop_job "$name"; return; }
	local normal exit_line exit_ms commit_ms
	normal=$(pub_times "$name" 4 | median)
	# 2. exit -> commit
	exit_line=$(alog | grep -E "$name/engine-3: exited with status" | head -n 1)
	exit_ms=$([ -n "$exit_line" ] && iso_ms "$(echo "$exit_line" | cut -d' ' -f1)")
	commit_ms=$(mlog "$name" trainer-0 | grep " trainer: v$CRASH committed" | head -n 1 | st_ms)
	local d2="-"
	[ -n "$exit_ms" ] && [ -n "$commit_ms" ] && d2=$((commit_ms - exit_ms))
	mlog "$name" trainer-0 | grep -q " trainer: v$CRASH committed: .*dropped=1" || fail "$name: v$CRASH did not commit with engine-3 dropped"
	row "$label: engine exits mid-update -> commit (ms)" "$d2" "normal update_weights_time" "$(ms "$normal")" \
		"<= 300 ms: $(verdict "$d2" 300)"
	# 3. restart -> running at the latest version
	local start_line start_ms run_line="" run_ms dp d3="-" lim="-"
	start_line=$(alog | grep -E "$name/engine-3: started gen [0-9]+ pid [0-9]+ restart [1-9]" | head -n 1)
	start_ms=$([ -n "$start_line" ] && iso_ms "$(echo "$start_line" | cut -d' ' -f1)")
	# every catch-up of the new process up to the version that committed without it
	local l t
	while read -r l; do
		t=$(iso_ms "$(echo "$l" | cut -d' ' -f1)")
		[ -n "$start_ms" ] && [ "$t" -ge "$start_ms" ] && run_line+="$l"$'\n'
	done < <(alog | grep -E "wv: $name/engine-3 caught up to v[0-9]+ " |
		awk -v c="$CRASH" '{ v = $0; sub(/.* caught up to v/, "", v); sub(/ .*/, "", v); if (v + 0 <= c) print }')
	dp=$(printf '%s' "$run_line" | sed -n 's/.*(data path \([0-9.]*\) s).*/\1/p' | awk '{ s += $1 } END { if (NR) printf "%.6f", s }')
	run_line=$(printf '%s' "$run_line" | grep " caught up to v$CRASH " | head -n 1)
	run_ms=$([ -n "$run_line" ] && iso_ms "$(echo "$run_line" | cut -d' ' -f1)")
	# the stand-in's own start (its two models generated, its endpoint open): its "ready" line
	local ready_ms own="-"
	ready_ms=$(mlog "$name" engine-3 | sed -n '/restart 1 at/,$p' | grep " engine: ready" | head -n 1 | st_ms)
	[ -n "$ready_ms" ] && [ -n "$start_ms" ] && own=$((ready_ms - start_ms))
	if [ -n "$start_ms" ] && [ -n "$run_ms" ] && [ -n "$dp" ]; then
		d3=$((run_ms - start_ms))
		lim=$(awk -v d="$dp" 'BEGIN { printf "%.0f", d * 1000 + 100 }')
	else
		fail "$name: engine-3 restarted and caught up (start: ${start_line:-none}; running: ${run_line:-none})"
	fi
	row "$label: restarted engine: start -> running (ms)" "$d3" "its catch-up's data path (ms)" "$(ms "$dp")" \
		"<= $lim ms: $(verdict "$d3" "$lim")"
	row "  of which the stand-in's own start (ms)" "$own" "(start -> its \"ready\" line)" "" ""
	# 4. corrupted version: last byte moved -> aborted, all back on v-1, sender told
	local rec last_ms told_ms back_ms e b d4="-" n_back=0 prep impl
	rec=$(ctl $C transfers "$name" --last 20 --format json | sed 's/},{"job"/}\n{"job"/g' | grep "\"version\":$CORRUPT,")
	echo "$rec" | grep -q '"state":"aborted"' || fail "$name: v$CORRUPT was not aborted"
	prep=$(echo "$rec" | grep -o '"prepare":[0-9.]*' | head -n 1 | cut -d: -f2)
	impl=$(echo "$rec" | grep -o '"implementation":[0-9.]*' | head -n 1 | cut -d: -f2)
	last_ms=$(echo "$rec" | grep -o '"started_ms":[0-9]*' | head -n 1 | cut -d: -f2)
	# an update aborted by an engine before the sender said done has no
	# data-path time in its record: the run's median stands in for it
	if awk -v i="${impl:-0}" 'BEGIN { exit !(i + 0 == 0) }'; then
		impl=$(mlog "$name" trainer-0 | sed -n 's/.* committed: .* implementation_time=\([0-9.]*\) .*participants=[1-9].*/\1/p' | median)
	fi
	[ -n "$last_ms" ] && last_ms=$(awk -v s="$last_ms" -v p="$prep" -v i="$impl" 'BEGIN { printf "%.0f", s + (p + i) * 1000 }')
	told_ms=$(mlog "$name" trainer-0 | grep " trainer: v$CORRUPT aborted" | head -n 1 | st_ms)
	back_ms=$told_ms
	for e in 0 1 2 3; do
		b=$(mlog "$name" "engine-$e" | grep " engine: v$CORRUPT aborted .*back on v$((CORRUPT - 1)), verified" | head -n 1 | st_ms)
		[ -n "$b" ] || continue
		n_back=$((n_back + 1))
		[ "$b" -gt "${back_ms:-0}" ] && back_ms=$b
	done
	[ "$n_back" = 4 ] || fail "$name: $n_back of 4 engines said they are back on v$((CORRUPT - 1))"
	[ -n "$told_ms" ] && [ -n "$last_ms" ] && d4=$((back_ms - last_ms))
	row "$label: corrupted version: last byte -> all on v-1, told" "$d4" "its data path (ms)" "$(ms "$impl")" \
		"<= 500 ms: $(verdict "$d4" 500)"
	stop_job "$name"
}

for m in $MODES; do
	overhead "o16-$m" "$m" 16M 4 300 15
	[ "$BIG" != 0 ] && overhead "obig-$m" "$m" "$BIG" 4 5000 15
	# the test switches live in the disk-delta and p2p-tcp paths: p2p without UCX
	[ "$FAULTS" != 0 ] && { [ "$m" = p2p ] && JOB_ENV=SKEIN_UCP_LIB=/nonexistent; faults "$m"; JOB_ENV=; }
done

if [ -n "$SCALE_MODES" ]; then
	# 100 agents: the 3 voters and 97 of one GPU (1 trainer + 96 engines)
	for i in 4 5; do kill_agent $i 15; done
	C=1
	for i in $(seq 6 102); do start_agent $i --profile fast --gpus 1 --log-level warn --join "127.0.0.1:$(gport 1)"; done
	alive_n() { [ "$(ctl $C members 2>/dev/null | awk '$3 == "alive"' | wc -l)" -ge 100 ]; }
	if wait_until 90 alive_n; then
		for m in $SCALE_MODES; do overhead "s-$m" "$m" "$SCALE_BYTES" 96 1000 100; done
	else
		fail "the 100-agent cluster did not form"
	fi
fi

echo
echo "coordinated weight updates (fast profile, loopback; medians of $VERSIONS versions)"
printf '%-52s %9s   %-34s %9s   %s\n' "figure (ms)" "value" "baseline (same run)" "value" "target"
for r in "${ROWS[@]}"; do echo "$r"; done
finish
