"""cpu_shuffle's square tiles three ways, their stack spills and their 1-thread times against
torch's ``copy_`` (docs/perf.md v32, ``cpu/tile_variants_t1.txt``).

    OMP_NUM_THREADS=1 python tile_variants.py whole,lazy,halves float16,float32 \\
        20x15/b1,37x29/b1,40x40/b1

- ``whole``: whole-row loads, the two in-lane transposes joined at the end (the square tile
  before v32; ``joined_loads=False``);
- ``lazy``: the same with the bottom rows loaded after the top rows are transposed;
- ``halves``: halves joined at the loads in both passes (v32 ships it for the 16-bit forward:
  ``joined_loads``; the backward form here was not shipped).

Each variant is built into a library of its own (TVM's own thread pool, hence one thread) and
checked bit-exact first; a round times ``copy_`` and every kernel for ~2 ms each.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import sys
import time

import torch
import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.script.builder import ir as T

from psa_tvm import reference
from psa_tvm.compiler.cpu import SHUFFLE, cpu_target
from psa_tvm.compiler.rules.cpu_shuffle import CpuShuffle, _i32, _i64, _ramp, lane_transpose
from psa_tvm.config import OpConfig

SHIPPED_TILE = CpuShuffle._square_tile


def lazy_tile(forward, half, merged, row, b, h, s, n0, kd, lanes, elems, load, store,
              joined=False) -> None:
    """Whole-row loads, the bottom rows loaded after the top rows' transpose."""
    with T.serial(_i64(0), _i64(kd // lanes)) as d_tile:
        d0 = T.Bind(d_tile * lanes)

        def rows(first, last):
            if forward:
                return [T.Bind(load(half, [row, n0 + i, _ramp(d0, lanes)], lanes))
                        for i in range(first, last)]
            return [T.Bind(load(merged, [b, h, s, d0 + i, _ramp(n0, lanes)], lanes))
                    for i in range(first, last)]

        top, top_labels = lane_transpose(rows(0, elems), lanes, elems, T.Bind)
        bottom, bottom_labels = lane_transpose(rows(elems, lanes), lanes, elems, T.Bind)
        for k in range(elems):
            both = top_labels[k] + [(r + elems, c) for r, c in bottom_labels[k]]
            for lane in range(2):
                indices = ([lane * elems + j for j in range(elems)]
                           + [lanes + lane * elems + j for j in range(elems)])
                column = both[indices[0]][1]
                value = tirx.Shuffle([top[k], bottom[k]], [_i32(i) for i in indices])
                if forward:
                    store(merged, value, [b, h, s, d0 + column, _ramp(n0, lanes)], lanes)
                else:
                    store(half, value, [row, n0 + column, _ramp(d0, lanes)], lanes)


def halves_tile(forward, half, merged, row, b, h, s, n0, kd, lanes, elems, load, store,
                joined=False) -> None:
    """Halves joined at the loads, both passes: vector k = source rows k and E + k."""
    with T.serial(_i64(0), _i64(kd // lanes)) as d_tile:
        d0 = T.Bind(d_tile * lanes)
        for c0 in range(0, lanes, elems):
            vectors = []
            for k in range(elems):
                if forward:
                    parts = [load(half, [row, n0 + r, _ramp(d0 + c0, elems)], elems)
                             for r in (k, elems + k)]
                else:
                    parts = [load(merged, [b, h, s, d0 + r, _ramp(n0 + c0, elems)], elems)
                             for r in (k, elems + k)]
                vectors.append(T.Bind(tirx.Shuffle(parts, [_i32(i) for i in range(2 * elems)])))
            results, labels = lane_transpose(vectors, lanes, elems, T.Bind)
            for value, label in zip(results, labels, strict=True):
                source = [(k + elems * (m >= elems), m % elems) for k, m in label]
                column = source[0][1]
                assert source == [(i, column) for i in range(lanes)], source
                if forward:
                    store(merged, value, [b, h, s, d0 + c0 + column, _ramp(n0, lanes)], lanes)
                else:
                    store(half, value, [row, n0 + c0 + column, _ramp(d0, lanes)], lanes)


TILES = {"whole": SHIPPED_TILE, "lazy": lazy_tile, "halves": halves_tile}


def build(variant: str, dtype: str, path: str) -> tuple[int, int]:
    """Both passes of ``variant`` into ``path``; returns (ymm spill stores, imulq)."""
    config = OpConfig(32, 4, dtype)
    params = dataclasses.replace(SHUFFLE.default_params(config), joined_loads=False)
    CpuShuffle._square_tile = staticmethod(TILES[variant])
    try:
        funcs = {"fwd": SHUFFLE.build("forward", config, params, name="fwd"),
                 "bwd": SHUFFLE.build("backward", config, params, name="bwd")}
        executable = tvm.compile(tvm.IRModule(funcs), target=cpu_target())
    finally:
        CpuShuffle._square_tile = SHIPPED_TILE
    asm = executable.mod.inspect_source("asm")
    executable.export_library(path)
    return len(re.findall(r"vmovdqu\s+%ymm\d+, -?\d+\(%rsp\)", asm)), asm.count("imulq")


def bench(paths: dict, dtype: str, shapes: list[str]) -> None:
    torch.set_num_threads(1)
    modules = {name: tvm_ffi.load_module(path) for name, path in paths.items()}
    for shape in shapes:
        time_shape(modules, dtype, shape)


def time_shape(modules: dict, dtype: str, shape: str, rounds: int = 15) -> None:
    torch_dtype = getattr(torch, dtype)
    grid, batch_text = shape.split("/b")
    height, width = map(int, grid.split("x"))
    batch, nh, kd, n = int(batch_text), 4, 32, height * width
    lo = (torch.randn(batch * nh, n, kd) + 3).to(torch_dtype)
    hi = (torch.randn(batch * nh, n, kd) - 3).to(torch_dtype)
    want = reference.merge(lo, hi, nh, height, width)
    out = torch.empty_like(want)
    out5, grad5 = out.view(batch, nh, 2, kd, n), want.view(batch, nh, 2, kd, n)
    d_lo, d_hi = torch.empty_like(lo), torch.empty_like(hi)
    src = want.reshape(-1).clone()
    dst = torch.empty_like(src)
    fns = {"copy": lambda: dst.copy_(src)}
    for name, module in modules.items():
        out.zero_()
        module["fwd"](lo, hi, out5, n)
        assert torch.equal(out, want), name
        d_lo.zero_()
        d_hi.zero_()
        module["bwd"](grad5, d_lo, d_hi, n)
        assert torch.equal(d_lo, lo) and torch.equal(d_hi, hi), name
        fns[f"{name} fwd"] = lambda m=module: m["fwd"](lo, hi, out5, n)
        fns[f"{name} bwd"] = lambda m=module: m["bwd"](grad5, d_lo, d_hi, n)
    ratios = {name: [] for name in fns}
    for _ in range(rounds):
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
                                 for name, v in ratios.items() if name != "copy"), flush=True)


def main() -> None:
    variants, dtypes, shapes = (arg.split(",") for arg in sys.argv[1:4])
    for dtype in dtypes:
        paths = {}
        for variant in variants:
            path = f"/tmp/tile_{variant}_{dtype}.so"
            spills, imuls = build(variant, dtype, path)
            print(dtype, variant, f"spills {spills} imulq {imuls}", flush=True)
            paths[variant] = path
        bench(paths, dtype, shapes)


if __name__ == "__main__":
    main()
