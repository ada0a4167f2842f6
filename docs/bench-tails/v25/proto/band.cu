// Prototype (docs/perf.md v25, call 3): "band" kernels, whose CTA owns a contiguous range of the
// merged tensor: ROWS whole rows (d0 .. d0 + ROWS) of one (row, stream) block, all N positions.
//
// Calls 1 and 2 found that a CTA writing its output in address order does not pay for rows of
// N * itemsize = 16 mod 32 bytes (the whole-block kernel was 0.06 faster at N = 300 than at
// 296 and 304), but the whole block (32 rows) per CTA is too coarse: 1.06-1.11x at aligned N.
// A band is 1/2 or 1/4 of that block, its loads all in flight before the scatter:
//   forward : the band's slice of every position (ROWS * itemsize bytes, whole sectors for
//             ROWS = 16) loaded into registers, scattered to a [ROWS][N] shared tile (the
//             band's own layout), then stored in address order with 16-byte stores;
//   backward: the band read in address order into shared memory, each position's ROWS values
//             gathered and stored as whole 16-byte vectors.
// A band starts at ((r * 2 + s) * KD + d0) * N * itemsize bytes: 16-byte aligned for any N when
// ROWS * itemsize >= 16, so odd N needs no shifted schedule.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -shared -Xcompiler -fPIC -cudart static band.cu -o band.so
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int KD = 32;

// CTA b -> (row r, stream s, band). Bands fastest, then the stream, then the row: consecutive
// CTAs write consecutive ranges of the output, as a copy does.
template <int ROWS>
__device__ __forceinline__ void band_of(int b, int& r, int& s, int& band) {
  constexpr int BANDS = KD / ROWS;
  band = b % BANDS;
  const int t = b / BANDS;
  s = t & 1;
  r = t >> 1;
}

template <typename E, int ROWS, int THREADS, int L>
__global__ void __launch_bounds__(THREADS) band_fwd(const E* __restrict__ lo,
                                                    const E* __restrict__ hi,
                                                    E* __restrict__ out, int N) {
  constexpr int V = 16 / sizeof(E);
  constexpr int BV = ROWS / V;  // 16-byte vectors per position in the band
  extern __shared__ __align__(128) unsigned char smem[];
  E* tile = reinterpret_cast<E*>(smem);  // [ROWS][N]
  int r, s, band;
  band_of<ROWS>(blockIdx.x, r, s, band);
  const E* src = (s ? hi : lo) + (size_t)r * N * KD + band * ROWS;
  const int vectors = N * BV;
  for (int base = 0; base < vectors; base += L * THREADS) {
    uint4 regs[L];
#pragma unroll
    for (int j = 0; j < L; ++j) {
      const int i = base + threadIdx.x + j * THREADS;
      if (i < vectors) {
        const int p = i / BV, v = i % BV;
        regs[j] = *reinterpret_cast<const uint4*>(src + (size_t)p * KD + v * V);
      }
    }
#pragma unroll
    for (int j = 0; j < L; ++j) {
      const int i = base + threadIdx.x + j * THREADS;
      if (i < vectors) {
        const int p = i / BV, v = i % BV;
        const E* e = reinterpret_cast<const E*>(&regs[j]);
#pragma unroll
        for (int q = 0; q < V; ++q) tile[(v * V + q) * N + p] = e[q];
      }
    }
  }
  __syncthreads();
  uint4* dst = reinterpret_cast<uint4*>(out + ((size_t)(r * 2 + s) * KD + band * ROWS) * N);
  const uint4* tile4 = reinterpret_cast<const uint4*>(smem);
  const int out_vectors = ROWS * N / V;
  for (int i = threadIdx.x; i < out_vectors; i += THREADS) dst[i] = tile4[i];
}

