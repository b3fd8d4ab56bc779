#!/usr/bin/python3
"""tests/engines/sim_layout.py BYTES TENSORS SEED: the layout JSON
(--rollout-engine-layout) of skein-trainer-sim's model (transfer/xfer_sim.c:
its sizes from the same splitmix64 sequence), so that a stock-engine job can
use the simulator as its trainer, with its --corrupt-version."""
import json
import sys

M64 = (1 << 64) - 1


def main():
    nbytes, tensors, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    total = nbytes // 2
    tensors = max(1, tensors)
    if total < tensors:
        tensors = total or 1
    r = [(seed ^ 0x5eed) & M64]

    def unit():
        r[0] = (r[0] + 0x9e3779b97f4a7c15) & M64
        z = r[0]
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
        return ((z ^ (z >> 31)) >> 11) / 9007199254740992.0
    share = []
    for i in range(tensors):
        w = 0.002 if i % 8 == 7 else 2.0 ** (2 * unit())
        if i < 2 and tensors > 16:
            w = 16.0
        share.append(w)
    s = 0.0
    for w in share:
        s += w
    kinds = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "norm"]
    out, given = [], 0
    for i in range(tensors):
        e = total - given if i + 1 == tensors else int(total * (share[i] / s))
        if e == 0 and total - given > tensors - i:
            e = 1
        if given + e > total:
            e = total - given
        given += e
        if i < 2 and tensors > 16:
            name = "model.%s.weight" % ("lm_head" if i else "embed_tokens")
        else:
            name = "model.layers.%d.%s.weight" % (i // 8, kinds[i % 8])
        out.append({"name": name, "shape": [e], "dtype": "bfloat16"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
