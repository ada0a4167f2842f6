// Register-tile experiment (docs/perf.md, v11): the merge (`attn`) pass as a transpose of
// square register tiles, no shared memory, no barrier.
//
// A thread loads VE vectors of 16 bytes on the side contiguous along kd (VE consecutive
// positions n, VE channels d each), transposes the VE x VE block in registers (PRMT for 16-bit
// types, register renaming for 32-bit ones) and stores VE vectors on the side contiguous along
// N (VE channels, VE positions each). The lanes of a warp are ordered (n-block, d-chunk) with the
// d-chunk fastest: every warp access covers whole 32-byte sectors on both sides.
//
// `reg` kernels need N % VE == 0. `shift` kernels take any N: row d of a (b, h, s) slab of the
// merged tensor starts at element d*N, so the N-side vectors of a thread sit at a per-row shift
// s = (d*N + n) mod VE from 16-byte alignment; the forward composes each aligned output vector
// from its own block and the next lane's (a warp shuffle) and stores it with one STG.128; the
// backward loads aligned vectors and recomposes its block from its own and the next lane's.
// Only the two ends of a warp's row segment move element by element. A warp's blocks are
// consecutive along n across its IT iterations, so the last lane of iteration it pairs with
// the first lane of iteration it+1.
//
// Exports extern "C" fwd_{reg,shift}_{e2,e4}_{THREADS}_{IT} and bwd_* with
// (const void* a, const void* b, void* c, int N) arguments; grid (ceil(N / TILE), B*nh*2),
// TILE = THREADS / (kd / VE) * VE * IT. kd = 32.
#include <cstdint>

namespace {

constexpr unsigned kFull = 0xffffffffu;

struct V4 {
  uint32_t w[4];
};

__device__ __forceinline__ V4 ld16(const char* p) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  return V4{{v.x, v.y, v.z, v.w}};
}

__device__ __forceinline__ void st16(char* p, const V4& v) {
  *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
}

// Element k (compile-time) of a vector of 16 / ES elements.
template <int ES>
__device__ __forceinline__ uint32_t elem(const V4& v, int k) {
  if constexpr (ES == 4) {
    return v.w[k];
  } else {
    return (v.w[k >> 1] >> (16 * (k & 1))) & 0xffffu;
  }
}

template <int ES>
__device__ __forceinline__ void st_elem(char* p, uint32_t value) {
  if constexpr (ES == 4) {
    *reinterpret_cast<uint32_t*>(p) = value;
  } else {
    *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(value);
  }
}

template <int ES>
__device__ __forceinline__ uint32_t ld_elem(const char* p) {
  if constexpr (ES == 4) {
    return __ldg(reinterpret_cast<const uint32_t*>(p));
  } else {
    return __ldg(reinterpret_cast<const unsigned short*>(p));
  }
}

// out[j] = column j of the VE x VE block in[0..VE).
template <int ES>
__device__ __forceinline__ void transpose(const V4* in, V4* out) {
  if constexpr (ES == 4) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int m = 0; m < 4; ++m) out[j].w[m] = in[m].w[j];
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int m = 0; m < 4; ++m)
        out[j].w[m] = __byte_perm(in[2 * m].w[j >> 1], in[2 * m + 1].w[j >> 1],
                                  (j & 1) ? 0x7632 : 0x5410);
  }
}

// Elements [t, t + VE) of the 2*VE elements own ++ next, t in [0, VE] at run time: a barrel
// shifter over words (steps of 4, 2, 1), then a 16-bit funnel for 16-bit types; no local memory.
template <int ES>
__device__ __forceinline__ V4 window(const V4& own, const V4& next, int t) {
  const uint32_t c[8] = {own.w[0], own.w[1], own.w[2], own.w[3],
                         next.w[0], next.w[1], next.w[2], next.w[3]};
  const int q = ES == 4 ? t : (t >> 1);  // whole words
  uint32_t a[8], b[6], z[5];
#pragma unroll
  for (int k = 0; k < 8; ++k) a[k] = (q & 4) ? (k + 4 < 8 ? c[k + 4] : 0u) : c[k];
#pragma unroll
  for (int k = 0; k < 6; ++k) b[k] = (q & 2) ? a[k + 2] : a[k];
#pragma unroll
  for (int k = 0; k < 5; ++k) z[k] = (q & 1) ? b[k + 1] : b[k];
  V4 out;
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    if constexpr (ES == 4) {
      out.w[m] = z[m];
    } else {
      out.w[m] = (t & 1) ? __funnelshift_r(z[m], z[m + 1], 16) : z[m];
    }
  }
  return out;
}

