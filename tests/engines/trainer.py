#!/usr/bin/python3
"""tests/engines/trainer.py: a trainer publishing a small model inside a skein
job (coordinated updates) and logging each committed version's sha256:
"version V digest D" (the digest fake_sglang.py's /generate answers).
Every tensor changes at every step (fixed seed).  Publishes versions until
--steps, --interval-ms apart."""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import skein  # noqa: E402
from fake_sglang import digest  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--interval-ms", type=int, default=300)
    a = ap.parse_args()
    g = torch.Generator().manual_seed(1)
    with open(a.layout) as f:
        params = [(it["name"], torch.zeros(it["shape"], dtype=getattr(torch, it["dtype"]))) for it in json.load(f)]
    with skein.Publisher(params) as pub:
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
