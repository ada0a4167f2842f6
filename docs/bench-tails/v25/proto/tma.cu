// Prototype (docs/perf.md v25): forwards whose output leaves the SM through the TMA unit
// (cp.async.bulk, global <- shared) or as one linear stream per CTA, to see whether rows of
// N * itemsize = 16 mod 32 bytes still lose at write-back when L2 holds dirty lines.
//
//   tile_tma  : stores.cu's row tile (T positions x KD rows of one stream), staged in shared
//               memory; each of the KD tile rows leaves as one bulk copy of count * itemsize
//               bytes.
//   block_*   : one CTA per (row, stream) block. The block's output is KD * N contiguous
//               elements, the same layout as the shared tile, so it leaves either as a few
//               bulk copies (block_tma) or as 16-byte stores in address order (block_lin):
//               the write stream of a copy.
//
//   block_bwd : the backward of block_lin: the merged block read in address order into shared
//               memory, each (position, kd vector) gathered from it and stored contiguously.
//
// tile_tma needs N * itemsize % 16 == 0 (bulk copies move 16-byte multiples at 16-byte
// addresses). The block kernels take any N: a block is KD * N elements, so it starts 64-byte
// aligned and is a 16-byte multiple whatever N is (odd N included, where the shipped kernels
// need the shifted schedule).
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static tma.cu -o tma.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

__device__ __forceinline__ void bulk_store(void* gdst, const void* ssrc, uint32_t bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(ssrc));
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               :: "l"(gdst), "r"(s), "r"(bytes) : "memory");
}

__device__ __forceinline__ void bulk_commit_and_wait() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Writes by the generic proxy must be made visible to the async proxy before a bulk copy reads
// them; each writing thread fences, then the CTA synchronizes.
__device__ __forceinline__ void fence_to_async_proxy() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

template <typename E, int T, int THREADS>
__global__ void __launch_bounds__(THREADS) tile_tma(const E* __restrict__ lo,
                                                    const E* __restrict__ hi,
                                                    E* __restrict__ out, int N, int tpr) {
  constexpr int V = 16 / sizeof(E);
  constexpr int KV = KD / V;
  constexpr int RP = T + V;  // tile row pitch: a multiple of V, so every row starts 16-aligned
  constexpr int GS_RAW = V * RP;
  constexpr int SKEW_BYTES = 128 / KV;
  constexpr int GS =
      GS_RAW + (((SKEW_BYTES - GS_RAW * (int)sizeof(E)) % 128 + 128) % 128) / (int)sizeof(E);
  __shared__ __align__(128) E tile[KV * GS];
  auto row = [](int d) { return (d / V) * GS + (d % V) * RP; };
  const int s = blockIdx.x & 1;
  const int t = blockIdx.x >> 1;
  const int r = t / tpr, bx = t - r * tpr;
  const int n0 = bx * T;
  const int count = min(T, N - n0);
  const E* src = (s ? hi : lo) + ((size_t)r * N + n0) * KD;
  constexpr int LOADS = T * KV / THREADS;
  uint4 regs[LOADS];
#pragma unroll
  for (int j = 0; j < LOADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i / KV < count) regs[j] = reinterpret_cast<const uint4*>(src)[i];
  }
#pragma unroll
  for (int j = 0; j < LOADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    const int pl = i / KV, dv = i % KV;
    if (pl < count) {
      const E* e = reinterpret_cast<const E*>(&regs[j]);
#pragma unroll
      for (int q = 0; q < V; ++q) tile[row(dv * V + q) + pl] = e[q];
    }
  }
  fence_to_async_proxy();
  __syncthreads();
  if (threadIdx.x < KD) {
    const int d = threadIdx.x;
    E* dst = out + ((size_t)(r * 2 + s) * KD + d) * N + n0;
    bulk_store(dst, &tile[row(d)], count * (uint32_t)sizeof(E));
    bulk_commit_and_wait();
  }
}

template <typename E, int THREADS, bool TMA>
__global__ void __launch_bounds__(THREADS) block_fwd(const E* __restrict__ lo,
                                                     const E* __restrict__ hi,
                                                     E* __restrict__ out, int N) {
  constexpr int V = 16 / sizeof(E);
  constexpr int KV = KD / V;
  constexpr int BATCH = 8;  // loads in flight per thread before they are scattered
  extern __shared__ __align__(128) unsigned char smem[];
  E* tile = reinterpret_cast<E*>(smem);  // [KD][N]: the output block's own layout
  const int s = blockIdx.x & 1;
  const int r = blockIdx.x >> 1;
  const uint4* src = reinterpret_cast<const uint4*>((s ? hi : lo) + (size_t)r * N * KD);
  const int loads = N * KV;
  for (int base = 0; base < loads; base += BATCH * THREADS) {
    uint4 regs[BATCH];
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = base + threadIdx.x + j * THREADS;
      if (i < loads) regs[j] = src[i];
    }
#pragma unroll
    for (int j = 0; j < BATCH; ++j) {
      const int i = base + threadIdx.x + j * THREADS;
      if (i < loads) {
        const int pl = i / KV, dv = i % KV;
        const E* e = reinterpret_cast<const E*>(&regs[j]);
#pragma unroll
        for (int q = 0; q < V; ++q) tile[(dv * V + q) * N + pl] = e[q];
      }
    }
  }
  E* dst = out + (size_t)(r * 2 + s) * KD * N;
  const uint32_t bytes = KD * N * (uint32_t)sizeof(E);
  if constexpr (TMA) {
    fence_to_async_proxy();
    __syncthreads();
    // Eight bulk copies of 16-byte-multiple chunks, from eight threads of warp 0.
    constexpr uint32_t PIECES = 8;
    const uint32_t chunk = (bytes / PIECES + 15) / 16 * 16;
    if (threadIdx.x < PIECES) {
      const uint32_t off = threadIdx.x * chunk;
      if (off < bytes) {
        bulk_store(reinterpret_cast<unsigned char*>(dst) + off, smem + off,
                   min(chunk, bytes - off));
      }
      bulk_commit_and_wait();
    }
  } else {
    __syncthreads();
    const uint4* tile4 = reinterpret_cast<const uint4*>(smem);
    uint4* dst4 = reinterpret_cast<uint4*>(dst);
    for (int i = threadIdx.x; i < (int)(bytes / 16); i += THREADS) dst4[i] = tile4[i];
  }
}

