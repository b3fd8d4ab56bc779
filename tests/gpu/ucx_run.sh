#!/usr/bin/env bash
# tests/gpu/ucx_run.sh: p2p-ucx on the H200 machine in one call, from the
# bundle tests/gpu/ucx_pack.sh makes (run there as DIR/run.sh):
#   1. xfer_ucx_test: the p2p-ucx unit tests (UCX_TLS=tcp and sm) over the
#      host's UCX;
#   2. ucx_gpu_test GPU_BYTES under each UCX_TLS of TLS_LIST (default:
#      UCX's own choice, sm, tcp): device memory to device memory through
#      pinned host buffers, a corrupt version undone on the device;
#   3. skein-xfer-bench --mode p2p-ucx --bytes BENCH_BYTES for each run of
#      BENCH_RUNS (default: TLS_LIST, then sm:nokeep), p2p-tcp of the same
#      bytes and a plain socket in the same run.  A run is a UCX_TLS value
#      ("default": UCX's choice) with options: ":nokeep" (--keep-previous 0),
#      ":sN" (--streams N, both paths), ":cF" (--changed F; 0.01 without).
#      BENCH_BIN: another build of the bench; SKEIN_UCX_PROFILE=1 adds
#      p2p-ucx's seconds per phase (in bench-*.err).
# libucp.so.0: the loader's, else the first found under /usr /opt and
# Python's site-packages (SKEIN_UCP_LIB wins).  Logs go to $OUT or
# /tmp/skein-ucx; the results are printed last.
set -u
D=$(cd "$(dirname "$0")" && pwd)
LOG=${OUT:-/tmp/skein-ucx}
mkdir -p "$LOG"
GPU_BYTES=${GPU_BYTES:-2147483648}
BENCH_BYTES=${BENCH_BYTES:-2G}
BENCH_BIN=${BENCH_BIN:-$D/bin/skein-xfer-bench}
if [ -z "${SKEIN_UCP_LIB:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libucp.so.0 '; then
	f=$(find /usr /opt $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
		-name libucp.so.0 2>/dev/null | head -n 1)
	[ -n "$f" ] && export SKEIN_UCP_LIB=$f
fi
echo "== host: $(nproc) cores; libucp: ${SKEIN_UCP_LIB:-$(ldconfig -p | awk '/libucp.so.0 /{print $NF; exit}')}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
command -v ucx_info >/dev/null && { ucx_info -v | head -n 1; ucx_info -d | grep -E 'Transport|Device' | paste - - | sort -u; }
ls /sys/class/infiniband 2>/dev/null | sed 's/^/infiniband device: /' || true
pass=0; fail=0
count() {
	local line; line=$(grep -E '^# [0-9]+ passed' "$1" | tail -n 1)
	if [ -n "$line" ]; then
		pass=$((pass + $(echo "$line" | sed -E 's/^# ([0-9]+) passed.*/\1/')))
		fail=$((fail + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
	else
		fail=$((fail + 1))
	fi
}
echo "== xfer_ucx_test"
timeout 240 "$D/bin/xfer_ucx_test" > "$LOG/unit.log" 2>&1
grep -E '^(ok|FAIL|#)|^  ' "$LOG/unit.log"
count "$LOG/unit.log"
for tls in ${TLS_LIST:-default sm tcp}; do
	echo "== ucx_gpu_test UCX_TLS=$tls"
	if [ "$tls" = default ]; then (unset UCX_TLS; timeout 150 "$D/bin/ucx_gpu_test" "$GPU_BYTES") > "$LOG/gpu-$tls.log" 2>&1
	else UCX_TLS=$tls timeout 150 "$D/bin/ucx_gpu_test" "$GPU_BYTES" > "$LOG/gpu-$tls.log" 2>&1; fi
	grep -vE '^\[' "$LOG/gpu-$tls.log"
	count "$LOG/gpu-$tls.log"
done
for run in ${BENCH_RUNS:-${TLS_LIST:-default sm tcp} sm:nokeep}; do
	tls=${run%%:*}
	extra=()
	changed=0.01
	for opt in $(echo "${run#"$tls"}" | tr ':' ' '); do
		case $opt in
		nokeep) extra+=(--keep-previous 0) ;;
		s[0-9]*) extra+=(--streams "${opt#s}") ;;
		c[0-9]*) changed=${opt#c} ;;
		esac
	done
	extra+=(--changed "$changed")
	echo "== bench UCX_TLS=$tls ${extra[*]}"
	log="$LOG/bench-${run//:/-}.err"
	if [ "$tls" = default ]; then j=$(unset UCX_TLS; timeout 150 "$BENCH_BIN" --mode p2p-ucx --bytes "$BENCH_BYTES" "${extra[@]}" --format json 2>"$log" | grep "^{")
	else j=$(UCX_TLS=$tls timeout 150 "$BENCH_BIN" --mode p2p-ucx --bytes "$BENCH_BYTES" "${extra[@]}" --format json 2>"$log" | grep "^{"); fi
	echo "RESULT bench tls=$tls ${extra[*]} $j" | tee -a "$LOG/bench.log"
	[ -s "$log" ] && { echo "stderr:"; grep -v profile "$log" | head -n 5; grep profile "$log" | tail -n 2 | cut -c 1-300; }
	[ -n "$j" ] || fail=$((fail + 1))
done
echo "== results"
grep -ah '^RESULT' "$LOG"/gpu-*.log "$LOG/bench.log"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
