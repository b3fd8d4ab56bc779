#!/usr/bin/python3
"""examples/torch/train.py: a trainer rank, started by `skeinctl job submit`.

The gloo world forms from skein's environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT; init_method="env://"), as under torchrun.  Each step
every rank trains the fp32 model (DistributedDataParallel, AdamW, the
synthetic objective); rank 0 then copies it into the bf16 copy the engines
run, computes that copy's logits of the probe batch, writes them to
--probe-dir as the version's reference, and publishes the bf16 weights with
skein.Publisher (the job's transfer mode and folder: SKEIN_TRANSFER_MODE,
SKEIN_DISK_DIR).  A world that re-forms after a rank died (a new trainer
generation, a new MASTER_PORT) resumes from the newest published weights
and goes on from the next version; the example keeps no optimizer checkpoint.
"""
import argparse
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model  # noqa: E402 (sets one thread)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import skein  # noqa: E402


def save_atomic(obj, path):
    tmp = f"{path}.tmp.{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe-dir", required=True, help="where each version's reference logits go")
    ap.add_argument("--steps", type=int, default=1000000)
    ap.add_argument("--lr", type=float, default=3e-4)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    t0 = time.monotonic()
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(model.SEED)
    net = model.Net()
    serve = model.Net().to(torch.bfloat16)  # what the engines run, and what travels
    serve.requires_grad_(False)
    pub, start = None, 0
    if rank == 0:
        pub = skein.Publisher(serve.named_parameters(), encoding="xor")
        start = skein.latest_version(os.environ["SKEIN_DISK_DIR"])
        if start:  # a re-formed world: carry on from the newest published weights
            with skein.Receiver(serve.named_parameters(), mode="disk-delta", dir=os.environ["SKEIN_DISK_DIR"],
                                coordinate=False) as r:
                start = r.wait(timeout=30)
            with torch.no_grad():
                for p, q in zip(net.parameters(), serve.parameters()):
                    p.copy_(q)
    # DDP broadcasts rank 0's parameters: every rank starts from them
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, weight_decay=0.01, foreach=False)
    # versions only grow: after an aborted one (a rank died mid-update) the
    # next is numbered above the job's newest, whatever the folder holds
    step = torch.tensor([max(start, pub.newest_version()) if pub else 0])
    dist.broadcast(step, 0)
    start = int(step)
    print(f"trainer rank {rank}/{world}: world formed in {time.monotonic() - t0:.1f} s, "
          f"{model.params(net) / 1e6:.2f} M parameters, from version {start} "
          f"(restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')})", flush=True)
    probe = model.probe()
    for v in range(start + 1, start + 1 + a.steps):
        ts = time.monotonic()
        x, y = model.batch(v, rank)
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank != 0:
            continue
        tt = time.monotonic() - ts
        with torch.no_grad():
            for p, q in zip(serve.parameters(), net.parameters()):
                p.copy_(q)
            save_atomic(serve(probe), os.path.join(a.probe_dir, f"v{v:06d}.pt"))
        try:
            f = pub.publish(v)
        except skein.Aborted as e:  # no engine serves it; the next version goes out whole
            print(f"trainer: version {v} aborted: {e}", flush=True)
            continue
        print(f"trainer: version {v} loss {loss.item():.4f} train {tt:.2f} s publish "
              f"{f['perf/update_weights_time']:.3f} s {f['perf/update_weights_wire_bytes'] / 1e6:.1f} MB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
