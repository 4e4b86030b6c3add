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
  __asm__ volatile("" : "+x"(v##0), "+x"(v##1), "+x"(v##2), "+x"(v##3), "+x"(v##4), "+x"(v##5), "+x"(v##6), "+x"(v##7), "+x"(v##8), "+x"(v##9))

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

alignas(64) static int16_t W[512], X[4][512];

// Instructions a second of `op` over 10 independent chains of vector type V (named registers, kept
// live by KEEP10); *sink gets chain 0.
template <class V, class Op>
double issue_rate(V seed, Op op, long n, V* sink) {
#define DV(i) V a##i = seed;
  R10(DV)
  const double t = now();
  for (long k = 0; k < n; ++k) {
#define STEP(i) a##i = op(a##i);
    R10(STEP)
    KEEP10(a);
  }
  const double rate = 10.0 * n / (now() - t) / 1e9;
  *sink = a0;
  return rate;
}

int main() {
  const long n = 200000000;
  __m256i si;
  __m256 sf;
  const __m256i ones16 = _mm256_set1_epi16(1), ones32 = _mm256_set1_epi32(1);
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
  const double madd = issue_rate(_mm256_set1_epi16(3), [&](__m256i v) { return _mm256_madd_epi16(v, ones16); }, n, &si);
  printf("vpmaddwd %.2f G/s (10 chains of latency 5: %.2f GHz at 2 a cycle)\n", madd, madd / 2);
  printf("vfmadd231ps %.2f G/s\n", issue_rate(_mm256_set1_ps(1.5f), [&](__m256 v) { return _mm256_fmadd_ps(v, b, c); }, n, &sf));
  printf("vpaddd %.2f G/s\n", issue_rate(_mm256_set1_epi32(3), [&](__m256i v) { return _mm256_add_epi32(v, ones32); }, n, &si));
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
