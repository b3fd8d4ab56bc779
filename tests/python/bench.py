#!/usr/bin/python3
"""tests/python/bench.py: the Python package's overhead over the C call.

300 bf16 tensors (BENCH_TENSOR_KIB each, default 16 KiB: small, so the
overhead is not lost in the transfer's own time), REPS versions per data
path.  For each publish and receive: the wall time of the Python call
(skein.Publisher.publish / skein.Receiver.wait, measured around it) beside
libskein's own timing of the C call inside it (xfer_stats.seconds, same call,
same bytes); the difference is what Python adds (ctypes, locking, the
figures dict).  p2p-tcp's receiver runs in its own process, as an engine
would.  Target: at most 2 ms per publish and per receive.
"""
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "python")))
import torch  # noqa: E402
import skein  # noqa: E402

NT = 300
KIB = int(os.environ.get("BENCH_TENSOR_KIB", "16"))
REPS = int(os.environ.get("REPS", "30"))
torch.set_num_threads(1)


def tensors(fill):
    return {f"model.layers.{i}.weight": torch.full((KIB * 512,), fill, dtype=torch.bfloat16) for i in range(NT)}


def timed_wait(r, timeout):
    t0 = time.perf_counter()
    v = r.wait(timeout=timeout)
    return v, time.perf_counter() - t0, r.stats.seconds


def p2p_receiver(conn):
    dst = tensors(0.0)
    with skein.Receiver(dst, mode="p2p-tcp", port=0) as r:
        conn.send(r.port)
        out = []
        for _ in range(REPS):
            v, wall, c = timed_wait(r, 30)
            out.append((wall, c))
        conn.send(out)


def run(mode):
    src = tensors(1.0)
    t0 = time.perf_counter()
    pubs, recvs = [], []
    if mode == "disk-delta":
        d = tempfile.mkdtemp(prefix="skein-py-bench.")
        pub = skein.Publisher(src, mode=mode, dir=d)
        build = time.perf_counter() - t0
        rec = skein.Receiver(tensors(0.0), mode=mode, dir=d)
    else:
        ctx = mp.get_context("fork")
        a, b = ctx.Pipe()
        p = ctx.Process(target=p2p_receiver, args=(b,))
        p.start()
        port = a.recv()
        t0 = time.perf_counter()
        pub = skein.Publisher(src, mode=mode, host="127.0.0.1", port=port)
        build = time.perf_counter() - t0
    for v in range(1, REPS + 1):
        src["model.layers.0.weight"][v % 100] += 1  # something changes
        t0 = time.perf_counter()
        pub.publish(v)
        pubs.append((time.perf_counter() - t0, pub.stats.seconds))
        if mode == "disk-delta":
            got, wall, c = timed_wait(rec, 5)
            recvs.append((wall, c))
    if mode == "disk-delta":
        rec.close()
    else:
        recvs = a.recv()
        p.join(10)
    pub.close()
    return build, pubs, recvs


def row(mode, what, samples):
    wall = statistics.median(s[0] for s in samples) * 1e3
    c = statistics.median(s[1] for s in samples) * 1e3
    over = statistics.median(s[0] - s[1] for s in samples) * 1e3
    worst = max(s[0] - s[1] for s in samples) * 1e3
    print(f"| {mode} | {what} | {wall:.3f} | {c:.3f} | {over:.3f} | {worst:.3f} | "
          f"{'met' if over <= 2 else 'MISSED'} |")
    return over


def main():
    mb = NT * KIB / 1024
    print(f"{NT} bf16 tensors of {KIB} KiB ({mb:.1f} MiB), {REPS} versions, median (ms); torch {torch.__version__}")
    print("| path | call | Python wall | C call (libskein's timing) | Python overhead | worst overhead | <= 2 ms |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for mode in ("disk-delta", "p2p-tcp"):
        build, pubs, recvs = run(mode)
        worst = max(worst, row(mode, "publish", pubs), row(mode, "receive", recvs))
        print(f"| {mode} | Publisher() of 300 tensors (once) | {build * 1e3:.3f} | | | | |")
    return 0 if worst <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
