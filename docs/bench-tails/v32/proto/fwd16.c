/* 16-bit forward transposes (kd 32): where the in-cache time goes (docs/perf.md v32).
 *
 *   gcc -O3 -march=x86-64-v4 -fopenmp fwd16.c -o fwd16 && ./fwd16 SLICES N [ROUNDS]
 *
 * A slice is one (b, h, s) task: in [N][32] -> out [32][N], both contiguous, slices back to
 * back, one OpenMP static loop over the slices (as the library's parallel loop). Times are
 * medians over rounds, each round timing every variant once (calls batched to ~2 ms) and the
 * ratio taken to that round's copy loop. Every variant is checked bit-exact first, except
 * "pitch" (a probe: rows padded to 16 elements so that no store splits a line). */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KD 32
typedef uint16_t u16;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

/* AVX2: 8 rows transposed inside each 128-bit lane (the library's lane_transpose for E = 8):
 * result k, lane L = column 8L + k of rows 0..7. */
static inline void lane8_avx2(__m256i r[8]) {
  __m256i a[8], b[8];
  for (int j = 0; j < 4; j++) { a[2*j] = _mm256_unpacklo_epi16(r[2*j], r[2*j+1]); a[2*j+1] = _mm256_unpackhi_epi16(r[2*j], r[2*j+1]); }
  /* a0 = lo(r0,r1) a1 = hi(r0,r1) a2 = lo(r2,r3) ... */
  b[0] = _mm256_unpacklo_epi32(a[0], a[2]); b[1] = _mm256_unpackhi_epi32(a[0], a[2]);
  b[2] = _mm256_unpacklo_epi32(a[1], a[3]); b[3] = _mm256_unpackhi_epi32(a[1], a[3]);
  b[4] = _mm256_unpacklo_epi32(a[4], a[6]); b[5] = _mm256_unpackhi_epi32(a[4], a[6]);
  b[6] = _mm256_unpacklo_epi32(a[5], a[7]); b[7] = _mm256_unpackhi_epi32(a[5], a[7]);
  /* b0: cols 0,1 of rows 0-3; b1: cols 2,3; b2: cols 4,5; b3: cols 6,7 (rows 0-3); b4..7 rows 4-7 */
  r[0] = _mm256_unpacklo_epi64(b[0], b[4]); r[1] = _mm256_unpackhi_epi64(b[0], b[4]);
  r[2] = _mm256_unpacklo_epi64(b[1], b[5]); r[3] = _mm256_unpackhi_epi64(b[1], b[5]);
  r[4] = _mm256_unpacklo_epi64(b[2], b[6]); r[5] = _mm256_unpackhi_epi64(b[2], b[6]);
  r[6] = _mm256_unpacklo_epi64(b[3], b[7]); r[7] = _mm256_unpackhi_epi64(b[3], b[7]);
}

/* 16 positions x 16 channels from in (row stride KD) to out (row stride pitch). */
static inline void tile16_avx2(const u16 *in, u16 *out, long pitch) {
  __m256i top[8], bot[8];
  for (int i = 0; i < 8; i++) { top[i] = _mm256_loadu_si256((const __m256i *)(in + i * KD)); bot[i] = _mm256_loadu_si256((const __m256i *)(in + (i + 8) * KD)); }
  lane8_avx2(top); lane8_avx2(bot);
  for (int k = 0; k < 8; k++) {
    _mm256_storeu_si256((__m256i *)(out + k * pitch), _mm256_permute2x128_si256(top[k], bot[k], 0x20));
    _mm256_storeu_si256((__m256i *)(out + (k + 8) * pitch), _mm256_permute2x128_si256(top[k], bot[k], 0x31));
  }
}

