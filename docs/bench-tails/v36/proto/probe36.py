"""Probe (docs/perf.md v36): the band forwards of gen_band36.py against the shipped artifacts,
the memcpy of the kernel's own buffers and an elementwise copy of them, in one process, three
placements (all alive at once), every run checked bit-exact on NaN-poisoned outputs first
(probe30.py's and probe35.py's method). A variant runs at the cases of its dtype, head count
and ``N`` range (band36.json).

    PYTHONPATH=. python3 docs/bench-tails/v36/proto/probe36.py ARTIFACTS OUT.json DIR [CALL]

Call 4 (``CASES_CALL4``) times backwards too: ``d_lo``/``d_hi`` from a gradient, against the
copy of the same bytes the other way.
"""

from __future__ import annotations

import ctypes
import functools
import json
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

#: (num_heads, dtype, batch, height, width), forward; the three rows above 1.05 first.
CASES = [
    (4, "float32", 16, 20, 15), (6, "float16", 64, 20, 20), (4, "float32", 64, 37, 29),
    *[(4, "float32", b, 20, 15) for b in (12, 17, 20, 8)],
    (4, "float32", 16, 3, 99), (4, "float32", 16, 3, 101),
    (2, "float32", 32, 20, 15), (6, "float32", 10, 20, 15), (6, "float32", 11, 20, 15),
    (6, "float16", 60, 20, 20), (6, "float16", 66, 20, 20), (6, "float16", 64, 19, 21),
    (4, "float16", 96, 20, 20),
    (4, "float32", 60, 37, 29), (4, "float32", 66, 37, 29),
    (4, "float32", 24, 20, 15), (4, "float32", 32, 20, 15), (4, "float32", 64, 20, 15),
]
#: Call 4: (pass, num_heads, dtype, batch, height, width) at 16-bit 6-head 20x20.
CASES_CALL4 = [
    *[("forward", 6, "float16", b, 20, 20) for b in (16, 24, 32, 64)],
    *[("backward", 6, "float16", b, 20, 20) for b in (16, 24, 32, 64)],
    ("forward", 6, "bfloat16", 16, 20, 20), ("backward", 6, "bfloat16", 16, 20, 20),
]
PLACEMENTS = 3


def main(root: str, out_path: str, lib_dir: str, call: str = "1") -> None:
    meta = json.loads((Path(lib_dir) / "band36.json").read_text())
    symbols = {}
    for lib_path in sorted(Path(lib_dir).glob("band36_*.so")):
        lib = ctypes.CDLL(str(lib_path))
        for name in Path(f"{lib_path}.txt").read_text().split():
            symbols[name] = getattr(lib, name)
            symbols[name].restype = ctypes.c_int
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    cases = [("forward", *c) for c in CASES] if call == "1" else CASES_CALL4
    for pass_, nh, dtype_name, batch, height, width in cases:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=root)
        mine = {name: fn for name, fn in symbols.items()
                if meta[name].get("pass", "forward") == pass_
                and meta[name]["dtype"] in (dtype_name, "float16" if dtype.itemsize == 2 else "")
                and meta[name]["num_heads"] == nh
                and meta[name]["min_n"] <= n <= meta[name]["max_n"]}
        times: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        alive = []  # every placement's tensors stay allocated, so each set lies elsewhere
        for _ in range(PLACEMENTS):
            halves = merge_halves(rows, n, 32, dtype, gen)
            lo, hi = halves[0], halves[1]
            out = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
            alive.append((halves, out))
            if pass_ == "forward":
                want = reference.merge(lo, hi, nh, height, width)
                fns = {"shipped": functools.partial(op.launch_forward, lo, hi, out, stream,
                                                    (height, width))}
                entry = op.plan_forward([lo, hi], out, (height, width)).kernel.entry
                tensors, written, src, dst = (lo, hi, out), out, halves, out
            else:  # the gradient in ``out`` (filled below), d_lo / d_hi in ``halves``
                out.copy_(torch.randn(out.shape, device="cuda", dtype=dtype, generator=gen))
                want = torch.stack(reference.merge_backward(out, nh, 32))
                fns = {"shipped": functools.partial(op.launch_backward, out, lo, hi, stream)}
                entry = op.plan_backward(out, [lo, hi]).kernel.entry
                tensors, written, src, dst = (out, lo, hi), halves, out, halves
            args = (*(ctypes.c_void_p(t.data_ptr()) for t in tensors),
                    ctypes.c_int(rows), ctypes.c_int(n), ctypes.c_void_p(stream))
            fns.update({name: functools.partial(fn, *args) for name, fn in mine.items()})
            for name, fn in fns.items():
                written.fill_(float("nan"))
                rc = fn()
                torch.cuda.synchronize()
                exact[name] = (exact.get(name, True) and rc in (None, 0)
                               and reference.same_bits(written, want))
            copy_us = prof.median_us(flat_copy(src, dst))
            times.setdefault("copy us", []).append(copy_us)
            times.setdefault("copy_kernel", []).append(
                prof.median_us(flat_copy_kernel(src, dst)) / copy_us)
            for name, fn in fns.items():
                kernel_us = prof.median_us(fn)  # None: the profiler caught no kernel
                times.setdefault(name, []).append(kernel_us / copy_us if kernel_us else
                                                  float("nan"))
        case = f"{pass_[:3]} nh{nh} {dtype_name} {batch}x{height}x{width} N={n}"
        print(case, entry, flush=True)
        for name, ratios in times.items():
            row = {"case": case, "impl": name, "ratio": round(statistics.median(ratios), 4),
                   "ratios": [round(r, 4) for r in ratios], "exact": exact.get(name),
                   "entry": entry if name == "shipped" else None}
            rows_out.append(row)
            print(f"  {name.removeprefix('b36_'):44s} {row['ratio']:8.3f} {row['exact']}",
                  flush=True)
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
