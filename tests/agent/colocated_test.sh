#!/usr/bin/env bash
# tests/agent/colocated_test.sh: coordinated colocated updates (docs/updates.md)
# on a real agent: one voter with one GPU runs a --colocate job whose trainer
# and engine share GPU 0; every version's CUDA IPC handoff travels from the
# trainer through the agent and the head to the engine, which maps it with
# no socket of its own.  Checked: committed versions verified bit for bit on
# the device, a version corrupted after its checksum aborted with the engine
# back on the previous one (bit for bit), the records in `skeinctl
# transfers` with the data path's split, and the timings
# (perf/update_weights_time vs the data path's).  The trainer then runs
# again as another process (a restart): the engine opens the trainer's
# CUDA IPC handle once per trainer process (and again after the failed
# version), not once per version.  Then (stand-in only) a second cluster of
# three voters kills its head with a colocated update open whose engine has
# not had its handoff: the new head gets it from the trainer's done and the
# update commits.
# Then, without a GPU, a broadcast (NCCL) job the same way through the
# stand-in NCCL: the unique id and ranks through the agents, commits, and
# an abort undone by the engine's journal.
#
# Without a GPU (make test) the CUDA runtime is tests/fakecuda's stand-in
# (SKEIN_FAKE_CUDART): "device memory" in shared memory, the checks on the
# CPU.  On the H200 (tests/gpu/run.sh, case colo) SKEIN_COLO_REAL=1 uses the
# real runtime and COLO_BYTES (default 1G).  Prints "RESULT ..." lines.
. "$(dirname "$0")/lib.sh"

BYTES=${COLO_BYTES:-8M}
TENSORS=${COLO_TENSORS:-32}
STEPS=${COLO_STEPS:-5}
CORRUPT=3
INTERVAL=${COLO_INTERVAL_MS:-100}  # the trainer's step: the engine's own check of a version fits in it
if [ "${SKEIN_COLO_REAL:-0}" != 1 ]; then
	FAKE=${SKEIN_FAKE_CUDART:-$ROOT/build/release/tests/libfake_cudart.so}
	[ -e "$FAKE" ] || skip_all "no stand-in CUDA runtime at $FAKE (make builds it)"
	CUDA_ENV="export SKEIN_CUDART_LIB=$FAKE SKEIN_CUDA_LIB=$FAKE"
else
	# what the members need from this environment (the agent gives them their own)
	CUDA_ENV=":"
	for v in LD_LIBRARY_PATH SKEIN_CUDART_LIB SKEIN_CUDA_LIB SKEIN_NCCL_LIB NCCL_NVLS_ENABLE NCCL_DEBUG; do
		[ -n "${!v:-}" ] && CUDA_ENV="$CUDA_ENV; export $v='${!v}'"
	done
fi
SIMBIN=${SKEIN_SIM_BIN:-$BIN}

ALL=$((STEPS + ${COLO_RESTART_STEPS:-2}))  # a second trainer process (a restart) publishes STEPS+1..ALL
# the job's members: the trainer publishes once the engine is known to the
# head (the go file), then another trainer process goes on (a restart: a
# new pid, new allocations); the engine verifies every committed version.
# SKEIN_FAKE_CUDA_LOG: the stand-in runtime logs every IPC handle opened
# and closed there.
cat >"$T_DIR/member.sh" <<EOF
#!/bin/sh
$CUDA_ENV
export SKEIN_FAKE_CUDA_LOG=$T_DIR/ipc.log
ALL=$ALL
COMMON="--device cuda --bytes $BYTES --tensors $TENSORS"
case "\$SKEIN_ROLE" in
trainer)
	i=0; while [ ! -e "$T_DIR/go" ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i + 1)); done
	"$SIMBIN/skein-trainer-sim" \$COMMON --steps $STEPS --corrupt-version $CORRUPT --interval-ms $INTERVAL
	echo "trainer exited \$?"
	if [ \$ALL -gt $STEPS ]; then
		"$SIMBIN/skein-trainer-sim" \$COMMON --steps \$ALL --interval-ms $INTERVAL
		echo "trainer restarted exited \$?"
	fi
	exec sleep 1000000 ;;
