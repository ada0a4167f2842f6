"""Forward and backward through ``psa_tvm.merge`` against ``copy_`` of the same bytes, nine
interleaved rounds, the median of the per-round ratios: ``python b1probe.py [dtype]``."""

import statistics
import sys

import torch

import psa_tvm
from psa_tvm import ops
from psa_tvm.tools.bench import _wall_us  # the benchmark's CPU timer: 3 warm-ups, the median

torch.manual_seed(0)
DTYPE = getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.float32
NH, KD = 4, 32


def median_us(fn) -> float:
    return _wall_us(fn, 30)


for H, W, B in ((40, 23, 1), (37, 29, 1), (40, 40, 1), (20, 20, 1), (40, 23, 4), (20, 20, 16)):
    lo = torch.randn(B * NH, H * W, KD).to(DTYPE)
    hi = torch.randn_like(lo)
    out = torch.empty(B, 2 * NH * KD, H, W, dtype=DTYPE)
    grad = torch.randn_like(out)
    d_lo, d_hi = torch.empty_like(lo), torch.empty_like(hi)
    src, dst = torch.randn_like(out), torch.empty_like(out)
    passes = {"fwd": lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out),  # noqa: B023
              "bwd": lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=d_lo, d_hi=d_hi)}  # noqa: B023
    ratios: dict[str, list[float]] = {name: [] for name in passes}
    for _ in range(9):
        copy_us = median_us(lambda: dst.copy_(src))  # noqa: B023
        for name, fn in passes.items():
            ratios[name].append(median_us(fn) / copy_us)
    print(f"{H}x{W}/b{B} {out.numel() * out.element_size() / 1e6:5.2f} MB  "
          + "  ".join(f"{n} {statistics.median(v):.2f}" for n, v in ratios.items())
          + f"  native={bool(ops._NATIVE)}", flush=True)
