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

import functools
import threading
from collections.abc import Callable
from typing import TypeVar

import tvm
from tvm import s_tir, te
from tvm.script import tirx as T
from tvm.tirx import PrimFunc

from psa_tvm.config import OpConfig
from psa_tvm.layouts import (
    GATHER_OUTPUT,
    SCATTER_INPUT,
    SCATTER_OUTPUT,
    StreamOp,
)

FORWARD_BLOCK = "merge"
BACKWARD_BLOCK = "split"

_Builder = TypeVar("_Builder", bound=Callable)
# TVMScript parses each ``@T.prim_func``'s Python source with ``ast.parse``. CPython 3.11.7's
# AST constructor keeps its recursion depth in shared state, and builds run in threads
# (artifact.build_artifacts): two parses at once can fail with "AST constructor recursion depth
# mismatch" (seen in CI). Every builder that parses TVMScript takes this lock.
_TVMSCRIPT_PARSE = threading.RLock()


def parses_tvmscript(builder: _Builder) -> _Builder:
    """Run ``builder`` (a function defining a ``@T.prim_func``) under the parse lock."""

    @functools.wraps(builder)
    def serialized(*args, **kwargs):
        with _TVMSCRIPT_PARSE:
            return builder(*args, **kwargs)

    return serialized  # type: ignore[return-value]


def _index_var(index_dtype: str):
    if index_dtype not in ("int32", "int64"):
        raise ValueError(f"index_dtype must be 'int32' or 'int64', got {index_dtype!r}")
    return T.int64 if index_dtype == "int64" else T.int32


@parses_tvmscript
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


@parses_tvmscript
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


# ----------------------------------------------------------------- the S-stream family
# The layout ops around attention (psa_tvm/layouts.py): the same loop nests and block names as
# the merge, so every schedule rule applies unchanged; only the stream side's indexing differs.
# Built with te because the number of stream tensors varies per op.


def _stream_vars(index_dtype: str, vec: int):
    _index_var(index_dtype)  # validates
    nv = te.var("NV", index_dtype)
    return te.var("B", index_dtype), nv, nv * vec


def stream_gather(config: OpConfig, op: StreamOp, *, vec: int = 1, index_dtype: str = "int32",
                  name: str = "psa_stream_fwd") -> PrimFunc:
    """``merge[b, h, s, d, n] = sum(t[b, n, h, j*kd + d] for (t, j) in op.streams[s])``."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    batch, nv, n_total = _stream_vars(index_dtype, vec)
    tensors = {t: te.placeholder(op.stream_shape(batch, n_total, nh, kd, w), dtype, name=t)
               for t, w in op.tensor_widths.items()}

    def load(tensor: str, chunk: int, b, h, d, n):
        if op.layout == "bnhd":
            return tensors[tensor][b, n, h, chunk * kd + d]
        return tensors[tensor][b, h, n, chunk * kd + d]

    def body(b, h, s, d, n):
        values = []
        for sources in op.streams:
            value = None
            for tensor, chunk in sources:
                x = load(tensor, chunk, b, h, d, n)
                value = x if value is None else value + x
            values.append(value)
        expr = values[-1]
        for i in range(len(values) - 2, -1, -1):
            expr = te.if_then_else(s == i, values[i], expr)
        return expr

    out = te.compute((batch, nh, op.num_streams, kd, n_total), body, name=GATHER_OUTPUT)
    assert GATHER_OUTPUT == FORWARD_BLOCK  # te names the block after its output
    func = te.create_prim_func([*tensors.values(), out, nv])
    return func.with_attr({"global_symbol": name, "tirx.noalias": True})


def stream_scatter(config: OpConfig, op: StreamOp, *, vec: int = 1, index_dtype: str = "int32",
                   name: str = "psa_stream_bwd") -> PrimFunc:
    """``split[b, n, h, s, d] = g[b, h, s, d, n]`` (``bhnd``: ``split[b, h, n, s, d]``; with
    ``op.separate`` the stream axis first: ``split[s, b, n, h, d]``), with the loops in the
    merge backward's order ``(b, h, s, n, d)``."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    batch, nv, n_total = _stream_vars(index_dtype, vec)
    streams = op.num_streams
    g = te.placeholder((batch, nh, streams, kd, n_total), dtype, name=SCATTER_INPUT)
    assert SCATTER_OUTPUT == BACKWARD_BLOCK
    rows = ("b", "n", "h") if op.layout == "bnhd" else ("b", "h", "n")
    axes = ("s", *rows, "d") if op.separate else (*rows, "s", "d")
    extents = {"b": batch, "h": nh, "n": n_total, "s": streams, "d": kd}

    def body(*indices):
        at = dict(zip(axes, indices, strict=True))
        return g[at["b"], at["h"], at["s"], at["d"], at["n"]]

    split = te.compute(tuple(extents[a] for a in axes), body, name=SCATTER_OUTPUT)
    func = te.create_prim_func([g, split, nv]).with_attr(
        {"global_symbol": name, "tirx.noalias": True})
    sch = s_tir.Schedule(tvm.IRModule({name: func}))
    sch.work_on(name)
    loops = dict(zip(axes, sch.get_loops(sch.get_sblock(SCATTER_OUTPUT)), strict=True))
    sch.reorder(*(loops[axis] for axis in "bhsnd"))
    return sch.mod[name]


def stream_pass(config: OpConfig, op: StreamOp, pass_: str, **kwargs) -> PrimFunc:
    """The PrimFunc of one pass of a family member (``forward`` gathers, ``backward`` scatters)."""
    if pass_ not in op.passes:
        raise ValueError(f"op {op.name!r} has no {pass_} pass (it has {list(op.passes)})")
    return (stream_gather if pass_ == "forward" else stream_scatter)(config, op, **kwargs)
