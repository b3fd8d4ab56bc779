#!/usr/bin/python3
"""examples/torch/engine.py: a rollout engine, started by `skeinctl job submit`.

Holds the bf16 model, receives each version into its parameters with
skein.Receiver (inside the job every version is a coordinated update:
wait() returns a version once the head committed it, docs/updates.md; the
bytes come from the job's disk-delta folder), computes the logits of the probe batch and prints the largest
absolute difference from the trainer's logits of the same version: the
trainer-engine gap Miles's docs tell users to check.  It must be 0.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model  # noqa: E402
import torch  # noqa: E402
import skein  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe-dir", required=True)
    a = ap.parse_args()
    eid = os.environ.get("SKEIN_ENGINE_ID", "0")
    net = model.Net().to(torch.bfloat16)
    net.requires_grad_(False)
    probe = model.probe()
    with skein.Receiver(net.named_parameters()) as recv:
        print(f"engine {eid}: {model.params(net) / 1e6:.2f} M parameters, receiving on {recv.path} "
              f"(restart {os.environ.get('SKEIN_RESTART_COUNT')})", flush=True)
        while True:
            try:
                v = recv.wait(timeout=60)
            except skein.Aborted as e:  # the update failed; our parameters are back on the last version
                print(f"engine {eid}: {e}", flush=True)
                continue
            if v is None:
                continue
            t = time.monotonic()
            with torch.no_grad():
                mine = net(probe)
            ref = torch.load(os.path.join(a.probe_dir, f"v{v:06d}.pt"))
            gap = (mine.float() - ref.float()).abs().max().item()
            f = recv.last
            print(f"engine {eid}: version {v} gap {gap:g} ({f['skein/versions_applied']} versions applied, "
                  f"{f['skein/bytes_moved'] / 1e6:.1f} MB read; probe {time.monotonic() - t:.3f} s)", flush=True)


if __name__ == "__main__":
    main()
