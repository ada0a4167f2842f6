/* 16-bit forward (kd 32) with every store a whole aligned 64-byte line (docs/perf.md v33).
 *
 *   gcc -O3 -march=x86-64-v4 -fopenmp fwd16f.c -o fwd16f && ./fwd16f SLICES N [ROUNDS]
 *
 * v32 found the Xeon's 16-bit tail forwards paying for stores that split cache lines (rows of
 * odd length start anywhere in a line), and its AVX2 funnel (aligned 32-byte stores, a kernel
 * per N % 16) spilled its 32 live ymm. Here, with AVX-512: a block is 32 positions x 8
 * channels. Vector k holds four 16-byte loads (positions n0+k, +8, +16, +24, the 8 channels),
 * so the in-lane 8x8 transpose (24 unpck) alone leaves channel k's 32 positions in order in
 * result k. Each output row's line offset o is fixed along the row, so one vpermt2w with a
 * run-time index (iota + 32 - o) joins the previous block's row and this one's into the
 * aligned line that ends inside this block: every store is a whole aligned zmm, except the
 * two partial lines at each pass's ends (masked stores, never splitting a line). Live: 8 rows,
 * 8 previous rows, 8 indices. The slice goes in chunks of CHUNK positions (input rows in L1),
 * each chunk in 4 passes of 8 channels.
 *
 * The harness (run, batch, the copy loop, the v32 variants) is v32's proto/fwd16.c. */
#define PROTO_LIB
#include "../../v32/proto/fwd16.c"

#ifdef __AVX512BW__

/* 32 positions x 8 channels from `src` (position rows `stride` elements apart): result k is
 * channel k at the 32 positions in order. */
static inline __attribute__((always_inline)) void block512(const u16 *src, long stride, __m512i cur[8]) {
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(src + k * stride)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src + (8 + k) * stride)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src + (16 + k) * stride)), 2);
    cur[k] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(src + (24 + k) * stride)), 3);
  }
  lane8_512(cur);
}

/* One pass: channels c0..c0+7 of positions [p0, p1) of one slice. The lines at p0 and p1 may
 * hold other positions (the row's neighbours, or the next chunk's): those are masked stores. */
static inline __attribute__((always_inline)) void pass512(const u16 *in, u16 *out, long n, long pitch,
                                                          int c0, long p0, long p1) {
  const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                        15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512i idx[8], prev[8], cur[8];
  int off[8];
  u16 *line[8];  /* the aligned line holding position p0 of each row */
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    u16 *at = out + (long)(c0 + k) * pitch + p0;
    off[k] = (int)(((uintptr_t)at >> 1) & 31);
    line[k] = at - off[k];
    idx[k] = _mm512_add_epi16(iota, _mm512_set1_epi16((short)(32 - off[k])));
  }
  u16 tail[32 * 8];
  const long len = p1 - p0;
  /* the first block (masked line A) */
  long valid = len < 32 ? len : 32;
  if (valid == 32) block512(in + p0 * KD + c0, KD, cur);
  else {
    for (long r = 0; r < 32; r++) memcpy(tail + r * 8, in + (p0 + (r < valid ? r : valid - 1)) * KD + c0, 16);
    block512(tail, 8, cur);
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    uint64_t m = 0xFFFFFFFFull << off[k];
    if (off[k] + valid < 32) m &= (1ull << (off[k] + valid)) - 1;
    _mm512_mask_storeu_epi16(line[k], (__mmask32)m, _mm512_permutexvar_epi16(idx[k], cur[k]));
    prev[k] = cur[k];
  }
  long blk = 1, n0 = p0 + 32;
  if (valid < 32) n0 = p1;  /* the pass was one partial block */
  for (; n0 + 32 <= p1; n0 += 32, blk++) {  /* whole blocks: whole aligned lines */
    block512(in + n0 * KD + c0, KD, cur);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      _mm512_store_si512(line[k] + blk * 32, _mm512_permutex2var_epi16(prev[k], idx[k], cur[k]));
      prev[k] = cur[k];
    }
  }
  if (n0 < p1) {  /* a partial last block */
    valid = p1 - n0;
    for (long r = 0; r < 32; r++) memcpy(tail + r * 8, in + (n0 + (r < valid ? r : valid - 1)) * KD + c0, 16);
    block512(tail, 8, cur);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      uint64_t m = 0xFFFFFFFFull;
      if (off[k] + valid < 32) m = (1ull << (off[k] + valid)) - 1;
      _mm512_mask_storeu_epi16(line[k] + blk * 32, (__mmask32)m, _mm512_permutex2var_epi16(prev[k], idx[k], cur[k]));
      prev[k] = cur[k];
    }
    blk++;
  } else if (len >= 32) {
    valid = 32;
  }
  /* line B of the last block: its offsets below off + valid - 32 */
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    const long end = off[k] + valid - 32;
    if (end > 0)
      _mm512_mask_storeu_epi16(line[k] + blk * 32, (__mmask32)((1ull << end) - 1), _mm512_permutexvar_epi16(idx[k], prev[k]));
  }
}

