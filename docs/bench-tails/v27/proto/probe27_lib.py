"""Probe (docs/perf.md v27, call 2): the library's 37x29 band forwards (this round's artifacts)
against v26's shipped artifacts at the call sizes that split them, in one process, three
placements, every run checked bit-exact on a NaN-poisoned output.

    PYTHONPATH=. python3 docs/bench-tails/v27/proto/probe27_lib.py OLD NEW OUT.json
"""

from __future__ import annotations

import functools
import json
import statistics
import sys

import torch

from psa_tvm import reference
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler, flat_copy, merge_halves

CASES = [  # (num_heads, dtype, batch, height, width), forward
    (4, "float16", 10, 37, 29), (4, "float16", 16, 37, 29), (4, "bfloat16", 16, 37, 29),
    (4, "float16", 17, 37, 29), (4, "float16", 24, 37, 29), (4, "float16", 25, 37, 29),
    (4, "float16", 32, 37, 29), (4, "float16", 33, 37, 29), (4, "float16", 64, 37, 29),
    (6, "float16", 16, 37, 29), (6, "bfloat16", 16, 37, 29), (2, "float16", 32, 37, 29),
    (2, "float16", 64, 37, 29), (4, "float16", 16, 36, 30), (4, "float16", 16, 16, 67),
    (4, "float16", 64, 40, 23),
]
PLACEMENTS = 3


def main(old_root: str, new_root: str, out_path: str) -> None:
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    for nh, dtype_name, batch, height, width in CASES:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        ops = {name: PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=root)
               for name, root in (("v26", old_root), ("v27", new_root))}
        times: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        entries = {}
        for _ in range(PLACEMENTS):
            halves = merge_halves(rows, n, 32, dtype, gen)
            lo, hi = halves[0], halves[1]
            merged = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
            want = reference.merge(lo, hi, nh, height, width)
            fns = {name: functools.partial(op.launch_forward, lo, hi, merged, stream,
                                           (height, width)) for name, op in ops.items()}
            for name, op in ops.items():
                entries[name] = op.plan_forward([lo, hi], merged, (height, width)).kernel.entry
            for name, fn in fns.items():
                merged.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                exact[name] = exact.get(name, True) and reference.same_bits(merged, want)
            copy = flat_copy(halves, merged)
            copy_us = prof.median_us(copy)
            times.setdefault("copy us", []).append(copy_us)
            for name, fn in fns.items():
                times.setdefault(name, []).append(prof.median_us(fn) / copy_us)
        case = f"fwd nh{nh} {dtype_name} {batch}x{height}x{width} N={n}"
        print(case, {k: v.removeprefix("psa_merge_fwd_tiled_") for k, v in entries.items()},
              flush=True)
        for name, ratios in times.items():
            row = {"case": case, "impl": name, "ratio": round(statistics.median(ratios), 4),
                   "ratios": [round(r, 4) for r in ratios], "exact": exact.get(name),
                   "entry": entries.get(name)}
            rows_out.append(row)
            print(f"  {name:8s} {row['ratio']:8.3f} {row['exact']}", flush=True)
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
