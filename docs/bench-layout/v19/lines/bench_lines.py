"""merge_lines.cu (v18's hand-written merge forwards plus `line128/256/512`: line-aligned row
pieces with a 64-position halo) against the library's merge forward and a copy of the same
bytes, in one process: profiler kernel time after an L2 flush, every output poisoned and compared
bitwise with torch's permute. Needs CuPy. docs/perf.md v19. merge_lines.cu includes
../../v18/split/merge_split.cu; this script is v18's bench_split.py with the line variants.

    nvcc -cubin -arch=sm_90 -O3 -std=c++17 merge_lines.cu -o merge_lines.cubin
    PSA_TVM_ARTIFACTS=ART python3 bench_lines.py merge_lines.cubin OUT.jsonl [ROUNDS]
"""
from __future__ import annotations

import json
import sys

import cupy as cp
import numpy as np
import torch

import psa_tvm
from psa_tvm.tools.timing import GpuTimer, KernelProfiler

# (nh, batch, H, W): the merge forward's rows above 1.05x a copy in v17/v18 and neighbours
SHAPES = ((2, 64, 20, 20), (2, 16, 40, 40), (4, 64, 20, 20), (4, 16, 20, 20),
          (6, 16, 20, 20), (6, 64, 20, 20), (4, 64, 40, 23), (4, 16, 40, 23), (4, 64, 40, 40),
          (6, 64, 40, 23), (2, 64, 40, 23))
VARIANTS = {"split256x1": 256}
# run 1 also timed split128x2, split256x4, split512x2 and split512x4 (split_h200.jsonl)
# the library's two input tensors (lo, hi), slices alternating (two*) or lo first (two256s)
TWO = {"two256": 256, "line128": 128, "line256": 256, "line512": 512}


def one_shape(module, prof, stream, nh, batch, h, w) -> dict:
    n, c = h * w, nh * 2 * 32
    src = torch.randn(batch, c // 32, n, 32, device="cuda", dtype=torch.float16)
    want = src.permute(0, 1, 3, 2).reshape(batch, c, n).contiguous()
    out = torch.empty_like(want)
    flat_src, flat_dst = src.view(-1).clone(), torch.empty(src.numel(), device="cuda",
                                                            dtype=torch.float16)
    grouped = src.view(batch, nh, 2, n, 32)
    lo = grouped[:, :, 0].reshape(batch * nh, n, 32).contiguous()
    hi = grouped[:, :, 1].reshape(batch * nh, n, 32).contiguous()
    out4 = out.view(batch, c, h, w)
    args = (np.uint64(src.data_ptr()), np.uint64(out.data_ptr()), np.int32(n), np.int32(c),
            np.int32(batch))

    def launch(name: str, tile: int):
        func = module.get_function(name)
        grid = ((n + tile - 1) // tile, c // 32, batch)

        def call() -> None:
            with stream:
                func(grid, (256, 1, 1), args)
        return call

    calls = {"copy": lambda: flat_dst.copy_(flat_src),
             "library": lambda: psa_tvm.merge(lo, hi, nh, h, w, out=out4)}
    calls.update({k: launch(k, t) for k, t in VARIANTS.items()})
    rows = batch * nh
    two_args = (np.uint64(lo.data_ptr()), np.uint64(hi.data_ptr()), np.uint64(out.data_ptr()),
                np.int32(n), np.int32(rows))

    def launch_two(name: str, tile: int):
        func = module.get_function(name)
        halo = 64 if name.startswith("line") else 0
        grid = ((n + halo + tile - 1) // tile, 2 * rows, 1)

        def call() -> None:
            with stream:
                func(grid, (256, 1, 1), two_args)
        return call

    calls.update({k: launch_two(k, t) for k, t in TWO.items()})
    row = {"shape": f"merge/nh{nh}/b{batch}/{h}x{w}", "mb": round(2 * src.numel() * 2 / 1e6, 1)}
    for key, fn in calls.items():
        if key != "copy":
            out.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            row[key + "_exact"] = bool(torch.equal(out.view(torch.int16), want.view(torch.int16)))
        fn()
        row[key] = prof.median_us(fn)
    return row


def main(cubin: str, out_path: str, rounds: int = 2) -> None:
    module = cp.RawModule(path=cubin)
    prof = KernelProfiler(GpuTimer(reps=5), reps=15)
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    rows = []
    with open(out_path, "w") as sink:
        for run in range(rounds):
            for shape in SHAPES:
                rows.append({"round": run, **one_shape(module, prof, stream, *shape)})
                sink.write(json.dumps(rows[-1]) + "\n")
                sink.flush()
    keys = ("library", *VARIANTS, *TWO)
    print("\n| round | shape | MB | copy us | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 4) + "|")
    for r in rows:
        cells = [f"{r['copy'] / r[k]:.3f}" + ("" if r[k + "_exact"] else " WRONG") for k in keys]
        print(f"| {r['round']} | {r['shape']} | {r['mb']} | {r['copy']:.2f} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2)
