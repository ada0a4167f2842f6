"""Probe (docs/perf.md v24): do the tail rows lose to the copy because their output rows are not
whole 32-byte sectors? The shipped kernels at ``N`` whose rows are (``N*itemsize % 32 == 0``) and
are not, side by side, and the shifted kernel (whose CTAs meet on sector boundaries) forced in
place of the tiled 16-byte one at the same ``N``. Times from the profiler against a copy of the
kernel's own buffers, three placements, bit-exact checks on poisoned outputs.

    PYTHONPATH=. python3 docs/bench-tails/v24/probe_sectors.py OUT.json
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys

import torch

from psa_tvm import reference
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler, flat_copy, merge_halves

CASES = [  # (num_heads, dtype, batch, height, width); rows of N*itemsize bytes
    (4, "float32", 64, 8, 37), (4, "float32", 64, 20, 15), (4, "float32", 64, 16, 19),
    (4, "float32", 16, 8, 37), (4, "float32", 16, 20, 15), (4, "float32", 16, 16, 19),
    (4, "float16", 64, 48, 19), (4, "float16", 64, 40, 23), (4, "float16", 64, 32, 29),
    (4, "float16", 64, 16, 67), (4, "float16", 64, 37, 29), (4, "float16", 64, 40, 27),
    (4, "float32", 16, 16, 67), (4, "float32", 16, 37, 29), (4, "float32", 16, 40, 27),
]
PLACEMENTS = 3


def forced_shifted(op: PsaMergeAttnRuntimeOp) -> PsaMergeAttnRuntimeOp | None:
    """``op`` without its plain int32 kernels wider than scalar on the N side: where ``N`` is a
    multiple of the vector the shifted kernel then runs instead of the tiled 16-byte one."""
    builds = {}
    for pass_, build in op.builds.items():
        kept = tuple(k for k in build.kernels if k.shifted or k.index_dtype != "int32"
                     or k.vec == 1)
        if not any(k.shifted for k in kept):
            return None
        builds[pass_] = dataclasses.replace(build, kernels=kept)
    config = op.config
    return PsaMergeAttnRuntimeOp(config.key_dim, config.num_heads, config.dtype,
                                 schedule="tiled", builds=builds)


def placement_fns(ops: dict[str, PsaMergeAttnRuntimeOp], spatial: tuple[int, int],
                  inputs: torch.Tensor, merged: torch.Tensor, grad: torch.Tensor,
                  grads_out: torch.Tensor) -> tuple[dict, dict]:
    """Both passes of the copy and of every op on one placement's tensors, and the kernel each
    op launches there."""
    lo, hi, d_lo, d_hi = inputs[0], inputs[1], grads_out[0], grads_out[1]
    stream = torch.cuda.current_stream().cuda_stream
    fns = {("forward", "copy"): flat_copy(inputs, merged),
           ("backward", "copy"): flat_copy(grad, grads_out)}
    kernels = {}
    for name, op in ops.items():
        fns[("forward", name)] = (lambda op=op: op.launch_forward(lo, hi, merged, stream,
                                                                  spatial))
        fns[("backward", name)] = lambda op=op: op.launch_backward(grad, d_lo, d_hi, stream)
        kernels[("forward", name)] = op.plan_forward([lo, hi], merged, spatial).kernel.entry
        kernels[("backward", name)] = op.plan_backward(grad, [d_lo, d_hi]).kernel.entry
    return fns, kernels


def main() -> None:
    out_path = sys.argv[1]
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows_out = []
    for nh, dtype_name, batch, height, width in CASES:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        ops = {"shipped": PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled",
                                                artifacts=".artifacts")}
        if (forced := forced_shifted(ops["shipped"])) is not None:
            ops["shifted"] = forced
        times: dict[tuple[str, str], list[float]] = {}
        exact: dict[tuple[str, str], bool] = {}
        kernels: dict[tuple[str, str], str] = {}
        for _ in range(PLACEMENTS):
            inputs = merge_halves(rows, n, 32, dtype, gen)
            lo, hi = inputs[0], inputs[1]
            merged = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
            grad = torch.randn(merged.shape, device="cuda", dtype=dtype, generator=gen) + 3
            grads_out = torch.empty_like(inputs)
            d_lo, d_hi = grads_out[0], grads_out[1]
            want_f = reference.merge(lo, hi, nh, height, width)
            want_lo, want_hi = reference.merge_backward(grad, nh, 32)
            fns, chosen = placement_fns(ops, (height, width), inputs, merged, grad, grads_out)
            kernels.update(chosen)
            for key, fn in fns.items():
                if key[1] == "copy":
                    continue
                merged.fill_(float("nan"))
                grads_out.fill_(-7.0)
                fn()
                torch.cuda.synchronize()
                ok = (reference.same_bits(merged, want_f) if key[0] == "forward" else
                      reference.same_bits(d_lo, want_lo) and reference.same_bits(d_hi, want_hi))
                exact[key] = exact.get(key, True) and ok
            copy_us = {p: prof.median_us(fns[(p, "copy")]) for p in ("forward", "backward")}
            for key, fn in fns.items():
                times.setdefault(key, []).append(prof.median_us(fn) / copy_us[key[0]])
        case = (f"nh{nh} {dtype_name} {batch}x{height}x{width} N={n} "
                f"row%32={n * dtype.itemsize % 32}")
        for (pass_, impl), ratios in times.items():
            rows_out.append({"case": case, "pass": pass_, "impl": impl,
                             "ratio": round(statistics.median(ratios), 4),
                             "ratios": [round(r, 4) for r in ratios],
                             "kernel": kernels.get((pass_, impl)),
                             "exact": exact.get((pass_, impl))})
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)
        print(case, flush=True)
        for r in rows_out:
            if r["case"] == case:
                print(f"  {r['pass']:8s} {r['impl']:8s} {r['ratio']:6.3f} {r['exact']} "
                      f"{r['kernel']}", flush=True)


if __name__ == "__main__":
    main()
