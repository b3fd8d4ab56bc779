#!/usr/bin/env bash
# tests/gpu/colo.sh: coordinated colocated updates on a real GPU (tests/gpu/run.sh
# case colo, or alone on the H200 machine).  Runs, with COLO_BYTES (default 1G):
#   1. the data path alone: skein-trainer-sim and skein-engine-sim on
#      --path colocated --device cuda, no agent, the same bytes and layout
#      (its "published vN ... in S s" is the baseline of update_weights_time);
#   2. tests/agent/colocated_test.sh with the real CUDA runtime: one agent,
#      a --colocate job on GPU 0, committed versions bit for bit, a corrupted
#      one aborted and undone on the device, the timings; then (SKEIN_COLO_NCCL,
#      default 1) a broadcast job on the same GPU: as far as NCCL goes.
# SKEIN_BIN: skeind and skeinctl (built on a Debian machine and carried with
# their libraries, LD_LIBRARY_PATH); SKEIN_SIM_BIN: the stand-ins (default
# SKEIN_BIN).  Prints RESULT lines and "# N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
BYTES=${COLO_BYTES:-1G}
# The trainer's step: the stand-in engine checks every version bit for bit on
# the CPU (a copy to the host and the expected bytes made again: about 0.1 s a
# GiB, 2 s for the first), and a version published before that check ends
# waits for it, which update_weights_time would count; so the step is long
# enough for the check (COLO_INTERVAL_MS overrides).
case $BYTES in
*G|*g) export COLO_INTERVAL_MS=${COLO_INTERVAL_MS:-$((${BYTES%[Gg]} * 1500 + 1500))} ;;
esac
SIM=${SKEIN_SIM_BIN:-${SKEIN_BIN:-bin}}
T=$(mktemp -d)
trap 'kill $EP 2>/dev/null; rm -rf "$T"' EXIT
COMMON="--path colocated --device cuda --bytes $BYTES --tensors ${COLO_TENSORS:-32} --steps ${COLO_STEPS:-5}"
"$SIM/skein-engine-sim" $COMMON --port-file "$T/port" >"$T/engine.log" 2>&1 &
EP=$!
for _ in $(seq 600); do [ -s "$T/port" ] && break; kill -0 $EP 2>/dev/null || break; sleep 0.1; done
alone=1
if [ -s "$T/port" ] && timeout 300 "$SIM/skein-trainer-sim" $COMMON --interval-ms ${COLO_INTERVAL_MS:-100} --port "$(cat "$T/port")" \
	>"$T/trainer.log" 2>&1 && wait $EP; then
	alone=0
fi
sed 's/^/  alone| /' "$T/trainer.log" "$T/engine.log"
sed -n 's/^trainer: published v\([0-9]*\) on colocated: \([0-9]*\) bytes moved in \([0-9.]*\) s/\1 \2 \3/p' "$T/trainer.log" |
	awk '$1 > 1 { printf "RESULT mode=colocated-alone bytes=%s version=%s seconds=%s\n", $2, $1, $3 }' | tee "$T/alone"
sort -t= -k4 -n "$T/alone" | awk -F'seconds=' '{ o[NR] = $2 } END { if (NR) printf "RESULT mode=colocated-alone median_seconds=%s of %d versions\n", o[int((NR + 1) / 2)], NR }'
[ $alone = 0 ] && echo "ok   the data path alone: 5 versions bit for bit" || echo "FAIL the data path alone"
COLO_BYTES=$BYTES SKEIN_COLO_REAL=1 SKEIN_COLO_NCCL=${SKEIN_COLO_NCCL:-1} SKEIN_SIM_BIN=$SIM tests/agent/colocated_test.sh
rc=$?
[ $alone = 0 ] && exit $rc
exit 1
