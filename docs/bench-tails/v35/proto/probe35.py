"""Probe (docs/perf.md v35): float32 merge forwards by thread-block clusters (pair35.cu)
against the shipped artifacts, the memcpy of the kernel's own buffers and an elementwise copy of
them, in one process, three placements (all alive at once), every run checked bit-exact on
NaN-poisoned outputs (probe30.py's method).

    PYTHONPATH=. python3 docs/bench-tails/v35/proto/probe35.py ARTIFACTS OUT.json CALL LIB.so...
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
from psa_tvm.tools.timing import (
    GpuTimer,
    KernelProfiler,
    flat_copy,
    flat_copy_kernel,
    merge_halves,
)

CASES = [  # (num_heads, dtype, batch, height, width), forward
    (4, "float32", 16, 37, 29), (4, "float32", 32, 37, 29), (4, "float32", 64, 37, 29),
    (6, "float32", 16, 37, 29), (2, "float32", 32, 37, 29), (4, "float32", 8, 37, 29),
    (4, "float32", 16, 20, 15), (4, "float32", 64, 20, 15), (4, "float32", 16, 40, 23),
    (4, "float32", 64, 40, 23), (4, "float32", 16, 36, 30), (4, "float32", 16, 40, 40),
    (4, "float32", 64, 40, 40),
]
CASES_CALL2: list[tuple[int, str, int, int, int]] = []
#: Call 3: 8-row float32 band forwards (gen_band35.py) around one wave of 528 CTAs (4 an SM).
CASES_CALL3 = [
    *[(4, "float32", b, 37, 29) for b in (12, 14, 16, 17, 32, 64)],
    (2, "float32", 32, 37, 29), (6, "float32", 10, 37, 29), (6, "float32", 16, 37, 29),
    (4, "float32", 16, 1, 1075), (4, "float32", 16, 1, 1079), (4, "float32", 16, 16, 67),
    (4, "float32", 16, 36, 30),
    (4, "float16", 32, 37, 29),  # the same bytes and bands in 16 bits: the shipped 16-row band
]
PLACEMENTS = 3


def main(root: str, out_path: str, call: str, *lib_paths: str) -> None:
    symbols = {}
    for lib_path in lib_paths:
        lib = ctypes.CDLL(lib_path)
        symbols.update({name: getattr(lib, name)
                        for name in Path(lib_path + ".txt").read_text().split()})
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    cases = {"1": CASES, "2": CASES_CALL2, "3": CASES_CALL3}[call]
    for nh, dtype_name, batch, height, width in cases:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=root)
        times: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        alive = []  # every placement's tensors stay allocated, so each set lies elsewhere
        for _ in range(PLACEMENTS):
            halves = merge_halves(rows, n, 32, dtype, gen)
            lo, hi = halves[0], halves[1]
            out = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
            alive.append((halves, out))
            want = reference.merge(lo, hi, nh, height, width)
            fns = {"shipped": functools.partial(op.launch_forward, lo, hi, out, stream,
                                                (height, width))}
            entry = op.plan_forward([lo, hi], out, (height, width)).kernel.entry
            args = (*(ctypes.c_void_p(t.data_ptr()) for t in (lo, hi, out)),
                    ctypes.c_int(rows), ctypes.c_int(n), ctypes.c_void_p(stream))
            for symbol, fn in symbols.items():
                if ("_f_" in symbol) != (dtype.itemsize == 4):
                    continue
                bounds = re.search(r"_n(\d+)to(\d+)$", symbol)
                if bounds and not int(bounds[1]) <= n <= int(bounds[2]):
                    continue  # a band kernel's tile holds only its N range
                fn.restype = ctypes.c_int
                fns[symbol] = functools.partial(fn, *args)
            for name, fn in fns.items():
                out.fill_(float("nan"))
                rc = fn()
                torch.cuda.synchronize()
                exact[name] = (exact.get(name, True) and rc in (None, 0)
                               and reference.same_bits(out, want))
            copy_us = prof.median_us(flat_copy(halves, out))
            times.setdefault("copy us", []).append(copy_us)
            times.setdefault("copy_kernel", []).append(
                prof.median_us(flat_copy_kernel(halves, out)) / copy_us)
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
            print(f"  {name:32s} {row['ratio']:8.3f} {row['exact']}", flush=True)
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
