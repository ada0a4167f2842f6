"""``tiled``: a shared-memory tiled transpose with 16-byte global loads and stores.

One CTA owns one ``(b, h, s)`` slice and a tile of ``tile_n`` spatial positions, i.e. the
``[tile_n, kd]`` block of ``lo``/``hi`` (contiguous in memory) and the ``[kd, tile_n]`` block of
the merged output (``kd`` rows of ``tile_n`` contiguous elements). The side that is contiguous
along ``kd`` moves through shared memory one 16-byte vector per thread, scattered into (or
gathered from) the tile column; the side that is contiguous along ``n`` moves row-wise with
16-byte vectors on both global and shared memory. With ``slices_per_cta = k`` a CTA owns ``k``
consecutive slices of one spatial tile (a ``[k, kd, tile_n]`` tile): in the layout family's
``[B, N, nh, S*kd]`` layout their kd rows are adjacent, so the kd side moves ``k*kd``-element
pieces per position.

The two sides have their own widths: ``vec_kd`` on the kd side and ``vec`` on the N side. A
``kd`` row of ``lo``/``hi`` starts at ``(row*N + n)*kd`` elements, aligned to 16 bytes for any
``N`` when ``kd`` is a multiple of the vector, so only the N side (rows of ``N`` elements) has to
narrow for an ``N`` tail: ``N = 300`` in float16 keeps 16-byte accesses along ``kd`` and uses
8-byte ones along ``N``; an odd ``N`` moves scalars along ``N`` only.

Bank conflicts come from the scattered side: a warp's threads write (forward) or read
(backward) the ``vec`` elements of their vector in ``vec`` different tile rows. With
``row_threads`` threads sharing one ``kd``-row and each tile row padded by ``pad_bytes``
(16 keeps the row-wise side 16-byte aligned), ``row_threads`` of 1 or 2 puts a warp's lanes in
distinct banks for 4-byte types; for 16-bit types two lanes share each 4-byte word. ``ncu``
counts are in docs/perf.md. ``row_threads=2`` also gives each tile row whole 32-byte sectors
per warp access, which the sm_90 tuning preferred for the backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from tvm.tirx import PrimFunc

from psa_tvm.compiler.rules.base import Pass, ScheduleRule, finish, new_schedule, pass_loops
from psa_tvm.config import OpConfig

_BANK_ROW_BYTES = 128  # 32 banks x 4 bytes
# Defaults for untuned configurations, from the sm_90 tuning of the YOLO11 configs: 8 KB tiles,
# 128 threads and two threads per kd-row won or came within 2% in every pass and dtype.
_TARGET_TILE_BYTES = 8192
_DEFAULT_THREADS = 128


@dataclass(frozen=True)
class TiledParams:
    """Tunable parameters of :class:`Tiled`."""

    tile_n: int = 64
    """Spatial positions per CTA tile (the tile is ``tile_n x key_dim``)."""
    threads: int = 256
    """Threads per CTA."""
    row_threads: int = 2
    """Threads sharing one ``kd``-row on the scattered side (sets the bank pattern)."""
    vec_bytes: int = 16
    """Bytes per global access; 16 gives ``LDG.128``/``STG.128``."""
    pad_bytes: int = 16
    """Padding of each shared-memory tile row, in bytes."""
    slices_on_x: bool = field(default=False, metadata={"omit_default": True})
    """Launch the ``(b, h, s)`` slices along ``blockIdx.x`` and the spatial tiles along
    ``blockIdx.y`` (default: the reverse). CTAs launched together then share a spatial tile,
    so the layout family's ``[B, N, nh, S*kd]`` side, whose rows hold every head and stream,
    is written (or read) row by row. The grid's y limit (65535) then caps ``N / tile_n``
    instead of ``B*nh*S``. On the H200 it gained up to 0.04 of copy at 13-40 MB moved and lost
    0.02-0.17 at 200-1000 MB (docs/attention.md). Left out of the stored params when ``False``,
    so older builds' digests and tuned tables stay as they were."""
    slices_per_cta: int = field(default=1, metadata={"omit_default": True})
    """Consecutive ``(h, s)`` slices one CTA moves together (the shared tile is
    ``[slices_per_cta, kd, tile_n]``). In the layout family's ``bnhd`` side ``[B, N, nh, S*kd]``
    consecutive streams of one head are adjacent, so with ``slices_per_cta = k`` a CTA's threads
    read (or write) ``k*kd``-element row pieces instead of ``kd``-element ones (64 -> 128-256
    bytes for kd=32 in 16-bit types). Must divide ``S`` (or ``nh`` with ``heads_inner``), or be
    whole heads (a multiple of ``S`` dividing ``nh*S``: the CTA then moves every stream of
    ``k/S`` adjacent heads, up to a whole ``[tile_n, nh*S*kd]`` block of the bnhd side); a
    CTA's threads cover whole ``k*kd`` rows, ``row_threads`` of them per ``kd`` row. 1 is the
    kernel without it; left out of the stored params at 1 (digests unchanged)."""
    heads_inner: bool = field(default=False, metadata={"omit_default": True})
    """Order the slices ``(b, s, h)`` instead of ``(b, h, s)``: a CTA's ``slices_per_cta``
    slices are then consecutive heads of one stream, adjacent in memory when each stream is a
    tensor of its own (``[B, N, nh, kd]``: flash's ``dq``/``dk``/``lo``/``hi``, the separate
    scatter). Left out of the stored params when ``False``."""
    group_pad_bytes: int = field(default=0, metadata={"omit_default": True})
    """A skew per group of ``vec_kd`` tile rows (0: none): the groups' stride is made this many
    bytes more than a multiple of 128 (as ``pad_bytes`` does for rows). Tile rows are padded
    to 16-byte multiples, so the ``vec_kd`` rows one kd-side vector scatters into (or gathers
    from) span a multiple of 128 bytes, and the ``row_threads`` vectors of a position that a
    warp moves at once hit the same banks: ``row_threads = key_dim / vec_kd`` (one warp access
    covers whole positions, 512 contiguous bytes on the kd side) costs that many-way
    conflicts. 32 puts the groups 32 bytes apart in the banks. int32 kernels only; left out of
    the stored params at 0 (digests unchanged)."""
    stage_loads: bool = field(default=False, metadata={"omit_default": True})
    """The forward (the gather: kd-side loads scattered into the tile) stages each thread's
    loads in registers, all of them issued before its first shared-memory store. Without it a
    thread's next load waits for the previous one's data (the scattered stores consume it,
    and the next load sits in a predicated block of its own, which nvcc does not hoist), so a
    warp has one 16-byte load per thread in flight; with it, all of its
    ``tile_n*kd*slices/(threads*vec_kd)``. A thread then takes adjacent positions and kd
    vectors (its register block must be dense), which also pairs its 16-bit tile stores.
    The backward is unchanged: its row loads staged the same way were level or slower for
    every layout-family scatter (docs/perf.md v16) and trip TVM 0.27's buffer compaction (an
    int32 overflow) for the merge's. Left out of the stored params when ``False``."""
    stage_coalesced: bool = field(default=False, metadata={"omit_default": True})
    """With ``stage_loads``: keep the unstaged kernel's load order, in which one warp
    instruction reads ``threads/row_threads`` consecutive positions' pieces (contiguous memory:
    512 bytes for kd=32 in 16-bit types at ``row_threads = 4``), instead of giving each thread
    adjacent positions (an instruction then reads pieces of positions ``tile_n*row_threads/
    threads`` apart, and the L1 has to merge the lines). The thread's positions are then strided
    in the tile, so its register buffer gets a layout in the thread's own order and the copy
    into the tile a loop nest of its own, bound like the loads (see ``apply`` and
    :func:`finish`'s ``per_thread_buffers``; ptxas: no stack frame). Only int32 kernels whose
    kd-side vectors are ``vec_bytes`` wide use it; the others (misaligned views, int64) keep the
    adjacent order. The merge forward's v17 set uses it: 1.11x -> 1.06x a copy at 40x23/b64 in
    16-bit types (docs/perf.md v17). Left out of the stored params when ``False``."""
    narrow_tile_n: int = field(default=0, metadata={"omit_default": True})
    """``tile_n`` of the kernels whose N side is narrower than ``vec_bytes`` (``N`` not a
    multiple of the full vector: 640x480's N = 300 runs 8-byte N-side kernels in 16-bit
    types); 0: ``tile_n``. Those N are the tails, where a long tile leaves a mostly empty last
    one (300 = 256 + 44 positions), while the full-width kernels of the same build run the
    squares and 40x23 (1280x720), which gain from long tiles (docs/perf.md v17). Left out of
    the stored params at 0."""
    narrow_threads: int = field(default=0, metadata={"omit_default": True})
    """``threads`` of the same narrower kernels; 0: ``threads``. Left out at 0."""
    range_min_n: int = field(default=0, metadata={"omit_default": True})
    """With ``range_max_n``: the build also holds a full-width int32 kernel with a tile of its
    own (``range_tile_n``, ``range_threads``) that runs for ``range_min_n <= N <=
    range_max_n`` (the launch rule puts a kernel with an ``N`` range ahead of the others of
    its rank inside it). Why: a call's size cannot tell 64x20x20 from 16x40x40 (both 13 MB in
    nh 2), ``N`` can, and one tile does not suit both: on the H200 the nh 2 16-bit forward ran
    16x40x40 8% faster with 128-position tiles and 64x20x20 and 64x40x23 3-10% slower
    (docs/perf.md v22). Left out of the stored params at 0 (digests unchanged)."""
    range_max_n: int = field(default=0, metadata={"omit_default": True})
    """The last ``N`` of the range kernel; 0: no range kernel. Left out at 0."""
    range_tile_n: int = field(default=0, metadata={"omit_default": True})
    """``tile_n`` of the range kernel; 0: ``tile_n``. Left out at 0."""
    range_threads: int = field(default=0, metadata={"omit_default": True})
    """``threads`` of the range kernel; 0: ``threads``. Left out at 0."""

    def for_variant(self, itemsize: int, vec: int) -> TiledParams:
        """The params a kernel with a ``vec``-element N side runs: the ``narrow_*`` ones where
        that side is narrower than ``vec_bytes``."""
        if vec * itemsize >= self.vec_bytes or not (self.narrow_tile_n or self.narrow_threads):
            return self
        # The range kernel is a full-width one: the narrower kernels have none.
        return replace(self, tile_n=self.narrow_tile_n or self.tile_n,
                       threads=self.narrow_threads or self.threads, narrow_tile_n=0,
                       narrow_threads=0, **dict.fromkeys(_RANGE_FIELDS, 0))

    def n_range(self) -> tuple[int, int] | None:
        """``(first, last)`` ``N`` of the range kernel, or ``None`` without one."""
        return (self.range_min_n, self.range_max_n) if self.range_max_n else None

    def for_range(self) -> TiledParams:
        """The params the range kernel runs: its tile and threads, and no range of its own."""
        return replace(self, tile_n=self.range_tile_n or self.tile_n,
                       threads=self.range_threads or self.threads,
                       **dict.fromkeys(_RANGE_FIELDS, 0))


