#!/usr/bin/env bash
# tests/gpu/ucx_pack.sh DIR: packs p2p-ucx's GPU-host run into DIR, built
# here (Debian 12, glibc 2.36; the H200 host runs these binaries as they
# are): bin/ (xfer_ucx_test, ucx_gpu_test, skein-xfer-bench), lib/
# (libxxhash, libzstd and libprotobuf-c, found through the binaries' rpath) and run.sh
# (tests/gpu/ucx_run.sh).  UCX itself is the host's libucp.so.0 (dlopen'd).
# Build first: make -j2 && make build/release/tests/xfer_ucx_test.
#   tests/gpu/ucx_pack.sh /work/main/.ucx-gpu   (then carry .ucx-gpu)
set -eu
cd "$(dirname "$0")/../.."
D=$1
O=build/release
mkdir -p "$D/bin" "$D/lib"
CF="-std=c11 -O2 -g -D_GNU_SOURCE -I."
LIBS="-lxxhash -lzstd -lprotobuf-c -ldl -lpthread -lm -Wl,-rpath,\$ORIGIN/../lib"
gcc $CF -o "$D/bin/ucx_gpu_test" tests/gpu/ucx_gpu_test.c $O/libskein.a $LIBS
gcc -o "$D/bin/skein-xfer-bench" $O/transfer/tools/xfer_bench.o $O/transfer/tools/xfer_sim.o $O/libskein.a $LIBS
gcc -o "$D/bin/xfer_ucx_test" $O/tests/unit/xfer_ucx_test.o $O/tests/t_main.o $O/libskein.a $O/libskcommon.a $LIBS
cp -L /usr/lib/x86_64-linux-gnu/libxxhash.so.0 /usr/lib/x86_64-linux-gnu/libzstd.so.1 \
	/usr/lib/x86_64-linux-gnu/libprotobuf-c.so.1 "$D/lib/"
cp tests/gpu/ucx_run.sh "$D/run.sh"
echo "packed into $D"
