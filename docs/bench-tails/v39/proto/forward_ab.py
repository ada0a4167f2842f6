"""float32 CPU forward variants against the shipped one, same process and buffers, per-round
ratio to ``copy_`` of the same bytes (7 rounds, the median), each bit-exact checked first.

    python forward_ab.py OUT_DIR joined|d_outer|ahead

``joined``: the square tiles' halves joined at the loads (``CpuShuffleParams.joined_loads``,
the 16-bit default). ``d_outer``: the tile loops swapped, one 8-channel block of a slice at a
time, so 8 output rows are written as streams instead of all ``kd``. ``ahead``: each tile
first prefetches, for writing, every output row's line ``$AHEAD_TILES`` tiles ahead (default 8).
Both the plain and the
prefetching kernel of each library are timed. Libraries are compiled into OUT_DIR once.
"""

import dataclasses
import statistics
import sys
from pathlib import Path

import torch
import tvm_ffi
from tvm import tirx
from tvm.tirx.script.builder import ir as T

import psa_tvm.compiler.cpu as compiler_cpu
from psa_tvm.compiler.rules.cpu_shuffle import (
    CpuShuffle,
    _i32,
    _i64,
    _ramp,
    lane_transpose,
)
from psa_tvm.config import OpConfig
from psa_tvm.runtime import cpu_pool
from psa_tvm.tools.bench import _wall_us

SHAPES = [(40, 40, 1), (40, 23, 1), (37, 29, 1), (20, 20, 16), (20, 15, 16), (20, 12, 16),
          (40, 23, 16), (37, 29, 16), (1, 33, 16), (64, 3, 16), (40, 40, 16)]
SHIPPED_TILES = CpuShuffle._square_tiles
SHIPPED_PARAMS = CpuShuffle.default_params


