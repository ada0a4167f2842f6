// Prototype (docs/perf.md v26): the backward of v25's register-staged persistent band forward
// (v25/proto/prband.cu). A CTA walks units (row, stream, band of ROWS rows of the merged
// block) blockIdx.x, + gridDim.x, ...; a band of the gradient is ROWS * N contiguous elements
// (16-byte aligned for any N), read in address order, one base address per thread, into
// registers; the next band's loads are in flight while the current band, in shared memory, is
// gathered per position and written as 16-byte kd-side vectors.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static prbwd.cu -o prbwd.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

template <typename E, int ROWS, int THREADS, int L>
__device__ __forceinline__ void load_band(const E* __restrict__ g, int unit, int N,
                                          uint4 (&regs)[L]) {
  constexpr int V = 16 / sizeof(E);
  constexpr int BANDS = KD / ROWS;
  const int band = unit % BANDS, t = unit / BANDS;
  const int vectors = ROWS * N / V;
  const uint4* src = reinterpret_cast<const uint4*>(g + ((size_t)t * KD + band * ROWS) * N);
#pragma unroll
  for (int j = 0; j < L; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i < vectors) regs[j] = src[i];
  }
}

template <typename E, int ROWS, int THREADS, int L, int MINB>
__global__ void __launch_bounds__(THREADS, MINB) prbwd(const E* __restrict__ g,
                                                    E* __restrict__ dlo, E* __restrict__ dhi,
                                                    int N, int units) {
  constexpr int V = 16 / sizeof(E);
  constexpr int BV = ROWS / V;  // kd-side vectors of one position in the band
  static_assert(THREADS % BV == 0, "a thread keeps one vector of its positions");
  constexpr int BANDS = KD / ROWS;
  constexpr int STEP = THREADS / BV;
  extern __shared__ __align__(128) unsigned char smem[];
  uint4* tile4 = reinterpret_cast<uint4*>(smem);
  const E* tile = reinterpret_cast<const E*>(smem);  // [ROWS][N]
  const int vectors = ROWS * N / V;
  int unit = blockIdx.x;
  uint4 regs[L];
  if (unit < units) load_band<E, ROWS, THREADS, L>(g, unit, N, regs);
  const int p0 = threadIdx.x / BV, v = threadIdx.x % BV;
  while (unit < units) {
#pragma unroll
    for (int j = 0; j < L; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < vectors) tile4[i] = regs[j];
    }
    __syncthreads();
    const int next = unit + gridDim.x;
    if (next < units) load_band<E, ROWS, THREADS, L>(g, next, N, regs);  // in flight ...
    const int band = unit % BANDS, t = unit / BANDS, s = t & 1, r = t >> 1;
    uint4* dst = reinterpret_cast<uint4*>((s ? dhi : dlo) + ((size_t)r * N + p0) * KD +
                                          band * ROWS + v * V);
    const E* col = tile + v * V * N + p0;
    for (int p = p0, k = 0; p < N; p += STEP, k += STEP) {  // ... during the gather
      uint4 packed;
      E* e = reinterpret_cast<E*>(&packed);
#pragma unroll
      for (int q = 0; q < V; ++q) e[q] = col[q * N + k];
      dst[(size_t)k * (KD / V)] = packed;
    }
    __syncthreads();  // the tile is free for the next unit
    unit = next;
  }
}

template <typename E, int ROWS, int THREADS, int L, int MINB>
int launch_l(const void* g, void* dlo, void* dhi, int rows, int N, cudaStream_t st) {
  const size_t smem = (size_t)ROWS * N * sizeof(E);
  auto kernel = prbwd<E, ROWS, THREADS, L, MINB>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  int per_sm = 0, sms = 0, dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, smem);
  if (per_sm < 1) return 3;
  const int units = rows * 2 * (KD / ROWS);
  const int grid = per_sm * sms < units ? per_sm * sms : units;
  kernel<<<grid, THREADS, smem, st>>>((const E*)g, (E*)dlo, (E*)dhi, N, units);
  return (int)cudaGetLastError();
}

template <typename E, int ROWS, int THREADS, int MINB>
int launch(const void* g, void* dlo, void* dhi, int rows, int N, cudaStream_t st) {
  constexpr int V = 16 / sizeof(E);
  if ((size_t)ROWS * N * sizeof(E) > 200 * 1024) return 2;
  const int l = (ROWS * N / V + THREADS - 1) / THREADS;
  switch (l) {
    case 1: case 2: case 3: case 4: return launch_l<E, ROWS, THREADS, 4, MINB>(g, dlo, dhi, rows, N, st);
    case 5: return launch_l<E, ROWS, THREADS, 5, MINB>(g, dlo, dhi, rows, N, st);
    case 6: return launch_l<E, ROWS, THREADS, 6, MINB>(g, dlo, dhi, rows, N, st);
    case 7: return launch_l<E, ROWS, THREADS, 7, MINB>(g, dlo, dhi, rows, N, st);
    case 8: return launch_l<E, ROWS, THREADS, 8, MINB>(g, dlo, dhi, rows, N, st);
    case 9: return launch_l<E, ROWS, THREADS, 9, MINB>(g, dlo, dhi, rows, N, st);
    case 10: return launch_l<E, ROWS, THREADS, 10, MINB>(g, dlo, dhi, rows, N, st);
    default: return 2;
  }
}

}  // namespace

#define PRBWD(E, EN, R, TH, MB)                                                              \
  extern "C" int prbwd_##EN##_r##R##_t##TH##_b##MB(const void* g, void* a, void* b, int r,  \
                                                   int n, void* s) {                         \
    return launch<E, R, TH, MB>(g, a, b, r, n, (cudaStream_t)s);                             \
  }

PRBWD(float, f, 32, 512, 2)
PRBWD(float, f, 16, 512, 2)
PRBWD(float, f, 16, 256, 4)
PRBWD(float, f, 8, 256, 4)
PRBWD(uint16_t, h, 32, 512, 2)
PRBWD(uint16_t, h, 16, 512, 2)
PRBWD(uint16_t, h, 16, 256, 4)
PRBWD(uint16_t, h, 16, 384, 2)
PRBWD(uint16_t, h, 8, 256, 4)
PRBWD(uint16_t, h, 8, 512, 2)
