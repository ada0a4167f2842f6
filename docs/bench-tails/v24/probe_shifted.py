"""Probe (docs/perf.md v24): the shifted forward (CTAs meet on 32-byte sectors) with other tiles,
forced in place of the tiled 16-byte one, at rows that are not whole sectors (and at ones that
are, as control). Candidates are `psa-tvm tune build --shifted` directories. Times from the
profiler against a copy of the kernel's own buffers, three placements, bit-exact checks.

    PYTHONPATH=. python3 docs/bench-tails/v24/probe_shifted.py OUT.json CANDIDATE_DIR...
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

from psa_tvm import reference
from psa_tvm.runtime.manifest import Manifest
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler, flat_copy, merge_halves

sys.path.insert(0, "docs/bench-tails/v24")
from probe_sectors import forced_shifted

CASES = [  # (num_heads, dtype, batch, height, width)
    (4, "float32", 64, 20, 15), (4, "float32", 16, 20, 15), (4, "float32", 64, 8, 37),
    (4, "float32", 16, 37, 29), (4, "float32", 64, 37, 29),
    (4, "float16", 64, 40, 23), (4, "float16", 64, 40, 27), (4, "float16", 64, 48, 19),
    (4, "float16", 64, 37, 29), (4, "float16", 16, 37, 29),
]
PLACEMENTS = 3
FORWARD_FIELDS = ("fwd_threads", "fwd_row_threads", "fwd_positions", "grain")


def main() -> None:
    out_path, cand_dirs = sys.argv[1], sys.argv[2:]
    candidates = [b for d in cand_dirs for b in Manifest.load(d).builds]
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows_out = []
    for nh, dtype_name, batch, height, width in CASES:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        shipped = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled",
                                        artifacts=".artifacts")
        ops = {"shipped": shipped, "shipped-shifted": forced_shifted(shipped)}
        seen = set()
        for build in candidates:
            if build.config != shipped.config or not build.shifted_params:
                continue
            fields = tuple(build.shifted_params[f] for f in FORWARD_FIELDS)
            tile = fields[2] * fields[0] // fields[1]
            if fields in seen:
                continue
            seen.add(fields)
            op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled",
                                       builds={"forward": build, "backward": build})
            ops[f"s{tile} t{fields[0]} rt{fields[1]} p{fields[2]}"] = forced_shifted(op)
        times: dict[str, list[float]] = {}
        exact: dict[str, bool] = {}
        for _ in range(PLACEMENTS):
            inputs = merge_halves(rows, n, 32, dtype, gen)
            merged = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
            want = reference.merge(inputs[0], inputs[1], nh, height, width)
            fns = forward_fns(ops, (height, width), inputs, merged)
            for name, fn in fns.items():
                if name != "copy":
                    merged.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    exact[name] = exact.get(name, True) and reference.same_bits(merged, want)
            copy_us = prof.median_us(fns["copy"])
            for name, fn in fns.items():
                times.setdefault(name, []).append(prof.median_us(fn) / copy_us)
        case = f"nh{nh} {dtype_name} {batch}x{height}x{width} N={n}"
        for name, ratios in times.items():
            rows_out.append({"case": case, "impl": name,
                             "ratio": round(statistics.median(ratios), 4),
                             "ratios": [round(r, 4) for r in ratios], "exact": exact.get(name)})
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)
        print(case, flush=True)
        for r in sorted((r for r in rows_out if r["case"] == case), key=lambda r: r["ratio"]):
            print(f"  {r['impl']:24s} {r['ratio']:6.3f} {r['exact']}", flush=True)


def forward_fns(ops: dict[str, PsaMergeAttnRuntimeOp], spatial: tuple[int, int],
                inputs: torch.Tensor, merged: torch.Tensor) -> dict:
    """The copy and every op's forward on one placement's tensors."""
    lo, hi = inputs[0], inputs[1]
    stream = torch.cuda.current_stream().cuda_stream
    fns = {"copy": flat_copy(inputs, merged)}
    for name, op in ops.items():
        fns[name] = lambda op=op: op.launch_forward(lo, hi, merged, stream, spatial)
    return fns


if __name__ == "__main__":
    main()