/* The same blocks, each row rotated to its line offset (one vpermw) and stored as two masked
 * stores, line A from the offset up and line B below it: no line split, no previous block kept,
 * but two stores a line (as the padded-row probe's two 32-byte stores). */
static inline __attribute__((always_inline)) void pass512_rot(const u16 *in, u16 *out, long n, long pitch,
                                                              int c0, long p0, long p1) {
  const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                        15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512i idx[8], cur[8];
  __mmask32 hi[8];
  u16 *line[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    u16 *at = out + (long)(c0 + k) * pitch + p0;
    const int off = (int)(((uintptr_t)at >> 1) & 31);
    line[k] = at - off;
    hi[k] = (__mmask32)(0xFFFFFFFFull << off);
    idx[k] = _mm512_add_epi16(iota, _mm512_set1_epi16((short)(32 - off)));
  }
  u16 tail[32 * 8];
  long blk = 0, n0 = p0;
  for (; n0 + 32 <= p1; n0 += 32, blk++) {
    block512(in + n0 * KD + c0, KD, cur);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      const __m512i r = _mm512_permutexvar_epi16(idx[k], cur[k]);
      _mm512_mask_storeu_epi16(line[k] + blk * 32, hi[k], r);
      _mm512_mask_storeu_epi16(line[k] + blk * 32 + 32, (__mmask32)~hi[k], r);
    }
  }
  if (n0 < p1) {
    const long valid = p1 - n0;
    for (long r = 0; r < 32; r++) memcpy(tail + r * 8, in + (n0 + (r < valid ? r : valid - 1)) * KD + c0, 16);
    block512(tail, 8, cur);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      const int off = __builtin_ctz((unsigned)hi[k]);
      const uint64_t mine = ((1ull << valid) - 1) << off;  /* offsets off .. off + valid - 1 */
      const __m512i r = _mm512_permutexvar_epi16(idx[k], cur[k]);
      _mm512_mask_storeu_epi16(line[k] + blk * 32, (__mmask32)mine, r);
      if (mine >> 32) _mm512_mask_storeu_epi16(line[k] + blk * 32 + 32, (__mmask32)(mine >> 32), r);
    }
  }
}
static void fwd_rot(const u16 *in, u16 *out, long n, long pitch) {
  for (int c0 = 0; c0 < KD; c0 += 8) pass512_rot(in, out, n, pitch, c0, 0, n);
}
static void fwd_rot_256(const u16 *in, u16 *out, long n, long pitch) {
  for (long p0 = 0; p0 < n; p0 += 256)
    for (int c0 = 0; c0 < KD; c0 += 8) pass512_rot(in, out, n, pitch, c0, p0, p0 + 256 < n ? p0 + 256 : n);
}