template <typename E, int ROWS, int THREADS>
__global__ void __launch_bounds__(THREADS) band_bwd(const E* __restrict__ grad,
                                                    E* __restrict__ dlo, E* __restrict__ dhi,
                                                    int N) {
  constexpr int V = 16 / sizeof(E);
  constexpr int BV = ROWS / V;
  extern __shared__ __align__(128) unsigned char smem[];
  const E* tile = reinterpret_cast<const E*>(smem);
  int r, s, band;
  band_of<ROWS>(blockIdx.x, r, s, band);
  const uint4* src =
      reinterpret_cast<const uint4*>(grad + ((size_t)(r * 2 + s) * KD + band * ROWS) * N);
  uint4* tile4 = reinterpret_cast<uint4*>(smem);
  const int in_vectors = ROWS * N / V;
  for (int i = threadIdx.x; i < in_vectors; i += THREADS) tile4[i] = src[i];
  __syncthreads();
  E* dst = (s ? dhi : dlo) + (size_t)r * N * KD + band * ROWS;
  for (int i = threadIdx.x; i < N * BV; i += THREADS) {
    const int p = i / BV, v = i % BV;
    uint4 vec;
    E* e = reinterpret_cast<E*>(&vec);
#pragma unroll
    for (int q = 0; q < V; ++q) e[q] = tile[(v * V + q) * N + p];
    *reinterpret_cast<uint4*>(dst + (size_t)p * KD + v * V) = vec;
  }
}

template <typename K>
void allow_smem(K kernel, bool& done) {
  if (!done) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    done = true;
  }
}

template <typename E, int ROWS, int THREADS, int L>
int launch_fwd(const void* lo, const void* hi, void* out, int rows, int N, cudaStream_t st) {
  const size_t smem = (size_t)ROWS * N * sizeof(E);
  if (smem > 200 * 1024) return 2;
  static bool done = false;
  allow_smem(band_fwd<E, ROWS, THREADS, L>, done);
  band_fwd<E, ROWS, THREADS, L><<<rows * 2 * (KD / ROWS), THREADS, smem, st>>>(
      (const E*)lo, (const E*)hi, (E*)out, N);
  return (int)cudaGetLastError();
}

template <typename E, int ROWS, int THREADS>
int launch_bwd(const void* grad, void* dlo, void* dhi, int rows, int N, cudaStream_t st) {
  const size_t smem = (size_t)ROWS * N * sizeof(E);
  if (smem > 200 * 1024) return 2;
  static bool done = false;
  allow_smem(band_bwd<E, ROWS, THREADS>, done);
  band_bwd<E, ROWS, THREADS><<<rows * 2 * (KD / ROWS), THREADS, smem, st>>>(
      (const E*)grad, (E*)dlo, (E*)dhi, N);
  return (int)cudaGetLastError();
}

}  // namespace

#define FWD(E, EN, R, TH, L)                                                                  \
  extern "C" int band_fwd_##EN##_r##R##_t##TH##_l##L(const void* a, const void* b, void* o,   \
                                                    int r, int n, void* s) {                  \
    return launch_fwd<E, R, TH, L>(a, b, o, r, n, (cudaStream_t)s);                           \
  }
#define BWD(E, EN, R, TH)                                                                     \
  extern "C" int band_bwd_##EN##_r##R##_t##TH(const void* g, void* a, void* b, int r, int n, \
                                             void* s) {                                      \
    return launch_bwd<E, R, TH>(g, a, b, r, n, (cudaStream_t)s);                             \
  }

FWD(float, f, 8, 256, 8)
FWD(float, f, 8, 128, 8)
FWD(float, f, 16, 256, 8)
FWD(float, f, 16, 512, 8)
FWD(float, f, 32, 512, 16)
FWD(uint16_t, h, 8, 256, 8)
FWD(uint16_t, h, 8, 128, 8)
FWD(uint16_t, h, 16, 256, 16)
FWD(uint16_t, h, 16, 512, 8)
FWD(uint16_t, h, 32, 512, 16)
BWD(float, f, 8, 256)
BWD(float, f, 16, 256)
BWD(float, f, 16, 512)
BWD(uint16_t, h, 8, 256)
BWD(uint16_t, h, 16, 256)
BWD(uint16_t, h, 16, 512)
