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

// exp(x) for f32 lanes: Cody-Waite reduction, degree-7 polynomial (as exp8 in kernels_x86_matmul.inc).
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

// Tokens per prefill tile of the 512-bit kernels.
constexpr int kTileT = 8;

// Two tokens' activations of one 256-value group, for the two-row prefill dots (pair_group_sums):
// 16 chunks c of 16 int16 values (in the order of the kernel's expanded weights), token 0's at qs
// + 32c and token 1's at qs + 32c + 16, so that one plain 64-byte load gives a register holding
// the same 16 positions of both tokens (a missing second token is zeros); d, s, s2: token 0's 8
// values then token 1's (their meaning is the kernel's: kquant_avx512.cc, q32_avx512.cc).
struct alignas(64) BlockQ16P {
  int16_t qs[512];
  float d[16];
  float s[16];
  float s2[16];
};
static_assert(sizeof(BlockQ16P) == 1216, "BlockQ16P layout");

// The int32 dots of one 256-value group of two rows (16-value chunk c of row 0 at w0 + 16c, of row 1
// at w1 + 16c) with NP token pairs (pair p at x + p * xs). A weight register W holds chunk c of row 0
// (lanes 0-7) and of row 1 (lanes 8-15), an activation register X chunk c of tokens 2p and 2p + 1:
// W . X gives (row 0, token 2p) and (row 1, token 2p + 1) into ia[2p], W with its halves swapped
// (vshufi64x2, off the multiply pipes) . X the other two into ia[2p + 1]. Every operand is a plain
// 64-byte load: a 256-bit broadcast load costs a third of a cycle more per vpdpwssd on AMD Zen 4
// (1.34 against 1.0-1.07 cycles in isolation). Each lane sums 32 products; kSplit: the odd chunks
// into ib instead (16 products a lane each, for weights too large for 32).
template <int NP, bool kSplit>
inline void pair_group_sums(const int16_t* w0, const int16_t* w1, const BlockQ16P* x, int64_t xs, __m512i* ia,
                            __m512i* ib) {
  KQ_UNROLL for (int i = 0; i < 2 * NP; ++i) ia[i] = ib[i] = _mm512_setzero_si512();
  KQ_UNROLL for (int c2 = 0; c2 < 8; ++c2) {
    KQ_UNROLL for (int h = 0; h < 2; ++h) {
      const int c = 2 * c2 + h;
      const __m512i W = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(w0 + 16 * c))),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(w1 + 16 * c)), 1);
      const __m512i Ws = _mm512_shuffle_i64x2(W, W, 0x4e);
      KQ_UNROLL for (int p = 0; p < NP; ++p) {
        __m512i X = _mm512_load_si512(x[p * xs].qs + 32 * c);
        in_register(X);
        if (kSplit && h) {
          ib[2 * p] = _mm512_dpwssd_epi32(ib[2 * p], W, X);
          ib[2 * p + 1] = _mm512_dpwssd_epi32(ib[2 * p + 1], Ws, X);
        } else {
          ia[2 * p] = _mm512_dpwssd_epi32(ia[2 * p], W, X);
          ia[2 * p + 1] = _mm512_dpwssd_epi32(ia[2 * p + 1], Ws, X);
        }
      }
    }
  }
}

// 8 values a + b (8 floats each) as [a | b].
inline __m512 halves(__m256 a, __m256 b) { return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1); }
// v with its 256-bit halves swapped.
inline __m512 swap_halves(__m512 v) { return _mm512_shuffle_f32x4(v, v, 0x4e); }

// The two-row dots' results: acc[2p] holds [(row 0, token 2p) | (row 1, token 2p + 1)] and acc[2p + 1]
// [(row 1, token 2p) | (row 0, token 2p + 1)] over 8 lanes each (acc[8], the unused ones zero);
// out[t] = row 0 . x_t, out[kTileT + t] = row 1 . x_t for t < 8.
inline void pair_store(const __m512* acc, float* out) {
  __m512 tok[8];  // token t: row 0 in the low half, row 1 in the high half
  KQ_UNROLL for (int p = 0; p < 4; ++p) {
    tok[2 * p] = _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], 0x44);
    tok[2 * p + 1] = _mm512_shuffle_f32x4(acc[2 * p + 1], acc[2 * p], 0xee);
  }
  reduce8_two_rows(tok, out);
}


}  // namespace avx512
}  // namespace cpu
}  // namespace cyb