__device__ __forceinline__ V4 shfl_down(const V4& v, int delta) {
  V4 r;
#pragma unroll
  for (int m = 0; m < 4; ++m) r.w[m] = __shfl_down_sync(kFull, v.w[m], delta);
  return r;
}

__device__ __forceinline__ V4 shfl_idx(const V4& v, int lane) {
  V4 r;
#pragma unroll
  for (int m = 0; m < 4; ++m) r.w[m] = __shfl_sync(kFull, v.w[m], lane);
  return r;
}

template <int ES, int KD, int THREADS, int IT>
struct Geometry {
  static constexpr int VE = 16 / ES;        // elements per 16-byte vector
  static constexpr int DC = KD / VE;        // lanes per position (d-chunks)
  static constexpr int NBW = 32 / DC;       // n-blocks per warp per iteration
  static constexpr int WARPS = THREADS / 32;
  static constexpr int SEG = NBW * VE * IT;  // positions per warp
  static constexpr int TILE = SEG * WARPS;   // positions per CTA
};

// ---------------------------------------------------------------------------------------------
// N % VE == 0
template <int ES, int KD, int THREADS, int IT>
__device__ __forceinline__ void fwd_reg(const char* lo, const char* hi, char* out, int N) {
  using G = Geometry<ES, KD, THREADS, IT>;
  const int slice = blockIdx.y, row = slice >> 1;
  const char* src = ((slice & 1) ? hi : lo) + (int64_t)row * N * KD * ES;
  char* dst = out + (int64_t)slice * KD * N * ES;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dc = lane % G::DC, nb = lane / G::DC;
  const int n0 = blockIdx.x * G::TILE + warp * G::SEG;
  V4 v[IT][G::VE];
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int n = n0 + (it * G::NBW + nb) * G::VE;
    if (n < N) {
#pragma unroll
      for (int i = 0; i < G::VE; ++i)
        v[it][i] = ld16(src + ((int64_t)(n + i) * KD + dc * G::VE) * ES);
    }
  }
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int n = n0 + (it * G::NBW + nb) * G::VE;
    if (n < N) {
      V4 t[G::VE];
      transpose<ES>(v[it], t);
#pragma unroll
      for (int j = 0; j < G::VE; ++j) st16(dst + ((int64_t)(dc * G::VE + j) * N + n) * ES, t[j]);
    }
  }
}

