// Prototype (docs/perf.md v25): the order in which CTAs (and a CTA's rows) write the forward's
// output. Call 1 found the whole-block kernel 0.06 faster at N = 300 than at 296 and 304, the
// reverse of the row kernel: which addresses are written at the same time matters by that
// much. Here the row kernel of stores.cu (mode 0) and the block kernel of tma.cu run with their
// tiles taken in other orders:
//   0 blockIdx order (stream fastest, then tile, then row: the shipped order)
//   1 tiles permuted: tile = blockIdx * P mod G, P an odd prime coprime to the grid size G
//   2 row-major over tiles swapped: consecutive CTAs take the same tile of consecutive rows
//   3 the stream slowest: every lo tile first, then every hi tile
//   4 order 0, each CTA storing its KD rows starting at a row rotated by its blockIdx
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static order.cu -o order.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

// (row, stream, tile-in-row) of CTA `b` in a grid of rows * tpr * 2.
template <int ORDER>
__device__ __forceinline__ void tile_of(int b, int rows, int tpr, int prime, int& r, int& s,
                                        int& bx) {
  const int g = rows * tpr * 2;
  if constexpr (ORDER == 1) b = (int)(((long long)b * prime) % g);
  if constexpr (ORDER == 2) {
    r = b % rows;
    const int rest = b / rows;
    s = rest & 1;
    bx = rest >> 1;
  } else if constexpr (ORDER == 3) {
    s = b / (rows * tpr);
    const int t = b - s * rows * tpr;
    r = t / tpr;
    bx = t - r * tpr;
  } else {
    s = b & 1;
    const int t = b >> 1;
    r = t / tpr;
    bx = t - r * tpr;
  }
}

template <typename E, int T, int THREADS, int ORDER>
__global__ void __launch_bounds__(THREADS) row_fwd(const E* __restrict__ lo,
                                                   const E* __restrict__ hi,
                                                   E* __restrict__ out, int rows, int N, int tpr,
                                                   int prime) {
  constexpr int V = 16 / sizeof(E);
  constexpr int KV = KD / V;
  constexpr int RP = T + V;
  constexpr int GS_RAW = V * RP;
  constexpr int SKEW_BYTES = 128 / KV;
  constexpr int GS =
      GS_RAW + (((SKEW_BYTES - GS_RAW * (int)sizeof(E)) % 128 + 128) % 128) / (int)sizeof(E);
  __shared__ __align__(16) E tile[KV * GS];
  auto row = [](int d) { return (d / V) * GS + (d % V) * RP; };
  int r, s, bx;
  tile_of<ORDER>(blockIdx.x, rows, tpr, prime, r, s, bx);
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
  __syncthreads();
  constexpr int TV = T / V;
  constexpr int STORES = KD * TV / THREADS;
  const int k = threadIdx.x % TV;
  const int d0 = threadIdx.x / TV;
  const int rot = ORDER == 4 ? blockIdx.x % STORES : 0;
  if (k * V < count) {
    E* dst = out + ((size_t)(r * 2 + s) * KD) * N + n0 + k * V;
#pragma unroll
    for (int j = 0; j < STORES; ++j) {
      const int jj = ORDER == 4 ? (j + rot) % STORES : j;
      const int d = d0 + jj * (THREADS / TV);
      *reinterpret_cast<uint4*>(dst + (size_t)d * N) =
          *reinterpret_cast<const uint4*>(&tile[row(d) + k * V]);
    }
  }
}

__device__ __forceinline__ void bulk_store(void* gdst, const void* ssrc, uint32_t bytes) {
  const uint32_t sa = static_cast<uint32_t>(__cvta_generic_to_shared(ssrc));
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               :: "l"(gdst), "r"(sa), "r"(bytes) : "memory");
}

// tma.cu's block_fwd (bulk-copy variant), its blocks taken in the orders above (tpr = 1).
template <typename E, int THREADS, int ORDER>
__global__ void __launch_bounds__(THREADS) block_fwd(const E* __restrict__ lo,
                                                     const E* __restrict__ hi,
                                                     E* __restrict__ out, int rows, int N,
                                                     int prime) {
  constexpr int V = 16 / sizeof(E);
  constexpr int KV = KD / V;
  constexpr int BATCH = 8;
  extern __shared__ __align__(128) unsigned char smem[];
  E* tile = reinterpret_cast<E*>(smem);
  int r, s, bx;
  tile_of<ORDER>(blockIdx.x, rows, 1, prime, r, s, bx);
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
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  constexpr uint32_t PIECES = 8;
  const uint32_t chunk = (bytes / PIECES + 15) / 16 * 16;
  if (threadIdx.x < PIECES) {
    const uint32_t off = threadIdx.x * chunk;
    if (off < bytes) {
      bulk_store(reinterpret_cast<unsigned char*>(dst) + off, smem + off,
                 min(chunk, bytes - off));
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

int coprime_prime(int g) {
  for (int p : {1000003, 999983, 7919, 104729, 15485863}) {
    if (g % p) return p % g == 0 ? 1 : p;
  }
  return 1;
}

template <typename E, int T, int THREADS, int ORDER>
int launch_row(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  if (N % (16 / sizeof(E))) return 1;
  const int tpr = (N + T - 1) / T;
  const int g = rows * tpr * 2;
  row_fwd<E, T, THREADS, ORDER><<<g, THREADS, 0, st>>>((const E*)lo, (const E*)hi, (E*)out,
                                                       rows, N, tpr, coprime_prime(g));
  return (int)cudaGetLastError();
}

template <typename E, int THREADS, int ORDER>
int launch_block(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  const size_t smem = (size_t)KD * N * sizeof(E);
  if (smem > 200 * 1024) return 2;
  static bool configured = false;
  if (!configured) {
    cudaFuncSetAttribute(block_fwd<E, THREADS, ORDER>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    configured = true;
  }
  const int g = rows * 2;
  block_fwd<E, THREADS, ORDER><<<g, THREADS, smem, st>>>((const E*)lo, (const E*)hi, (E*)out,
                                                         rows, N, coprime_prime(g));
  return (int)cudaGetLastError();
}

}  // namespace

#define ROW(E, EN, T, TH, O)                                                                 \
  extern "C" int row_##EN##_T##T##_t##TH##_o##O(const void* a, const void* b, void* o, int r, \
                                               int n, void* s) {                             \
    return launch_row<E, T, TH, O>(a, b, o, r, n, (cudaStream_t)s);                          \
  }
#define ROWS(E, EN, T, TH) \
  ROW(E, EN, T, TH, 0) ROW(E, EN, T, TH, 1) ROW(E, EN, T, TH, 2) ROW(E, EN, T, TH, 3) \
  ROW(E, EN, T, TH, 4)
#define BLOCK(E, EN, TH, O)                                                                  \
  extern "C" int block_##EN##_t##TH##_o##O(const void* a, const void* b, void* o, int r,     \
                                           int n, void* s) {                                 \
    return launch_block<E, TH, O>(a, b, o, r, n, (cudaStream_t)s);                           \
  }
#define BLOCKS(E, EN, TH) \
  BLOCK(E, EN, TH, 0) BLOCK(E, EN, TH, 1) BLOCK(E, EN, TH, 2) BLOCK(E, EN, TH, 3)

ROWS(float, f, 128, 256)
ROWS(float, f, 64, 128)
ROWS(uint16_t, h, 256, 256)
BLOCKS(float, f, 256)
BLOCKS(uint16_t, h, 512)
