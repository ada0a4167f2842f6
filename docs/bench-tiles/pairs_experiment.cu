// Experiment (issue 11, odd N, 16-bit types; docs/perf.md v12): the N side at the widest width
// the row start allows, which for 16-bit types and any N is 4 bytes. A merged row segment
// starts at global element g = slice*KD*N + d*N + n0; with sh = g & 1 its elements
// sh, sh+2, ... begin 4-byte-aligned pairs. Shared memory holds element p of row d at column
// p + sh, so those pairs are 4-byte aligned there too (LDS.32/STG.32 forward, LDG.32/STS.32
// backward); at most one element at each end of a segment moves alone (2 bytes). The kd side
// is the tiled rule's: four lanes per position, one 16-byte vector of 8 channels each (a
// position's 64-byte kd row in one warp access; kd rows start 16-byte aligned for any N),
// scattered into / gathered from the shifted columns. Rows of TILE + 2 columns: 4-byte aligned,
// and the rows d, d+8, d+16, d+24 a warp's lanes touch together fall in different banks.
// Today's TVM kernels at odd N move the N side as 2-byte elements (v1).
// forward: lo/hi [B*nh, N, kd] -> out [B, nh, 2, kd, N]; backward: the inverse.
#include <cstdint>

constexpr int KD = 32;
constexpr int V = 8;  // 16-bit elements per 16-byte vector

template <int TILE, int THREADS>
__device__ __forceinline__ void fwd_pairs(const uint16_t* __restrict__ lo,
                                          const uint16_t* __restrict__ hi,
                                          uint16_t* __restrict__ out, int N) {
  constexpr int ROW = TILE + 2;  // + 2 for the shift
  __shared__ __align__(16) uint16_t sm[KD * ROW];
  const int n0 = blockIdx.x * TILE;
  const long long slice = blockIdx.y;  // (b*nh + h)*2 + s
  const uint16_t* src = ((slice & 1) ? hi : lo) + ((slice >> 1) * N + n0) * (long long)KD;
  const int len = min(TILE, N - n0);
  const long long g0 = slice * KD * (long long)N + n0;  // row d=0's segment start
  // kd side: four lanes per position p, lane -> vector q (8 channels)
#pragma unroll
  for (int r = 0; r < TILE * (KD / V) / THREADS; ++r) {
    const int i = threadIdx.x + r * THREADS;
    const int p = i / (KD / V), q = i % (KD / V);
    if (p < len) {
      const uint4 v = *reinterpret_cast<const uint4*>(src + p * KD + q * V);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int d = q * V + j;
        const int sh = (int)(g0 & 1) ^ (d & N & 1);
        sm[d * ROW + p + sh] = (uint16_t)(w[j >> 1] >> (16 * (j & 1)));
      }
    }
  }
  __syncthreads();
  // N side: one warp per row at a time, lane -> pair (columns 2j, 2j+1)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int d = warp; d < KD; d += THREADS / 32) {
    const long long g = g0 + (long long)d * N;
    const int sh = (int)(g & 1);
    uint16_t* dst = out + g;
    for (int j = lane; j < (TILE + 2) / 2; j += 32) {
      const int p = 2 * j - sh;  // element of the pair's first column
      const bool a = p >= 0 && p < len, b = p + 1 < len;
      const uint32_t pair = *reinterpret_cast<const uint32_t*>(&sm[d * ROW + 2 * j]);
      if (a && b) {
        *reinterpret_cast<uint32_t*>(dst + p) = pair;
      } else if (a) {
        dst[p] = (uint16_t)pair;
      } else if (b && p + 1 >= 0) {
        dst[p + 1] = (uint16_t)(pair >> 16);
      }
    }
  }
}

template <int TILE, int THREADS>
__device__ __forceinline__ void bwd_pairs(const uint16_t* __restrict__ g_in,
                                          uint16_t* __restrict__ dlo,
                                          uint16_t* __restrict__ dhi, int N) {
  constexpr int ROW = TILE + 2;
  __shared__ __align__(16) uint16_t sm[KD * ROW];
  const int n0 = blockIdx.x * TILE;
  const long long slice = blockIdx.y;
  uint16_t* dst = ((slice & 1) ? dhi : dlo) + ((slice >> 1) * N + n0) * (long long)KD;
  const int len = min(TILE, N - n0);
  const long long g0 = slice * KD * (long long)N + n0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int d = warp; d < KD; d += THREADS / 32) {
    const long long g = g0 + (long long)d * N;
    const int sh = (int)(g & 1);
    const uint16_t* src = g_in + g;
    for (int j = lane; j < (TILE + 2) / 2; j += 32) {
      const int p = 2 * j - sh;
      const bool a = p >= 0 && p < len, b = p + 1 < len;
      uint32_t pair = 0;
      if (a && b) {
        pair = __ldg(reinterpret_cast<const unsigned int*>(src + p));
      } else if (a) {
        pair = src[p];
      } else if (b && p + 1 >= 0) {
        pair = (uint32_t)src[p + 1] << 16;
      }
      *reinterpret_cast<uint32_t*>(&sm[d * ROW + 2 * j]) = pair;
    }
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < TILE * (KD / V) / THREADS; ++r) {
    const int i = threadIdx.x + r * THREADS;
    const int p = i / (KD / V), q = i % (KD / V);
    if (p < len) {
      uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int d = q * V + j;
        const int sh = (int)(g0 & 1) ^ (d & N & 1);
        w[j >> 1] |= (uint32_t)sm[d * ROW + p + sh] << (16 * (j & 1));
      }
      *reinterpret_cast<uint4*>(dst + p * KD + q * V) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

#define PAIRS(TILE, THREADS)                                                                   \
  extern "C" __global__ void __launch_bounds__(THREADS)                                       \
      fwd_pairs_##TILE##_##THREADS(const uint16_t* lo, const uint16_t* hi, uint16_t* out,     \
                                   int N) {                                                   \
    fwd_pairs<TILE, THREADS>(lo, hi, out, N);                                                 \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(THREADS)                                       \
      bwd_pairs_##TILE##_##THREADS(const uint16_t* g, uint16_t* dlo, uint16_t* dhi, int N) {  \
    bwd_pairs<TILE, THREADS>(g, dlo, dhi, N);                                                 \
  }

PAIRS(64, 128)
PAIRS(64, 256)
PAIRS(128, 128)
PAIRS(128, 256)