template <int ES, int KD, int THREADS, int IT>
__device__ __forceinline__ void bwd_reg(const char* g, char* dlo, char* dhi, int N) {
  using G = Geometry<ES, KD, THREADS, IT>;
  const int slice = blockIdx.y, row = slice >> 1;
  const char* src = g + (int64_t)slice * KD * N * ES;
  char* dst = ((slice & 1) ? dhi : dlo) + (int64_t)row * N * KD * ES;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dc = lane % G::DC, nb = lane / G::DC;
  const int n0 = blockIdx.x * G::TILE + warp * G::SEG;
  V4 v[IT][G::VE];
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int n = n0 + (it * G::NBW + nb) * G::VE;
    if (n < N) {
#pragma unroll
      for (int j = 0; j < G::VE; ++j)
        v[it][j] = ld16(src + ((int64_t)(dc * G::VE + j) * N + n) * ES);
    }
  }
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int n = n0 + (it * G::NBW + nb) * G::VE;
    if (n < N) {
      V4 t[G::VE];
      transpose<ES>(v[it], t);
#pragma unroll
      for (int i = 0; i < G::VE; ++i)
        st16(dst + ((int64_t)(n + i) * KD + dc * G::VE) * ES, t[i]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Any N.
template <int ES, int KD, int THREADS, int IT>
__device__ __forceinline__ void fwd_shift(const char* lo, const char* hi, char* out, int N) {
  using G = Geometry<ES, KD, THREADS, IT>;
  constexpr int VE = G::VE;
  const int slice = blockIdx.y, row = slice >> 1;
  const char* src = ((slice & 1) ? hi : lo) + (int64_t)row * N * KD * ES;
  char* dst = out + (int64_t)slice * KD * N * ES;  // 16-byte aligned: KD * ES % 16 == 0
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dc = lane % G::DC, nb = lane / G::DC;
  const int n0 = blockIdx.x * G::TILE + warp * G::SEG;
  const int seg_end = min(n0 + G::SEG, N);
  V4 t[IT][VE];
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int n = n0 + (it * G::NBW + nb) * VE;
    V4 v[VE];
#pragma unroll
    for (int i = 0; i < VE; ++i) {
      v[i] = V4{{0u, 0u, 0u, 0u}};
      if (n + i < N) v[i] = ld16(src + ((int64_t)(n + i) * KD + dc * VE) * ES);
    }
    transpose<ES>(v, t[it]);
  }
#pragma unroll
  for (int j = 0; j < VE; ++j) {
    const int d = dc * VE + j;
    const int64_t rowbase = (int64_t)d * N;
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int n = n0 + (it * G::NBW + nb) * VE;
      const V4& own = t[it][j];
      V4 next = shfl_down(own, G::DC);
      if (it + 1 < IT) {
        const V4 first = shfl_idx(t[it + 1 < IT ? it + 1 : it][j], dc);
        if (nb == G::NBW - 1) next = first;
      }
      const bool last_block = (it == IT - 1) && (nb == G::NBW - 1);
      const int s = (int)((rowbase + n) % VE);
      if (n >= seg_end) continue;
      char* base = dst + (rowbase + n) * ES;
      if (s == 0) {
        if (n + VE <= seg_end) {
          st16(base, own);
        } else {
#pragma unroll
          for (int k = 0; k < VE; ++k)
            if (n + k < seg_end) st_elem<ES>(base + k * ES, elem<ES>(own, k));
        }
        continue;
      }
      // head: [n, n + VE - s) by the segment's first block only
      if (n == n0) {
#pragma unroll
        for (int k = 0; k < VE; ++k)
          if (k < VE - s && n + k < seg_end) st_elem<ES>(base + k * ES, elem<ES>(own, k));
      }
      // aligned vector [n + VE - s, n + 2VE - s): own's last s, next's first VE - s
      const V4 w = window<ES>(own, next, VE - s);
      char* abase = base + (VE - s) * ES;
      const int a = n + VE - s;
      if (!last_block && a + VE <= seg_end) {
        st16(abase, w);
      } else {
#pragma unroll
        for (int k = 0; k < VE; ++k) {
          const bool from_own = k < s;
          if (a + k < seg_end && (from_own || !last_block))
            st_elem<ES>(abase + k * ES, elem<ES>(w, k));
        }
      }
    }
  }
}

template <int ES, int KD, int THREADS, int IT>
__device__ __forceinline__ void bwd_shift(const char* g, char* dlo, char* dhi, int N) {
  using G = Geometry<ES, KD, THREADS, IT>;
  constexpr int VE = G::VE;
  const int slice = blockIdx.y, row = slice >> 1;
  const char* src = g + (int64_t)slice * KD * N * ES;
  char* dst = ((slice & 1) ? dhi : dlo) + (int64_t)row * N * KD * ES;
  const int64_t total = (int64_t)gridDim.y * KD * N;  // elements of g
  const int64_t slab = (int64_t)slice * KD * N;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dc = lane % G::DC, nb = lane / G::DC;
  const int n0 = blockIdx.x * G::TILE + warp * G::SEG;
  V4 v[IT][VE];
#pragma unroll
  for (int j = 0; j < VE; ++j) {
    const int64_t rowbase = (int64_t)(dc * VE + j) * N;
    V4 a[IT];
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int n = n0 + (it * G::NBW + nb) * VE;
      const int64_t g0 = slab + rowbase + n;  // element index in g
      const int64_t floor = g0 - (g0 % VE);
      a[it] = V4{{0u, 0u, 0u, 0u}};
      // the lane before needs this vector when it holds any element of the row: floor < N
      if (floor - slab - rowbase < N && n < n0 + G::SEG) {
        if (floor + VE <= total) {
          a[it] = ld16(src - slab * ES + floor * ES);
        } else {
          uint32_t e[VE];
#pragma unroll
          for (int k = 0; k < VE; ++k)
            e[k] = floor + k < total ? ld_elem<ES>(src - slab * ES + (floor + k) * ES) : 0u;
#pragma unroll
          for (int m = 0; m < 4; ++m)
            a[it].w[m] = ES == 4 ? e[m] : (e[2 * m] | (e[2 * m + 1] << 16));
        }
      }
    }
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int n = n0 + (it * G::NBW + nb) * VE;
      const int64_t g0 = slab + rowbase + n;
      const int s = (int)(g0 % VE);
      V4 next = shfl_down(a[it], G::DC);
      if (it + 1 < IT) {
        const V4 first = shfl_idx(a[it + 1 < IT ? it + 1 : it], dc);
        if (nb == G::NBW - 1) next = first;
      }
      const bool last_block = (it == IT - 1) && (nb == G::NBW - 1);
      if (last_block && s != 0 && n < N) {  // the vector after the segment: load it here
        const int64_t after = g0 - s + VE;
        if (after + VE <= total) {
          next = ld16(src - slab * ES + after * ES);
        } else {
          uint32_t e[VE];
#pragma unroll
          for (int k = 0; k < VE; ++k)
            e[k] = after + k < total ? ld_elem<ES>(src - slab * ES + (after + k) * ES) : 0u;
#pragma unroll
          for (int m = 0; m < 4; ++m)
            next.w[m] = ES == 4 ? e[m] : (e[2 * m] | (e[2 * m + 1] << 16));
        }
      }
      v[it][j] = s == 0 ? a[it] : window<ES>(a[it], next, s);
    }
  }
