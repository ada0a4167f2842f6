// Hand-written gathers [B, N, C] -> [B, C, N] (the layout family's qkv gather: NCHW channel c of
// position n is element c of the bnhd row of n), float16, to measure what line-aligned NCHW
// writes are worth at 20x20 (N = 400: 800-byte rows that start 0/32/64/96 bytes into a line).
// docs/perf.md v16. Every kernel: 16-byte loads and stores, loads staged in registers.
#include <cuda_fp16.h>
#include <stdint.h>

// tile: a CTA moves 64 positions x 64 channels through shared memory and writes 128-byte row
// pieces at position 64*t (what the tiled rule does). 256 threads, 2 loads per thread.
extern "C" __global__ void __launch_bounds__(256)
gather_tile(const half* __restrict__ in, half* __restrict__ out, int N, int C) {
  __shared__ __align__(16) half tile[64][64 + 8];
  const int b = blockIdx.z, c0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  const int t = threadIdx.x;
  uint4 v[2];
  #pragma unroll
  for (int k = 0; k < 2; ++k) {  // position (t/8)*2+k, channels (t%8)*8 .. +8
    int n = n0 + (t >> 3) * 2 + k;
    if (n < N) v[k] = *(const uint4*)(in + ((size_t)b * N + n) * C + c0 + (t & 7) * 8);
  }
  #pragma unroll
  for (int k = 0; k < 2; ++k) {
    const half* h = (const half*)&v[k];
    int p = (t >> 3) * 2 + k;
    #pragma unroll
    for (int i = 0; i < 8; ++i) tile[(t & 7) * 8 + i][p] = h[i];
  }
  __syncthreads();
  #pragma unroll
  for (int k = 0; k < 2; ++k) {  // row (t/8)+32k, positions (t%8)*8 .. +8
    int row = (t >> 3) + 32 * k, p = (t & 7) * 8;
    if (n0 + p < N)
      *(uint4*)(out + ((size_t)b * C + c0 + row) * N + n0 + p) = *(const uint4*)&tile[row][p];
  }
}

// slab: a CTA owns CH whole channel rows of one batch item (CH*N contiguous output elements,
// line-aligned when CH*N*2 % 128 == 0) and all N positions; it stages [CH][N] in dynamic shared
// memory (rows padded by 8 halves) and writes it out as one flat run of 16-byte vectors, each
// line written whole by one warp instruction. N % 8 == 0 assumed (the experiment's shapes).
template <int CH>
__device__ void gather_slab(const half* __restrict__ in, half* __restrict__ out, int N, int C) {
  extern __shared__ __align__(16) half slab[];
  const int b = blockIdx.y, c0 = blockIdx.x * CH;
  const int stride = N + 8;
  constexpr int OCT = CH / 8;                 // 16-byte vectors per position
  const int lanes = blockDim.x;
  const int total = N * OCT;                  // input vectors
  for (int base = 0; base < total; base += lanes * 4) {
    uint4 v[4];
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
      int f = base + k * lanes + threadIdx.x;
      if (f < total) v[k] = *(const uint4*)(in + ((size_t)b * N + f / OCT) * C + c0 + (f % OCT) * 8);
    }
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
      int f = base + k * lanes + threadIdx.x;
      if (f < total) {
        const half* h = (const half*)&v[k];
        int n = f / OCT, ch = (f % OCT) * 8;
        #pragma unroll
        for (int i = 0; i < 8; ++i) slab[(ch + i) * stride + n] = h[i];
      }
    }
  }
  __syncthreads();
  const int per_row = N / 8;
  half* dst = out + ((size_t)b * C + c0) * N;
  for (int f = threadIdx.x; f < CH * per_row; f += lanes) {  // flat: consecutive lanes, consecutive 16 B
    int row = f / per_row, p = (f % per_row) * 8;
    *(uint4*)(dst + (size_t)row * N + p) = *(const uint4*)&slab[row * stride + p];
  }
}
extern "C" __global__ void __launch_bounds__(256) gather_slab32(const half* in, half* out, int N, int C) { gather_slab<32>(in, out, N, C); }
extern "C" __global__ void __launch_bounds__(512) gather_slab64(const half* in, half* out, int N, int C) { gather_slab<64>(in, out, N, C); }

// lines: as tile, but each row's output piece is the 128-byte line-aligned chunk j = t - 1 of
// that row (chunk boundaries at the global 128-byte grid: row c's first aligned position is
// a_c = -(b*C + c)*N mod 64), so every warp store writes whole lines. A CTA's rows then need
// positions [64(t-1), 64(t+1)): it loads that 128-position window (each position is loaded by
// two CTAs; the second load mostly hits L2). grid.x = ceil((N + 63) / 64). N % 8 == 0.
extern "C" __global__ void __launch_bounds__(256)
gather_lines(const half* __restrict__ in, half* __restrict__ out, int N, int C) {
  __shared__ __align__(16) half tile[64][128 + 8];
  const int b = blockIdx.z, c0 = blockIdx.y * 64, t = blockIdx.x;
  const int w0 = 64 * (t - 1);  // window start (may be negative)
  const int tid = threadIdx.x;
  uint4 v[4];
  #pragma unroll
  for (int k = 0; k < 4; ++k) {  // window position (tid/8)*4+k, channels (tid%8)*8 .. +8
    int n = w0 + (tid >> 3) * 4 + k;
    if (n >= 0 && n < N) v[k] = *(const uint4*)(in + ((size_t)b * N + n) * C + c0 + (tid & 7) * 8);
  }
  #pragma unroll
  for (int k = 0; k < 4; ++k) {
    const half* h = (const half*)&v[k];
    int p = (tid >> 3) * 4 + k;
    #pragma unroll
    for (int i = 0; i < 8; ++i) tile[(tid & 7) * 8 + i][p] = h[i];
  }
  __syncthreads();
  #pragma unroll
  for (int k = 0; k < 2; ++k) {  // row (tid/8)+32k, its chunk's vector tid%8
    int row = (tid >> 3) + 32 * k;
    long long start = ((long long)b * C + c0 + row) * N;
    int a = (int)((64 - (start & 63)) & 63);       // first line-aligned position of the row
    int p = a + (tid & 7) * 8;                       // window-relative position of this vector
    int n = w0 + p;                                  // its position in the row
    if (n >= 0 && n < N)
      *(uint4*)(out + start + n) = *(const uint4*)&tile[row][p];
  }
}
