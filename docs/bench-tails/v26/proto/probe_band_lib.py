"""Probe (docs/perf.md v26, calls 2-4): the library's band kernels (psa_tvm/compiler/band.py, built
by TVM) against v23's shipped artifacts, v25's hand-written prototype of the same design
(prband.cu) and the copy of the kernel's own buffers, in one process, three placements, every
run checked bit-exact on a NaN-poisoned output.

    PYTHONPATH=. python3 docs/bench-tails/v26/proto/probe_band_lib.py OLD_ARTIFACTS \
        NEW_ARTIFACTS LIB_DIR OUT.json

LIB_DIR holds v25's prband.so and (from call 3) gen_tirband.py's tirband_{h,hb,f,fb}.so: the
library's kernel as TVM generated it, and with the prototype's store loop; (from call 4) the
band backward cases and its prototype, prbwd.so. In calls 2-3 the forward's output was
`torch.empty` before the poison; from call 4 it is random, as the backward's input must be.
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
from psa_tvm.tools.timing import GpuTimer, KernelProfiler, flat_copy, merge_halves

CASES = [  # ([pass,] num_heads, dtype, batch, height, width); the forward by default
    (4, "float16", 64, 40, 23), (4, "bfloat16", 64, 40, 23), (4, "float16", 64, 48, 19),
    (4, "float16", 64, 32, 29), (4, "float16", 64, 30, 30), (4, "float16", 64, 31, 29),
    (6, "float16", 64, 40, 23), (6, "bfloat16", 64, 40, 23), (2, "float16", 64, 40, 23),
    (4, "float16", 16, 40, 23), (4, "float16", 32, 40, 23),
    (4, "float32", 64, 20, 15), (4, "float32", 64, 8, 37), (4, "float32", 64, 17, 17),
    (6, "float32", 64, 20, 15), (2, "float32", 64, 20, 15), (4, "float32", 16, 20, 15),
    (4, "float32", 32, 20, 15),
    # from call 4: the band backward (16-bit N 1025-1100 where N % 4 != 0)
    ("bwd", 4, "float16", 64, 37, 29), ("bwd", 4, "bfloat16", 64, 37, 29),
    ("bwd", 4, "float16", 16, 37, 29), ("bwd", 6, "float16", 64, 37, 29),
    ("bwd", 2, "float16", 64, 37, 29), ("bwd", 4, "float16", 64, 33, 33),
    ("bwd", 4, "float16", 64, 35, 31), ("bwd", 4, "float16", 64, 16, 67),
]
PROTOTYPES = {  # itemsize -> (library, symbol); the libraries that LIB_DIR lacks are left out
    2: [("prband", "prband_fwd_h_r16_t256_b4"), ("tirband_h", "tirband_h"),
        ("tirband_hb", "tirband_hb")],
    4: [("prband", "prband_fwd_f_r32_t512_b2"), ("tirband_f", "tirband_f"),
        ("tirband_fb", "tirband_fb")],
    "bwd": [("prbwd", "prbwd_h_r32_t512_b2")],
}
PLACEMENTS = 3


def main(old_root: str, new_root: str, lib_dir: str, out_path: str) -> None:
    libs = {path.stem: ctypes.CDLL(str(path)) for path in Path(lib_dir).glob("*.so")
            if path.stem in {lib for kernels in PROTOTYPES.values() for lib, _ in kernels}}
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    for case in CASES:
        pass_, (nh, dtype_name, batch, height, width) = (
            (case[0], case[1:]) if isinstance(case[0], str) else ("fwd", case))
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        ops = {name: PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=root)
               for name, root in (("shipped", old_root), ("v26", new_root))}
        times: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        entries = {}
        for _ in range(PLACEMENTS):
            halves = merge_halves(rows, n, 32, dtype, gen)
            lo, hi = halves[0], halves[1]
            merged = torch.randn(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype,
                                 generator=gen) + 1
            pointers = [ctypes.c_void_p(t.data_ptr()) for t in (lo, hi, merged)]
            if pass_ == "fwd":
                want, written = reference.merge(lo, hi, nh, height, width), merged
                fns = {name: functools.partial(op.launch_forward, lo, hi, merged, stream,
                                               (height, width)) for name, op in ops.items()}
                args = (*pointers, ctypes.c_int(rows), ctypes.c_int(n), ctypes.c_void_p(stream))
                for name, op in ops.items():
                    entries[name] = op.plan_forward([lo, hi], merged, (height, width)).kernel.entry
                copy = flat_copy(halves, merged)
            else:
                want, written = torch.stack(reference.merge_backward(merged, nh, 32)), halves
                fns = {name: functools.partial(op.launch_backward, merged, lo, hi, stream)
                       for name, op in ops.items()}
                args = (pointers[2], pointers[0], pointers[1], ctypes.c_int(rows), ctypes.c_int(n),
                        ctypes.c_void_p(stream))
                for name, op in ops.items():
                    entries[name] = op.plan_backward(merged, [lo, hi]).kernel.entry
                copy = flat_copy(merged, halves)
            for lib, symbol in PROTOTYPES["bwd" if pass_ == "bwd" else dtype.itemsize]:
                if lib in libs and rows % 4 == 0:
                    proto = getattr(libs[lib], symbol)
                    proto.restype = ctypes.c_int
                    fns[symbol] = functools.partial(proto, *args)
            for name, fn in fns.items():
                written.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                exact[name] = exact.get(name, True) and reference.same_bits(written, want)
            copy_us = prof.median_us(copy)
            times.setdefault("copy us", []).append(copy_us)
            for name, fn in fns.items():
                times.setdefault(name, []).append(prof.median_us(fn) / copy_us)
        case = f"{pass_} nh{nh} {dtype_name} {batch}x{height}x{width} N={n}"
        print(case, {k: v.removeprefix(f"psa_merge_{pass_}_tiled_") for k, v in entries.items()},
              flush=True)
        for name, ratios in times.items():
            row = {"case": case, "impl": name, "ratio": round(statistics.median(ratios), 4),
                   "ratios": [round(r, 4) for r in ratios], "exact": exact.get(name),
                   "entry": entries.get(name)}
            rows_out.append(row)
            print(f"  {name:26s} {row['ratio']:8.3f} {row['exact']}", flush=True)
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:5])
