#!/usr/bin/env python3
"""tests/gpu/engines_gpu.py: checkpoint-engine's protocol over CUDA IPC into a
process holding a real transformers model (docs/engines.md), on one GPU.

The trainer side (this process) holds the Qwen3-1.7B architecture (from its
config, random init: nothing is downloaded) and skein's copy: one uint8
buffer with every tensor at a 256-byte aligned offset, as the sidecar holds
it (python/skein/sidecar.py).  The engine (a child process, the same model
with other random weights, like --load-format dummy) receives each version
through our receiver (skein._ckpt.serve: the stock one's steps, the handle's
device rewritten to its own) and loads it by name.  After every version the
engine's logits of a fixed batch must equal the trainer's bit for bit
(sha256 of their bytes).  Every byte changes at every version.

Rows (each beside its baseline from the same run):
  apply, copy in device memory  vs torch's own CUDA IPC of the same tensors
                                 (reduce_tensor handles, then copy_ per tensor)
  publish to ready              (the colocated copy into skein's buffer + the apply) vs the same baseline
  apply, copy in pinned host    vs a plain host-to-device copy of the same bytes
  engine restart: start -> ready at the committed version vs start -> first answer
The ZeroMQ bytes go through libskein's eng_zmq (libzmq from C): no pyzmq.
"""
import argparse
import hashlib
import os
import pickle
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from skein import _ckpt  # noqa: E402

# Qwen3-1.7B's config.json (the architecture only)
QWEN3_1_7B = dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                  rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, hidden_act="silu",
                  attention_bias=False, torch_dtype="bfloat16")


def build(seed, layers=None):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = dict(QWEN3_1_7B)
    if layers:
        cfg["num_hidden_layers"] = layers
    torch.manual_seed(seed)
    with torch.device("cuda"):
        m = Qwen3ForCausalLM(Qwen3Config(**cfg)).to(torch.bfloat16)
    m.eval().requires_grad_(False)
    return m


def batch():
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, QWEN3_1_7B["vocab_size"], (2, 64), generator=g).cuda()