/* The funnel at 32 bytes (AVX-512VL on ymm): v32's joined tile (16 positions x 8 channels,
 * vector k = rows n0+k and n0+8+k), each row joined with the previous block's by one ymm
 * vpermt2w into the aligned 32-byte unit ending inside this block. No store splits a line
 * (two stores a line, as the padded probe); 256-bit ops keep both of Intel's shuffle ports. */
static inline __attribute__((always_inline)) void block256(const u16 *src, long stride, __m256i cur[8]) {
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++)
    cur[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(src + k * stride))),
                                     _mm_loadu_si128((const __m128i *)(src + (8 + k) * stride)), 1);
  lane8_avx2(cur);
}
static inline __attribute__((always_inline)) void pass256(const u16 *in, u16 *out, long n, long pitch,
                                                          int c0, long p0, long p1) {
  const __m256i iota = _mm256_set_epi16(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m256i idx[8], prev[8], cur[8];
  int off[8];
  u16 *unit[8];  /* the aligned 32-byte unit holding position p0 of each row */
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    u16 *at = out + (long)(c0 + k) * pitch + p0;
    off[k] = (int)(((uintptr_t)at >> 1) & 15);
    unit[k] = at - off[k];
    idx[k] = _mm256_add_epi16(iota, _mm256_set1_epi16((short)(16 - off[k])));
  }
  u16 tail[16 * 8];
  const long len = p1 - p0;
  long valid = len < 16 ? len : 16;
  if (valid == 16) block256(in + p0 * KD + c0, KD, cur);
  else {
    for (long r = 0; r < 16; r++) memcpy(tail + r * 8, in + (p0 + (r < valid ? r : valid - 1)) * KD + c0, 16);
    block256(tail, 8, cur);
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    uint32_t m = 0xFFFFu << off[k];
    if (off[k] + valid < 16) m &= (1u << (off[k] + valid)) - 1;
    _mm256_mask_storeu_epi16(unit[k], (__mmask16)m, _mm256_permutexvar_epi16(idx[k], cur[k]));
    prev[k] = cur[k];
  }
  long blk = 1, n0 = p0 + 16;
  if (valid < 16) n0 = p1;
  for (; n0 + 16 <= p1; n0 += 16, blk++) {
    block256(in + n0 * KD + c0, KD, cur);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      _mm256_store_si256((__m256i *)(unit[k] + blk * 16), _mm256_permutex2var_epi16(prev[k], idx[k], cur[k]));
      prev[k] = cur[k];
    }
  }
  if (n0 < p1) {
    valid = p1 - n0;
    for (long r = 0; r < 16; r++) memcpy(tail + r * 8, in + (n0 + (r < valid ? r : valid - 1)) * KD + c0, 16);
    block256(tail, 8, cur);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      uint32_t m = 0xFFFFu;
      if (off[k] + valid < 16) m = (1u << (off[k] + valid)) - 1;
      _mm256_mask_storeu_epi16(unit[k] + blk * 16, (__mmask16)m, _mm256_permutex2var_epi16(prev[k], idx[k], cur[k]));
      prev[k] = cur[k];
    }
    blk++;
  } else if (len >= 16) {
    valid = 16;
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) {
    const long end = off[k] + valid - 16;
    if (end > 0)
      _mm256_mask_storeu_epi16(unit[k] + blk * 16, (__mmask16)((1u << end) - 1), _mm256_permutexvar_epi16(idx[k], prev[k]));
  }
}
static void fwd_y_row(const u16 *in, u16 *out, long n, long pitch) {
  for (int c0 = 0; c0 < KD; c0 += 8) pass256(in, out, n, pitch, c0, 0, n);
}
static void fwd_y_256(const u16 *in, u16 *out, long n, long pitch) {
  for (long p0 = 0; p0 < n; p0 += 256)
    for (int c0 = 0; c0 < KD; c0 += 8) pass256(in, out, n, pitch, c0, p0, p0 + 256 < n ? p0 + 256 : n);
}
/* Positions outer, as the library: each 16-position block does its 4 channel groups, with 4
 * groups of previous rows kept (32 ymm live: the compiler decides what spills). */
