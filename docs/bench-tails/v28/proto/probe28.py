"""Probe (docs/perf.md v28, call 1): band forwards at N = 1065-1080 (gen_band28.py: bands
past 48 KB of shared memory, two shared tiles a CTA) against the shipped
artifacts and the copy of the kernel's own buffers, in one process, three placements, every
run checked bit-exact on a NaN-poisoned output.

    PYTHONPATH=. python3 docs/bench-tails/v28/proto/probe28.py ARTIFACTS band28.so OUT.json [CALL]
"""

from __future__ import annotations

import ctypes
import functools
import json
import re
import statistics
import sys
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler, flat_copy, merge_halves

CASES = [  # (num_heads, dtype, batch, height, width), forward
    (4, "float16", 64, 37, 29), (4, "bfloat16", 64, 37, 29), (4, "float16", 48, 37, 29),
    (6, "float16", 64, 37, 29), (2, "float16", 64, 37, 29), (4, "float16", 32, 37, 29),
    (4, "float16", 16, 37, 29), (6, "float16", 16, 37, 29), (4, "float16", 64, 36, 30),
    (4, "float32", 16, 37, 29), (4, "float32", 8, 37, 29), (4, "float32", 24, 37, 29),
    (4, "float32", 32, 37, 29), (4, "float32", 64, 37, 29), (6, "float32", 16, 37, 29),
    (2, "float32", 32, 37, 29), (4, "float32", 16, 36, 30),
]
#: Call 2: the call sizes that split the band kernels of N = 1072-1080 (docs/perf.md v28).
CASES_CALL2 = [
    *[(4, "float16", b, 37, 29) for b in (22, 24, 25, 26, 28, 30, 32, 33)],
    (2, "float16", 50, 37, 29), (2, "float16", 64, 37, 29), (6, "float16", 20, 37, 29),
    (6, "float16", 22, 37, 29), (4, "bfloat16", 32, 37, 29), (4, "float16", 32, 36, 30),
    (4, "float16", 32, 16, 67),
    *[(4, "float32", b, 37, 29) for b in (10, 12, 14, 15, 16, 17)],
    (2, "float32", 32, 37, 29), (6, "float32", 10, 37, 29), (6, "float32", 11, 37, 29),
    (4, "float32", 16, 16, 67), (4, "float32", 16, 13, 83), (4, "float32", 16, 36, 30),
]
#: Call 3: the swizzle, at N that are multiples of 8 and not, in both band N ranges.
CASES_CALL3 = [
    *[(4, "float16", b, h, w) for b in (16, 24, 32, 64) for h, w in ((37, 29), (36, 30))],
    (4, "float16", 32, 16, 67), (4, "bfloat16", 32, 37, 29), (2, "float16", 64, 37, 29),
    (4, "float16", 64, 40, 23), (4, "bfloat16", 64, 40, 23), (4, "float16", 64, 32, 29),
    (4, "float16", 64, 31, 29), (6, "float16", 64, 40, 23),
    (4, "float32", 16, 37, 29), (4, "float32", 16, 36, 30), (4, "float32", 16, 16, 67),
]
#: Call 4: batch 64 at 37x29 and its neighbours for 4 x 16-row bands; the N from 1073 to 1080
#: at 128 B * nh for the 32-row band (H x W with H * W = N).
CASES_CALL4 = [
    (4, "float16", 64, 37, 29), (4, "bfloat16", 64, 37, 29), (4, "float16", 64, 36, 30),
    (4, "float16", 64, 16, 67), (4, "float16", 48, 37, 29), (6, "float16", 64, 37, 29),
    (4, "float16", 60, 37, 29), (4, "float16", 56, 37, 29),
    *[(4, "float16", 32, h, w) for h, w in ((37, 29), (2, 537), (1, 1075), (2, 538),
                                            (1, 1077), (2, 539), (1, 1079), (36, 30))],
    (2, "float16", 64, 2, 538), (4, "bfloat16", 32, 1, 1075),
]
PLACEMENTS = 3
TAGS = {2: "_h_", 4: "_f_"}


def main(root: str, lib_path: str, out_path: str, call: str = "1") -> None:
    lib = ctypes.CDLL(lib_path)
    lines = Path(lib_path + ".txt").read_text().split()
    names = {tag: [name for name in lines if tag in name] for tag in TAGS.values()}
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    cases = {"1": CASES, "2": CASES_CALL2, "3": CASES_CALL3, "4": CASES_CALL4}[call]
    for nh, dtype_name, batch, height, width in cases:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=root)
        times: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        entry = ""
        for _ in range(PLACEMENTS):
            halves = merge_halves(rows, n, 32, dtype, gen)
            lo, hi = halves[0], halves[1]
            merged = torch.randn(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype,
                                 generator=gen) + 1
            want = reference.merge(lo, hi, nh, height, width)
            fns = {"shipped": functools.partial(op.launch_forward, lo, hi, merged, stream,
                                                (height, width))}
            entry = op.plan_forward([lo, hi], merged, (height, width)).kernel.entry
            args = (ctypes.c_void_p(lo.data_ptr()), ctypes.c_void_p(hi.data_ptr()),
                    ctypes.c_void_p(merged.data_ptr()), ctypes.c_int(rows), ctypes.c_int(n),
                    ctypes.c_void_p(stream))
            for symbol in names[TAGS[dtype.itemsize]]:
                if (bounds := re.search(r"_n(\d+)to(\d+)$", symbol)) and not (
                        int(bounds[1]) <= n <= int(bounds[2])):
                    continue  # a kernel's tile holds only its N range
                fn = getattr(lib, symbol)
                fn.restype = ctypes.c_int
                fns[symbol] = functools.partial(fn, *args)
            for name, fn in fns.items():
                merged.fill_(float("nan"))
                rc = fn()
                torch.cuda.synchronize()
                exact[name] = (exact.get(name, True) and rc in (None, 0)
                               and reference.same_bits(merged, want))
            copy = flat_copy(halves, merged)
            copy_us = prof.median_us(copy)
            times.setdefault("copy us", []).append(copy_us)
            for name, fn in fns.items():
                kernel_us = prof.median_us(fn)  # None: the profiler caught no kernel
                times.setdefault(name, []).append(kernel_us / copy_us if kernel_us else
                                                  float("nan"))
        case = f"fwd nh{nh} {dtype_name} {batch}x{height}x{width} N={n}"
        print(case, entry.removeprefix("psa_merge_fwd_tiled_"), flush=True)
        for name, ratios in times.items():
            row = {"case": case, "impl": name, "ratio": round(statistics.median(ratios), 4),
                   "ratios": [round(r, 4) for r in ratios], "exact": exact.get(name),
                   "entry": entry if name == "shipped" else None}
            rows_out.append(row)
            print(f"  {name:26s} {row['ratio']:8.3f} {row['exact']}", flush=True)
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
