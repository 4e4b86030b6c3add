// AVX2 + FMA + F16C: the packed GEMM of fgemm_packed.inc on 8-float registers
// (6 tokens x 16 columns: 12 sums, 2 panel registers and one broadcast of 16).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_common.h"
#include "core/dtype.h"

namespace cyb {
namespace cpu {
namespace {

struct V {
  using reg = __m256;
  static constexpr int kLanes = 8, kRows = 6;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  // 8 x 8 in registers: pairs of rows interleaved, 64-bit pairs (a 4 x 4 transpose
  // inside each 128-bit lane per group of 4 rows), then the two groups' lanes swapped.
  static void transpose(reg* r) {
    reg t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; ++g) {  // u[4g + m], lane L: rows 4g..4g+3 at column 4L + m
      const __m256d a = _mm256_castps_pd(t[4 * g]), b = _mm256_castps_pd(t[4 * g + 1]);
      const __m256d c = _mm256_castps_pd(t[4 * g + 2]), d = _mm256_castps_pd(t[4 * g + 3]);
      u[4 * g] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
      u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
      u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
      u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
    }
    for (int m = 0; m < 4; ++m) {
      r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20);
      r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
    }
  }
  static reg loadn(const float* p, int n) {
    if (n >= 8) return _mm256_loadu_ps(p);
    alignas(32) float t[8] = {};
    std::memcpy(t, p, sizeof(float) * static_cast<size_t>(n));
    return _mm256_load_ps(t);
  }
  static void store(float* p, reg v, int n) {
    if (n >= 8) return _mm256_storeu_ps(p, v);
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    std::memcpy(p, t, sizeof(float) * static_cast<size_t>(n));
  }
};

#include "backends/cpu/fgemm_packed.inc"

}  // namespace

void avx2_packed_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                        ExecContext& ctx) {
  packed_matmul(x, T, K, W, bias, y, ctx);
}

}  // namespace cpu
}  // namespace cyb