/* The library's order: n tiles outer (last one overlapping), the two channel tiles inner. */
static void fwd_avx2(const u16 *in, u16 *out, long n, long pitch) {
  for (long t = 0; t < (n + 15) / 16; t++) {
    long n0 = t * 16 < n - 16 ? t * 16 : n - 16;
    for (int d0 = 0; d0 < KD; d0 += 16) tile16_avx2(in + n0 * KD + d0, out + d0 * pitch + n0, pitch);
  }
}

/* Channel tiles outer: 16 output rows live at a time instead of 32. */
static void fwd_avx2_dout(const u16 *in, u16 *out, long n, long pitch) {
  for (int d0 = 0; d0 < KD; d0 += 16)
    for (long t = 0; t < (n + 15) / 16; t++) {
      long n0 = t * 16 < n - 16 ? t * 16 : n - 16;
      tile16_avx2(in + n0 * KD + d0, out + d0 * pitch + n0, pitch);
    }
}

/* 32 positions per tile: two 16x16 tiles side by side, so each output row gets 64 bytes
 * back to back. */
static void fwd_avx2_wide(const u16 *in, u16 *out, long n, long pitch) {
  long t = 0;
  for (; t + 32 <= n; t += 32)
    for (int d0 = 0; d0 < KD; d0 += 16) {
      tile16_avx2(in + t * KD + d0, out + d0 * pitch + t, pitch);
      tile16_avx2(in + (t + 16) * KD + d0, out + d0 * pitch + t + 16, pitch);
    }
  for (; t < n; t += 16) {
    long n0 = t < n - 16 ? t : n - 16;
    for (int d0 = 0; d0 < KD; d0 += 16) tile16_avx2(in + n0 * KD + d0, out + d0 * pitch + n0, pitch);
  }
}

#ifdef __AVX512BW__
/* AVX-512: 32 positions x 32 channels. Rows are whole 64-byte lines of `in`. */
static inline void lane8_512(__m512i r[8]) {
  __m512i a[8], b[8];
  for (int j = 0; j < 4; j++) { a[2*j] = _mm512_unpacklo_epi16(r[2*j], r[2*j+1]); a[2*j+1] = _mm512_unpackhi_epi16(r[2*j], r[2*j+1]); }
  b[0] = _mm512_unpacklo_epi32(a[0], a[2]); b[1] = _mm512_unpackhi_epi32(a[0], a[2]);
  b[2] = _mm512_unpacklo_epi32(a[1], a[3]); b[3] = _mm512_unpackhi_epi32(a[1], a[3]);
  b[4] = _mm512_unpacklo_epi32(a[4], a[6]); b[5] = _mm512_unpackhi_epi32(a[4], a[6]);
  b[6] = _mm512_unpacklo_epi32(a[5], a[7]); b[7] = _mm512_unpackhi_epi32(a[5], a[7]);
  r[0] = _mm512_unpacklo_epi64(b[0], b[4]); r[1] = _mm512_unpackhi_epi64(b[0], b[4]);
  r[2] = _mm512_unpacklo_epi64(b[1], b[5]); r[3] = _mm512_unpackhi_epi64(b[1], b[5]);
  r[4] = _mm512_unpacklo_epi64(b[2], b[6]); r[5] = _mm512_unpackhi_epi64(b[2], b[6]);
  r[6] = _mm512_unpacklo_epi64(b[3], b[7]); r[7] = _mm512_unpackhi_epi64(b[3], b[7]);
}