#pragma unroll
  for (int it = 0; it < IT; ++it) {
    const int n = n0 + (it * G::NBW + nb) * VE;
    V4 t[VE];
    transpose<ES>(v[it], t);
#pragma unroll
    for (int i = 0; i < VE; ++i)
      if (n + i < N) st16(dst + ((int64_t)(n + i) * KD + dc * VE) * ES, t[i]);
  }
}

}  // namespace

#define KD 32
#define DEFINE(ES, THREADS, IT)                                                                  \
  extern "C" __global__ void __launch_bounds__(THREADS)                                          \
      fwd_reg_e##ES##_##THREADS##_##IT(const void* a, const void* b, void* c, int N) {           \
    fwd_reg<ES, KD, THREADS, IT>((const char*)a, (const char*)b, (char*)c, N);                   \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS)                                          \
      bwd_reg_e##ES##_##THREADS##_##IT(const void* a, const void* b, void* c, int N) {           \
    bwd_reg<ES, KD, THREADS, IT>((const char*)a, (char*)b, (char*)c, N);                         \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS)                                          \
      fwd_shift_e##ES##_##THREADS##_##IT(const void* a, const void* b, void* c, int N) {         \
    fwd_shift<ES, KD, THREADS, IT>((const char*)a, (const char*)b, (char*)c, N);                 \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS)                                          \
      bwd_shift_e##ES##_##THREADS##_##IT(const void* a, const void* b, void* c, int N) {         \
    bwd_shift<ES, KD, THREADS, IT>((const char*)a, (char*)b, (char*)c, N);                       \
  }

DEFINE(2, 128, 1)
DEFINE(2, 128, 2)
DEFINE(2, 256, 1)
DEFINE(2, 256, 2)
DEFINE(2, 128, 4)
DEFINE(4, 128, 1)
DEFINE(4, 128, 2)
DEFINE(4, 256, 1)
DEFINE(4, 256, 2)
DEFINE(4, 128, 4)

