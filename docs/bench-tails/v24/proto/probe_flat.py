"""Prototype probe (docs/perf.md v24): tiles over each row's positions against tiles over the
flattened positions, beside the shipped kernel and the copy of the same buffers, per shape.

    PYTHONPATH=. python3 docs/bench-tails/v24/proto/probe_flat.py proto.so OUT.json
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
    (4, "float32", 64, 20, 15), (4, "float32", 16, 20, 15), (4, "float32", 64, 40, 23),
    (4, "float32", 16, 40, 40),
    (4, "float16", 64, 40, 23), (4, "float16", 16, 40, 23), (4, "float16", 64, 20, 15),
    (6, "float16", 16, 20, 20), (6, "float16", 64, 20, 20), (6, "bfloat16", 16, 20, 20),
    (4, "float16", 64, 40, 40), (2, "float16", 64, 20, 20),
]
PROTOS = {  # (T, VN, threads, the one N it is fitted to or None)
    2: [(256, 8, 256, None), (128, 8, 128, None), (128, 8, 256, None), (512, 8, 512, None),
        (256, 4, 256, None), (128, 4, 128, None), (200, 8, 200, 400), (400, 8, 400, 400),
        (184, 8, 184, 920), (232, 8, 232, 920)],
    4: [(128, 4, 256, None), (128, 4, 512, None), (64, 4, 128, None), (256, 4, 256, None),
        (256, 4, 512, None), (100, 4, 200, 300), (152, 4, 304, 300), (300, 4, 600, 300)],
}
PLACEMENTS = 3


def placement_fns(lib: ctypes.CDLL, op: PsaMergeAttnRuntimeOp, itemsize: int, rows: int,
                  spatial: tuple[int, int], inputs: torch.Tensor, merged: torch.Tensor,
                  grad: torch.Tensor, grads_out: torch.Tensor) -> dict:
    """Every implementation of both passes on one placement's tensors."""
    lo, hi, d_lo, d_hi = inputs[0], inputs[1], grads_out[0], grads_out[1]
    n = spatial[0] * spatial[1]
    stream = torch.cuda.current_stream().cuda_stream
    tag = "h" if itemsize == 2 else "f"
    fns = {
        ("forward", "copy"): flat_copy(inputs, merged),
        ("backward", "copy"): flat_copy(grad, grads_out),
        ("forward", "shipped"): lambda: op.launch_forward(lo, hi, merged, stream, spatial),
        ("backward", "shipped"): lambda: op.launch_backward(grad, d_lo, d_hi, stream),
    }
    for tile, vn, threads, fitted in PROTOS[itemsize]:
        if n % vn or fitted not in (None, n):
            continue
        for kind in ("flat", "row"):
            for pass_ in ("forward", "backward"):
                short = "fwd" if pass_ == "forward" else "bwd"
                fn = getattr(lib, f"{short}_{tag}_T{tile}_v{vn}_t{threads}_{kind}")
                fn.restype = ctypes.c_int
                ptrs = ((lo, hi, merged) if pass_ == "forward" else (grad, d_lo, d_hi))
                args = (*[ctypes.c_void_p(t.data_ptr()) for t in ptrs], ctypes.c_int(rows),
                        ctypes.c_int(n), ctypes.c_void_p(stream))
                fns[(pass_, f"{kind} T{tile} v{vn} t{threads}")] = functools.partial(fn, *args)
    return fns


def main() -> None:
    lib = ctypes.CDLL(sys.argv[1])
    out_path = sys.argv[2]
    timer = GpuTimer(reps=5)
    prof = KernelProfiler(timer, reps=20)
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows_out = []
    for nh, dtype_name, batch, height, width in CASES:
        dtype = getattr(torch, dtype_name)
        n, rows = height * width, batch * nh
        op = PsaMergeAttnRuntimeOp(32, nh, dtype_name, schedule="tiled", artifacts=".artifacts")
        es = torch.empty((), dtype=dtype).element_size()
        times: dict[tuple[str, str], list[float]] = {}
        exact: dict[tuple[str, str], bool] = {}
        for _ in range(PLACEMENTS):
            inputs = merge_halves(rows, n, 32, dtype, gen)
            lo, hi = inputs[0], inputs[1]
            merged = torch.empty(batch, 2 * nh * 32, height, width, device="cuda", dtype=dtype)
            grad = torch.randn(merged.shape, device="cuda", dtype=dtype, generator=gen) + 3
            grads_out = torch.empty_like(inputs)
            d_lo, d_hi = grads_out[0], grads_out[1]
            want_f = reference.merge(lo, hi, nh, height, width)
            want_lo, want_hi = reference.merge_backward(grad, nh, 32)
            fns = placement_fns(lib, op, es, rows, (height, width), inputs, merged, grad,
                                grads_out)
            for key, fn in fns.items():
                if key[1] != "copy":  # poisoned outputs, then bit for bit against torch
                    merged.fill_(float("nan"))
                    grads_out.fill_(-7.0)
                    if key[1] == "shipped":
                        fn()
                    elif fn() != 0:
                        raise RuntimeError(f"launch failed: {key}")
                    torch.cuda.synchronize()
                    ok = (reference.same_bits(merged, want_f) if key[0] == "forward" else
                          reference.same_bits(d_lo, want_lo) and reference.same_bits(d_hi, want_hi))
                    exact[key] = exact.get(key, True) and ok
            copy_us = {p: prof.median_us(fns[(p, "copy")]) for p in ("forward", "backward")}
            for key, fn in fns.items():
                us = prof.median_us(fn)
                times.setdefault(key, []).append(us / copy_us[key[0]])
                times.setdefault((key[0], key[1] + " us"), []).append(us)
        case = f"nh{nh} {dtype_name} {batch}x{height}x{width}"
        for (pass_, impl), ratios in times.items():
            if impl.endswith(" us"):
                continue
            rows_out.append({"case": case, "pass": pass_, "impl": impl,
                             "ratio": round(statistics.median(ratios), 4),
                             "ratios": [round(r, 4) for r in ratios],
                             "us": round(statistics.median(times[(pass_, impl + " us")]), 3),
                             "exact": exact.get((pass_, impl))})
        with open(out_path, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows_out}, f, indent=1)
        print(case, flush=True)
        for r in rows_out:
            if r["case"] == case:
                print(f"  {r['pass']:8s} {r['impl']:22s} {r['us']:8.3f} {r['ratio']:6.3f} "
                      f"{r['exact']}", flush=True)


if __name__ == "__main__":
    main()