template <typename E, int THREADS>
__global__ void __launch_bounds__(THREADS) block_bwd(const E* __restrict__ grad,
                                                     E* __restrict__ dlo, E* __restrict__ dhi,
                                                     int N) {
  constexpr int V = 16 / sizeof(E);
  constexpr int KV = KD / V;
  extern __shared__ __align__(128) unsigned char smem[];
  const E* tile = reinterpret_cast<const E*>(smem);
  const int s = blockIdx.x & 1;
  const int r = blockIdx.x >> 1;
  const uint4* src = reinterpret_cast<const uint4*>(grad + (size_t)(r * 2 + s) * KD * N);
  uint4* tile4 = reinterpret_cast<uint4*>(smem);
  const int vectors = KD * N / V;
  for (int i = threadIdx.x; i < vectors; i += THREADS) tile4[i] = src[i];
  __syncthreads();
  uint4* dst = reinterpret_cast<uint4*>((s ? dhi : dlo) + (size_t)r * N * KD);
  for (int i = threadIdx.x; i < N * KV; i += THREADS) {
    const int pl = i / KV, dv = i % KV;
    uint4 v;
    E* e = reinterpret_cast<E*>(&v);
#pragma unroll
    for (int q = 0; q < V; ++q) e[q] = tile[(dv * V + q) * N + pl];
    dst[i] = v;
  }
}

template <typename E, int T, int THREADS>
int launch_tile(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  if ((N * sizeof(E)) % 16) return 1;
  const int tpr = (N + T - 1) / T;
  tile_tma<E, T, THREADS><<<rows * tpr * 2, THREADS, 0, st>>>((const E*)lo, (const E*)hi,
                                                              (E*)out, N, tpr);
  return (int)cudaGetLastError();
}

template <typename E, int THREADS, bool TMA>
int launch_block(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  const size_t smem = (size_t)KD * N * sizeof(E);
  if (smem > 200 * 1024) return 2;
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(block_fwd<E, THREADS, TMA>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         200 * 1024);
    configured = true;
  }
  block_fwd<E, THREADS, TMA><<<rows * 2, THREADS, smem, st>>>((const E*)lo, (const E*)hi,
                                                              (E*)out, N);
  return (int)cudaGetLastError();
}

template <typename E, int THREADS>
int launch_block_bwd(const void* grad, void* dlo, void* dhi, int rows, int N, cudaStream_t st) {
  const size_t smem = (size_t)KD * N * sizeof(E);
  if (smem > 200 * 1024) return 2;
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(block_bwd<E, THREADS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         200 * 1024);
    configured = true;
  }
  block_bwd<E, THREADS><<<rows * 2, THREADS, smem, st>>>((const E*)grad, (E*)dlo, (E*)dhi, N);
  return (int)cudaGetLastError();
}

}  // namespace

#define TILE(E, EN, T, TH)                                                                  \
  extern "C" int tile_tma_##EN##_T##T##_t##TH(const void* a, const void* b, void* o, int r, \
                                             int n, void* s) {                             \
    return launch_tile<E, T, TH>(a, b, o, r, n, (cudaStream_t)s);                          \
  }
#define BLOCK(E, EN, TH, TMA, NAME)                                                          \
  extern "C" int block_##NAME##_##EN##_t##TH(const void* a, const void* b, void* o, int r,  \
                                             int n, void* s) {                              \
    return launch_block<E, TH, TMA>(a, b, o, r, n, (cudaStream_t)s);                        \
  }

TILE(float, f, 128, 256)
TILE(float, f, 64, 128)
TILE(uint16_t, h, 256, 256)
TILE(uint16_t, h, 128, 128)
BLOCK(float, f, 256, true, tma)
BLOCK(float, f, 256, false, lin)
BLOCK(float, f, 512, true, tma)
BLOCK(float, f, 512, false, lin)
BLOCK(uint16_t, h, 256, true, tma)
BLOCK(uint16_t, h, 256, false, lin)
BLOCK(uint16_t, h, 512, true, tma)
BLOCK(uint16_t, h, 512, false, lin)

#define BLOCK_BWD(E, EN, TH)                                                                 \
  extern "C" int block_bwd_##EN##_t##TH(const void* g, void* a, void* b, int r, int n,      \
                                        void* s) {                                          \
    return launch_block_bwd<E, TH>(g, a, b, r, n, (cudaStream_t)s);                         \
  }
BLOCK_BWD(float, f, 256)
BLOCK_BWD(float, f, 512)
BLOCK_BWD(uint16_t, h, 256)
BLOCK_BWD(uint16_t, h, 512)
