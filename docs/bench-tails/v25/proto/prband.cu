// Prototype (docs/perf.md v25, call 8): pblock.cu (call 6) over bands of ROWS whole rows of a
// block instead of whole blocks (ROWS = 32 is pblock.cu), so that the register stage of 16-bit
// rows fits two 512-thread CTAs per SM (64 registers) at N <= 1280 with ROWS = 16.
//
// pblock.cu: a persistent whole-block forward whose next block's
// loads are in flight while the current block is stored. tma.cu's block kernels write each
// block in address order (which does not pay for the row length) but each CTA loads its whole
// block before its first store; here each CTA walks blocks blockIdx.x, + gridDim.x, ... with the
// next block held in registers (L 16-byte vectors per thread) while the shared tile, in the
// output block's layout, is stored with 16-byte stores in address order.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static prband.cu -o prband.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

// Thread t loads vector t % BV of positions t / BV + j * (THREADS / BV): one base address per
// thread and a constant stride per j, so the stage costs registers for the data only.
template <typename E, int ROWS, int THREADS, int L>
__device__ __forceinline__ void load_band(const E* __restrict__ lo, const E* __restrict__ hi,
                                          int unit, int N, uint4 (&regs)[L]) {
  constexpr int V = 16 / sizeof(E);
  constexpr int BV = ROWS / V;  // 16-byte vectors of one position in the band
  constexpr int BANDS = KD / ROWS;
  constexpr int STEP = THREADS / BV;  // positions per j
  const int band = unit % BANDS, t = unit / BANDS, s = t & 1, r = t >> 1;
  const int p0 = threadIdx.x / BV, v = threadIdx.x % BV;
  const uint4* src = reinterpret_cast<const uint4*>(
      (s ? hi : lo) + ((size_t)r * N + p0) * KD + band * ROWS + v * V);
#pragma unroll
  for (int j = 0; j < L; ++j) {
    if (p0 + j * STEP < N) regs[j] = src[(size_t)j * STEP * (KD / V)];
  }
}

template <typename E, int ROWS, int THREADS, int L, int MINB>
__global__ void __launch_bounds__(THREADS, MINB) prband_fwd(const E* __restrict__ lo,
                                                         const E* __restrict__ hi,
                                                         E* __restrict__ out, int N,
                                                         int units) {
  constexpr int V = 16 / sizeof(E);
  constexpr int BV = ROWS / V;
  static_assert(THREADS % BV == 0, "a thread keeps one vector of its positions");
  constexpr int BANDS = KD / ROWS;
  extern __shared__ __align__(128) unsigned char smem[];
  E* tile = reinterpret_cast<E*>(smem);  // [ROWS][N]
  const uint4* tile4 = reinterpret_cast<const uint4*>(smem);
  const int out_vectors = ROWS * N / V;
  int unit = blockIdx.x;
  uint4 regs[L];
  if (unit < units) load_band<E, ROWS, THREADS, L>(lo, hi, unit, N, regs);
  while (unit < units) {
    {
      const int p0 = threadIdx.x / BV, v = threadIdx.x % BV;
      E* col = tile + v * V * N + p0;
#pragma unroll
      for (int j = 0; j < L; ++j) {
        if (p0 + j * (THREADS / BV) < N) {
          const E* e = reinterpret_cast<const E*>(&regs[j]);
#pragma unroll
          for (int q = 0; q < V; ++q) col[q * N + j * (THREADS / BV)] = e[q];
        }
      }
    }
    __syncthreads();
    const int next = unit + gridDim.x;
    if (next < units) load_band<E, ROWS, THREADS, L>(lo, hi, next, N, regs);  // in flight ...
    const int band = unit % BANDS, t = unit / BANDS;
    uint4* dst = reinterpret_cast<uint4*>(out + ((size_t)t * KD + band * ROWS) * N);
    for (int i = threadIdx.x; i < out_vectors; i += THREADS) dst[i] = tile4[i];  // ... during
    __syncthreads();  // the tile is free for the next unit's scatter
    unit = next;
  }
}

template <typename E, int ROWS, int THREADS, int L, int MINB>
int launch_l(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  const size_t smem = (size_t)ROWS * N * sizeof(E);
  auto kernel = prband_fwd<E, ROWS, THREADS, L, MINB>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  int per_sm = 0, sms = 0, dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, smem);
  if (per_sm < 1) return 3;
  const int units = rows * 2 * (KD / ROWS);
  const int grid = per_sm * sms < units ? per_sm * sms : units;
  kernel<<<grid, THREADS, smem, st>>>((const E*)lo, (const E*)hi, (E*)out, N, units);
  return (int)cudaGetLastError();
}

// The smallest L whose L * THREADS vectors hold a band (N * ROWS / V vectors).
template <typename E, int ROWS, int THREADS, int MINB>
int launch(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  constexpr int BV = ROWS / (16 / sizeof(E));
  if ((size_t)ROWS * N * sizeof(E) > 200 * 1024) return 2;
  const int l = (N * BV + THREADS - 1) / THREADS;
  switch (l) {
    case 1: case 2: case 3: case 4: return launch_l<E, ROWS, THREADS, 4, MINB>(lo, hi, out, rows, N, st);
    case 5: return launch_l<E, ROWS, THREADS, 5, MINB>(lo, hi, out, rows, N, st);
    case 6: return launch_l<E, ROWS, THREADS, 6, MINB>(lo, hi, out, rows, N, st);
    case 7: return launch_l<E, ROWS, THREADS, 7, MINB>(lo, hi, out, rows, N, st);
    case 8: return launch_l<E, ROWS, THREADS, 8, MINB>(lo, hi, out, rows, N, st);
    case 9: return launch_l<E, ROWS, THREADS, 9, MINB>(lo, hi, out, rows, N, st);
    case 10: return launch_l<E, ROWS, THREADS, 10, MINB>(lo, hi, out, rows, N, st);
    default: return 2;  // the block does not fit L <= 10 vectors per thread
  }
}

}  // namespace

// MINB: the CTAs per SM that __launch_bounds__ asks registers for.
#define PRBAND(E, EN, R, TH, MB)                                                             \
  extern "C" int prband_fwd_##EN##_r##R##_t##TH##_b##MB(const void* a, const void* b,       \
                                                        void* o, int r, int n, void* s) {   \
    return launch<E, R, TH, MB>(a, b, o, r, n, (cudaStream_t)s);                            \
  }

PRBAND(float, f, 32, 512, 2)
PRBAND(float, f, 16, 512, 2)
PRBAND(float, f, 16, 256, 4)
PRBAND(float, f, 8, 512, 2)
PRBAND(float, f, 8, 256, 4)
PRBAND(uint16_t, h, 32, 512, 2)
PRBAND(uint16_t, h, 16, 512, 2)
PRBAND(uint16_t, h, 16, 256, 4)
PRBAND(uint16_t, h, 8, 512, 2)
PRBAND(uint16_t, h, 8, 256, 4)
// Prepared for call 9, not run in v25 (device time ran out): 256 or 384 threads at 2-3 CTAs
// per SM (85-128 registers), for the bands of N = 1072-1080 that spill at 4 CTAs of 256
// threads (L = 9, 64 registers). The kernels above are the ones call 8 ran.
PRBAND(float, f, 8, 384, 2)
PRBAND(float, f, 16, 384, 2)
PRBAND(uint16_t, h, 16, 256, 3)
PRBAND(uint16_t, h, 16, 384, 2)
PRBAND(uint16_t, h, 8, 384, 2)
