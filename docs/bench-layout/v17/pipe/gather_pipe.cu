// Hand-written gathers bnhd -> NCHW, float16, to measure before any TIR what a persistent,
// pipelined CTA and what line-aligned stores with a small halo are worth (docs/perf.md v17).
// Input layouts (template GROUPED): false: [B, N, C] (the qkv gather's packed side),
// true: [B, C/32, N, 32] (the merge's / bnhd streams: 64-byte rows per position and group).
// Output [B, C, N]. N % 8 == 0 and C % 64 == 0 assumed (the experiment's shapes).
#include <cuda_fp16.h>
#include <stdint.h>

template <bool GROUPED>
__device__ __forceinline__ const half* src_at(const half* in, int b, int n, int c, int N, int C) {
  if (GROUPED) return in + (((size_t)b * (C >> 5) + (c >> 5)) * N + n) * 32 + (c & 31);
  return in + ((size_t)b * N + n) * C + c;
}

// ---- tile: one 64-position x 64-channel tile per CTA, loads staged in registers (the library's
// design since v16). 256 threads, 2 loads + 2 stores of 16 bytes per thread.
struct TileIdx { int b, c0, n0; };
__device__ __forceinline__ TileIdx tile_of(int t, int tiles_n, int tiles_c) {
  TileIdx r; r.n0 = (t % tiles_n) * 64; t /= tiles_n; r.c0 = (t % tiles_c) * 64; r.b = t / tiles_c;
  return r;
}

template <bool GROUPED>
__device__ __forceinline__ void tile_load(uint4 (&v)[2], const half* in, TileIdx x, int N, int C) {
  const int t = threadIdx.x;
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // position (t/8)*2+k, channels (t%8)*8 .. +8
    int n = x.n0 + (t >> 3) * 2 + k;
    if (n < N) v[k] = *(const uint4*)src_at<GROUPED>(in, x.b, n, x.c0 + (t & 7) * 8, N, C);
  }
}
// Shared tiles are [channel][position] rows padded to 16-byte multiples (the store phase reads
// 16-byte row vectors), plus a 16-byte skew per group of 8 rows: without it the 8 rows that one
// 16-byte kd-side vector scatters into sit in the same banks (8-way conflicts; run 2 of this
// experiment had them, run 3 does not).
#define SKEWED(row, stride) ((row) * (stride) + ((row) >> 3) * 8)
constexpr int TILE_STRIDE = 72, TILE_ELEMS = 64 * TILE_STRIDE + 8 * 8;
__device__ __forceinline__ void tile_put(half* tile, const uint4 (&v)[2]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const half* h = (const half*)&v[k];
    int p = (t >> 3) * 2 + k;
#pragma unroll
    for (int i = 0; i < 8; ++i) tile[SKEWED((t & 7) * 8 + i, TILE_STRIDE) + p] = h[i];
  }
}
__device__ __forceinline__ void tile_store(half* out, const half* tile, TileIdx x, int N, int C) {
  const int t = threadIdx.x;
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // row (t/8)+32k, positions (t%8)*8 .. +8
    int row = (t >> 3) + 32 * k, p = (t & 7) * 8;
    if (x.n0 + p < N)
      *(uint4*)(out + ((size_t)x.b * C + x.c0 + row) * N + x.n0 + p) = *(const uint4*)&tile[SKEWED(row, TILE_STRIDE) + p];
  }
}

template <bool GROUPED>
__device__ void tile_kernel(const half* __restrict__ in, half* __restrict__ out, int N, int C) {
  __shared__ __align__(16) half tile[TILE_ELEMS];
  TileIdx x; x.b = blockIdx.z; x.c0 = blockIdx.y * 64; x.n0 = blockIdx.x * 64;
  uint4 v[2];
  tile_load<GROUPED>(v, in, x, N, C);
  tile_put(tile, v);
  __syncthreads();
  tile_store(out, tile, x, N, C);
}