static inline void tile32_512(const u16 *in, u16 *out, long pitch) {
  __m512i g[4][8];
  for (int q = 0; q < 4; q++) {
    for (int i = 0; i < 8; i++) g[q][i] = _mm512_loadu_si512(in + (q * 8 + i) * KD);
    lane8_512(g[q]);
  }
  /* g[q][k] lane L = channel 8L + k, positions 8q..8q+7. Output row 8L + k = lanes L of
   * g[0..3][k]: a 4x4 transpose of 128-bit lanes. */
  for (int k = 0; k < 8; k++) {
    __m512i s0 = _mm512_shuffle_i64x2(g[0][k], g[1][k], 0x44); /* g0.L0 g0.L1 g1.L0 g1.L1 */
    __m512i s1 = _mm512_shuffle_i64x2(g[0][k], g[1][k], 0xEE); /* g0.L2 g0.L3 g1.L2 g1.L3 */
    __m512i s2 = _mm512_shuffle_i64x2(g[2][k], g[3][k], 0x44);
    __m512i s3 = _mm512_shuffle_i64x2(g[2][k], g[3][k], 0xEE);
    /* row L: s.(L even: lanes 0,2 ; ...) */
    _mm512_storeu_si512(out + (0 * 8 + k) * pitch, _mm512_shuffle_i64x2(s0, s2, 0x88)); /* g0.L0 g1.L0 g2.L0 g3.L0 */
    _mm512_storeu_si512(out + (1 * 8 + k) * pitch, _mm512_shuffle_i64x2(s0, s2, 0xDD));
    _mm512_storeu_si512(out + (2 * 8 + k) * pitch, _mm512_shuffle_i64x2(s1, s3, 0x88));
    _mm512_storeu_si512(out + (3 * 8 + k) * pitch, _mm512_shuffle_i64x2(s1, s3, 0xDD));
  }
}

static void fwd_512(const u16 *in, u16 *out, long n, long pitch) {
  long t = 0;
  for (; t + 32 <= n; t += 32) tile32_512(in + t * KD, out + t, pitch);
  if (t < n) {
    if (n >= 32) tile32_512(in + (n - 32) * KD, out + (n - 32), pitch);
    else for (long t2 = 0; t2 < (n + 15) / 16; t2++) { long n0 = t2 * 16 < n - 16 ? t2 * 16 : n - 16; for (int d0 = 0; d0 < KD; d0 += 16) tile16_avx2(in + n0 * KD + d0, out + d0 * pitch + n0, pitch); }
  }
}

/* AVX-512 registers, 16 positions x 32 channels, ymm stores (32 bytes a row, as AVX2). */
static inline void tile16x32_512(const u16 *in, u16 *out, long pitch) {
  __m512i g[2][8];
  for (int q = 0; q < 2; q++) {
    for (int i = 0; i < 8; i++) g[q][i] = _mm512_loadu_si512(in + (q * 8 + i) * KD);
    lane8_512(g[q]);
  }
  const __m512i idx_lo = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);   /* a.L0 b.L0 a.L1 b.L1 */
  const __m512i idx_hi = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4); /* a.L2 b.L2 a.L3 b.L3 */
  for (int k = 0; k < 8; k++) {
    __m512i lo = _mm512_permutex2var_epi64(g[0][k], idx_lo, g[1][k]);
    __m512i hi = _mm512_permutex2var_epi64(g[0][k], idx_hi, g[1][k]);
    _mm256_storeu_si256((__m256i *)(out + (0 * 8 + k) * pitch), _mm512_castsi512_si256(lo));
    _mm256_storeu_si256((__m256i *)(out + (1 * 8 + k) * pitch), _mm512_extracti64x4_epi64(lo, 1));
    _mm256_storeu_si256((__m256i *)(out + (2 * 8 + k) * pitch), _mm512_castsi512_si256(hi));
    _mm256_storeu_si256((__m256i *)(out + (3 * 8 + k) * pitch), _mm512_extracti64x4_epi64(hi, 1));
  }
}

static void fwd_512_16(const u16 *in, u16 *out, long n, long pitch) {
  for (long t = 0; t < (n + 15) / 16; t++) {
    long n0 = t * 16 < n - 16 ? t * 16 : n - 16;
    tile16x32_512(in + n0 * KD, out + n0, pitch);
  }
}
#endif

/* Each slice's output prefetched for writing first, line by line (the library's prefetch
 * kernels), then the tiles in either order. */
