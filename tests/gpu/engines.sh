#!/usr/bin/env bash
# tests/gpu/engines.sh: issue 24's H200 case (docs/engines.md): checkpoint-engine's
# protocol over CUDA IPC into a process holding the Qwen3-1.7B architecture
# (transformers, random init), logits bit for bit after every version, and the
# Targets' rows beside their baselines (tests/gpu/engines_gpu.py).
# Needs python3 with torch (CUDA) and transformers, libskein.so (SKEIN_LIB) and
# libzmq.so.5 (SKEIN_ZMQ_LIB, or on the loader's path): no pyzmq.  A host
# without them: the carried folder ENGINES_LIBS (libskein.so, libzmq.so.5 and
# their libraries) goes on LD_LIBRARY_PATH.
#   ENGINES_LAYERS=N: fewer layers (a quick check); ENGINES_VERSIONS (default 4)
# Prints the table and "# N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if [ -n "${ENGINES_LIBS:-}" ]; then
	export LD_LIBRARY_PATH=$ENGINES_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export SKEIN_LIB=${SKEIN_LIB:-$ENGINES_LIBS/libskein.so} SKEIN_ZMQ_LIB=${SKEIN_ZMQ_LIB:-$ENGINES_LIBS/libzmq.so.5}
fi
if ! "$PY" -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
	echo "skip: no CUDA torch with transformers for $PY"; echo "# 0 passed, 0 failed"; exit 0
fi
out=$(mktemp)
"$PY" tests/gpu/engines_gpu.py --layers "${ENGINES_LAYERS:-0}" --versions "${ENGINES_VERSIONS:-4}" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && grep -q 'bit for bit at every version and path: yes' "$out"; then
	echo "ok   logits equal bit for bit after every version (device copy, torch IPC, pinned copy, restart)"
	echo "# 1 passed, 0 failed"
else
	echo "FAIL the CUDA IPC path (rc $rc)"; echo "# 0 passed, 1 failed"
fi
rm -f "$out"
[ "$rc" = 0 ]
