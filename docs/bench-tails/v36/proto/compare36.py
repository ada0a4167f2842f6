"""Compare (docs/perf.md v36, call 2): the forwards two artifact directories choose, on the same
tensors, against the memcpy of the kernel's own buffers (compare35.py's method: profiler kernel
time, three placements alive at once, every run bit-exact on NaN-poisoned outputs first).
BEFORE holds v35's key_dim 32 builds, AFTER this round's: float32 ``N`` 297-303 on hinted 8-row
bands for 32-65 ``B * nh`` and hinted 16-row bands for 67-264, 16-bit ``N`` 399-401 on 16-row
bands at 6 CTAs an SM for 360-396.

    PYTHONPATH=. python3 docs/bench-tails/v36/proto/compare36.py BEFORE AFTER OUT.json [CALL]

Call 5 (``CASES_CALL5``): 16-bit 20x20 around the 8-row band added after call 4 (88-99
``B * nh``), BEFORE holding call 2's 16-bit builds.
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

#: (num_heads, dtype, batch, height, width): each head count inside the new kernels' B * nh
#: and just outside, the N ranges' ends, and the benchmark's rows.
CASES = [
    *[(4, "float32", b, 20, 15) for b in (16, 8, 12, 17, 20, 24, 32, 64, 68, 80)],
    (4, "float32", 16, 3, 99), (4, "float32", 16, 3, 101), (4, "float32", 16, 37, 8),
    *[(2, "float32", b, 20, 15) for b in (16, 32, 48, 128)],
    *[(6, "float32", b, 20, 15) for b in (10, 11, 16, 40)],
    *[(6, "float16", b, 20, 20) for b in (64, 60, 66, 16, 67)],
    (6, "float16", 64, 19, 21), (6, "bfloat16", 64, 20, 20), (4, "float16", 96, 20, 20),
    (2, "float16", 192, 20, 20),
]
CASES_CALL5 = [
    *[(6, "float16", b, 20, 20) for b in (16, 14, 15, 17, 64)],
    (6, "bfloat16", 16, 20, 20), (4, "float16", 22, 20, 20), (4, "float16", 24, 20, 20),
    (4, "float16", 25, 20, 20), (2, "float16", 48, 20, 20), (2, "float16", 44, 20, 20),
    (6, "float16", 16, 19, 21), (6, "float16", 16, 1, 401),
]
PLACEMENTS = 3


def main(before: str, after: str, out_path: str, call: str = "2") -> None:
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    for nh, dtype_name, batch, height, width in CASES if call == "2" else CASES_CALL5:
        n, rows, dtype = height * width, batch * nh, getattr(torch, dtype_name)
        ops = {name: PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=root)
               for name, root in (("before", before), ("after", after))}
        ratios: dict[str, list[float]] = {}
        exact, entries, alive = {}, {}, []
        for _ in range(PLACEMENTS):
            halves = merge_halves(rows, n, 32, dtype, gen)
            lo, hi = halves[0], halves[1]
            out = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
            alive.append((halves, out))
            want = reference.merge(lo, hi, nh, height, width)
            fns = {name: functools.partial(op.launch_forward, lo, hi, out, stream,
                                           (height, width)) for name, op in ops.items()}
            for name, op in ops.items():
                entries[name] = op.plan_forward([lo, hi], out, (height, width)).kernel.entry
                out.fill_(float("nan"))
                fns[name]()
                torch.cuda.synchronize()
                exact[name] = exact.get(name, True) and reference.same_bits(out, want)
            copy_us = prof.median_us(flat_copy(halves, out))
            ratios.setdefault("copy us", []).append(copy_us)
            for name, fn in fns.items():
                ratios.setdefault(name, []).append(prof.median_us(fn) / copy_us)
        case = f"fwd nh{nh} {dtype_name} {batch}x{height}x{width} N={n} B*nh={rows}"
        print(case, flush=True)
        for name, values in ratios.items():
            row = {"case": case, "impl": name, "ratio": round(statistics.median(values), 4),
                   "ratios": [round(v, 4) for v in values], "exact": exact.get(name),
                   "entry": entries.get(name)}
            rows_out.append(row)
            entry = (row["entry"] or "").removeprefix("psa_merge_fwd_tiled_")
            print(f"  {name:8s} {row['ratio']:8.3f} {row['exact']} {entry}", flush=True)
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
