#!/usr/bin/env python3
"""tests/gpu/train_regimes.py: a real transformers model trained with AdamW and
published each step through the package's colocated mode (issue 27, item 4),
beside torch's own CUDA IPC of the same tensors in the same run (H200 machine).

The model: the Qwen3-1.7B architecture from its config (transformers'
Qwen3ForCausalLM, random init on the GPU, nothing downloaded; 310 tensors,
3.44 GB in bf16).  A receiver process holds a bf16 copy (skein.Receiver,
colocated, the undo journal on: the default) and a second bf16 buffer set for
torch's IPC (reduce_tensor handles over a pipe each step, copy_ per tensor,
as Miles's update_weights_from_tensor does).  Three change regimes, one after
the other, versions numbered on:
  bf16   the bf16 weights themselves trained, AdamW lr 1e-4 (every byte changes)
  fp32-5 fp32 master weights, AdamW lr 1e-5, their bf16 copy published
  fp32-6 the same at lr 1e-6
and (JOURNAL_SMALL=1) bf16 again with device_journal_bytes 256 MiB: spills
to the pinned pool allocated at open.  Per version: the bf16 bytes changed
(fraction of 2-byte elements), the publish call and torch's IPC (both timed
by the trainer, request to answer), the journal's bytes, spill and place, and
whether skein's copy equals torch's bit for bit.
Usage: train_regimes.py [STEPS]  (default 6 per regime)
Prints a line per version, RESULT lines per regime and "# N passed, M failed".
"""
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("SKEIN_PY", os.path.normpath(os.path.join(HERE, "..", "..", "python"))))
import torch  # noqa: E402

RESULTS = {"pass": 0, "fail": 0}


def check(ok, what):
    RESULTS["pass" if ok else "fail"] += 1
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)


def config():
    from transformers import Qwen3Config
    return Qwen3Config(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                       max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6)


def build(dtype):
    from transformers import Qwen3ForCausalLM
    torch.manual_seed(1)
    with torch.device("cuda"):
        m = Qwen3ForCausalLM(config())
    return m.to(dtype)


def engine(conn, small):
    try:
        import skein
        torch.cuda.set_device(0)
        net = build(torch.bfloat16)
        net.requires_grad_(False)
        params = dict(net.named_parameters())
        other = {k: torch.empty_like(v) for k, v in params.items()}  # torch IPC's destination
        kw = {"device_journal_bytes": 256 << 20} if small else {}
        with skein.Receiver(params, mode="colocated", port=0, timeout=300, **kw) as r:
            conn.send(r.port)
            while True:
                msg = conn.recv()
                if msg[0] == "stop":
                    break
                if msg[0] == "abort":
                    # v-1 back after v is in place: the undo journal replayed
                    # (xfer_rollback, what the engine loop runs on the head's abort)
                    import ctypes
                    before = {k: t.clone() for k, t in params.items()}
                    v = r.wait(timeout=300)
                    torch.cuda.synchronize()
                    where = r.last.get("skein/journal_where")
                    t0 = time.perf_counter()
                    rc = r._lib.xfer_rollback(r._ep, ctypes.byref(r._err))
                    torch.cuda.synchronize()
                    undo_s = time.perf_counter() - t0
                    back = rc == 0 and all(torch.equal(before[k].view(torch.int16), params[k].view(torch.int16))
                                           for k in params)
                    del before
                    torch.cuda.empty_cache()
                    conn.send((v, rc, undo_s, back, where))
                elif msg[0] == "skein":
                    v = r.wait(timeout=300)
                    torch.cuda.synchronize()
                    conn.send((v, r.last.get("skein/journal_bytes"), r.last.get("skein/journal_spilled_bytes"),
                               r.last.get("skein/journal_where"), r.last.get("perf/update_weights_time")))
                elif msg[0] == "torch":
                    for k, (fn, args) in msg[1].items():
                        other[k].copy_(fn(*args))
                    torch.cuda.synchronize()
                    same = all(torch.equal(params[k].view(torch.int16), other[k].view(torch.int16)) for k in params)
                    conn.send(same)
    except Exception as e:  # the trainer prints it
        import traceback
        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"))


def get(conn, secs=300):
    if not conn.poll(secs):
        raise RuntimeError(f"no answer from the engine in {secs} s")
    m = conn.recv()
    if isinstance(m, tuple) and m and m[0] == "error":
        raise RuntimeError(m[1])
    return m


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2] if s else float("nan")


