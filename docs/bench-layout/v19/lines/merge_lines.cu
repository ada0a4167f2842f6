// Hand-written merge forwards [B, C/32, N, 32] -> [B, C, N] (float16; the merge's lo/hi as
// 32-channel groups), to measure before any TIR whether a CTA that issues all of its loads
// first and then stores its tile in PARTS position slices, one barrier each, beats the
// one-phase tile: the first slice's stores then start while the later slices' loads are still
// in flight (docs/perf.md v18); and line-aligned stores (`line_kernel`, v19). N % 8 == 0
// assumed (the experiment's shapes).
#include <cuda_fp16.h>
#include <stdint.h>

#define SKEWED(row, stride) ((row) * (stride) + ((row) >> 3) * 8)

__device__ __forceinline__ const half* src_at(const half* in, int b, int n, int c, int N, int C) {
  return in + (((size_t)b * (C >> 5) + (c >> 5)) * N + n) * 32 + (c & 31);
}

// 32 channels x T positions per CTA, 256 threads. Load vector f = tid + 256k: position f/4,
// channels (f%4)*8; so load k covers positions 64k .. 64k+63 of the tile. PARTS = 1 is the
// one-phase tile (v17's `tile256`).
template <int T, int PARTS>
__device__ void split_kernel(const half* __restrict__ in, half* __restrict__ out, int N, int C) {
  constexpr int VPOS = 4, LOADS = T * VPOS / 256, PER_PART = LOADS / PARTS;
  constexpr int PART_T = T / PARTS, STORES = 32 * PART_T / 8 / 256;
  static_assert(LOADS % PARTS == 0 && STORES >= 1, "shape");
  __shared__ __align__(16) half tile[32 * (T + 8) + 32];
  const int b = blockIdx.z, c0 = blockIdx.y * 32, n0 = T * blockIdx.x;
  const int tid = threadIdx.x;
  uint4 v[LOADS];
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    int f = tid + 256 * k, n = n0 + f / VPOS;
    if (n < N) v[k] = *(const uint4*)src_at(in, b, n, c0 + (f % VPOS) * 8, N, C);
  }
#pragma unroll
  for (int part = 0; part < PARTS; ++part) {
#pragma unroll
    for (int kk = 0; kk < PER_PART; ++kk) {
      const int k = part * PER_PART + kk;
      int f = tid + 256 * k, p = f / VPOS;
      if (n0 + p < N) {
        const half* h = (const half*)&v[k];
#pragma unroll
        for (int i = 0; i < 8; ++i) tile[SKEWED((f % VPOS) * 8 + i, T + 8) + p] = h[i];
      }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < STORES; ++k) {  // row f/(PART_T/8), its vector f%(PART_T/8)
      int f = tid + 256 * k, row = f / (PART_T / 8), p = part * PART_T + (f % (PART_T / 8)) * 8;
      if (n0 + p < N)
        *(uint4*)(out + ((size_t)b * C + c0 + row) * N + n0 + p) = *(const uint4*)&tile[SKEWED(row, T + 8) + p];
    }
  }
}

// The library's inputs: lo and hi as two tensors [B*nh, N, 32]; CTA (x: tile, y: slice) with
// S_FAST: y = (b*nh + h)*2 + s (the library's order: lo and hi slices alternate), else
// y = s*B*nh + b*nh + h (all lo slices, then all hi ones).
template <int T, bool S_FAST>
__device__ void two_kernel(const half* __restrict__ lo, const half* __restrict__ hi,
                           half* __restrict__ out, int N, int rows) {
  constexpr int VPOS = 4, LOADS = T * VPOS / 256, STORES = 32 * T / 8 / 256;
  __shared__ __align__(16) half tile[32 * (T + 8) + 32];
  const int y = blockIdx.y;
  const int s = S_FAST ? (y & 1) : (y >= rows), row = S_FAST ? (y >> 1) : (y - s * rows);
  const half* in = (s ? hi : lo) + (size_t)row * N * 32;
  half* dst = out + ((size_t)row * 2 + s) * 32 * N;  // merged channels (b*nh + h)*64 + s*32
  const int n0 = T * blockIdx.x, tid = threadIdx.x;
  uint4 v[LOADS];
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    int f = tid + 256 * k, n = n0 + f / VPOS;
    if (n < N) v[k] = *(const uint4*)(in + (size_t)n * 32 + (f % VPOS) * 8);
  }
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    int f = tid + 256 * k, p = f / VPOS;
    if (n0 + p < N) {
      const half* h = (const half*)&v[k];
#pragma unroll
      for (int i = 0; i < 8; ++i) tile[SKEWED((f % VPOS) * 8 + i, T + 8) + p] = h[i];
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < STORES; ++k) {
    int f = tid + 256 * k, r = f / (T / 8), p = (f % (T / 8)) * 8;
    if (n0 + p < N) *(uint4*)(dst + (size_t)r * N + n0 + p) = *(const uint4*)&tile[SKEWED(r, T + 8) + p];
  }
}
extern "C" __global__ void __launch_bounds__(256) two256(const half* lo, const half* hi, half* o, int N, int rows) { two_kernel<256, true>(lo, hi, o, N, rows); }
extern "C" __global__ void __launch_bounds__(256) two256s(const half* lo, const half* hi, half* o, int N, int rows) { two_kernel<256, false>(lo, hi, o, N, rows); }
extern "C" __global__ void __launch_bounds__(256) two128(const half* lo, const half* hi, half* o, int N, int rows) { two_kernel<128, true>(lo, hi, o, N, rows); }


