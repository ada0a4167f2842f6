"""``rowwise``: the original kernel layout (one CTA per row), the baseline of the other rules.

Grid ``[B*nh*N, 1, 1]``: one CTA per ``(b*nh + h, n)`` row of ``lo``/``hi``, ``kd`` threads, one
element each, both halves written by the same thread. Loads are coalesced along ``kd``; stores
hit ``kd`` different channel rows ``N`` elements apart (the strided NCHW store the tiled rule
exists to fix). Fusing the symbolic ``N`` into the block index costs a floor-div/mod per
element, as the original did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tvm.tirx import PrimFunc

from psa_tvm.compiler.rules.base import Pass, ScheduleRule, finish, new_schedule, pass_loops
from psa_tvm.config import OpConfig


@dataclass(frozen=True)
class RowwiseParams:
    """The row-wise layout has nothing to tune."""


class Rowwise(ScheduleRule):
    """One CTA per spatial row, ``kd`` lanes; see the module docstring."""

    name: ClassVar[str] = "rowwise"
    Params: ClassVar[type] = RowwiseParams

    def vector_width(self, config: OpConfig, params: RowwiseParams) -> int:
        return 1

    def apply(self, func: PrimFunc, pass_: Pass, config: OpConfig, params: RowwiseParams,
              vec: int, vec_kd: int | None = None) -> PrimFunc:
        sch, name = new_schedule(func)
        _, b, h, s, d, n = pass_loops(sch, pass_)
        sch.reorder(b, h, n, s, d)
        sch.bind(sch.fuse(b, h, n), "blockIdx.x")
        sch.bind(d, "threadIdx.x")
        return finish(sch, name)
