"""Compare (docs/perf.md v37, call 3): the forwards two artifact directories choose, on the same
tensors, against the memcpy of the kernel's own buffers (compare36.py's method: profiler kernel
time, three placements alive at once, every run bit-exact on NaN-poisoned outputs first), at
every call size of 8-300 MB that sweep37.py covers for the grids this round's kernels run at.
BEFORE holds v36's final builds, AFTER this round's: 16-bit ``N`` 297-303 and 399-401 on
16-row bands from 120 ``B * nh``, float32 ``N`` 297-303 on hinted 16-row bands up to 640.

    PYTHONPATH=. python3 docs/bench-tails/v37/proto/compare37.py BEFORE AFTER OUT.json
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

GRIDS = [(20, 15), (3, 99), (3, 101), (20, 20), (19, 21)]
BATCHES = [2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 160]
MIN_MB, MAX_MB = 8.0, 300.0
PLACEMENTS = 3


def cases() -> list[tuple[int, str, int, int, int]]:
    found = []
    for dtype_name in ("float32", "float16", "bfloat16"):
        itemsize = 4 if dtype_name == "float32" else 2
        for nh in (2, 4, 6):
            for height, width in GRIDS:
                if dtype_name == "float32" and height * width > 303:
                    continue  # float32 20x20 kernels did not change
                for batch in BATCHES:
                    mb = 2 * 2 * batch * nh * height * width * 32 * itemsize / 1e6
                    if MIN_MB <= mb <= MAX_MB:
                        found.append((nh, dtype_name, batch, height, width))
    return found


def main(before: str, after: str, out_path: str) -> None:
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=12)
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows_out = []
    for nh, dtype_name, batch, height, width in cases():
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
        values = {name: round(statistics.median(v), 4) for name, v in ratios.items()}
        rows_out.append({"case": case, "ratio": values,
                         "ratios": {k: [round(x, 4) for x in v] for k, v in ratios.items()},
                         "exact": exact, "entry": entries})
        changed = "" if entries["before"] == entries["after"] else " *"
        print(f"{case:48s} {values['before']:6.3f} -> {values['after']:6.3f} "
              f"{exact['before']!s:5s} {exact['after']!s:5s} "
              f"{entries['after'].split('_tiled_')[-1]}{changed}", flush=True)
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
