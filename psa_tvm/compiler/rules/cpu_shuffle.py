"""``cpu_shuffle``: the CPU (LLVM) kernels as register-tile transposes written in TIR.

Both passes transpose, per ``(b, h, s)`` slice, an ``[N, kd]`` block (``lo``/``hi`` rows,
contiguous along ``kd``) to or from a ``[kd, N]`` block (the merged tensor, contiguous along
``N``). The ``cpu`` rule (:mod:`psa_tvm.compiler.rules.cpu`) vectorizes one side and leaves the
other strided, and on x86-64-v3 LLVM turns the strided side into one scalar insert or extract
per element (no gathers): the kernels are bound by lane moves, 1.4-7.5x a ``copy_``.
``sch.tensorize`` segfaults in this TVM build, so the transpose is written here directly: whole
vector loads (``BufferLoad`` with a ``Ramp`` index), a network of two-input ``Shuffle``
expressions that LLVM's x86 backend matches one-to-one to ``vunpck*``/``vpunpck*``, and whole
vector stores. No schedule primitive is involved, so the rule builds the PrimFunc itself, with the
signature, buffers and symbols of :func:`psa_tvm.compiler.compute.merge_forward` /
``merge_backward`` at ``vec=1``, int64 indexing and element alignment (any ``N``, any
element-aligned view: every access is an unaligned ``vmovdqu``/``vmovups``).

The tile: a vector holds ``lanes`` elements (``vector_bytes`` 32: a ymm register, two 128-bit
lanes); one 128-bit lane holds ``E = 16 / itemsize`` elements (4 float32, 8 16-bit). ``E``
vectors go through ``log2(E)`` stages of in-lane interleaves (``E`` shuffles each), which
transposes an ``E x E`` block inside every 128-bit lane at once. The tile shapes:

- square (``cross_lane``, the default): ``lanes x lanes`` (8x8 float32, 16x16 16-bit). Rows
  ``0..E-1`` and ``E..2E-1`` are transposed in-lane, and result ``k`` of both is joined lane by
  lane (one ``vperm2f128``/``vperm2i128`` each) into whole columns, stored as whole vectors;
- square forward tiles with the halves joined at the loads (``joined_loads``, the 16-bit
  default): each vector is two 16-byte loads, positions ``k`` and ``E + k``, so the in-lane
  transpose alone yields whole output rows, with no cross-lane join and half the live vectors
  (docs/perf.md v32: LLVM spilled 11 of a 16-bit tile's 16 rows with whole-row loads);
- lane tiles: the in-lane results are stored half by half (``vmovdqu xmm`` / ``vextracti128``
  to memory): forward ``E`` positions x ``lanes`` channels, backward ``E`` channels x ``lanes``
  positions. Same shuffles per byte, twice the stores, smaller tiles (a shorter scalar tail).

Measured on this host (x86-64-v3 code, 1 thread, best of 9 interleaved rounds, time / torch
``copy_`` time): square tiles 0.79-0.92 at 16x40x40 float32 (lane tiles 0.95-1.09 in the same
runs), within noise of lane tiles elsewhere. Taking the shuffles out (wrong results, the same
loads and stores; 1x40x40 float16) left the time unchanged, and joining the lanes at the loads
(``vinserti128`` from memory, a quarter to a third fewer shuffles) was no faster: at these sizes
the kernels are bound by their memory accesses, not by the shuffle port. Odd ``N`` forward pays
for stores that straddle cache lines (the merged rows start at odd offsets); docs/perf.md v9.

Tails: a tail test inside the tile would make TVM/LLVM scalarize it, so there is none. The last
tile of a slice starts at ``N - tile`` instead and overlaps the one before: the overlapped
elements are written twice with the same values (a permutation, the outputs never alias the
inputs), so any ``N >= tile`` runs whole tiles only. ``N < tile`` (at most 15 positions) runs a
scalar loop. 16-bit types move as integers (``reinterpret``): bit-exact, and TVM's bfloat16
legalization would otherwise rewrite the values but not the types of the bound vectors.

Needs ``kd % E == 0`` (:meth:`CpuShuffle.supports`); ``kd`` not a multiple of ``lanes`` uses
16-byte vectors (one lane). The parallel loop is the fused ``(b, h, s)`` loop, as in ``cpu``.

Past the caches: a tile reads (backward) or writes (forward) ``kd`` rows of the merged tensor
at once, ``kd`` streams that the hardware prefetchers follow poorly, so once the tensors no
longer stay in the caches between calls every access waits on L3 or DRAM (2-3x a ``copy_``,
up to 6x at L3-resident 16-bit sizes on the 2-core guest). The ``prefetch`` kernels therefore
have each task first prefetch its whole slice of the merged tensor (``kd * N`` contiguous
elements) line by line in address order, for writing in the forward, and transpose it from L2.
Where the tensors do stay in the caches that only costs, so the run time picks them by the
call's size against the host's L3 (docs/perf.md v31).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx import PrimFunc
from tvm.tirx.script.builder import ir as T

from psa_tvm.compiler.rules.base import Pass
from psa_tvm.config import OpConfig

_LANE_BYTES = 16  # one 128-bit lane: the unit of x86's interleave instructions


@dataclass(frozen=True)
class CpuShuffleParams:
    """Tunable parameters of :class:`CpuShuffle`."""

    vector_bytes: int = 32
    """Bytes per vector: 32 (AVX2 ymm, two 128-bit lanes: two tiles per shuffle) or 16."""
    cross_lane: bool = True
    """Square ``lanes x lanes`` tiles: two in-lane transposes joined by one cross-lane shuffle
    per result (``vperm2f128``/``vperm2i128``), stored as whole vectors (half the stores);
    ``False``: lane tiles, each 128-bit half stored on its own."""
    lane_tail: bool = False
    """Square forward tiles: the last ``N % lanes`` positions by one lane tile (``E`` positions,
    16-byte stores) at ``N - E`` where they fit in one, instead of a whole square tile at
    ``N - lanes``; the full tiles at ``0, lanes, 2 * lanes ...``. On by default for 16-bit types
    (:meth:`CpuShuffle.default_params`)."""
    joined_loads: bool = False
    """Square forward tiles: each vector entering the in-lane transpose is two 16-byte loads
    joined, positions ``k`` and ``E + k`` (``vmovdqu xmm`` + ``vinserti128`` from memory), so
    that every result of the transpose is a whole output row: no cross-lane join stage, and 8
    vectors live at a time instead of 16 (with whole-row loads LLVM keeps the 16 rows of a
    16-bit tile live and spills 11 of them to the stack). On by default for 16-bit types
    (:meth:`CpuShuffle.default_params`). The backward keeps whole-vector loads: its joined
    loads would read two rows of the merged tensor per vector, measured slower."""
    prefetch: bool = False
    """Each task first prefetches its slice of the merged tensor (``kd * N`` contiguous
    elements), one instruction per 64-byte line in address order, for writing in the forward,
    then transposes it from L2. The library builds both and the run time picks this one for
    calls past the caches (``psa_tvm_cpu_prefetch_bytes`` in ``compiler/cpu_pool.cc``)."""
    prefetch_slice_bytes: int = 1 << 20
    """... only where a slice is at most this many bytes, so that the lines prefetched first are
    still in L2 when the transpose reaches them."""


def _i32(value: int) -> tirx.IntImm:
    return tirx.IntImm("int32", value)


def _i64(value: int) -> tirx.IntImm:
    return tirx.IntImm("int64", value)


def _ramp(base, lanes: int) -> tirx.Ramp:
    return tirx.Ramp(base, _i64(1), lanes)


def interleave(a, b, group: int, high: bool, lanes: int, lane_elems: int) -> tirx.Shuffle:
    """``group``-element groups of ``a`` and ``b`` interleaved inside each 128-bit lane, from the
    low (``high=False``) or high half of the lane: x86's ``unpcklo``/``unpckhi`` family."""
    half = lane_elems // 2
    indices = []
    for lane in range(lanes // lane_elems):
        start = lane * lane_elems + (half if high else 0)
        for k in range(0, half, group):
            indices += [start + k + j for j in range(group)]
            indices += [lanes + start + k + j for j in range(group)]
    return tirx.Shuffle([a, b], [_i32(i) for i in indices])


def lane_transpose(rows: list, lanes: int, lane_elems: int, bind=lambda e: e) -> tuple:
    """Transpose ``lane_elems`` vectors inside every 128-bit lane.

    Returns ``(vectors, labels)``: ``labels[k][j] = (row, column)`` is where lane ``j`` of
    result ``k`` comes from (traced alongside the expressions, so the caller stores by the trace
    rather than by a derivation). ``bind`` binds each stage's vectors to variables.
    """
    vectors = list(rows)
    labels = [[(r, c) for c in range(lanes)] for r in range(len(rows))]
    group = 1
    while group < lane_elems:
        new_vectors, new_labels = [], []
        for base in range(0, lane_elems, 2 * group):
            for j in range(group):
                a, b = base + j, base + j + group
                for high in (False, True):
                    expr = interleave(vectors[a], vectors[b], group, high, lanes, lane_elems)
                    both = labels[a] + labels[b]
                    new_vectors.append(bind(expr))
                    new_labels.append([both[int(i)] for i in expr.indices])
        vectors, labels = new_vectors, new_labels
        group *= 2
    return vectors, labels


class CpuShuffle:
    """Register-tile transposes with shuffles; see the module docstring."""

    name: ClassVar[str] = "cpu_shuffle"
    Params: ClassVar[type] = CpuShuffleParams

    def default_params(self, config: OpConfig) -> CpuShuffleParams:
        # lane_tail: measured (docs/bench-tails/cpu11, 2 threads) 0.3-0.8 us faster at N=1073
        # and 1.0-1.2 us at 16x1x33 for 16-bit types, but 0.5-1.5 us slower for float32 at the
        # same shapes, where the whole forward loop compiles differently.
        # joined_loads (docs/perf.md v32, per-round ratios to copy_ in one process): 16-bit
        # forwards lower or within 0.01 in every row of two runs on the Xeon (16 threads), up
        # to 0.33 lower, and mostly lower on the 2-core EPYC; float32 forwards split by host (up
        # to 0.38 lower on the EPYC, 0.06-0.24 higher at N 300, 920, 1073 on the Xeon), so they
        # keep whole-row loads.
        sixteen_bit = config.itemsize == 2
        return CpuShuffleParams(lane_tail=sixteen_bit, joined_loads=sixteen_bit)

    def lane_elems(self, config: OpConfig) -> int:
        """Elements per 128-bit lane: the tile's short side."""
        return _LANE_BYTES // config.itemsize

    def lanes(self, config: OpConfig, params: CpuShuffleParams) -> int:
        """Elements per vector: the tile's long side (one lane where ``kd`` needs it)."""
        lanes = params.vector_bytes // config.itemsize
        return lanes if config.key_dim % lanes == 0 else self.lane_elems(config)

    def supports(self, config: OpConfig) -> bool:
        """Whether ``kd`` is a whole number of 128-bit lanes (else: the ``cpu`` rule)."""
        return config.key_dim % self.lane_elems(config) == 0

    def check_params(self, config: OpConfig, params: CpuShuffleParams) -> None:
        if params.vector_bytes not in (16, 32):
            raise ValueError(f"cpu_shuffle params {params}: vector_bytes must be 16 or 32")
        if params.prefetch_slice_bytes < 0:
            raise ValueError(f"cpu_shuffle params {params}: prefetch_slice_bytes must be >= 0")
        if not self.supports(config):
            raise ValueError(f"cpu_shuffle cannot build {config}: key_dim={config.key_dim} is "
                             f"not a multiple of {self.lane_elems(config)}")

    def square(self, config: OpConfig, params: CpuShuffleParams) -> bool:
        """Whether tiles are ``lanes x lanes`` (``cross_lane`` with more than one lane)."""
        return params.cross_lane and self.lanes(config, params) > self.lane_elems(config)

    def tile_n(self, pass_: Pass, config: OpConfig, params: CpuShuffleParams) -> int:
        """Positions per tile; smaller ``N`` runs the scalar loop."""
        if pass_ == "forward" and not self.square(config, params):
            return self.lane_elems(config)
        return self.lanes(config, params)

    def build(self, pass_: Pass, config: OpConfig, params: CpuShuffleParams, *,
              name: str) -> PrimFunc:
        """The PrimFunc of one pass, exported as ``name``: ``(lo, hi, out, NV)`` forward,
        ``(g, dlo, dhi, NV)`` backward, ``N = NV``, shapes as in
        :mod:`psa_tvm.compiler.compute`."""
        self.check_params(config, params)
        kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
        elems, lanes = self.lane_elems(config), self.lanes(config, params)
        tile_n = self.tile_n(pass_, config, params)
        align = config.itemsize
        bits = f"int{8 * config.itemsize}"
        as_bits = config.itemsize != 4  # float32 shuffles as it is

        def load(buf, indices, n):
            value = tirx.BufferLoad(buf, indices)
            return T.reinterpret(f"{bits}x{n}", value) if as_bits else value

        def store(buf, value, indices, n):
            T.buffer_store(buf, T.reinterpret(f"{dtype}x{n}", value) if as_bits else value,
                           indices)

        forward = pass_ == "forward"
        with IRBuilder() as builder, T.prim_func():
            T.func_name(name)
            T.func_attr({"global_symbol": name, "tirx.noalias": True})
            handles = [T.arg(arg, T.handle()) for arg in
                       (("lo", "hi", "out") if forward else ("g", "dlo", "dhi"))]
            n_total = T.arg("NV", T.int64())
            batch = IRBuilder.name("B", T.int64())
            half_shape, merged_shape = (batch * nh, n_total, kd), (batch, nh, 2, kd, n_total)
            if forward:
                lo = T.match_buffer(handles[0], half_shape, dtype, align=align)
                hi = T.match_buffer(handles[1], half_shape, dtype, align=align)
                merged = T.match_buffer(handles[2], merged_shape, dtype, align=align)
            else:
                merged = T.match_buffer(handles[0], merged_shape, dtype, align=align)
                lo = T.match_buffer(handles[1], half_shape, dtype, align=align)
                hi = T.match_buffer(handles[2], half_shape, dtype, align=align)
            for buf, label in ((lo, "lo" if forward else "dlo"), (hi, "hi" if forward else "dhi"),
                               (merged, "out" if forward else "g")):
                IRBuilder.name(label, buf)
            with T.parallel(_i64(0), batch * nh * 2) as task:
                row = task // 2
                b, h, s = row // nh, row % nh, task % 2
                if params.prefetch:
                    self._prefetch_slice(forward, merged, task, batch, n_total, config, params)
                for side, half in enumerate((lo, hi)):
                    with T.If(s == side), T.Then(), T.If(n_total >= tile_n):
                        with T.Then():
                            self._tiles(forward, half, merged, row, b, h, s, n_total, kd, elems,
                                        lanes, tile_n, load, store, self.square(config, params),
                                        params.lane_tail, forward and params.joined_loads)
                        with T.Else():  # N < tile_n: a few positions, one element at a time
                            self._scalar(forward, half, merged, row, b, h, s, n_total, kd)
        return builder.get()

    @staticmethod
    def _prefetch_slice(forward, merged, task, batch, n_total, config: OpConfig,
                        params: CpuShuffleParams) -> None:
        """Where a slice fits in L2 (``prefetch_slice_bytes``): ``llvm.prefetch`` of every
        64-byte line of the task's slice ``merged[b, h, s]`` (``kd * N`` contiguous elements, the
        ``task``-th), in address order.

        Why: the transpose walks ``kd`` rows of the slice at once (reads backward, writes
        forward), ``kd`` streams at a time that the hardware prefetchers follow poorly once the
        data comes from L3 or DRAM, and every access then waits on it. One pass of prefetches in
        address order brings the slice in at close to copy speed first (docs/perf.md v31)."""
        kd, itemsize = config.key_dim, config.itemsize
        line = 64 // itemsize
        slice_elems = n_total * kd
        output_elems = batch * (config.num_heads * 2) * slice_elems
        base = task * slice_elems
        with T.If(slice_elems <= _i64(params.prefetch_slice_bytes // itemsize)), T.Then():
            # An integer view of the same memory: only addresses are taken (16-bit floats as
            # integers, as everywhere in this rule).
            flat = T.decl_buffer((output_elems,), f"int{8 * itemsize}", data=merged.data)
            with T.serial(_i64(0), (slice_elems + (line - 1)) // line) as k:
                # llvm.prefetch(address, rw: 1 write / 0 read, locality 3: keep in all levels,
                # cache type 1: data)
                T.evaluate(T.call_llvm_intrin("void", "llvm.prefetch",
                                              T.address_of(flat[base + k * line]),
                                              _i32(1 if forward else 0), _i32(3), _i32(1)))

    @staticmethod
    def _scalar(forward, half, merged, row, b, h, s, n_total, kd) -> None:
        with T.serial(_i64(0), n_total) as n, T.serial(_i64(0), _i64(kd)) as d:
            if forward:
                T.buffer_store(merged, tirx.BufferLoad(half, [row, n, d]), [b, h, s, d, n])
            else:
                T.buffer_store(half, tirx.BufferLoad(merged, [b, h, s, d, n]), [row, n, d])

    @staticmethod
    def _tiles(forward, half, merged, row, b, h, s, n_total, kd, elems, lanes, tile_n, load,
               store, square, lane_tail=False, joined=False) -> None:
        """Every tile of one slice; the last one starts at ``N - tile_n`` (overlapping)."""
        if square and forward and lane_tail:
            CpuShuffle._square_tiles_lane_tail(half, merged, row, b, h, s, n_total, kd, lanes,
                                               elems, load, store, joined)
            return
        if square:
            CpuShuffle._square_tiles(forward, half, merged, row, b, h, s, n_total, kd, lanes,
                                     elems, load, store, joined)
            return
        d_step = lanes if forward else elems
        with T.serial(_i64(0), (n_total + (tile_n - 1)) // tile_n) as n_tile:
            n0 = T.Bind(T.min(n_tile * tile_n, n_total - tile_n))
            with T.serial(_i64(0), _i64(kd // d_step)) as d_tile:
                CpuShuffle._lane_tile(forward, half, merged, row, b, h, s, n0,
                                      T.Bind(d_tile * d_step), elems, lanes, load, store)

    @staticmethod
    def _lane_tile(forward, half, merged, row, b, h, s, n0, d0, elems, lanes, load,
                   store) -> None:
        """One lane tile: forward ``E`` positions x ``lanes`` channels, backward ``E`` channels x
        ``lanes`` positions; each 128-bit half of a result is stored on its own."""
        if forward:  # rows of lo/hi: E positions, `lanes` channels each
            rows = [T.Bind(load(half, [row, n0 + i, _ramp(d0, lanes)], lanes))
                    for i in range(elems)]
        else:  # rows of the merged tensor: E channels, `lanes` positions each
            rows = [T.Bind(load(merged, [b, h, s, d0 + i, _ramp(n0, lanes)], lanes))
                    for i in range(elems)]
        vectors, labels = lane_transpose(rows, lanes, elems, T.Bind)
        for vector, label in zip(vectors, labels, strict=True):
            for lane in range(lanes // elems):
                part = label[lane * elems:(lane + 1) * elems]
                column = part[0][1]
                # Each 128-bit half is one source column, rows 0..E-1 in order.
                assert part == [(i, column) for i in range(elems)], label
                value = vector if lanes == elems else tirx.Shuffle(
                    [vector], [_i32(lane * elems + j) for j in range(elems)])
                if forward:
                    store(merged, value, [b, h, s, d0 + column, _ramp(n0, elems)], elems)
                else:
                    store(half, value, [row, n0 + column, _ramp(d0, elems)], elems)

    @staticmethod
    def _square_tiles(forward, half, merged, row, b, h, s, n_total, kd, lanes, elems, load,
                      store, joined=False) -> None:
        """``lanes x lanes`` tiles: in-lane transposes of rows ``0..E-1`` and ``E..2E-1``, then
        result ``k`` of both joined lane by lane (two 128-bit lanes: ``lanes == 2 * E``)."""
        with T.serial(_i64(0), (n_total + (lanes - 1)) // lanes) as n_tile:
            CpuShuffle._square_tile(forward, half, merged, row, b, h, s,
                                    T.Bind(T.min(n_tile * lanes, n_total - lanes)), kd, lanes,
                                    elems, load, store, joined)

    @staticmethod
    def _square_tiles_lane_tail(half, merged, row, b, h, s, n_total, kd, lanes, elems, load,
                                store, joined=False) -> None:
        """Forward: square tiles at ``0, lanes, ...`` (no overlap), then the last
        ``N % lanes`` positions by one lane tile at ``N - E`` where ``N % lanes <= E``, else by
        one square tile at ``N - lanes``: half a tile's loads and shuffles instead of a whole
        one where the rest is short (``N`` = 33, 1073, 16-bit)."""
        with T.serial(_i64(0), n_total // lanes) as n_tile:
            CpuShuffle._square_tile(True, half, merged, row, b, h, s, T.Bind(n_tile * lanes),
                                    kd, lanes, elems, load, store, joined)
        rest = n_total % lanes
        with T.If(tirx.all(rest > 0, rest <= elems)), T.Then(), \
                T.serial(_i64(0), _i64(kd // lanes)) as d_tile:
            CpuShuffle._lane_tile(True, half, merged, row, b, h, s, T.Bind(n_total - elems),
                                  T.Bind(d_tile * lanes), elems, lanes, load, store)
        with T.If(rest > elems), T.Then():
            CpuShuffle._square_tile(True, half, merged, row, b, h, s, T.Bind(n_total - lanes),
                                    kd, lanes, elems, load, store, joined)

    @staticmethod
    def _square_tile(forward, half, merged, row, b, h, s, n0, kd, lanes, elems, load,
                     store, joined=False) -> None:
        """Positions ``n0..n0+lanes-1`` of one slice, every channel block."""
        if joined:  # forward only (the caller's choice)
            CpuShuffle._joined_square_tile(half, merged, row, b, h, s, n0, kd, lanes, elems,
                                           load, store)
            return
        with T.serial(_i64(0), _i64(kd // lanes)) as d_tile:
            d0 = T.Bind(d_tile * lanes)
            if forward:
                rows = [T.Bind(load(half, [row, n0 + i, _ramp(d0, lanes)], lanes))
                        for i in range(lanes)]
            else:
                rows = [T.Bind(load(merged, [b, h, s, d0 + i, _ramp(n0, lanes)], lanes))
                        for i in range(lanes)]
            top, top_labels = lane_transpose(rows[:elems], lanes, elems, T.Bind)
            bottom, bottom_labels = lane_transpose(rows[elems:], lanes, elems, T.Bind)
            for k in range(elems):
                both = top_labels[k] + [(r + elems, c) for r, c in bottom_labels[k]]
                for lane in range(2):
                    indices = ([lane * elems + j for j in range(elems)]
                               + [lanes + lane * elems + j for j in range(elems)])
                    label = [both[i] for i in indices]
                    column = label[0][1]
                    assert label == [(i, column) for i in range(lanes)], label
                    value = tirx.Shuffle([top[k], bottom[k]], [_i32(i) for i in indices])
                    if forward:
                        store(merged, value, [b, h, s, d0 + column, _ramp(n0, lanes)], lanes)
                    else:
                        store(half, value, [row, n0 + column, _ramp(d0, lanes)], lanes)

    @staticmethod
    def _joined_square_tile(half, merged, row, b, h, s, n0, kd, lanes, elems, load,
                            store) -> None:
        """The square forward tile with its halves joined at the loads (``joined_loads``): for
        each half ``c0`` of the tile's ``lanes`` channels, vector ``k`` holds position ``k``'s
        and position ``E + k``'s ``E`` channels from ``c0``. Inside 128-bit lane 0 the transpose
        then sees positions ``0..E-1``, in lane 1 positions ``E..2E-1``, so result ``j`` is
        channel ``c0 + j`` at all ``lanes`` positions: one whole output row, stored as it comes
        out."""
        with T.serial(_i64(0), _i64(kd // lanes)) as d_tile:
            d0 = T.Bind(d_tile * lanes)
            for c0 in range(0, lanes, elems):
                vectors = []
                for k in range(elems):
                    halves = [load(half, [row, n0 + r, _ramp(d0 + c0, elems)], elems)
                              for r in (k, elems + k)]
                    vectors.append(T.Bind(tirx.Shuffle(halves,
                                                       [_i32(i) for i in range(2 * elems)])))
                results, labels = lane_transpose(vectors, lanes, elems, T.Bind)
                for value, label in zip(results, labels, strict=True):
                    # lane m of input vector k: position k (m < E) or E + k, channel c0 + m % E
                    source = [(k + elems * (m >= elems), m % elems) for k, m in label]
                    column = source[0][1]
                    assert source == [(i, column) for i in range(lanes)], source
                    store(merged, value, [b, h, s, d0 + c0 + column, _ramp(n0, lanes)], lanes)