def run(steps, small):
    import skein
    from torch.multiprocessing.reductions import reduce_tensor
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=engine, args=(b, small))
    p.start()
    b.close()
    port = get(a, 600)
    serve = build(torch.bfloat16)  # what is published: bf16
    sp = dict(serve.named_parameters())
    total = sum(t.numel() for t in sp.values())
    print(f"model: {len(sp)} tensors, {total * 2 / 1e9:.2f} GB bf16", flush=True)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)

    def batch():
        return torch.randint(0, 151936, (4, 256), device="cuda", generator=gen)

    regimes = [("bf16", 1e-4, None)] if small else [("bf16", 1e-4, None), ("fp32-5", 1e-5, 0), ("fp32-6", 1e-6, 0)]
    v = 0
    summary = []
    with skein.Publisher(serve.named_parameters(), mode="colocated", host="127.0.0.1", port=port, timeout=300) as pub:
        for name, lr, master in regimes:
            if master is None:
                net = serve
                serve.requires_grad_(True)
            else:
                serve.requires_grad_(False)
                net = build(torch.float32)
                with torch.no_grad():
                    for q, s in zip(net.parameters(), serve.parameters()):
                        q.copy_(s)
            opt = torch.optim.AdamW(net.parameters(), lr=lr)
            rows = []
            for step in range(steps):
                prev = {k: t.detach().clone() for k, t in sp.items()}
                t0 = time.perf_counter()
                loss = net(input_ids=(x := batch()), labels=x).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if master is not None:
                    with torch.no_grad():
                        for s, q in zip(serve.parameters(), net.parameters()):
                            s.copy_(q)
                torch.cuda.synchronize()
                train_s = time.perf_counter() - t0
                with torch.no_grad():
                    changed = sum((sp[k].view(torch.int16) != prev[k].view(torch.int16)).sum().item() for k in sp)
                del prev
                v += 1
                t0 = time.perf_counter()
                a.send(("skein",))
                f = pub.publish(v)
                got = get(a)
                skein_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                handles = {k: reduce_tensor(t.detach()) for k, t in sp.items()}
                a.send(("torch", handles))
                same = get(a)
                torch_s = time.perf_counter() - t0
                del handles
                rows.append((changed / total, f["perf/update_weights_time"], skein_s, torch_s, same, got, train_s))
                print(f"  {name}{' journal 256MiB' if small else ''} v{v}: changed {changed / total:.4f}, train "
                      f"{train_s * 1e3:.0f} ms, publish {f['perf/update_weights_time'] * 1e3:.1f} ms (with the "
                      f"handshake {skein_s * 1e3:.1f}), torch IPC {torch_s * 1e3:.1f} ms, journal {got[1]} B "
                      f"spilled {got[2]} B on {got[3]}, same as torch {same}", flush=True)
            # one more version, then v-1 put back on the engine (an abort)
            with torch.no_grad():
                for t in sp.values():
                    t.view(torch.int16)[::3] += 1
            v += 1
            a.send(("abort",))
            f = pub.publish(v)
            got = get(a)
            label = name + ("-journal256M" if small else "")
            print(f"RESULT rollback regime={label} v{v}: journal on {got[4]}, undo {got[2] * 1e3:.1f} ms, "
                  f"publish {f['perf/update_weights_time'] * 1e3:.1f} ms", flush=True)
            check(got[1] == 0 and got[3], f"{label}: v{v - 1} back bit for bit after v{v} was in place (rc {got[1]})")
            with torch.no_grad():
                for t in sp.values():
                    t.view(torch.int16)[::3] -= 1
            del opt
            if master is not None:
                del net
            torch.cuda.empty_cache()
            pubs = [r[1] for r in rows[1:]]
            tor = [r[3] for r in rows[1:]]
            mp_, mt = median(pubs), median(tor)
            worst = max(pubs) if pubs else float("nan")
            summary.append((label, rows))
            print(f"RESULT regime={label} changed={min(r[0] for r in rows):.4f}..{max(r[0] for r in rows):.4f} "
                  f"publish_median_ms={mp_ * 1e3:.1f} torch_ipc_median_ms={mt * 1e3:.1f} ratio={mp_ / mt:.2f} "
                  f"worst_after_first_ms={worst * 1e3:.1f} first_ms={rows[0][1] * 1e3:.1f} "
                  f"train_step_median_ms={median([r[6] for r in rows]) * 1e3:.0f}", flush=True)
            check(all(r[4] for r in rows), f"{label}: every version bit-exact (skein's copy == torch's)")
        a.send(("stop",))
    p.join(60)
    return summary


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    import skein
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name(0)}, "
          f"libskein {skein.library_path()}", flush=True)
    for small in ([0, 1] if os.environ.get("JOURNAL_SMALL") == "1" else [0]):
        t0 = time.monotonic()
        try:
            run(steps, small)
        except Exception as e:
            check(False, f"run (journal {'256 MiB' if small else 'sized at open'}): {e}")
        print(f"  ({time.monotonic() - t0:.1f} s)", flush=True)
    print(f"# {RESULTS['pass']} passed, {RESULTS['fail']} failed")
    return 1 if RESULTS["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
