#!/usr/bin/env python3
"""tests/python/gpu_torch.py: the skein package with CUDA tensors (H200 machine).

One command checks and times, each beside torch's own device-to-device copy
of the same tensors in the same run (a copy_ per tensor, best of 5):
  1. colocated (CUDA IPC): a publisher and a receiver process on one GPU,
     IPC_BYTES of bf16 in 300 tensors, 4 versions bit-exact; the copy part
     (libskein's data time) without device verification, then one version
     with verify_device (checksums on the CPU) timed separately;
  2. p2p-tcp from device memory to device memory, TCP_BYTES in 300 tensors,
     3 versions bit-exact (the receiver's undo journal on, the default);
  3. a real model: the example's 21 M-parameter MLP trained with AdamW on
     the GPU in one process, its bf16 copy published over colocated to an
     engine process each step; the engine's probe logits against the
     trainer's: gap 0 at every version.
Usage: gpu_torch.py [IPC_BYTES] [TCP_BYTES]   (defaults 8 GiB, 2 GiB)
Prints "ok"/"FAIL" lines, a RESULT line per part and "# N passed, M failed".
"""
import multiprocessing as mp
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
for p in (os.path.join(HERE, "..", "..", "python"), os.path.join(HERE, "..", "..", "examples", "torch"), HERE):
    sys.path.insert(0, os.path.normpath(p))
import torch  # noqa: E402
import skein  # noqa: E402

NT = 300
RESULTS = {"pass": 0, "fail": 0}


def check(ok, what):
    RESULTS["pass" if ok else "fail"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)


def make(total, dev="cuda"):
    n = total // NT // 2
    return {f"layer.{i}.weight": torch.empty(n, dtype=torch.bfloat16, device=dev) for i in range(NT)}


def fill(ts, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    for t in ts.values():
        t.view(torch.int16).random_(generator=g)


def exact(ts, seed):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    ok = True
    for t in ts.values():
        want = torch.empty_like(t.view(torch.int16)).random_(generator=g)
        ok &= bool(torch.equal(want, t.view(torch.int16)))
    return ok


def torch_copy(ts, reps=5):
    """torch's own device-to-device copy of the same tensors: best of reps."""
    dst = {k: torch.empty_like(v) for k, v in ts.items()}
    best = 1e9
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k, v in ts.items():
            dst[k].copy_(v)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    del dst
    return best


def receiver(conn, mode, total, versions, verify):
    try:
        torch.cuda.set_device(0)
        ts = make(total)
        with skein.Receiver(ts, mode=mode, port=0, verify_device=verify, timeout=120) as r:
            conn.send(r.port)
            for _ in range(versions):
                v = r.wait(timeout=300)
                torch.cuda.synchronize()
                conn.send((v, exact(ts, v), r.last["skein/data_time"]))
    except Exception as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))


def get(conn, secs=300):
    """The child's next message; its error, or a child that died, raises."""
    if not conn.poll(secs):
        raise RuntimeError(f"no answer from the child in {secs} s")
    m = conn.recv()
    if isinstance(m, tuple) and m and m[0] == "error":
        raise RuntimeError(m[1])
    return m


def bulk(mode, total, versions, verify, label):
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=receiver, args=(b, mode, total, versions, verify))
    p.start()
    b.close()
    port = get(a)
    ts = make(total)
    rows = []
    with skein.Publisher(ts, mode=mode, host="127.0.0.1", port=port, verify_device=verify, timeout=120) as pub:
        for v in range(1, versions + 1):
            fill(ts, v)
            torch.cuda.synchronize()
            f = pub.publish(v)
            got = get(a)
            rows.append((v, f["perf/update_weights_time"], f["skein/data_time"], got[1]))
            print(f"  {label} v{v}: update {f['perf/update_weights_time']:.4f} s, copy {f['skein/data_time']:.4f} s, "
                  f"exact {got[1]}", flush=True)
    p.join(60)
    tc = torch_copy(ts)
    del ts
    torch.cuda.empty_cache()
    return rows, tc


