"""The ``tiled`` params a layout-family op is built with when none are given.

Every family op starts from the rule's defaults (:meth:`Tiled.default_params`). An op listed in
:data:`FAMILY_TILED` was measured to do better with its own set (docs/attention.md, "Several
slices per CTA, tiles that divide N"; H200, kd=32, float16, nh 4 and 6, two timing runs, every
(pass, shape) cell at least level within the runs' spread of 0.01-0.03); the merge's own tuned
tables (``schedules/``) are not involved.

A listed set applies only where it was measured to fit: 16-bit types and a configuration the
params schedule (``heads_inner`` with ``slices_per_cta=k`` needs ``num_heads % k == 0``); any
other configuration keeps the rule's default.
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
#: 0.07 in one set of params for both, so they keep theirs.
FAMILY_TILED: dict[str, TiledParams] = {
    "qkv_grad_flash": TiledParams(tile_n=64, threads=128, row_threads=4, slices_per_cta=2,
                                  heads_inner=True, group_pad_bytes=32),
    "qkv": TiledParams(tile_n=64, threads=256, row_threads=2, slices_per_cta=2),
    "attn": TiledParams(tile_n=64, threads=256, row_threads=2, slices_per_cta=2),
    "attn_flash": TiledParams(tile_n=64, threads=256, row_threads=2, slices_per_cta=2,
                              heads_inner=True),
    "qkv_grad_cudnn": TiledParams(tile_n=64, threads=256, row_threads=4, slices_per_cta=2,
                                  heads_inner=True, group_pad_bytes=32),
}


def family_params(op: str, config: OpConfig) -> TiledParams | None:
    """The op's own params for ``config``, or ``None`` for the rule's default."""
    params = FAMILY_TILED.get(op)
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
