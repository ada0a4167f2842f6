"""The float32 CPU library of kd=32 nh=4 with the forward's last `N % 8` positions moved one
element at a time (at most SCALAR_MAX of them) instead of by an overlapping 8x8 tile, or with
`lane_tail` on ("lt"): the experiment of docs/perf.md v18, not the library's code.

    python3 scalar_tail_variants.py OUT_DIR SCALAR_MAX [lt]
    python3 scripts/cpu_ab.py --a OUT_0 --b OUT_2 --dtypes float32 --threads 2
"""
import sys
from pathlib import Path

from tvm import tirx
from tvm.tirx.script.builder import ir as T

import psa_tvm.compiler.cpu as cpu
from psa_tvm.compiler.artifact import write_manifest
from psa_tvm.compiler.rules.cpu_shuffle import CpuShuffle, CpuShuffleParams, _i64
from psa_tvm.config import OpConfig

SCALAR_MAX = int(sys.argv[2]) if len(sys.argv) > 2 else 0
LANE_TAIL = len(sys.argv) > 3 and sys.argv[3] == "lt"
_square_tiles = CpuShuffle._square_tiles


def square_tiles(forward, half, merged, row, b, h, s, n_total, kd, lanes, elems, load, store):
    if not (forward and SCALAR_MAX):
        return _square_tiles(forward, half, merged, row, b, h, s, n_total, kd, lanes, elems,
                             load, store)
    with T.serial(_i64(0), n_total // lanes) as n_tile:
        CpuShuffle._square_tile(True, half, merged, row, b, h, s, T.Bind(n_tile * lanes), kd,
                                lanes, elems, load, store)
    rest = n_total % lanes
    with T.If(tirx.all(rest > 0, rest <= SCALAR_MAX)), T.Then(), \
            T.serial(n_total - rest, n_total) as n, T.serial(_i64(0), _i64(kd)) as d:
        T.buffer_store(merged, tirx.BufferLoad(half, [row, n, d]), [b, h, s, d, n])
    with T.If(rest > SCALAR_MAX), T.Then():
        CpuShuffle._square_tile(True, half, merged, row, b, h, s, T.Bind(n_total - lanes), kd,
                                lanes, elems, load, store)
    return None


CpuShuffle._square_tiles = staticmethod(square_tiles)
if LANE_TAIL:
    CpuShuffle.default_params = lambda self, config: CpuShuffleParams(lane_tail=True)
out = Path(sys.argv[1])
write_manifest(out, [], [cpu.build_cpu_library(OpConfig(32, 4, "float32"), out)])
print("built", out)
