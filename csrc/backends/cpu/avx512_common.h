// Helpers shared by the AVX-512 kernel files (*_avx512.cc only: include it from
// translation units compiled with the AVX-512 flags).
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers self-initialize "undefined" vectors (__Y = __Y), which
// -Wuninitialized reports at every inlined use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backends/cpu/kquant_x86.h"
#include "backends/cpu/simd_common.h"
#include "core/dtype.h"

namespace cyb {
namespace cpu {
namespace avx512 {

// exp(x) for f32 lanes: Cody-Waite reduction, degree-7 polynomial (as exp8 in kernels_x86.inc).
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-103.0f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, _mm512_set1_epi32(127)), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

// 16 weights from element k of an F32 / F16 / BF16 row (lanes outside m are zero), as f32.
template <DType E>
inline __m512 load_weights16(const uint8_t* row, int64_t k, __mmask16 m) {
  if constexpr (E == DType::F32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
  } else if constexpr (E == DType::F16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k));
  } else {  // BF16: the upper half of an f32
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

using cpu::f16v;  // (kquant_x86.h)
using cpu::k_scales_mins;

// reduce8's first steps: 128-bit lane j of the result holds, for j = 0..3, sums of lanes 4j..4j+3
// of a[0..3] (low half of each 128-bit group) and a[4..7]: lane 0 = a[0..3] over their lanes 0-3
// and 8-11, lane 1 = a[4..7] over the same, lane 2 = a[0..3] over 4-7 and 12-15, lane 3 = a[4..7].
inline __m512 reduce8_partial(const __m512* a) {
  __m512 p[4];
  KQ_UNROLL for (int i = 0; i < 4; ++i)
    p[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  const __m512 q0 = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], 0x44), _mm512_shuffle_ps(p[0], p[1], 0xee));
  const __m512 q1 = _mm512_add_ps(_mm512_shuffle_ps(p[2], p[3], 0x44), _mm512_shuffle_ps(p[2], p[3], 0xee));
  // each 128-bit lane of q0 holds partial sums of a[0..3], of q1 of a[4..7]
  return _mm512_add_ps(_mm512_shuffle_f32x4(q0, q1, 0x88), _mm512_shuffle_f32x4(q0, q1, 0xdd));
}

// The 8 horizontal sums of a[0..7] (lane i of the result = sum of the lanes of a[i]).
inline __m256 reduce8(const __m512* a) {
  const __m512 u = reduce8_partial(a);
  const __m512 w = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0xb1));
  return _mm512_castps512_ps256(_mm512_shuffle_f32x4(w, w, 0x08));
}

// Two rows' dots of 8 tokens (acc[t]: token t, row 0 in the low 256 bits, row 1 in the high):
// out[0..7] = row 0's sums for tokens 0-7, out[8..15] = row 1's (the two-row prefill dots).
inline void reduce8_two_rows(const __m512* acc, float* out) {
  const __m512 u = reduce8_partial(acc);
  _mm512_storeu_ps(out, _mm512_shuffle_f32x4(u, u, 0xd8));
}

// 16 x 16 32-bit lanes transposed in registers (r[i] lane j <-> r[j] lane i):
// pairs of rows interleaved, then 64-bit pairs (a 4 x 4 transpose inside each
// 128-bit lane per group of 4 rows), then the 128-bit lanes of the four groups.
inline void transpose16(__m512* r) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // u[4g + m], lane L: rows 4g..4g+3 at column 4L + m
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 e0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x44), e1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xEE);
    const __m512 e2 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x44);
    const __m512 e3 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xEE);
    r[m] = _mm512_shuffle_f32x4(e0, e2, 0x88);
    r[4 + m] = _mm512_shuffle_f32x4(e0, e2, 0xDD);
    r[8 + m] = _mm512_shuffle_f32x4(e1, e3, 0x88);
    r[12 + m] = _mm512_shuffle_f32x4(e1, e3, 0xDD);
  }
}

// Runs dot(w_row_chunk, x_tile, nc, out) over rows [n0, n1) of y[T, N] with the
// blocking of the prefill kernels: a tile of kTileT tokens x `chunk` blocks of
// activations stays in L1 while the weights of a block of rows stay in L2;
// partial sums over the chunks accumulate in y. One token: whole-row dots.
// dots[nt](row + c0 * blk_bytes, c0, t0, nc, r) computes r[0..nt) for tokens t0..t0+nt.
constexpr int kTileT = 8;
template <class Dot>
void blocked_rows(int64_t T, int64_t nblocks, int64_t chunk, const uint8_t* base, size_t row_bytes,
                  size_t blk_bytes, float* y, int64_t N, int64_t n0, int64_t n1, Dot&& dot) {
  constexpr int64_t kRowBlock = 64;
  float r[kTileT];
  if (T == 1) {
    for (int64_t n = n0; n < n1; ++n) dot(1, base + n * row_bytes, int64_t{0}, int64_t{0}, nblocks, y + n);
    return;
  }
  for (int64_t c0 = 0; c0 < nblocks; c0 += chunk) {
    const int64_t nc = chunk < nblocks - c0 ? chunk : nblocks - c0;
    for (int64_t r0 = n0; r0 < n1; r0 += kRowBlock) {
      const int64_t r1 = n1 < r0 + kRowBlock ? n1 : r0 + kRowBlock;
      for (int64_t t0 = 0; t0 < T; t0 += kTileT) {
        const int nt = static_cast<int>(kTileT < T - t0 ? kTileT : T - t0);
        for (int64_t n = r0; n < r1; ++n) {
          dot(nt, base + n * row_bytes + c0 * blk_bytes, c0, t0, nc, r);
          float* yt = y + t0 * N + n;
          if (c0 == 0)
            for (int t = 0; t < nt; ++t) yt[t * N] = r[t];
          else
            for (int t = 0; t < nt; ++t) yt[t * N] += r[t];
        }
      }
    }
  }
}

// y[T, N] over the thread pool with blocked_rows: rows of `row_bytes` bytes made
// of `nblocks` equal blocks, K chunks of `chunk` blocks. Rows per work item: at
// least ~32K multiply-adds, and whole 16-row groups when there are several tokens.
template <class Dot>
void parallel_blocked(ExecContext& ctx, int64_t T, int64_t K, int64_t N, int64_t nblocks, int64_t chunk,
                      const uint8_t* base, size_t row_bytes, float* y, Dot&& dot) {
  int64_t grain = 32768 / (T * K > 0 ? T * K : 1);
  grain = grain > 4 ? grain : 4;
  if (T > 1 && grain < 16) grain = 16;
  const size_t blk_bytes = row_bytes / static_cast<size_t>(nblocks);
  parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int) {
    blocked_rows(T, nblocks, chunk, base, row_bytes, blk_bytes, y, N, b, e, dot);
  });
}

}  // namespace avx512
}  // namespace cpu
}  // namespace cyb
