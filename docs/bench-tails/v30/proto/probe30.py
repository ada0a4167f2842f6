"""Probe (docs/perf.md v30): forward variants against the shipped artifacts and the copy of the
kernel's own buffers, in one process, three placements, every run checked bit-exact on
NaN-poisoned outputs (probe29.py's method, forward only; call 2 on: the placements'
tensors all alive at once, as in the benchmark, so that each lies at other addresses).
Call 1: float32 shifted forwards with an ownership grain of 4 and 8 vectors (gen_grain30.py), at
the float32 rows still above 1.05 and their neighbours, and at the 16-byte-aligned grids
(N = 300, 920, 1080) where the tiled kernel ships. Call 2: float32 16-row band forwards
(gen_band30.py) across the call sizes around one wave of their bands (56-66 ``B * nh`` at
N = 1073), against the shipped shifted forward.

    PYTHONPATH=. python3 docs/bench-tails/v30/proto/probe30.py ARTIFACTS OUT.json CALL LIB.so...

A variant whose symbol ends in ``_n{first}to{last}`` runs only at those ``N``.
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
    (4, "float32", 16, 37, 29), (4, "float32", 32, 37, 29), (4, "float32", 64, 37, 29),
    (6, "float32", 16, 37, 29), (2, "float32", 32, 37, 29), (4, "float32", 8, 37, 29),
    (4, "float32", 24, 37, 29), (4, "float32", 16, 36, 30), (4, "float32", 16, 20, 15),
    (4, "float32", 64, 20, 15), (4, "float32", 16, 40, 23), (4, "float32", 64, 40, 23),
]
#: Call 2: float32 37x29 and its N neighbours at the B * nh around one wave of 16-row bands
#: (2 CTAs an SM: 264; a call has 4 bands per B * nh), every head count.
CASES_CALL2 = [
    *[(4, "float32", b, 37, 29) for b in (10, 12, 14, 15, 16, 17, 18, 24)],
    (2, "float32", 28, 37, 29), (2, "float32", 32, 37, 29), (2, "float32", 33, 37, 29),
    (6, "float32", 10, 37, 29), (6, "float32", 11, 37, 29), (6, "float32", 12, 37, 29),
    (4, "float32", 16, 1, 1075), (4, "float32", 16, 1, 1079), (4, "float32", 16, 16, 67),
    (4, "float32", 16, 1, 1066),
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
    for nh, dtype_name, batch, height, width in {"1": CASES, "2": CASES_CALL2}[call]:
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
                    continue  # a kernel's tile holds only its N range
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
