#!/usr/bin/env bash
# tests/transfer/gpu_kernels_fresh.sh: the GPU kernels embedded in libskein
# (transfer/gpu/gen/xfer_gpu_kernels.c) were generated from the sources as they are
# now; else run tools/gen_gpu_kernels.sh where nvcc is and commit the result.
set -u
cd "$(dirname "$0")/../.."
want=$(cat transfer/gpu/xfer_gpu.cu transfer/core/xfer_xxh3.h | sha256sum | cut -d' ' -f1)
have=$(sed -n 's/^const char xfer_gpu_fatbin_sources\[\] = "\([0-9a-f]*\)";/\1/p' transfer/gpu/gen/xfer_gpu_kernels.c)
if [ "$want" = "$have" ]; then
	echo "ok   gpu kernels fresh ($have)"
	echo "# 1 passed, 0 failed"
	exit 0
fi
echo "FAIL transfer/gpu/gen/xfer_gpu_kernels.c was built from other sources ($have, now $want): run tools/gen_gpu_kernels.sh"
echo "# 0 passed, 1 failed"
exit 1
