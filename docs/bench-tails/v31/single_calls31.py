"""Single-call wall times of psa-tvm's CPU forward and of torch's ``copy_`` of the same bytes,
interleaved call by call, percentiles printed (docs/perf.md v31, call 6): where the benchmark's
per-round medians of the 16-thread kernels sit above their best rounds.

    PSA_TVM_ARTIFACTS=DIR python docs/bench-tails/v31/single_calls31.py [calls]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import psa_tvm
from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime import cpu_pool
from psa_tvm.runtime.cpu import cpu_kernels


def percentiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=20)
    return (f"p5 {q[0]:6.1f}  p25 {q[4]:6.1f}  p50 {statistics.median(values):6.1f}  "
            f"p75 {q[14]:6.1f}  p95 {q[18]:6.1f} us")


def time_case(dtype_name: str, batch: int, height: int, width: int, calls: int) -> str:
    dtype, nh, kd, n = getattr(torch, dtype_name), 4, 32, height * width
    lo = (torch.randn(batch * nh, n, kd) + 3).to(dtype)
    hi = (torch.randn(batch * nh, n, kd) - 3).to(dtype)
    grad = reference.merge(lo, hi, nh, height, width)
    src, dst = grad.reshape(-1).clone(), torch.empty(grad.numel(), dtype=dtype)
    out = torch.empty_like(grad)
    fns = {"copy_": lambda: dst.copy_(src),
           "psa_tvm.merge": lambda: psa_tvm.merge(lo, hi, nh, height, width, out=out)}
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        for _ in range(5):
            fn()
    for _ in range(calls):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e6)
    kind = cpu_pool.launcher_kind(cpu_kernels(OpConfig(kd, nh, dtype_name)).library.path)
    lines = [f"{dtype_name} {batch}x{nh}x{height}x{width} forward (CPU library's regions on "
             f"{kind}):"]
    lines += [f"  {name:14s} {percentiles(values)}" for name, values in times.items()]
    return "\n".join(lines)


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    print(f"torch threads {torch.get_num_threads()}")
    for case in (("bfloat16", 16, 20, 20), ("float16", 16, 37, 29), ("float32", 16, 20, 15)):
        print(time_case(*case, calls), flush=True)


if __name__ == "__main__":
    main()
