"""Several sets of tensors at other addresses in one process, each timed three times in turn:
the float32 40x23 batch-1 forward (the CPU library's kernel) over ``copy_`` of the same bytes,
the median of 200 calls each. Whether a slow state belongs to the placement (a column stays
slow) or to the time (a pass is slow in every column): ``python placements_in_process.py 6``."""

import sys

import torch

from psa_tvm.config import OpConfig
from psa_tvm.runtime.cpu import cpu_kernels
from psa_tvm.tools.bench import _wall_us

forward = cpu_kernels(OpConfig(32, 4, "float32")).forward_fn
BATCH, NH, KD, N = 1, 4, 32, 920


def median_us(fn, reps: int = 200) -> float:
    """The benchmark's CPU timer (3 warm-up calls, the median of ``reps``) in us."""
    return _wall_us(fn, reps)


placements = []
for _ in range(int(sys.argv[1])):
    lo = torch.randn(BATCH * NH, N, KD)
    hi = torch.randn_like(lo)
    out = torch.empty(BATCH, NH, 2, KD, N)
    src, dst = torch.randn(out.numel()), torch.empty(out.numel())
    # a gap of 1-4095 KiB before the next set, kept alive, so the sets land apart
    gap = torch.empty(int(torch.randint(1, 4096, ()).item()) * 256)
    placements.append((lo, hi, out, src, dst, gap))
for turn in range(3):
    ratios = [median_us(lambda a=(lo, hi, out, N): forward(*a))
              / median_us(lambda s=src, d=dst: d.copy_(s))
              for lo, hi, out, src, dst, _ in placements]
    print(f"pass {turn}: " + " ".join(f"{r:.2f}" for r in ratios), flush=True)
