"""Register-tile experiment (regtile_experiment.cu) against the tuned TVM build in the same
process: profiler kernel time / copy time of the same bytes, exactness against psa_tvm.reference
(bit-compared, outputs poisoned first). Needs CuPy. docs/perf.md, v11.

    nvcc -cubin -arch=sm_90 -O3 -std=c++17 regtile_experiment.cu -o regtile.cubin
    python3 regtile_experiment_bench.py ARTIFACTS CUBIN OUT.jsonl
"""

from __future__ import annotations

import json
import sys

import cupy as cp
import numpy as np
import torch

from psa_tvm import PsaMergeAttnRuntimeOp, reference
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

KD = 32
DT = {"float16": torch.float16, "float32": torch.float32}
BITS = {torch.float16: torch.int16, torch.float32: torch.int32}
ES = {"float16": 2, "float32": 4}
CONFIGS = [(128, 1), (128, 2), (256, 1)]
SEGMENTS = [(128, 128)]  # (threads, positions per segment)
KINDS = ("reg", "shift")
# (tag, bytes per position per CTA, thread counts): whole sector, half sector, bulk store
SLABS = [("", 32, (256, 512)), ("h", 16, (128, 256)), ("b", 32, (256, 512))]
# (B, nh, H, W)
SHAPES = [(16, 4, 40, 40), (64, 4, 40, 40), (16, 6, 40, 40), (64, 4, 20, 20), (16, 4, 80, 80),
          (16, 4, 37, 29), (64, 4, 37, 29), (64, 4, 20, 15), (16, 4, 40, 23), (64, 4, 40, 23),
          (64, 6, 20, 12), (1, 4, 37, 29)]


def launcher(func, grid, threads, ptrs, n, stream, smem=0):
    args = (*(np.uint64(p) for p in ptrs), np.int32(n))

    def launch() -> None:
        with stream:
            func(grid, (threads, 1, 1), args, shared_mem=smem)
    return launch


def check_and_time(prof, fwd, bwd, out, dlo, dhi, want, want_lo, want_hi, bits) -> dict:
    for t in (out, dlo, dhi):
        t.fill_(float("nan"))
    fwd()
    bwd()
    torch.cuda.synchronize()
    exact_f = torch.equal(out.view(bits), want.view(bits))
    exact_b = (torch.equal(dlo.view(bits), want_lo.view(bits))
               and torch.equal(dhi.view(bits), want_hi.view(bits)))
    return {"fwd": prof.median_us(fwd), "bwd": prof.median_us(bwd),
            "exact": bool(exact_f and exact_b), "exact_fwd": bool(exact_f),
            "exact_bwd": bool(exact_b)}


def main(artifacts: str, cubin: str, out_path: str, kinds: str = "reg,shift") -> None:
    global KINDS
    KINDS = tuple(k for k in kinds.split(",") if k)
    module = cp.RawModule(path=cubin)
    prof = KernelProfiler(GpuTimer(reps=5), reps=15)
    stream_ptr = torch.cuda.current_stream().cuda_stream
    stream = cp.cuda.ExternalStream(stream_ptr)
    ops: dict = {}
    summary = []
    with open(out_path, "w") as sink:
        for dtype in DT:
            for batch, nh, h, w in SHAPES:
                key = (nh, dtype)
                if key not in ops:
                    base = PsaMergeAttnRuntimeOp(KD, nh, dtype, artifacts=artifacts, arch="sm_90")
                    ops[key] = PsaMergeAttnRuntimeOp(KD, nh, dtype, arch="sm_90",
                                                     builds=base.builds)
                row = one_shape(module, prof, ops[key], stream, stream_ptr, dtype, batch, nh, h, w)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                summary.append(row)
    print(f"{'dtype':8} {'shape':14} {'N':>5} {'MB':>6} {'copy':>7} {'tvm f/b':>11} "
          f"{'best reg f/b':>22} {'best shift f/b':>22} {'best slab f/b':>22} "
          f"{'best segment f/b':>26}")
    for row in summary:
        tvm = row["tvm"]
        rf, rb = best(row, "reg", "fwd"), best(row, "reg", "bwd")
        sf, sb = best(row, "shift", "fwd"), best(row, "shift", "bwd")
        bf, bb = best(row, "slab_", "fwd"), best(row, "slab_", "bwd")
        hf, hb = best(row, "slabh", "fwd"), best(row, "slabh", "bwd")
        qf, qb = best(row, "slabb", "fwd"), best(row, "slabb", "bwd")
        gf, gb = best(row, "seg", "fwd"), best(row, "seg", "bwd")
        print(f"{row['dtype']:8} {row['shape']!s:14} {row['n']:5d} {row['mb']:6.1f} "
              f"{row['copy']:7.2f} {tvm['fwd']/row['copy']:5.2f}/{tvm['bwd']/row['copy']:5.2f} "
              f"{rf[0]:5.2f}({rf[1][4:]:>5})/{rb[0]:5.2f}({rb[1][4:]:>5}) "
              f"{sf[0]:5.2f}({sf[1][6:]:>5})/{sb[0]:5.2f}({sb[1][6:]:>5}) "
              f"{bf[0]:5.2f}({bf[1][5:]:>5})/{bb[0]:5.2f}({bb[1][5:]:>5}) "
              f"{gf[0]:5.2f}({gf[1][4:]:>7})/{gb[0]:5.2f}({gb[1][4:]:>7}) "
              f"half {hf[0]:5.2f}({hf[1][6:]:>3})/{hb[0]:5.2f}({hb[1][6:]:>3}) "
              f"bulk {qf[0]:5.2f}({qf[1][6:]:>3})/{qb[0]:5.2f}")
    bad = [(r['dtype'], r['shape'], k) for r in summary for k, v in r.items()
           if isinstance(v, dict) and v.get('exact') is False]
    print("inexact:", bad if bad else "none")


