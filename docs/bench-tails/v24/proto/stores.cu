// Prototype (docs/perf.md v24): the row-tiled forward of flat.cu (16-byte N side) with its
// output stores given other cache hints, to see whether the rows of N * itemsize = 16 mod 32
// bytes lose less at write-back: 0 plain, 1 st.global.cs (streaming), 2 st.global.wt
// (write-through), 3 st.global.cg, 4 L2 evict_first policy, 5 L2 evict_last policy.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static stores.cu -o stores.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

template <int MODE>
__device__ __forceinline__ void store16(uint4* p, uint4 v) {
  if constexpr (MODE == 0) {
    *p = v;
  } else if constexpr (MODE == 1) {
    __stcs(p, v);
  } else if constexpr (MODE == 2) {
    __stwt(p, v);
  } else if constexpr (MODE == 3) {
    __stcg(p, v);
  } else if constexpr (MODE == 4) {
    asm volatile("{\n .reg .b64 pol;\n createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n"
                 " st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, pol;\n}"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  } else {
    asm volatile("{\n .reg .b64 pol;\n createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n"
                 " st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, pol;\n}"
                 :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  }
}

template <typename E, int T, int THREADS, int MODE>
__global__ void __launch_bounds__(THREADS) fwd(const E* __restrict__ lo, const E* __restrict__ hi,
                                               E* __restrict__ out, int N, int tpr) {
  constexpr int V = 16 / sizeof(E);
  constexpr int KV = KD / V;
  constexpr int RP = T + V;
  constexpr int GS_RAW = V * RP;
  constexpr int SKEW_BYTES = 128 / KV;
  constexpr int GS = GS_RAW + (((SKEW_BYTES - GS_RAW * (int)sizeof(E)) % 128 + 128) % 128) / (int)sizeof(E);
  __shared__ __align__(16) E tile[KV * GS];
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
  __syncthreads();
  constexpr int TV = T / V;
  constexpr int STORES = KD * TV / THREADS;
  const int k = threadIdx.x % TV;
  const int d0 = threadIdx.x / TV;
  if (k * V < count) {
    E* dst = out + ((size_t)(r * 2 + s) * KD) * N + n0 + k * V;
#pragma unroll
    for (int j = 0; j < STORES; ++j) {
      const int d = d0 + j * (THREADS / TV);
      store16<MODE>(reinterpret_cast<uint4*>(dst + (size_t)d * N),
                    *reinterpret_cast<const uint4*>(&tile[row(d) + k * V]));
    }
  }
}

template <typename E, int T, int THREADS, int MODE>
int launch(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  if (N % (16 / sizeof(E))) return 1;
  const int tpr = (N + T - 1) / T;
  fwd<E, T, THREADS, MODE><<<rows * tpr * 2, THREADS, 0, st>>>((const E*)lo, (const E*)hi,
                                                               (E*)out, N, tpr);
  return (int)cudaGetLastError();
}

}  // namespace

#define STORES(E, EN, T, TH, M)                                                               \
  extern "C" int store_##EN##_T##T##_t##TH##_m##M(const void* a, const void* b, void* o,      \
                                                  int r, int n, void* s) {                    \
    return launch<E, T, TH, M>(a, b, o, r, n, (cudaStream_t)s);                               \
  }
#define MODES(E, EN, T, TH) \
  STORES(E, EN, T, TH, 0) STORES(E, EN, T, TH, 1) STORES(E, EN, T, TH, 2) \
  STORES(E, EN, T, TH, 3) STORES(E, EN, T, TH, 4) STORES(E, EN, T, TH, 5)

MODES(float, f, 128, 256)
MODES(float, f, 64, 128)
MODES(uint16_t, h, 256, 256)
