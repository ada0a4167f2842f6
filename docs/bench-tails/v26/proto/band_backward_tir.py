"""Record (docs/perf.md v26, call 4): the band backward as it was written into the library for
call 4 and then taken out (0.01-0.04 slower than the prototype, prbwd.cu, and not below the
shipped shifted backward at 37x29/b64). Its 32-row 16-bit bands at ``N`` up to 1100 need
69 KB of shared memory, so the tile was ``shared.dyn`` and the launchers raised each
kernel's dynamic limit (``cuFuncSetAttribute`` / ``cudaKernelSetAttributeForDevice``) past
48 KB; that plumbing left with it. It ran with ``BandParams(rows=32, threads=512,
ctas_per_sm=2, min_n=1025, max_n=1100, min_numel=1 << 22)`` at the shifted kernel's rank.
Needs TVM; builds a PrimFunc as psa_tvm/compiler/band.py's forward does.
"""

from __future__ import annotations

from tvm.script import tirx as T
from tvm.tirx import PrimFunc

from psa_tvm.compiler.band import BandParams, shared_bytes, stage_vectors, vector_width
from psa_tvm.compiler.compute import parses_tvmscript
from psa_tvm.config import OpConfig


def dynamic_shared(config: OpConfig, params: BandParams) -> bool:
    return shared_bytes(config, params) > 48 * 1024


@parses_tvmscript
def band_backward(config: OpConfig, params: BandParams, name: str) -> PrimFunc:
    """``d_lo/d_hi[b*nh + h, n, d] = g[b, h, 0/1, d, n]`` for ``N <= params.max_n``, a band of
    ``params.rows`` gradient rows at a time. A band is ``rows * N`` contiguous elements, read
    in address order into the register stage; from the shared ``[rows, N]`` tile each thread
    gathers one kd-side vector of its positions while the next band's loads are in flight."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V = vector_width(config)
    R = params.rows
    BV = R // V
    bands = kd // R
    threads = params.threads
    step = threads // BV
    L = stage_vectors(config, params)
    ctas = params.ctas
    tile_elems = R * params.max_n
    scope = "shared.dyn" if dynamic_shared(config, params) else "shared"

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
        units: T.let[T.int32] = B * (nh * 2 * bands)
        grid: T.let[T.int32] = T.min(units, ctas)
        p0: T.let[T.int32] = tx // BV
        kv: T.let[T.int32] = tx % BV
        vectors: T.let[T.int32] = R * N // V
        src0: T.let[T.int32] = ((bx // bands) * kd + (bx % bands) * R) * N
        for j in T.unroll(L):
            if tx + j * threads < vectors:
                for e in T.vectorized(V):
                    stage[j * V + e] = g_flat[src0 + (tx + j * threads) * V + e]
        for k in T.serial(T.truncdiv(units - bx + grid - 1, grid)):
            unit: T.let[T.int32] = bx + k * grid
            for j in T.unroll(L):  # the stage into the tile, in the band's own layout
                if tx + j * threads < vectors:
                    for e in T.vectorized(V):
                        tile[(tx + j * threads) * V + e] = stage[j * V + e]
            T.tvm_storage_sync("shared")
            nxt: T.let[T.int32] = unit + grid
            if nxt < units:  # the next band's loads, in flight during the gather
                src: T.let[T.int32] = ((nxt // bands) * kd + (nxt % bands) * R) * N
                for j in T.unroll(L):
                    if tx + j * threads < vectors:
                        for e in T.vectorized(V):
                            stage[j * V + e] = g_flat[src + (tx + j * threads) * V + e]
            dst: T.let[T.int32] = ((unit // (2 * bands)) * N + p0) * kd + (
                unit % bands) * R + kv * V
            # One trip count for the CTA, a bound per position (see the forward's store loop).
            if (unit // bands) % 2 == 0:
                for m in T.serial((N + step - 1) // step):
                    if p0 + m * step < N:
                        for e in T.vectorized(V):
                            dlo_flat[dst + m * (step * kd) + e] = tile[
                                (kv * V + e) * N + p0 + m * step]
            else:
                for m in T.serial((N + step - 1) // step):
                    if p0 + m * step < N:
                        for e in T.vectorized(V):
                            dhi_flat[dst + m * (step * kd) + e] = tile[
                                (kv * V + e) * N + p0 + m * step]
            T.tvm_storage_sync("shared")  # the tile is free for the next band

    return backward
