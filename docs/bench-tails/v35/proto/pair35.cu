// docs/perf.md v35: the float32 merge forward by thread-block clusters (hand-written probe).
//
// A cluster of C CTAs owns one (bh, half) unit: the unit's source is N x 32 floats, contiguous,
// and its output is 32 merged rows of N floats, contiguous as well. CTA r loads the r-th of C
// contiguous ranges of positions -- whole 128-byte source lines -- into its shared tile, stored
// transposed ([32][P], P odd, so the load's scalar writes meet no bank twice); after a cluster
// barrier it writes the r-th band of 32 / C merged rows in address order, reading each
// element from the tile of the CTA that loaded its position (distributed shared memory). Every
// CTA thus reads whole lines (where v28-v30's 8- and 16-row float32 bands read a quarter or a
// half of each line, and the shifted kernel writes 32 rows' pieces at once) and writes one
// contiguous band. A second cluster barrier keeps each tile alive until its readers are done.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static -Xptxas -v \
//       pair35.cu -o pair35.so
// Launchers: name(lo, hi, out, rows = B * nh, n = N, stream) -> cudaError_t (probe35.py).
#include "cluster35.h"

constexpr int kStoreUnroll = 8;

// VEC: each thread stores float4 (4 scalar tile reads), else one float a lane (coalesced, the
// tile read conflict-free).
template <int C, int T, int MINB, bool VEC>
__global__ void __launch_bounds__(T, MINB)
pair_forward(const float* __restrict__ lo, const float* __restrict__ hi, float* __restrict__ out,
             int n_pos, int chunk, int pitch) {
  extern __shared__ float4 smem4[];
  float* tile = reinterpret_cast<float*>(smem4);
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int unit = blockIdx.x / C;  // bh * 2 + half
  const float* src = ((unit & 1) ? hi : lo) + static_cast<size_t>(unit >> 1) * n_pos * kKd;

  // Load: positions [rank * chunk, min(N, (rank + 1) * chunk)), whole lines, in flight at once.
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
#pragma unroll
    for (int k = 0; k < kLoadUnroll; ++k) {
      const int i = base + k * T + threadIdx.x;
      if (i < vecs) {
        const int p = i >> 3, d = (i & 7) * 4;
        tile[d * pitch + p] = v[k].x;
        tile[(d + 1) * pitch + p] = v[k].y;
        tile[(d + 2) * pitch + p] = v[k].z;
        tile[(d + 3) * pitch + p] = v[k].w;
      }
    }
  }
  cluster.sync();

  // Store: merged rows [rank * 32 / C, (rank + 1) * 32 / C) of the unit, in address order.
  constexpr int kRows = kKd / C;
  const int d0 = rank * kRows;
  float* dst = out + (static_cast<size_t>(unit) * kKd + d0) * n_pos;
  if constexpr (!VEC) {
    const int len = kRows * n_pos;
    const int step_d = T / n_pos, step_p = T % n_pos;
    int d = threadIdx.x / n_pos, p = threadIdx.x % n_pos;  // of element f, band-relative
    for (int f = threadIdx.x; f < len; f += T * kStoreUnroll) {
      float v[kStoreUnroll];
      int dk = d, pk = p;
#pragma unroll
      for (int k = 0; k < kStoreUnroll; ++k) {
        if (f + k * T < len) {
          int owner = 0;
#pragma unroll
          for (int s = 1; s < C; ++s) owner += pk >= s * chunk;
          float* at = tile + (d0 + dk) * pitch + (pk - owner * chunk);
          v[k] = *cluster.map_shared_rank(at, owner);
        }
        dk += step_d; pk += step_p;
        if (pk >= n_pos) { pk -= n_pos; ++dk; }
      }
#pragma unroll
      for (int k = 0; k < kStoreUnroll; ++k)
        if (f + k * T < len) dst[f + k * T] = v[k];
      d = dk; p = pk;
    }
  } else {
    const int len4 = kRows * n_pos / 4;  // kRows % 4 == 0: the band's floats are whole float4s
    float4* dst4 = reinterpret_cast<float4*>(dst);
    for (int q = threadIdx.x; q < len4; q += T * (kStoreUnroll / 2)) {
      float4 v[kStoreUnroll / 2];
#pragma unroll
      for (int k = 0; k < kStoreUnroll / 2; ++k) {
        const int qk = q + k * T;
        if (qk < len4) {
          const int f = qk * 4;
          int dk = f / n_pos, pk = f - dk * n_pos;
          float e[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            int owner = 0;
#pragma unroll
            for (int s = 1; s < C; ++s) owner += pk >= s * chunk;
            float* at = tile + (d0 + dk) * pitch + (pk - owner * chunk);
            e[j] = *cluster.map_shared_rank(at, owner);
            if (++pk == n_pos) { pk = 0; ++dk; }
          }
          v[k] = make_float4(e[0], e[1], e[2], e[3]);
        }
      }
#pragma unroll
      for (int k = 0; k < kStoreUnroll / 2; ++k)
        if (q + k * T < len4) dst4[q + k * T] = v[k];
    }
  }
  cluster.sync();  // the partners may still read this CTA's tile
}

template <int C, int T, int MINB, bool VEC>
static int launch(const void* lo, const void* hi, void* out, int rows, int n_pos, void* stream) {
  if (n_pos < C || (reinterpret_cast<size_t>(out) & 15)) return 2;
  const int chunk = (n_pos + C - 1) / C;
  const int pitch = chunk | 1;  // odd: the load's 32 lanes fall on 32 banks
  const size_t smem = static_cast<size_t>(kKd) * pitch * sizeof(float);
  return launch_clusters(pair_forward<C, T, MINB, VEC>, C, T, rows, smem, stream,
                         static_cast<const float*>(lo), static_cast<const float*>(hi),
                         static_cast<float*>(out), n_pos, chunk, pitch);
}

#define PAIR(C, T, MINB, VEC, TAG)                                                             \
  extern "C" int c35_f_c##C##_t##T##_m##MINB##_##TAG(const void* lo, const void* hi, void* out, \
                                                     int rows, int n, void* stream) {          \
    return launch<C, T, MINB, VEC>(lo, hi, out, rows, n, stream);                              \
  }

PAIR(1, 1024, 1, false, s)
PAIR(2, 1024, 2, false, s)
PAIR(2, 1024, 2, true, v)
PAIR(2, 768, 2, false, s)
PAIR(2, 512, 2, false, s)
PAIR(4, 512, 4, false, s)
PAIR(4, 512, 4, true, v)
PAIR(4, 256, 4, false, s)
PAIR(8, 256, 8, false, s)
