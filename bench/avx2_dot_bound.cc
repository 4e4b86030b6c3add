// What one thread of this machine can issue for the avx2 K-quant prefill dot (kquant_avx2.cc
// Avx2K::dot_expanded): (1) independent vpmaddwd, vfmadd231ps and vpaddd (ymm), 10 chains each,
// giving the vector issue rate and, from vpmaddwd's 2 a cycle, the clock; (2) the dot's inner
// loop itself (8 groups x 4 tokens, 2 vpmaddwd + 2 vpaddd + 2 loads a group-token, 2 weight loads
// a group) on L1-resident data: the ceiling for the real kernel, whose rate is
// `_core.bench_matmul('q4_k', 8960, 1536, t=128, level='avx2', threads=1)`.
// Build and run: g++ -O3 -funroll-all-loops -mavx2 -mfma bench/avx2_dot_bound.cc -o /tmp/avx2_dot_bound && /tmp/avx2_dot_bound
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

#define R10(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9)
#define KEEP10(v) \
  __asm__("" : "+x"(v##0), "+x"(v##1), "+x"(v##2), "+x"(v##3), "+x"(v##4), "+x"(v##5), "+x"(v##6), "+x"(v##7), "+x"(v##8), "+x"(v##9))

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

alignas(64) static int16_t W[512], X[4][512];

int main() {
  const long n = 200000000;
  {
#define DI(i) __m256i a##i = _mm256_set1_epi16(i + 1);
    R10(DI)
    const __m256i b = _mm256_set1_epi16(1);
    double t = now();
    for (long k = 0; k < n; ++k) {
#define MADD(i) a##i = _mm256_madd_epi16(a##i, b);
      R10(MADD)
      KEEP10(a);
    }
    t = now() - t;
    printf("vpmaddwd %.2f G/s (10 chains of latency 5: %.2f GHz at 2 a cycle)\n", 10.0 * n / t / 1e9, 5.0 * n / t / 1e9);
    volatile int s = _mm256_extract_epi32(_mm256_add_epi32(a0, a9), 0);
    (void)s;
  }
  {
#define DF(i) __m256 f##i = _mm256_set1_ps(i + 1.0f);
    R10(DF)
    const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
    double t = now();
    for (long k = 0; k < n; ++k) {
#define FMA(i) f##i = _mm256_fmadd_ps(f##i, b, c);
      R10(FMA)
      KEEP10(f);
    }
    t = now() - t;
    printf("vfmadd231ps %.2f G/s\n", 10.0 * n / t / 1e9);
    volatile float s = _mm256_cvtss_f32(_mm256_add_ps(f0, f9));
    (void)s;
  }
  {
    R10(DI)
    const __m256i b = _mm256_set1_epi32(1);
    double t = now();
    for (long k = 0; k < n; ++k) {
#define ADD(i) a##i = _mm256_add_epi32(a##i, b);
      R10(ADD)
      KEEP10(a);
    }
    t = now() - t;
    printf("vpaddd %.2f G/s\n", 10.0 * n / t / 1e9);
    volatile int s = _mm256_extract_epi32(_mm256_add_epi32(a0, a9), 0);
    (void)s;
  }
  {
    for (int i = 0; i < 512; ++i) {
      W[i] = static_cast<int16_t>(i % 7 - 3);
      for (int t = 0; t < 4; ++t) X[t][i] = static_cast<int16_t>((i * (t + 1)) % 11 - 5);
    }
    __m256i acc[4] = {};
    const long iters = 8000000;
    double t = now();
    for (long it = 0; it < iters; ++it) {
      __m256i ia[4] = {};
      for (int g = 0; g < 8; ++g) {
        const __m256i we = _mm256_load_si256(reinterpret_cast<const __m256i*>(W + 32 * g));
        const __m256i wo = _mm256_load_si256(reinterpret_cast<const __m256i*>(W + 32 * g + 16));
        for (int k = 0; k < 4; ++k) {
          const __m256i p =
              _mm256_add_epi32(_mm256_madd_epi16(we, _mm256_load_si256(reinterpret_cast<const __m256i*>(X[k] + 32 * g))),
                               _mm256_madd_epi16(wo, _mm256_load_si256(reinterpret_cast<const __m256i*>(X[k] + 32 * g + 16))));
          ia[k] = _mm256_add_epi32(ia[k], p);
          __asm__("" : "+x"(ia[k]));
        }
      }
      for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_epi32(acc[k], ia[k]);
      __asm__("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]));
    }
    t = now() - t;
    printf("the dot's inner loop: %.1f G multiply-adds/s (sink %d)\n", iters * 8.0 * 4 * 32 / t / 1e9,
           _mm256_extract_epi32(acc[0], 0) + _mm256_extract_epi32(acc[3], 1));
  }
}
