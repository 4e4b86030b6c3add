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
