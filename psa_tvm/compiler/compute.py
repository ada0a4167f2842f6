"""What the PSA attention merge computes, in TensorIR. No schedules live here.

Both passes iterate over the loop nest ``(b, h, s, d, n)`` (or ``(b, h, s, n, d)``) with the
merged tensor viewed as ``[B, nh, 2, kd, N]``, which is the same memory as ``[B, c, H, W]``.
Keeping the symbolic extents ``B`` and ``N`` as loops of their own means a schedule only ever
splits or fuses by constants, so the generated index math is shifts, multiplies and adds,
never a floor-div/mod by a symbolic value with its sign fix-ups.

``N`` is written ``NV * vec`` with ``NV`` an explicit kernel parameter: a vectorizing schedule
needs ``N`` to be a multiple of the vector width *by construction*, because TVM only emits
128-bit loads when it can prove alignment. ``vec=1`` gives the general kernel.
"""

from __future__ import annotations

from tvm.script import tirx as T
from tvm.tirx import PrimFunc

from psa_tvm.config import OpConfig

FORWARD_BLOCK = "merge"
BACKWARD_BLOCK = "split"


def _index_var(index_dtype: str):
    if index_dtype not in ("int32", "int64"):
        raise ValueError(f"index_dtype must be 'int32' or 'int64', got {index_dtype!r}")
    return T.int64 if index_dtype == "int64" else T.int32


def merge_forward(
    config: OpConfig, *, vec: int = 1, index_dtype: str = "int32", name: str = "psa_merge_fwd",
    align: int = -1,
) -> PrimFunc:
    """``out[b, h, s, d, n] = (lo if s == 0 else hi)[b*nh + h, n, d]`` with ``N = NV * vec``.

    ``align`` is the data alignment (bytes) the generated code may assume for every tensor
    (-1: TVM's default, 64). The CPU build passes the element size, since any element-aligned
    view is a valid input; GPU launches check 16-byte alignment before picking a vector kernel.
    """
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    ivar = _index_var(index_dtype)

    @T.prim_func(s_tir=True)
    def forward(lo_h: T.handle, hi_h: T.handle, out_h: T.handle, NV: ivar):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        B = ivar()
        lo = T.match_buffer(lo_h, (B * nh, NV * vec, kd), dtype, align=align)
        hi = T.match_buffer(hi_h, (B * nh, NV * vec, kd), dtype, align=align)
        out = T.match_buffer(out_h, (B, nh, 2, kd, NV * vec), dtype, align=align)
        for b, h, s, d, n in T.grid(B, nh, 2, kd, NV * vec):
            with T.sblock(FORWARD_BLOCK):
                vb, vh, vs, vd, vn = T.axis.remap("SSSSS", [b, h, s, d, n])
                out[vb, vh, vs, vd, vn] = T.if_then_else(
                    vs == 0, lo[vb * nh + vh, vn, vd], hi[vb * nh + vh, vn, vd]
                )

    return forward.with_attr("global_symbol", name)


def merge_backward(
    config: OpConfig, *, vec: int = 1, index_dtype: str = "int32", name: str = "psa_merge_bwd",
    align: int = -1,
) -> PrimFunc:
    """The inverse gather: ``d_lo[b*nh + h, n, d] = g[b, h, 0, d, n]``, ``d_hi`` from ``s = 1``."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    ivar = _index_var(index_dtype)

    @T.prim_func(s_tir=True)
    def backward(g_h: T.handle, dlo_h: T.handle, dhi_h: T.handle, NV: ivar):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        B = ivar()
        g = T.match_buffer(g_h, (B, nh, 2, kd, NV * vec), dtype, align=align)
        dlo = T.match_buffer(dlo_h, (B * nh, NV * vec, kd), dtype, align=align)
        dhi = T.match_buffer(dhi_h, (B * nh, NV * vec, kd), dtype, align=align)
        for b, h, s, n, d in T.grid(B, nh, 2, NV * vec, kd):
            with T.sblock(BACKWARD_BLOCK):
                vb, vh, vs, vn, vd = T.axis.remap("SSSSS", [b, h, s, n, d])
                T.reads(g[vb, vh, vs, vd, vn])
                T.writes(dlo[vb * nh + vh, vn, vd], dhi[vb * nh + vh, vn, vd])
                if vs == 0:
                    dlo[vb * nh + vh, vn, vd] = g[vb, vh, vs, vd, vn]
                else:
                    dhi[vb * nh + vh, vn, vd] = g[vb, vh, vs, vd, vn]

    return backward.with_attr("global_symbol", name)
