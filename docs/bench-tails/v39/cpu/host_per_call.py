"""Host time per call of ``psa_tvm.merge(out=)`` beside torch's ``copy_`` of the same bytes and
one allocating eager op, float32, batch 1, 4 heads of key_dim 32, at 2x2 (the call's overhead
alone) and 20x20; ``PSA_TVM_NATIVE=0`` for the Python path."""

import timeit

import torch

import psa_tvm
from psa_tvm import ops

B, NH, KD = 1, 4, 32
for H, W in ((2, 2), (20, 20)):
    lo = torch.randn(B * NH, H * W, KD)
    hi = torch.randn_like(lo)
    out = torch.empty(B, 2 * NH * KD, H, W)
    src, dst = torch.randn_like(out), torch.empty_like(out)
    psa_tvm.merge(lo, hi, NH, H, W, out=out)
    calls = {"copy_": lambda: dst.copy_(src),  # noqa: B023 (called within the iteration)
             "psa_tvm.merge": lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out),  # noqa: B023
             "torch.add": lambda: torch.add(src, 1)}  # noqa: B023
    times = {name: min(timeit.repeat(fn, number=3000, repeat=7)) / 3000 * 1e6
             for name, fn in calls.items()}
    print(f"{H}x{W}/b1 float32 native={bool(ops._NATIVE)}: "
          + "  ".join(f"{name} {us:.2f} us" for name, us in times.items()))
