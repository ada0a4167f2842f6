// Prototype (docs/perf.md v24): a forward whose every store instruction writes whole 32-byte
// sectors where rows of N elements are 16-byte but not 32-byte aligned (N * itemsize = 16 mod 32:
// float32 N = 300, 16-bit N = 920). Rows starting mid-sector are cut one vector earlier (a halo
// vector before the tile), and the sector shared by an even row's last vector and the next row's
// first one is written by the last tile, both halves in one instruction (the next row's first
// vector loaded as a head). Generic for N % V == 0: at sector-aligned N no row shifts.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static sector.cu -o sector.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

template <typename E, int T, int THREADS>
__global__ void __launch_bounds__(THREADS) fwd_sector(const E* __restrict__ lo,
                                                      const E* __restrict__ hi,
                                                      E* __restrict__ out, int N, int tpr) {
  constexpr int V = 16 / sizeof(E);
  constexpr int KV = KD / V;
  constexpr int COLS = T + V;                 // the halo vector, then the tile
  constexpr int RP = COLS + 16 / sizeof(E);   // padded row
  constexpr int GS_RAW = V * RP;
  constexpr int SKEW_BYTES = 128 / KV;
  constexpr int GS = GS_RAW + (((SKEW_BYTES - GS_RAW * (int)sizeof(E)) % 128 + 128) % 128) / (int)sizeof(E);
  __shared__ __align__(16) E tile[KV * GS];
  __shared__ __align__(16) E head[KD * V];
  auto row = [](int d) { return (d / V) * GS + (d % V) * RP; };
  const int s = blockIdx.x & 1;
  const int t = blockIdx.x >> 1;
  const int r = t / tpr, bx = t - r * tpr;
  const int n0 = bx * T;
  const bool last = n0 + T >= N;
  const bool odd_rows = (N * (int)sizeof(E)) % 32 != 0;  // rows alternate 0 / 16 mod 32
  const E* src = (s ? hi : lo) + (size_t)r * N * KD;
  // Loads: positions n0 - V .. n0 + T - 1 (column c = p - n0 + V).
  constexpr int ITEMS = COLS * KV;
  constexpr int LOADS = (ITEMS + THREADS - 1) / THREADS;
  uint4 regs[LOADS];
#pragma unroll
  for (int j = 0; j < LOADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    const int p = n0 - V + i / KV;
    if (i < ITEMS && p >= 0 && p < N) regs[j] = reinterpret_cast<const uint4*>(src + (size_t)p * KD)[i % KV];
  }
  uint4 hreg;
  const bool loads_head = last && odd_rows && threadIdx.x < V * KV;
  if (loads_head) hreg = reinterpret_cast<const uint4*>(src + (size_t)(threadIdx.x / KV) * KD)[threadIdx.x % KV];
#pragma unroll
  for (int j = 0; j < LOADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    const int c = i / KV, dv = i % KV;
    const int p = n0 - V + c;
    if (i < ITEMS && p >= 0 && p < N) {
      const E* e = reinterpret_cast<const E*>(&regs[j]);
#pragma unroll
      for (int q = 0; q < V; ++q) tile[row(dv * V + q) + c] = e[q];
    }
  }
  if (loads_head) {
    const E* e = reinterpret_cast<const E*>(&hreg);
    const int pp = threadIdx.x / KV, dv = threadIdx.x % KV;
#pragma unroll
    for (int q = 0; q < V; ++q) head[(dv * V + q) * V + pp] = e[q];
  }
  __syncthreads();
  // Stores: row d's segment starts at n0 - shift(d); slot k writes position a_d + k V. A row
  // has exactly T / V slots, so with T / V a multiple of the warp's 32 lanes every warp store
  // covers whole sectors of one row.
  constexpr int SLOTS = T / V;
  constexpr int SITEMS = KD * SLOTS;
  E* dst0 = out + (size_t)(r * 2 + s) * KD * N;
#pragma unroll
  for (int j = 0; j < (SITEMS + THREADS - 1) / THREADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i >= SITEMS) break;
    const int d = i / SLOTS, k = i % SLOTS;
    const bool shifted = odd_rows && (d & 1);
    const int p = n0 - (shifted ? V : 0) + k * V;
    bool mine = p >= 0 && p < N;
    if (shifted && p == 0) mine = false;                        // the boundary step's
    if (odd_rows && !shifted && p == N - V) mine = false;       // likewise
    if (mine) {
      *reinterpret_cast<uint4*>(dst0 + (size_t)d * N + p) =
          *reinterpret_cast<const uint4*>(&tile[row(d) + p - n0 + V]);
    }
  }
  // A shifted row's vector at n0 + T - V belongs to the next tile; the last tile has none.
  if (last && odd_rows && threadIdx.x < KD / 2 && n0 + T - V < N) {
    const int d = 2 * threadIdx.x + 1;
    const int p = n0 + T - V;
    *reinterpret_cast<uint4*>(dst0 + (size_t)d * N + p) =
        *reinterpret_cast<const uint4*>(&tile[row(d) + T]);
  }
  if (last && odd_rows && threadIdx.x < KD) {  // sector (row d end, row d + 1 start), d even
    const int d = threadIdx.x & ~1;
    if (threadIdx.x & 1) {
      uint4 v;
      E* e = reinterpret_cast<E*>(&v);
#pragma unroll
      for (int q = 0; q < V; ++q) e[q] = head[(d + 1) * V + q];
      *reinterpret_cast<uint4*>(dst0 + (size_t)(d + 1) * N) = v;
    } else {
      *reinterpret_cast<uint4*>(dst0 + (size_t)d * N + N - V) =
          *reinterpret_cast<const uint4*>(&tile[row(d) + N - n0]);
    }
  }
}

template <typename E, int T, int THREADS>
int launch(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  if (N % (16 / sizeof(E))) return 1;
  const int tpr = (N + T - 1) / T;
  fwd_sector<E, T, THREADS><<<rows * tpr * 2, THREADS, 0, st>>>(
      (const E*)lo, (const E*)hi, (E*)out, N, tpr);
  return (int)cudaGetLastError();
}

}  // namespace

#define SECTOR(E, EN, T, TH)                                                                  \
  extern "C" int sector_##EN##_T##T##_t##TH(const void* a, const void* b, void* o, int r,     \
                                           int n, void* s) {                                  \
    return launch<E, T, TH>(a, b, o, r, n, (cudaStream_t)s);                                  \
  }

SECTOR(uint16_t, h, 256, 256)
SECTOR(uint16_t, h, 128, 128)
SECTOR(uint16_t, h, 128, 256)
SECTOR(float, f, 128, 256)
SECTOR(float, f, 128, 512)
SECTOR(float, f, 64, 128)
SECTOR(float, f, 256, 512)