static void prefetch_out(u16 *out, long elems) {
  for (long k = 0; k < elems; k += 32) __builtin_prefetch(out + k, 1, 3);
}
static void fwd_avx2_pf(const u16 *in, u16 *out, long n, long pitch) { prefetch_out(out, n * KD); fwd_avx2(in, out, n, pitch); }
static void fwd_avx2_dout_pf(const u16 *in, u16 *out, long n, long pitch) { prefetch_out(out, n * KD); fwd_avx2_dout(in, out, n, pitch); }

/* Backward: g [32][N] -> out [N][32]; tile loads 16 channel rows x 16 positions. */
static inline void btile16_avx2(const u16 *g, u16 *out, long pitch) {
  __m256i top[8], bot[8];
  for (int i = 0; i < 8; i++) { top[i] = _mm256_loadu_si256((const __m256i *)(g + i * pitch)); bot[i] = _mm256_loadu_si256((const __m256i *)(g + (i + 8) * pitch)); }
  lane8_avx2(top); lane8_avx2(bot);
  for (int k = 0; k < 8; k++) {
    _mm256_storeu_si256((__m256i *)(out + k * KD), _mm256_permute2x128_si256(top[k], bot[k], 0x20));
    _mm256_storeu_si256((__m256i *)(out + (k + 8) * KD), _mm256_permute2x128_si256(top[k], bot[k], 0x31));
  }
}
static void bwd_avx2(const u16 *g, u16 *out, long n, long pitch) {
  for (long t = 0; t < (n + 15) / 16; t++) {
    long n0 = t * 16 < n - 16 ? t * 16 : n - 16;
    for (int d0 = 0; d0 < KD; d0 += 16) btile16_avx2(g + d0 * pitch + n0, out + n0 * KD + d0, pitch);
  }
}
static void bwd_avx2_dout(const u16 *g, u16 *out, long n, long pitch) {
  for (int d0 = 0; d0 < KD; d0 += 16)
    for (long t = 0; t < (n + 15) / 16; t++) {
      long n0 = t * 16 < n - 16 ? t * 16 : n - 16;
      btile16_avx2(g + d0 * pitch + n0, out + n0 * KD + d0, pitch);
    }
}
static void prefetch_in(const u16 *g, long elems) {
  for (long k = 0; k < elems; k += 32) __builtin_prefetch(g + k, 0, 3);
}
static void bwd_avx2_pf(const u16 *g, u16 *out, long n, long pitch) { prefetch_in(g, n * KD); bwd_avx2(g, out, n, pitch); }
static void bwd_avx2_dout_pf(const u16 *g, u16 *out, long n, long pitch) { prefetch_in(g, n * KD); bwd_avx2_dout(g, out, n, pitch); }


/* Aligned stores at N % 16 = R (a kernel per R, as TIR would build one per residue): output
 * row d starts s = (d * R) % 16 elements past a 32-byte boundary (the slice start is aligned),
 * so row d's stores go to positions 16t - s, each joining the previous tile's and this tile's
 * vector of that row by a constant two-input shuffle (vperm2i128 + vpalignr). Only each row's
 * first tile and the last one store unaligned. */
typedef short v16s __attribute__((vector_size(32)));

static inline __attribute__((always_inline)) __m256i funnel(__m256i prev, __m256i cur, int s) {
  /* concat(prev, cur)[16 - s + i], i = 0..15 */
  switch (s) {
#define F(S) case S: return (__m256i)__builtin_shuffle((v16s)prev, (v16s)cur, (v16s){16-S+0,16-S+1,16-S+2,16-S+3,16-S+4,16-S+5,16-S+6,16-S+7,16-S+8,16-S+9,16-S+10,16-S+11,16-S+12,16-S+13,16-S+14,16-S+15});
    F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
#undef F
  }
  return cur;
}

