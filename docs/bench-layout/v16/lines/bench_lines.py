"""gather_lines.cu against the library's qkv gather and a copy of the same bytes, in one process:
profiler kernel time after an L2 flush (psa_tvm.tools.timing.KernelProfiler), outputs poisoned
and compared bitwise with torch's transpose. Needs CuPy. docs/perf.md v16.

    nvcc -cubin -arch=sm_90 -O3 -std=c++17 gather_lines.cu -o gather_lines.cubin
    python3 bench_lines.py ARTIFACTS gather_lines.cubin
"""
from __future__ import annotations

import sys

import cupy as cp
import numpy as np
import torch

from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

# (dim, batch, H=W): the layout benchmark's qkv rows; C = 2 * dim channels (4 kd-chunks a head)
SHAPES = ((384, 32, 20), (256, 64, 20), (256, 16, 20), (384, 16, 40), (256, 16, 40),
          (256, 64, 40))


def one_shape(module, prof, stream, artifacts: str, dim: int, batch: int, size: int) -> dict:
    """Every kernel at one shape: fraction of copy and exactness."""
    nh, n = dim // 64, size * size
    c = nh * 4 * 32
    src = torch.randn(batch, n, c, device="cuda", dtype=torch.float16)
    want = src.permute(0, 2, 1).contiguous()
    out = torch.empty_like(want)
    flat_src = src.view(-1).clone()
    flat_dst = torch.empty_like(flat_src)
    lib = PsaStreamRuntimeOp("qkv", 32, nh, "float16", artifacts=artifacts)
    tensors = {"p": src.view(batch, n, nh, 128), "merge": out.view(batch, nh, 4, 32, n)}
    torch_stream = torch.cuda.current_stream().cuda_stream
    args = (np.uint64(src.data_ptr()), np.uint64(out.data_ptr()), np.int32(n), np.int32(c))

    def launch(name: str, grid: tuple, block: tuple, smem: int = 0):
        func = module.get_function(name)
        if smem > 48 * 1024:
            func.max_dynamic_shared_size_bytes = smem

        def call() -> None:
            with stream:
                func(grid, block, args, shared_mem=smem)
        return call

    calls = {
        "copy": lambda: flat_dst.copy_(flat_src),
        "library": lambda: lib.launch("forward", tensors, batch, n, torch_stream),
        "tile": launch("gather_tile", ((n + 63) // 64, c // 64, batch), (256, 1, 1)),
        "lines": launch("gather_lines", ((n + 127) // 64, c // 64, batch), (256, 1, 1)),
        "slab32": launch("gather_slab32", (c // 32, batch, 1), (256, 1, 1), 32 * (n + 8) * 2),
        "slab64": launch("gather_slab64", (c // 64, batch, 1), (512, 1, 1), 64 * (n + 8) * 2),
    }
    row = {"shape": f"{dim},{batch},{size}x{size}", "mb": round(2 * src.numel() * 2 / 1e6, 1)}
    for key, fn in calls.items():
        if key != "copy":
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            row[key + "_exact"] = bool(torch.equal(out.view(torch.int16),
                                                   want.view(torch.int16)))
        fn()
        row[key] = prof.median_us(fn)
    return row


def main(artifacts: str, cubin: str) -> None:
    module = cp.RawModule(path=cubin)
    prof = KernelProfiler(GpuTimer(reps=5), reps=15)
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    rows = []
    for dim, batch, size in SHAPES:
        rows.append(one_shape(module, prof, stream, artifacts, dim, batch, size))
        print(rows[-1], flush=True)
    print("\n| shape (dim,B,HxW) | MB | copy us | library | tile | lines | slab32 | slab64 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cells = [f"{r['copy'] / r[k]:.3f}" + ("" if r[k + "_exact"] else " WRONG")
                 for k in ("library", "tile", "lines", "slab32", "slab64")]
        print(f"| {r['shape']} | {r['mb']} | {r['copy']:.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
