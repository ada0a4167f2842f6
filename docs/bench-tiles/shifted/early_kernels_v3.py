"""Odd-N experiment v13c: shifted rows with thread-constant addressing (merge only).

Forward: CTA = (slice, tile of tile_n = threads/row_threads positions). Phase 1 moves the kd
side: step s covers vectors dv in [s*rt, s*rt+rt) of every tile position, so a thread's position
and its eight shared offsets are fixed and each step adds a constant; one extra step loads the
G-position halo. Phase 2 writes the row vectors: a thread's k (vector in row) and d % G are
fixed, so its row shift, bound and global base are computed once. The first and last tiles add
a step for the rows' head/tail elements.
"""
from __future__ import annotations

from tvm.script import tirx as T

from psa_tvm.config import OpConfig


def _skew(config, W, V):
    isz = config.itemsize
    group_words = V * W * isz // 4
    return ((16 - group_words) % 32) * 4 // isz


def shifted_forward(config: OpConfig, threads: int = 256, row_threads: int = 2, grain: int = 2,
                    name: str = "psa_merge_fwd_shift"):
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V = 16 // config.itemsize
    G = grain * V
    rt = row_threads
    tile_n = threads // rt
    KV = kd // V
    TV = tile_n // V
    rows_step = threads // TV
    assert tile_n % G == 0 and kd % G == 0 and rt % grain == 0 and KV % rt == 0
    assert rows_step % G == 0 and kd % rows_step == 0 and threads % TV == 0
    W = tile_n + 2 * G
    skew = _skew(config, W, V)
    halo_items = G * KV
    edge = kd * G
    edge_steps = (edge + threads - 1) // threads

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
        tile = T.alloc_buffer((kd * W + (kd // V) * skew,), dtype, scope="shared")
        regs = T.alloc_buffer((V,), dtype, scope="local")
        off = T.alloc_buffer((V,), "int32", scope="local")
        nmod: T.let[T.int32] = N % G
        for e in T.unroll(V):
            off[e] = (tx % rt) * (V * W + skew) + e * W + G \
                - (G * G - ((tx % grain) * V + e) * nmod) % G
        n0: T.let[T.int32] = bx * tile_n
        src0: T.let[T.int32] = ((by // 2) * N + n0) * kd
        # kd side: position tx // rt, vectors tx % rt + s*rt
        p: T.let[T.int32] = tx // rt
        if n0 + p < N:
            for s in T.unroll(KV // rt):
                if by % 2 == 0:
                    for e in T.vectorized(V):
                        regs[e] = lo_flat[src0 + p * kd + ((tx % rt) + s * rt) * V + e]
                else:
                    for e in T.vectorized(V):
                        regs[e] = hi_flat[src0 + p * kd + ((tx % rt) + s * rt) * V + e]
                for e in T.unroll(V):
                    tile[s * (rt * (V * W + skew)) + p + off[e]] = regs[e]
        # the halo: G positions past the tile, every vector (threads 0 .. G*KV-1)
        if tx < halo_items:
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
                    tile[(hdv // rt) * (rt * (V * W + skew)) + hp + off[e]] = regs[e]
        T.tvm_storage_sync("shared")
        # row side: vector k = tx % TV of rows tx // TV + s*rows_step (same d % G for every s)
        k: T.let[T.int32] = tx % TV
        d0: T.let[T.int32] = tx // TV
        s_r: T.let[T.int32] = (G * G - (d0 % G) * nmod) % G
        if bx * TV + k < (N - s_r) // V:
            q0: T.let[T.int32] = ((by * kd + d0) * N + s_r) // V + bx * TV + k
            for s in T.unroll(kd // rows_step):
                for e in T.vectorized(V):
                    out_flat[q0 * V + s * (rows_step * N) + e] = tile[
                        (d0 + s * rows_step) * W + ((d0 + s * rows_step) // V) * skew
                        + k * V + G + e]
        if bx == 0 or n0 + tile_n + V > N:
            for step in T.unroll(edge_steps):
                if step * threads + tx < edge:
                    d: T.let[T.int32] = (step * threads + tx) // G
                    e: T.let[T.int32] = (step * threads + tx) % G
                    s_d: T.let[T.int32] = (G * G - (d % G) * nmod) % G
                    row: T.let[T.int32] = d * W + (d // V) * skew + G - s_d
                    n_tail: T.let[T.int32] = s_d + ((N - s_d) // V) * V + e
                    if bx == 0 and e < s_d and e < N:
                        out_flat[(by * kd + d) * N + e] = tile[row + e]
                    if e < V and n_tail < N and n_tail >= n0 and n_tail < n0 + tile_n \
                            and n_tail >= s_d:
                        out_flat[(by * kd + d) * N + n_tail] = tile[row + n_tail - n0]

    return forward


def shifted_backward(config: OpConfig, threads: int = 256, row_threads: int = 2,
                     name: str = "psa_merge_bwd_shift"):
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V = 16 // config.itemsize
    rt = row_threads
    tile_n = threads // rt
    KV = kd // V
    TV = tile_n // V
    rows_step = threads // TV
    assert kd % V == 0 and KV % rt == 0 and rows_step % V == 0 and kd % rows_step == 0
    W = tile_n + 2 * V
    skew = _skew(config, W, V)
    edge = kd * V
    edge_steps = (edge + threads - 1) // threads

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
        tile = T.alloc_buffer((kd * W + (kd // V) * skew,), dtype, scope="shared")
        regs = T.alloc_buffer((V,), dtype, scope="local")
        off = T.alloc_buffer((V,), "int32", scope="local")
        nmod: T.let[T.int32] = N % V
        n0: T.let[T.int32] = bx * tile_n
        # row side: shared column c of row d holds position n0 - V + s_d + c
        k: T.let[T.int32] = tx % TV
        d0: T.let[T.int32] = tx // TV
        s_r: T.let[T.int32] = (V * V - (d0 % V) * nmod) % V
        kmax: T.let[T.int32] = (N - s_r) // V
        if bx * TV + k < kmax:
            q0: T.let[T.int32] = ((by * kd + d0) * N + s_r) // V + bx * TV + k
            for s in T.unroll(kd // rows_step):
                for e in T.vectorized(V):
                    tile[(d0 + s * rows_step) * W + ((d0 + s * rows_step) // V) * skew
                         + k * V + V + e] = g_flat[q0 * V + s * (rows_step * N) + e]
        # the vector before the tile, one per row (threads 0 .. kd-1)
        if tx < kd and bx > 0:
            hs: T.let[T.int32] = (V * V - (tx % V) * nmod) % V
            if bx * TV - 1 < (N - hs) // V:
                for e in T.vectorized(V):
                    tile[tx * W + (tx // V) * skew + e] = g_flat[
                        (((by * kd + tx) * N + hs) // V + bx * TV - 1) * V + e]
        if bx == 0 or n0 + tile_n + V > N:
            for step in T.unroll(edge_steps):
                if step * threads + tx < edge:
                    d: T.let[T.int32] = (step * threads + tx) // V
                    e: T.let[T.int32] = (step * threads + tx) % V
                    s_d: T.let[T.int32] = (V * V - (d % V) * nmod) % V
                    row: T.let[T.int32] = d * W + (d // V) * skew + V - s_d
                    n_tail: T.let[T.int32] = s_d + ((N - s_d) // V) * V + e
                    if bx == 0 and e < s_d and e < N:
                        tile[row + e] = g_flat[(by * kd + d) * N + e]
                    if n_tail < N and n_tail >= n0 and n_tail < n0 + tile_n and n_tail >= s_d:
                        tile[row + n_tail - n0] = g_flat[(by * kd + d) * N + n_tail]
        T.tvm_storage_sync("shared")
        for e in T.unroll(V):
            off[e] = (tx % rt) * (V * W + skew) + e * W + V - (V * V - e * nmod) % V
        p: T.let[T.int32] = tx // rt
        if n0 + p < N:
            dst0: T.let[T.int32] = ((by // 2) * N + n0 + p) * kd
            for s in T.unroll(KV // rt):
                for e in T.unroll(V):
                    regs[e] = tile[s * (rt * (V * W + skew)) + p + off[e]]
                if by % 2 == 0:
                    for e in T.vectorized(V):
                        dlo_flat[dst0 + ((tx % rt) + s * rt) * V + e] = regs[e]
                else:
                    for e in T.vectorized(V):
                        dhi_flat[dst0 + ((tx % rt) + s * rt) * V + e] = regs[e]

    return backward
