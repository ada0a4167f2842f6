"""16-bit CPU kernels on pairs of elements: the same merge, written on 32-bit words.

A CPU has hardware gathers for 32-bit lanes, not for 16-bit ones, so a 16-bit transpose moves
scalars (2.4-3x a copy on AVX2). Viewing ``lo``/``hi`` as 32-bit words (two neighbours along kd)
and the merged tensor as 32-bit words (two neighbours along N), each output word is two halves of
two input words, a 2x2 transpose in registers:

    out[d=2j,   (2m, 2m+1)] = (low half of src[2m, j],  low half of src[2m+1, j])
    out[d=2j+1, (2m, 2m+1)] = (high half of src[2m, j], high half of src[2m+1, j])

(little-endian: the low half of a word is its first element). The backward pass is the same
2x2 transpose the other way. Needs ``kd`` even, ``N`` even (backward; forward with the vector
store: ``N % (2 * lanes) == 0``) and 4-byte aligned data; the run time passes ``int32`` views and
falls back to the element kernels otherwise. Bits move unchanged: exact for any payload.
"""

from __future__ import annotations

from tvm.script import tirx as T
from tvm.tirx import PrimFunc

from psa_tvm.compiler.compute import BACKWARD_BLOCK, FORWARD_BLOCK, parses_tvmscript
from psa_tvm.config import OpConfig

_LOW = 0xFFFF
_HIGH = -65536  # 0xFFFF0000 as int32


@parses_tvmscript
def pairs_forward(config: OpConfig, *, vec: int, name: str) -> PrimFunc:
    """``out32[b, h, s, d, m]`` from ``lo32``/``hi32`` rows ``2m``, ``2m+1``, word ``d // 2``;
    ``NP = N / 2 = NV * vec`` words per merged row."""
    kd, nh = config.key_dim, config.num_heads
    kh = kd // 2

    @T.prim_func(s_tir=True)
    def forward(lo_h: T.handle, hi_h: T.handle, out_h: T.handle, NV: T.int64):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        B = T.int64()
        lo = T.match_buffer(lo_h, (B * nh, NV * (2 * vec), kh), "int32", align=4)
        hi = T.match_buffer(hi_h, (B * nh, NV * (2 * vec), kh), "int32", align=4)
        out = T.match_buffer(out_h, (B, nh, 2, kd, NV * vec), "int32", align=4)
        for b, h, s, d, m in T.grid(B, nh, 2, kd, NV * vec):
            with T.sblock(FORWARD_BLOCK):
                vb, vh, vs, vd, vm = T.axis.remap("SSSSS", [b, h, s, d, m])
                first = T.meta_var(T.if_then_else(vs == 0, lo[vb * nh + vh, vm * 2, vd // 2],
                                                  hi[vb * nh + vh, vm * 2, vd // 2]))
                second = T.meta_var(T.if_then_else(vs == 0, lo[vb * nh + vh, vm * 2 + 1, vd // 2],
                                                   hi[vb * nh + vh, vm * 2 + 1, vd // 2]))
                out[vb, vh, vs, vd, vm] = T.if_then_else(
                    vd % 2 == 0,
                    T.bitwise_or(T.bitwise_and(first, _LOW), T.shift_left(second, 16)),
                    T.bitwise_or(T.bitwise_and(T.shift_right(first, 16), _LOW),
                                 T.bitwise_and(second, _HIGH)))

    return forward.with_attr("global_symbol", name)


@parses_tvmscript
def pairs_backward(config: OpConfig, *, name: str) -> PrimFunc:
    """``d_lo32[r, n, j]`` from words ``g32[.., 2j, n // 2]`` and ``g32[.., 2j+1, n // 2]``;
    ``N = 2 * NP``."""
    kd, nh = config.key_dim, config.num_heads
    kh = kd // 2

    @T.prim_func(s_tir=True)
    def backward(g_h: T.handle, dlo_h: T.handle, dhi_h: T.handle, NP: T.int64):
        T.func_attr({"global_symbol": name, "tirx.noalias": True})
        B = T.int64()
        g = T.match_buffer(g_h, (B, nh, 2, kd, NP), "int32", align=4)
        dlo = T.match_buffer(dlo_h, (B * nh, NP * 2, kh), "int32", align=4)
        dhi = T.match_buffer(dhi_h, (B * nh, NP * 2, kh), "int32", align=4)
        for b, h, s, n, j in T.grid(B, nh, 2, NP * 2, kh):
            with T.sblock(BACKWARD_BLOCK):
                vb, vh, vs, vn, vj = T.axis.remap("SSSSS", [b, h, s, n, j])
                T.reads(g[vb, vh, vs, vj * 2:vj * 2 + 2, vn // 2])
                T.writes(dlo[vb * nh + vh, vn, vj], dhi[vb * nh + vh, vn, vj])
                word = T.meta_var(T.if_then_else(
                    vn % 2 == 0,
                    T.bitwise_or(T.bitwise_and(g[vb, vh, vs, vj * 2, vn // 2], _LOW),
                                 T.shift_left(g[vb, vh, vs, vj * 2 + 1, vn // 2], 16)),
                    T.bitwise_or(
                        T.bitwise_and(T.shift_right(g[vb, vh, vs, vj * 2, vn // 2], 16), _LOW),
                        T.bitwise_and(g[vb, vh, vs, vj * 2 + 1, vn // 2], _HIGH))))
                if vs == 0:
                    dlo[vb * nh + vh, vn, vj] = word
                else:
                    dhi[vb * nh + vh, vn, vj] = word

    return backward.with_attr("global_symbol", name)
