"""``cpu``: the CPU (LLVM) schedule of both passes.

One parallel task owns one ``(b, h, s)`` slice and walks it in tiles of ``tile_n`` spatial
positions: the ``[tile_n, kd]`` block of ``lo``/``hi`` (contiguous) and the ``[kd, tile_n]``
block of the merged tensor (``kd`` rows of ``tile_n`` contiguous elements), which together stay
in L1. The loop along which the *written* tensor is contiguous is vectorized (``n`` in the
forward pass, ``d`` in the backward pass), split into ``vector_bytes`` pieces: stores are whole
vectors and the transposed side becomes gathers (in hardware on AVX2/AVX-512 for 32-bit types).

The parallel loop is the fused ``(b, h, s)`` loop: ``2 * B * nh`` tasks, at least 4 even at
``B = 1``. Fusing the tile loop into it as well would divide the task index by the symbolic tile
count, and TVM leaves that division inside the vector loop (measured: 80 ms instead of ~1 ms).
Any ``N`` works (a partial last tile is a masked vector) and only element alignment is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tvm.tirx import PrimFunc

from psa_tvm.compiler.rules.base import Pass, finish, new_schedule, pass_loops
from psa_tvm.config import OpConfig


@dataclass(frozen=True)
class CpuParams:
    """Tunable parameters of :class:`CpuTiled`."""

    tile_n: int = 64
    """Spatial positions per tile (one tile moves ``tile_n x key_dim`` elements)."""
    vector_bytes: int = 64
    """Bytes per vector of the vectorized loop (64: one AVX-512 register)."""


class CpuTiled:
    """Parallel, cache-tiled, vectorized CPU schedule; see the module docstring."""

    name: ClassVar[str] = "cpu"
    Params: ClassVar[type] = CpuParams

    def default_params(self, config: OpConfig) -> CpuParams:
        return CpuParams()

    def check_params(self, config: OpConfig, params: CpuParams) -> None:
        problems = []
        if params.tile_n < 1 or params.tile_n & (params.tile_n - 1):
            problems.append(f"tile_n={params.tile_n} is not a power of two")
        lanes = params.vector_bytes // config.itemsize
        if params.vector_bytes % config.itemsize or lanes < 1 or lanes & (lanes - 1):
            problems.append(f"vector_bytes={params.vector_bytes} is not a power-of-two "
                            f"multiple of the item size {config.itemsize}")
        if problems:
            raise ValueError(f"cpu params {params} do not fit {config}: " + "; ".join(problems))

    def apply(self, func: PrimFunc, pass_: Pass, config: OpConfig,
              params: CpuParams) -> PrimFunc:
        """Schedule one pass's PrimFunc (any ``vec``, any index dtype) for LLVM."""
        self.check_params(config, params)
        sch, name = new_schedule(func)
        _, b, h, s, d, n = pass_loops(sch, pass_)
        n_tile, n_in = sch.split(n, [None, params.tile_n])
        if pass_ == "forward":  # merged rows are contiguous along n
            sch.reorder(b, h, s, n_tile, d, n_in)
            vector_loop, extent = n_in, params.tile_n
        else:  # d_lo/d_hi rows are contiguous along d
            sch.reorder(b, h, s, n_tile, n_in, d)
            vector_loop, extent = d, config.key_dim
        sch.parallel(sch.fuse(b, h, s))
        lanes = params.vector_bytes // config.itemsize
        if extent > lanes and extent % lanes == 0:
            _, vector_loop = sch.split(vector_loop, [None, lanes])
        sch.vectorize(vector_loop)
        return finish(sch, name)
