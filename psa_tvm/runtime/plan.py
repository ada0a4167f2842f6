"""Launch planning: which kernel variant runs for a call, with what grid, block and arguments.

Pure functions of the manifest and the call's geometry; no CUDA, no TVM. The kernel-choice rule
here is the one the native library generates in C++ (docs/native.md); both must agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from psa_tvm.config import INT32_MAX
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.runtime.manifest import BuildSpec, KernelSpec
from psa_tvm.runtime.protocol import ArgVisitor
from psa_tvm.runtime.tensors import CUDA, TensorInfo
from psa_tvm.runtime.validation import MergeDims

#: CUDA's grid limits for x, y, z.
GRID_LIMITS = (2**31 - 1, 65535, 65535)
#: Tail tiles index up to one tile past the end; int32 kernels stay clear of that margin.
INT32_MARGIN = 1 << 20


@dataclass(frozen=True)
class LaunchPlan:
    """Everything one launch needs: which kernel, its dimensions and its arguments."""

    build: BuildSpec
    kernel: KernelSpec
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[tuple[str, str, int], ...]  # (kind, parameter name, value) in kernel order
    device_index: int | None

    @property
    def empty(self) -> bool:
        """Zero-sized tensors: nothing to move, and an empty grid is no valid launch."""
        return self.grid[0] * self.grid[1] * self.grid[2] == 0 or any(
            value == 0 for kind, _, value in self.args if kind != "ptr")

    def visit(self, visitor: ArgVisitor) -> None:
        visits = {"ptr": visitor.visit_ptr, "int32": visitor.visit_i32,
                  "int64": visitor.visit_i64, "float32": visitor.visit_f32}
        for kind, name, value in self.args:
            visits[kind](value, name)


def index_dtype_for(numel: int) -> str:
    """int32 indexing while every index (plus a tail tile's overrun) fits, else int64."""
    return "int32" if numel + INT32_MARGIN <= INT32_MAX else "int64"


def pointer_alignment(tensors: dict[str, TensorInfo]) -> int:
    """The largest power of two (bytes, at most 16) dividing every data pointer."""
    combined = 16
    for info in tensors.values():
        combined |= info.ptr
    return combined & -combined


def choose_kernel(build: BuildSpec, pass_: str, n: int, index_dtype: str,
                  alignment_bytes: int, numel: int | None = None) -> KernelSpec:
    """The variant that runs: among the pass's kernels of ``index_dtype``, those whose ``vec``
    divides ``N``, whose widest access the pointers' alignment allows, whose size range
    (``min_numel``, and ``max_numel`` where set) holds the call's merged elements
    (``numel=None``: any size) and whose ``N`` range holds
    ``N``; the one maximising ``(vec_kd, rank, has an N range, min_numel)`` (``rank`` is
    ``2 * vec``, a shifted kernel's sits between an 8- and a 4-byte N side; of two kernels at
    one rank, one made for a range of ``N`` wins inside it, and then the one made for larger
    calls where the call is large enough for it)."""
    itemsize = build.config.itemsize
    best = None
    for kernel in build.kernels:
        if kernel.pass_ != pass_ or kernel.index_dtype != index_dtype or n % kernel.vec \
                or not kernel.runs_at(n):
            continue
        if numel is not None and not kernel.runs_for(numel):
            continue
        if alignment_bytes % (kernel.alignment_elements * itemsize):
            continue
        if best is None or _order(kernel) > _order(best):
            best = kernel
    if best is None:
        raise ArtifactNotFoundError(
            f"{build.source.name}: no {pass_} kernel for {index_dtype}, N={n}, "
            f"{alignment_bytes}-byte aligned data; rebuild it with `psa-tvm build`")
    return best


def _order(kernel: KernelSpec) -> tuple[int, int, bool, int]:
    """Of the kernels that can run a call, the largest of these wins."""
    return kernel.vec_kd, kernel.rank, kernel.max_n > 0, kernel.min_numel


def main_variant(build: BuildSpec, pass_: str) -> KernelSpec:
    """The variant a build is named by: int32 indexing, the widest accesses (the plain kernel
    where a shifted one is also listed at full width)."""
    return max((k for k in build.kernels if k.pass_ == pass_ and k.index_dtype == "int32"),
               key=lambda k: (k.vec_kd, k.vec, not k.shifted))


def kernel_shapes(dims: MergeDims) -> dict[str, tuple[int, ...]]:
    """Shapes of every kernel buffer (the merged tensor as the kernels view it, 5-D)."""
    half = dims.half_shape
    merged5 = (dims.batch, dims.num_heads, 2, dims.key_dim, dims.n)
    return {"lo": half, "hi": half, "out": merged5, "g": merged5, "dlo": half, "dhi": half}


@dataclass(frozen=True)
class KernelChoice:
    """The geometry-dependent part of a plan, shared by calls of the same geometry."""

    kernel: KernelSpec
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    symbols: dict[str, int]


def choose(build: BuildSpec, pass_: str, dims: MergeDims, alignment_bytes: int) -> KernelChoice:
    """Kernel, grid and block for one geometry; ``ValueError`` past CUDA's grid limits."""
    kernel = choose_kernel(build, pass_, dims.n, index_dtype_for(dims.merged_numel),
                           alignment_bytes, dims.merged_numel)
    symbols = kernel.bind_symbols(kernel_shapes(dims))
    grid, block = kernel.launch_dims(symbols)
    for axis, (size, limit) in enumerate(zip(grid, GRID_LIMITS, strict=True)):
        if size > limit:
            raise ValueError(
                f"shape: B={dims.batch}, N={dims.n} needs grid[{axis}]={size}, past the "
                f"CUDA limit {limit} for schedule {build.schedule!r}"
            )
    return KernelChoice(kernel, grid, block, symbols)  # type: ignore[arg-type]


def make_plan(build: BuildSpec, choice: KernelChoice,
              tensors: dict[str, TensorInfo]) -> LaunchPlan:
    """Bind a choice to this call's tensors (missing tensors, for planning only, give 0)."""
    kernel = choice.kernel
    args = tuple(
        ("ptr", p.name, tensors[p.tensor].ptr if p.tensor in tensors else 0)
        if p.kind == "ptr" else (p.kind, p.name, choice.symbols[p.symbol])
        for p in kernel.params
    )
    device_index = next((t.device_index for t in tensors.values() if t.device == CUDA), None)
    return LaunchPlan(build, kernel, choice.grid, choice.block, kernel.dynamic_smem_bytes, args,
                      device_index)