def logits_sha(model, ids):
    with torch.no_grad():
        out = model(input_ids=ids).logits
    torch.cuda.synchronize()
    return hashlib.sha256(out.contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


# ---------------------------------------------------------------- engine
def engine(a):
    t0 = time.perf_counter()
    m = build(seed=999, layers=a.layers)
    params = dict(m.named_parameters())
    ids = batch()
    out = sys.stdout
    print(f"up {time.perf_counter() - t0:.3f}", file=out, flush=True)

    def load(views):
        for name, v in views:
            params[name].copy_(v)
    for line in iter(sys.stdin.buffer.readline, b""):  # binary: "ipc N" is followed by N pickled bytes
        w = line.decode().split()
        if not w:
            continue
        t = time.perf_counter()
        if w[0] == "apply":  # our receiver, the stock one's steps
            _ckpt.serve(w[1], load, post_hook=torch.cuda.synchronize, device=torch.cuda.current_device(),
                        timeout_s=120)
        elif w[0] == "ipc":  # torch's own CUDA IPC: one handle per tensor, then copy_
            n = int(w[1])
            handles = pickle.loads(_read_exact(n))
            for name, (fn, args) in handles:
                params[name].copy_(fn(*args))
            torch.cuda.synchronize()
        elif w[0] == "quit":
            return
        ta = time.perf_counter()  # applied: the weights are in place (CLOCK_MONOTONIC, shared with the trainer)
        print(f"done {logits_sha(m, ids)} {ta - t:.6f} {ta:.6f}", file=out, flush=True)


def _read_exact(n):
    b = b""
    while len(b) < n:
        c = sys.stdin.buffer.read(n - len(b))
        if not c:
            raise EOFError
        b += c
    return b


# ---------------------------------------------------------------- trainer
class Engine:
    def __init__(self, a):
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--engine", "--layers", str(a.layers or 0)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        w = self.p.stdout.readline().split()
        if not w or w[0] != b"up":
            raise SystemExit("engine did not start")
        self.up_s = time.perf_counter() - self.t0

    def cmd(self, line, payload=b""):
        self.p.stdin.write(line.encode() + b"\n" + payload)
        self.p.stdin.flush()

    def done(self):
        """(logits sha, the engine's own apply time, when it was applied)"""
        w = self.p.stdout.readline().split()
        if not w or w[0] != b"done":
            raise SystemExit(f"engine answered {w}")
        return w[1].decode(), float(w[2]), float(w[3])

    def close(self):
        try:
            self.cmd("quit")
            self.p.wait(30)
        except Exception:
            self.p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", action="store_true")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers (a quick check); 0: the model's 28")
    ap.add_argument("--versions", type=int, default=4)
    ap.add_argument("--bucket-mib", type=int, default=1024)
    a = ap.parse_args()
    if a.engine:
        return engine(a)
    from torch.multiprocessing.reductions import reduce_tensor
    m = build(seed=1, layers=a.layers)
    named = list(m.named_parameters())
    ids = batch()
    metas, off = [], 0
    for name, p in named:
        nb = p.numel() * p.element_size()
        metas.append({"name": name, "shape": p.shape, "dtype": p.dtype, "offset": off, "nbytes": nb})
        off = _ckpt.align(off + nb)
    total = sum(mm["nbytes"] for mm in metas)
    largest = max(mm["nbytes"] for mm in metas)
    bucket = max(a.bucket_mib << 20, largest)
    # the pinned path's bucket sizes: the smallest possible (the largest tensor), the default, fewer and larger
    pin_buckets = sorted({largest, bucket, max(2 * bucket, largest)})
    flat = torch.empty(off, dtype=torch.uint8, device="cuda")     # skein's copy, device memory
    host = torch.empty(off, dtype=torch.uint8).pin_memory()       # skein's copy, pinned host memory
    stagings = {b: torch.empty(2 * b, dtype=torch.uint8, device="cuda") for b in pin_buckets}
    print(f"model: Qwen3 {len(named)} tensors, {total / 1e9:.3f} GB bf16; bucket {bucket >> 20} MiB; "
          f"pinned buckets {[b >> 20 for b in pin_buckets]} MiB; torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    eng = Engine(a)
    d = tempfile.mkdtemp(prefix="skein-ipc-")
    pin_keys = [(b, ov) for b in pin_buckets for ov in (True, False)]
    rows = {k: [] for k in ["apply_dev", "ipc", "publish_ready", "h2d", "apply_dev_e2e", "ipc_e2e"] + pin_keys}
    bad = 0

    def views(buf):
        return [buf[mm["offset"]:mm["offset"] + mm["nbytes"]].view(mm["dtype"]).view(mm["shape"]) for mm in metas]

    def apply(e, buf, bkt, staging=None, overlap=True):
        """One apply through our sender into engine e: (logits sha, commit -> applied s, -> logits answered s)."""
        addr = f"ipc://{d}/{secrets.token_hex(8)}"
        s = _ckpt.Zmq(addr, False, 120)
        t = time.perf_counter()
        e.cmd(f"apply {addr}")
        _ckpt.send(s, buf, metas, bkt, staging, overlap=overlap)
        got, _, ta = e.done()
        s.close()
        return got, ta - t, time.perf_counter() - t
    fv, hv = views(flat), views(host)
    for v in range(1, a.versions + 1):
        with torch.no_grad():
            for _, p in named:  # every byte changes
                p.copy_(torch.randn_like(p, dtype=torch.float32).mul_(0.02).to(p.dtype))
        want = logits_sha(m, ids)
        # the colocated receive's part: the trainer's tensors into skein's copy
        torch.cuda.synchronize()
        tc = time.perf_counter()
        for (_, p), dst in zip(named, fv):
            dst.copy_(p)
        torch.cuda.synchronize()
        copy_s = time.perf_counter() - tc
        # 1. apply from the device copy (no staging: the copy is the shared buffer)
        got, ap_s, e2e = apply(eng, flat, bucket)
        bad += got != want
        rows["apply_dev"].append(ap_s)
        rows["apply_dev_e2e"].append(e2e)
        rows["publish_ready"].append(copy_s + ap_s)
        print(f"v{v} device copy: apply {ap_s * 1e3:.1f} ms (+ copy into skein's buffer {copy_s * 1e3:.1f} ms; "
              f"with the engine's logits check {e2e * 1e3:.1f} ms) logits {'equal' if got == want else 'DIFFER'}",
              flush=True)
        # 2. torch's own CUDA IPC of the same tensors (the baseline)
        t = time.perf_counter()
        payload = pickle.dumps([(name, reduce_tensor(p)) for name, p in named])
        eng.cmd(f"ipc {len(payload)}", payload)
        got, _, ta = eng.done()
        rows["ipc"].append(ta - t)
        rows["ipc_e2e"].append(time.perf_counter() - t)
        bad += got != want
        # 3. apply from pinned host memory through the staging buffer: each bucket size, pipelined or not
        for src, dst in zip(fv, hv):
            dst.copy_(src)
        torch.cuda.synchronize()
        line = []
        for b, ov in pin_keys:
            got, ap_s, _ = apply(eng, host, b, stagings[b], ov)
            rows[(b, ov)].append(ap_s)
            bad += got != want
            line.append(f"{b >> 20} MiB {'overlapped' if ov else 'serial'} {ap_s * 1e3:.1f} ms"
                        f"{'' if got == want else ' DIFFER'}")
        # its baseline: a plain host-to-device copy of the same bytes
        torch.cuda.synchronize()
        t = time.perf_counter()
        flat.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        rows["h2d"].append(time.perf_counter() - t)
        print(f"v{v} torch IPC {rows['ipc'][-1] * 1e3:.1f} ms (with logits {rows['ipc_e2e'][-1] * 1e3:.1f} ms); "
              f"H2D {rows['h2d'][-1] * 1e3:.1f} ms; pinned apply: {'; '.join(line)}", flush=True)
    eng.close()
    # engine restart: a new process, start -> first answer, and start -> ready at the committed version
    e2 = Engine(a)
    got, _, _ = apply(e2, flat, bucket)
    ready_s = time.perf_counter() - e2.t0
    bad += got != want
    e2.close()
    os.rmdir(d) if not os.listdir(d) else None

    def med(k):
        return statistics.median(rows[k][1:] or rows[k]) * 1e3  # the first version warms up
    best = min(pin_keys, key=med)
    print("\n| row (median of v2..) | skein | baseline, same run | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| apply, copy in device memory | {med('apply_dev'):.1f} ms | torch CUDA IPC {med('ipc'):.1f} ms | "
          f"{med('apply_dev') / med('ipc'):.2f}x | <= 1.5x |")
    print(f"| publish to ready (copy + apply) | {med('publish_ready'):.1f} ms | torch CUDA IPC {med('ipc'):.1f} ms | "
          f"{med('publish_ready') / med('ipc'):.2f}x | <= 3x |")
    for k in pin_keys:
        print(f"| apply, pinned host, {k[0] >> 20} MiB buckets, {'overlapped' if k[1] else 'serial'} | "
              f"{med(k):.1f} ms | H2D copy {med('h2d'):.1f} ms | {med(k) / med('h2d'):.2f}x | <= 1.3x |")
    print(f"| engine restart: start -> ready | {ready_s:.2f} s | start -> first answer {e2.up_s:.2f} s | "
          f"+{ready_s - e2.up_s:.2f} s | <= +2 s |")
    print(f"\nbest pinned: {best[0] >> 20} MiB {'overlapped' if best[1] else 'serial'}; with the engine's logits "
          f"check in the time (the old measure): device apply {med('apply_dev_e2e'):.1f} ms, torch IPC "
          f"{med('ipc_e2e'):.1f} ms")
    print(f"\nlogits equal bit for bit at every version and path: {'yes' if bad == 0 else f'NO ({bad} differ)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main() or 0)
