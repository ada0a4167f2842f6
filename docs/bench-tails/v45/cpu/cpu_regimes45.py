"""v45: the CPU kernels against ``copy_`` on this guest in two regimes (2 threads).

    python cpu_regimes45.py alternating [BLOCKS]      # alternating_t2.txt
    python cpu_regimes45.py batches DTYPE HxW B,B,..  # batches_t2.txt

``alternating``: blocks of a few calls, a ``copy_`` block then a forward block then a backward
block, each timed whole; a ratio is a block over the copy block before it. A batch-16 call's
tensors (15-35 MB) do not survive the other two blocks in the 32 MB L3, so both sides run from
DRAM. ``batches``: the benchmark's way (rounds of the median of 20 back-to-back calls, the
ratio within a round), at growing batches, to see where the tensors leave the L3.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

import psa_tvm
from psa_tvm import reference
from psa_tvm.tools.bench import _wall_us  # the benchmark's own timing of one side

ALTERNATING = ((torch.float32, 1, 40, 23), (torch.float32, 1, 37, 29), (torch.float32, 1, 40, 40),
               (torch.float32, 16, 40, 23), (torch.float32, 16, 37, 29),
               (torch.float16, 16, 37, 29))


def calls(dtype: torch.dtype, batch: int, h: int, w: int, nh: int = 4, kd: int = 32):
    """Bytes moved and the three calls (into preallocated outputs) at one shape."""
    n = h * w
    lo = (torch.randn(batch * nh, n, kd) + 3).to(dtype)
    hi = (torch.randn(batch * nh, n, kd) - 3).to(dtype)
    grad = reference.merge(lo, hi, nh, h, w)
    src, dst = grad.reshape(-1).clone(), torch.empty(grad.numel(), dtype=dtype)
    out, d_lo, d_hi = torch.empty_like(grad), torch.empty_like(lo), torch.empty_like(hi)
    assert torch.equal(psa_tvm.merge(lo, hi, nh, h, w, out=out), grad)
    return 2 * grad.numel() * grad.element_size(), {
        "copy": lambda: dst.copy_(src),
        "fwd": lambda: psa_tvm.merge(lo, hi, nh, h, w, out=out),
        "bwd": lambda: psa_tvm.merge_backward(grad, nh, kd, d_lo=d_lo, d_hi=d_hi)}


def block_us(fn, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        fn()
    return (time.perf_counter() - start) / count * 1e6


def alternating(blocks: int) -> None:
    for dtype, batch, h, w in ALTERNATING:
        _, fns = calls(dtype, batch, h, w)
        count = 10 if batch == 1 else 3
        for fn in fns.values():
            block_us(fn, 5)
        copies, times, ratios = [], {"fwd": [], "bwd": []}, {"fwd": [], "bwd": []}
        for _ in range(blocks):
            copies.append(block_us(fns["copy"], count))
            for pass_ in times:
                times[pass_].append(block_us(fns[pass_], count))
                ratios[pass_].append(times[pass_][-1] / copies[-1])
        cols = []
        for pass_, rs in ratios.items():
            q1, _, q3 = statistics.quantiles(rs, n=4)
            cols.append(f"{pass_} med {statistics.median(times[pass_]):7.1f} ratio med "
                        f"{statistics.median(rs):.2f} IQR {q1:.2f}-{q3:.2f}")
        print(f"{str(dtype)[6:]:8s} {h}x{w}/b{batch}: copy med "
              f"{statistics.median(copies):7.1f} | " + " | ".join(cols), flush=True)


def batches(dtype_name: str, grid: str, batch_list: str) -> None:
    h, w = map(int, grid.split("x"))
    for batch in map(int, batch_list.split(",")):
        moved, fns = calls(getattr(torch, dtype_name), batch, h, w)
        copies, ratios = [], {"fwd": [], "bwd": []}
        for _ in range(9):
            copies.append(_wall_us(fns["copy"], 20))
            for pass_ in ratios:
                ratios[pass_].append(_wall_us(fns[pass_], 20) / copies[-1])
        print(f"{dtype_name} {grid}/b{batch} {moved / 1e6:6.1f} MB copy {min(copies):7.1f} us "
              f"fwd {statistics.median(ratios['fwd']):.2f} "
              f"bwd {statistics.median(ratios['bwd']):.2f}", flush=True)


if __name__ == "__main__":
    torch.manual_seed(0)
    if sys.argv[1] == "alternating":
        alternating(int(sys.argv[2]) if len(sys.argv) > 2 else 200)
    else:
        batches(*sys.argv[2:5])
