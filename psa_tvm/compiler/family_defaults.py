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
#: qkv (both passes, one build): two streams of a head per CTA, so the ``[B*nh, N, kd]`` side is
#: unchanged and the ``qkv`` side moves 128-byte pieces; mean over the 8 (pass, shape) cells
#: +0.05 of copy (0.79/0.90/0.73/0.72 -> 0.86/0.94/0.86/0.73 forward), the worst cell -0.01
#: (backward at 384, 32, 20x20: within the two runs' spread). qkv_grad_cudnn: 64-position tiles,
#: four threads per kd row, +0.05 mean, no cell worse (0.79/0.87/0.75/0.74 -> 0.85/0.91/0.83/0.74).
#: attn and attn_flash keep the rule's default: no set was better in every cell of both passes.
FAMILY_TILED: dict[str, TiledParams] = {
    "qkv_grad_flash": TiledParams(tile_n=64, threads=128, row_threads=4, slices_per_cta=2,
                                  heads_inner=True),
    "qkv": TiledParams(tile_n=64, threads=128, row_threads=4, slices_per_cta=2),
    "qkv_grad_cudnn": TiledParams(tile_n=64, threads=128, row_threads=4),
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
