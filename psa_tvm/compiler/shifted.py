"""Merge kernels with 16-byte accesses on the N side for every ``N``: shifted shared rows.

A row of the merged tensor (``N`` elements of one ``(b, h, s, d)``) starts at element
``row * N``; for ``N`` not a multiple of the vector width the tiled rule's N side narrows to what
that start allows (2 bytes for a 16-bit odd ``N``), and a warp's stores then straddle sectors.
Here every row is cut at the *global* 16-byte grid instead: row ``d`` begins ``s_d`` elements
before its first aligned vector, and its shared-memory row is stored shifted by ``s_d``, so each
aligned global vector is an aligned shared vector (``LDS.128``/``STG.128``, or ``LDG.128``/
``STS.128`` backward). The shift costs nothing where it is applied: on the kd side, whose
elements are scattered into (gathered from) the shared rows one by one anyway.

Forward: a CTA owns the aligned vectors whose first element lies in its tile of each row, so it
loads a halo of ``grain * vec`` positions past the tile (no vector is split between CTAs), and
with ``grain = 2`` CTAs meet on 32-byte sector boundaries of the output. A thread's position and
its eight shared offsets are fixed for the whole kernel (each step adds a constant). Backward: a
CTA owns whole positions (a kd-side vector is every row's element of one position), so it loads
one aligned vector before its tile in every row. In both, each row's head (before its first
aligned vector, first tile) and tail (after its last whole one, last tiles) move element by
element in one extra step of the edge tiles only.

These are hand-written TensorIR (TVMScript without blocks): the index map is not affine in
``N`` (``s_d`` depends on ``row * N mod vec``), so no schedule of the merge's compute definition
reaches it. Each pass is a variant of a tiled merge build (:mod:`psa_tvm.compiler.artifact`):
``vec = 1`` (any ``N``), ``vec_kd`` the full width, ``int32`` indexing, a launch rank between
an 8-byte and a 4-byte N side and a minimum call size (:data:`MIN_NUMEL`; ``runtime/plan.py``):
measured on the H200 (docs/perf.md v13), they beat the narrow variants from that size on and
lose to the 8- and 16-byte ones. A build may split the backward by call size
(``ShiftedParams.bwd_small_below``): a second kernel of the same TensorIR with small tiles runs
from that minimum size up to the split, where the main one's large CTAs would leave SMs idle
(docs/perf.md v20). A build may also hold a whole-row backward by ``N``
(``ShiftedParams.bwd_whole_tile_n``): one CTA per row where ``N`` fits its tile but not the main
one's, because a call's size does not say how its rows cut into tiles (docs/perf.md v21).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, replace

from tvm.script import tirx as T
from tvm.tirx import PrimFunc

from psa_tvm.compiler.compute import parses_tvmscript
from psa_tvm.config import OpConfig
from psa_tvm.runtime.tuned import shifted_record

#: The shifted kernels run from this many merged elements up. Their CTAs are 2-4x larger than
#: the tiled ones', which below it leaves most SMs idle: on the H200, float16 37x29 (N=1073)
#: at batch 1 (0.27M elements) took 1.65x a copy against the tiled kernel's 1.17x, and 1x33 at
#: batch 64 (0.54M) 1.30x against 1.13x; from batch 16 (4.4M) on they win (docs/perf.md v13).
MIN_NUMEL = 1 << 21

#: The smallest key_dim whose 16-bit shifted backward also runs where ``N % 8 == 0`` by default
#: (:attr:`ShiftedParams.bwd_aligned`, :func:`aligned_rank`).
ALIGNED_MIN_KEY_DIM = 128

_BANK_WORDS = 32
_STATIC_SMEM_BYTES = 48 * 1024
_ROW_LANES = 16  # forward row side: lanes per row, 256 contiguous bytes per warp row


@dataclass(frozen=True)
class ShiftedParams:
    """Shape of the shifted kernels (the H200 sweep: docs/bench-tiles/shifted/)."""

    fwd_threads: int = 256
    """Forward threads; the tile is ``fwd_positions * fwd_threads / fwd_row_threads``
    positions."""
    fwd_row_threads: int = 2
    """Forward threads per position on the kd side (a multiple of ``grain``)."""
    fwd_positions: int = 2
    """Positions per forward thread (each thread's set-up is amortised over more of them)."""
    grain: int = 2
    """Vectors per forward ownership unit: 2 makes CTAs meet on 32-byte sectors."""
    bwd_tile_n: int = 248
    """Backward positions per CTA (a multiple of the vector width)."""
    bwd_threads: int = 256
    """Backward threads."""
    bwd_row_threads: int = 4
    """Backward threads per position on the kd side."""
    bwd_small_below: int = 0
    """Merged elements below which a second backward, shaped by the ``bwd_small_*`` fields,
    runs instead (from :data:`MIN_NUMEL` up); 0: no second backward. Small tiles give small
    calls enough CTAs to fill the GPU but read a larger share of halo, so they lose at large
    calls (docs/perf.md v19-v20)."""
    bwd_small_tile_n: int = 56
    """The small-call backward's positions per CTA."""
    bwd_small_threads: int = 128
    """The small-call backward's threads."""
    bwd_small_row_threads: int = 4
    """The small-call backward's threads per position on the kd side."""
    bwd_small_edge_first: int = 0
    """The small-call backward's :attr:`bwd_edge_first`."""
    bwd_whole_tile_n: int = 0
    """Positions per CTA of a third backward, shaped by the ``bwd_whole_*`` fields, that runs
    where ``N`` fits one of its tiles but not one of the main kernel's (``bwd_tile_n < N <=
    bwd_whole_tile_n``), whatever the call's size (from :data:`MIN_NUMEL` up); 0: none. The
    main tile leaves such rows in two tiles, both edge tiles, the second one part empty: at
    ``N = 400`` (nh 4, 16-bit) a 504-position tile ran 1.00-1.01x a copy against 248's
    1.06x, but 1.16x at ``N = 1600`` with the same call size (docs/perf.md v20-v21)."""
    bwd_whole_threads: int = 256
    """The whole-row backward's threads."""
    bwd_whole_row_threads: int = 4
    """The whole-row backward's threads per position on the kd side."""
    bwd_whole_edge_first: int = 0
    """The whole-row backward's :attr:`bwd_edge_first`."""
    bwd_edge_first: int = 0
    """1: the backward's edge tiles load their row heads and tails element by element into
    registers *before* the tile's vector loads and store them to shared memory after, so that
    both are in flight at once (0: after the vector loads, a second round trip)."""
    bwd_aligned: int = 0
    """1: the backward (and its extra backwards) also runs where ``N`` is a multiple of the
    vector width, ahead of the plain 16-byte kernel (a second launch record,
    :func:`aligned_rank`); 0: the tiled kernels run there. :func:`default_params` sets it
    where it was measured faster (:data:`ALIGNED_MIN_KEY_DIM`)."""


#: The fields of the second (small-call) backward; a tuned split sets them with
#: ``bwd_small_below`` (``psa-tvm tune select --split-backward``).
SMALL_BACKWARD_FIELDS = ("bwd_small_below", "bwd_small_tile_n", "bwd_small_threads",
                         "bwd_small_row_threads", "bwd_small_edge_first")
#: The fields of the third (whole-row, by ``N``) backward; ``psa-tvm tune select
#: --whole-backward`` sets them.
WHOLE_BACKWARD_FIELDS = ("bwd_whole_tile_n", "bwd_whole_threads", "bwd_whole_row_threads",
                         "bwd_whole_edge_first")
#: The fields of :class:`ShiftedParams` that shape each pass's kernels (tuned separately).
PASS_FIELDS = {"forward": ("fwd_threads", "fwd_row_threads", "fwd_positions", "grain"),
               "backward": ("bwd_tile_n", "bwd_threads", "bwd_row_threads", "bwd_edge_first",
                            "bwd_aligned",
                            *SMALL_BACKWARD_FIELDS, *WHOLE_BACKWARD_FIELDS)}
#: The main backward's fields, which a second or third backward takes its own values for.
_MAIN_BACKWARD_FIELDS = ("bwd_tile_n", "bwd_threads", "bwd_row_threads", "bwd_edge_first")


def as_record(params: ShiftedParams) -> dict[str, int]:
    """``params`` as manifests, tuned tables and build stems store them: the split fields only
    where there is a split, so that records from before the split stay equal to today's."""
    return shifted_record({f.name: getattr(params, f.name) for f in fields(ShiftedParams)})


def _as_main_backward(params: ShiftedParams, prefix: str) -> ShiftedParams:
    """``params`` with the ``prefix`` backward's fields (``bwd_small_``, ``bwd_whole_``) as
    the main ones and neither extra backward: the kernel is the same TensorIR."""
    extra = {f.name: f.default for f in fields(ShiftedParams)
             if f.name in SMALL_BACKWARD_FIELDS + WHOLE_BACKWARD_FIELDS}
    own = {main: getattr(params, prefix + main.removeprefix("bwd_"))
           for main in _MAIN_BACKWARD_FIELDS}
    return replace(params, **{**extra, **own})


def small_backward(params: ShiftedParams) -> ShiftedParams | None:
    """``params`` with the backward fields of the small-call kernel in place of the main
    ones, or ``None`` if there is no split."""
    return _as_main_backward(params, "bwd_small_") if params.bwd_small_below else None


def whole_backward(params: ShiftedParams) -> ShiftedParams | None:
    """``params`` with the backward fields of the whole-row kernel in place of the main ones,
    or ``None`` if there is none."""
    return _as_main_backward(params, "bwd_whole_") if params.bwd_whole_tile_n else None


def _with_extra_backward(params: ShiftedParams, prefix: str,
                         kernel: ShiftedParams) -> ShiftedParams:
    """``params`` with the ``prefix`` backward's fields set to ``kernel``'s main ones (the
    inverse of :func:`_as_main_backward`)."""
    return replace(params, **{prefix + main.removeprefix("bwd_"): getattr(kernel, main)
                              for main in _MAIN_BACKWARD_FIELDS})


def split_backward(params: ShiftedParams, small: ShiftedParams, below: int) -> ShiftedParams:
    """``params`` with a second backward shaped like ``small``'s for calls below ``below``
    merged elements."""
    return replace(_with_extra_backward(params, "bwd_small_", small), bwd_small_below=below)


def with_whole_backward(params: ShiftedParams, whole: ShiftedParams) -> ShiftedParams:
    """``params`` with a whole-row backward shaped like ``whole``'s main one, for ``N`` from
    past ``params.bwd_tile_n`` up to ``whole.bwd_tile_n``."""
    return _with_extra_backward(params, "bwd_whole_", whole)


def whole_backward_rows(params: ShiftedParams) -> tuple[int, int]:
    """The ``N`` (first, last) that the whole-row backward runs at."""
    return params.bwd_tile_n + 1, params.bwd_whole_tile_n


def default_params(config: OpConfig) -> ShiftedParams:
    """The sweep's winners, with tiles halved where the key_dim would overflow 48 KB of static
    shared memory and row threads capped at the kd vectors per position."""
    vec = vector_width(config)
    kd_vectors = config.key_dim // vec
    if config.itemsize == 4:
        params = ShiftedParams(fwd_row_threads=4 if kd_vectors % 4 == 0 else 2,
                               fwd_positions=1, bwd_tile_n=124)
    else:
        params = ShiftedParams()
    params = replace(params, bwd_row_threads=min(params.bwd_row_threads, kd_vectors),
                     bwd_aligned=int(config.itemsize == 2
                                     and config.key_dim >= ALIGNED_MIN_KEY_DIM))
    if shared_bytes(config, params, "forward") > _STATIC_SMEM_BYTES:
        params = replace(params, fwd_positions=params.fwd_positions // 2 or 1)
    if shared_bytes(config, params, "backward") > _STATIC_SMEM_BYTES:
        params = replace(params, bwd_tile_n=(params.bwd_tile_n + vec) // 2 - vec)
    return params


def tuned_params(config: OpConfig, archs: Iterable[str]) -> ShiftedParams | None:
    """The tuned table's params for ``config`` (``psa-tvm tune --shifted``), from the newest of
    ``archs`` that has them; ``None``: none tuned (a build then takes :func:`default_params`)."""
    from psa_tvm.runtime.tuned import tuned_shifted_entry

    for arch in reversed(list(archs)):
        if (entry := tuned_shifted_entry(arch, config)) is not None:
            return ShiftedParams(**entry["params"])
    return None


def vector_width(config: OpConfig) -> int:
    return 16 // config.itemsize


def rank(config: OpConfig) -> int:
    """Launch rank (``runtime/plan.py``): plain kernels rank ``2 * vec``; a shifted one sits
    just below an 8-byte N side."""
    return 2 * (8 // config.itemsize) - 1


def aligned_rank(config: OpConfig, pass_: str, params: ShiftedParams) -> int | None:
    """The rank of a second launch record of the ``pass_`` kernel for ``N`` a multiple of the
    vector width, just above the plain 16-byte kernel's (``None``: no such record): the
    backward where :attr:`ShiftedParams.bwd_aligned` is set.

    :func:`default_params` sets it for 16-bit builds of key_dim :data:`ALIGNED_MIN_KEY_DIM`
    and up. v14 ran it at every 16-bit key_dim (docs/perf.md v14: 0.98-1.06x a copy against
    the tiled kernel's 0.97-1.14x at 8 shapes of 12-105 MB, with half the L2 write requests).
    With each key_dim's tiled params shared by every head count (v38), the tiled kernel beat it
    at key_dim 16, 32 and 64 over the calls of 8-300 MB at six aligned grids (docs/perf.md v38,
    calls 2 and 3: key_dim 32, float16 28 -> 6 of 163 calls above 1.05x, bfloat16 32 -> 7;
    means 0.99 against 1.00 at key_dim 16, 1.18 against 1.24 at 64), and lost at 128 (1.17
    against 1.13). At ``N % 8 == 4`` its 248-position tiles run 60% full at N = 300 (1.19x
    against the 8-byte kernel's 1.07x), and the forward and float32 won and lost by shape
    (v14), so they keep the tiled kernels there."""
    if pass_ == "backward" and params.bwd_aligned:
        return 2 * vector_width(config) + 1
    return None


def fits(config: OpConfig, params: ShiftedParams) -> str | None:
    """Why ``params`` cannot build ``config`` (None if they can)."""
    vec, kd = vector_width(config), config.key_dim
    grain_elems = params.grain * vec
    tile = _forward_tile(params)
    rows_step = params.fwd_threads // _ROW_LANES
    if kd % grain_elems or tile % grain_elems or params.fwd_row_threads % params.grain:
        return f"key_dim {kd} / forward tile {tile} not multiples of {grain_elems}"
    if (kd // vec) % params.fwd_row_threads:
        return f"{kd // vec} kd vectors per position not a multiple of fwd_row_threads"
    if (tile // vec) % _ROW_LANES or rows_step % grain_elems or kd % rows_step:
        return (f"forward: {tile // vec} vectors per row and {rows_step} rows per step must be "
                f"multiples of {_ROW_LANES} and of the grain, dividing key_dim")
    if grain_elems * (kd // vec) > params.fwd_threads:
        return "forward: the halo needs more threads than the CTA has"
    if params.bwd_tile_n % vec or (kd // vec) % params.bwd_row_threads:
        return "backward tile or row threads do not fit the vector width"
    for pass_ in ("forward", "backward"):
        if shared_bytes(config, params, pass_) > _STATIC_SMEM_BYTES:
            return f"{pass_}: more than 48 KB of shared memory"
    if params.bwd_small_below < 0 or 0 < params.bwd_small_below <= MIN_NUMEL:
        return f"bwd_small_below {params.bwd_small_below}: 0 or more than {MIN_NUMEL}"
    if (small := small_backward(params)) is not None and (why := fits(config, small)):
        return f"small-call backward: {why}"
    if 0 < params.bwd_whole_tile_n <= params.bwd_tile_n or params.bwd_whole_tile_n < 0:
        return (f"bwd_whole_tile_n {params.bwd_whole_tile_n}: 0 or more than bwd_tile_n "
                f"{params.bwd_tile_n}")
    if (whole := whole_backward(params)) is not None and (why := fits(config, whole)):
        return f"whole-row backward: {why}"
    if params.bwd_aligned not in (0, 1):
        return f"bwd_aligned {params.bwd_aligned}: 0 or 1"
    return None


def _forward_tile(params: ShiftedParams) -> int:
    return params.fwd_positions * params.fwd_threads // params.fwd_row_threads


def _shared_row(config: OpConfig, params: ShiftedParams, pass_: str) -> int:
    """Elements per shared row: the tile with slack on both sides for the shift (forward: the
    grain before and the halo after; backward: the vector before the tile and one of slack)."""
    if pass_ == "forward":
        return _forward_tile(params) + 2 * params.grain * vector_width(config)
    return params.bwd_tile_n + 2 * vector_width(config)


def shared_bytes(config: OpConfig, params: ShiftedParams, pass_: str) -> int:
    """The pass's shared tile: key_dim shifted rows and a skew per vector-row group."""
    vec = vector_width(config)
    row = _shared_row(config, params, pass_)
    elements = config.key_dim * row + (config.key_dim // vec) * _skew(config, row, vec)
    return elements * config.itemsize


def _shift(x, nmod, width: int):
    """``-(x * N) mod width`` from ``nmod = N mod width`` (``width`` a power of two): how far
    before a row's first ``width``-aligned element that row starts, for the row ``x`` (mod
    ``width``) of the merged tensor."""
    return (width - ((x * nmod) & (width - 1))) & (width - 1)


def _skew(config: OpConfig, row: int, vec: int) -> int:
    """Elements added per ``vec``-row group so that the two groups a warp's lanes touch (two
    threads per position: 16 positions each, 8 or 16 words) sit 16 banks apart."""
    group_words = vec * row * config.itemsize // 4
    return ((16 - group_words) % _BANK_WORDS) * 4 // config.itemsize


@parses_tvmscript
def shifted_forward(config: OpConfig, params: ShiftedParams, name: str) -> PrimFunc:
    """``out[b, h, s, d, n] = (lo, hi)[s][b*nh + h, n, d]`` for any ``N``; see the module doc."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V = vector_width(config)
    G = params.grain * V
    threads, rt, grain = params.fwd_threads, params.fwd_row_threads, params.grain
    ppt = params.fwd_positions
    tile_n = _forward_tile(params)
    KV = kd // V
    TV = tile_n // V
    LR = _ROW_LANES
    rows_step = threads // LR
    row = _shared_row(config, params, "forward")
    skew = _skew(config, row, V)
    group = V * row + skew

    def row_start(d):  # shared offset of row d (a skew per V-row group)
        return d * row + (d // V) * skew
    halo_items = G * KV
    heads = kd * G
    head_steps = (heads + threads - 1) // threads
    tails = kd * V
    tail_steps = (tails + threads - 1) // threads

    @T.prim_func
    def forward(lo_h: T.handle, hi_h: T.handle, out_h: T.handle, N: T.int32):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        B = T.int32()
        lo = T.match_buffer(lo_h, (B * nh, N, kd), dtype)
        hi = T.match_buffer(hi_h, (B * nh, N, kd), dtype)
        out = T.match_buffer(out_h, (B, nh, 2, kd, N), dtype)
        lo_flat = T.decl_buffer((B * nh * N * kd,), dtype, data=lo.data)
        hi_flat = T.decl_buffer((B * nh * N * kd,), dtype, data=hi.data)
        out_flat = T.decl_buffer((B * nh * 2 * kd * N,), dtype, data=out.data)
        bx = T.launch_thread("blockIdx.x", (N + (tile_n - 1)) // tile_n)
        by = T.launch_thread("blockIdx.y", B * (nh * 2))
        tx = T.launch_thread("threadIdx.x", threads)
        tile = T.alloc_buffer((kd * row + (kd // V) * skew,), dtype, scope="shared")
        regs = T.alloc_buffer((V,), dtype, scope="local")
        off = T.alloc_buffer((V,), "int32", scope="local")
        nmod: T.let[T.int32] = N & (G - 1)
        # Row d = dv*V + e is shifted by s_d = -(d*N) mod G; d mod G is fixed per thread.
        for e in T.unroll(V):
            off[e] = (tx % rt) * group + e * row + G - _shift((tx % grain) * V + e, nmod, G)
        n0: T.let[T.int32] = bx * tile_n
        src0: T.let[T.int32] = ((by // 2) * N + n0) * kd
        for j in T.unroll(ppt):
            p: T.let[T.int32] = tx // rt + j * (threads // rt)
            if n0 + p < N:
                for s in T.unroll(KV // rt):
                    if by % 2 == 0:
                        for e in T.vectorized(V):
                            regs[e] = lo_flat[src0 + p * kd + ((tx % rt) + s * rt) * V + e]
                    else:
                        for e in T.vectorized(V):
                            regs[e] = hi_flat[src0 + p * kd + ((tx % rt) + s * rt) * V + e]
                    for e in T.unroll(V):
                        tile[s * (rt * group) + p + off[e]] = regs[e]
        if tx < halo_items:  # the G positions past the tile
            hp: T.let[T.int32] = tile_n + (tx // rt) % G
            hdv: T.let[T.int32] = tx % rt + (tx // (rt * G)) * rt
            if n0 + hp < N:
                if by % 2 == 0:
                    for e in T.vectorized(V):
                        regs[e] = lo_flat[src0 + hp * kd + hdv * V + e]
                else:
                    for e in T.vectorized(V):
                        regs[e] = hi_flat[src0 + hp * kd + hdv * V + e]
                for e in T.unroll(V):
                    tile[(hdv // rt) * (rt * group) + hp + off[e]] = regs[e]
        T.tvm_storage_sync("shared")
        # Vectors k0 + j*LR of rows d0 + s*rows_step: one shift, bound and base per thread.
        k0: T.let[T.int32] = tx % LR
        d0: T.let[T.int32] = tx // LR
        s_r: T.let[T.int32] = _shift(d0 & (G - 1), nmod, G)
        kmax: T.let[T.int32] = (N - s_r) // V - bx * TV
        q0: T.let[T.int32] = ((by * kd + d0) * N + s_r) // V + bx * TV + k0
        for j in T.unroll(TV // LR):
            if k0 + j * LR < kmax:
                for s in T.unroll(kd // rows_step):
                    for e in T.vectorized(V):
                        out_flat[(q0 + j * LR) * V + s * (rows_step * N) + e] = tile[
                            row_start(d0 + s * rows_step) + (k0 + j * LR) * V + G + e]
        if bx == 0:  # each row's head: n < s_d, before its first aligned vector
            for step in T.unroll(head_steps):
                if step * threads + tx < heads:
                    d: T.let[T.int32] = (step * threads + tx) // G
                    e: T.let[T.int32] = (step * threads + tx) % G
                    s_d: T.let[T.int32] = _shift(d & (G - 1), nmod, G)
                    if e < s_d and e < N:
                        out_flat[(by * kd + d) * N + e] = tile[row_start(d) + G - s_d + e]
        if n0 + tile_n + V > N:  # each row's tail: after its last whole vector
            for step in T.unroll(tail_steps):
                if step * threads + tx < tails:
                    d: T.let[T.int32] = (step * threads + tx) // V
                    e: T.let[T.int32] = (step * threads + tx) % V
                    s_d: T.let[T.int32] = _shift(d & (G - 1), nmod, G)
                    n_tail: T.let[T.int32] = s_d + ((N - s_d) // V) * V + e
                    if n_tail < N and n_tail >= n0 and n_tail < n0 + tile_n and n_tail >= s_d:
                        out_flat[(by * kd + d) * N + n_tail] = tile[
                            row_start(d) + G - s_d + n_tail - n0]

    return forward


@parses_tvmscript
def shifted_backward(config: OpConfig, params: ShiftedParams, name: str) -> PrimFunc:
    """``d_lo/d_hi[b*nh + h, n, d] = g[b, h, 0/1, d, n]`` for any ``N``; see the module doc."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V = vector_width(config)
    tile_n, threads, rt = params.bwd_tile_n, params.bwd_threads, params.bwd_row_threads
    TV = tile_n // V + 1  # with the vector before the tile
    row = _shared_row(config, params, "backward")
    skew = _skew(config, row, V)
    group = V * row + skew

    def row_start(d):  # shared offset of row d (a skew per V-row group)
        return d * row + (d // V) * skew
    KV = kd // V
    rows_items = kd * TV
    rows_steps = (rows_items + threads - 1) // threads
    kd_items = tile_n * KV
    kd_steps = (kd_items + threads - 1) // threads
    edge = kd * V
    edge_steps = (edge + threads - 1) // threads
    edge_first = bool(params.bwd_edge_first)

    @T.prim_func
    def backward(g_h: T.handle, dlo_h: T.handle, dhi_h: T.handle, N: T.int32):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        B = T.int32()
        g = T.match_buffer(g_h, (B, nh, 2, kd, N), dtype)
        dlo = T.match_buffer(dlo_h, (B * nh, N, kd), dtype)
        dhi = T.match_buffer(dhi_h, (B * nh, N, kd), dtype)
        g_flat = T.decl_buffer((B * nh * 2 * kd * N,), dtype, data=g.data)
        dlo_flat = T.decl_buffer((B * nh * N * kd,), dtype, data=dlo.data)
        dhi_flat = T.decl_buffer((B * nh * N * kd,), dtype, data=dhi.data)
        bx = T.launch_thread("blockIdx.x", (N + (tile_n - 1)) // tile_n)
        by = T.launch_thread("blockIdx.y", B * (nh * 2))
        tx = T.launch_thread("threadIdx.x", threads)
        tile = T.alloc_buffer((kd * row + (kd // V) * skew,), dtype, scope="shared")
        regs = T.alloc_buffer((V,), dtype, scope="local")
        off = T.alloc_buffer((V,), "int32", scope="local")
        nmod: T.let[T.int32] = N & (V - 1)
        n0: T.let[T.int32] = bx * tile_n
        # `edge_first` is a Python bool: TVMScript keeps or drops these blocks when it parses
        # (flat scope), so without it the kernel is exactly the one before the option.
        if edge_first:
            heads = T.alloc_buffer((edge_steps,), dtype, scope="local")
            tails = T.alloc_buffer((edge_steps,), dtype, scope="local")
        if edge_first and (bx == 0 or n0 + tile_n + V > N):  # into registers, loads in flight
            for step in T.unroll(edge_steps):
                if step * threads + tx < edge:
                    d: T.let[T.int32] = (step * threads + tx) // V
                    e: T.let[T.int32] = (step * threads + tx) % V
                    s_d: T.let[T.int32] = _shift(d & (V - 1), nmod, V)
                    n_tail: T.let[T.int32] = s_d + ((N - s_d) // V) * V + e
                    if bx == 0 and e < s_d and e < N:
                        heads[step] = g_flat[(by * kd + d) * N + e]
                    if n_tail < N and n_tail >= n0 and n_tail < n0 + tile_n and n_tail >= s_d:
                        tails[step] = g_flat[(by * kd + d) * N + n_tail]
        # Shared column c of row d holds position n0 - V + s_d + c.
        for step in T.unroll(rows_steps):
            if step * threads + tx < rows_items:
                j: T.let[T.int32] = step * threads + tx
                d: T.let[T.int32] = j // TV
                k: T.let[T.int32] = j % TV
                s_r: T.let[T.int32] = _shift(d & (V - 1), nmod, V)
                kg: T.let[T.int32] = bx * (TV - 1) - 1 + k
                if kg >= 0 and kg < (N - s_r) // V:
                    q: T.let[T.int32] = ((by * kd + d) * N + s_r) // V + kg
                    for e in T.vectorized(V):
                        tile[row_start(d) + k * V + e] = g_flat[q * V + e]
        if bx == 0 or n0 + tile_n + V > N:  # heads and tails
            for step in T.unroll(edge_steps):
                if step * threads + tx < edge:
                    d: T.let[T.int32] = (step * threads + tx) // V
                    e: T.let[T.int32] = (step * threads + tx) % V
                    s_d: T.let[T.int32] = _shift(d & (V - 1), nmod, V)
                    base: T.let[T.int32] = row_start(d) + V - s_d
                    n_tail: T.let[T.int32] = s_d + ((N - s_d) // V) * V + e
                    if bx == 0 and e < s_d and e < N:
                        if edge_first:
                            tile[base + e] = heads[step]
                        else:
                            tile[base + e] = g_flat[(by * kd + d) * N + e]
                    if n_tail < N and n_tail >= n0 and n_tail < n0 + tile_n and n_tail >= s_d:
                        if edge_first:
                            tile[base + n_tail - n0] = tails[step]
                        else:
                            tile[base + n_tail - n0] = g_flat[(by * kd + d) * N + n_tail]
        T.tvm_storage_sync("shared")
        for e in T.unroll(V):
            off[e] = e * row + V - _shift(e, nmod, V)
        for step in T.unroll(kd_steps):
            if step * threads + tx < kd_items:
                i: T.let[T.int32] = step * threads + tx
                dv: T.let[T.int32] = i % rt + (i // (rt * tile_n)) * rt
                p: T.let[T.int32] = (i // rt) % tile_n
                if n0 + p < N:
                    for e in T.unroll(V):
                        regs[e] = tile[dv * group + p + off[e]]
                    dst: T.let[T.int32] = ((by // 2) * N + n0 + p) * kd + dv * V
                    if by % 2 == 0:
                        for e in T.vectorized(V):
                            dlo_flat[dst + e] = regs[e]
                    else:
                        for e in T.vectorized(V):
                            dhi_flat[dst + e] = regs[e]

    return backward


def shifted_pass(config: OpConfig, pass_: str, params: ShiftedParams, name: str) -> PrimFunc:
    return (shifted_forward if pass_ == "forward" else shifted_backward)(config, params, name)
