"""The ``tiled`` params a layout-family op is built with when none are given.

Every family op starts from the rule's defaults (:meth:`Tiled.default_params`). An op listed in
:data:`FAMILY_TILED` was measured to do better with its own set (docs/attention.md, "Several
slices per CTA, tiles that divide N"; H200, kd=32, float16, nh 4 and 6, two timing runs, every
(pass, shape) cell at least level within the runs' spread of 0.01-0.03); the merge's own tuned
tables (``schedules/``) are not involved.

A listed set applies only where it was measured to fit: 16-bit types and a configuration the
params schedule (``heads_inner`` with ``slices_per_cta=k`` needs ``num_heads % k == 0``); any
other configuration keeps the rule's default.

:data:`FAMILY_TILED_PASS` gives one pass of a two-pass op a set of its own. A build still holds
both passes (one source, one manifest entry, one native table row): each kernel record carries
its own grid, block and shared memory, so the run time needs nothing else to launch it.
"""

from __future__ import annotations

from psa_tvm.compiler.rules.tiled import Tiled, TiledParams
from psa_tvm.config import OpConfig
from psa_tvm.layouts import stream_op

#: op -> its ``tiled`` params. qkv_grad_flash gathers six ``[B, N, nh, kd]`` tensors: with two
#: consecutive heads per CTA (heads_inner) each position's two kd rows are adjacent (128 bytes),
#: fraction of copy 0.80/0.82/0.75/0.62 -> 0.93/0.99/0.90/0.77 at (dim, B, HxW) = (384, 16,
#: 40x40), (256, 64, 80x80), (256, 16, 40x40), (384, 32, 20x20).
#: The other four: 256 threads with two per kd row, over a CTA that moves two 32-element kd rows
#: of each of its 64 positions (two streams of a head; for the ops whose streams are tensors of
#: their own, two heads of a stream: heads_inner). Found in the whole-heads grid's wake (layout_tune
#: --grid wide, then --grid follow-up; docs/bench-layout/follow_up_tune_h200.md, warm L2, nh 4
#: and 6, float16 and bfloat16, both passes, 16 cells per op, 8 for qkv_grad_cudnn): better than
#: the previous params in every cell, by at least +0.024 (qkv, mean +0.08), +0.034 (attn, mean
#: +0.105), +0.069 (attn_flash, mean +0.132), +0.015 (qkv_grad_cudnn, mean +0.029) of copy.
#: qkv_grad_flash's best worst case there (t64/128/r2) lost up to 0.078 in some cells: kept.
#: Whole heads of every stream per CTA (up to the whole bnhd row) were slower for every op.
#: v14 (docs/perf.md; layout_tune --grid skew, L2 flushed, one session, every candidate
#: bit-exact): the tiled rule's group_pad_bytes skew. The two gradient packs, forward-only ops,
#: take it: qkv_grad_cudnn with four threads per kd row, +0.02 to +0.07 of copy in each of its
#: four cells (0.82-0.92 -> 0.88-0.94); qkv_grad_flash on its own set, +0.00 to +0.05. For the
#: two-pass ops it helped the backward (+0.06 to +0.08 at 40x40) and cost the forward up to
#: 0.07 in one set of params for both, so they keep theirs (their backwards now have their own:
#: FAMILY_TILED_PASS). v15 (layout_tune --grid gather, the gathers only, L2 flushed):
#: attn_flash's gather with 128 threads and one per kd row, 0.90-0.96 -> 0.93-0.97 at 80x80/b64
#: (nh 4) and 20x20/b32 (nh 6), 0.97-1.02 -> 1.01-1.05 at 40x40/b16 (7 of 8 cells up, by +0.01
#: to +0.07; one -0.01). The other gathers kept theirs: nothing in that grid beat them by more than
#: the runs' spread, and the merge forward's 128-position, one-thread-per-row set lost 0.1-0.4.
#: v16 (layout_tune --grid stage, the gathers only, L2 flushed, float16 and bfloat16): the
#: gathers of qkv, attn and qkv_grad_cudnn stage their loads in registers (``stage_loads``:
#: every load of a thread issued before its first shared store; before, each waited for the
#: previous one's data). qkv 0.92/0.94 -> 0.97/0.97 and attn 0.85/0.93 -> 0.93/1.00 (nh 6,
#: 20x20/b32 and 40x40/b16, float16), qkv_grad_cudnn with 128 threads (four loads in flight
#: per thread) 0.88/0.90 -> 0.92/0.95; nh 4 +0.00 to +0.07; bfloat16 alike. Then
#: (layout_tune --grid stage-wide, the six nh 4 layout shapes, float16 and bfloat16): the
#: gathers of qkv_grad_flash with the stage at 256 threads, 0.85 -> 0.90 at 256/16/20x20 and
#: 0.87 -> 1.01 at 256/1/80x80 (grids of less than one wave), the others within 0.01; and of
#: attn_flash with the stage and two threads per kd row, better in 5 of the 6 shapes by
#: +0.02 to +0.05 (0.81 -> 0.86 at 256/16/20x20) and level in the sixth. At nh 6 both keep
#: FAMILY_TILED_HEADS's sets.
FAMILY_TILED: dict[str, TiledParams] = {
    "qkv_grad_flash": TiledParams(tile_n=64, threads=256, row_threads=4, slices_per_cta=2,
                                  heads_inner=True, group_pad_bytes=32, stage_loads=True),
    "qkv": TiledParams(tile_n=64, threads=256, row_threads=2, slices_per_cta=2,
                       stage_loads=True),
    "attn": TiledParams(tile_n=64, threads=256, row_threads=2, slices_per_cta=2,
                        stage_loads=True),
    "attn_flash": TiledParams(tile_n=64, threads=128, row_threads=2, slices_per_cta=2,
                              heads_inner=True, stage_loads=True),
    "qkv_grad_cudnn": TiledParams(tile_n=64, threads=128, row_threads=4, slices_per_cta=2,
                                  heads_inner=True, group_pad_bytes=32, stage_loads=True),
}

