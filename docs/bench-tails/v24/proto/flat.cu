// Prototype (docs/perf.md v24): does the forward lose to the copy at the tails because of its
// part-empty last tiles? The same shared-memory transpose with tiles over each row's positions
// (ROW, as the shipped kernels) or over the flattened positions of all rows (FLAT: a tile may
// straddle two rows, and only the call's last tile is part empty). Both moves are exact
// permutations; the probe checks them bit for bit against torch.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static flat.cu -o proto.so
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

template <int BYTES> struct Vec;
template <> struct Vec<16> { using T = uint4; };
template <> struct Vec<8> { using T = uint2; };
template <> struct Vec<4> { using T = uint32_t; };
template <> struct Vec<2> { using T = uint16_t; };

// Shared tile [KD rows][T positions]: rows padded by 16 bytes, each group of VK rows (one
// kd-side vector scatters into VK rows) skewed so the KD/VK vectors of a position hit other banks.
template <typename E, int T>
struct Layout {
  static constexpr int VK = 16 / sizeof(E);
  static constexpr int KV = KD / VK;
  static constexpr int RP = T + 16 / sizeof(E);
  static constexpr int GS_RAW = VK * RP;
  static constexpr int SKEW_BYTES = 128 / KV;
  static constexpr int GS = GS_RAW + (((SKEW_BYTES - GS_RAW * (int)sizeof(E)) % 128 + 128) % 128) / (int)sizeof(E);
  static constexpr int ELEMS = KV * GS;
  __device__ static int row(int d) { return (d / VK) * GS + (d % VK) * RP; }
};

// Forward: out[r, s, d, n] = (lo, hi)[s][r, n, d], r = b*nh + h, p = r*N + n.
template <typename E, int T, int VN, int THREADS, bool FLAT>
__global__ void __launch_bounds__(THREADS) fwd(const E* __restrict__ lo, const E* __restrict__ hi,
                                               E* __restrict__ out, int P, int N, int tiles_per_row) {
  using L = Layout<E, T>;
  using VKT = typename Vec<16>::T;
  using VNT = typename Vec<VN * sizeof(E)>::T;
  __shared__ __align__(16) E tile[L::ELEMS];
  const int s = blockIdx.x & 1;
  const int t = blockIdx.x >> 1;
  int p0, count;
  if (FLAT) {
    p0 = t * T;
    count = min(T, P - p0);
  } else {
    const int r = t / tiles_per_row, bx = t - r * tiles_per_row;
    p0 = r * N + bx * T;
    count = min(T, N - bx * T);
  }
  const E* src = (s ? hi : lo) + (size_t)p0 * KD;
  constexpr int LOADS = T * L::KV / THREADS;
  static_assert(T * L::KV % THREADS == 0, "loads");
  VKT regs[LOADS];
#pragma unroll
  for (int j = 0; j < LOADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    if (i / L::KV < count) regs[j] = reinterpret_cast<const VKT*>(src)[i];
  }
#pragma unroll
  for (int j = 0; j < LOADS; ++j) {
    const int i = threadIdx.x + j * THREADS;
    const int pl = i / L::KV, dv = i % L::KV;
    if (pl < count) {
      const E* e = reinterpret_cast<const E*>(&regs[j]);
#pragma unroll
      for (int k = 0; k < L::VK; ++k) tile[L::row(dv * L::VK + k) + pl] = e[k];
    }
  }
  __syncthreads();
  constexpr int TVN = T / VN;
  constexpr int STORES = KD * TVN / THREADS;
  static_assert(KD * TVN % THREADS == 0 && THREADS % TVN == 0, "stores");
  const int k = threadIdx.x % TVN;
  const int d0 = threadIdx.x / TVN;
  if (k * VN < count) {
    const int p = p0 + k * VN;
    const int r = p / N;
    const int n = p - r * N;
    E* dst = out + ((size_t)(r * 2 + s) * KD) * N + n;
#pragma unroll
    for (int j = 0; j < STORES; ++j) {
      const int d = d0 + j * (THREADS / TVN);
      *reinterpret_cast<VNT*>(dst + (size_t)d * N) =
          *reinterpret_cast<const VNT*>(&tile[L::row(d) + k * VN]);
    }
  }
}