/* positions p in [lo, lo+16) from prev (positions pb..pb+15) and tail (tb..tb+15), tb <= pb+16 */
static inline __attribute__((always_inline)) void transpose16(const u16 *in, __m256i res[16]) {
  __m256i top[8], bot[8];
  for (int i = 0; i < 8; i++) { top[i] = _mm256_loadu_si256((const __m256i *)(in + i * KD)); bot[i] = _mm256_loadu_si256((const __m256i *)(in + (i + 8) * KD)); }
  lane8_avx2(top); lane8_avx2(bot);
  for (int k = 0; k < 8; k++) {
    res[k] = _mm256_permute2x128_si256(top[k], bot[k], 0x20);
    res[k + 8] = _mm256_permute2x128_si256(top[k], bot[k], 0x31);
  }
}

static inline __attribute__((always_inline)) void fwd_aligned_r(const u16 *in, u16 *out, long n, long pitch, const int R) {
  long tiles = n / 16;
  for (int d0 = 0; d0 < KD; d0 += 16) {
    __m256i prev[16], cur[16];
    transpose16(in + d0, prev);
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) _mm256_storeu_si256((__m256i *)(out + (d0 + k) * pitch), prev[k]);
    for (long t = 1; t < tiles; t++) {
      transpose16(in + t * 16 * KD + d0, cur);
#pragma GCC unroll 16
      for (int k = 0; k < 16; k++) {
        const int s = (k * R) & 15;
        _mm256_store_si256((__m256i *)(out + (d0 + k) * pitch + t * 16 - s), funnel(prev[k], cur[k], s));
        prev[k] = cur[k];
      }
    }
    if (R) {  /* the last R positions: the tile at n - 16, and where a row's aligned stores
                 stopped short of it, one more joined store */
      transpose16(in + (n - 16) * KD + d0, cur);
#pragma GCC unroll 16
      for (int k = 0; k < 16; k++) {
        const int s = (k * R) & 15;
        if (s + R > 16) {
          /* positions 16T - s .. 16T - s + 15 from prev (16T-16..16T-1) and cur (16T+R-16..16T+R-1):
           * concat(prev, cur) index: q < 16T -> q - (16T-16); else 16 + q - (16T+R-16). As a
           * funnel of prev and cur shifted: build with a generic shuffle. */
          v16s m;
          for (int i = 0; i < 16; i++) { int q = 16 - s + i; m[i] = q < 16 ? q : 16 + (q - 16) + (16 - R); }
          _mm256_store_si256((__m256i *)(out + (d0 + k) * pitch + tiles * 16 - s), (__m256i)__builtin_shuffle((v16s)prev[k], (v16s)cur[k], m));
        }
        _mm256_storeu_si256((__m256i *)(out + (d0 + k) * pitch + n - 16), cur[k]);
      }
    }
  }
}
static void fwd_al_1(const u16 *in, u16 *out, long n, long p) { fwd_aligned_r(in, out, n, p, 1); }
static void fwd_al_8(const u16 *in, u16 *out, long n, long p) { fwd_aligned_r(in, out, n, p, 8); }
static void fwd_al_12(const u16 *in, u16 *out, long n, long p) { fwd_aligned_r(in, out, n, p, 12); }
static void fwd_al_0(const u16 *in, u16 *out, long n, long p) { fwd_aligned_r(in, out, n, p, 0); }
static void fwd_aligned(const u16 *in, u16 *out, long n, long p) {
  switch (n % 16) { case 1: fwd_al_1(in, out, n, p); break; case 8: fwd_al_8(in, out, n, p); break;
  case 12: fwd_al_12(in, out, n, p); break; case 0: fwd_al_0(in, out, n, p); break; default: fwd_avx2(in, out, n, p); }
}

