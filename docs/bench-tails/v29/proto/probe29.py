"""Probe (docs/perf.md v29): backward variants against the shipped artifacts and the copy of
the kernel's own buffers, in one process, three placements, every run checked bit-exact on
NaN-poisoned outputs. Call 1: band backwards (gen_bwd29.py); calls 2-3: shifted backwards
with other tiles (gen_shift29.py); call 4: both at the call sizes that would split them;
call 5: the final artifacts against v28's shifted backward; call 8: float32 shifted forwards.

    PYTHONPATH=. python3 docs/bench-tails/v29/proto/probe29.py ARTIFACTS OUT.json CALL LIB.so...

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

CASES = [  # (num_heads, dtype, batch, height, width), backward
    (4, "float16", 64, 37, 29), (4, "bfloat16", 64, 37, 29), (4, "float32", 64, 37, 29),
    (4, "float16", 48, 37, 29), (6, "float16", 64, 37, 29), (2, "float16", 64, 37, 29),
    (4, "float16", 32, 37, 29), (4, "float16", 16, 37, 29), (4, "float16", 64, 36, 30),
    (4, "float16", 64, 16, 67), (4, "float32", 16, 37, 29), (4, "float32", 32, 37, 29),
    (4, "float32", 64, 36, 30), (6, "float32", 64, 37, 29),
    (4, "float16", 64, 40, 23), (4, "bfloat16", 64, 40, 23), (6, "float16", 64, 40, 23),
    (4, "float16", 64, 30, 30), (4, "float16", 64, 31, 29), (4, "float16", 32, 40, 23),
]
#: Call 2: the rows a tile of the shifted backward leaves part empty (16-bit 248 positions:
#: N 1073 in 5 tiles, the last 81 full; float32 124: 9 tiles, the last 81).
CASES_CALL2 = [
    (4, "float16", 64, 37, 29), (4, "bfloat16", 64, 37, 29), (6, "float16", 64, 37, 29),
    (4, "float16", 48, 37, 29), (4, "float16", 32, 37, 29), (4, "float16", 16, 37, 29),
    (4, "float16", 64, 36, 30), (4, "float16", 64, 16, 67), (2, "float16", 64, 37, 29),
    (4, "float16", 64, 40, 23), (4, "bfloat16", 64, 40, 23), (6, "float16", 64, 40, 23),
    (4, "float16", 16, 40, 23), (4, "float16", 64, 30, 30), (4, "float16", 64, 31, 29),
    (4, "float16", 64, 20, 20), (4, "float16", 64, 40, 40),
    (4, "float32", 64, 37, 29), (4, "float32", 16, 37, 29), (4, "float32", 32, 37, 29),
    (4, "float32", 64, 36, 30), (6, "float32", 64, 37, 29), (4, "float32", 64, 40, 23),
    (4, "float32", 16, 40, 23), (4, "float32", 64, 20, 15),
]
#: Call 4: the call sizes (B * nh) that split the band backwards of N 897-960 and 1073-1079
#: between them and the shipped kernel, and float32 37x29 with its tuned shifted tile.
CASES_CALL4 = [
    *[(4, "float16", b, 40, 23) for b in (16, 24, 30, 32, 34, 40, 48, 56, 60, 62, 64, 66, 72)],
    (4, "bfloat16", 64, 40, 23), (2, "float16", 64, 40, 23), (2, "float16", 128, 40, 23),
    (6, "float16", 42, 40, 23), (6, "float16", 44, 40, 23), (6, "float16", 64, 40, 23),
    (4, "float16", 64, 30, 30), (4, "float16", 64, 31, 29), (4, "float16", 64, 32, 29),
    (4, "float16", 64, 48, 19), (4, "float16", 64, 31, 31),
    *[(4, "float16", b, 37, 29) for b in (16, 24, 30, 32, 33, 40, 48, 56, 60, 62, 64, 66)],
    (4, "bfloat16", 64, 37, 29), (4, "bfloat16", 32, 37, 29), (2, "float16", 64, 37, 29),
    (2, "float16", 128, 37, 29), (6, "float16", 22, 37, 29), (6, "float16", 42, 37, 29),
    (6, "float16", 44, 37, 29), (4, "float16", 64, 1, 1075), (4, "float16", 64, 1, 1079),
    (4, "float16", 32, 1, 1077),
    (4, "float32", 64, 37, 29), (4, "float32", 16, 37, 29), (4, "float32", 32, 37, 29),
    (6, "float32", 64, 37, 29), (4, "float32", 64, 36, 30),
]
#: Call 5: call 4's 16-bit rows against the final artifacts, whose band backwards run there,
#: beside v28's shifted backward (gen_shift29.py CALL 5) and call 4's band prototypes.
CASES_CALL5 = [case for case in CASES_CALL4 if case[1] != "float32"]
#: Call 8: the float32 batch-16 forwards still above 1.05 (37x29 on the shifted kernel, 20x15 on
#: the 16-byte tiled one) and their neighbours, against the shifted forward's other shapes
#: (gen_shift29.py CALL 8); forward, unlike the calls before.
CASES_CALL8 = [
    (4, "float32", 16, 37, 29), (4, "float32", 8, 37, 29), (4, "float32", 24, 37, 29),
    (4, "float32", 32, 37, 29), (4, "float32", 64, 37, 29), (6, "float32", 16, 37, 29),
    (2, "float32", 32, 37, 29), (4, "float32", 16, 36, 30), (4, "float32", 16, 20, 15),
    (4, "float32", 16, 40, 23), (4, "float32", 64, 40, 23), (4, "float32", 16, 1, 33),
]
PLACEMENTS = 3
TAGS = {2: "_h_", 4: "_f_"}


def main(root: str, out_path: str, call: str, *lib_paths: str) -> None:
    symbols = {}
    for lib_path in lib_paths:
        lib = ctypes.CDLL(lib_path)
        symbols.update({name: getattr(lib, name)
                        for name in Path(lib_path + ".txt").read_text().split()})
    names = {tag: [name for name in symbols if tag in name] for tag in TAGS.values()}
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    forward = call == "8"
    cases = {"1": CASES, "2": CASES_CALL2, "4": CASES_CALL4, "5": CASES_CALL5,
             "8": CASES_CALL8}[call]
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
            grad = torch.randn(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype,
                               generator=gen) + 1
            if forward:  # grad is the forward's output here, lo and hi its inputs
                want, written = reference.merge(lo, hi, nh, height, width), grad
                fns = {"shipped": functools.partial(op.launch_forward, lo, hi, grad, stream,
                                                    (height, width))}
                entry = op.plan_forward([lo, hi], grad, (height, width)).kernel.entry
                pointers = (lo, hi, grad)
            else:
                want, written = torch.stack(reference.merge_backward(grad, nh, 32)), halves
                fns = {"shipped": functools.partial(op.launch_backward, grad, lo, hi, stream)}
                entry = op.plan_backward(grad, [lo, hi]).kernel.entry
                pointers = (grad, lo, hi)
            args = (*(ctypes.c_void_p(t.data_ptr()) for t in pointers), ctypes.c_int(rows),
                    ctypes.c_int(n), ctypes.c_void_p(stream))
            for symbol in names[TAGS[dtype.itemsize]]:
                bounds = re.search(r"_n(\d+)to(\d+)$", symbol)
                if bounds and not int(bounds[1]) <= n <= int(bounds[2]):
                    continue  # a kernel's tile holds only its N range
                fn = symbols[symbol]
                fn.restype = ctypes.c_int
                fns[symbol] = functools.partial(fn, *args)
            for name, fn in fns.items():
                written.fill_(float("nan"))
                rc = fn()
                torch.cuda.synchronize()
                exact[name] = (exact.get(name, True) and rc in (None, 0)
                               and reference.same_bits(written, want))
            copy = flat_copy(halves, grad) if forward else flat_copy(grad, halves)
            copy_us = prof.median_us(copy)
            times.setdefault("copy us", []).append(copy_us)
            for name, fn in fns.items():
                kernel_us = prof.median_us(fn)  # None: the profiler caught no kernel
                times.setdefault(name, []).append(kernel_us / copy_us if kernel_us else
                                                  float("nan"))
        pass_ = "fwd" if forward else "bwd"
        case = f"{pass_} nh{nh} {dtype_name} {batch}x{height}x{width} N={n}"
        print(case, entry.removeprefix(f"psa_merge_{pass_}_tiled_"), flush=True)
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