_RANGE_FIELDS = ("range_min_n", "range_max_n", "range_tile_n", "range_threads")


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


class Tiled(ScheduleRule):
    """Shared-memory tiled transpose; see the module docstring."""

    name: ClassVar[str] = "tiled"
    Params: ClassVar[type] = TiledParams
    unify_threads: ClassVar[bool] = True
    """``stage_coalesced``: unify the copy's and the loads' thread loops before compaction, so
    the register buffer is per thread (see :func:`finish`). The CPU emulation of the tests,
    which runs each thread loop serially, needs the nests apart (one buffer slice per thread)."""

    def vector_width(self, config: OpConfig, params: TiledParams) -> int:
        vec = max(1, params.vec_bytes // config.itemsize)
        while config.key_dim % vec:
            vec //= 2
        return vec

    def default_params(self, config: OpConfig) -> TiledParams:
        probe = TiledParams()
        vec = self.vector_width(config, probe)
        row_threads = max(1, min(2, config.key_dim // vec))
        tile_n = _pow2_floor(_TARGET_TILE_BYTES // (config.key_dim * config.itemsize))
        tile_n = min(512, max(32, tile_n))
        threads = min(_DEFAULT_THREADS, tile_n * config.key_dim // vec)
        if tile_n % (threads // row_threads):
            threads = tile_n * row_threads
        return TiledParams(tile_n=tile_n, threads=threads, row_threads=row_threads)

    def check_params(self, config: OpConfig, params: TiledParams) -> None:
        if params.narrow_tile_n < 0 or params.narrow_threads < 0:
            raise ValueError(f"tiled params {params}: narrow_tile_n and narrow_threads must be "
                             f">= 0 (0: the full-width kernels' tile_n and threads)")
        narrow = params.for_variant(config.itemsize, 1)
        if narrow is not params:  # the narrower kernels' own tile must fit as well
            self.check_params(config, narrow)
        self._check_range(config, params)
        vec = self.vector_width(config, params)
        problems = []
        if params.threads % 32 or not 32 <= params.threads <= 1024:
            problems.append(f"threads={params.threads} must be a multiple of 32 in [32, 1024]")
        slices = params.slices_per_cta
        if slices < 1:
            problems.append(f"slices_per_cta={slices} must be >= 1")
        elif params.threads % (params.row_threads * slices):
            problems.append(f"threads={params.threads} is not a multiple of "
                            f"row_threads*slices_per_cta={params.row_threads * slices}")
        elif params.tile_n % (params.threads // (params.row_threads * slices)):
            problems.append(
                f"tile_n={params.tile_n} is not a multiple of threads/(row_threads*"
                f"slices_per_cta)={params.threads // (params.row_threads * slices)}"
            )
        if config.key_dim % (params.row_threads * vec):
            problems.append(
                f"key_dim={config.key_dim} is not a multiple of row_threads*vec="
                f"{params.row_threads * vec}"
            )
        if params.tile_n % vec or (params.tile_n // vec * config.key_dim * max(1, slices)) \
                % params.threads:
            problems.append(
                f"tile_n={params.tile_n} must be a multiple of vec={vec} with "
                f"tile_n/vec*key_dim*slices_per_cta divisible by threads={params.threads}"
            )
        if params.pad_bytes % config.itemsize:
            problems.append(f"pad_bytes={params.pad_bytes} is not a multiple of the item size")
        if params.stage_coalesced and not params.stage_loads:
            problems.append("stage_coalesced orders the register stage: it needs stage_loads")
        if params.group_pad_bytes % 16 or params.group_pad_bytes < 0:
            problems.append(f"group_pad_bytes={params.group_pad_bytes} must be a multiple of 16 "
                            f"(keeping the row side 16-byte aligned)")
        elif params.group_pad_bytes and params.row_threads * vec == config.key_dim and \
                params.tile_n * params.row_threads * max(1, slices) == params.threads:
            # One pass over the tile on both sides: TVM 0.27's buffer compaction overflows int32
            # on the regrouped tile then (seen for kd 8 and 16 at 32-64-position tiles).
            problems.append(f"group_pad_bytes needs tile_n={params.tile_n} > threads/row_threads"
                            f" when row_threads*vec = key_dim")
        if problems:
            raise ValueError(f"tiled params {params} do not fit {config}: " + "; ".join(problems))

    def _check_range(self, config: OpConfig, params: TiledParams) -> None:
        """The range kernel's fields: all unset, or a range ``1 <= first <= last`` whose own
        tile fits (:meth:`check_params` on :meth:`TiledParams.for_range`) and differs from the
        main kernel's (else the range would add a copy of the same kernel)."""
        values = {name: getattr(params, name) for name in _RANGE_FIELDS}
        if not any(values.values()):
            return
        if any(v < 0 for v in values.values()) or not 1 <= params.range_min_n \
                <= params.range_max_n:
            raise ValueError(f"tiled params {params}: range_min_n and range_max_n must satisfy "
                             f"1 <= range_min_n <= range_max_n (got {params.range_min_n}, "
                             f"{params.range_max_n}); range_tile_n and range_threads >= 0")
        ranged = params.for_range()
        if (ranged.tile_n, ranged.threads) == (params.tile_n, params.threads):
            raise ValueError(f"tiled params {params}: range_tile_n/range_threads give the range "
                             f"kernel the main kernel's tile ({params.tile_n} positions, "
                             f"{params.threads} threads); set one of them to another value")
        self.check_params(config, ranged)

    def range_kernel(self, params: TiledParams) -> tuple[tuple[int, int], TiledParams] | None:
        """The build's kernel for an ``N`` range: ``((first, last), its params)``, or None."""
        rows = params.n_range()
        return None if rows is None else (rows, params.for_range())

    def apply(self, func: PrimFunc, pass_: Pass, config: OpConfig, params: TiledParams,
              vec: int, vec_kd: int | None = None) -> PrimFunc:
        self.check_params(config, params)
        params = params.for_variant(config.itemsize, vec)
        vec_kd = vec if vec_kd is None else vec_kd
        if vec_kd > self.vector_width(config, params) or config.key_dim % vec_kd:
            raise ValueError(f"vec_kd={vec_kd} does not fit key_dim={config.key_dim} and "
                             f"{params.vec_bytes}-byte accesses")
        sch, name = new_schedule(func)
        block, b, h, s, d, n = pass_loops(sch, pass_)
        int32_kernel = str(sch.get(n).loop_var.ty) == "int32"
        slices = params.slices_per_cta
        streams, heads = int(sch.get(s).extent), int(sch.get(h).extent)
        # More slices than streams: the CTA takes whole heads, slices / streams of them, whose
        # streams are all adjacent in the bnhd layout (one k*kd piece per position).
        across_heads = not params.heads_inner and slices > streams
        if across_heads:
            if slices % streams or (heads * streams) % slices:
                raise ValueError(f"slices_per_cta={slices} is neither a divisor of the streams "
                                 f"({streams}) nor whole heads dividing {heads} heads")
            h, h_in = sch.split(h, [None, slices // streams])
            slice_in = sch.fuse(h_in, s)
            bhs = sch.fuse(b, h)
        else:
            grouped = heads if params.heads_inner else streams
            if grouped % slices:
                raise ValueError(f"slices_per_cta={slices} does not divide the "
                                 f"{'heads' if params.heads_inner else 'streams'} ({grouped})")
            if params.heads_inner:
                sch.reorder(s, h)
            if slices > 1:  # split the slice axis itself: the shared tile's index stays affine
                if params.heads_inner:
                    h, slice_in = sch.split(h, [None, slices])
                else:
                    s, slice_in = sch.split(s, [None, slices])
            bhs = sch.fuse(b, s, h) if params.heads_inner else sch.fuse(b, h, s)
        n_tile, n_in = sch.split(n, [None, params.tile_n])
        if slices > 1:
            sch.reorder(bhs, n_tile, slice_in, n_in, d)
        else:
            sch.reorder(bhs, n_tile, n_in, d)
        sch.bind(n_tile, "blockIdx.y" if params.slices_on_x else "blockIdx.x")
        sch.bind(bhs, "blockIdx.x" if params.slices_on_x else "blockIdx.y")

        registers = None
        if pass_ == "forward":
            staged = sch.cache_write(block, 0, "shared")
            sch.reverse_compute_at(staged, n_tile)
            aligned_block = block
            if params.stage_loads:  # block: global -> registers; registers: -> the shared tile
                registers = sch.cache_write(block, 0, "local")
                aligned_block = registers
        else:
            staged = sch.cache_read(block, 0, "shared")
            sch.compute_at(staged, n_tile)
            aligned_block = staged

        # int32 kernels only: TVM's layout transform wants one index dtype per access, and an
        # int64 kernel's tile accesses mix them (those run past 2**31 elements only). The one
        # layout TVM 0.27 cannot compact afterwards is refused by check_params.
        grouped = params.group_pad_bytes > 0 and int32_kernel
        if grouped:
            sch.transform_layout(aligned_block, ("write", 0),
                                 lambda b, h, s, d, n: (b, h, s, d // vec_kd, d % vec_kd, n))

        # The kd-contiguous side: a warp covers threads/row_threads rows, row_threads vectors each,
        # vec_kd elements wide. Row starts are (row*N + n)*kd: aligned whenever kd % vec_kd == 0,
        # whatever N is, so this side keeps its width when an N tail narrows the other side.
        # With several slices per CTA, the threads of one position cover its k*kd-element piece
        # (k slices x row_threads vectors per kd row), contiguous in the bnhd layout.
        rows_per_pass = params.threads // (params.row_threads * slices)
        coalesced = (registers is not None and params.stage_coalesced and int32_kernel
                     and vec_kd * config.itemsize == params.vec_bytes)
        if registers is None or coalesced:
            n_outer, n_row = sch.split(n_in, [None, rows_per_pass])
            d_outer, d_thread, d_vec = sch.split(d, [None, params.row_threads, vec_kd])
        else:  # a thread's positions and vectors adjacent: its register block is dense
            n_row, n_outer = sch.split(n_in, [rows_per_pass, None])
            d_thread, d_outer, d_vec = sch.split(d, [params.row_threads, None, vec_kd])
        if slices > 1:
            sch.reorder(n_outer, d_outer, n_row, slice_in, d_thread, d_vec)
            kd_thread = sch.fuse(n_row, slice_in, d_thread)
        else:
            sch.reorder(n_outer, d_outer, n_row, d_thread, d_vec)
            kd_thread = sch.fuse(n_row, d_thread)
        sch.bind(kd_thread, "threadIdx.x")
        sch.vectorize(d_vec)
        sch.unroll(n_outer)
        sch.unroll(d_outer)
        if registers is not None:  # the thread's loads first, then its stores into the tile
            sch.reorder(kd_thread, n_outer, d_outer)
            if coalesced:
                # The thread's positions are rows_per_pass apart and its vectors
                # row_threads*vec_kd apart: index the register buffer by (b, h, s, the tile,
                # the thread's row, its vector slot, the step, the vector, the element). Under
                # the thread loop that is the dense [steps, d_outer, vec_kd] block; with the
                # tile's own index, compaction would size it as the span of the thread's
                # positions. The step is n % tile_n // rows_per_pass: TVM 0.27 cannot map the
                # shape of n // rows_per_pass % steps (a range whose minimum is not zero), and
                # an n // rows_per_pass axis of symbolic extent overflows int32 in compaction.
                # The map is a bijection that TVM's affine check cannot prove, hence
                # assume_injective_transform.
                stride_d = params.row_threads * vec_kd
                sch.transform_layout(
                    block, ("write", 0),
                    lambda b, h, s, d, n: (b, h, s, n // params.tile_n, n % rows_per_pass,
                                           d // vec_kd % params.row_threads,
                                           n % params.tile_n // rows_per_pass, d // stride_d,
                                           d % vec_kd),
                    assume_injective_transform=True)
                # The copy into the tile (cache_write's own nest under the tile loop, over
                # the tile: unit b, h, s loops or the slices, then d and n) is split and bound
                # like the loads, so each thread copies exactly its own registers. Under the
                # loads' thread loop instead (reverse_compute_at), its extent would be inferred
                # through the index above, which is not affine: the whole tile.
                *c_rows, c_d, c_n = sch.get_loops(registers)[2:]
                c_outer, c_row = sch.split(c_n, [params.tile_n // rows_per_pass, rows_per_pass])
                c_d_outer, c_d_thread, c_vec = sch.split(c_d, [None, params.row_threads, vec_kd])
                sch.reorder(c_row, *c_rows, c_d_thread, c_outer, c_d_outer, c_vec)
                sch.bind(sch.fuse(c_row, *c_rows, c_d_thread), "threadIdx.x")
                for loop in (c_outer, c_d_outer, c_vec):
                    sch.unroll(loop)
            else:
                sch.reverse_compute_at(registers, kd_thread)
                for loop in sch.get_loops(registers)[3:]:  # under (slices, n_tile, thread)
                    sch.unroll(loop)

        # The n-contiguous side: whole tile rows, one vector per thread per step.
        *ax_rows, ax_n = sch.get_loops(staged)[2:]  # under (slices, n_tile): [slices,] d, n
        n_vectors, n_vec = sch.split(ax_n, [None, vec])
        steps, thread = sch.split(sch.fuse(*ax_rows, n_vectors), [None, params.threads])
        sch.bind(thread, "threadIdx.x")
        sch.vectorize(n_vec)
        sch.unroll(steps)

        # The tile row axis d of the staged buffer (b, h, s, d, n); grouped, d = (group, row in
        # group) and the group stride is skewed by group_pad_bytes as well.
        sch.storage_align(
            aligned_block, 0, axis=4 if grouped else 3,
            factor=_BANK_ROW_BYTES // config.itemsize,
            offset=params.pad_bytes // config.itemsize,
        )
        if grouped:
            sch.storage_align(aligned_block, 0, axis=3,
                              factor=_BANK_ROW_BYTES // config.itemsize,
                              offset=params.group_pad_bytes // config.itemsize)
        if slices > 1:
            # The slices' tiles are kd rows apart, a multiple of 128 bytes whenever kd is a
            # multiple of 8: pad them too, so the slices a warp touches land in other banks.
            for axis in ((1, 2) if across_heads else (1 if params.heads_inner else 2,)):
                sch.storage_align(
                    aligned_block, 0, axis=axis, factor=_BANK_ROW_BYTES // config.itemsize,
                    offset=params.pad_bytes // config.itemsize,
                )
        return finish(sch, name, per_thread_buffers=coalesced and self.unify_threads)