/* Halves joined at the loads: vector k of a group is [row n0+k (16 bytes of 8 channels) | row
 * n0+8+k (same channels)], one vmovdqu xmm + one vinserti128 from memory (a load-port op on
 * Intel, not port 5). The in-lane transpose of the 8 vectors then leaves, in result k, channel
 * c0 + k at positions n0..n0+7 (lane 0) and n0+8..n0+15 (lane 1): a whole output vector, with
 * no cross-lane stage. 48 port-5 shuffles a 16x16 tile instead of 64. */
static inline __attribute__((always_inline)) void tile16_insert(const u16 *in, u16 *out, long pitch) {
  for (int c0 = 0; c0 < 16; c0 += 8) {
    __m256i r[8];
    for (int k = 0; k < 8; k++)
      r[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(in + k * KD + c0))),
                                     _mm_loadu_si128((const __m128i *)(in + (k + 8) * KD + c0)), 1);
    lane8_avx2(r);
    for (int k = 0; k < 8; k++) _mm256_storeu_si256((__m256i *)(out + (c0 + k) * pitch), r[k]);
  }
}
static void fwd_insert(const u16 *in, u16 *out, long n, long pitch) {
  for (long t = 0; t < (n + 15) / 16; t++) {
    long n0 = t * 16 < n - 16 ? t * 16 : n - 16;
    for (int d0 = 0; d0 < KD; d0 += 16) tile16_insert(in + n0 * KD + d0, out + d0 * pitch + n0, pitch);
  }
}
/* Probe (wrong results): the library order's loads and stores without the shuffles. */
static void fwd_noshuffle(const u16 *in, u16 *out, long n, long pitch) {
  for (long t = 0; t < (n + 15) / 16; t++) {
    long n0 = t * 16 < n - 16 ? t * 16 : n - 16;
    for (int d0 = 0; d0 < KD; d0 += 16) {
      const u16 *i0 = in + n0 * KD + d0; u16 *o0 = out + d0 * pitch + n0;
      __m256i r[16];
      for (int i = 0; i < 16; i++) r[i] = _mm256_loadu_si256((const __m256i *)(i0 + i * KD));
      __asm__ volatile("" : "+x"(r[0]), "+x"(r[1]), "+x"(r[2]), "+x"(r[3]), "+x"(r[4]), "+x"(r[5]), "+x"(r[6]), "+x"(r[7]));
      for (int k = 0; k < 16; k++) _mm256_storeu_si256((__m256i *)(o0 + k * pitch), r[k]);
    }
  }
}

/* Staged bands: BAND positions at a time are transposed into an L1 buffer whose rows are
 * 64-byte aligned (no store splits there), then each output row is written with 32-byte stores
 * aligned in memory, read from the buffer at that row's own offset (split loads from L1 in
 * place of split stores). Columns 0..15 of a buffer hold the previous band's last 16 positions,
 * so a chunk across two bands reads contiguously. Two buffers: a band is written out one band
 * after it was transposed, so the reads never wait on the stores that filled the buffer (a
 * load spanning two recent stores cannot be forwarded). Each row's first and last 16 positions
 * are stored unaligned. Needs n >= 2 * BAND. */
