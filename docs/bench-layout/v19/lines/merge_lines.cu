// Line-aligned merge stores (docs/perf.md v19), beside v18's hand-written merge forwards
// (`split*`, `two*`, included from v18's record so that one source holds them). float16,
// N % 8 == 0 assumed (the experiment's shapes).
#include "../../v18/split/merge_split.cu"

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
