// The 16-bit forward's write pattern on the 2-core EPYC guest (docs/perf.md v34): a copy loop,
// the direct transpose (SSE2 8x8 tiles, stores of 16 bytes into kd = 32 rows), the transpose
// staged into a per-thread buffer of `chunk` positions and written back row segment by row
// segment (chunk = N: one sequential write of the slice), and the prefetch kernel's order
// (PREFETCHW over the slice's output first, then the direct transpose).
//   gcc -O3 -march=native -fopenmp staged.c -o staged && ./staged N [slices] [rounds]
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { KD = 32 };
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// 8 positions x 8 channels (src rows of KD elements) -> 8 channel rows of 8 positions (dst
// rows of `ld` elements).
static inline void tile8(const uint16_t* src, uint16_t* dst, long ld) {
  __m128i r[8], a[8], b[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128((const __m128i*)(src + i * KD));
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  b[0] = _mm_unpacklo_epi32(a[0], a[2]); b[1] = _mm_unpackhi_epi32(a[0], a[2]);
  b[2] = _mm_unpacklo_epi32(a[1], a[3]); b[3] = _mm_unpackhi_epi32(a[1], a[3]);
  b[4] = _mm_unpacklo_epi32(a[4], a[6]); b[5] = _mm_unpackhi_epi32(a[4], a[6]);
  b[6] = _mm_unpacklo_epi32(a[5], a[7]); b[7] = _mm_unpackhi_epi32(a[5], a[7]);
  __m128i c[8] = {_mm_unpacklo_epi64(b[0], b[4]), _mm_unpackhi_epi64(b[0], b[4]),
                  _mm_unpacklo_epi64(b[1], b[5]), _mm_unpackhi_epi64(b[1], b[5]),
                  _mm_unpacklo_epi64(b[2], b[6]), _mm_unpackhi_epi64(b[2], b[6]),
                  _mm_unpacklo_epi64(b[3], b[7]), _mm_unpackhi_epi64(b[3], b[7])};
  for (int i = 0; i < 8; ++i) _mm_storeu_si128((__m128i*)(dst + i * ld), c[i]);
}

// positions [p0, p0 + len) of one slice (len a multiple of 8, or the tail by overlap)
static void transpose(const uint16_t* in, uint16_t* out, long ld, long p0, long len, long n) {
  for (long p = p0; p < p0 + len; p += 8) {
    long q = p + 8 <= n ? p : n - 8;
    for (int c = 0; c < KD; c += 8) tile8(in + q * KD + c, out + c * ld + (q - p0), ld);
  }
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 1073;
  long slices = argc > 2 ? atol(argv[2]) : 128;
  int rounds = argc > 3 ? atoi(argv[3]) : 15;
  size_t elems = (size_t)slices * n * KD;
  uint16_t* in = aligned_alloc(64, elems * 2 + 64);
  uint16_t* out = aligned_alloc(64, elems * 2 + 64);
  uint16_t* ref = aligned_alloc(64, elems * 2 + 64);
  for (size_t i = 0; i < elems; ++i) in[i] = (uint16_t)(i * 2654435761u >> 7);
  for (long s = 0; s < slices; ++s)
    for (long p = 0; p < n; ++p)
      for (int c = 0; c < KD; ++c) ref[s * n * KD + c * n + p] = in[s * n * KD + p * KD + c];
  const char* names[] = {"copy", "direct", "prefetchw+direct", "staged 256", "staged 512",
                         "staged slice"};
  const int kinds = 6;
  double ratio[6][64];
  long chunk_of[6] = {0, 0, 0, 256, 512, 1L << 40};
  for (int r = 0; r < rounds; ++r) {
    double t[6];
    for (int k0 = 0; k0 < kinds; ++k0) {
      int k = (k0 + r) % kinds;
      int reps = 0;
      double start = now(), end;
      do {
#pragma omp parallel
        {
          long chunk = chunk_of[k] > n ? n : chunk_of[k];
          uint16_t* stage = chunk ? aligned_alloc(64, (size_t)KD * (chunk + 8) * 2) : NULL;
#pragma omp for schedule(static)
          for (long s = 0; s < slices; ++s) {
            const uint16_t* src = in + s * n * KD;
            uint16_t* dst = out + s * n * KD;
            if (k == 0) {
              memcpy(dst, src, n * KD * 2);
            } else if (k == 1 || k == 2) {
              if (k == 2)
                for (long b = 0; b < n * KD * 2; b += 64) _m_prefetchw((char*)dst + b);
              transpose(src, dst, n, 0, n, n);
            } else {
              for (long p0 = 0; p0 < n; p0 += chunk) {
                long len = p0 + chunk <= n ? chunk : n - p0;
                long padded = (len + 7) / 8 * 8;
                // stage rows of `padded` positions; the tail tile may start before p0 + len - 8
                if (len >= 8) {
                  transpose(src, stage, padded, p0, len - len % 8, n);
                  if (len % 8) {
                    long q = p0 + len - 8;
                    for (int c = 0; c < KD; c += 8)
                      tile8(src + q * KD + c, stage + c * padded + (q - p0), padded);
                  }
                } else {
                  for (long p = 0; p < len; ++p)
                    for (int c = 0; c < KD; ++c) stage[c * padded + p] = src[(p0 + p) * KD + c];
                }
                for (int c = 0; c < KD; ++c) memcpy(dst + c * n + p0, stage + c * padded, len * 2);
              }
            }
          }
          free(stage);
        }
        ++reps;
        end = now();
      } while (end - start < 0.004);
      t[k] = (end - start) / reps;
      if (k > 0 && r == 0 && memcmp(out, ref, elems * 2)) {
        printf("MISMATCH %s\n", names[k]);
        return 1;
      }
    }
    for (int k = 0; k < kinds; ++k) ratio[k][r] = t[k] / t[0];
    ratio[0][r] = t[0] * 1e6;
  }
  printf("N %ld, %ld slices, %.1f MB moved, %d threads; median of %d rounds (copy: us)\n", n,
         slices, 2.0 * elems * 2 / 1e6, omp_get_max_threads(), rounds);
  for (int k = 0; k < kinds; ++k) {
    double* v = ratio[k];
    for (int i = 0; i < rounds; ++i)
      for (int j = i + 1; j < rounds; ++j)
        if (v[j] < v[i]) { double x = v[i]; v[i] = v[j]; v[j] = x; }
    printf("  %-18s %8.2f  (%.2f-%.2f)\n", names[k], v[rounds / 2], v[rounds / 4], v[3 * rounds / 4]);
  }
  return 0;
}
