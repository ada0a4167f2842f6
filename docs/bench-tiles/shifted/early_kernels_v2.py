"""Odd-N experiment v13b: aligned N-side vectors, halo, unconditional shifted scatter (merge only).

Shared row d holds the tile's positions shifted by s_d (so that the row's 16-byte-aligned global
vectors are 16-byte-aligned in shared memory), with V columns of slack in front. The kd side
moves every loaded position without a per-element test; only the first and last tiles add a
step for each row's head/tail elements (those outside the row's whole aligned vectors).
"""
from __future__ import annotations

from tvm.script import tirx as T

from psa_tvm.config import OpConfig


def _skew(config, W, V):
    """Elements added to the base of every V-row group so that the two row groups a warp's
    lanes touch (row_threads = 2: 16 positions each, 8 or 16 words) are 16 banks apart."""
    isz = config.itemsize
    group_words = V * W * isz // 4
    return ((16 - group_words) % 32) * 4 // isz


def shifted_forward(config: OpConfig, tile_n: int = 112, threads: int = 256,
                    row_threads: int = 2, grain: int = 2, name: str = "psa_merge_fwd_shift"):
    """``grain`` vectors per ownership unit: tiles meet on ``grain*16``-byte boundaries of the
    output, so with grain=2 no 32-byte sector is written by two CTAs."""
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V = 16 // config.itemsize
    G = grain * V
    assert tile_n % G == 0 and kd % G == 0 and row_threads % grain == 0
    P = tile_n + G  # positions loaded: the tile and a halo of G
    W = tile_n + 2 * G  # shared row: G slack + P positions shifted by up to G - 1
    skew = _skew(config, W, V)
    KV = kd // V
    rt = row_threads
    ph1 = P * KV
    ph1_steps = (ph1 + threads - 1) // threads
    TV = tile_n // V
    ph2 = kd * TV
    ph2_steps = (ph2 + threads - 1) // threads
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
            off[e] = e * W + G - (G * G - ((tx % grain) * V + e) * nmod) % G
        for step in T.unroll(ph1_steps):
            if step * threads + tx < ph1:
                i: T.let[T.int32] = step * threads + tx
                dv: T.let[T.int32] = i % rt + (i // (rt * P)) * rt
                p: T.let[T.int32] = (i // rt) % P
                if bx * tile_n + p < N:
                    src: T.let[T.int32] = ((by // 2) * N + bx * tile_n + p) * kd + dv * V
                    if by % 2 == 0:
                        for e in T.vectorized(V):
                            regs[e] = lo_flat[src + e]
                    else:
                        for e in T.vectorized(V):
                            regs[e] = hi_flat[src + e]
                    for e in T.unroll(V):
                        tile[dv * (V * W + skew) + p + off[e]] = regs[e]
        T.tvm_storage_sync("shared")
        for step in T.unroll(ph2_steps):
            if step * threads + tx < ph2:
                j: T.let[T.int32] = step * threads + tx
                d: T.let[T.int32] = j // TV
                k: T.let[T.int32] = j % TV
                s_r: T.let[T.int32] = (G * G - (d % G) * nmod) % G
                if bx * TV + k < (N - s_r) // V:
                    q: T.let[T.int32] = ((by * kd + d) * N + s_r) // V + bx * TV + k
                    for e in T.vectorized(V):
                        out_flat[q * V + e] = tile[d * W + (d // V) * skew + k * V + G + e]
        # Each row's head (n < s_d, first tile) and tail (after its last whole vector; the
        # tiles holding n >= N - V) move element by element.
        if bx == 0 or bx * tile_n + tile_n + V > N:
            for step in T.unroll(edge_steps):
                if step * threads + tx < edge:
                    d: T.let[T.int32] = (step * threads + tx) // G
                    e: T.let[T.int32] = (step * threads + tx) % G
                    s_r: T.let[T.int32] = (G * G - (d % G) * nmod) % G
                    row: T.let[T.int32] = d * W + (d // V) * skew + G - s_r
                    n_head: T.let[T.int32] = e
                    n_tail: T.let[T.int32] = s_r + ((N - s_r) // V) * V + e
                    if bx == 0 and n_head < s_r and n_head < N:
                        out_flat[(by * kd + d) * N + n_head] = tile[row + n_head]
                    if e < V and n_tail < N and n_tail >= bx * tile_n \
                            and n_tail < bx * tile_n + tile_n and n_tail >= s_r:
                        out_flat[(by * kd + d) * N + n_tail] = tile[
                            row + n_tail - bx * tile_n]

    return forward


def shifted_backward(config: OpConfig, tile_n: int = 120, threads: int = 256,
                     row_threads: int = 2, name: str = "psa_merge_bwd_shift"):
    kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
    V = 16 // config.itemsize
    assert tile_n % V == 0 and kd % V == 0
    TV = tile_n // V + 1  # one vector of halo before the tile
    W = tile_n + 2 * V
    skew = _skew(config, W, V)
    KV = kd // V
    rt = row_threads
    ph1 = kd * TV
    ph1_steps = (ph1 + threads - 1) // threads
    ph2 = tile_n * KV
    ph2_steps = (ph2 + threads - 1) // threads
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
        for e in T.unroll(V):
            off[e] = e * W + V - (V * V - e * nmod) % V
        for step in T.unroll(ph1_steps):
            if step * threads + tx < ph1:
                j: T.let[T.int32] = step * threads + tx
                d: T.let[T.int32] = j // TV
                k: T.let[T.int32] = j % TV
                s_r: T.let[T.int32] = (V * V - (d % V) * nmod) % V
                kg: T.let[T.int32] = bx * (TV - 1) - 1 + k
                if kg >= 0 and kg < (N - s_r) // V:
                    q: T.let[T.int32] = ((by * kd + d) * N + s_r) // V + kg
                    for e in T.vectorized(V):
                        tile[d * W + (d // V) * skew + k * V + e] = g_flat[q * V + e]
        if bx == 0 or bx * tile_n + tile_n + V > N:
            for step in T.unroll(edge_steps):
                if step * threads + tx < edge:
                    d: T.let[T.int32] = (step * threads + tx) // V
                    e: T.let[T.int32] = (step * threads + tx) % V
                    s_r: T.let[T.int32] = (V * V - (d % V) * nmod) % V
                    n_head: T.let[T.int32] = e
                    n_tail: T.let[T.int32] = s_r + ((N - s_r) // V) * V + e
                    if bx == 0 and n_head < s_r and n_head < N:
                        tile[d * W + (d // V) * skew + n_head + V - s_r] = g_flat[
                            (by * kd + d) * N + n_head]
                    if n_tail < N and n_tail >= bx * tile_n and n_tail < bx * tile_n + tile_n \
                            and n_tail >= s_r:
                        tile[d * W + (d // V) * skew + n_tail - bx * tile_n + V - s_r] = g_flat[
                            (by * kd + d) * N + n_tail]
        T.tvm_storage_sync("shared")
        for step in T.unroll(ph2_steps):
            if step * threads + tx < ph2:
                i: T.let[T.int32] = step * threads + tx
                dv: T.let[T.int32] = i % rt + (i // (rt * tile_n)) * rt
                p: T.let[T.int32] = (i // rt) % tile_n
                if bx * tile_n + p < N:
                    for e in T.unroll(V):
                        regs[e] = tile[dv * (V * W + skew) + p + off[e]]
                    dst: T.let[T.int32] = ((by // 2) * N + bx * tile_n + p) * kd + dv * V
                    if by % 2 == 0:
                        for e in T.vectorized(V):
                            dlo_flat[dst + e] = regs[e]
                    else:
                        for e in T.vectorized(V):
                            dhi_flat[dst + e] = regs[e]

    return backward