// ---- pipe_regs: persistent CTAs walk the tiles (stride gridDim.x); the next tile's loads are
// issued into registers before this tile's stores, so a CTA never waits a full load latency
// between tiles. One shared tile; two barriers per tile.
template <bool GROUPED>
__device__ void pipe_regs_kernel(const half* __restrict__ in, half* __restrict__ out, int N, int C, int B) {
  __shared__ __align__(16) half tile[TILE_ELEMS];
  const int tiles_n = (N + 63) / 64, tiles_c = C / 64, total = tiles_n * tiles_c * B;
  int t = blockIdx.x;
  if (t >= total) return;
  uint4 v[2];
  tile_load<GROUPED>(v, in, tile_of(t, tiles_n, tiles_c), N, C);
  for (; t < total; t += gridDim.x) {
    tile_put(tile, v);
    __syncthreads();
    const int next = t + gridDim.x;
    if (next < total) tile_load<GROUPED>(v, in, tile_of(next, tiles_n, tiles_c), N, C);
    tile_store(out, tile, tile_of(t, tiles_n, tiles_c), N, C);
    __syncthreads();
  }
}

// ---- pipe_async: persistent CTAs with a STAGES-deep ring of shared tiles filled by cp.async
// (global -> shared, no registers): tiles i+1 .. i+STAGES-1 are in flight while tile i is
// stored. Shared layout [position][channel], 16-byte chunks XOR-swizzled by position/8 so the
// column reads of the store phase do not conflict.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  int bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N_>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N_)); }

template <bool GROUPED>
__device__ __forceinline__ void async_issue(half* buf, const half* in, TileIdx x, int N, int C) {
  const int t = threadIdx.x;
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // chunk f = t + 256k: position f/8, channel chunk f%8
    int f = t + 256 * k, p = f >> 3, q = f & 7;
    int n = x.n0 + p;
    bool ok = n < N;
    const half* g = src_at<GROUPED>(in, x.b, ok ? n : 0, x.c0 + q * 8, N, C);
    cp_async16(buf + p * 64 + ((q ^ ((p >> 3) & 7)) * 8), g, ok);
  }
}
__device__ __forceinline__ void async_store(half* out, const half* buf, TileIdx x, int N, int C) {
  const int t = threadIdx.x;
#pragma unroll
  for (int k = 0; k < 2; ++k) {  // row r = t/8 + 32k (a channel), positions p0 = (t%8)*8 .. +8
    int r = (t >> 3) + 32 * k, p0 = (t & 7) * 8;
    if (x.n0 + p0 >= N) continue;
    __align__(16) half h[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int p = p0 + j;
      h[j] = buf[p * 64 + (((r >> 3) ^ ((p >> 3) & 7)) * 8) + (r & 7)];
    }
    *(uint4*)(out + ((size_t)x.b * C + x.c0 + r) * N + x.n0 + p0) = *(const uint4*)h;
  }
}

template <bool GROUPED, int STAGES>
__device__ void pipe_async_kernel(const half* __restrict__ in, half* __restrict__ out, int N, int C, int B) {
  __shared__ __align__(128) half ring[STAGES][64 * 64];
  const int tiles_n = (N + 63) / 64, tiles_c = C / 64, total = tiles_n * tiles_c * B;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    int t = blockIdx.x + s * gridDim.x;
    if (t < total) async_issue<GROUPED>(ring[s], in, tile_of(t, tiles_n, tiles_c), N, C);
    cp_commit();
  }
  int i = 0;
  for (int t = blockIdx.x; t < total; t += gridDim.x, ++i) {
    int ahead = t + (STAGES - 1) * gridDim.x;
    if (ahead < total) async_issue<GROUPED>(ring[(i + STAGES - 1) % STAGES], in, tile_of(ahead, tiles_n, tiles_c), N, C);
    cp_commit();
    cp_wait<STAGES - 1>();
    __syncthreads();
    async_store(out, ring[i % STAGES], tile_of(t, tiles_n, tiles_c), N, C);
    __syncthreads();
  }
}

