// Prototype (docs/perf.md v25, call 7): pblock.cu with the next unit staged in shared memory
// by cp.async instead of registers, so that no thread holds a block and more CTAs fit an SM.
// A unit is a band of ROWS whole rows of one (row, stream) block (ROWS = 32: the whole block):
//   wait for the unit's cp.async; scatter it from the raw buffer ([N][ROWS], the input's layout)
//   into the output tile ([ROWS][N], the output's layout); issue the next unit's cp.async into
//   the raw buffer; store the tile with 16-byte stores in address order while those loads fly.
// Shared memory: 2 * ROWS * N * itemsize.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static pband.cu -o pband.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

template <typename E, int ROWS, int THREADS>
__device__ __forceinline__ void fetch(const E* __restrict__ lo, const E* __restrict__ hi,
                                      int unit, int N, unsigned char* raw) {
  constexpr int V = 16 / sizeof(E);
  constexpr int BV = ROWS / V;  // 16-byte vectors of one position in the band
  constexpr int BANDS = KD / ROWS;
  const int band = unit % BANDS, t = unit / BANDS, s = t & 1, r = t >> 1;
  const E* src = (s ? hi : lo) + (size_t)r * N * KD + band * ROWS;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(raw));
  for (int i = threadIdx.x; i < N * BV; i += THREADS) {
    const int p = i / BV, v = i % BV;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"(base + 16 * i), "l"(src + (size_t)p * KD + v * V) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

template <typename E, int ROWS, int THREADS>
__global__ void __launch_bounds__(THREADS) pband_fwd(const E* __restrict__ lo,
                                                     const E* __restrict__ hi,
                                                     E* __restrict__ out, int N, int units) {
  constexpr int V = 16 / sizeof(E);
  constexpr int BV = ROWS / V;
  constexpr int BANDS = KD / ROWS;
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* raw = smem;                                   // [N][ROWS]
  E* tile = reinterpret_cast<E*>(smem + (size_t)ROWS * N * sizeof(E));  // [ROWS][N]
  const uint4* raw4 = reinterpret_cast<const uint4*>(raw);
  const uint4* tile4 = reinterpret_cast<const uint4*>(tile);
  int unit = blockIdx.x;
  if (unit < units) fetch<E, ROWS, THREADS>(lo, hi, unit, N, raw);
  while (unit < units) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();  // the raw unit has landed; the tile's previous stores are issued
    for (int i = threadIdx.x; i < N * BV; i += THREADS) {
      const int p = i / BV, v = i % BV;
      const uint4 vec = raw4[i];
      const E* e = reinterpret_cast<const E*>(&vec);
#pragma unroll
      for (int q = 0; q < V; ++q) tile[(v * V + q) * N + p] = e[q];
    }
    __syncthreads();  // the tile is complete; the raw buffer is free
    const int next = unit + gridDim.x;
    if (next < units) fetch<E, ROWS, THREADS>(lo, hi, next, N, raw);  // in flight ...
    const int band = unit % BANDS, t = unit / BANDS;
    uint4* dst = reinterpret_cast<uint4*>(out + ((size_t)t * KD + band * ROWS) * N);
    for (int i = threadIdx.x; i < ROWS * N / V; i += THREADS) dst[i] = tile4[i];  // ... during
    unit = next;
  }
}

template <typename E, int ROWS, int THREADS>
int launch(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  const size_t smem = 2 * (size_t)ROWS * N * sizeof(E);
  if (smem > 220 * 1024) return 2;
  auto kernel = pband_fwd<E, ROWS, THREADS>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024);
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

}  // namespace

#define PBAND(E, EN, R, TH)                                                                 \
  extern "C" int pband_fwd_##EN##_r##R##_t##TH(const void* a, const void* b, void* o, int r, \
                                              int n, void* s) {                             \
    return launch<E, R, TH>(a, b, o, r, n, (cudaStream_t)s);                                \
  }

PBAND(float, f, 32, 256)
PBAND(float, f, 32, 512)
PBAND(float, f, 16, 256)
PBAND(float, f, 8, 256)
PBAND(uint16_t, h, 32, 256)
PBAND(uint16_t, h, 32, 512)
PBAND(uint16_t, h, 16, 256)
PBAND(uint16_t, h, 8, 256)
