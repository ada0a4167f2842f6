"""``cpu``: the CPU (LLVM) schedule of both passes.

One parallel task owns one ``(b, h, s)`` slice and walks it in tiles of ``tile_n`` spatial
positions: the ``[tile_n, kd]`` block of ``lo``/``hi`` (contiguous) and the ``[kd, tile_n]``
block of the merged tensor (``kd`` rows of ``tile_n`` contiguous elements), which together stay
in L1. One side of the transpose is whole vectors, the other strided lanes:

- backward: ``d`` is vectorized (``vector_bytes`` pieces): whole-vector stores to ``d_lo``/``d_hi``
  rows, loads gathered from ``N`` apart (hardware gathers on AVX2/AVX-512 for 32-bit types);
- forward, any ``N`` (``vec=1``): ``d`` is vectorized too, whole-vector loads of ``lo``/``hi`` rows
  and strided stores. Vectorizing ``n`` instead puts the tail test (``n < N``) inside the vector
  loop, and TVM then scalarizes the whole loop;
- forward, ``N = NV * vec`` (``vec`` from :meth:`CpuTiled.forward_vec`): ``n`` is vectorized,
  whole-vector stores and gathered loads, the tail test is per vector. Measured on AVX2/AVX-512:
  this beats the strided stores for 32-bit types (1.28x vs 1.56x a copy), not for 16-bit ones
  (no 16-bit gathers), which keep the ``vec=1`` kernel only.

The parallel loop is the fused ``(b, h, s)`` loop: ``2 * B * nh`` tasks, at least 4 even at
``B = 1``. Fusing the tile loop into it as well would divide the task index by the symbolic tile
count, and TVM leaves that division inside the vector loop (measured: 80 ms instead of ~1 ms).
Only element alignment is assumed.
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
    vector_bytes: int = 32
    """Bytes per vector of the vectorized loop (32: one AVX2 register)."""


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

    def forward_vec(self, config: OpConfig, params: CpuParams) -> int:
        """Lanes of the forward kernel for ``N % lanes == 0`` (1: none is built)."""
        return params.vector_bytes // config.itemsize if config.itemsize == 4 else 1

    def apply(self, func: PrimFunc, pass_: Pass, config: OpConfig, params: CpuParams,
              vec: int = 1, pairs: bool = False) -> PrimFunc:
        """Schedule one pass's PrimFunc (built with ``N = NV * vec``, any index dtype).

        ``pairs``: the 32-bit-word definitions of :mod:`psa_tvm.compiler.cpu_pairs` (16-bit
        types): the loop over the two halves of a word (``d`` forward, ``n`` backward) is
        unrolled so that each copy is straight bit operations.
        """
        self.check_params(config, params)
        if params.tile_n % vec:
            raise ValueError(f"tile_n={params.tile_n} is not a multiple of vec={vec}")
        sch, name = new_schedule(func)
        _, b, h, s, d, n = pass_loops(sch, pass_)
        n_tile, n_in = sch.split(n, [None, params.tile_n])
        itemsize = 4 if pairs else config.itemsize
        lanes = params.vector_bytes // itemsize
        row = config.key_dim // 2 if pairs else config.key_dim
        if pass_ == "forward" and vec > 1:  # whole-vector stores along n, one tail test each
            sch.reorder(b, h, s, n_tile, d, n_in)
            _, vector_loop = sch.split(n_in, [None, vec])
            if pairs:
                sch.unroll(sch.split(d, [None, 2])[1])
        else:  # whole vectors along d: loads (forward) or stores (backward) of kd rows
            sch.reorder(b, h, s, n_tile, n_in, d)
            vector_loop = d
            if row > lanes and row % lanes == 0:
                _, vector_loop = sch.split(d, [None, lanes])
            if pairs:
                sch.unroll(sch.split(n_in, [None, 2])[1])
        sch.parallel(sch.fuse(b, h, s))
        sch.vectorize(vector_loop)
        return finish(sch, name)
