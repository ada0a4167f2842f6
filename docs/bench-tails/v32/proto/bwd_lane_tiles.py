"""The backward's square tiles against lane tiles (``cross_lane=False``: 8 channels x 16
positions for 16-bit, no cross-lane join, 8 live vectors), one thread, against torch's
``copy_`` (docs/perf.md v32, ``cpu/tile_variants_t1.txt``).

    OMP_NUM_THREADS=1 TVM_NUM_THREADS=1 python bwd_lane_tiles.py float16,bfloat16,float32 \\
        20x15/b1,37x29/b1,40x40/b1,40x23/b1
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time

import torch
import tvm
import tvm_ffi

from psa_tvm import reference
from psa_tvm.compiler.cpu import SHUFFLE, cpu_target
from psa_tvm.config import OpConfig


def main() -> None:
    torch.set_num_threads(1)
    dtypes, shapes = sys.argv[1].split(","), sys.argv[2].split(",")
    for dtype in dtypes:
        config = OpConfig(32, 4, dtype)
        default = SHUFFLE.default_params(config)
        variants = {"square": default, "lane": dataclasses.replace(default, cross_lane=False)}
        funcs = {name: SHUFFLE.build("backward", config, params, name=name)
                 for name, params in variants.items()}
        path = f"/tmp/bwd_lane_tiles_{dtype}.so"
        tvm.compile(tvm.IRModule(funcs), target=cpu_target()).export_library(path)
        module = tvm_ffi.load_module(path)
        for shape in shapes:
            time_shape(module, list(variants), dtype, shape)


def time_shape(module, names: list[str], dtype: str, shape: str) -> None:
    torch_dtype = getattr(torch, dtype)
    grid, batch_text = shape.split("/b")
    height, width = map(int, grid.split("x"))
    batch, n = int(batch_text), height * width
    lo = (torch.randn(batch * 4, n, 32) + 3).to(torch_dtype)
    hi = (torch.randn(batch * 4, n, 32) - 3).to(torch_dtype)
    grad = reference.merge(lo, hi, 4, height, width)
    grad5 = grad.view(batch, 4, 2, 32, n)
    d_lo, d_hi = torch.empty_like(lo), torch.empty_like(hi)
    src = grad.reshape(-1).clone()
    dst = torch.empty_like(src)
    fns = {"copy": lambda: dst.copy_(src)}
    for name in names:
        d_lo.zero_()
        d_hi.zero_()
        module[name](grad5, d_lo, d_hi, n)
        assert torch.equal(d_lo, lo) and torch.equal(d_hi, hi), name
        fns[name] = lambda k=name: module[k](grad5, d_lo, d_hi, n)
    ratios = {name: [] for name in fns}
    for _ in range(15):
        times = {}
        for name, fn in fns.items():
            fn()
            start, calls = time.perf_counter(), 0
            while time.perf_counter() - start < 0.002:
                fn()
                calls += 1
            times[name] = (time.perf_counter() - start) / calls
        for name in fns:
            ratios[name].append(times[name] / times["copy"])
    print(dtype, shape, " ".join(f"{name} {statistics.median(v):.2f}"
                                 for name, v in ratios.items() if name != "copy"),
          flush=True)


if __name__ == "__main__":
    main()
