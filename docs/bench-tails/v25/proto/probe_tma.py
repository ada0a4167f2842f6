"""Prototype probe (docs/perf.md v25): the forward with its output written by the TMA unit
(tma.cu: per tile row, or per whole block) and as one linear stream per CTA, and the block
backward, beside v24's
plain row kernel of the same tile (stores.cu, mode 0), the shipped kernel and the copy of the
kernel's own buffers, at rows that are whole 32-byte sectors and rows that are not.

    PYTHONPATH=. python3 docs/bench-tails/v25/proto/probe_tma.py tma.so stores.so OUT.json
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

CASES = [  # (pass, num_heads, dtype, batch, height, width)
    # float32 forward, N = 296 / 300 / 304 (rows 0 / 16 / 0 mod 32 bytes), odd N, a square
    ("fwd", 4, "float32", 64, 8, 37), ("fwd", 4, "float32", 64, 20, 15),
    ("fwd", 4, "float32", 64, 16, 19), ("fwd", 4, "float32", 16, 8, 37),
    ("fwd", 4, "float32", 16, 20, 15), ("fwd", 4, "float32", 16, 16, 19),
    ("fwd", 4, "float32", 16, 37, 29), ("fwd", 4, "float32", 64, 37, 29),
    ("fwd", 4, "float32", 64, 20, 20),
    # 16-bit forward, N = 912 / 920 / 928, 1072 / 1080, odd N, squares
    ("fwd", 4, "float16", 64, 48, 19), ("fwd", 4, "float16", 64, 40, 23),
    ("fwd", 4, "float16", 64, 32, 29), ("fwd", 4, "float16", 64, 16, 67),
    ("fwd", 4, "float16", 64, 40, 27), ("fwd", 4, "float16", 16, 40, 23),
    ("fwd", 4, "float16", 64, 37, 29), ("fwd", 4, "float16", 16, 37, 29),
    ("fwd", 4, "float16", 16, 40, 40), ("fwd", 6, "float16", 64, 20, 20),
    # backward: the rows that miss, and squares
    ("bwd", 4, "float16", 64, 37, 29), ("bwd", 4, "float16", 16, 37, 29),
    ("bwd", 4, "float16", 64, 40, 23), ("bwd", 4, "float16", 64, 20, 20),
    ("bwd", 4, "float16", 16, 40, 40), ("bwd", 4, "float32", 16, 37, 29),
    ("bwd", 4, "float32", 64, 20, 15),
]
TILE_KERNELS = {  # (library, symbol) per itemsize; need N * itemsize % 16 == 0
    4: [("stores", "store_f_T128_t256_m0"), ("stores", "store_f_T64_t128_m0"),
        ("tma", "tile_tma_f_T128_t256"), ("tma", "tile_tma_f_T64_t128")],
    2: [("stores", "store_h_T256_t256_m0"),
        ("tma", "tile_tma_h_T256_t256"), ("tma", "tile_tma_h_T128_t128")],
}
BLOCK_KERNELS = {  # any N, while KD * N * itemsize fits in 200 KB of shared memory
    ("fwd", 4): [("tma", f"block_{kind}_f_t{threads}") for threads in (256, 512)
                 for kind in ("tma", "lin")],
    ("fwd", 2): [("tma", f"block_{kind}_h_t{threads}") for threads in (256, 512)
                 for kind in ("tma", "lin")],
    ("bwd", 4): [("tma", "block_bwd_f_t256"), ("tma", "block_bwd_f_t512")],
    ("bwd", 2): [("tma", "block_bwd_h_t256"), ("tma", "block_bwd_h_t512")],
}
PLACEMENTS = 3
TOO_BIG = 2  # the prototypes' return code for a shape their shared memory or registers cannot hold


def pass_fns(libs: dict[str, ctypes.CDLL], kernels: tuple[dict, dict],
             op: PsaMergeAttnRuntimeOp, pass_: str, itemsize: int, rows: int,
             spatial: tuple[int, int], halves: torch.Tensor, merged: torch.Tensor) -> dict:
    """The copy, the shipped kernel and each prototype's, on one placement's tensors. The
    forward writes ``merged`` from ``halves``; the backward writes ``halves`` from ``merged``."""
    n = spatial[0] * spatial[1]
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = [ctypes.c_void_p(t.data_ptr()) for t in (halves[0], halves[1], merged)]
    if pass_ == "fwd":
        fns = {"copy": flat_copy(halves, merged),
               "shipped": lambda: op.launch_forward(halves[0], halves[1], merged, stream,
                                                    spatial)}
        args = (*ptrs, ctypes.c_int(rows), ctypes.c_int(n), ctypes.c_void_p(stream))
        symbols = [(lib, sym) for lib, sym in kernels[0].get(itemsize, [])
                   if n * itemsize % 16 == 0]
    else:
        fns = {"copy": flat_copy(merged, halves),
               "shipped": lambda: op.launch_backward(merged, halves[0], halves[1], stream)}
        args = (ptrs[2], ptrs[0], ptrs[1], ctypes.c_int(rows), ctypes.c_int(n),
                ctypes.c_void_p(stream))
        symbols = []
    if 32 * n * itemsize <= 200 * 1024:
        symbols += kernels[1].get((pass_, itemsize), [])
    for lib, symbol in symbols:
        fn = getattr(libs[lib], symbol)
        fn.restype = ctypes.c_int
        fns[symbol] = functools.partial(fn, *args)
    return fns


def run(libs: dict[str, ctypes.CDLL], cases: list[tuple], kernels: tuple[dict, dict],
        out_path: str) -> None:
    """Every case's copy, shipped kernel and prototypes, three placements, into ``out_path``."""
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows_out = []
    for pass_, nh, dtype_name, batch, height, width in cases:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=".artifacts")
        times: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        for _ in range(PLACEMENTS):
            halves = merge_halves(rows, n, 32, dtype, gen)
            merged = torch.randn(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype,
                                 generator=gen) + 1
            if pass_ == "fwd":
                want, written = reference.merge(halves[0], halves[1], nh, height, width), merged
            else:
                want, written = torch.stack(reference.merge_backward(merged, nh, 32)), halves
            fns = pass_fns(libs, kernels, op, pass_, dtype.itemsize, rows, (height, width), halves,
                           merged)
            for name, fn in list(fns.items()):
                if name != "copy":
                    written.fill_(float("nan"))
                    rc = fn()
                    if rc == TOO_BIG:  # this prototype cannot hold this N: leave it out here
                        del fns[name]
                        continue
                    if rc not in (None, 0):
                        raise RuntimeError(f"launch failed: {name} rc={rc}")
                    torch.cuda.synchronize()
                    exact[name] = exact.get(name, True) and reference.same_bits(written, want)
            copy_us = prof.median_us(fns["copy"])
            times.setdefault("copy us", []).append(copy_us)
            for name, fn in fns.items():
                if name != "copy":
                    times.setdefault(name, []).append(prof.median_us(fn) / copy_us)
        case = (f"{pass_} nh{nh} {dtype_name} {batch}x{height}x{width} N={n} "
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
                print(f"  {r['impl']:24s} {r['ratio']:8.3f} {r['exact']}", flush=True)


if __name__ == "__main__":
    run({"tma": ctypes.CDLL(sys.argv[1]), "stores": ctypes.CDLL(sys.argv[2])}, CASES,
        (TILE_KERNELS, BLOCK_KERNELS), sys.argv[3])
