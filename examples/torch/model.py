"""examples/torch/model.py: what the trainer and the engines share.

A residual MLP of 21.0 M parameters (1024 inputs, 4 blocks of 2048, 1024
logits), a synthetic objective (the label of x is the argmax of a fixed random
projection onto 16 of the 1024 logits: a teacher the network can learn; the
loss falls from ln 1024 = 6.9 to about 3 in 20 steps), and the fixed probe batch whose
logits trainer and engines compare.  Everything is seeded, so every process
builds the same teacher and probe.  One thread per process: the same kernels
in the same order on both sides, so equal weights give equal logits bit for
bit (and two cores are shared by four processes).
"""
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

D_IN, WIDTH, DEPTH, CLASSES = 1024, 2048, 4, 1024
BATCH, PROBE, LABELS = 32, 8, 16
SEED = 1234

torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(D_IN, WIDTH)
        self.blocks = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(WIDTH)
        self.out = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        h = F.gelu(self.inp(x))
        for b in self.blocks:
            h = h + F.gelu(b(h))
        return self.out(self.norm(h))


def _gen(*key):
    g = torch.Generator()  # crc32, not hash(): str hashes differ between processes
    g.manual_seed(zlib.crc32(repr((SEED,) + key).encode()))
    return g


_teacher = torch.randn(D_IN, LABELS, generator=_gen("teacher"))


def batch(step, rank):
    """The synthetic batch of a trainer rank at a step: inputs and labels."""
    x = torch.randn(BATCH, D_IN, generator=_gen("batch", step, rank))
    return x, (x @ _teacher).argmax(dim=1)


def probe():
    """The fixed probe batch (bf16, as the engines run)."""
    return torch.randn(PROBE, D_IN, generator=_gen("probe")).to(torch.bfloat16)


def params(m):
    return sum(p.numel() for p in m.parameters())
