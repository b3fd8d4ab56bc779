#!/usr/bin/env bash
# tests/gpu/nccl_stand_in.sh: builds libskein (gcc, no make) as tests/gpu/run.sh
# does, then tests/unit/xfer_nccl_test on the GPU: the real CUDA runtime, driver and
# kernels, the stand-in NCCL (two ranks on one GPU, which real NCCL refuses).
#   1. every test of xfer_nccl_test (undo scenarios, refusals, 8 MiB timing check);
#   2. the overlap timing at BENCH_BYTES (default 1 GiB, 8 buckets), GPU hashing;
#   3. the same with CPU threads hashing (SKEIN_NCCL_TEST_BENCH_CPU=1).
# LOCAL=1: the stand-in CUDA runtime too (a dry run on a machine without a GPU).
# Needs .gpu-deps/ as tests/gpu/run.sh describes, with the generated messages in
# .gpu-deps/gen/proto.  Logs and RESULT lines go to $OUT (the device tool's folder).
set -u
cd "$(dirname "$0")/../.."
LOG=${OUT:-/tmp/ncclgpu}; mkdir -p "$LOG"
CUDA=/usr/local/cuda; B=$(mktemp -d); trap 'rm -rf "$B"' EXIT
BENCH_BYTES=${BENCH_BYTES:-1073741824}
XSO=$(ls .gpu-deps/lib/libxxhash.so.0.* | head -n 1); ln -sf "$(basename "$XSO")" .gpu-deps/lib/libxxhash.so.0
PSO=$(ls .gpu-deps/lib/libprotobuf-c.so.1.* | head -n 1); ln -sf "$(basename "$PSO")" .gpu-deps/lib/libprotobuf-c.so.1
INC="-I. -I$CUDA/include -I.gpu-deps/include -I.gpu-deps/gen"
XLIBS="$PWD/$XSO $PWD/$PSO -Wl,-rpath,$PWD/.gpu-deps/lib .gpu-deps/lib/libzstd.a"
CF="-std=c11 -O2 -g -D_GNU_SOURCE -fPIC -Wall -Wextra -Werror -Wno-unused-parameter -Wno-format-truncation"
echo "== build"
export CF INC B
ls transfer/core/*.c transfer/paths/*.c transfer/gpu/*.c transfer/gpu/gen/*.c transfer/update/*.c $(ls transfer/engine/*.c 2>/dev/null) |
  xargs -P "$(nproc)" -I{} sh -c 'gcc $CF $INC -c {} -o $B/$(basename {} .c).o' || exit 1
for f in weights control; do gcc $CF -Wno-shadow $INC -c .gpu-deps/gen/proto/$f.pb-c.c -o $B/$f.pb-c.o || exit 1; done
ar rcs $B/libskein.a $B/*.o
gcc $CF $INC tests/unit/xfer_nccl_test.c tests/t_main.c common/sk_rng.c $B/libskein.a $XLIBS -ldl -lpthread -lm -lrt -o $B/xfer_nccl_test || exit 1
gcc $CF -shared -o $B/libfake_nccl.so tests/fakecuda/fake_nccl.c -lrt -ldl -lpthread || exit 1
export SKEIN_FAKE_NCCL=$B/libfake_nccl.so
if [ "${LOCAL:-0}" = 1 ]; then
  gcc $CF -shared -o $B/libfake_cudart.so tests/fakecuda/fake_cudart.c -lrt -lpthread || exit 1
  export SKEIN_FAKE_CUDART=$B/libfake_cudart.so
else
  export SKEIN_NCCL_TEST_REAL_CUDA=1 SKEIN_CUDART_LIB=$CUDA/lib64/libcudart.so
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
nproc
echo "== xfer_nccl_test (all)"
t=$(date +%s%N); timeout 150 $B/xfer_nccl_test 2>&1 | tee "$LOG/test.log"; echo "(took $((($(date +%s%N) - t) / 1000000)) ms)"
echo "== overlap timing, GPU hashing, $BENCH_BYTES bytes"
SKEIN_NCCL_TEST_BENCH_BYTES=$BENCH_BYTES timeout 120 $B/xfer_nccl_test overlap_timing 2>&1 | tee "$LOG/bench-gpu.log"
echo "== overlap timing, CPU hashing, $BENCH_BYTES bytes"
SKEIN_NCCL_TEST_BENCH_BYTES=$BENCH_BYTES SKEIN_NCCL_TEST_BENCH_CPU=1 timeout 120 $B/xfer_nccl_test overlap_timing 2>&1 | tee "$LOG/bench-cpu.log"
echo "== results"
grep -h '^RESULT' "$LOG"/bench-*.log | tee "$LOG/results.txt"
grep -h "^# " "$LOG"/test.log "$LOG"/bench-*.log
