#!/usr/bin/python3
"""tests/engines/bench_cpu.py: the CPU Target of issue 24 (docs/engines.md):
applying a 64 MiB model through checkpoint-engine's protocol (shared host
memory, ForkingPickler over file_system, our receiver in another process)
beside a plain copy of the same bytes: with a staging copy (the protocol's
two-bucket buffer, target <= 3x) and where skein's copy is itself the shared
buffer (target <= 2x).  Prints the medians of 7 applies (the first dropped)."""
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from skein import _ckpt  # noqa: E402

N_T, MIB = 16, 64
if len(sys.argv) > 1 and sys.argv[1] == "--engine":
    params = {f"w{i}": torch.empty(MIB * 2**20 // N_T // 2, dtype=torch.bfloat16) for i in range(N_T)}

    def load(views):
        for name, v in views:
            params[name].copy_(v)
    print("up", flush=True)
    for line in sys.stdin:
        _ckpt.serve(line.split()[1], load, timeout_s=30)
        print("done", flush=True)
    sys.exit(0)

torch.set_num_threads(1)
metas, off = [], 0
for i in range(N_T):
    n = MIB * 2**20 // N_T
    metas.append({"name": f"w{i}", "shape": torch.Size([n // 2]), "dtype": torch.bfloat16, "offset": off, "nbytes": n})
    off = _ckpt.align(off + n)
import torch.multiprocessing as mp  # noqa: E402
mp.set_sharing_strategy("file_system")
flat = torch.randint(0, 255, (off,), dtype=torch.uint8).share_memory_()
staging = torch.empty(2 * 16 * 2**20, dtype=torch.uint8).share_memory_()
dst = torch.empty(off, dtype=torch.uint8)
eng = subprocess.Popen([sys.executable, __file__, "--engine"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert eng.stdout.readline().strip() == "up"
d = tempfile.mkdtemp(prefix="skein-ipc-")


def apply(stg):
    addr = f"ipc://{d}/{secrets.token_hex(8)}"
    s = _ckpt.Zmq(addr, False, 30)
    t = time.perf_counter()
    eng.stdin.write(f"apply {addr}\n")
    eng.stdin.flush()
    _ckpt.send(s, flat, metas, 16 * 2**20, stg)
    assert eng.stdout.readline().strip() == "done"
    s.close()
    return time.perf_counter() - t


def plain():
    t = time.perf_counter()
    dst.copy_(flat)
    return time.perf_counter() - t


rows = {"shared": [apply(None) for _ in range(7)][1:], "staging": [apply(staging) for _ in range(7)][1:],
        "plain": [plain() for _ in range(7)][1:]}
eng.stdin.close()
eng.wait()
m = {k: statistics.median(v) * 1e3 for k, v in rows.items()}
print(f"plain copy of {MIB} MiB: {m['plain']:.1f} ms")
print(f"apply, skein's copy is the shared buffer: {m['shared']:.1f} ms = {m['shared'] / m['plain']:.2f}x (target <= 2x)")
print(f"apply, with a staging copy: {m['staging']:.1f} ms = {m['staging'] / m['plain']:.2f}x (target <= 3x)")