// ---------------------------------------------------------------------------------------------
// Slab kernels: one CTA per (slice, group of G channels with G * ES = 32 bytes) moves every
// position. The merged side of a group is G whole rows of N, i.e. G*N contiguous elements,
// 16-byte aligned for ANY N (G*N*ES = 32N bytes per group): staged in shared memory as the
// flat [G, N] block, it moves with aligned 16-byte vectors whatever N is. The lo/hi side moves
// one 32-byte sector per position (two 16-byte vectors). Shared memory: 32*N bytes.
namespace {
// G rows per CTA: 32 / ES (one 32-byte sector per position) or 16 / ES (half a sector; twice the
// CTAs, half the shared memory). BULK: the forward's store is one cp.async.bulk of the flat block.
template <int ES, int KDIM, int THREADS, int G, bool BULK>
__device__ __forceinline__ void fwd_slab(const char* lo, const char* hi, char* out, int N) {
  constexpr int VE = 16 / ES, PIECES = G / VE;  // 16-byte pieces per position
  extern __shared__ uint4 smem_raw[];
  char* sm = reinterpret_cast<char*>(smem_raw);
  const int slice = blockIdx.y, row = slice >> 1, grp = blockIdx.x;
  const char* src = ((slice & 1) ? hi : lo) + ((int64_t)row * N * KDIM + grp * G) * ES;
  char* dst = out + ((int64_t)slice * KDIM + grp * G) * N * ES;
#pragma unroll 4
  for (int p = threadIdx.x; p < PIECES * N; p += THREADS) {
    const int half = PIECES == 1 ? 0 : (p & 1), n = PIECES == 1 ? p : (p >> 1);
    const V4 v = ld16(src + ((int64_t)n * KDIM + half * VE) * ES);
#pragma unroll
    for (int k = 0; k < VE; ++k) {
      const uint32_t e = elem<ES>(v, k);
      if constexpr (ES == 4) {
        reinterpret_cast<uint32_t*>(sm)[(half * VE + k) * N + n] = e;
      } else {
        reinterpret_cast<uint16_t*>(sm)[(half * VE + k) * N + n] = static_cast<uint16_t>(e);
      }
    }
  }
  if constexpr (BULK) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
      const unsigned bytes = static_cast<unsigned>(G * N * ES);  // a multiple of 16
      const unsigned saddr = static_cast<unsigned>(__cvta_generic_to_shared(sm));
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   :: "l"(dst), "r"(saddr), "r"(bytes) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
  } else {
    __syncthreads();
    const int vectors = G * N / VE;  // G*N*ES = 16N or 32N bytes: whole vectors
#pragma unroll 4
    for (int q = threadIdx.x; q < vectors; q += THREADS) {
      const uint4 v = smem_raw[q];
      *reinterpret_cast<uint4*>(dst + (int64_t)q * 16) = v;
    }
  }
}

template <int ES, int KDIM, int THREADS, int G>
__device__ __forceinline__ void bwd_slab(const char* g, char* dlo, char* dhi, int N) {
  constexpr int VE = 16 / ES, PIECES = G / VE;
  extern __shared__ uint4 smem_raw[];
  char* sm = reinterpret_cast<char*>(smem_raw);
  const int slice = blockIdx.y, row = slice >> 1, grp = blockIdx.x;
  const char* src = g + ((int64_t)slice * KDIM + grp * G) * N * ES;
  char* dst = ((slice & 1) ? dhi : dlo) + ((int64_t)row * N * KDIM + grp * G) * ES;
  const int vectors = G * N / VE;
#pragma unroll 4
  for (int q = threadIdx.x; q < vectors; q += THREADS) {
    smem_raw[q] = __ldg(reinterpret_cast<const uint4*>(src + (int64_t)q * 16));
  }
  __syncthreads();
#pragma unroll 4
  for (int p = threadIdx.x; p < PIECES * N; p += THREADS) {
    const int half = PIECES == 1 ? 0 : (p & 1), n = PIECES == 1 ? p : (p >> 1);
    V4 v;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      if constexpr (ES == 4) {
        v.w[m] = reinterpret_cast<const uint32_t*>(sm)[(half * VE + m) * N + n];
      } else {
        const uint16_t* s16 = reinterpret_cast<const uint16_t*>(sm);
        v.w[m] = s16[(half * VE + 2 * m) * N + n] |
                 (static_cast<uint32_t>(s16[(half * VE + 2 * m + 1) * N + n]) << 16);
      }
    }
    st16(dst + ((int64_t)n * KDIM + half * VE) * ES, v);
  }
}
}  // namespace

#define DEFINE_SLAB(ES, THREADS, G, TAG, BULK)                                                   \
  extern "C" __global__ void __launch_bounds__(THREADS)                                          \
      fwd_slab##TAG##_e##ES##_##THREADS(const void* a, const void* b, void* c, int N) {          \
    fwd_slab<ES, KD, THREADS, G, BULK>((const char*)a, (const char*)b, (char*)c, N);             \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS)                                          \
      bwd_slab##TAG##_e##ES##_##THREADS(const void* a, const void* b, void* c, int N) {          \
    bwd_slab<ES, KD, THREADS, G>((const char*)a, (char*)b, (char*)c, N);                         \
  }

