"""Persistent merge kernels over bands of whole rows of the merged tensor, the next band's
loads in flight: a forward, and (v29) a backward.

The tiled and shifted forwards cut each output row (``N`` elements of one ``(b, h, s, d)``)
into tiles, so every CTA writes pieces of many rows; where a row's length in bytes is not a
multiple of 32 (float32 ``N = 300``) those pieces end inside sectors, and at batch 64 such rows
stayed at 1.04-1.08x a copy through every tile, order and store width tried (docs/perf.md
v19-v25). A *band* is ``rows`` whole rows of one ``(b, h, s)`` block: ``rows * N`` contiguous
output elements, 16-byte aligned for any ``N`` (``rows`` is a multiple of the vector width), so
a CTA that owns a band writes it as a copy does, in address order, and the row length no longer
shows.

Each CTA walks the bands ``blockIdx.x, + gridDim.x, ...`` (the grid is the CTAs that fit the
GPU at once, :attr:`BandParams.ctas`). Thread ``t`` loads kd-side vector ``t % (rows / vec)``
of the positions ``t / (rows / vec) + j * step``: one base address and a constant stride, so
the register stage (``stage_vectors`` 16-byte vectors a thread) costs registers for its data
only. A band goes from the registers to a shared ``[rows, N]`` tile element by element, then the
*next* band's loads are issued before the current tile is stored, so they are in flight while
it leaves (docs/perf.md v25, calls 6 and 8: the same design staged in shared memory with
``cp.async`` instead was slower everywhere).

The kernel is hand-written TensorIR, like :mod:`psa_tvm.compiler.shifted`: a persistent loop
with a register stage is no schedule of the merge's compute definition. It runs only where it
was measured to beat the kernels it replaces: a range of ``N`` and calls of at least
``min_numel`` merged elements (:func:`default_params`; below a GPU's worth of bands there is
little to pipeline), at a launch rank above every other kernel's (:func:`rank`).

The band *backward* (:func:`band_backward`, v29) runs the same pipeline the other way: a band
of the gradient is ``rows * N`` contiguous elements, read in address order, and each thread
gathers one kd-side vector of its positions from the tile. A 16-bit band is 32 bytes of a
position at 16 rows, a whole sector; at 32 rows, 64 bytes. It ships where it was measured to
beat the shifted backward (docs/perf.md v29), by ``N`` range and call size like the forward.

A forward may hint its stage loads to bring whole 128-byte lines into L2
(:attr:`BandParams.l2_fetch`, PTX ``ld.global.nc.L2::128B``; :func:`fetch_hints` writes it into
the generated CUDA, which TensorIR cannot express). A float32 band of 8 rows reads one 32-byte
sector of each position's 128-byte input line, and the three other bands of the block read the
other three later; fetched whole at the first miss, the line is in L2 for them, as a 16-bit
16-row band's two sectors a line are (docs/perf.md v35: float32 16x37x29 1.08 -> 1.01x a copy).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import NamedTuple

from tvm.script import tirx as T
from tvm.tirx import PrimFunc

from psa_tvm.compiler.compute import parses_tvmscript
from psa_tvm.compiler.cuda_fixups import split_args
from psa_tvm.config import OpConfig

_STATIC_SMEM_BYTES = 48 * 1024
#: Shared memory one CTA may opt in to past 48 KB, and one SM's (sm_90: 227 and 228 KB; the
#: runtime reserves 1 KB a CTA).
_MAX_CTA_SMEM_BYTES = 227 * 1024
_SM_SMEM_BYTES = 228 * 1024
_RESERVED_SMEM_BYTES = 1024
#: The largest register stage: at 64 registers a thread ptxas spilled the v25 prototype from 9
#: vectors up at 256 threads. Whether a build's stage fits is ptxas's report
#: (tests/test_build.py: no band kernel spills).
_MAX_STAGE_VECTORS = 8
_MAX_THREADS_PER_SM = 2048
#: The L2 fetch-size hints PTX offers a global load (0: none).
_L2_FETCH_BYTES = (0, 64, 128, 256)
#: The alignment of a shared array in TVM's CUDA (``alignas(64)``), to which ptxas pads it.
_TILE_ALIGN_BYTES = 64


PASSES = ("forward", "backward")
#: The 16-bit forward's ``N`` range around 40x23 (48x19, 32x29, 30x30, 31x29): the default of
#: :class:`BandParams`, and key_dim 128's 40x23 band's.
_40X23_N = (897, 960)


@dataclass(frozen=True)
class BandParams:
    """One band kernel: its pass, its shape, and the calls it runs for."""

    pass_: str = "forward"
    """The pass: ``forward`` (:func:`band_forward`) or ``backward`` (:func:`band_backward`)."""
    rows: int = 16
    """Output rows per band (a multiple of the vector width, dividing ``key_dim``)."""
    threads: int = 256
    """Threads per CTA."""
    ctas_per_sm: int = 4
    """CTAs per SM: ``__launch_bounds__``' minimum (64 registers at 4 x 256 threads) and,
    with :attr:`sms`, the grid."""
    sms: int = 132
    """SMs the grid is sized for (the H200's). A GPU with fewer runs the extra CTAs after the
    first wave, correctly but with less overlap."""
    min_n: int = _40X23_N[0]
    """The first ``N`` the kernel runs at."""
    max_n: int = _40X23_N[1]
    """The last ``N`` the kernel runs at; it sizes the shared tile and the register stage."""
    min_numel: int = 1 << 23
    """Merged elements from which the kernel runs: below, too few bands per SM leave the
    pipeline little to overlap (16-bit 16x40x23: 1.09-1.12x a copy against the tiled kernel's
    1.00-1.01x; float32 16x20x15: 1.10x against 1.04x)."""
    max_numel: int = 0
    """Merged elements up to which the kernel runs (0: any call from ``min_numel``). A band
    kernel is at its best where its bands fill whole waves of :attr:`ctas`; the variants of one
    ``N`` range split the call sizes between them by that (:func:`default_params`)."""
    l2_fetch: int = 0
    """Forward only: bytes (64, 128 or 256) of the L2 fetch-size hint on the stage loads
    (``ld.global.nc.L2::{l2_fetch}B``, :func:`fetch_hints`); 0: plain loads."""

    @property
    def ctas(self) -> int:
        return self.sms * self.ctas_per_sm


def vector_width(config: OpConfig) -> int:
    return 16 // config.itemsize


def rank(config: OpConfig) -> int:
    """Launch rank (``runtime/plan.py``): above every other kernel of the build (the aligned
    shifted backward's ``2 * vec + 1`` included), inside the band kernel's ``N`` range."""
    return 2 * vector_width(config) + 2


def stage_vectors(config: OpConfig, params: BandParams) -> int:
    """16-byte vectors per thread in the register stage: a band of ``max_n`` positions."""
    return -(-params.max_n * params.rows // (vector_width(config) * params.threads))


def tile_elements(config: OpConfig, params: BandParams) -> int:
    """Elements of the shared ``[rows, max_n]`` tile, rounded up to a whole multiple of
    :data:`_TILE_ALIGN_BYTES`: TVM declares the array ``alignas(64)`` and ptxas allocates the
    rounded size (a 16-bit tile of 8 x 401 elements, 6,416 bytes, takes 6,464), so the
    manifest's shared bytes and the occupancy :func:`fits` checks are what the GPU gives."""
    per_unit = _TILE_ALIGN_BYTES // config.itemsize
    return -(-params.rows * params.max_n // per_unit) * per_unit


def shared_bytes(config: OpConfig, params: BandParams) -> int:
    return tile_elements(config, params) * config.itemsize


def dynamic_shared(config: OpConfig, params: BandParams) -> bool:
    """Whether the tile is dynamic shared memory: past the 48 KB a CTA may declare
    statically, which the launchers opt in to from the manifest's ``dynamic_smem_bytes``."""
    return shared_bytes(config, params) > _STATIC_SMEM_BYTES


#: The 16-bit ``N`` range of the call-size split (37x29 = 1073; the stage is sized for 1080).
#: Narrow enough that the limits in merged elements fall between the same ``B * nh`` at every
#: ``N`` in it up to 132 (``133 * 1072 > 132 * 1080``), and within a row of them for 248-264:
#: it is ``B * nh`` that fills the waves.
_TAIL_N = (1072, 1080)
#: 20x15's ``N`` range (float32 v27, 16-bit v37), split by call size like 37x29's. ``303 / 297``
#: moves the limits, taken at the range's ends, by up to a row of ``B * nh`` at 65 and 7 at 360.
_20X15_N = (297, 303)
#: 16-bit 20x20's, for YOLO11x's 6 heads at batch 16 and 64: narrow, so that its limits fall
#: within a row of the same ``B * nh`` at every ``N`` in it.
_X640_N = (399, 401)
#: 1x33 (``N = 33``): a band of ``rows`` rows is ``rows * 33`` contiguous output elements,
#: 16-byte aligned at every ``rows`` the kernel takes.
_X33_N = (33, 33)


def default_params(config: OpConfig) -> tuple[BandParams, ...]:
    """The band kernels measured to win (H200, key_dim 32), forwards then backwards.

    Forwards (docs/perf.md v26 calls 2-4, v27, v28, v35, v36):

    - 16-bit ``N`` 897-960 (40x23, 48x19, 32x29, 30x30, 31x29) from 8M merged elements (batch
      64 at 4 and 6 heads);
    - 16-bit ``N`` 1072-1080 (37x29), four kernels by call size, each where its bands fill
      most of one or two whole waves of the GPU's CTAs: 8-row bands at 4 x 512 threads for 40-66
      ``B * nh`` (one wave of 528 CTAs; 16x37x29 at 4 heads 0.96-0.99x a copy against the
      shipped 1.03-1.06x), 16-row bands at 3 x 512 for 88-99 (one wave of 396: 24x37x29 and
      nh 6 16x37x29 0.98-1.01 against 1.03-1.05), 16-row bands at 4 x 320 for 120-132 (one
      wave of 528; v28: 32x37x29 and N 1072-1080 at 128 ``B * nh`` 0.97-0.99 against v27's
      2 x 1024 kernel's 1.02-1.04) and at 4 x 384 for 248-264 (two waves of 528; v28: batch 64
      at 4 heads 1.04 against the shipped 1.08, 1.005 against 1.05-1.07 at N 1072 and 1080).
      In between, where a wave is far from full, the shipped kernel was faster or level (68
      rows: 0.80 against 0.74; 100 rows: 0.90 against 0.85; 224 rows: 1.08 against 1.06;
      240: level). 32-row bands in 69 KB of dynamic shared memory ran 1.00 at 128 rows and
      ``N = 1073`` but 1.05-1.16 at ``N`` 1072 and 1080 (v28), and are not built;
    - 16-bit ``N`` 399-401 (20x20: YOLO11x at 640 px, 6 heads), two kernels at 6 x 256
      threads (v36, calls 1, 4 and 5; against the tiled kernel): 8-row bands for 88-99 ``B * nh``
      (batch 16 at 6 heads, one wave of 792 CTAs: 0.96-0.97x a copy against 1.02-1.03), and
      16-row bands from 120 (v36: batch 64 at 6 heads 1.00 against 1.03, 19x21 1.02 against
      the shifted kernel's 1.14; v37's sweep, calls 1 and 3, at every head count: 0.93-1.00
      against 0.95-1.05 at 128-384, and past 396, where the tiled kernel ran 1.05-1.07). 8-row
      bands lost past one wave (1.10-1.17), 16-row ones below 120 (96: 1.04-1.06 against
      1.01-1.02), 32-row bands at 6 CTAs an SM spill (1.34-1.50) and every 16-bit band backward
      at 20x20 lost (1.03-1.62 against 1.02-1.06);
    - 16-bit ``N`` 297-303 (20x15), the same 16-row bands from 120 ``B * nh`` (v37, call 2:
      0.96-1.03x a copy at 128-768 and every head count, against the 8-byte tiled kernel's
      1.01-1.17); 8-row, 3 x 512 16-row and 32-row bands lost (1.03-1.31);
    - float32 ``N`` 297-303 (20x15), three kernels by call size, their loads hinted like
      37x29's (v36, call 1; against the tiled kernel and v27's 32-row band): 8-row bands at 4
      CTAs an SM for 32-65 ``B * nh`` (one wave of 528 CTAs), 384 threads at 4 heads and 256
      at others (16x20x15 0.99x a copy against 1.02, 12x 1.02 against 1.11, N 297 and 303
      0.99-1.01 against 1.13-1.15; nh 2 32x 0.99 against 1.10, nh 6 10x 1.02 against 1.05);
      16-row bands at 4 x 512 threads for 67-360 (24x 0.97 against 1.05, 32x 0.95 against the
      32-row band's 1.01, 64x 1.00 against 1.01, 17x level at 1.06; v37, calls 2 and 3: 288-336
      rows 1.00-1.05 against the 32-row band's 1.05-1.08); and the 32-row band at 2 x 512 from
      368 (v27; v37: level with the 16-row band at 384-448 rows, and ahead at ``N`` 297 and 303
      past 448, both at 1.04-1.11). Not float32 ``N = 296``, where TVM's kernel ran
      1.09-1.11x a copy against the shipped 1.02-1.03x;
    - float32 ``N`` 1072-1080 (37x29) at 40-66 ``B * nh`` (one wave of 528 CTAs): 8-row bands
      at 4 x 512 threads (4 x 384 at other head counts, where 512 spills) whose loads bring
      whole lines into L2 (``l2_fetch`` 128; v35: 16x37x29 1.01x a copy against the shifted
      kernel's 1.04, N 1072-1080 1.01-1.03 against 1.04-1.07, nh 2 32x 1.01 against 1.07,
      nh 6 10x 0.78 against 0.80). Without the hint the same kernel read each line's four
      sectors in four misses and ran 1.08 (v30, v35). Past one wave it lost (17x 0.95 against
      0.89, 32x 1.10 against 1.06).
    - float32 ``N = 33`` (1x33) from 384 ``B * nh``: 32-row bands at 16 x 128 threads (v42,
      call 1, H100, v41's ``b32`` candidates at 384-768 ``B * nh``: 0.97-1.01x a copy against
      the shipped ``v1k4`` kernel's 1.14-1.23; v43, another H100: 0.99-1.03 against 1.17-1.24,
      and 0.94-1.02 over the sweep's float32 1x33 calls; v40's sweep, H200: ``v1k4`` at
      1.29-1.36).

    Backwards, 16-bit only (v29, calls 1-4; against the shifted backward), and float32 at
    ``N = 33``:

    - ``N`` 897-928 at 240-264 ``B * nh`` (two waves of 528 CTAs; 232-273 at the range's
      ends): 16-row bands at 4 x 384 threads, 40x23 at batch 64 1.02-1.04x a copy against
      1.04-1.06, 30x30, 31x29, 48x19 and 32x29 1.02 against 1.04-1.05. At 288 and 192-224
      rows, and below 160, the shifted kernel won;
    - ``N`` 1073-1079 (37x29) at 120-132 and 248-264 ``B * nh`` (one and two waves of 264
      CTAs): 32-row bands in 69 KB of dynamic shared memory, at 2 x 576 threads (one wave:
      0.95-0.98 against 1.01-1.05; a stage of 8 vectors, where 512 threads need 9) and 2 x 640
      (two waves: 1.03 against 1.05-1.06). At
      ``N`` 1072 and 1080 they lost (1.13-1.15 against 1.05), as the 32-row forward did, and
      16-row backwards lost at every size of 37x29 (1.03-1.17);
    - float32: every band backward lost (1.15-2.2 against 1.02-1.05), but at ``N = 33``:
      32-row bands at 8 x 256 threads from 384 ``B * nh`` (v42, call 1, H100: 0.97-1.01
      against ``v1k4``'s 1.17-1.25; v43: 0.96-1.02 against 1.16-1.26; v40's sweep, H200:
      1.09).

    key_dim 64 at 2 heads and 128 at 8 (the test matrix's), v42 on an H100 against the
    tiled and shifted kernels retuned in the same session (:func:`_other_key_dims`). Other key
    dims and head counts: none measured, none built."""
    if config.key_dim != 32:
        return _other_key_dims(config)
    if config.itemsize == 2:
        return _forwards_16bit(config) + _backwards_16bit(config)
    # 512 threads at 4 heads; at 2 and 6 ptxas spills that kernel (120 bytes in 32 registers)
    # and 384 threads (40 registers) do not, 0.01-0.03 behind 512 at 4 heads (v35, call 7).
    tail_threads = 512 if config.num_heads == 4 else 384
    # 384 threads measured at 4 heads only, 256 at 2, 4 and 6 (v36, call 1: 0.02 behind 384).
    small_threads = 384 if config.num_heads == 4 else 256
    small = _in_range(_20X15_N)
    return (BandParams(rows=8, threads=small_threads, ctas_per_sm=4, l2_fetch=128, **small,
                       **_call_sizes(config, _20X15_N, 32, 65)),
            BandParams(rows=16, threads=512, ctas_per_sm=4, l2_fetch=128, **small,
                       **_call_sizes(config, _20X15_N, 67, 360)),
            BandParams(rows=32, threads=512, ctas_per_sm=2, **small,
                       min_numel=_from_rows(config, _20X15_N, 368)),
            BandParams(rows=8, threads=tail_threads, ctas_per_sm=4, l2_fetch=128,
                       **_in_range(_TAIL_N), **_call_sizes(config, _TAIL_N, 40, 66)),
            BandParams(rows=32, threads=128, ctas_per_sm=16, **_in_range(_X33_N),
                       min_numel=_from_rows(config, _X33_N, 384)),
            BandParams(pass_="backward", rows=32, threads=256, ctas_per_sm=8,
                       **_in_range(_X33_N), min_numel=_from_rows(config, _X33_N, 384)))


#: Per (key_dim, num_heads): the first ``B`` of each band's calls at 37x29, 20x15 and 40x23,
#: the smallest timed call it won (docs/perf.md v42; the candidates in
#: docs/bench-tails/v42/proto/bands42.py, 3 batches a grid).
_OTHER_FIRST_BATCH = {(64, 2): {"37x29": 32, "20x15": 32}, (128, 8): {"37x29": 4, "20x15": 4,
                                                                        "40x23": 2}}
#: (key_dim, num_heads, itemsize): the last batch of the small-call 37x29 forward bands.
_OTHER_LAST_SMALL_BATCH = {(128, 8, 2): 3, (128, 8, 4): 4}


def _other_key_dims(config: OpConfig) -> tuple[BandParams, ...]:
    """key_dim 64 (2 heads) and 128 (8 heads), v42 (H100, profiler, against a copy of the same
    bytes; "retuned": the best of the tiled or shifted candidates tuned in the same session at
    that shape):

    - 20x15 forwards, every dtype: 16-row bands at 6 x 256 threads, loads hinted to fetch whole
      lines (a 16-row band reads 32 of a position's 128-512 input bytes; its siblings find the
      rest in L2): 0.93-1.05x a copy at 8-78 MB, against 1.01-1.04 retuned and 1.02-1.28
      shipped;
    - 20x15 float32 backwards: 32-row bands at 2 x 512, 0.94-1.04 against 0.99-1.00 retuned
      and 1.05-1.29 shipped (16-bit band backwards lost: 1.07 against 0.99 at key_dim 64);
    - 37x29 16-bit forwards: 32-row bands in 69 KB of dynamic shared memory at 2 x 576,
      hinted, 0.96-1.03 against 1.03-1.07 retuned, from 32 batches (key_dim 64) and 4 (128);
      below a wave of bands they lose (1.35 at 8 batches, 1.32 at 1). At key_dim 128 and 1-3
      batches, 8-row bands at 4 x 512, hinted: 1.15 against 1.31 retuned (at 1 batch); at key_dim
      64's 8 batches they were level with the shifted kernel (1.11 against 1.13): not built;
    - 37x29 float32 forwards at key_dim 128 and 1-4 batches: the same 8-row bands, 1.01-1.03
      against 1.05 retuned (1.10 against 1.04 at 12 batches; at key_dim 64 they lost at 8-96);
    - 40x23 16-bit forwards at key_dim 128: 16-row bands at 3 x 512, hinted, 1.01-1.10 against
      1.07 retuned (6 batches) and 1.09-1.26 shipped; at key_dim 64 level with the retuned
      tiled kernel (1.03 at 48 batches): not built. Band backwards lost at 37x29 and 40x23.

    The sweep past those batches (v42, call 3, another H100) read the bands above 1.05 where
    a call holds several waves of them: key_dim 128's 16-bit 20x15 forward from 16 batches
    (1.05-1.17; 0.97-0.99 at 4-12), its 37x29 one from 16 (1.06-1.09) and its 40x23 one from 8
    (1.07-1.13), still below the kernels they replaced (1.58-1.78, 1.08-1.12, 1.22-1.48). Caps
    (``max_numel``) against the retuned kernels at those sizes are not measured yet."""
    first = _OTHER_FIRST_BATCH.get((config.key_dim, config.num_heads))
    if first is None:
        return ()
    nh = config.num_heads
    small = {**_in_range(_20X15_N), "min_numel": _from_rows(config, _20X15_N, first["20x15"] * nh)}
    forwards = [BandParams(rows=16, threads=256, ctas_per_sm=6, l2_fetch=128, **small)]
    if config.itemsize == 2:
        forwards.append(BandParams(rows=32, threads=576, ctas_per_sm=2, l2_fetch=128,
                                   **_in_range(_TAIL_N),
                                   min_numel=_from_rows(config, _TAIL_N, first["37x29"] * nh)))
        if "40x23" in first:
            forwards.append(BandParams(rows=16, threads=512, ctas_per_sm=3, l2_fetch=128,
                                       **_in_range(_40X23_N),
                                       min_numel=_from_rows(config, _40X23_N, first["40x23"] * nh)))
    if last := _OTHER_LAST_SMALL_BATCH.get((config.key_dim, nh, config.itemsize)):
        # the calls under the 37x29 bands above (16-bit) or all timed winners (float32)
        forwards.append(BandParams(rows=8, threads=512, ctas_per_sm=4, l2_fetch=128,
                                   **_in_range(_TAIL_N), **_call_sizes(config, _TAIL_N, nh,
                                                                       last * nh)))
    backwards = [BandParams(pass_="backward", rows=32, threads=512, ctas_per_sm=2, **small)
                 ] if config.itemsize == 4 else []
    return tuple(forwards + backwards)


def _in_range(n_range: tuple[int, int]) -> dict[str, int]:
    """``min_n``/``max_n`` of a kernel that runs at every ``N`` of ``n_range``."""
    return {"min_n": n_range[0], "max_n": n_range[1]}


def _from_rows(config: OpConfig, n_range: tuple[int, int], first: int) -> int:
    """``min_numel`` for calls from ``first`` ``B * nh`` at every ``N`` of ``n_range``."""
    return _call_sizes(config, n_range, first, first)["min_numel"]


def _call_sizes(config: OpConfig, n_range: tuple[int, int], first: int, last: int
                ) -> dict[str, int]:
    """``min_numel``/``max_numel`` for ``first``-``last`` ``B * nh`` at every ``N`` of
    ``n_range``: each limit is taken at the end of the range farther from the calls it must keep
    out (merged elements of one ``B * nh`` grow with ``N``)."""
    first_row, per_row = (2 * config.key_dim * n for n in n_range)
    return {"min_numel": first * first_row, "max_numel": last * per_row}


def _forwards_16bit(config: OpConfig) -> tuple[BandParams, ...]:
    tail, x640, small = _in_range(_TAIL_N), _in_range(_X640_N), _in_range(_20X15_N)
    return (BandParams(),
            BandParams(rows=8, threads=256, ctas_per_sm=6, **x640,
                       **_call_sizes(config, _X640_N, 88, 99)),
            BandParams(rows=16, threads=256, ctas_per_sm=6, **x640,
                       min_numel=_from_rows(config, _X640_N, 120)),
            BandParams(rows=16, threads=256, ctas_per_sm=6, **small,
                       min_numel=_from_rows(config, _20X15_N, 120)),
            BandParams(rows=8, threads=512, ctas_per_sm=4, **tail,
                       **_call_sizes(config, _TAIL_N, 40, 66)),
            BandParams(rows=16, threads=512, ctas_per_sm=3, **tail,
                       **_call_sizes(config, _TAIL_N, 88, 99)),
            BandParams(rows=16, threads=320, ctas_per_sm=4, **tail,
                       **_call_sizes(config, _TAIL_N, 120, 132)),
            BandParams(rows=16, threads=384, ctas_per_sm=4, **tail,
                       **_call_sizes(config, _TAIL_N, 248, 264)))


#: The 16-bit backward's ``N`` ranges: 40x23 and the grids measured near it (30x30 to 32x29,
#: narrow enough that its call sizes stay between the losing 224 and 288 ``B * nh`` at every
#: ``N``), and 37x29's without the multiples of 8 at either end, where the 32-row tile's
#: vectors of one position share banks.
_BWD_N = (897, 928)
_BWD_TAIL_N = (1073, 1079)


def _backwards_16bit(config: OpConfig) -> tuple[BandParams, ...]:
    near, tail = _in_range(_BWD_N), _in_range(_BWD_TAIL_N)
    return (BandParams(pass_="backward", rows=16, threads=384, ctas_per_sm=4, **near,
                       **_call_sizes(config, _BWD_N, 240, 264)),
            BandParams(pass_="backward", rows=32, threads=576, ctas_per_sm=2, **tail,
                       **_call_sizes(config, _BWD_TAIL_N, 120, 132)),
            BandParams(pass_="backward", rows=32, threads=640, ctas_per_sm=2, **tail,
                       **_call_sizes(config, _BWD_TAIL_N, 248, 264)))


def as_record(params: BandParams) -> dict[str, int]:
    """``params`` as a manifest stores them."""
    return asdict(params)


def fits(config: OpConfig, params: BandParams) -> str | None:
    """Why ``params`` cannot build ``config`` (None if they can)."""
    vec, kd = vector_width(config), config.key_dim
    if params.pass_ not in PASSES:
        return f"pass_ {params.pass_!r}: not one of {PASSES}"
    if params.rows % vec or kd % params.rows:
        return f"rows {params.rows}: not a multiple of {vec} dividing key_dim {kd}"
    if params.threads % (params.rows // vec) or params.threads % 32:
        return f"threads {params.threads}: not whole warps of whole positions"
    if not 0 < params.min_n <= params.max_n:
        return f"N range {params.min_n}..{params.max_n} is empty"
    smem = shared_bytes(config, params)
    if smem > _MAX_CTA_SMEM_BYTES:
        return f"{smem} bytes of shared memory, past the {_MAX_CTA_SMEM_BYTES} a CTA may have"
    if params.ctas_per_sm * (smem + _RESERVED_SMEM_BYTES) > _SM_SMEM_BYTES:
        return (f"{params.ctas_per_sm} CTAs of {smem} bytes of shared memory, past the "
                f"{_SM_SMEM_BYTES} an SM holds")
    if stage_vectors(config, params) > _MAX_STAGE_VECTORS:
        return (f"{stage_vectors(config, params)} stage vectors a thread, past "
                f"{_MAX_STAGE_VECTORS} (the stage would spill)")
    if params.ctas_per_sm < 1 or params.sms < 1 or params.min_numel < 0:
        return "ctas_per_sm and sms must be positive, min_numel not negative"
    if params.ctas_per_sm * params.threads > _MAX_THREADS_PER_SM:
        return (f"{params.ctas_per_sm} x {params.threads} threads, past the "
                f"{_MAX_THREADS_PER_SM} an SM holds")
    if params.max_numel and params.max_numel < params.min_numel:
        return f"call sizes {params.min_numel}..{params.max_numel} are empty"
    if params.l2_fetch not in _L2_FETCH_BYTES:
        return f"l2_fetch {params.l2_fetch}: not one of {_L2_FETCH_BYTES}"
    if params.l2_fetch and params.pass_ != "forward":
        return "l2_fetch: the backward's loads take no hint (forward only)"
    return None


class _Shape(NamedTuple):
    """The compile-time constants of one band kernel, forward or backward."""

    V: int  # elements of a 16-byte vector
    R: int  # rows of a band
    BV: int  # kd-side vectors of one position in a band
    bands: int  # bands of one (b, h, s) block
    threads: int
    step: int  # positions between a thread's stage vectors (and gathered positions)
    L: int  # stage vectors a thread
    ctas: int  # the persistent grid's CTAs
    tile_elems: int  # elements of the shared [rows, max_n] tile, 64-byte rounded
    scope: str  # the tile's: static or dynamic shared memory


def _shape(config: OpConfig, params: BandParams) -> _Shape:
    V, R = vector_width(config), params.rows
    return _Shape(V=V, R=R, BV=R // V, bands=config.key_dim // R, threads=params.threads,
                  step=params.threads // (R // V), L=stage_vectors(config, params),
                  ctas=params.ctas, tile_elems=tile_elements(config, params),
                  scope="shared.dyn" if dynamic_shared(config, params) else "shared")


@parses_tvmscript
def band_forward(config: OpConfig, params: BandParams, name: str) -> PrimFunc:
    """``out[b, h, s, d, n] = (lo, hi)[s][b*nh + h, n, d]`` for ``N <= params.max_n``, a band
    of ``params.rows`` output rows at a time; see the module doc."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V, R, BV, bands, threads, step, L, ctas, tile_elems, scope = _shape(config, params)

    @T.macro
    def load_band(unit, N, p0, kv, stage, lo_flat, hi_flat):
        """Band ``unit``'s vectors into ``stage``: positions ``p0 + j * step``, vector ``kv``."""
        src: T.let[T.int32] = ((unit // (2 * bands)) * N + p0) * kd + (
            unit % bands) * R + kv * V
        if (unit // bands) % 2 == 0:  # the stream is the CTA's: one branch, not one per load
            for j in T.unroll(L):
                if p0 + j * step < N:
                    for e in T.vectorized(V):
                        stage[j * V + e] = lo_flat[src + j * (step * kd) + e]
        else:
            for j in T.unroll(L):
                if p0 + j * step < N:
                    for e in T.vectorized(V):
                        stage[j * V + e] = hi_flat[src + j * (step * kd) + e]

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
        bx = T.launch_thread("blockIdx.x", T.min(B * (nh * 2 * bands), ctas))
        tx = T.launch_thread("threadIdx.x", threads)
        tile_alloc = T.alloc_buffer((tile_elems,), dtype, scope=scope)
        # Accessed through a view: TVM would otherwise shrink the allocation to the region
        # that its N-dependent indices bound, a size that CUDA codegen cannot allocate.
        tile = T.decl_buffer((tile_elems,), dtype, data=tile_alloc.data, scope=scope)
        stage = T.alloc_buffer((L * V,), dtype, scope="local")
        units: T.let[T.int32] = B * (nh * 2 * bands)
        grid: T.let[T.int32] = T.min(units, ctas)
        p0: T.let[T.int32] = tx // BV
        kv: T.let[T.int32] = tx % BV
        # The first band (bx < units: the grid is at most one CTA per band).
        load_band(bx, N, p0, kv, stage, lo_flat, hi_flat)
        # Truncating division (every operand is positive): a floor division by a variable
        # prints sign fix-ups.
        for k in T.serial(T.truncdiv(units - bx + grid - 1, grid)):
            unit: T.let[T.int32] = bx + k * grid
            for j in T.unroll(L):  # the stage into the [rows, N] tile
                if p0 + j * step < N:
                    for e in T.unroll(V):
                        tile[(kv * V + e) * N + p0 + j * step] = stage[j * V + e]
            T.tvm_storage_sync("shared")
            nxt: T.let[T.int32] = unit + grid
            if nxt < units:  # the next band's loads, in flight while this one is stored
                load_band(nxt, N, p0, kv, stage, lo_flat, hi_flat)
            # The band is rows * N contiguous output elements: 16-byte stores in address order.
            # One trip count for the CTA, a bound per store: a trip count that depends on the
            # thread made ptxas spill (4 bytes at 4 x 256 threads, 16-bit).
            dst: T.let[T.int32] = ((unit // bands) * kd + (unit % bands) * R) * N
            for i in T.serial((R * N // V + threads - 1) // threads):
                if tx + i * threads < R * N // V:
                    for e in T.vectorized(V):
                        out_flat[dst + (tx + i * threads) * V + e] = tile[
                            (tx + i * threads) * V + e]
            T.tvm_storage_sync("shared")  # the tile is free for the next band

    return forward


@parses_tvmscript
def band_backward(config: OpConfig, params: BandParams, name: str) -> PrimFunc:
    """``d_lo/d_hi[b*nh + h, n, d] = g[b, h, 0/1, d, n]`` for ``N <= params.max_n``, a band of
    ``params.rows`` gradient rows at a time: the forward's design run the other way. A band of
    the gradient is ``rows * N`` contiguous elements, read in address order into the register
    stage and stored to the shared ``[rows, N]`` tile in that order; each thread then gathers
    kd-side vector ``t % (rows / vec)`` of positions ``t / (rows / vec) + m * step`` from the
    tile while the next band's loads are in flight."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V, R, BV, bands, threads, step, L, ctas, tile_elems, scope = _shape(config, params)

    @T.macro
    def load_band(unit, N, tx, stage, g_flat):
        """Band ``unit``'s ``rows * N`` contiguous elements into ``stage``, vector ``tx + j *
        threads``."""
        src: T.let[T.int32] = ((unit // bands) * kd + (unit % bands) * R) * N
        for j in T.unroll(L):
            if tx + j * threads < R * N // V:
                for e in T.vectorized(V):
                    stage[j * V + e] = g_flat[src + (tx + j * threads) * V + e]

    @T.macro
    def gather_band(unit, N, p0, kv, tile, vector, d_flat):
        """The tile's positions ``p0 + m * step``, kd-side vector ``kv``, into ``d_flat``."""
        dst: T.let[T.int32] = ((unit // (2 * bands)) * N + p0) * kd + (
            unit % bands) * R + kv * V
        # One trip count for the CTA, a bound per position (see the forward's store loop).
        for m in T.serial(T.truncdiv(N + step - 1, step)):
            if p0 + m * step < N:
                # Element loads into a local vector, then one 16-byte store: a vectorized
                # gather prints an index vector of V lanes per load.
                for e in T.unroll(V):
                    vector[e] = tile[(kv * V + e) * N + p0 + m * step]
                for e in T.vectorized(V):
                    d_flat[dst + m * (step * kd) + e] = vector[e]

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
        bx = T.launch_thread("blockIdx.x", T.min(B * (nh * 2 * bands), ctas))
        tx = T.launch_thread("threadIdx.x", threads)
        tile_alloc = T.alloc_buffer((tile_elems,), dtype, scope=scope)
        tile = T.decl_buffer((tile_elems,), dtype, data=tile_alloc.data, scope=scope)
        stage = T.alloc_buffer((L * V,), dtype, scope="local")
        vector = T.alloc_buffer((V,), dtype, scope="local")
        units: T.let[T.int32] = B * (nh * 2 * bands)
        grid: T.let[T.int32] = T.min(units, ctas)
        p0: T.let[T.int32] = tx // BV
        kv: T.let[T.int32] = tx % BV
        load_band(bx, N, tx, stage, g_flat)
        for k in T.serial(T.truncdiv(units - bx + grid - 1, grid)):
            unit: T.let[T.int32] = bx + k * grid
            for j in T.unroll(L):  # the stage into the tile, in the band's own layout
                if tx + j * threads < R * N // V:
                    for e in T.vectorized(V):
                        tile[(tx + j * threads) * V + e] = stage[j * V + e]
            T.tvm_storage_sync("shared")
            nxt: T.let[T.int32] = unit + grid
            if nxt < units:  # the next band's loads, in flight during the gather
                load_band(nxt, N, tx, stage, g_flat)
            if (unit // bands) % 2 == 0:  # the stream is the CTA's: one branch a band
                gather_band(unit, N, p0, kv, tile, vector, dlo_flat)
            else:
                gather_band(unit, N, p0, kv, tile, vector, dhi_flat)
            T.tvm_storage_sync("shared")  # the tile is free for the next band

    return backward


def min_blocks(source: str, entries: dict[str, int]) -> str:
    """Give each kernel of ``entries`` (device entry -> CTAs per SM) ``__launch_bounds__``'
    minimum of resident CTAs, which TVM does not print: without it ptxas may take more
    registers than :attr:`BandParams.ctas_per_sm` CTAs can share."""
    for entry, ctas in entries.items():
        pattern = re.compile(rf"__launch_bounds__\((\d+)\) {re.escape(entry)}\(")
        source, count = pattern.subn(rf"__launch_bounds__(\1, {ctas}) {entry}(", source)
        if not count:
            raise ValueError(f"{entry}: no __launch_bounds__ declaration in the source")
    return source


#: A 16-byte load of a band forward's input in TVM's CUDA: ``*(float4*)(lo_flat_ptr + i)``
#: (``uint4`` for 16-bit types); the cast's operand runs to its closing parenthesis
#: (:func:`psa_tvm.compiler.cuda_fixups.split_args`).
_STAGE_LOAD = re.compile(r"\*\((float4|uint4)\*\)\(((?:lo|hi)_flat_ptr) \+ ")
_ENTRY = re.compile(r'extern "C" __global__ void __launch_bounds__\([^)]*\) (\w+)\(')


def _hint_helpers(fetch: int) -> str:
    """``psa_ld_l2_{fetch}_{float4,uint4}``: a non-coherent 16-byte global load with the hint."""
    out = []
    for vtype, (suffix, reg) in {"float4": ("f32", "f"), "uint4": ("u32", "r")}.items():
        out.append(
            f"__device__ __forceinline__ {vtype} psa_ld_l2_{fetch}_{vtype}(const void* p) {{\n"
            f"  {vtype} v;\n"
            f'  asm("ld.global.nc.L2::{fetch}B.v4.{suffix} {{%0, %1, %2, %3}}, [%4];"\n'
            f'      : "={reg}"(v.x), "={reg}"(v.y), "={reg}"(v.z), "={reg}"(v.w) : "l"(p));\n'
            f"  return v;\n}}\n")
    return "".join(out)


def fetch_hints(source: str, entries: dict[str, int]) -> str:
    """Route each input load of the kernels of ``entries`` (device entry -> ``l2_fetch``
    bytes) through a load that carries the L2 fetch-size hint, and define those loads once
    ahead of the first kernel. Entries with 0 and the rest of ``source`` are left as they are."""
    wanted = {entry: fetch for entry, fetch in entries.items() if fetch}
    if not wanted:
        return source
    starts = [(m.start(), m.group(1)) for m in _ENTRY.finditer(source)]
    bodies = {}  # entry -> (start, end) of its definition: from its signature to the next one's
    for (start, entry), (end, _) in zip(starts, [*starts[1:], (len(source), "")], strict=True):
        if source.find("{", start, end) != -1 and entry in wanted:
            bodies[entry] = (start, end)
    if missing := sorted(set(wanted) - set(bodies)):
        raise ValueError(f"{', '.join(missing)}: no kernel definition in the source")
    out, pos = [], 0
    for entry, (start, end) in sorted(bodies.items(), key=lambda item: item[1]):
        loads = list(_STAGE_LOAD.finditer(source, start, end))
        if not loads:
            raise ValueError(f"{entry}: no input load to hint")
        for match in loads:
            # The cast's operand, "(lo_flat_ptr + i)": its '(' is just before the pointer.
            (operand,), past = split_args(source, match.start(2))
            out.append(source[pos:match.start()])
            out.append(f"psa_ld_l2_{wanted[entry]}_{match.group(1)}({operand})")
            pos = past
    out.append(source[pos:])
    first = starts[0][0]
    helpers = "".join(_hint_helpers(f) for f in sorted(set(wanted.values())))
    patched = "".join(out)
    return patched[:first] + helpers + patched[first:]


def patch_source(source: str, kernels: dict[str, BandParams]) -> str:
    """What the band kernels (device entry -> params) need of TVM's CUDA beyond TensorIR: the
    resident CTAs in ``__launch_bounds__`` (:func:`min_blocks`) and the loads' L2 fetch hint
    (:func:`fetch_hints`)."""
    source = min_blocks(source, {entry: p.ctas_per_sm for entry, p in kernels.items()})
    return fetch_hints(source, {entry: p.l2_fetch for entry, p in kernels.items()})


def band_pass(config: OpConfig, params: BandParams, name: str) -> PrimFunc:
    """The band kernel of ``params.pass_``."""
    builder = band_forward if params.pass_ == "forward" else band_backward
    return builder(config, params, name)


__all__ = ["PASSES", "BandParams", "band_backward", "band_forward", "band_pass",
           "default_params", "fetch_hints", "fits", "min_blocks", "patch_source", "rank",
           "shared_bytes", "stage_vectors", "tile_elements"]
