// Experiment v2 (issue 11, odd N): aligned 16-byte accesses on the N side for any row start.
// Each smem tile row d is written shifted by s_d = (global start of the row's segment) % V, so a
// 16-byte-aligned global chunk maps to a 16-byte-aligned smem chunk: the N side moves whole
// LDS.128/STG.128 (LDG.128/STS.128 backward); only the partial chunks at both ends of a row
// segment move element by element. The kd side is as in the tiled rule with row_threads = 1:
// lanes on consecutive positions, one 16-byte vector each (always aligned, kd % V == 0).
// forward:  lo/hi [B*nh, N, kd] -> out [B, nh, 2, kd, N];  backward: the inverse.
#include <cstdint>
#include <cuda_fp16.h>

constexpr int KD = 32;

template <typename T, int TILE, int THREADS>
__device__ __forceinline__ void fwd_body(const T* __restrict__ lo, const T* __restrict__ hi,
                                         T* __restrict__ out, int N) {
  constexpr int V = 16 / sizeof(T);
  constexpr int ROW = TILE + V;  // one chunk of slack for the shift; rows 16-byte aligned
  constexpr int QV = KD / V;
  constexpr int SLOTS = TILE / V + 1;
  __shared__ __align__(16) T sm[KD * ROW];
  const int n0 = blockIdx.x * TILE;
  const long long slice = blockIdx.y;  // (b*nh + h)*2 + s
  const T* src = ((slice & 1) ? hi : lo) + ((slice >> 1) * N + n0) * (long long)KD;
  const int len = min(TILE, N - n0);
  const long long row0 = slice * KD * (long long)N + n0;  // global index of row d=0's segment
  // kd side: position p = i % TILE (consecutive lanes), vector q = i / TILE.
#pragma unroll
  for (int r = 0; r < TILE * QV / THREADS; ++r) {
    const int i = threadIdx.x + r * THREADS;
    const int p = i % TILE, q = i / TILE;
    if (p < len) {
      const uint4 v = *reinterpret_cast<const uint4*>(src + p * KD + q * V);
      const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int d = q * V + j;
        const int s = (int)((unsigned long long)(row0 + (long long)d * N) & (V - 1));
        sm[d * ROW + s + p] = e[j];
      }
    }
  }
  __syncthreads();
  // N side: slot k of row d is the smem chunk [kV, kV+V) = global [g0 - s + kV, ...).
  for (int i = threadIdx.x; i < KD * SLOTS; i += THREADS) {
    const int d = i / SLOTS, k = i % SLOTS;
    const long long g0 = row0 + (long long)d * N;
    const int s = (int)((unsigned long long)g0 & (V - 1));
    T* dst = out + (g0 - s) + k * V;
    const T* row = sm + d * ROW + k * V;
    const int lo_c = s - k * V, hi_c = s + len - k * V;  // valid chunk columns [lo_c, hi_c)
    if (lo_c <= 0 && hi_c >= V) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(row);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (j >= lo_c && j < hi_c) dst[j] = row[j];
      }
    }
  }
}

template <typename T, int TILE, int THREADS>
__device__ __forceinline__ void bwd_body(const T* __restrict__ g, T* __restrict__ dlo,
                                         T* __restrict__ dhi, int N) {
  constexpr int V = 16 / sizeof(T);
  constexpr int ROW = TILE + V;
  constexpr int QV = KD / V;
  constexpr int SLOTS = TILE / V + 1;
  __shared__ __align__(16) T sm[KD * ROW];
  const int n0 = blockIdx.x * TILE;
  const long long slice = blockIdx.y;
  const int len = min(TILE, N - n0);
  const long long row0 = slice * KD * (long long)N + n0;
  for (int i = threadIdx.x; i < KD * SLOTS; i += THREADS) {
    const int d = i / SLOTS, k = i % SLOTS;
    const long long g0 = row0 + (long long)d * N;
    const int s = (int)((unsigned long long)g0 & (V - 1));
    const T* srow = g + (g0 - s) + k * V;
    T* row = sm + d * ROW + k * V;
    const int lo_c = s - k * V, hi_c = s + len - k * V;
    if (lo_c <= 0 && hi_c >= V) {
      *reinterpret_cast<uint4*>(row) = *reinterpret_cast<const uint4*>(srow);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (j >= lo_c && j < hi_c) row[j] = srow[j];
      }
    }
  }
  __syncthreads();
  T* dst = ((slice & 1) ? dhi : dlo) + ((slice >> 1) * N + n0) * (long long)KD;
#pragma unroll
  for (int r = 0; r < TILE * QV / THREADS; ++r) {
    const int i = threadIdx.x + r * THREADS;
    const int p = i % TILE, q = i / TILE;
    if (p < len) {
      uint4 v;
      T* e = reinterpret_cast<T*>(&v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int d = q * V + j;
        const int s = (int)((unsigned long long)(row0 + (long long)d * N) & (V - 1));
        e[j] = sm[d * ROW + s + p];
      }
      *reinterpret_cast<uint4*>(dst + p * KD + q * V) = v;
    }
  }
}

#define DEFINE(NAME, T, TILE, THREADS)                                                     \
  extern "C" __global__ void __launch_bounds__(THREADS)                                   \
      fwd2_##NAME##_##TILE##_##THREADS(const T* lo, const T* hi, T* out, int N) {         \
    fwd_body<T, TILE, THREADS>(lo, hi, out, N);                                          \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(THREADS)                                   \
      bwd2_##NAME##_##TILE##_##THREADS(const T* g, T* dlo, T* dhi, int N) {               \
    bwd_body<T, TILE, THREADS>(g, dlo, dhi, N);                                          \
  }

DEFINE(f16, __half, 128, 128)
DEFINE(f16, __half, 128, 256)
DEFINE(f16, __half, 64, 128)
DEFINE(f32, float, 64, 128)
DEFINE(f32, float, 64, 256)
DEFINE(f32, float, 128, 128)