#define BAND 64
#define SROW (BAND + 16)
static inline long band_start(long b, long bands, long n) { return b == bands - 1 ? n - BAND : b * BAND; }
static inline void copy_out(const u16 *buf, u16 *out, long pitch, long n, long p0, int first, int last, long *done) {
  for (int d = 0; d < KD; d++) {
    u16 *row = out + d * pitch;
    const u16 *src = buf + d * SROW + 16 - p0;  /* src[p]: position p */
    long p = done[d];
    if (first) {
      _mm256_storeu_si256((__m256i *)row, _mm256_loadu_si256((const __m256i *)(src)));
      p = (16 - (long)(((uintptr_t)row >> 1) & 15)) & 15;
    }
    for (; p + 16 <= p0 + BAND; p += 16)
      _mm256_store_si256((__m256i *)(row + p), _mm256_loadu_si256((const __m256i *)(src + p)));
    done[d] = p;
    if (last) _mm256_storeu_si256((__m256i *)(row + n - 16), _mm256_loadu_si256((const __m256i *)(src + n - 16)));
  }
}
static void fwd_staged(const u16 *in, u16 *out, long n, long pitch) {
  if (n < 2 * BAND) { fwd_avx2(in, out, n, pitch); return; }
  u16 stage[2][KD * SROW] __attribute__((aligned(64)));
  long done[KD];
  long bands = (n + BAND - 1) / BAND;
  for (long b = 0; b <= bands; b++) {
    if (b < bands) {
      long p0 = band_start(b, bands, n);
      u16 *cur = stage[b & 1];
      if (b > 0) {
        long prev_p0 = band_start(b - 1, bands, n);
        const u16 *prev = stage[(b - 1) & 1];
        for (int d = 0; d < KD; d++)  /* positions p0-16..p0-1 */
          _mm256_store_si256((__m256i *)(cur + d * SROW), _mm256_loadu_si256((const __m256i *)(prev + d * SROW + 16 + (p0 - 16 - prev_p0))));
      }
      for (long t = 0; t < BAND; t += 16)
        for (int d0 = 0; d0 < KD; d0 += 16) tile16_avx2(in + (p0 + t) * KD + d0, cur + d0 * SROW + 16 + t, SROW);
    }
    if (b > 0)
      copy_out(stage[(b - 1) & 1], out, pitch, n, band_start(b - 1, bands, n), b == 1, b == bands, done);
  }
}

static void copy_slice(const u16 *a, u16 *b, long elems) {
  long k = 0;
  for (; k + 32 <= elems; k += 32) {
    _mm256_storeu_si256((__m256i *)(b + k), _mm256_loadu_si256((const __m256i *)(a + k)));
    _mm256_storeu_si256((__m256i *)(b + k + 16), _mm256_loadu_si256((const __m256i *)(a + k + 16)));
  }
  for (; k < elems; k++) b[k] = a[k];
}

typedef void (*fwd_fn)(const u16 *, u16 *, long, long);
static long S, N;
static int padded_variant = -1;  /* main: the table row that writes with a padded pitch */
static u16 *in_buf, *out_buf;

static void run(int variant, fwd_fn fn) {
  long slice = N * KD;
  long pitch = (variant == 1 || padded_variant == variant) ? (N + 15) / 16 * 16 : N;
  long out_slice = pitch * KD;
#pragma omp parallel for schedule(static)
  for (long s = 0; s < S; s++) {
    if (!fn) copy_slice(in_buf + s * slice, out_buf + s * slice, slice);
    else fn(in_buf + s * slice, out_buf + s * out_slice, N, pitch);
  }
}

static double batch(int variant, fwd_fn fn) {
  run(variant, fn);
  double t = now(); run(variant, fn); double once = now() - t;
  int calls = (int)(2e-3 / (once > 1e-7 ? once : 1e-7)); if (calls < 1) calls = 1;
  t = now();
  for (int c = 0; c < calls; c++) run(variant, fn);
  return (now() - t) / calls;
}

static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }


/* ctypes entry (same_process.py): variant 0 copy loop, 1 pitch probe (out needs the padded
 * size), 2.. as in main's table. */
static fwd_fn entry_fns[] = {0, fwd_avx2, fwd_avx2, fwd_avx2_dout, fwd_avx2_wide, fwd_avx2_pf,
                             fwd_avx2_dout_pf, fwd_aligned, bwd_avx2, bwd_avx2_dout, bwd_avx2_pf, bwd_avx2_dout_pf,
#ifdef __AVX512BW__
                             fwd_512, fwd_512_16
#endif
};
int psa_proto_run(int variant, u16 *in, u16 *out, long slices, long n) {
  if (variant < 0 || variant >= (int)(sizeof entry_fns / sizeof entry_fns[0])) return -1;
  S = slices; N = n; in_buf = in; out_buf = out;
  run(variant, entry_fns[variant]);
  return 0;
}