rollout)
	"$SIMBIN/skein-engine-sim" \$COMMON --steps \$ALL --wait-ms 600000
	echo "engine exited \$?"
	exec sleep 1000000 ;;
esac
EOF
chmod 755 "$T_DIR/member.sh"

start_agent 1 --profile fast --gpus 1 --head-eligible --bootstrap-expect 1
has_head() { ctl 1 head 2>/dev/null | grep -q '^head: n1'; }
wait_until 20 has_head || fail "no head"
# submit_job NAME MODE MEMBER TIMEOUT: a --colocate job of one trainer rank and
# one engine on GPU 0, its members MEMBER; true once the head knows the engine
submit_job() {
	ctl ${AT:-1} job submit --name "$1" --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 1 \
		--rollout-num-gpus-per-engine 1 --num-gpus-per-node 1 --colocate --update-weight-transfer-mode "$2" \
		--update-weight-timeout "$4" --trainer-cmd "$3" --rollout-cmd "$3" >/dev/null || { fail "submit $1"; return 1; }
	known() { ctl ${AT:-1} placement "$1" --format json 2>/dev/null | grep -q '"weight_version":[0-9]'; }
	wait_until 60 known "$1"
}

check "the engine is known to the head before the first version" submit_job colo colocated "$T_DIR/member.sh" 60s
touch "$T_DIR/go"
t0=$(now_ms)

elog() { ctl 1 logs colo/engine-0 2>/dev/null; }
tlog() { ctl 1 logs colo/trainer-0 2>/dev/null; }
TDONE='trainer exited'
[ $ALL -gt $STEPS ] && TDONE='trainer restarted exited'
done_all() { tlog | grep -q "$TDONE" && elog | grep -q 'engine exited'; }
wait_until 240 done_all
echo "  (the $ALL versions took $(( $(now_ms) - t0 )) ms)"
tlog | grep -E '^trainer: v' | sed 's/^/  /'
elog | grep -E '^engine: v' | sed 's/^/  /'

check "the trainer published every version" grep -q 'trainer exited 0' <(tlog)
[ $ALL -gt $STEPS ] && check "the restarted trainer published v$((STEPS + 1))..v$ALL" grep -q "$TDONE 0" <(tlog)
check "the engine ended on v$ALL, every version bit for bit" grep -q 'engine exited 0' <(elog)
for v in $(seq 1 $ALL); do
	[ $v = $CORRUPT ] && continue
	check "v$v committed, the engine in it" grep -q "trainer: v$v committed: .*participants=1 dropped=0" <(tlog)
	check "v$v verified on the engine's device" grep -q "engine: v$v verified bit for bit" <(elog)
done
check "v$CORRUPT (a byte changed after its checksum) aborted naming the checksum" \
	grep -q "trainer: v$CORRUPT aborted: .*checksum mismatch" <(tlog)
check "the engine back on v$((CORRUPT - 1)) after the abort, bit for bit" \
	grep -q "engine: v$CORRUPT aborted (.*): back on v$((CORRUPT - 1)), verified bit for bit" <(elog)
js=$(ctl 1 updates colo --format json 2>/dev/null)
check "skeinctl transfers: mode colocated, $((ALL - 1)) committed, 1 aborted" \
	test "$(grep -o '"state":"committed"' <<<"$js" | wc -l)/$(grep -o '"state":"aborted"' <<<"$js" | wc -l)" = "$((ALL - 1))/1"
why=$(/usr/bin/python3 "$ROOT/tests/agent/wv_json.py" split <<<"$js" 2>&1)
check "skeinctl transfers: the sender's hashing and the engine's copy in each committed record's split ($why)" [ -z "$why" ]
# each engine's undo journal (issue 27): on a GPU in device memory past v1;
# the stand-in has no kernels (the sender's bytes checked before the copy),
# so it journals nothing: "none" on every record
places=$(grep -o '"journal_bytes":[0-9]*,"journal_spilled_bytes":[0-9]*,"journal_where":"[a-z+]*"' <<<"$js")
if [ "${SKEIN_COLO_REAL:-0}" = 1 ]; then want='"journal_bytes":[1-9][0-9]*,"journal_spilled_bytes":[0-9]*,"journal_where":"device'
else want='^"journal_bytes":0,"journal_spilled_bytes":0,"journal_where":"none"$'; fi
check "skeinctl transfers: the engine's undo journal on each record ($(sed 's/.*://' <<<"$places" | sort | uniq -c | tr -s ' \n' ' '))" \
	bash -c '[ "$(grep -c . <<<"$1")" = "$2" ] && grep -q -- "$3" <<<"$1" &&
		{ [ "$4" = 1 ] || ! grep -qv -- "$3" <<<"$1"; }' _ "$places" "$ALL" "$want" "${SKEIN_COLO_REAL:-0}"

