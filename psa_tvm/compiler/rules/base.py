"""The interface every GPU schedule rule implements.

A rule is a small named object, like TVM's dlight rules: it takes the unscheduled PrimFunc of
one pass and returns it scheduled for the GPU. Everything tunable lives in one frozen dataclass
(``Params``) so that tuning, the manifest and the CLI can list, serialise and compare it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import tvm
from tvm import s_tir
from tvm.tirx import PrimFunc

from psa_tvm.compiler.compute import BACKWARD_BLOCK, FORWARD_BLOCK
from psa_tvm.config import OpConfig

Pass = Literal["forward", "backward"]


class ScheduleRule(ABC):
    """Turns one pass's PrimFunc into a GPU kernel."""

    name: ClassVar[str]
    Params: ClassVar[type]

    def default_params(self, config: OpConfig) -> Any:
        """Parameters used when nothing was tuned for ``config``."""
        return self.Params()

    def params_from_dict(self, values: dict[str, Any]) -> Any:
        return self.Params(**values)

    @abstractmethod
    def vector_width(self, config: OpConfig, params: Any) -> int:
        """Elements per 16-byte access this rule wants; ``N`` must be a multiple to use it."""

    @abstractmethod
    def apply(self, func: PrimFunc, pass_: Pass, config: OpConfig, params: Any,
              vec: int, vec_kd: int | None = None) -> PrimFunc:
        """Schedule ``func`` (built with ``N = NV * vec``) and return the scheduled PrimFunc.

        ``vec`` is the access width on the side contiguous along ``N``; ``vec_kd`` (default
        ``vec``) the width on the side contiguous along ``kd``, which a rule may keep wide when
        ``N`` only allows a narrow ``vec``.
        """

    def range_kernel(self, params: Any) -> tuple[tuple[int, int], Any] | None:
        """A full-width int32 kernel ``params`` add for a range of ``N``: ``((first, last),
        its params)``; None (the default) for none."""
        return None

    def check_params(self, config: OpConfig, params: Any) -> None:  # noqa: B027 - optional hook
        """Raise ``ValueError`` if ``params`` cannot schedule ``config``."""


def params_as_dict(params: Any) -> dict[str, Any]:
    """The params as the manifest and tuned tables store them. A field added later with
    ``metadata={"omit_default": True}`` is left out at its default, so the builds and tables
    written before it keep their digests and still compare equal."""
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
            if not (f.metadata.get("omit_default") and getattr(params, f.name) == f.default)}


def new_schedule(func: PrimFunc) -> tuple[s_tir.Schedule, str]:
    """A schedule over ``func`` with the function selected, and the function's name."""
    name = str(func.attrs["global_symbol"])
    sch = s_tir.Schedule(tvm.IRModule({name: func}))
    sch.work_on(name)
    return sch, name


def pass_loops(sch: s_tir.Schedule, pass_: Pass) -> tuple:
    """The pass's block and its loops by name, ``(block, b, h, s, d, n)``, whatever their order
    in the definition (forward nests ``d`` outside ``n``, backward ``n`` outside ``d``)."""
    block = sch.get_sblock(FORWARD_BLOCK if pass_ == "forward" else BACKWARD_BLOCK)
    loops = sch.get_loops(block)
    if pass_ == "forward":
        b, h, s, d, n = loops
    else:
        b, h, s, n, d = loops
    return block, b, h, s, d, n


def finish(sch: s_tir.Schedule, name: str, *, per_thread_buffers: bool = False) -> PrimFunc:
    """The scheduled function, with buffers compacted so symbolic ``N`` still gives fixed tiles.

    The strict ``CompactBufferAllocation`` of the default pipeline sizes a shared tile as
    ``min(N, tile)``, which is not a constant and fails codegen; the non-strict variant keeps the
    full tile size.

    ``per_thread_buffers``: a local buffer written and read in two loop nests bound to the same
    threads is compacted per thread. Compaction relaxes each nest's own thread loop and the
    loops inside it; so the nests' thread loops are unified into one first (as TVM's lowering
    does later anyway) and the indices simplified (a ``(tile*256 + step*64 + row) % 64`` that
    is ``row``, which interval arithmetic over ``step`` would widen to the whole range).
    """
    passes = [s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
              s_tir.transform.ConvertBlocksToOpaque()]
    if per_thread_buffers:
        passes += [s_tir.transform.UnifyThreadBinding(), s_tir.transform.StmtSimplify()]
    compact = tvm.transform.Sequential(
        [*passes, s_tir.transform.CompactBufferAllocation(is_strict=False)])
    return compact(sch.mod)[name]