// ---- lines<CH, T>: CH channels x a T-position chunk per CTA, every row's chunk cut at the
// global 128-byte grid (row c's first line-aligned position a_c = -(b*C + c)*N mod 64), so every
// warp store writes whole lines. The CTA loads the (T+64)-position window [T*t - 64, T*t + T):
// (T+64)/T the reads of a plain tile where the rows shift (1.25x at T = 256).
template <bool GROUPED, int CH, int T>
__device__ void lines_kernel(const half* __restrict__ in, half* __restrict__ out, int N, int C) {
  constexpr int W = T + 64, VPOS = CH / 8, LOADS = (W * VPOS + 255) / 256, STORES = CH * T / 8 / 256;
  __shared__ __align__(16) half tile[CH * (W + 8) + CH];
  const int b = blockIdx.z, c0 = blockIdx.y * CH, w0 = T * blockIdx.x - 64;
  const int tid = threadIdx.x;
  uint4 v[LOADS];
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {  // window vector f: position f/VPOS, channels (f%VPOS)*8
    int f = tid + 256 * k, n = w0 + f / VPOS;
    if (f < W * VPOS && n >= 0 && n < N)
      v[k] = *(const uint4*)src_at<GROUPED>(in, b, n, c0 + (f % VPOS) * 8, N, C);
  }
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    int f = tid + 256 * k, p = f / VPOS, n = w0 + p;
    if (f < W * VPOS && n >= 0 && n < N) {
      const half* h = (const half*)&v[k];
#pragma unroll
      for (int i = 0; i < 8; ++i) tile[SKEWED((f % VPOS) * 8 + i, W + 8) + p] = h[i];
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < STORES; ++k) {  // row f/(T/8), its chunk's vector f%(T/8)
    int f = tid + 256 * k, row = f / (T / 8);
    long long start = ((long long)b * C + c0 + row) * N;
    int a = (int)((64 - (start & 63)) & 63);
    int p = a + (f % (T / 8)) * 8, n = w0 + p;
    if (n >= 0 && n < N) *(uint4*)(out + start + n) = *(const uint4*)&tile[SKEWED(row, W + 8) + p];
  }
}

// ---- tile<CH, T>: the same CTA shape without the line cut (tile-aligned row pieces, no halo).
template <bool GROUPED, int CH, int T>
__device__ void tilex_kernel(const half* __restrict__ in, half* __restrict__ out, int N, int C) {
  constexpr int VPOS = CH / 8, LOADS = T * VPOS / 256, STORES = CH * T / 8 / 256;
  __shared__ __align__(16) half tile[CH * (T + 8) + CH];
  const int b = blockIdx.z, c0 = blockIdx.y * CH, n0 = T * blockIdx.x;
  const int tid = threadIdx.x;
  uint4 v[LOADS];
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    int f = tid + 256 * k, n = n0 + f / VPOS;
    if (n < N) v[k] = *(const uint4*)src_at<GROUPED>(in, b, n, c0 + (f % VPOS) * 8, N, C);
  }
#pragma unroll
  for (int k = 0; k < LOADS; ++k) {
    int f = tid + 256 * k, p = f / VPOS;
    if (n0 + p < N) {
      const half* h = (const half*)&v[k];
#pragma unroll
      for (int i = 0; i < 8; ++i) tile[SKEWED((f % VPOS) * 8 + i, T + 8) + p] = h[i];
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < STORES; ++k) {
    int f = tid + 256 * k, row = f / (T / 8), p = (f % (T / 8)) * 8;
    if (n0 + p < N) *(uint4*)(out + ((size_t)b * C + c0 + row) * N + n0 + p) = *(const uint4*)&tile[SKEWED(row, T + 8) + p];
  }
}