# The engine keeps the trainer's handles open across versions: the first
# trainer's allocation opened at v1 and again after v$CORRUPT (a failed
# receive closes them), not at every version; the restarted trainer's
# once, after the first one's was closed.
if [ "${SKEIN_COLO_REAL:-0}" != 1 ] && [ $ALL -gt $STEPS ]; then
	sed 's/^/  ipc| /' "$T_DIR/ipc.log"
	mapfile -t allocs < <(awk '$1 == "ipc-open" && !seen[$2]++ { print $2 }' "$T_DIR/ipc.log")
	opens() { grep -c "^ipc-open $1 " "$T_DIR/ipc.log"; }
	check "two trainer processes' allocations were mapped" test "${#allocs[@]}" = 2
	check "the first trainer's allocation opened twice in $STEPS versions (v1, after the failed v$CORRUPT)" \
		test "$(opens "${allocs[0]:-none}")" = 2
	check "the restarted trainer's allocation opened once in $((ALL - STEPS)) versions" \
		test "$(opens "${allocs[1]:-none}")" = 1
	first_closed_before_second() {
		awk -v a="${allocs[0]:-none}" -v b="${allocs[1]:-none}" '
			$1 == "ipc-close" && $2 == a { closed = 1 }
			$1 == "ipc-open" && $2 == b { exit !closed }' "$T_DIR/ipc.log"
	}
	check "the first trainer's mapping closed before the restarted one's opened" first_closed_before_second
fi

# the timings of the committed versions after the first of each trainer (it maps and warms up)
tlog | sed -n 's/^trainer: v\([0-9]*\) committed: update_weights_time=\([0-9.]*\) implementation_time=\([0-9.]*\).*/\1 \2 \3/p' |
	awk -v b="$BYTES" -v r=$((STEPS + 1)) '$1 > 1 && $1 != r { printf "RESULT mode=colocated-coordinated bytes=%s version=%s update_weights_time=%s implementation_time=%s overhead_ms=%.1f\n", b, $1, $2, $3, ($2 - $3) * 1000 }' |
	tee "$T_DIR/results"
sort -t= -k7 -n "$T_DIR/results" | awk -F'overhead_ms=' '{ o[NR] = $2 } END { if (NR) printf "RESULT mode=colocated-coordinated median_overhead_ms=%s of %d versions\n", o[int((NR + 1) / 2)], NR }'
ctl 1 transfers colo 2>/dev/null | sed 's/^/  /'

# The head dies with a colocated update open (docs/updates.md, "the head
# fails over"): a second cluster, voters n2-n4 without GPUs and n5 with the
# job's GPU.  v1 commits; the engine is stopped (SIGSTOP) so that v2 opens
# without it having its handoff; the head is killed.  The new head adopts v2
# from the record, which holds no handoff: the trainer's done, said again to
# the new head, brings it, and the engine (continued) receives v2 from it.
# v2 commits, then v3 and v4; nothing stays open.
if [ "${SKEIN_COLO_REAL:-0}" != 1 ]; then
	for i in 2 3 4; do start_agent $i --profile fast --head-eligible --bootstrap-expect 3 --gpus 0 --join "127.0.0.1:$(gport 2)"; done
	start_agent 5 --profile fast --gpus 1 --join "127.0.0.1:$(gport 2)"
	head5() { ctl 5 head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
	voter_head() { case "$(head5)" in n2|n3|n4) return 0 ;; esac; return 1; }
	cat >"$T_DIR/member_fo.sh" <<EOF