def square_tiles_d_outer(forward, half, merged, row, b, h, s, n_total, kd, lanes, elems, load,
                         store, joined=False) -> None:
    """The shipped square tile (whole-row loads) with the channel-block loop outside."""
    if not forward or joined:
        SHIPPED_TILES(forward, half, merged, row, b, h, s, n_total, kd, lanes, elems, load,
                      store, joined)
        return
    with T.serial(_i64(0), _i64(kd // lanes)) as d_tile:
        d0 = T.Bind(d_tile * lanes)
        with T.serial(_i64(0), (n_total + (lanes - 1)) // lanes) as n_tile:
            n0 = T.Bind(T.min(n_tile * lanes, n_total - lanes))
            rows = [T.Bind(load(half, [row, n0 + i, _ramp(d0, lanes)], lanes))
                    for i in range(lanes)]
            top, top_labels = lane_transpose(rows[:elems], lanes, elems, T.Bind)
            bottom, bottom_labels = lane_transpose(rows[elems:], lanes, elems, T.Bind)
            for k in range(elems):
                both = top_labels[k] + [(r + elems, c) for r, c in bottom_labels[k]]
                for lane in range(2):
                    indices = ([lane * elems + j for j in range(elems)]
                               + [lanes + lane * elems + j for j in range(elems)])
                    column = both[indices[0]][1]
                    value = tirx.Shuffle([top[k], bottom[k]], [_i32(i) for i in indices])
                    store(merged, value, [b, h, s, d0 + column, _ramp(n0, lanes)], lanes)


#: How many tiles ahead ``ahead`` prefetches each output row (``$AHEAD_TILES``, default 8).
AHEAD_TILES = int(__import__("os").environ.get("AHEAD_TILES", "8"))


def square_tiles_ahead(forward, half, merged, row, b, h, s, n_total, kd, lanes, elems, load,
                       store, joined=False) -> None:
    """The shipped square tiles, each first prefetching (for writing) the line of every output
    row ``AHEAD_TILES`` tiles ahead: a prefetch distance inside the loop instead of the
    prefetching kernel's whole-slice pass."""
    if not forward or joined:
        SHIPPED_TILES(forward, half, merged, row, b, h, s, n_total, kd, lanes, elems, load,
                      store, joined)
        return
    with T.serial(_i64(0), (n_total + (lanes - 1)) // lanes) as n_tile:
        ahead = T.Bind(T.min(n_tile * lanes + AHEAD_TILES * lanes, n_total - 1))
        for channel in range(kd):
            T.evaluate(T.call_llvm_intrin("void", "llvm.prefetch",
                                          T.address_of(merged[b, h, s, channel, ahead]),
                                          _i32(1), _i32(3), _i32(1)))
        CpuShuffle._square_tile(forward, half, merged, row, b, h, s,
                                T.Bind(T.min(n_tile * lanes, n_total - lanes)), kd, lanes,
                                elems, load, store, joined)


def build(config: OpConfig, path: Path, variant: str | None) -> None:
    """Compile ``config``'s CPU library with ``variant`` patched in (None: as shipped)."""
    if path.is_file():
        return
    if variant == "joined":
        CpuShuffle.default_params = lambda self, c: dataclasses.replace(
            SHIPPED_PARAMS(self, c), joined_loads=True)
    elif variant == "d_outer":
        CpuShuffle._square_tiles = staticmethod(square_tiles_d_outer)
    elif variant == "ahead":
        CpuShuffle._square_tiles = staticmethod(square_tiles_ahead)
    try:
        compiler_cpu.compile_cpu(config, path)
    finally:
        CpuShuffle.default_params, CpuShuffle._square_tiles = SHIPPED_PARAMS, SHIPPED_TILES


def median_us(fn, reps: int = 20) -> float:
    """The benchmark's CPU timer (3 warm-up calls, the median of ``reps``) in us."""
    return _wall_us(fn, reps)


def main() -> None:
    out_dir, variant = Path(sys.argv[1]), sys.argv[2]
    out_dir.mkdir(parents=True, exist_ok=True)
    config = OpConfig(32, 4, "float32")
    modules = {}
    for name in ("shipped", variant):
        path = out_dir / f"{name}.so"
        build(config, path, None if name == "shipped" else variant)
        modules[name] = tvm_ffi.load_module(str(path))
        # As runtime/cpu.py does: TVM is imported here, and its loader would otherwise run the
        # library's parallel loops on TVM's pool (one thread on a 2-core host).
        modules[name]["psa_tvm_own_pool"]()
        cpu_pool.share_torch_threads(path)
    nh, kd = config.num_heads, config.key_dim
    for height, width, batch in SHAPES:
        n = height * width
        lo = torch.randn(batch * nh, n, kd)
        hi = torch.randn_like(lo)
        out = torch.empty(batch, nh, 2, kd, n)
        src, dst = torch.randn(out.numel()), torch.empty(out.numel())
        expected = torch.stack([lo.view(batch, nh, n, kd), hi.view(batch, nh, n, kd)],
                               2).transpose(-1, -2)
        kernels = {}
        for name, module in modules.items():
            for symbol in ("psa_merge_fwd_cpu", "psa_merge_fwd_cpu_prefetch"):
                out.fill_(float("nan"))
                module[symbol](lo, hi, out, n)
                assert torch.equal(out, expected), (name, symbol)
                label = f"{name}:{'prefetch' if 'prefetch' in symbol else 'plain'}"
                kernels[label] = (lambda f=module[symbol], a=(lo, hi, out, n): f(*a))
        ratios: dict[str, list[float]] = {label: [] for label in kernels}
        for _ in range(7):
            copy_us = median_us(lambda s=src, d=dst: d.copy_(s))
            for label, fn in kernels.items():
                ratios[label].append(median_us(fn) / copy_us)
        print(f"{height}x{width}/b{batch:<3d} {out.numel() * 4 / 1e6:6.2f} MB  "
              + "  ".join(f"{k} {statistics.median(v):.2f}" for k, v in ratios.items()),
              flush=True)


if __name__ == "__main__":
    main()
