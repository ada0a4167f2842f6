"""The shifted-kernel sweep (docs/perf.md v13): each variant of gen_variants.py (cubins beside
this file) against the library's own choice ("tvm": the artifacts' tuned build, which picks
the shifted kernel where built) and a copy of the same bytes, profiler kernel times after an L2
flush; exactness vs psa_tvm.reference with NaN-poisoned outputs. Needs CuPy.

    python bench_variants.py ARTIFACTS OUT.jsonl
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

from psa_tvm import PsaMergeAttnRuntimeOp, reference
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

HERE = Path(__file__).parent
DT = {"float16": torch.float16, "float32": torch.float32}
BITS = {torch.float16: torch.int16, torch.float32: torch.int32}
SHAPES = [(16, 37, 29), (64, 37, 29), (64, 20, 15), (16, 40, 23), (64, 40, 23), (16, 40, 40),
          (64, 40, 40), (64, 20, 20), (16, 80, 80), (64, 1, 33), (16, 37, 37), (64, 25, 25)]
NH, KD = 4, 32


def main(artifacts: str, out_path: str, cubins: Path = HERE,
         shapes: list[tuple[int, int, int]] = SHAPES) -> None:
    """Every shape of ``shapes`` with the cubins of ``cubins`` (v14's sweep passes its own)."""
    meta = json.loads((cubins / "shift_meta.json").read_text())
    prof = KernelProfiler(GpuTimer(reps=5), reps=15)
    stream_ptr = torch.cuda.current_stream().cuda_stream
    stream = cp.cuda.ExternalStream(stream_ptr)
    with open(out_path, "w") as sink:
        for dtype in DT:
            module = cp.RawModule(path=str(cubins / f"shift_{dtype}.cubin"))
            tags = [t for t, m in meta.items() if t != "kernels" and m["dtype"] == dtype]
            base = PsaMergeAttnRuntimeOp(KD, NH, dtype, artifacts=artifacts, arch="sm_90")
            tuned = PsaMergeAttnRuntimeOp(KD, NH, dtype, arch="sm_90", builds=base.builds)
            for batch, h, w in shapes:
                row = one_shape(module, meta, tags, prof, tuned, stream, stream_ptr, dtype,
                                batch, h, w)
                sink.write(json.dumps(row) + "\n")
                sink.flush()


def one_shape(module, meta, tags, prof, tuned, stream, stream_ptr, dtype, batch, h, w) -> dict:
    n, dt = h * w, DT[dtype]
    bits = BITS[dt]
    lo = torch.randn(batch * NH, n, KD, device="cuda", dtype=dt) + 3
    hi = torch.randn_like(lo) - 3
    out = torch.empty(batch, 2 * NH * KD, h, w, device="cuda", dtype=dt)
    grad = torch.randn_like(out) + 3
    dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
    src, dst = torch.cat([lo.view(-1), hi.view(-1)]), torch.empty_like(out).view(-1)
    want = reference.merge(lo, hi, NH, h, w)
    want_lo, want_hi = reference.merge_backward(grad, NH, KD)
    copy = prof.median_us(lambda: dst.copy_(src))
    row = {"dtype": dtype, "shape": [batch, h, w], "n": n,
           "mb": 2 * out.numel() * out.element_size() / 1e6,
           "copy": copy, "tvm": {
               "fwd": prof.median_us(lambda: tuned.launch_forward(lo, hi, out, stream_ptr, (h, w))),
               "bwd": prof.median_us(lambda: tuned.launch_backward(grad, dlo, dhi, stream_ptr))}}
    for tag in tags:
        tile, threads = meta[tag]["tile"], meta[tag]["threads"]
        grid = (math.ceil(n / tile), batch * NH * 2, 1)
        grid_b = (math.ceil(n / meta[tag]["tile_bwd"]), batch * NH * 2, 1)
        f = module.get_function(f"fwd_{tag}_kernel")
        b = module.get_function(f"bwd_{tag}_kernel")

        block_b = (meta[tag].get("threads_bwd", threads), 1, 1)
        fwd_args = (np.uint64(hi.data_ptr()), np.uint64(lo.data_ptr()),
                    np.uint64(out.data_ptr()), np.int32(batch), np.int32(n))
        bwd_args = (np.uint64(dhi.data_ptr()), np.uint64(dlo.data_ptr()),
                    np.uint64(grad.data_ptr()), np.int32(batch), np.int32(n))

        def fwd(f=f, grid=grid, block=(threads, 1, 1), args=fwd_args):
            with stream:
                f(grid, block, args)

        def bwd(b=b, grid=grid_b, block=block_b, args=bwd_args):
            with stream:
                b(grid, block, args)
        for t in (out, dlo, dhi):
            t.fill_(float("nan"))
        fwd()
        bwd()
        torch.cuda.synchronize()
        exact = (torch.equal(out.view(bits), want.view(bits))
                 and torch.equal(dlo.view(bits), want_lo.view(bits))
                 and torch.equal(dhi.view(bits), want_hi.view(bits)))
        row[tag] = {"fwd": prof.median_us(fwd), "bwd": prof.median_us(bwd), "exact": bool(exact)}
    c = row["copy"]
    print(f"{dtype:8} {batch:3}x{h}x{w:<3} N={n:5} {row['mb']:6.1f}MB copy {c:6.2f} | tvm "
          f"{row['tvm']['fwd']/c:.2f}/{row['tvm']['bwd']/c:.2f} | " + " ".join(
              f"{t.split('_', 1)[1]}:{row[t]['fwd'] / c:.2f}/{row[t]['bwd'] / c:.2f}"
              f"{'' if row[t]['exact'] else '!X'}" for t in tags), flush=True)
    return row


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