#: The scatter of a two-pass op writes its kd side, as the merge's backward does: with four
#: threads per kd row and the 32-byte skew it gained +0.01 to +0.08 of copy in 10 of its 12
#: cells, was level in one and lost 0.01 in one (docs/perf.md v14 part 4 and v15; layout_tune
#: --grid skew, L2 flushed, float16, nh 4 at 80x80/b64 and 40x40/b16, nh 6 at 40x40/b16 and
#: 20x20/b32; e.g. attn nh 4 40x40/b16 0.92 -> 1.00). The same set cost the gathers up to 0.07
#: (attn_flash nh 4 40x40 0.98 -> 0.92): they keep the op's set.
FAMILY_TILED_PASS: dict[tuple[str, str], TiledParams] = {
    ("attn", "backward"): TiledParams(tile_n=64, threads=256, row_threads=4, slices_per_cta=2,
                                      group_pad_bytes=32),
    ("attn_flash", "backward"): TiledParams(tile_n=64, threads=256, row_threads=4,
                                            slices_per_cta=2, heads_inner=True,
                                            group_pad_bytes=32),
    ("qkv", "backward"): TiledParams(tile_n=64, threads=256, row_threads=4, slices_per_cta=2,
                                     group_pad_bytes=32),
}

#: (op, num_heads) -> params, ahead of FAMILY_TILED where an op's best set differs by head
#: count. qkv_grad_flash at nh 6: 256 threads instead of 128, 0.87/0.95 -> 0.90/0.97 (float16)
#: and 0.87/0.92 -> 0.89/0.94 (bfloat16) at 384/32/20x20 and 384/16/40x40 (v14's skew sweep
#: and v15's gather sweep agree); at nh 6 the staged sets of v16 did not beat it.
#: attn_flash at nh 6 (v16, its gather): four threads per kd row, the skew and the register
#: stage, 0.92/1.00 -> 0.94/1.03 (float16) and 0.92/1.01 -> 0.94/1.03 (bfloat16) at the same
#: shapes (nh 4 takes the op's staged set, FAMILY_TILED). Its backward keeps
#: FAMILY_TILED_PASS's set.
FAMILY_TILED_HEADS: dict[tuple[str, int], TiledParams] = {
    ("qkv_grad_flash", 6): TiledParams(tile_n=64, threads=256, row_threads=4, slices_per_cta=2,
                                       heads_inner=True, group_pad_bytes=32),
    ("attn_flash", 6): TiledParams(tile_n=64, threads=128, row_threads=4, slices_per_cta=2,
                                   heads_inner=True, group_pad_bytes=32, stage_loads=True),
}


def family_params(op: str, config: OpConfig) -> TiledParams | None:
    """The op's own params for ``config``, or ``None`` for the rule's default."""
    params = FAMILY_TILED_HEADS.get((op, config.num_heads), FAMILY_TILED.get(op))
    return _fitting(params, op, config)


def family_pass_params(op: str, config: OpConfig) -> dict[str, TiledParams]:
    """The passes of ``op`` that have a set of their own for ``config``, with it."""
    sets = {pass_: _fitting(params, op, config)
            for (name, pass_), params in FAMILY_TILED_PASS.items() if name == op}
    return {pass_: params for pass_, params in sets.items() if params is not None}


def _fitting(params: TiledParams | None, op: str, config: OpConfig) -> TiledParams | None:
    """``params`` where they were measured to fit ``config`` (see the module's doc)."""
    if params is None or config.itemsize != 2:
        return None
    grouped = config.num_heads if params.heads_inner else stream_op(op).num_streams
    if grouped % params.slices_per_cta:
        return None
    try:
        Tiled().check_params(config, params)
    except ValueError:
        return None
    return params