def best(row: dict, kind: str, pass_: str) -> tuple[float, str]:
    cands = [(v[pass_] / row["copy"], k) for k, v in row.items()
             if k.startswith(kind) and v.get(pass_) and v["exact"]]
    return min(cands) if cands else (float("nan"), "-")


def one_shape(module, prof, tuned, stream, stream_ptr, dtype, batch, nh, h, w) -> dict:
    n, dt, bits, es = h * w, DT[dtype], BITS[DT[dtype]], ES[dtype]
    ve = 16 // es
    lo = torch.randn(batch * nh, n, KD, device="cuda", dtype=dt) + 3
    hi = torch.randn_like(lo) - 3
    out = torch.empty(batch, 2 * nh * KD, h, w, device="cuda", dtype=dt)
    grad = torch.randn_like(out) + 3
    dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
    src, dst = torch.cat([lo.view(-1), hi.view(-1)]), torch.empty_like(out).view(-1)
    want = reference.merge(lo, hi, nh, h, w)
    want_lo, want_hi = reference.merge_backward(grad, nh, KD)
    copy = prof.median_us(lambda: dst.copy_(src))
    row = {"dtype": dtype, "shape": [batch, nh, h, w], "n": n,
           "mb": 2 * out.numel() * out.element_size() / 1e6, "copy": copy, "tvm": {
               "fwd": prof.median_us(lambda: tuned.launch_forward(lo, hi, out, stream_ptr, (h, w))),
               "bwd": prof.median_us(lambda: tuned.launch_backward(grad, dlo, dhi, stream_ptr))}}

    def timed_pair(fwd_name: str, bwd_name: str, grid: tuple, threads: int,
                   smem: int = 0) -> dict:
        """One forward and one backward kernel of the cubin: launched, checked, timed."""
        kernels = [module.get_function(fwd_name), module.get_function(bwd_name)]
        if smem:
            for k in kernels:
                k.max_dynamic_shared_size_bytes = smem
        fwd = launcher(kernels[0], grid, threads, (lo.data_ptr(), hi.data_ptr(), out.data_ptr()),
                       n, stream, smem)
        bwd = launcher(kernels[1], grid, threads,
                       (grad.data_ptr(), dlo.data_ptr(), dhi.data_ptr()), n, stream, smem)
        return check_and_time(prof, fwd, bwd, out, dlo, dhi, want, want_lo, want_hi, bits)

    for tag, rows_bytes, thread_sets in SLABS:
        slab = rows_bytes * n  # G*N*ES bytes of shared memory
        if slab > 227 * 1024:
            continue
        for threads in thread_sets:
            row[f"slab{tag}_{threads}"] = timed_pair(
                f"fwd_slab{tag}_e{es}_{threads}", f"bwd_slab{tag}_e{es}_{threads}",
                (KD * es // rows_bytes, batch * nh * 2, 1), threads, slab)
    for threads, seg in SEGMENTS:
        row[f"seg_{threads}_{seg}"] = timed_pair(
            f"fwd_seg_e{es}_{threads}_{seg}", f"bwd_seg_e{es}_{threads}_{seg}",
            ((n + seg - 1) // seg * (KD * es // 32), batch * nh * 2, 1), threads)
    for kind in KINDS:
        if kind == "reg" and n % ve:
            continue
        for threads, it in CONFIGS:
            tile = threads // (KD // ve) * ve * it
            name = f"e{es}_{threads}_{it}"
            row[f"{kind}_{threads}_{it}"] = timed_pair(
                f"fwd_{kind}_{name}", f"bwd_{kind}_{name}",
                ((n + tile - 1) // tile, batch * nh * 2, 1), threads)
    print(dtype, batch, nh, h, w, f"copy {copy:.2f}",
          {k: (round(v['fwd'] / copy, 3), round(v['bwd'] / copy, 3), v.get('exact_fwd', True),
               v.get('exact_bwd', True)) for k, v in row.items() if isinstance(v, dict)},
          flush=True)
    return row


if __name__ == "__main__":
    main(*sys.argv[1:5])
