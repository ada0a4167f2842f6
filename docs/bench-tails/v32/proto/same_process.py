"""The C prototypes of fwd16.c, the library's CPU forward and torch's ``copy_`` in one process
on the same memory (docs/perf.md v32).

    gcc -O3 -march=x86-64-v4 -fopenmp -fPIC -shared -DPROTO_LIB fwd16.c -o fwd16.so
    OMP_NUM_THREADS=T python same_process.py --lib fwd16.so --art ARTIFACTS --threads T

Each round times every entry once (calls batched to ~3 ms) and divides by that round's
``copy_``; the median over rounds is printed, with the median time. The prototypes run on the
system's libgomp, the library on torch's threads, as in the benchmark.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime.cpu import cpu_kernels

VARIANTS = {"C copy loop": 0, "C pitch probe": 1, "C library order": 2,
            "C prefetch, library order": 5}


def batch_s(fn, target_s: float = 0.003) -> float:
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    calls = max(1, int(target_s / max(once, 1e-7)))
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", type=Path, required=True)
    parser.add_argument("--art", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--shapes", nargs="+", default=["20x15/b16", "40x23/b16", "37x29/b16",
                                                        "40x40/b16"])
    parser.add_argument("--dtype", default="float16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    proto = ctypes.CDLL(str(args.lib))
    proto.psa_proto_run.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_long, ctypes.c_long]
    dtype = getattr(torch, args.dtype)
    print(f"threads {args.threads}, rounds {args.rounds}, {args.dtype}; time / copy_ "
          "(median of per-round ratios), [median us]")
    for shape in args.shapes:
        time_shape(proto, args, dtype, shape)


def time_shape(proto: ctypes.CDLL, args: argparse.Namespace, dtype: torch.dtype,
               shape: str) -> None:
    grid, batch_text = shape.split("/b")
    height, width = map(int, grid.split("x"))
    batch, nh, kd, n = int(batch_text), 4, 32, height * width
    lo = (torch.randn(batch * nh, n, kd) + 3).to(dtype)
    hi = (torch.randn(batch * nh, n, kd) - 3).to(dtype)
    want = reference.merge(lo, hi, nh, height, width)
    out = torch.empty_like(want)
    out5 = out.view(batch, nh, 2, kd, n)
    kernels = cpu_kernels(OpConfig(kd, nh, args.dtype), args.art)
    out.fill_(7)
    kernels.forward(lo, hi, out5, n)
    assert torch.equal(out, want)
    slices = 2 * batch * nh
    src = torch.randn(slices, n, kd).to(dtype)
    padded = torch.empty(slices * kd * ((n + 15) // 16 * 16), dtype=dtype)
    dst = torch.empty(slices * kd * n, dtype=dtype)
    flat = src.reshape(-1)
    fns = {"torch copy_": lambda: dst.copy_(flat),
           "library forward": lambda: kernels.forward(lo, hi, out5, n)}
    for name, variant in VARIANTS.items():
        target = padded if variant == 1 else dst
        fns[name] = (lambda v=variant, t=target:
                     proto.psa_proto_run(v, src.data_ptr(), t.data_ptr(), slices, n))
    ratios = {name: [] for name in fns}
    times = {name: [] for name in fns}
    for r in range(args.rounds):
        copy = batch_s(fns["torch copy_"])
        names = [k for k in fns if k != "torch copy_"]
        names = names[r % len(names):] + names[:r % len(names)]
        times["torch copy_"].append(copy)
        ratios["torch copy_"].append(1.0)
        for name in names:
            elapsed = batch_s(fns[name])
            times[name].append(elapsed)
            ratios[name].append(elapsed / copy)
    print(f"{shape} ({out.numel() * out.element_size() / 1e6:.2f} MB a side): " + ", ".join(
        f"{name} {statistics.median(ratios[name]):.2f} "
        f"[{statistics.median(times[name]) * 1e6:.0f}]" for name in fns), flush=True)


if __name__ == "__main__":
    main()