#!/bin/sh
$CUDA_ENV
COMMON="--device cuda --bytes $BYTES --tensors $TENSORS --steps 4"
case "\$SKEIN_ROLE" in
trainer)
	i=0; while [ ! -e "$T_DIR/go_fo" ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i + 1)); done
	"$SIMBIN/skein-trainer-sim" \$COMMON --interval-ms 2500
	echo "trainer exited \$?"
	exec sleep 1000000 ;;
rollout)
	"$SIMBIN/skein-engine-sim" \$COMMON --wait-ms 600000 &
	echo \$! >"$T_DIR/fo_engine.pid"
	wait \$!
	echo "engine exited \$?"
	exec sleep 1000000 ;;
esac
EOF
	chmod 755 "$T_DIR/member_fo.sh"
	if wait_until 30 voter_head && AT=5 submit_job fo colocated "$T_DIR/member_fo.sh" 30s; then
		pass "failover: the colocated job runs on n5, the head on $(head5)"
		touch "$T_DIR/go_fo"
		fo_state() { ctl 5 transfers fo --format json 2>/dev/null | /usr/bin/python3 "$ROOT/tests/agent/wv_json.py" get "$1" state; }
		fo_is() { [ "$(fo_state "$1")" = "$2" ]; }
		fo_open() { case "$(fo_state "$1")" in preparing|moving) return 0 ;; esac; return 1; }
		check "failover: v1 committed" wait_until 30 fo_is 1 committed
		epid=$(cat "$T_DIR/fo_engine.pid" 2>/dev/null)
		[ -n "$epid" ] && kill -STOP "$epid"
		if wait_until 10 fo_open 2; then
			old=$(head5)
			kill_agent "${old#n}" 9
			pass "failover: v2 open with the engine stopped; head $old killed"
			new_head() { local h; h=$(head5); [ -n "$h" ] && [ "$h" != "$old" ] && [ "$h" != "(none)" ]; }
			check "failover: a new head" wait_until 30 new_head
			nh=$(head5)
			handoff_again() { grep -q "fo v2: the sender's handoff came with its done" "$T_DIR/$nh.log"; }
			check "failover: $nh adopted v2 and got its handoff from the trainer's done" wait_until 30 handoff_again
			grep -E "fo v2" "$T_DIR/$nh.log" | sed 's/^/  fo| /'
		else
			fail "failover: v2 did not open" "$(fo_state 2)"
		fi
		[ -n "$epid" ] && kill -CONT "$epid"
		fotl() { ctl 5 logs fo/trainer-0 2>/dev/null; }
		foel() { ctl 5 logs fo/engine-0 2>/dev/null; }
		fo_done() { fotl | grep -q 'trainer exited' && foel | grep -q 'engine exited'; }
		wait_until 60 fo_done
		fotl | grep -E '^trainer: v' | sed 's/^/  fo| /'
		check "failover: v2 committed with the engine in it" grep -q "trainer: v2 committed: .*participants=1 dropped=0" <(fotl)
		check "failover: v3 and v4 committed after it" grep -q "trainer: v4 committed: .*participants=1 dropped=0" <(fotl)
		check "failover: the engine verified v2..v4 bit for bit" grep -q 'engine exited 0' <(foel)
		fo_closed() { ctl 5 transfers fo --format json 2>/dev/null | /usr/bin/python3 "$ROOT/tests/agent/wv_json.py" open >/dev/null; }
		check "failover: no update left open" wait_until 10 fo_closed
		ctl 5 transfers fo 2>/dev/null | sed 's/^/  fo| /'
		ctl 5 job stop fo >/dev/null 2>&1
		fo_stopped() { ! ctl 5 placement fo 2>/dev/null | grep -q running; }
		wait_until 30 fo_stopped
	else
		fail "failover: no voter head, or the job did not start"
	fi
	for i in 2 3 4 5; do [ -n "${PIDS[$i]:-}" ] && kill_agent $i 9; done
fi

stop_colo() {
	ctl 1 job stop "$1" >/dev/null 2>&1
	stopped() { ! ctl 1 placement "$1" 2>/dev/null | grep -q running; }
	wait_until 30 stopped "$1"
	ctl 1 job delete "$1" >/dev/null 2>&1
}

