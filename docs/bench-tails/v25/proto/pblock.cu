// Prototype (docs/perf.md v25, call 6): a persistent whole-block forward whose next block's
// loads are in flight while the current block is stored. tma.cu's block kernels write each
// block in address order (which does not pay for the row length) but each CTA loads its whole
// block before its first store; here each CTA walks blocks blockIdx.x, + gridDim.x, ... with the
// next block held in registers (L 16-byte vectors per thread) while the shared tile, in the
// output block's layout, is stored with 16-byte stores in address order.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static pblock.cu -o pblock.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

template <typename E, int THREADS, int L>
__device__ __forceinline__ void load_block(const E* __restrict__ lo, const E* __restrict__ hi,
                                           int block, int N, uint4 (&regs)[L]) {
  constexpr int KV = KD / (16 / sizeof(E));
  const int s = block & 1, r = block >> 1;
  const uint4* src = reinterpret_cast<const uint4*>((s ? hi : lo) + (size_t)r * N * KD);
  const int vectors = N * KV;
#pragma unroll
  for (int j = 0; j < L; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i < vectors) regs[j] = src[i];
  }
}

template <typename E, int THREADS, int L, int MINB>
__global__ void __launch_bounds__(THREADS, MINB) pblock_fwd(const E* __restrict__ lo,
                                                         const E* __restrict__ hi,
                                                         E* __restrict__ out, int N,
                                                         int blocks) {
  constexpr int V = 16 / sizeof(E);
  constexpr int KV = KD / V;
  extern __shared__ __align__(128) unsigned char smem[];
  E* tile = reinterpret_cast<E*>(smem);  // [KD][N]
  const uint4* tile4 = reinterpret_cast<const uint4*>(smem);
  const int vectors = N * KV;
  const int out_vectors = KD * N / V;
  int block = blockIdx.x;
  uint4 regs[L];
  if (block < blocks) load_block<E, THREADS, L>(lo, hi, block, N, regs);
  while (block < blocks) {
#pragma unroll
    for (int j = 0; j < L; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < vectors) {
        const int p = i / KV, dv = i % KV;
        const E* e = reinterpret_cast<const E*>(&regs[j]);
#pragma unroll
        for (int q = 0; q < V; ++q) tile[(dv * V + q) * N + p] = e[q];
      }
    }
    __syncthreads();
    const int next = block + gridDim.x;
    if (next < blocks) load_block<E, THREADS, L>(lo, hi, next, N, regs);  // in flight ...
    uint4* dst = reinterpret_cast<uint4*>(out + (size_t)block * KD * N);
    for (int i = threadIdx.x; i < out_vectors; i += THREADS) dst[i] = tile4[i];  // ... during
    __syncthreads();  // the tile is free for the next block's scatter
    block = next;
  }
}

template <typename E, int THREADS, int L, int MINB>
int launch_l(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  const size_t smem = (size_t)KD * N * sizeof(E);
  auto kernel = pblock_fwd<E, THREADS, L, MINB>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  int per_sm = 0, sms = 0, dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, smem);
  if (per_sm < 1) return 3;
  const int blocks = rows * 2;
  const int grid = per_sm * sms < blocks ? per_sm * sms : blocks;
  kernel<<<grid, THREADS, smem, st>>>((const E*)lo, (const E*)hi, (E*)out, N, blocks);
  return (int)cudaGetLastError();
}

// The smallest L whose L * THREADS vectors hold a block (N * KD / V vectors).
template <typename E, int THREADS, int MINB>
int launch(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  constexpr int KV = KD / (16 / sizeof(E));
  if ((size_t)KD * N * sizeof(E) > 200 * 1024) return 2;
  const int l = (N * KV + THREADS - 1) / THREADS;
  switch (l) {
    case 1: case 2: case 3: case 4: return launch_l<E, THREADS, 4, MINB>(lo, hi, out, rows, N, st);
    case 5: return launch_l<E, THREADS, 5, MINB>(lo, hi, out, rows, N, st);
    case 6: return launch_l<E, THREADS, 6, MINB>(lo, hi, out, rows, N, st);
    case 7: return launch_l<E, THREADS, 7, MINB>(lo, hi, out, rows, N, st);
    case 8: return launch_l<E, THREADS, 8, MINB>(lo, hi, out, rows, N, st);
    case 9: return launch_l<E, THREADS, 9, MINB>(lo, hi, out, rows, N, st);
    case 10: return launch_l<E, THREADS, 10, MINB>(lo, hi, out, rows, N, st);
    default: return 2;  // the block does not fit L <= 10 vectors per thread
  }
}

}  // namespace

// MINB: the CTAs per SM that __launch_bounds__ asks registers for (1 or 2).
#define PBLOCK(E, EN, TH, MB)                                                               \
  extern "C" int pblock_fwd_##EN##_t##TH##_b##MB(const void* a, const void* b, void* o,    \
                                                 int r, int n, void* s) {                  \
    return launch<E, TH, MB>(a, b, o, r, n, (cudaStream_t)s);                              \
  }

PBLOCK(float, f, 512, 1)
PBLOCK(float, f, 512, 2)
PBLOCK(float, f, 1024, 1)
PBLOCK(uint16_t, h, 512, 1)
PBLOCK(uint16_t, h, 512, 2)
PBLOCK(uint16_t, h, 1024, 1)