// Line-aligned stores (docs/perf.md v19): tile t of a 32-channel slice writes, for each channel
// row r, the positions [T*t - o_r, T*t + T - o_r) where o_r puts the piece's first byte on a
// 128-byte line of the output (o_r = the row's first element modulo 64, N % 8 == 0 assumed so
// o_r is a multiple of 8). The CTA loads positions [T*t - HALO, T*t + T): the halo covers
// every row's shift. A warp's 512-byte store is then exactly 4 lines; a plain tile's row
// pieces straddle 5 (or 3 for 256 bytes) where rows are not line multiples (40x23: 1840 bytes).
template <int T, int HALO>
__device__ void line_kernel(const half* __restrict__ lo, const half* __restrict__ hi,
                            half* __restrict__ out, int N, int rows) {
  constexpr int TP = T + HALO, VPOS = 4, LOADS = (TP * VPOS + 255) / 256;
  constexpr int STORES = 32 * T / 8 / 256, STRIDE = TP + 8;
  __shared__ __align__(16) half tile[32 * STRIDE + 32];
  const int y = blockIdx.y, s = y & 1, row = y >> 1;
  const half* in = (s ? hi : lo) + (size_t)row * N * 32;
  const size_t first_row = ((size_t)row * 2 + s) * 32;
  half* dst = out + first_row * N;
  const int base = T * (int)blockIdx.x - HALO, tid = threadIdx.x;
  uint4 v[LOADS];
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    int f = tid + 256 * k, n = base + f / VPOS;
    if (f < TP * VPOS && n >= 0 && n < N) v[k] = *(const uint4*)(in + (size_t)n * 32 + (f % VPOS) * 8);
  }
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    int f = tid + 256 * k, p = f / VPOS, n = base + p;
    if (f < TP * VPOS && n >= 0 && n < N) {
      const half* h = (const half*)&v[k];
#pragma unroll
      for (int i = 0; i < 8; ++i) tile[SKEWED((f % VPOS) * 8 + i, STRIDE) + p] = h[i];
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < STORES; ++k) {
    int f = tid + 256 * k, r = f / (T / 8), j = f % (T / 8);
    int o = (int)(((first_row + r) * (size_t)N) & 63);
    int p = T * (int)blockIdx.x - o + 8 * j;
    if (p >= 0 && p < N)
      *(uint4*)(dst + (size_t)r * N + p) = *(const uint4*)&tile[SKEWED(r, STRIDE) + p - base];
  }
}
extern "C" __global__ void __launch_bounds__(256) line256(const half* lo, const half* hi, half* o, int N, int rows) { line_kernel<256, 64>(lo, hi, o, N, rows); }
extern "C" __global__ void __launch_bounds__(256) line512(const half* lo, const half* hi, half* o, int N, int rows) { line_kernel<512, 64>(lo, hi, o, N, rows); }
extern "C" __global__ void __launch_bounds__(256) line128(const half* lo, const half* hi, half* o, int N, int rows) { line_kernel<128, 64>(lo, hi, o, N, rows); }

#define SPLIT(T, P) \
  extern "C" __global__ void __launch_bounds__(256) split##T##x##P(const half* i, half* o, int N, int C, int B) { split_kernel<T, P>(i, o, N, C); }
SPLIT(128, 1)
SPLIT(128, 2)
SPLIT(256, 1)
SPLIT(256, 2)
SPLIT(256, 4)
SPLIT(512, 1)
SPLIT(512, 2)
SPLIT(512, 4)
