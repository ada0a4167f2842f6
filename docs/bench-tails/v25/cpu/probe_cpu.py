"""CPU probe (docs/perf.md v25): float32/16-bit merge forward at B=16, nh=4, kd=32, 40x40 on
this host, four back-to-back rounds of torch ``copy_`` of the same bytes, psa-tvm's CPU kernel
(``out=``) and torch's own permuted ``copy_``, best of 30 calls each.

    PSA_TVM_ARTIFACTS=.artifacts python docs/bench-tails/v25/cpu/probe_cpu.py THREADS DTYPE
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

import psa_tvm
from psa_tvm import reference


def best_us(fn: Callable[[], object], reps: int = 30) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def main() -> None:
    threads, dtype_name = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(threads)
    batch, nh, kd, h, w = 16, 4, 32, 40, 40
    dtype = getattr(torch, dtype_name)
    lo = (torch.randn(batch * nh, h * w, kd) + 3).to(dtype)
    hi = (torch.randn(batch * nh, h * w, kd) - 3).to(dtype)
    want = reference.merge(lo, hi, nh, h, w)
    src, dst, out = want.reshape(-1).clone(), torch.empty(want.numel(), dtype=dtype), \
        torch.empty_like(want)
    permuted = torch.stack((lo, hi), 1).view(batch, nh, 2, h * w, kd).permute(0, 1, 2, 4, 3)
    out_view = out.view(batch, nh, 2, kd, h * w)
    for _ in range(4):
        copy = best_us(lambda: dst.copy_(src))
        ours = best_us(lambda: psa_tvm.merge(lo, hi, nh, h, w, out=out))
        assert torch.equal(out, want)
        torch_permute = best_us(lambda: out_view.copy_(permuted))
        print(f"threads={threads} {dtype_name} copy {copy:7.0f} psa {ours:7.0f} "
              f"[{ours / copy:.2f}] torch-permute-copy {torch_permute:7.0f} "
              f"[{torch_permute / copy:.2f}]")


if __name__ == "__main__":
    main()
