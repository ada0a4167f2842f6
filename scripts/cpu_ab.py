"""A/B of two builds' CPU libraries against torch's ``copy_``, in one process.

    python scripts/cpu_ab.py --a ART_BEFORE --b ART_AFTER [--threads 2] [--rounds 9]
    python scripts/cpu_ab.py --a ART [--threads 2]      # one build per process

``ART_*`` are ``psa-tvm build --target cpu`` directories (e.g. one built from ``main`` and one
from a branch); both are loaded through :func:`psa_tvm.runtime.cpu.cpu_kernels`, so each makes
the run time's own kernel choice. Per shape (``psa-tvm bench``'s CPU shapes) the copy and the
four kernel calls (A/B x forward/backward) run in interleaved rounds; each round times a batch
of calls (about 2 ms) and the best round per call is kept. Best-of rather than the median: on a
shared 2-core host one busy core stalls a 2-thread parallel region until the scheduler runs
its second thread, which inflates single rounds of either side by up to 10x. Every kernel's
result is checked bit-exact first.

With 2 threads on a 2-core host, prefer one build per process (``--a`` only, processes
alternated): each library has its own thread pool (``cpu_pool.cc``), and two pools plus torch's
OpenMP threads spinning after their regions put 3+ runnable threads on 2 cores, which stalls a
region until the scheduler runs its second thread (single rounds of 8-20x, either side).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, type=Path, help="artifact directory A (before)")
    parser.add_argument("--b", type=Path, default=None,
                        help="artifact directory B (after); omitted: A alone")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--shapes", nargs="*", default=None, help="e.g. 40x40/b16 (default: all)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    os.environ["PSA_TVM_CPU_THREADS"] = str(args.threads)  # before the first library loads

    import torch

    from psa_tvm import reference
    from psa_tvm.config import OpConfig
    from psa_tvm.runtime.cpu import cpu_kernels
    from psa_tvm.tools.bench import cpu_shapes

    torch.set_num_threads(args.threads)
    shapes = [s for s in cpu_shapes() if args.shapes is None or s.label in args.shapes]
    rows = []
    print(f"load {os.getloadavg()}", flush=True)
    for dtype_name in args.dtypes:
        for shape in shapes:
            rows.append(_time_shape(shape, dtype_name, args, torch, reference, OpConfig,
                                    cpu_kernels))
    print(f"load {os.getloadavg()}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "rounds": args.rounds,
                                         "rows": rows}, indent=1))
    return 0


def _time_shape(shape, dtype_name, args, torch, reference, OpConfig, cpu_kernels) -> dict:
    nh, kd, n = shape.num_heads, shape.key_dim, shape.n
    config = OpConfig(kd, nh, dtype_name)
    kernels = {"a": cpu_kernels(config, args.a)}
    if args.b is not None:
        kernels["b"] = cpu_kernels(config, args.b)
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    lo = (torch.randn(shape.batch * nh, n, kd, generator=gen) + 3).to(dtype)
    hi = (torch.randn(shape.batch * nh, n, kd, generator=gen) - 3).to(dtype)
    merged = reference.merge(lo, hi, nh, shape.height, shape.width)
    src, dst = merged.reshape(-1).clone(), torch.empty(merged.numel(), dtype=dtype)
    out = torch.empty_like(merged)
    out5, g5 = out.view(shape.batch, nh, 2, kd, n), merged.view(shape.batch, nh, 2, kd, n)
    d_lo, d_hi = torch.empty_like(lo), torch.empty_like(hi)
    for side, k in kernels.items():
        out.fill_(0)
        k.forward(lo, hi, out5, n)
        d_lo.fill_(0)
        d_hi.fill_(0)
        k.backward(g5, d_lo, d_hi, n)
        if not (torch.equal(out, merged) and torch.equal(d_lo, lo) and torch.equal(d_hi, hi)):
            raise AssertionError(f"{side}: not exact at {shape.label} {dtype_name}")
    fns = {"copy": lambda: dst.copy_(src)}
    for side, k in kernels.items():
        fns[f"{side}_fwd"] = lambda k=k: k.forward(lo, hi, out5, n)
        fns[f"{side}_bwd"] = lambda k=k: k.backward(g5, d_lo, d_hi, n)
    start = time.perf_counter()
    fns["a_fwd"]()
    reps = max(3, min(2000, int(2e-3 / max(time.perf_counter() - start, 1e-7))))
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(args.rounds):
        for name, fn in fns.items():
            fn()
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / reps * 1e6)
    copy = best["copy"]
    row = {"dtype": dtype_name, "shape": shape.label,
           "mb_moved": round(2 * merged.numel() * merged.element_size() / 1e6, 2),
           "copy_us": round(copy, 2),
           **{f"{name}_us": round(us, 2) for name, us in best.items() if name != "copy"},
           **{f"{name}_x": round(us / copy, 3) for name, us in best.items() if name != "copy"}}
    fwd = " -> ".join(f"{row[side + '_fwd_x']:5.2f}" for side in kernels)
    bwd = " -> ".join(f"{row[side + '_bwd_x']:5.2f}" for side in kernels)
    print(f"{dtype_name:8s} {shape.label:12s} {row['mb_moved']:6.1f} MB  copy {copy:8.1f} us  "
          f"fwd {fwd}  bwd {bwd}", flush=True)
    return row


if __name__ == "__main__":
    sys.exit(main())
