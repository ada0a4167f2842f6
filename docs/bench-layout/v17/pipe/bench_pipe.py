"""gather_pipe.cu against the library's gathers and a copy of the same bytes, in one process:
profiler kernel time after an L2 flush (psa_tvm.tools.timing.KernelProfiler), every output
poisoned and compared bitwise with torch's permute. Needs CuPy. docs/perf.md v17.

    nvcc -cubin -arch=sm_90 -O3 -std=c++17 gather_pipe.cu -o gather_pipe.cubin
    python3 bench_pipe.py ARTIFACTS gather_pipe.cubin OUT.jsonl
"""
from __future__ import annotations

import json
import sys

import cupy as cp
import numpy as np
import torch

import psa_tvm
from psa_tvm.runtime.stream_op import PsaStreamRuntimeOp
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

# (layout, op, nh, batch, H, W): packed = the family's bnhd gathers [B, N, nh*S*32]
# (qkv: S = 4, attn: S = 2); grouped = the merge's [B*nh, N, 32] lo/hi (S = 2)
SHAPES = (("packed", "qkv", 6, 32, 20, 20), ("packed", "qkv", 4, 64, 20, 20),
          ("packed", "qkv", 4, 16, 20, 20), ("packed", "attn", 6, 32, 20, 20),
          ("packed", "attn", 4, 64, 20, 20), ("packed", "qkv", 6, 16, 40, 40),
          ("packed", "qkv", 4, 64, 40, 40), ("grouped", "merge", 4, 64, 40, 23),
          ("grouped", "merge", 4, 16, 40, 23), ("grouped", "merge", 4, 64, 20, 20),
          ("grouped", "merge", 4, 64, 40, 40))
STREAMS = {"qkv": 4, "attn": 2, "merge": 2}
SMS = torch.cuda.get_device_properties(0).multi_processor_count
# name -> (kernel, persistent CTAs per SM or 0 for one tile per CTA)
# Run 1 of this script timed the persistent ones (pipe_regs at 4/8 CTAs per SM, pipe_async2-4)
# beside tile and lines256, run 2 the line cut at other CTA shapes beside plain tiles of the same
# shapes and two copies; both with 8- or 4-way bank conflicts in the tile stores (run1/, run2/).
# Run 3: the same kernels with a skew per 8 tile rows (no conflicts), copies with longer pieces.
VARIANTS = {"tile": ("tile", 0), "tile128": ("tile128", 0), "tile256": ("tile256", 0),
            "lines128c64": ("lines128c64", 0), "lines256": ("lines256", 0),
            "lines256c64": ("lines256c64", 0), "lines512": ("lines512", 0),
            "rowcopy": ("rowcopy", 0), "rowcopy128": ("rowcopy128", 0),
            "rowcopy256": ("rowcopy256", 0), "flatcopy": ("flatcopy", 0)}
# CTA shape (channels, positions, halo) of the one-tile-per-CTA kernels
CTA_SHAPES = {"tile": (64, 64, 0), "tile128": (32, 128, 0), "tile256": (32, 256, 0),
              "lines128c64": (64, 128, 64), "lines256": (32, 256, 64),
              "lines256c64": (64, 256, 64), "lines512": (32, 512, 64), "rowcopy": (64, 64, 0),
              "rowcopy128": (64, 128, 0), "rowcopy256": (64, 256, 0)}
# copies [B, C, N] -> [B, C, N], compared with their input
DIAGNOSTIC = ("rowcopy", "rowcopy128", "rowcopy256", "flatcopy")


def one_shape(module, prof, stream, artifacts, layout, op, nh, batch, h, w) -> dict:
    n, s = h * w, STREAMS[op]
    c = nh * s * 32
    if layout == "packed":
        src = torch.randn(batch, n, c, device="cuda", dtype=torch.float16)
        want = src.permute(0, 2, 1).contiguous()
    else:
        src = torch.randn(batch, c // 32, n, 32, device="cuda", dtype=torch.float16)
        want = src.permute(0, 1, 3, 2).reshape(batch, c, n).contiguous()
    out = torch.empty_like(want)
    flat_src = src.view(-1).clone()
    flat_dst = torch.empty_like(flat_src)
    torch_stream = torch.cuda.current_stream().cuda_stream
    if layout == "packed":
        lib = PsaStreamRuntimeOp(op, 32, nh, "float16", artifacts=artifacts)
        name = "p" if op == "qkv" else "o"
        tensors = {name: src.view(batch, n, nh, s * 32), "merge": out.view(batch, nh, s, 32, n)}

        def library() -> None:
            lib.launch("forward", tensors, batch, n, torch_stream)
    else:
        grouped = src.view(batch, nh, 2, n, 32)
        lo = grouped[:, :, 0].reshape(batch * nh, n, 32).contiguous()
        hi = grouped[:, :, 1].reshape(batch * nh, n, 32).contiguous()
        out4 = out.view(batch, c, h, w)

        def library() -> None:
            psa_tvm.merge(lo, hi, nh, h, w, out=out4)
    args = (np.uint64(src.data_ptr()), np.uint64(out.data_ptr()), np.int32(n), np.int32(c),
            np.int32(batch))
    tiles = (n + 63) // 64 * (c // 64) * batch

    def launch(kernel: str, per_sm: int):
        func = module.get_function(kernel if kernel in DIAGNOSTIC else f"{kernel}_{layout}")
        if per_sm:
            grid = (min(tiles, per_sm * SMS), 1, 1)
        elif kernel == "flatcopy":
            grid = (min(src.numel() // 8 // 256, 16 * SMS), 1, 1)
        else:
            ch, t, halo = CTA_SHAPES[kernel]
            grid = ((n + halo + t - 1) // t, c // ch, batch)

        def call() -> None:
            with stream:
                func(grid, (256, 1, 1), args)
        return call

    calls = {"copy": lambda: flat_dst.copy_(flat_src), "library": library}
    calls.update({k: launch(*v) for k, v in VARIANTS.items()})
    row = {"layout": layout, "op": op, "shape": f"{op}/nh{nh}/b{batch}/{h}x{w}",
           "mb": round(2 * src.numel() * 2 / 1e6, 1)}
    for key, fn in calls.items():
        if key != "copy":
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            expect = src.reshape(want.shape) if key in DIAGNOSTIC else want
            row[key + "_exact"] = bool(torch.equal(out.view(torch.int16),
                                                   expect.view(torch.int16)))
        fn()
        row[key] = prof.median_us(fn)
    return row


def main(artifacts: str, cubin: str, out_path: str) -> None:
    module = cp.RawModule(path=cubin)
    prof = KernelProfiler(GpuTimer(reps=5), reps=15)
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    rows = []
    with open(out_path, "w") as sink:
        for shape in SHAPES:
            rows.append(one_shape(module, prof, stream, artifacts, *shape))
            sink.write(json.dumps(rows[-1]) + "\n")
            sink.flush()
    keys = ("library", *VARIANTS)
    print("\n| shape | MB | copy us | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 3) + "|")
    for r in rows:
        cells = [f"{r['copy'] / r[k]:.3f}" + ("" if r[k + "_exact"] else " WRONG") for k in keys]
        print(f"| {r['shape']} | {r['mb']} | {r['copy']:.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