#ifndef PROTO_LIB
int main(int argc, char **argv) {
  S = atol(argv[1]); N = atol(argv[2]); int rounds = argc > 3 ? atoi(argv[3]) : 15;
  long total = S * N * KD, padded = S * ((N + 15) / 16 * 16) * KD;
  in_buf = aligned_alloc(64, total * 2 + 64); out_buf = aligned_alloc(64, padded * 2 + 64);
  u16 *ref = malloc(total * 2), *ref_b = malloc(total * 2);
  for (long k = 0; k < total; k++) in_buf[k] = (u16)(k * 2654435761u >> 7);
  for (long s = 0; s < S; s++) for (long n = 0; n < N; n++) for (int d = 0; d < KD; d++) {
    ref[s * N * KD + d * N + n] = in_buf[s * N * KD + n * KD + d];
    ref_b[s * N * KD + n * KD + d] = in_buf[s * N * KD + d * N + n];
  }
  struct { const char *name; fwd_fn fn; int backward; } v[] = {
    {"copy loop", 0, 0},
    {"fwd pitch (probe)", fwd_avx2, 0},
    {"fwd avx2 library order", fwd_avx2, 0},
    {"fwd avx2 channel tiles outer", fwd_avx2_dout, 0},
    {"fwd avx2 32 positions", fwd_avx2_wide, 0},
    {"fwd avx2 prefetch, lib order", fwd_avx2_pf, 0},
    {"fwd avx2 prefetch, ch. outer", fwd_avx2_dout_pf, 0},
    {"fwd avx2 aligned by N % 16", fwd_aligned, 0},
    {"fwd avx2 halves joined at loads", fwd_insert, 0},
    {"fwd staged bands, aligned", fwd_staged, 0},
    {"fwd no shuffles (probe)", fwd_noshuffle, 2},
    {"fwd joined at loads, pitch", fwd_insert, 3},
    {"bwd avx2 library order", bwd_avx2, 1},
    {"bwd avx2 channel tiles outer", bwd_avx2_dout, 1},
    {"bwd avx2 prefetch, lib order", bwd_avx2_pf, 1},
    {"bwd avx2 prefetch, ch. outer", bwd_avx2_dout_pf, 1},
#ifdef __AVX512BW__
    {"fwd avx512 32x32", fwd_512, 0},
    {"fwd avx512 16x32 ymm stores", fwd_512_16, 0},
#endif
  };
  int count = sizeof v / sizeof v[0];
  for (int i = 0; i < count; i++) if (v[i].backward == 3) padded_variant = i;
  for (int i = 2; i < count; i++) {
    memset(out_buf, 0xA5, total * 2);
    run(i, v[i].fn);
    if (v[i].backward >= 2) continue;
    if (memcmp(out_buf, v[i].backward ? ref_b : ref, total * 2)) { printf("%s WRONG\n", v[i].name); return 1; }
  }
  static double ratio[32][256], copy[256];
  for (int r = 0; r < rounds; r++) {
    copy[r] = batch(0, 0);
    for (int i = 1; i < count; i++) ratio[i][r] = batch(i, v[i].fn) / copy[r];
  }
  qsort(copy, rounds, sizeof(double), cmpd);
  printf("threads %d, %ld slices x N %ld: %.2f MB a side, copy loop %.1f us (median)\n",
         omp_get_max_threads(), S, N, total * 2 / 1e6, copy[rounds / 2] * 1e6);
  for (int i = 1; i < count; i++) {
    qsort(ratio[i], rounds, sizeof(double), cmpd);
    printf("  %-30s %.2f  (p25 %.2f, p75 %.2f)\n", v[i].name, ratio[i][rounds / 2], ratio[i][rounds / 4], ratio[i][3 * rounds / 4]);
  }
  return 0;
}
#endif