// Backward: (d_lo, d_hi)[s][r, n, d] = g[r, s, d, n].
template <typename E, int T, int VN, int THREADS, bool FLAT>
__global__ void __launch_bounds__(THREADS) bwd(const E* __restrict__ g, E* __restrict__ dlo,
                                               E* __restrict__ dhi, int P, int N, int tiles_per_row) {
  using L = Layout<E, T>;
  using VKT = typename Vec<16>::T;
  using VNT = typename Vec<VN * sizeof(E)>::T;
  __shared__ __align__(16) E tile[L::ELEMS];
  const int s = blockIdx.x & 1;
  const int t = blockIdx.x >> 1;
  int p0, count;
  if (FLAT) {
    p0 = t * T;
    count = min(T, P - p0);
  } else {
    const int r = t / tiles_per_row, bx = t - r * tiles_per_row;
    p0 = r * N + bx * T;
    count = min(T, N - bx * T);
  }
  constexpr int TVN = T / VN;
  constexpr int LOADS = KD * TVN / THREADS;
  static_assert(KD * TVN % THREADS == 0 && THREADS % TVN == 0, "loads");
  const int k = threadIdx.x % TVN;
  const int d0 = threadIdx.x / TVN;
  VNT regs[LOADS];
  if (k * VN < count) {
    const int p = p0 + k * VN;
    const int r = p / N;
    const int n = p - r * N;
    const E* srcrow = g + ((size_t)(r * 2 + s) * KD) * N + n;
#pragma unroll
    for (int j = 0; j < LOADS; ++j)
      regs[j] = *reinterpret_cast<const VNT*>(srcrow + (size_t)(d0 + j * (THREADS / TVN)) * N);
#pragma unroll
    for (int j = 0; j < LOADS; ++j)
      *reinterpret_cast<VNT*>(&tile[L::row(d0 + j * (THREADS / TVN)) + k * VN]) = regs[j];
  }
  __syncthreads();
  E* dst = (s ? dhi : dlo) + (size_t)p0 * KD;
  constexpr int STORES = T * L::KV / THREADS;
#pragma unroll
  for (int j = 0; j < STORES; ++j) {
    const int i = threadIdx.x + j * THREADS;
    const int pl = i / L::KV, dv = i % L::KV;
    if (pl < count) {
      VKT v;
      E* e = reinterpret_cast<E*>(&v);
#pragma unroll
      for (int q = 0; q < L::VK; ++q) e[q] = tile[L::row(dv * L::VK + q) + pl];
      reinterpret_cast<VKT*>(dst)[i] = v;
    }
  }
}

template <typename E, int T, int VN, int THREADS, bool FLAT>
int launch_fwd(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  if (N % VN) return 1;
  const int P = rows * N;
  const int tpr = (N + T - 1) / T;
  const int tiles = FLAT ? (P + T - 1) / T : rows * tpr;
  fwd<E, T, VN, THREADS, FLAT><<<tiles * 2, THREADS, 0, st>>>(
      (const E*)lo, (const E*)hi, (E*)out, P, N, tpr);
  return (int)cudaGetLastError();
}

template <typename E, int T, int VN, int THREADS, bool FLAT>
int launch_bwd(const void* g, void* dlo, void* dhi, int rows, int N, cudaStream_t st) {
  if (N % VN) return 1;
  const int P = rows * N;
  const int tpr = (N + T - 1) / T;
  const int tiles = FLAT ? (P + T - 1) / T : rows * tpr;
  bwd<E, T, VN, THREADS, FLAT><<<tiles * 2, THREADS, 0, st>>>(
      (const E*)g, (E*)dlo, (E*)dhi, P, N, tpr);
  return (int)cudaGetLastError();
}

}  // namespace

// name: {fwd,bwd}_{h,f}_T{T}_v{VN}_t{THREADS}_{flat,row}; h = 16-bit (bit copies), f = float32.
#define PROTO(E, EN, T, VN, TH)                                                              \
  extern "C" int fwd_##EN##_T##T##_v##VN##_t##TH##_flat(const void* a, const void* b, void* o, \
                                                     int r, int n, void* s) {                \
    return launch_fwd<E, T, VN, TH, true>(a, b, o, r, n, (cudaStream_t)s);                   \
  }                                                                                          \
  extern "C" int fwd_##EN##_T##T##_v##VN##_t##TH##_row(const void* a, const void* b, void* o,  \
                                                    int r, int n, void* s) {                 \
    return launch_fwd<E, T, VN, TH, false>(a, b, o, r, n, (cudaStream_t)s);                  \
  }                                                                                          \
  extern "C" int bwd_##EN##_T##T##_v##VN##_t##TH##_flat(const void* a, void* b, void* o,       \
                                                     int r, int n, void* s) {                \
    return launch_bwd<E, T, VN, TH, true>(a, b, o, r, n, (cudaStream_t)s);                   \
  }                                                                                          \
  extern "C" int bwd_##EN##_T##T##_v##VN##_t##TH##_row(const void* a, void* b, void* o,        \
                                                    int r, int n, void* s) {                 \
    return launch_bwd<E, T, VN, TH, false>(a, b, o, r, n, (cudaStream_t)s);                  \
  }

PROTO(uint16_t, h, 256, 8, 256)
PROTO(uint16_t, h, 128, 8, 128)
PROTO(uint16_t, h, 128, 8, 256)
PROTO(uint16_t, h, 512, 8, 512)
PROTO(uint16_t, h, 256, 4, 256)
PROTO(uint16_t, h, 128, 4, 128)
PROTO(float, f, 128, 4, 256)
PROTO(float, f, 128, 4, 512)
PROTO(float, f, 64, 4, 128)
PROTO(float, f, 256, 4, 256)
PROTO(float, f, 256, 4, 512)
// Tiles fitted to one N (row mode: a row in whole tiles): 16-bit N = 400 (2 x 200, 1 x 400),
// N = 920 (5 x 184, 4 x 232 for 928); float32 N = 300 (3 x 100, 2 x 152, 1 x 300).
PROTO(uint16_t, h, 200, 8, 200)
PROTO(uint16_t, h, 400, 8, 400)
PROTO(uint16_t, h, 184, 8, 184)
PROTO(uint16_t, h, 232, 8, 232)
PROTO(float, f, 100, 4, 200)
PROTO(float, f, 152, 4, 304)
PROTO(float, f, 300, 4, 600)