// slab: 32-byte rows per position; slabh: 16-byte (half); slabb: slab with a bulk store
DEFINE_SLAB(2, 128, 16, , false)
DEFINE_SLAB(2, 256, 16, , false)
DEFINE_SLAB(2, 512, 16, , false)
DEFINE_SLAB(4, 128, 8, , false)
DEFINE_SLAB(4, 256, 8, , false)
DEFINE_SLAB(4, 512, 8, , false)
DEFINE_SLAB(2, 128, 8, h, false)
DEFINE_SLAB(2, 256, 8, h, false)
DEFINE_SLAB(4, 128, 4, h, false)
DEFINE_SLAB(4, 256, 4, h, false)
DEFINE_SLAB(2, 256, 16, b, true)
DEFINE_SLAB(2, 512, 16, b, true)
DEFINE_SLAB(4, 256, 8, b, true)
DEFINE_SLAB(4, 512, 8, b, true)

// ---------------------------------------------------------------------------------------------
// Segment kernels: the slab's sides (one 32-byte sector per position on the kd side, G = 32/ES
// rows of the merged tensor) cut along N into segments of T positions, so CTAs are small and
// many. Row r of a segment starts at a per-row offset s_r = (row start) mod VE from the 16-byte
// grid; shared-memory row r holds position n0 + i at index s_r + i, so the aligned vector j of
// the row's segment (global [floor16(start) + j*VE, +VE)) is shared-memory vector j of that row.
// Vectors wholly inside the segment move as one 16-byte access; the (at most two) partial ones
// at the segment's ends element by element (their other elements belong to the next segment).
namespace {
template <int ES, int KDIM, int THREADS, int T>
__device__ __forceinline__ void fwd_seg(const char* lo, const char* hi, char* out, int N) {
  constexpr int VE = 16 / ES, G = 32 / ES, STRIDE = T + VE, SLOTS = T / VE + 1;
  __shared__ uint4 smem_raw[G * STRIDE / VE];
  char* sm = reinterpret_cast<char*>(smem_raw);
  const int slice = blockIdx.y, row = slice >> 1;
  const int grp = blockIdx.x & (KDIM / G - 1), n0 = (blockIdx.x / (KDIM / G)) * T;
  const char* src = ((slice & 1) ? hi : lo) + ((int64_t)row * N * KDIM + grp * G) * ES;
  const int64_t base = ((int64_t)slice * KDIM + grp * G) * N;  // element of row 0 in `out`
#pragma unroll 2
  for (int p = threadIdx.x; p < 2 * T; p += THREADS) {
    const int i = p >> 1, half = p & 1, n = n0 + i;
    if (n >= N) continue;
    const V4 v = ld16(src + ((int64_t)n * KDIM + half * VE) * ES);
#pragma unroll
    for (int k = 0; k < VE; ++k) {
      const int r = half * VE + k;
      const int s = (int)((base + (int64_t)r * N + n0) & (VE - 1));
      const uint32_t e = elem<ES>(v, k);
      if constexpr (ES == 4) {
        reinterpret_cast<uint32_t*>(sm)[r * STRIDE + s + i] = e;
      } else {
        reinterpret_cast<uint16_t*>(sm)[r * STRIDE + s + i] = static_cast<uint16_t>(e);
      }
    }
  }
  __syncthreads();
  const int n1 = min(n0 + T, N);
  for (int q = threadIdx.x; q < G * SLOTS; q += THREADS) {
    const int r = q / SLOTS, j = q - r * SLOTS;
    const int64_t start = base + (int64_t)r * N + n0, end = start + (n1 - n0);
    const int64_t a = (start & ~(int64_t)(VE - 1)) + (int64_t)j * VE;
    if (a >= end) continue;
    char* dst = out + a * ES;
    if (a >= start && a + VE <= end) {
      *reinterpret_cast<uint4*>(dst) = smem_raw[(r * STRIDE) / VE + j];
    } else {
#pragma unroll
      for (int k = 0; k < VE; ++k) {
        if (a + k >= start && a + k < end) {
          if constexpr (ES == 4) {
            reinterpret_cast<uint32_t*>(dst)[k] =
                reinterpret_cast<const uint32_t*>(sm)[r * STRIDE + j * VE + k];
          } else {
            reinterpret_cast<uint16_t*>(dst)[k] =
                reinterpret_cast<const uint16_t*>(sm)[r * STRIDE + j * VE + k];
          }
        }
      }
    }
  }
}

template <int ES, int KDIM, int THREADS, int T>
__device__ __forceinline__ void bwd_seg(const char* g, char* dlo, char* dhi, int N) {
  constexpr int VE = 16 / ES, G = 32 / ES, STRIDE = T + VE, SLOTS = T / VE + 1;
  __shared__ uint4 smem_raw[G * STRIDE / VE];
  char* sm = reinterpret_cast<char*>(smem_raw);
  const int slice = blockIdx.y, row = slice >> 1;
  const int grp = blockIdx.x & (KDIM / G - 1), n0 = (blockIdx.x / (KDIM / G)) * T;
  char* dst = ((slice & 1) ? dhi : dlo) + ((int64_t)row * N * KDIM + grp * G) * ES;
  const int64_t base = ((int64_t)slice * KDIM + grp * G) * N;
  const int n1 = min(n0 + T, N);
  for (int q = threadIdx.x; q < G * SLOTS; q += THREADS) {
    const int r = q / SLOTS, j = q - r * SLOTS;
    const int64_t start = base + (int64_t)r * N + n0, end = start + (n1 - n0);
    const int64_t a = (start & ~(int64_t)(VE - 1)) + (int64_t)j * VE;
    if (a >= end) continue;
    const char* src = g + a * ES;
    if (a >= start && a + VE <= end) {
      smem_raw[(r * STRIDE) / VE + j] = __ldg(reinterpret_cast<const uint4*>(src));
    } else {
#pragma unroll
      for (int k = 0; k < VE; ++k) {
        if (a + k >= start && a + k < end) {
          if constexpr (ES == 4) {
            reinterpret_cast<uint32_t*>(sm)[r * STRIDE + j * VE + k] =
                __ldg(reinterpret_cast<const uint32_t*>(src) + k);
          } else {
            reinterpret_cast<uint16_t*>(sm)[r * STRIDE + j * VE + k] =
                __ldg(reinterpret_cast<const unsigned short*>(src) + k);
          }
        }
      }
    }
  }
  __syncthreads();
#pragma unroll 2
  for (int p = threadIdx.x; p < 2 * T; p += THREADS) {
    const int i = p >> 1, half = p & 1, n = n0 + i;
    if (n >= N) continue;
    uint32_t e[VE];
#pragma unroll
    for (int k = 0; k < VE; ++k) {
      const int r = half * VE + k;
      const int s = (int)((base + (int64_t)r * N + n0) & (VE - 1));
      if constexpr (ES == 4) {
        e[k] = reinterpret_cast<const uint32_t*>(sm)[r * STRIDE + s + i];
      } else {
        e[k] = reinterpret_cast<const uint16_t*>(sm)[r * STRIDE + s + i];
      }
    }
    V4 v;
#pragma unroll
    for (int m = 0; m < 4; ++m) v.w[m] = ES == 4 ? e[m] : (e[2 * m] | (e[2 * m + 1] << 16));
    st16(dst + ((int64_t)n * KDIM + half * VE) * ES, v);
  }
}
}  // namespace

#define DEFINE_SEG(ES, THREADS, T)                                                               \
  extern "C" __global__ void __launch_bounds__(THREADS)                                          \
      fwd_seg_e##ES##_##THREADS##_##T(const void* a, const void* b, void* c, int N) {            \
    fwd_seg<ES, KD, THREADS, T>((const char*)a, (const char*)b, (char*)c, N);                    \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS)                                          \
      bwd_seg_e##ES##_##THREADS##_##T(const void* a, const void* b, void* c, int N) {            \
    bwd_seg<ES, KD, THREADS, T>((const char*)a, (char*)b, (char*)c, N);                          \
  }

DEFINE_SEG(2, 128, 128)
DEFINE_SEG(2, 256, 256)
DEFINE_SEG(2, 128, 64)
DEFINE_SEG(2, 256, 128)
DEFINE_SEG(4, 128, 128)
DEFINE_SEG(4, 256, 256)
DEFINE_SEG(4, 128, 64)
DEFINE_SEG(4, 256, 128)
