"""Prototype probe (docs/perf.md v24): the row-tiled forward with each cache hint on its output
stores (stores.cu), beside the shipped kernel and the copy of the kernel's own buffers, at rows
that are whole 32-byte sectors and rows that are not.

    PYTHONPATH=. python3 docs/bench-tails/v24/proto/probe_stores.py stores.so OUT.json
"""

from __future__ import annotations

import ctypes
import functools
import json
import statistics
import sys

import torch

from psa_tvm import reference
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler, flat_copy, merge_halves

CASES = [  # (num_heads, dtype, batch, height, width)
    (4, "float32", 64, 20, 15), (4, "float32", 64, 8, 37), (4, "float32", 64, 16, 19),
    (4, "float32", 16, 20, 15), (4, "float16", 64, 40, 23), (4, "float16", 64, 48, 19),
    (4, "float16", 64, 32, 29), (6, "float16", 64, 20, 20),
]
KERNELS = {2: [(256, 256)], 4: [(128, 256), (64, 128)]}  # (tile, threads)
MODES = {0: "plain", 1: "st.cs", 2: "st.wt", 3: "st.cg", 4: "evict_first", 5: "evict_last"}
PLACEMENTS = 3


def forward_fns(lib: ctypes.CDLL, op: PsaMergeAttnRuntimeOp, itemsize: int, rows: int,
                spatial: tuple[int, int], inputs: torch.Tensor, merged: torch.Tensor) -> dict:
    """The copy, the shipped forward and each store mode's on one placement's tensors."""
    lo, hi = inputs[0], inputs[1]
    n = spatial[0] * spatial[1]
    stream = torch.cuda.current_stream().cuda_stream
    tag = "h" if itemsize == 2 else "f"
    fns = {"copy": flat_copy(inputs, merged),
           "shipped": lambda: op.launch_forward(lo, hi, merged, stream, spatial)}
    args = (ctypes.c_void_p(lo.data_ptr()), ctypes.c_void_p(hi.data_ptr()),
            ctypes.c_void_p(merged.data_ptr()), ctypes.c_int(rows), ctypes.c_int(n),
            ctypes.c_void_p(stream))
    for tile, threads in KERNELS[itemsize]:
        for mode, name in MODES.items():
            fn = getattr(lib, f"store_{tag}_T{tile}_t{threads}_m{mode}")
            fn.restype = ctypes.c_int
            fns[f"T{tile} t{threads} {name}"] = functools.partial(fn, *args)
    return fns


def main() -> None:
    lib, out_path = ctypes.CDLL(sys.argv[1]), sys.argv[2]
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows_out = []
    for nh, dtype_name, batch, height, width in CASES:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=".artifacts")
        times: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        for _ in range(PLACEMENTS):
            inputs = merge_halves(rows, n, 32, dtype, gen)
            merged = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
            want = reference.merge(inputs[0], inputs[1], nh, height, width)
            fns = forward_fns(lib, op, dtype.itemsize, rows, (height, width), inputs, merged)
            for name, fn in fns.items():
                if name != "copy":
                    merged.fill_(float("nan"))
                    if fn() not in (None, 0):
                        raise RuntimeError(f"launch failed: {name}")
                    torch.cuda.synchronize()
                    exact[name] = exact.get(name, True) and reference.same_bits(merged, want)
            copy_us = prof.median_us(fns["copy"])
            for name, fn in fns.items():
                times.setdefault(name, []).append(prof.median_us(fn) / copy_us)
        case = (f"nh{nh} {dtype_name} {batch}x{height}x{width} N={n} "
                f"row%32={n * dtype.itemsize % 32}")
        for name, ratios in times.items():
            rows_out.append({"case": case, "impl": name,
                             "ratio": round(statistics.median(ratios), 4),
                             "ratios": [round(r, 4) for r in ratios], "exact": exact.get(name)})
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)
        print(case, flush=True)
        for r in rows_out:
            if r["case"] == case:
                print(f"  {r['impl']:24s} {r['ratio']:6.3f} {r['exact']}", flush=True)


if __name__ == "__main__":
    main()
