// AVX-512 matmul of several tokens on F32 / F16 / BF16 weights (both modes: the
// weights are exact in f32, products and sums are f32): the packed GEMM of
// fgemm_packed.inc (from kPackedMinTokens tokens on) and, below, a 4-row x 4-token block
// keeps 16 accumulators in registers: per 16 values of K, 4 weight vectors
// (widened once) and 4 activation vectors feed 16 FMAs (4 x 5 for a beam of 5 tokens). Blocking: the 4-token
// activation tile stays in L1 while the weights of a block of rows stay in L2.
#include "backends/cpu/avx512_common.h"

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


// out[t * ldo + r] = W row r . x_t for RR rows (<= 4) and TT tokens (<= 5).
template <DType E, int RR, int TT>
void block(const uint8_t* w, size_t rb, const float* x, int64_t K, float* out, int64_t ldo) {
  constexpr int NA = RR * TT;
  __m512 acc[NA];
  KQ_UNROLL for (int i = 0; i < NA; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 m = K - k >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (K - k)) - 1);
    __m512 xv[TT], wv[RR];
    KQ_UNROLL for (int t = 0; t < TT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * K + k);
    KQ_UNROLL for (int r = 0; r < RR; ++r) wv[r] = avx512::load_weights16<E>(w + r * rb, k, m);
    KQ_UNROLL for (int r = 0; r < RR; ++r)
      KQ_UNROLL for (int t = 0; t < TT; ++t) acc[r * TT + t] = _mm512_fmadd_ps(wv[r], xv[t], acc[r * TT + t]);
  }
  // the horizontal sums, 8 at a time
  __m512 v[8];
  alignas(32) float s[24];
  KQ_UNROLL for (int h = 0; h * 8 < NA; ++h) {
    KQ_UNROLL for (int i = 0; i < 8; ++i) v[i] = 8 * h + i < NA ? acc[8 * h + i] : _mm512_setzero_ps();
    _mm256_store_ps(s + 8 * h, avx512::reduce8(v));
  }
  for (int r = 0; r < RR; ++r)
    for (int t = 0; t < TT; ++t) out[t * ldo + r] = s[r * TT + t];
}

template <DType E, int RR>
void block_t(int tt, const uint8_t* w, size_t rb, const float* x, int64_t K, float* out, int64_t ldo) {
  switch (tt) {
    case 1: block<E, RR, 1>(w, rb, x, K, out, ldo); return;
    case 2: block<E, RR, 2>(w, rb, x, K, out, ldo); return;
    case 3: block<E, RR, 3>(w, rb, x, K, out, ldo); return;
    case 4: block<E, RR, 4>(w, rb, x, K, out, ldo); return;
    default: block<E, RR, 5>(w, rb, x, K, out, ldo); return;
  }
}

template <DType E>
void rows(const float* x, int64_t T, int64_t K, const uint8_t* base, size_t rb, float* y, int64_t N, int64_t n0,
          int64_t n1) {
  constexpr int64_t kRowBlock = 64;
  // tokens in blocks of 4; a count of 4n + 1 (a beam of 5) takes one block of 5 first
  // rather than leaving one token alone (which would widen every weight once more for it)
  const int64_t first = T % 4 == 1 && T >= 5 ? 5 : 4;
  for (int64_t b0 = n0; b0 < n1; b0 += kRowBlock) {
    const int64_t b1 = std::min(n1, b0 + kRowBlock);
    for (int64_t t0 = 0; t0 < T;) {
      const int tt = static_cast<int>(std::min<int64_t>(t0 == 0 ? first : 4, T - t0));
      for (int64_t r = b0; r < b1; r += 4) {
        const uint8_t* w = base + r * rb;
        float* out = y + t0 * N + r;
        switch (std::min<int64_t>(4, b1 - r)) {
          case 1: block_t<E, 1>(tt, w, rb, x + t0 * K, K, out, N); break;
          case 2: block_t<E, 2>(tt, w, rb, x + t0 * K, K, out, N); break;
          case 3: block_t<E, 3>(tt, w, rb, x + t0 * K, K, out, N); break;
          default: block_t<E, 4>(tt, w, rb, x + t0 * K, K, out, N); break;
        }
      }
      t0 += tt;
    }
  }
}

struct V {
  using reg = __m512;
  static constexpr int kLanes = 16, kRows = 14;  // 28 sums + 2 panel registers of 32
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static void transpose(reg* r) { avx512::transpose16(r); }
  static __mmask16 mask(int n) { return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1); }
  static reg loadn(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store(float* p, reg v, int n) {
    _mm512_mask_storeu_ps(p, mask(n), v);
  }
};

#include "backends/cpu/fgemm_packed.inc"

}  // namespace

void avx512_packed_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                          ExecContext& ctx) {
  packed_matmul(x, T, K, W, bias, y, ctx);
}

void avx512_float_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx) {
  const int64_t N = W.shape.d[0];
  const size_t rb = row_bytes(W.dtype, K);
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  const int64_t grain = std::max<int64_t>(16, 32768 / std::max<int64_t>(1, T * K) / 4 * 4);
  parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int) {
    switch (W.dtype) {
      case DType::F32: rows<DType::F32>(x, T, K, base, rb, y, N, b, e); break;
      case DType::F16: rows<DType::F16>(x, T, K, base, rb, y, N, b, e); break;
      default: rows<DType::BF16>(x, T, K, base, rb, y, N, b, e); break;
    }
  });
}

}  // namespace cpu
}  // namespace cyb