def part_colocated(total):
    gb = total / 1e9
    rows, tc = bulk("colocated", total, 4, False, "colocated")
    check(all(r[3] for r in rows), f"colocated: 4 versions of {gb:.2f} GB bit-exact between two processes")
    best = min(r[2] for r in rows[1:])  # v1 opens the IPC handles
    print(f"RESULT colocated bytes={total} skein_copy_s={best:.5f} ({gb / best:.0f} GB/s) "
          f"torch_copy_s={tc:.5f} ({gb / tc:.0f} GB/s) ratio={tc / best:.3f} "
          f"update_s={min(r[1] for r in rows[1:]):.5f}", flush=True)
    check(tc / best >= 0.8, f"colocated copy through the package >= 0.8x torch's device copy ({tc / best:.2f}x)")
    rows, _ = bulk("colocated", total, 1, True, "colocated+verify")
    check(all(r[3] for r in rows), "colocated with verify_device: exact")
    print(f"RESULT colocated_verify bytes={total} update_s={rows[0][1]:.3f} copy_s={rows[0][2]:.5f}", flush=True)


def part_tcp(total):
    gb = total / 1e9
    rows, tc = bulk("p2p-tcp", total, 3, True, "p2p-tcp")
    check(all(r[3] for r in rows), f"p2p-tcp device to device: 3 versions of {gb:.2f} GB bit-exact")
    best = min(r[1] for r in rows)
    print(f"RESULT p2p-tcp bytes={total} update_s={best:.4f} ({gb / best:.2f} GB/s) torch_copy_s={tc:.5f} "
          f"({gb / tc:.0f} GB/s)", flush=True)


def engine(conn, steps):
    try:
        import model
        torch.cuda.set_device(0)
        net = model.Net().to("cuda", torch.bfloat16)
        net.requires_grad_(False)
        probe = model.probe().cuda()
        with skein.Receiver(net.named_parameters(), mode="colocated", port=0, timeout=120) as r:
            conn.send(r.port)
            for _ in range(steps):
                v = r.wait(timeout=300)
                with torch.no_grad():
                    conn.send((v, net(probe).cpu(), r.last["skein/data_time"]))
    except Exception as e:
        conn.send(("error", f"{type(e).__name__}: {e}"))


def part_model(steps=8):
    import model
    import torch.nn.functional as F
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=engine, args=(b, steps))
    p.start()
    b.close()
    port = get(a)
    torch.manual_seed(model.SEED)
    net = model.Net().cuda()
    serve = model.Net().to("cuda", torch.bfloat16)
    serve.requires_grad_(False)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
    probe = model.probe().cuda()
    gaps, losses, times = [], [], []
    with skein.Publisher(serve.named_parameters(), mode="colocated", host="127.0.0.1", port=port, timeout=120) as pub:
        for v in range(1, steps + 1):
            x, y = model.batch(v, 0)
            loss = F.cross_entropy(net(x.cuda()), y.cuda())
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for s, q in zip(serve.parameters(), net.parameters()):
                    s.copy_(q)
                ref = serve(probe).cpu()
            f = pub.publish(v)
            got = get(a)
            gaps.append((got[1].float() - ref.float()).abs().max().item())
            losses.append(loss.item())
            times.append(f["perf/update_weights_time"])
    p.join(60)
    check(all(g == 0 for g in gaps), f"real model over colocated: gap 0 at all {steps} versions ({gaps})")
    check(losses[-1] < losses[0], f"the loss goes down on the GPU: {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"RESULT model params={model.params(net)} update_s(median)={sorted(times)[len(times) // 2]:.4f}", flush=True)


def main():
    ipc = int(sys.argv[1]) if len(sys.argv) > 1 else 8 << 30
    tcp = int(sys.argv[2]) if len(sys.argv) > 2 else 2 << 30
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, libskein {skein.library_path()}", flush=True)
    for m in ("colocated", "p2p-tcp"):
        print(f"  probe {m}: {skein.probe(m)}", flush=True)
    for name, fn in (("colocated", lambda: part_colocated(ipc)), ("p2p-tcp", lambda: part_tcp(tcp)),
                     ("model", part_model)):
        t0 = time.monotonic()
        try:
            fn()
        except Exception:
            check(False, f"{name}: raised")
            traceback.print_exc(limit=5)
        print(f"  ({name}: {time.monotonic() - t0:.1f} s)", flush=True)
    print(f"# {RESULTS['pass']} passed, {RESULTS['fail']} failed")
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
