"""Odd-N experiment (oddn_experiment.cu: shifted smem rows, aligned 16-byte N-side accesses)
against the tuned TVM build in the same process: profiler kernel time / copy time, exactness
checked against psa_tvm.reference. Needs CuPy. docs/perf.md, v7.

    nvcc -cubin -arch=sm_90 -O3 oddn_experiment.cu -o oddn_experiment.cubin
    python3 oddn_experiment_bench.py ARTIFACTS OUT.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

from psa_tvm import PsaMergeAttnRuntimeOp, reference
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

KERNELS = {"float16": [(128, 128), (128, 256), (64, 128)], "bfloat16": [(128, 128), (64, 128)],
           "float32": [(64, 128), (64, 256), (128, 128)]}
NAME = {"float16": "f16", "bfloat16": "f16", "float32": "f32"}  # bfloat16: the same bits
DT = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
SHAPES = [(16, 37, 29), (64, 37, 29), (16, 40, 40), (64, 40, 40), (64, 20, 15), (16, 40, 23),
          (64, 40, 23), (64, 20, 20)]
NH, KD = 4, 32


def raw_launch(func, grid, threads, ptrs, n, stream):
    def launch() -> None:
        with stream:
            func(grid, (threads, 1, 1), (*(np.uint64(p) for p in ptrs), np.int32(n)))
    return launch


def main(artifacts: str, out_path: str) -> None:
    module = cp.RawModule(path=str(Path(__file__).with_name("oddn_experiment.cubin")))
    prof = KernelProfiler(GpuTimer(reps=5), reps=15)
    stream_ptr = torch.cuda.current_stream().cuda_stream
    stream = cp.cuda.ExternalStream(stream_ptr)
    with open(out_path, "w") as sink:
        for dtype, variants in KERNELS.items():
            base = PsaMergeAttnRuntimeOp(KD, NH, dtype, artifacts=artifacts, arch="sm_90")
            tuned = PsaMergeAttnRuntimeOp(KD, NH, dtype, arch="sm_90", builds=base.builds)
            for batch, h, w in SHAPES:
                sink.write(json.dumps(one_shape(module, prof, tuned, stream, stream_ptr, dtype,
                                                variants, batch, h, w)) + "\n")
                sink.flush()


def one_shape(module, prof, tuned, stream, stream_ptr, dtype, variants, batch, h, w) -> dict:
    n, dt, bits = h * w, DT[dtype], BITS[DT[dtype]]
    lo = torch.randn(batch * NH, n, KD, device="cuda", dtype=dt) + 3
    hi = torch.randn_like(lo) - 3
    out = torch.empty(batch, 2 * NH * KD, h, w, device="cuda", dtype=dt)
    grad = torch.randn_like(out) + 3
    dlo, dhi = torch.empty_like(lo), torch.empty_like(hi)
    src, dst = torch.cat([lo.view(-1), hi.view(-1)]), torch.empty_like(out).view(-1)
    want = reference.merge(lo, hi, NH, h, w)
    want_lo, want_hi = reference.merge_backward(grad, NH, KD)
    copy = prof.median_us(lambda: dst.copy_(src))
    row = {"dtype": dtype, "shape": [batch, h, w], "n": n, "copy": copy, "tvm_tuned": {
        "fwd": prof.median_us(lambda: tuned.launch_forward(lo, hi, out, stream_ptr, (h, w))),
        "bwd": prof.median_us(lambda: tuned.launch_backward(grad, dlo, dhi, stream_ptr))}}
    for tile, threads in variants:
        grid = ((n + tile - 1) // tile, batch * NH * 2, 1)
        name = f"{NAME[dtype]}_{tile}_{threads}"
        fwd = raw_launch(module.get_function(f"fwd2_{name}"), grid, threads,
                         (lo.data_ptr(), hi.data_ptr(), out.data_ptr()), n, stream)
        bwd = raw_launch(module.get_function(f"bwd2_{name}"), grid, threads,
                         (grad.data_ptr(), dlo.data_ptr(), dhi.data_ptr()), n, stream)
        for t in (out, dlo, dhi):
            t.fill_(float("nan"))
        fwd()
        bwd()
        torch.cuda.synchronize()
        exact = (torch.equal(out.view(bits), want.view(bits))
                 and torch.equal(dlo.view(bits), want_lo.view(bits))
                 and torch.equal(dhi.view(bits), want_hi.view(bits)))
        row[f"{tile}/{threads}"] = {"fwd": prof.median_us(fwd), "bwd": prof.median_us(bwd),
                                    "exact": bool(exact)}
    print(dtype, batch, h, w, {k: v for k, v in row.items() if isinstance(v, dict)}, flush=True)
    return row


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
