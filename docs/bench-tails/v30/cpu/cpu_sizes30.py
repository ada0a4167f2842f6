"""psa-tvm's CPU forward and backward against torch's ``copy_`` of the same bytes, one thread,
from L2-resident calls to calls past the L3 (docs/perf.md v30, section 4). Each call is timed in
batches of many calls, best of several interleaved rounds (the host is shared).

    PSA_TVM_ARTIFACTS=DIR python docs/bench-tails/v30/cpu/cpu_sizes30.py
"""

from __future__ import annotations

import time

import torch

import psa_tvm
from psa_tvm import reference

CASES = [  # (dtype, batch, num_heads, height, width)
    *[(dtype, 1, 2, h, w) for dtype in ("float32", "float16", "bfloat16")
      for h, w in ((37, 29), (20, 15), (40, 40), (40, 23))],
    *[("bfloat16", b, 4, 37, 29) for b in (1, 2, 4, 8, 16, 32)],
    *[("float32", b, 4, 37, 29) for b in (1, 2, 4, 8, 16, 32)],
]


def best_us(fn, calls: int, rounds: list[float]) -> None:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    rounds.append((time.perf_counter() - start) / calls * 1e6)


def time_case(dtype_name: str, batch: int, nh: int, height: int, width: int) -> str:
    dtype, kd, n = getattr(torch, dtype_name), 32, height * width
    lo = (torch.randn(batch * nh, n, kd) + 3).to(dtype)
    hi = (torch.randn(batch * nh, n, kd) - 3).to(dtype)
    grad = reference.merge(lo, hi, nh, height, width)
    src, dst = grad.reshape(-1).clone(), torch.empty(grad.numel(), dtype=dtype)
    out, d_lo, d_hi = torch.empty_like(grad), torch.empty_like(lo), torch.empty_like(hi)
    fns = [lambda: dst.copy_(src),
           lambda: psa_tvm.merge(lo, hi, nh, height, width, out=out),
           lambda: psa_tvm.merge_backward(grad, nh, kd, d_lo=d_lo, d_hi=d_hi)]
    calls = max(5, 600 // (batch * nh))
    times: list[list[float]] = [[], [], []]
    for _ in range(5):
        for fn, rounds in zip(fns, times, strict=True):
            best_us(fn, calls, rounds)
    copy, fwd, bwd = (min(t) for t in times)
    return (f"{dtype_name:8s} {batch}x{nh}x{height}x{width} "
            f"{grad.numel() * grad.element_size() / 1e6:6.2f} MB a side  copy {copy:8.1f} us  "
            f"forward x{fwd / copy:.2f}  backward x{bwd / copy:.2f}")


def main() -> None:
    torch.set_num_threads(1)
    for case in CASES:
        print(time_case(*case), flush=True)


if __name__ == "__main__":
    main()