static void fwd_y_blk(const u16 *in, u16 *out, long n, long pitch) {
  for (long p0 = 0; p0 < n; p0 += 64)
    for (int c0 = 0; c0 < KD; c0 += 8) pass256(in, out, n, pitch, c0, p0, p0 + 64 < n ? p0 + 64 : n);
}

static inline __attribute__((always_inline)) void fwd_funnel_c(const u16 *in, u16 *out, long n, long pitch, long chunk) {
  for (long p0 = 0; p0 < n; p0 += chunk) {
    const long p1 = p0 + chunk < n ? p0 + chunk : n;
    for (int c0 = 0; c0 < KD; c0 += 8) pass512(in, out, n, pitch, c0, p0, p1);
  }
}
static void fwd_funnel_128(const u16 *in, u16 *out, long n, long p) { fwd_funnel_c(in, out, n, p, 128); }
static void fwd_funnel_256(const u16 *in, u16 *out, long n, long p) { fwd_funnel_c(in, out, n, p, 256); }
static void fwd_funnel_512(const u16 *in, u16 *out, long n, long p) { fwd_funnel_c(in, out, n, p, 512); }
static void fwd_funnel_all(const u16 *in, u16 *out, long n, long p) { fwd_funnel_c(in, out, n, p, 1L << 40); }
#endif

int main(int argc, char **argv) {
  S = atol(argv[1]); N = atol(argv[2]); int rounds = argc > 3 ? atoi(argv[3]) : 15;
  long total = S * N * KD, padded = S * ((N + 15) / 16 * 16) * KD;
  in_buf = aligned_alloc(64, total * 2 + 64); out_buf = aligned_alloc(64, padded * 2 + 256);
  const int shift = getenv("OUT_SHIFT") ? atoi(getenv("OUT_SHIFT")) : 0;  /* misaligned output */
  out_buf += shift;
  u16 *ref = malloc(total * 2);
  for (long k = 0; k < total; k++) in_buf[k] = (u16)(k * 2654435761u >> 7);
  for (long s = 0; s < S; s++) for (long n = 0; n < N; n++) for (int d = 0; d < KD; d++)
    ref[s * N * KD + d * N + n] = in_buf[s * N * KD + n * KD + d];
  struct { const char *name; fwd_fn fn; int probe; } v[] = {
    {"copy loop", 0, 0},
    {"joined loads, padded (probe)", fwd_insert, 1},
    {"avx2 whole-row loads (v31)", fwd_avx2, 0},
    {"avx2 joined loads (v32 lib)", fwd_insert, 0},
#ifdef __AVX512BW__
    {"avx512 aligned lines, 128", fwd_funnel_128, 0},
    {"avx512 aligned lines, 256", fwd_funnel_256, 0},
    {"avx512 aligned lines, 512", fwd_funnel_512, 0},
    {"avx512 aligned lines, row", fwd_funnel_all, 0},
    {"avx512 rotated, 2 masked, row", fwd_rot, 0},
    {"avx512 rotated, 2 masked, 256", fwd_rot_256, 0},
    {"ymm funnel 32B, row", fwd_y_row, 0},
    {"ymm funnel 32B, 256", fwd_y_256, 0},
    {"ymm funnel 32B, 64", fwd_y_blk, 0},
#endif
  };
  int count = sizeof v / sizeof v[0];
  u16 *canary = out_buf + total;  /* the word after the output must survive */
  for (int i = 2; i < count; i++) {
    if (N < 16 && v[i].fn != 0 && i < 4) continue;  /* the AVX2 tiles need N >= 16 */
    memset(out_buf, 0xA5, total * 2 + 64);
    run(i, v[i].fn);
    if (memcmp(out_buf, ref, total * 2) || canary[0] != 0xA5A5) { printf("%s WRONG (N %ld)\n", v[i].name, N); return 1; }
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
