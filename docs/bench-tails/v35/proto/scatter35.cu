// docs/perf.md v35, call 2: the cluster forward with the transpose done on the way in.
//
// As pair35.cu, a cluster of C CTAs owns one (bh, half) unit and CTA r loads the r-th range of
// positions as whole 128-byte source lines. But each element goes straight to the shared tile
// of the CTA that will store it (distributed shared memory stores: the rows d of the unit's
// output are split into C bands of 32 / C rows), at its place in that band's flat output image
// (row pitch N, as in the library's band kernels: N odd keeps the scalar writes off each
// other's banks). After one cluster barrier every CTA's tile is exactly its band of the merged
// tensor, which it copies out as aligned float4s in address order.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static -Xptxas -v \
//       scatter35.cu -o scatter35.so
// Launchers: name(lo, hi, out, rows = B * nh, n = N, stream) -> cudaError_t (probe35.py).
#include "cluster35.h"


template <int C, int T, int MINB>
__global__ void __launch_bounds__(T, MINB)
scatter_forward(const float* __restrict__ lo, const float* __restrict__ hi,
                float* __restrict__ out, int n_pos, int chunk) {
  extern __shared__ float4 smem4[];
  float* tile = reinterpret_cast<float*>(smem4);
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int unit = blockIdx.x / C;  // bh * 2 + half
  const float* src = ((unit & 1) ? hi : lo) + static_cast<size_t>(unit >> 1) * n_pos * kKd;
  constexpr int kRows = kKd / C;           // rows of the unit each CTA stores
  constexpr int kVecsPerBand = kRows / 4;  // float4s of a source line that one band takes

  float* owner_tile[C];
#pragma unroll
  for (int s = 0; s < C; ++s) owner_tile[s] = cluster.map_shared_rank(tile, s);

  // Distributed shared memory may be written only once every CTA of the cluster runs: arrive
  // now, wait after the first loads are issued (call 2's first version skipped this and failed
  // a launch at 32x37x29).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  bool waited = false;
  const int p0 = rank * chunk;
  const int vecs = (min(n_pos, p0 + chunk) - p0) * (kKd / 4);
  const float4* src4 = reinterpret_cast<const float4*>(src + static_cast<size_t>(p0) * kKd);
  for (int base = 0; base < vecs; base += T * kLoadUnroll) {
    float4 v[kLoadUnroll];
#pragma unroll
    for (int k = 0; k < kLoadUnroll; ++k) {
      const int i = base + k * T + threadIdx.x;
      if (i < vecs) v[k] = __ldg(src4 + i);
    }
    if (!waited) {
      asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
      waited = true;
    }
#pragma unroll
    for (int k = 0; k < kLoadUnroll; ++k) {
      const int i = base + k * T + threadIdx.x;
      if (i < vecs) {
        const int c = i & 7;  // float4 of the line: rows 4c..4c+3
        const int owner = c / kVecsPerBand;
        float* at = tile + ((c - owner * kVecsPerBand) * 4) * n_pos + p0 + (i >> 3);
        // owner_tile is indexed by a value the compiler cannot fold: select instead.
        float* win = owner_tile[0];
#pragma unroll
        for (int s = 1; s < C; ++s) win = owner == s ? owner_tile[s] : win;
        win += at - tile;
        win[0] = v[k].x;
        win[n_pos] = v[k].y;
        win[2 * n_pos] = v[k].z;
        win[3 * n_pos] = v[k].w;
      }
    }
  }
  cluster.sync();

  float4* dst4 = reinterpret_cast<float4*>(
      out + (static_cast<size_t>(unit) * kKd + rank * kRows) * n_pos);
  const int len4 = kRows * n_pos / 4;
  for (int q = threadIdx.x; q < len4; q += T) dst4[q] = smem4[q];
  // No second barrier: every remote store into this tile came before the first one.
}

template <int C, int T, int MINB>
static int launch(const void* lo, const void* hi, void* out, int rows, int n_pos, void* stream) {
  if (n_pos < C || (reinterpret_cast<size_t>(out) & 15)) return 2;
  const int chunk = (n_pos + C - 1) / C;
  const size_t smem = static_cast<size_t>(kKd / C) * n_pos * sizeof(float);
  return launch_clusters(scatter_forward<C, T, MINB>, C, T, rows, smem, stream,
                         static_cast<const float*>(lo), static_cast<const float*>(hi),
                         static_cast<float*>(out), n_pos, chunk);
}

#define SCATTER(C, T, MINB)                                                                   \
  extern "C" int d35_f_c##C##_t##T##_m##MINB(const void* lo, const void* hi, void* out,       \
                                             int rows, int n, void* stream) {                 \
    return launch<C, T, MINB>(lo, hi, out, rows, n, stream);                                  \
  }

SCATTER(1, 1024, 1)
SCATTER(2, 1024, 2)
SCATTER(2, 768, 2)
SCATTER(2, 512, 2)
SCATTER(2, 512, 3)
SCATTER(4, 512, 4)
SCATTER(4, 256, 4)
SCATTER(4, 384, 5)
SCATTER(8, 256, 8)
