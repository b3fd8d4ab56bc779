#!/usr/bin/python3
"""tests/engines/trainer.py: a trainer publishing a small model inside a skein
job (coordinated updates) and logging each committed version's sha256:
"version V digest D" (the digest fake_sglang.py's /generate answers).
Every tensor changes at every step (fixed seed).  Publishes versions until
--steps, --interval-ms apart.  --fake-device (broadcast, broadcast_packed and
colocated jobs without a GPU): each tensor is allocated by the stand-in CUDA
runtime ($SKEIN_CUDART_LIB, tests/fakecuda: host shared memory, CUDA IPC
handles libskein can export) and declared to libskein as device memory."""
import argparse
import ctypes
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import skein  # noqa: E402
from skein import _lib as L  # noqa: E402
from fake_sglang import digest  # noqa: E402


class FakeDevicePublisher(skein.Publisher):
    def _build(self, path, kw):
        for e in self._entries:
            e.mem, e.device = L.MEM_CUDA, 0
        super()._build(path, kw)


def fake_device_tensor(shape, dtype):
    """A tensor over the stand-in runtime's cudaMalloc (host memory there)."""
    lib = ctypes.CDLL(os.environ["SKEIN_CUDART_LIB"])  # the handle libskein dlopens too: one table
    n = max(1, torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size())
    p = ctypes.c_void_p()
    if lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) != 0:
        sys.exit(f"trainer: stand-in cudaMalloc of {n} bytes failed")
    buf = (ctypes.c_uint8 * n).from_address(p.value)
    t = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).view(shape)
    t.zero_()
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--interval-ms", type=int, default=300)
    ap.add_argument("--fake-device", action="store_true")
    a = ap.parse_args()
    g = torch.Generator().manual_seed(1)
    make = fake_device_tensor if a.fake_device else (lambda shape, dt: torch.zeros(shape, dtype=dt))
    with open(a.layout) as f:
        params = [(it["name"], make(it["shape"], getattr(torch, it["dtype"]))) for it in json.load(f)]
    with (FakeDevicePublisher if a.fake_device else skein.Publisher)(params) as pub:
        v = pub.newest_version()
        for _ in range(a.steps):
            for _, t in params:
                t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))
            v += 1
            try:
                f = pub.publish(v)
                print(f"version {v} digest {digest(params)} update_weights_time {f['perf/update_weights_time']:.4f}",
                      flush=True)
            except skein.Aborted as e:
                print(f"aborted {v}: {e}", flush=True)
            time.sleep(a.interval_ms / 1000)


if __name__ == "__main__":
    main()
