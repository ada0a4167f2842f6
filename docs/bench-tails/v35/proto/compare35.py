"""Compare (docs/perf.md v35, call 8): the float32 forwards two artifact directories choose, on
the same tensors, against the memcpy of the kernel's own buffers (probe35.py's method: profiler
kernel time, three placements alive at once, every run bit-exact on NaN-poisoned outputs first).
BEFORE holds v33's float32 builds, AFTER this round's, whose 37x29 calls of 40-66 ``B * nh``
take the 8-row band with L2-hinted loads (512 threads at 4 heads, 384 at 2 and 6).

    PYTHONPATH=. python3 docs/bench-tails/v35/proto/compare35.py BEFORE AFTER OUT.json
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

#: (num_heads, batch, height, width): each head count inside the new kernel's B * nh (40-66)
#: and just outside it, the N range's ends, and the benchmark's float32 37x29 rows.
CASES = [
    *[(4, b, 37, 29) for b in (8, 10, 12, 16, 17, 64)],
    (4, 16, 1, 1072), (4, 16, 1, 1075), (4, 16, 36, 30),
    *[(2, b, 37, 29) for b in (20, 24, 32, 33, 34)],
    *[(6, b, 37, 29) for b in (7, 10, 11, 12)],
]
PLACEMENTS = 3


def main(before: str, after: str, out_path: str) -> None:
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    for nh, batch, height, width in CASES:
        n, rows = height * width, batch * nh
        ops = {name: PsaMergeAttnRuntimeOp(32, nh, "float32", schedule="tiled", artifacts=root)
               for name, root in (("before", before), ("after", after))}
        ratios: dict[str, list[float]] = {}
        exact, entries, alive = {}, {}, []
        for _ in range(PLACEMENTS):
            halves = merge_halves(rows, n, 32, torch.float32, gen)
            lo, hi = halves[0], halves[1]
            out = torch.empty(batch, 2 * nh * 32, height, width, device="cuda")
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
        case = f"fwd nh{nh} float32 {batch}x{height}x{width} N={n} B*nh={rows}"
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