// ---- diagnostics (not gathers): a copy [B, C, N] -> [B, C, N] whose CTAs move 64-row x
// 64-position pieces with the tile's store pattern on both sides and no shared memory
// (`rowcopy`), and a flat grid-stride 16-byte copy (`flatcopy`) to calibrate against torch's.
// rowcopy<P>: 64 rows x P positions per CTA (row pieces of 2P bytes at multiples of P).
template <int P>
__device__ void rowcopy_kernel(const half* __restrict__ in, half* __restrict__ out, int N, int C) {
  constexpr int VR = P / 8, K = 64 * VR / 256;  // vectors per row piece, per thread
  const int b = blockIdx.z, c0 = blockIdx.y * 64, n0 = blockIdx.x * P, t = threadIdx.x;
  uint4 v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    int f = t + 256 * k, row = f / VR, p = (f % VR) * 8;
    if (n0 + p < N) v[k] = *(const uint4*)(in + ((size_t)b * C + c0 + row) * N + n0 + p);
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    int f = t + 256 * k, row = f / VR, p = (f % VR) * 8;
    if (n0 + p < N) *(uint4*)(out + ((size_t)b * C + c0 + row) * N + n0 + p) = v[k];
  }
}
extern "C" __global__ void __launch_bounds__(256) rowcopy(const half* i, half* o, int N, int C, int B) { rowcopy_kernel<64>(i, o, N, C); }
extern "C" __global__ void __launch_bounds__(256) rowcopy128(const half* i, half* o, int N, int C, int B) { rowcopy_kernel<128>(i, o, N, C); }
extern "C" __global__ void __launch_bounds__(256) rowcopy256(const half* i, half* o, int N, int C, int B) { rowcopy_kernel<256>(i, o, N, C); }
extern "C" __global__ void __launch_bounds__(256)
flatcopy(const half* __restrict__ in, half* __restrict__ out, int N, int C, int B) {
  const size_t vecs = (size_t)B * C * N / 8;
  for (size_t i = blockIdx.x * 256 + threadIdx.x; i < vecs; i += (size_t)gridDim.x * 256)
    ((uint4*)out)[i] = ((const uint4*)in)[i];
}

#define KERNELS(SUF, G)                                                                              \
  extern "C" __global__ void __launch_bounds__(256) tile_##SUF(const half* i, half* o, int N, int C, int B) { tile_kernel<G>(i, o, N, C); } \
  extern "C" __global__ void __launch_bounds__(256) pipe_regs_##SUF(const half* i, half* o, int N, int C, int B) { pipe_regs_kernel<G>(i, o, N, C, B); } \
  extern "C" __global__ void __launch_bounds__(256) pipe_async2_##SUF(const half* i, half* o, int N, int C, int B) { pipe_async_kernel<G, 2>(i, o, N, C, B); } \
  extern "C" __global__ void __launch_bounds__(256) pipe_async3_##SUF(const half* i, half* o, int N, int C, int B) { pipe_async_kernel<G, 3>(i, o, N, C, B); } \
  extern "C" __global__ void __launch_bounds__(256) pipe_async4_##SUF(const half* i, half* o, int N, int C, int B) { pipe_async_kernel<G, 4>(i, o, N, C, B); } \
  extern "C" __global__ void __launch_bounds__(256) lines256_##SUF(const half* i, half* o, int N, int C, int B) { lines_kernel<G, 32, 256>(i, o, N, C); } \
  extern "C" __global__ void __launch_bounds__(256) lines256c64_##SUF(const half* i, half* o, int N, int C, int B) { lines_kernel<G, 64, 256>(i, o, N, C); } \
  extern "C" __global__ void __launch_bounds__(256) lines512_##SUF(const half* i, half* o, int N, int C, int B) { lines_kernel<G, 32, 512>(i, o, N, C); } \
  extern "C" __global__ void __launch_bounds__(256) lines128c64_##SUF(const half* i, half* o, int N, int C, int B) { lines_kernel<G, 64, 128>(i, o, N, C); } \
  extern "C" __global__ void __launch_bounds__(256) tile256_##SUF(const half* i, half* o, int N, int C, int B) { tilex_kernel<G, 32, 256>(i, o, N, C); } \
  extern "C" __global__ void __launch_bounds__(256) tile128_##SUF(const half* i, half* o, int N, int C, int B) { tilex_kernel<G, 32, 128>(i, o, N, C); }
KERNELS(packed, false)
KERNELS(grouped, true)