# Without a GPU: the coordinated NCCL path end to end through the stand-in
# NCCL (tests/fakecuda/fake_nccl.c, two ranks over shared memory): the
# trainer's unique id and the ranks travel through the agent and the head,
# versions commit bit for bit, a corrupted one is aborted and the engine's
# device undo journal puts the one before back.
FNCCL=${SKEIN_FAKE_NCCL:-$ROOT/build/release/tests/libfake_nccl.so}
if [ "${SKEIN_COLO_REAL:-0}" != 1 ] && [ -e "$FNCCL" ]; then
	stop_colo colo
	sed "s|^$CUDA_ENV\$|$CUDA_ENV SKEIN_NCCL_LIB=$FNCCL|; s|^ALL=.*|ALL=$STEPS|" "$T_DIR/member.sh" >"$T_DIR/member_nccl.sh"
	chmod 755 "$T_DIR/member_nccl.sh"
	rm -f "$T_DIR/go"
	check "NCCL (stand-in): the engine is known to the head" submit_job fnc broadcast "$T_DIR/member_nccl.sh" 30s
	touch "$T_DIR/go"
	flog() { ctl 1 logs "fnc/$1" 2>/dev/null; }
	fdone() { flog trainer-0 | grep -q 'trainer exited' && flog engine-0 | grep -q 'engine exited'; }
	wait_until 120 fdone
	flog trainer-0 | grep -E '^trainer: v' | sed 's/^/  nccl| /'
	check "NCCL (stand-in): the trainer published every version" grep -q 'trainer exited 0' <(flog trainer-0)
	check "NCCL (stand-in): the engine ended on v$STEPS, every version bit for bit" grep -q 'engine exited 0' <(flog engine-0)
	check "NCCL (stand-in): v$STEPS committed with the engine in it" \
		grep -q "trainer: v$STEPS committed: .*participants=1 dropped=0" <(flog trainer-0)
	check "NCCL (stand-in): v$CORRUPT aborted naming the checksum" grep -q "trainer: v$CORRUPT aborted: .*checksum" <(flog trainer-0)
	check "NCCL (stand-in): the engine back on v$((CORRUPT - 1)) by its undo journal, bit for bit" \
		grep -q "engine: v$CORRUPT aborted (.*): back on v$((CORRUPT - 1)), verified bit for bit" <(flog engine-0)
	stop_colo fnc
fi
[ "${SKEIN_COLO_NCCL:-0}" = 1 ] || finish

# NCCL (broadcast) on one GPU, as far as it goes: the trainer (rank 0) and
# the engine (rank 1) both on GPU 0.  NCCL refuses two ranks on one device;
# what is checked is that the update ends (committed or aborted, with a
# reason) within the watchdog and nothing hangs.  The reasons are printed.
stop_colo colo
sed -i "s/--corrupt-version $CORRUPT //; s/--steps $STEPS/--steps 2/; s/^ALL=.*/ALL=2/" "$T_DIR/member.sh"
rm -f "$T_DIR/go"
check "NCCL on one GPU: the engine is known to the head" submit_job ncc broadcast "$T_DIR/member.sh" 20s
touch "$T_DIR/go"
t0=$(now_ms)
ntlog() { ctl 1 logs ncc/trainer-0 2>/dev/null; }
nelog() { ctl 1 logs ncc/engine-0 2>/dev/null; }
trainer_done() { ntlog | grep -q 'trainer exited'; }
check "NCCL on one GPU: the trainer's 2 versions end within 2 watchdogs" wait_until 60 trainer_done
echo "  (NCCL: $(( $(now_ms) - t0 )) ms)"
ntlog | grep -vE '^\s*$' | tail -n 8 | sed 's/^/  trainer| /'
nelog | grep -vE '^\s*$' | tail -n 8 | sed 's/^/  engine| /'
ctl 1 transfers ncc 2>/dev/null | sed 's/^/  /'
open_left() { ctl 1 transfers ncc --format json 2>/dev/null | grep -qE '"state":"(preparing|moving)"'; }
check "NCCL on one GPU: no update left open" wait_until 30 eval '! open_left'
finish
