// CPU probe (issue 11): merge forward at odd N, direct misaligned row stores vs staging each
// (b,h,s) slab [kd, N] in an L1/L2-resident buffer and streaming it out (the slab is one
// contiguous, 32-byte-aligned block of the merged tensor whenever kd*itemsize % 32 == 0).
// float32 and 16-bit (as uint16). Single- and two-thread (OpenMP), medians of reps.
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}
static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b; return (x > y) - (x < y);
}

// transpose one slice: src [N, KD] -> dst rows d*ld + n (ld = N)
#define KD 32
static void slice_f32(const float* src, float* dst, int n_total) {
  int n = 0;
  for (; n + 8 <= n_total; n += 8) {
    for (int d0 = 0; d0 < KD; d0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (size_t)(n + i) * KD + d0);
      // 8x8 transpose
      __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      __m256 o[8];
      o[0] = _mm256_permute2f128_ps(u0, u4, 0x20); o[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
      o[2] = _mm256_permute2f128_ps(u2, u6, 0x20); o[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
      o[4] = _mm256_permute2f128_ps(u0, u4, 0x31); o[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
      o[6] = _mm256_permute2f128_ps(u2, u6, 0x31); o[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (size_t)(d0 + i) * n_total + n, o[i]);
    }
  }
  for (; n < n_total; ++n)
    for (int d = 0; d < KD; ++d) dst[(size_t)d * n_total + n] = src[(size_t)n * KD + d];
}

static void slice_u16(const uint16_t* src, uint16_t* dst, int n_total) {
  // 16-bit: 8x8 transposes on 16-byte rows (SSE), two per 16 kd.
  int n = 0;
  for (; n + 8 <= n_total; n += 8) {
    for (int d0 = 0; d0 < KD; d0 += 8) {
      __m128i r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128((const __m128i*)(src + (size_t)(n + i) * KD + d0));
      __m128i a0 = _mm_unpacklo_epi16(r[0], r[1]), a1 = _mm_unpackhi_epi16(r[0], r[1]);
      __m128i a2 = _mm_unpacklo_epi16(r[2], r[3]), a3 = _mm_unpackhi_epi16(r[2], r[3]);
      __m128i a4 = _mm_unpacklo_epi16(r[4], r[5]), a5 = _mm_unpackhi_epi16(r[4], r[5]);
      __m128i a6 = _mm_unpacklo_epi16(r[6], r[7]), a7 = _mm_unpackhi_epi16(r[6], r[7]);
      __m128i b0 = _mm_unpacklo_epi32(a0, a2), b1 = _mm_unpackhi_epi32(a0, a2);
      __m128i b2 = _mm_unpacklo_epi32(a1, a3), b3 = _mm_unpackhi_epi32(a1, a3);
      __m128i b4 = _mm_unpacklo_epi32(a4, a6), b5 = _mm_unpackhi_epi32(a4, a6);
      __m128i b6 = _mm_unpacklo_epi32(a5, a7), b7 = _mm_unpackhi_epi32(a5, a7);
      __m128i o[8];
      o[0] = _mm_unpacklo_epi64(b0, b4); o[1] = _mm_unpackhi_epi64(b0, b4);
      o[2] = _mm_unpacklo_epi64(b1, b5); o[3] = _mm_unpackhi_epi64(b1, b5);
      o[4] = _mm_unpacklo_epi64(b2, b6); o[5] = _mm_unpackhi_epi64(b2, b6);
      o[6] = _mm_unpacklo_epi64(b3, b7); o[7] = _mm_unpackhi_epi64(b3, b7);
      for (int i = 0; i < 8; ++i) _mm_storeu_si128((__m128i*)(dst + (size_t)(d0 + i) * n_total + n), o[i]);
    }
  }
  for (; n < n_total; ++n)
    for (int d = 0; d < KD; ++d) dst[(size_t)d * n_total + n] = src[(size_t)n * KD + d];
}

typedef struct { int batch, nh, n, isz; } Shape;

static void run_direct(const Shape* s, const void* lo, const void* hi, void* out) {
  int slices = s->batch * s->nh * 2;
  size_t slab = (size_t)KD * s->n;
#pragma omp parallel for schedule(static)
  for (int sl = 0; sl < slices; ++sl) {
    int bh = sl >> 1, st = sl & 1;
    const char* src = (const char*)(st ? hi : lo) + (size_t)bh * s->n * KD * s->isz;
    char* dst = (char*)out + sl * slab * s->isz;
    if (s->isz == 4) slice_f32((const float*)src, (float*)dst, s->n);
    else slice_u16((const uint16_t*)src, (uint16_t*)dst, s->n);
  }
}

static char* stages[2];  // one staging slab per thread, allocated once (main)

static void run_staged(const Shape* s, const void* lo, const void* hi, void* out) {
  int slices = s->batch * s->nh * 2;
  size_t slab = (size_t)KD * s->n, bytes = slab * s->isz;
#pragma omp parallel
  {
    char* stage = stages[omp_get_thread_num()];
#pragma omp for schedule(static)
    for (int sl = 0; sl < slices; ++sl) {
      int bh = sl >> 1, st = sl & 1;
      const char* src = (const char*)(st ? hi : lo) + (size_t)bh * s->n * KD * s->isz;
      if (s->isz == 4) slice_f32((const float*)src, (float*)stage, s->n);
      else slice_u16((const uint16_t*)src, (uint16_t*)stage, s->n);
      memcpy((char*)out + sl * bytes, stage, bytes);
    }
  }
}

static double median_us(void (*fn)(const Shape*, const void*, const void*, void*), const Shape* s,
                        const void* lo, const void* hi, void* out, int reps) {
  double t[64];
  for (int w = 0; w < 3; ++w) fn(s, lo, hi, out);
  for (int r = 0; r < reps; ++r) { double a = now_us(); fn(s, lo, hi, out); t[r] = now_us() - a; }
  qsort(t, reps, sizeof(double), cmpd);
  return t[reps / 2];
}

static double copy_us(void* dst, const void* src, size_t bytes, int reps) {
  double t[64];
  for (int r = 0; r < reps + 3; ++r) {
    double a = now_us();
#pragma omp parallel
    {
      int th = omp_get_thread_num(), nt = omp_get_num_threads();
      size_t chunk = (bytes / nt + 63) & ~(size_t)63, off = chunk * th;
      if (off < bytes) memcpy((char*)dst + off, (const char*)src + off, off + chunk > bytes ? bytes - off : chunk);
    }
    if (r >= 3) t[r - 3] = now_us() - a;
  }
  qsort(t, reps, sizeof(double), cmpd);
  return t[reps / 2];
}

int main(void) {
  Shape shapes[] = {{1, 4, 1073, 2}, {1, 4, 1072, 2}, {16, 4, 33, 4}, {16, 4, 32, 4},
                    {16, 4, 33, 2}, {1, 4, 1073, 4}, {4, 4, 300, 2}, {1, 4, 1369, 2}};
  int reps = 41;
  stages[0] = aligned_alloc(64, 1 << 20);
  stages[1] = aligned_alloc(64, 1 << 20);
  printf("%-14s %5s %8s %9s %9s %9s   direct/copy staged/copy\n", "shape", "isz", "MB", "copy_us", "direct", "staged");
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; ++i) {
    Shape* s = &shapes[i];
    size_t half = (size_t)s->batch * s->nh * s->n * KD * s->isz;
    char *lo = aligned_alloc(64, half), *hi = aligned_alloc(64, half), *out = aligned_alloc(64, 2 * half), *ref = aligned_alloc(64, 2 * half);
    char *src = aligned_alloc(64, 2 * half);
    for (size_t k = 0; k < half; ++k) { lo[k] = (char)(k * 7 + 1); hi[k] = (char)(k * 13 + 5); src[k] = lo[k]; src[half + k] = hi[k]; }
    double c = copy_us(ref, src, 2 * half, reps);
    memset(out, 0xAB, 2 * half); run_direct(s, lo, hi, out); memcpy(ref, out, 2 * half);
    memset(out, 0xCD, 2 * half); run_staged(s, lo, hi, out);
    int same = memcmp(out, ref, 2 * half) == 0;
    double d = median_us(run_direct, s, lo, hi, out, reps), st = median_us(run_staged, s, lo, hi, out, reps);
    char name[32]; snprintf(name, sizeof name, "%dx%dx%d", s->batch, s->nh, s->n);
    printf("%-14s %5d %8.2f %9.2f %9.2f %9.2f   %5.2f %5.2f %s\n", name, s->isz, 2 * half / 1e6, c, d, st, d / c, st / c, same ? "" : "MISMATCH");
    free(lo); free(hi); free(out); free(ref); free(src);
  }
  return 0;
}
