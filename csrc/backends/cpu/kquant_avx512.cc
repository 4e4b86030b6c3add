// AVX-512 (BW, VBMI-free, VNNI) fast-mode matmul for the K-quant super-block
// encodings Q2_K, Q3_K, Q4_K, Q5_K and Q6_K. Chosen at run time at the avx512 level only.
//
// Activations: one int16 scale per 256 values (BlockQ16K: d = amax / 32767,
// q = round-half-even(x * (1 / d))), stored so that each 64-value group holds
// its 32 even elements, then its 32 odd ones. The weights are expanded with no
// lane shuffle: a 64-byte register of 6-bit/4-bit codes (one byte per element,
// natural order) is multiplied by the per-sub-block scales with vpmaddubsw
// twice (once with the scale in the even byte of each 16-bit lane, once in the
// odd byte), which yields the even and the odd elements as int16 weight x scale.
// vpdpwssd then accumulates weight x activation in int32 over a whole
// super-block (bounds below), converted to f32 once per super-block.
//
// int32 bounds per lane and super-block (16 products): Q4_K |w*sc| <= 15*63,
// Q5_K <= 31*63, Q6_K |(q-32)*sc| <= 32*128 = 4096, Q3_K |(q-4)*sc| <= 4*32, Q2_K
// |q*sc| <= 3*15; |x| <= 32767, so the worst case is 16 * 4096 * 32767 = 2147418112
// < 2^31 - 1.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/avx512_common.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kquant_x86.h"
#include "backends/cpu/simd_common.h"
#include "core/dtype.h"

namespace cyb {
namespace cpu {
namespace {
using avx512::BlockQ16P;
using avx512::reduce8;

constexpr __mmask64 kEvenBytes = 0x5555555555555555ull, kOddBytes = 0xAAAAAAAAAAAAAAAAull;

// ------------------------------------------------------------ activations

// The 16-bit scale of 256 activations: d = amax / 32767, *vid = 1 / d in every lane (0 where d is).
inline float q16k_scale(const float* xs, __m512* vid) {
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < 256; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xs + i)));
  const float d = _mm512_reduce_max_ps(m) / 32767.0f;
  *vid = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  return d;
}

void quantize_row_q16k(const float* x, int64_t k, BlockQ16K* out) {
  // element index pairs: lane i of "even" takes element 2i of the 64, "odd" 2i+1
  alignas(64) static const int16_t kEven[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                                32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
  const __m512i ie = _mm512_load_si512(kEven), io = _mm512_add_epi16(ie, _mm512_set1_epi16(1));
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const float* xs = x + sb * 256;
    __m512 vid;
    const float d = q16k_scale(xs, &vid);
    BlockQ16K& o = out[sb];
    o.d = d;
    KQ_UNROLL for (int g = 0; g < 4; ++g) {  // 64 elements per group
      __m512i q[4];
      KQ_UNROLL for (int j = 0; j < 4; ++j)  // cvtps rounds half to even (default MXCSR)
        q[j] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 64 * g + 16 * j), vid));
      o.s[2 * g] = d * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1])));
      o.s[2 * g + 1] = d * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q[2], q[3])));
      o.s2[2 * g] = d * static_cast<float>(_mm512_reduce_add_epi32(q[0]));
      o.s2[2 * g + 1] = d * static_cast<float>(_mm512_reduce_add_epi32(q[2]));
      // |q| <= 32767: the narrowing is exact
      const __m512i n0 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(q[0])),
                                            _mm512_cvtepi32_epi16(q[1]), 1);
      const __m512i n1 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(q[2])),
                                            _mm512_cvtepi32_epi16(q[3]), 1);
      _mm512_store_si512(o.qs + 64 * g, _mm512_permutex2var_epi16(n0, ie, n1));
      _mm512_store_si512(o.qs + 64 * g + 32, _mm512_permutex2var_epi16(n0, io, n1));
    }
  }
}

// The 16-value sub-block of each lane of dot_split_q6k's sums (group_sums of its four code registers).
alignas(16) constexpr int8_t kQ6Lanes[16] = {0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15};

// Q4_K decode activations (Avx512K::dot_split_q4k), in BlockQ16K storage: the 16-bit q of
// quantize_row_q16k (d = amax / 32767, q = round-half-even(x / d)) split as q = 256 hi + lo
// (hi = q >> 8 in [-128, 127], lo = q & 255 in [0, 255]), qs's 512 bytes holding hi[256] (int8)
// then lo[256] (uint8) in the order of the dot's code registers (byte 64r + 32u + l, r = 2h + k:
// element 128h + 64u + 32k + l, i.e. natural 32-block j = 4h + 2u + k at 64r + 32u); s[j] = d *
// sum(q) over natural 32-block j as in quantize_row_q16k; s2 and pad2 (64 bytes) hold int32 32 *
// sum(q) over each 16-value sub-block, in the lane order of dot_split_q6k (kQ6Lanes). Nothing is
// lost: the dots rebuild each exact code x q product from the two bytes.
void quantize_row_split(const float* x, int64_t k, BlockQ16K* out) {
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const float* xs = x + sb * 256;
    __m512 vid;
    const float d = q16k_scale(xs, &vid);
    BlockQ16K& o = out[sb];
    o.d = d;
    int8_t* hi = reinterpret_cast<int8_t*>(o.qs);
    int32_t s16[16];  // sum(q) over natural 16-value sub-block i
    KQ_UNROLL for (int j = 0; j < 8; ++j) {
      const int h = j / 4, u = (j / 2) % 2, kk = j % 2;
      int8_t* dst = hi + 64 * (2 * h + kk) + 32 * u;
      KQ_UNROLL for (int i = 0; i < 2; ++i) {
        // cvtps rounds half to even (default MXCSR); |q| <= 32767, the narrowings are exact
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 32 * j + 16 * i), vid));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * i), _mm512_cvtepi32_epi8(_mm512_srai_epi32(q, 8)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 256 + 16 * i),
                         _mm512_cvtepi32_epi8(_mm512_and_si512(q, _mm512_set1_epi32(255))));
        s16[2 * j + i] = _mm512_reduce_add_epi32(q);
      }
      o.s[j] = d * static_cast<float>(s16[2 * j] + s16[2 * j + 1]);
    }
    alignas(64) int32_t lanes[16];
    for (int m = 0; m < 16; ++m) lanes[m] = 32 * s16[kQ6Lanes[m]];
    static_assert(offsetof(BlockQ16K, pad2) == offsetof(BlockQ16K, s2) + 32, "s2 and pad2 adjacent");
    _mm512_store_si512(o.s2, _mm512_load_si512(lanes));
  }
}

// Tokens 2p and 2p + 1 of x[T, K] into out[p * K / 256 ..] (avx512_common.h BlockQ16P: chunk c =
// qs + 16c of each token's quantize_row_q16k block; d: the token's scale in all 8 lanes; s, s2 as
// BlockQ16K's).
void quantize_pairs(const float* x, int64_t T, int64_t K, BlockQ16P* out) {
  const int64_t nsb = K / 256;
  for (int64_t p = 0; p < (T + 1) / 2; ++p)
    for (int64_t sb = 0; sb < nsb; ++sb) {
      BlockQ16K q[2];
      quantize_row_q16k(x + 2 * p * K + sb * 256, 256, &q[0]);
      if (2 * p + 1 < T)
        quantize_row_q16k(x + (2 * p + 1) * K + sb * 256, 256, &q[1]);
      else
        std::memset(static_cast<void*>(&q[1]), 0, sizeof q[1]);
      BlockQ16P& o = out[p * nsb + sb];
      KQ_UNROLL for (int c = 0; c < 16; ++c)
        _mm512_store_si512(o.qs + 32 * c,
                           _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256(
                                                  reinterpret_cast<const __m256i*>(q[0].qs + 16 * c))),
                                              _mm256_load_si256(reinterpret_cast<const __m256i*>(q[1].qs + 16 * c)), 1));
      _mm512_store_ps(o.d, _mm512_insertf32x8(_mm512_set1_ps(q[0].d), _mm256_set1_ps(q[1].d), 1));
      _mm512_store_ps(o.s, _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_load_ps(q[0].s)), _mm256_load_ps(q[1].s), 1));
      _mm512_store_ps(o.s2,
                      _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_load_ps(q[0].s2)), _mm256_load_ps(q[1].s2), 1));
    }
}

// ------------------------------------------------------------ weights

// Weight registers of one super-block: W[2g] / W[2g+1] are the even / odd
// elements of group g (64 values) times their scale, as int16.
struct SuperW {
  __m512i w[8];
};

// Q4_K / Q5_K: X[g] = codes of elements 64g..64g+63; the scale of byte b of group g is sc[2g + (b >= 32)].
template <bool Q5>
inline void load_q45(const uint8_t* blk, __m128i sm, SuperW& W) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  const __m512i smz = _mm512_broadcast_i32x4(sm);
  const uint8_t* qs = blk + (Q5 ? 48 : 16);
  __m512i X[4];
  KQ_UNROLL for (int c = 0; c < 2; ++c) {
    const __m512i raw = _mm512_loadu_si512(qs + 64 * c);
    const __m512i lo = _mm512_and_si512(raw, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
    X[2 * c] = _mm512_shuffle_i64x2(lo, hi, 0x44);      // elements 128c + 0..63
    X[2 * c + 1] = _mm512_shuffle_i64x2(lo, hi, 0xee);  // elements 128c + 64..127
  }
  if (Q5) {
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    const __m512i one = _mm512_set1_epi8(1);
    KQ_UNROLL for (int g = 0; g < 4; ++g) {
      // bit j of qh[l] is the fifth bit of element 32j + l (the 16-bit shifts
      // keep bit j of each byte in its bit 0)
      const __m512i h = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_srli_epi16(qh, 2 * g)), _mm256_srli_epi16(qh, 2 * g + 1), 1);
      X[g] = _mm512_or_si512(X[g], _mm512_slli_epi16(_mm512_and_si512(h, one), 4));
    }
  }
  KQ_UNROLL for (int g = 0; g < 4; ++g) {
    // byte index into the broadcast scales: 2g for bytes 0-31, 2g+1 for 32-63 of each 64
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(2 * g)),
                                           _mm256_set1_epi8(static_cast<char>(2 * g + 1)), 1);
    const __m512i pe = _mm512_maskz_shuffle_epi8(kEvenBytes, smz, idx);
    const __m512i po = _mm512_maskz_shuffle_epi8(kOddBytes, smz, idx);
    W.w[2 * g] = _mm512_maddubs_epi16(X[g], pe);
    W.w[2 * g + 1] = _mm512_maddubs_epi16(X[g], po);
  }
}

// The vpmaddubsw scale operands of 64-value group g for encodings with 16-value sub-blocks
// (Q2_K, Q3_K, Q6_K; smz: their 16 scales in every 128-bit lane): element 64g + b (byte b) has
// scale index 4g + b / 16, i.e. 4g + L within 128-bit lane L; in the even byte of each 16-bit
// lane (pe) or the odd one (po), the other byte 0.
inline void sub16_operands(__m512i smz, int g, __m512i* pe, __m512i* po) {
  const __m512i idx = _mm512_add_epi8(_mm512_set1_epi8(static_cast<char>(4 * g)),
                                      _mm512_set_epi32(3 * 0x01010101, 3 * 0x01010101, 3 * 0x01010101,
                                                       3 * 0x01010101, 2 * 0x01010101, 2 * 0x01010101,
                                                       2 * 0x01010101, 2 * 0x01010101, 0x01010101, 0x01010101,
                                                       0x01010101, 0x01010101, 0, 0, 0, 0));
  *pe = _mm512_maskz_shuffle_epi8(kEvenBytes, smz, idx);
  *po = _mm512_maskz_shuffle_epi8(kOddBytes, smz, idx);
}

// Q6_K's weight registers from its codes X[g] (elements 64g..64g+63, 0..63): value (q - 32) * sc[e / 16].
inline void q6_weights(const uint8_t* blk, const __m512i* X, SuperW& W) {
  const __m512i smz = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
  const __m512i c32 = _mm512_set1_epi8(32);
  KQ_UNROLL for (int g = 0; g < 4; ++g) {
    __m512i pe, po;
    sub16_operands(smz, g, &pe, &po);
    const __m512i off = _mm512_maddubs_epi16(c32, pe);  // 32 * sc per 16-bit lane
    W.w[2 * g] = _mm512_sub_epi16(_mm512_maddubs_epi16(X[g], pe), off);
    W.w[2 * g + 1] = _mm512_sub_epi16(_mm512_maddubs_epi16(X[g], po), off);
  }
}

// Q6_K: codes 0..63 (low 4 bits in ql, the high 2 in qh), value (q - 32) * sc[e / 16].
inline void load_q6(const uint8_t* blk, SuperW& W) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f), three = _mm512_set1_epi8(3);
  __m512i X[4];
  KQ_UNROLL for (int h = 0; h < 2; ++h) {
    const __m512i L = _mm512_loadu_si512(blk + 64 * h);
    const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(H), _mm256_srli_epi16(H, 2), 1);
    const __m512i hz2 = _mm512_srli_epi16(hz, 4);
    X[2 * h] = _mm512_or_si512(_mm512_and_si512(L, lo4), _mm512_slli_epi16(_mm512_and_si512(hz, three), 4));
    X[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), lo4),
                                   _mm512_slli_epi16(_mm512_and_si512(hz2, three), 4));
  }
  q6_weights(blk, X, W);
}

// Q3_K / Q2_K: 2-bit codes, 32-value group G = 4h + j in bits 2j..2j+1 of qs bytes 32h..32h+31;
// 64-value group g holds groups 2g and 2g + 1, the scale of its element b is sc[4g + b / 16].
// Q3_K: bit G of hmask[l] is the code's third bit, value (q - 4) * sc; Q2_K: q * sc, the mins
// apart (q2k_header).
template <bool Q3>
inline void load_q23(const uint8_t* blk, SuperW& W) {
  const __m512i three = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1), c4 = _mm512_set1_epi8(4);
  const __m512i smz = _mm512_broadcast_i32x4(Q3 ? q3k_scales(blk + 96) : q2k_scales(blk));
  const uint8_t* qs = blk + (Q3 ? 32 : 16);
  const __m256i hm = Q3 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)) : _mm256_setzero_si256();
  KQ_UNROLL for (int g = 0; g < 4; ++g) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (g / 2)));
    const int j = 2 * (g % 2);
    __m512i X = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(raw, 2 * j)),
                                                    _mm256_srli_epi16(raw, 2 * j + 2), 1),
                                 three);
    if (Q3) {  // (the 16-bit shifts keep bit G of each byte in its bit 0)
      const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(hm, 2 * g)),
                                           _mm256_srli_epi16(hm, 2 * g + 1), 1);
      X = _mm512_or_si512(X, _mm512_slli_epi16(_mm512_and_si512(h, one), 2));
    }
    __m512i pe, po;
    sub16_operands(smz, g, &pe, &po);
    if (Q3) {
      const __m512i off = _mm512_maddubs_epi16(c4, pe);  // 4 * sc per 16-bit lane
      W.w[2 * g] = _mm512_sub_epi16(_mm512_maddubs_epi16(X, pe), off);
      W.w[2 * g + 1] = _mm512_sub_epi16(_mm512_maddubs_epi16(X, po), off);
    } else {
      W.w[2 * g] = _mm512_maddubs_epi16(X, pe);
      W.w[2 * g + 1] = _mm512_maddubs_epi16(X, po);
    }
  }
}

// Q6_K's codes assembled with GFNI (CPUs that have it: cpu::has_gfni()): vgf2p8affineqb moves any
// bits of a byte to any others (an 8 x 8 bit matrix per 64-bit lane), so a 2-bit field of qh lands
// at bits 4-5 in one instruction (each 256-bit half of the register its own field, from qh loaded
// into both halves) and the high nibble of ql at bits 0-3 in another; vpternlogd merges the two.
// 10 vector instructions a super-block where load_q6 takes 26.
#if defined(__GNUC__)
#define CYB_GFNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,gfni")))
#else
#define CYB_GFNI_TARGET
#endif
// The matrix taking output bit i from input bit src[i] (none where src[i] < 0): byte 7 - i = 1 << src[i].
constexpr uint64_t gf_bits(int s0, int s1, int s2, int s3, int s4, int s5, int s6, int s7) {
  return (s0 < 0 ? 0 : (uint64_t{1} << s0) << 56) | (s1 < 0 ? 0 : (uint64_t{1} << s1) << 48) |
         (s2 < 0 ? 0 : (uint64_t{1} << s2) << 40) | (s3 < 0 ? 0 : (uint64_t{1} << s3) << 32) |
         (s4 < 0 ? 0 : (uint64_t{1} << s4) << 24) | (s5 < 0 ? 0 : (uint64_t{1} << s5) << 16) |
         (s6 < 0 ? 0 : (uint64_t{1} << s6) << 8) | (s7 < 0 ? 0 : (uint64_t{1} << s7));
}
// Field f of a qh byte (bits 2f, 2f + 1) at bits 4-5.
constexpr uint64_t gf_field(int f) { return gf_bits(-1, -1, -1, -1, 2 * f, 2 * f + 1, -1, -1); }

CYB_GFNI_TARGET inline void q6_codes_gfni(const uint8_t* blk, __m512i* X) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  const __m512i f01 = _mm512_inserti64x4(_mm512_set1_epi64(static_cast<int64_t>(gf_field(0))),
                                         _mm256_set1_epi64x(static_cast<int64_t>(gf_field(1))), 1);
  const __m512i f23 = _mm512_inserti64x4(_mm512_set1_epi64(static_cast<int64_t>(gf_field(2))),
                                         _mm256_set1_epi64x(static_cast<int64_t>(gf_field(3))), 1);
  const __m512i hi_nib = _mm512_set1_epi64(static_cast<int64_t>(gf_bits(4, 5, 6, 7, -1, -1, -1, -1)));
  KQ_UNROLL for (int h = 0; h < 2; ++h) {
    const __m512i L = _mm512_loadu_si512(blk + 64 * h);
    const __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
    // (c & a) | (~c & b), c = 0x0f: the low nibble from a, bits 4-5 from b (its others are 0)
    X[2 * h] = _mm512_ternarylogic_epi32(L, _mm512_gf2p8affine_epi64_epi8(H, f01, 0), lo4, 0xe4);
    X[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_gf2p8affine_epi64_epi8(L, hi_nib, 0),
                                             _mm512_gf2p8affine_epi64_epi8(H, f23, 0), lo4, 0xe4);
  }
}

// Four registers' sums within each 128-bit lane L: lane 4L + g of the result = the sum of
// the four int32 lanes of a[g]'s 128-bit lane L.
inline __m512i group_sums(const __m512i* a) {
  const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
  const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
}

// The split activations' products for half h of a super-block (code registers r = 2h, 2h + 1,
// one byte a code, Rg[i][k] of row i), for R rows at once: gs[i][r] = code x q (q = 256 hi + lo,
// quantize_row_split) summed 4 products a lane, as two vpdpbusd (code u8 x hi s8, shifted left by
// 8, then lo u8 x code); each activation register loaded once for all R rows (in_register).
template <int R>
inline void split_products(const __m512i (*Rg)[2], const int8_t* xh, int h, __m512i (*gs)[4]) {
  KQ_UNROLL for (int k = 0; k < 2; ++k) {
    const int r = 2 * h + k;
    __m512i xlo = _mm512_load_si512(xh + 64 * r), xhi = _mm512_load_si512(xh + 256 + 64 * r);
    if (R > 1) {
      in_register(xlo);
      in_register(xhi);
    }
    KQ_UNROLL for (int i = 0; i < R; ++i) {
      const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), Rg[i][k], xlo);
      gs[i][r] = _mm512_dpbusd_epi32(_mm512_slli_epi32(a, 8), xhi, Rg[i][k]);
    }
  }
}

inline __m512i super_dot(const SuperW& W, const BlockQ16K& xb) {
  __m512i a = _mm512_dpwssd_epi32(_mm512_setzero_si512(), W.w[0], _mm512_load_si512(xb.qs));
  __m512i b = _mm512_dpwssd_epi32(_mm512_setzero_si512(), W.w[1], _mm512_load_si512(xb.qs + 32));
  a = _mm512_dpwssd_epi32(a, W.w[2], _mm512_load_si512(xb.qs + 64));
  b = _mm512_dpwssd_epi32(b, W.w[3], _mm512_load_si512(xb.qs + 96));
  a = _mm512_dpwssd_epi32(a, W.w[4], _mm512_load_si512(xb.qs + 128));
  b = _mm512_dpwssd_epi32(b, W.w[5], _mm512_load_si512(xb.qs + 160));
  a = _mm512_dpwssd_epi32(a, W.w[6], _mm512_load_si512(xb.qs + 192));
  b = _mm512_dpwssd_epi32(b, W.w[7], _mm512_load_si512(xb.qs + 224));
  return _mm512_add_epi32(a, b);  // |a|, |b| <= 2^30 each: no overflow
}


// Q6_K decode (one token) on the split activations (quantize_row_split), CPUs with GFNI
// (has_gfni(); otherwise Avx512K::dot_row<Q6_K, 1>): the codes (q6_codes_gfni, 0..63, moved into
// the order of the Q4_K dot's registers by two 256-bit half swaps) multiplied by the activations'
// two bytes as in Avx512K::dot_split_q4k (two vpdpbusd a register), group_sums putting each
// 16-value sub-block's sum G_i in one lane (lane 4L + r: sub-block 8 (r / 2) + 2 (r % 2) + 4 (L /
// 2) + L % 2, kQ6Lanes), minus 32 S_i (S_i: the sub-block's sum of q, from the quantizer in that
// lane order), times sc_i, all exact in int32: |G_i - 32 S_i| = |sum (q_w - 32) q| <= 16 * 32 *
// 32767 and |sc| <= 128 give at most 2147418112 < 2^31 - 1; then d * d_x in one FMA. No weights
// scaled to int16 and no offset subtracted per value (load_q6, q6_weights): one thread's Q6_K
// matvec on AMD Zen 4 36.6 -> 31.2 cycles a super-block.
template <int R>
CYB_GFNI_TARGET void split_q6k_rows(const uint8_t* w, size_t rs, const BlockQ16K* x, int64_t nsb, float* out) {
  constexpr int64_t kBytes = kq_bytes<DType::Q6_K>();
  const __m128i ord = _mm_load_si128(reinterpret_cast<const __m128i*>(kQ6Lanes));
  __m512 ap[R];
  KQ_UNROLL for (int i = 0; i < R; ++i) ap[i] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const BlockQ16K& xb = x[sb];
    const int8_t* xh = reinterpret_cast<const int8_t*>(xb.qs);
    __m512i X[R][4], gs[R][4];
    KQ_UNROLL for (int i = 0; i < R; ++i) {
      const uint8_t* blk = w + i * rs + sb * kBytes;
      kq_decode_prefetch<kBytes>(blk);
      q6_codes_gfni(blk, X[i]);
    }
    KQ_UNROLL for (int h = 0; h < 2; ++h) {
      __m512i Rg[R][2];
      KQ_UNROLL for (int i = 0; i < R; ++i) {
        Rg[i][0] = _mm512_shuffle_i64x2(X[i][2 * h], X[i][2 * h + 1], 0x44);
        Rg[i][1] = _mm512_shuffle_i64x2(X[i][2 * h], X[i][2 * h + 1], 0xee);
      }
      split_products<R>(Rg, xh, h, gs);
    }
    KQ_UNROLL for (int i = 0; i < R; ++i) {
      const uint8_t* blk = w + i * rs + sb * kBytes;
      const __m512i sc =
          _mm512_cvtepi8_epi32(_mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)), ord));
      const __m512i g = _mm512_sub_epi32(group_sums(gs[i]), _mm512_load_si512(xb.s2));  // (- 32 S_i, quantize_row_split)
      ap[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_mullo_epi32(g, sc)), _mm512_set1_ps(f16v(blk + 208) * xb.d), ap[i]);
    }
  }
  KQ_UNROLL for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(ap[i]);
}
CYB_GFNI_TARGET void dot_split_q6k(const uint8_t* w, const BlockQ16K* x, int64_t nsb, int64_t, float* out) {
  split_q6k_rows<1>(w, 0, x, nsb, out);
}
CYB_GFNI_TARGET void dot2_split_q6k(const uint8_t* w, size_t rs, const BlockQ16K* x, int64_t nsb, float* out) {
  split_q6k_rows<2>(w, rs, x, nsb, out);
}

struct Avx512K {
  static constexpr int kTileT = avx512::kTileT;
  static constexpr int kRows = 2;
  static_assert(kTileT == 8, "dot_expanded writes 8 tokens per row");
  using Act = BlockQ16P;  // two tokens a block
  static constexpr int kActTokens = 2;
  static void quantize_prefill(const float* x, int64_t T, int64_t K, BlockQ16P* out) { quantize_pairs(x, T, K, out); }

  // One super-block's registers (and d, dmin * m[j] for Q4_K / Q5_K, Q2_K's min term: q2k_header).
  template <DType E>
  static inline void load(const uint8_t* blk, SuperW& W, float* d, float* mins, float* dmin, int8_t* dm) {
    if constexpr (E == DType::Q4_K || E == DType::Q5_K) {
      load_q45<E == DType::Q5_K>(blk, kq_header(blk, d, mins), W);
    } else if constexpr (E == DType::Q6_K) {
      *d = f16v(blk + 208);
      load_q6(blk, W);
    } else if constexpr (E == DType::Q3_K) {
      *d = f16v(blk + 108);
      load_q23<true>(blk, W);
    } else {
      q2k_header(blk, d, dmin, mins, dm);
      load_q23<false>(blk, W);
    }
  }

  // out[t] = row . x_t for NT tokens (x_t = x + t * xs super-blocks).
  template <DType E, int NT>
  static void dot_row(const uint8_t* w, const BlockQ16K* x, int64_t nsb, int64_t xs, float* out) {
    constexpr bool kMins = kq_mins<E>();
    constexpr int64_t kBytes = kq_bytes<E>();
    __m512 acc[8];
    KQ_UNROLL for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
    alignas(32) float mv[8] = {};
    alignas(8) int8_t dm[8] = {};
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kBytes;
      if (NT == 1) kq_decode_prefetch<kBytes>(blk);  // decode streams the weights once (kquant_x86.h)
      SuperW W;
      float d, dmin = 0.0f;
      load<E>(blk, W, &d, mv, &dmin, dm);
      const __m512 mins = kMins ? _mm512_zextps256_ps512(_mm256_load_ps(mv)) : _mm512_setzero_ps();
      const __m512 mins2 = kq_half_mins<E>() ? _mm512_zextps256_ps512(q2k_half_mins(dmin, dm)) : _mm512_setzero_ps();
      KQ_UNROLL for (int t = 0; t < NT; ++t) {
        const BlockQ16K& xb = x[t * xs + sb];
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(super_dot(W, xb)), _mm512_set1_ps(d * xb.d), acc[t]);
        if constexpr (kMins) acc[t] = _mm512_fnmadd_ps(mins, _mm512_zextps256_ps512(_mm256_load_ps(xb.s)), acc[t]);
        if constexpr (kq_half_mins<E>())
          acc[t] = _mm512_fnmadd_ps(mins2, _mm512_zextps256_ps512(_mm256_load_ps(xb.s2)), acc[t]);
      }
    }
    if (NT == 1) {
      out[0] = _mm512_reduce_add_ps(acc[0]);
      return;
    }
    alignas(32) float r[8];
    _mm256_store_ps(r, reduce8(acc));
    KQ_UNROLL for (int t = 0; t < NT; ++t) out[t] = r[t];
  }

  static RowDotFn decode_dot(DType t) {
    return t == DType::Q4_K ? &dot_split_q4k : t == DType::Q6_K && has_gfni() ? &dot_split_q6k : nullptr;
  }

  // Decode (one token) of a Q4_K row on the split activations (quantize_row_split): the codes
  // stay bytes (64 a register: the low or the high nibbles of 64 code bytes, r = 2h + k for
  // bytes 64h.. and nibble k) and VNNI multiplies them by the activations' high bytes (code u8 x
  // hi s8), the sums shifted left by 8, then adds the low bytes' products (lo u8 x code, the
  // code as s8) into the same sums (vpdpbusd, four products a lane): 8 multiplies a super-block
  // as the int16 dot's, without widening the codes to 16 bits or building scale operands for
  // each group (AMD Zen 4: one thread's Q4_K matvec +17%, docs/cpu-bench.md). Lane l of
  // register r sums 4 products of one 32-value sub-block, |sum| <= 4 * 15 * 32767; group_sums
  // puts quarter L of register r at lane 4L + r (sub-block 4 (r / 2) + 2 (L / 2) + r % 2),
  // |sum| <= 16 * 15 * 32767 < 2^23 (exact in f32), scaled by d sc in f32. Each super-block's
  // header (d x the scales in that lane order, dmin x the mins) is decoded one super-block
  // ahead, into registers. Value d sc q - dmin m (q 0..15, sc and m 6-bit, per 32 values).
  template <int R>
  static void split_q4k_rows(const uint8_t* w, size_t rb, const BlockQ16K* x, int64_t nsb, float* out) {
    constexpr int64_t kBytes = kq_bytes<DType::Q4_K>();
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    auto header = [&](int i, int64_t sb, __m512i* sci, float* d, __m256* mins) {
      const __m128i sm = kq_header(w + i * rb + sb * kBytes, d, mins);
      *sci = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(sm, _mm_setr_epi8(0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7)));
    };
    __m512 ap[R];
    __m256 am[R];
    __m512i sci[R];
    float d[R];
    __m256 mins[R];
    KQ_UNROLL for (int i = 0; i < R; ++i) {
      ap[i] = _mm512_setzero_ps();
      am[i] = _mm256_setzero_ps();
      sci[i] = _mm512_setzero_si512();
      d[i] = 0.0f;
      mins[i] = _mm256_setzero_ps();
      if (nsb > 0) header(i, 0, &sci[i], &d[i], &mins[i]);
    }
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const BlockQ16K& xb = x[sb];
      const int8_t* xh = reinterpret_cast<const int8_t*>(xb.qs);
      __m512i gs[R][4];
      KQ_UNROLL for (int i = 0; i < R; ++i) kq_decode_prefetch<kBytes>(w + i * rb + sb * kBytes);
      KQ_UNROLL for (int h = 0; h < 2; ++h) {
        __m512i Rg[R][2];
        KQ_UNROLL for (int i = 0; i < R; ++i) {
          __m512i raw = _mm512_loadu_si512(w + i * rb + sb * kBytes + 16 + 64 * h);
          in_register(raw);
          Rg[i][0] = _mm512_and_si512(raw, m4);
          Rg[i][1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        }
        split_products<R>(Rg, xh, h, gs);
      }
      KQ_UNROLL for (int i = 0; i < R; ++i) {
        __m512i sci_next = sci[i];
        float d_next = d[i];
        __m256 mins_next = mins[i];
        if (sb + 1 < nsb) header(i, sb + 1, &sci_next, &d_next, &mins_next);
        const __m512 sv = _mm512_cvtepi32_ps(_mm512_mullo_epi32(group_sums(gs[i]), sci[i]));
        ap[i] = _mm512_fmadd_ps(sv, _mm512_set1_ps(d[i] * xb.d), ap[i]);
        am[i] = _mm256_fmadd_ps(mins[i], _mm256_load_ps(xb.s), am[i]);
        sci[i] = sci_next;
        d[i] = d_next;
        mins[i] = mins_next;
      }
    }
    KQ_UNROLL for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(ap[i]) - hsum8(am[i]);
  }
  static void dot_split_q4k(const uint8_t* w, const BlockQ16K* x, int64_t nsb, int64_t, float* out) {
    split_q4k_rows<1>(w, 0, x, nsb, out);
  }
  static void dot2_split_q4k(const uint8_t* w, size_t rb, const BlockQ16K* x, int64_t nsb, float* out) {
    split_q4k_rows<2>(w, rb, x, nsb, out);
  }
  static RowPairFn decode_dot2(DType t) {
    return t == DType::Q4_K ? &dot2_split_q4k : t == DType::Q6_K && has_gfni() ? &dot2_split_q6k : nullptr;
  }

  // nsb super-blocks of a row, expanded: W.w[i] at w + 32 i (even / odd elements of each 64).
  template <DType E>
  static void expand_row(const uint8_t* w, int64_t nsb, ExpSB* out) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      SuperW W;
      ExpSB& o = out[sb];
      load<E>(w + sb * kq_bytes<E>(), W, &o.d, o.mins, &o.dmin, o.dm);
      KQ_UNROLL for (int i = 0; i < 8; ++i) _mm512_store_si512(o.w + 32 * i, W.w[i]);
    }
  }

  // Two rows per dot: out[t] = row0 . x_t, out[kTileT + t] = row1 . x_t (row1 at w + ws) for NT
  // tokens, the rows given as nsb expanded super-blocks, the tokens as pairs (BlockQ16P:
  // quantize_pairs): avx512_common.h pair_group_sums, then per super-block the sums scaled by d_w
  // d_x and the mins subtracted. Per lane and super-block 32 products; Q6_K's (|w| <= 4096) split
  // over two accumulators of 16 each (the bounds of the file comment), the rest summed in one:
  // Q5_K 32 * 1953 * 32767 = 2047806432 < 2^31 - 1.
  template <DType E, int NT>
  static void dot_expanded(const ExpSB* w, int64_t ws, const BlockQ16P* x, int64_t nsb, int64_t xs, float* out) {
    constexpr int NP = (NT + 1) / 2;
    constexpr bool kMins = kq_mins<E>(), kSplit = E == DType::Q6_K;
    const ExpSB* w1 = w + ws;
    __m512 acc[8];
    KQ_UNROLL for (int i = 0; i < 8; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const ExpSB& e0 = w[sb];
      const ExpSB& e1 = w1[sb];
      __m512i ia[2 * NP], ib[2 * NP];
      avx512::pair_group_sums<NP, kSplit>(e0.w, e1.w, x + sb, xs, ia, ib);
      const __m512 dd = avx512::halves(_mm256_set1_ps(e0.d), _mm256_set1_ps(e1.d)), dds = avx512::swap_halves(dd);
      __m512 mins = _mm512_setzero_ps(), mins2 = mins;
      if constexpr (kMins) mins = avx512::halves(_mm256_load_ps(e0.mins), _mm256_load_ps(e1.mins));
      if constexpr (kq_half_mins<E>()) mins2 = avx512::halves(q2k_half_mins(e0.dmin, e0.dm), q2k_half_mins(e1.dmin, e1.dm));
      const __m512 minss = avx512::swap_halves(mins), mins2s = avx512::swap_halves(mins2);
      KQ_UNROLL for (int p = 0; p < NP; ++p) {
        const BlockQ16P& xb = x[p * xs + sb];
        const __m512 xd = _mm512_load_ps(xb.d);
        KQ_UNROLL for (int h = 0; h < 2; ++h) {
          __m512& A = acc[2 * p + h];
          const __m512 v = kSplit ? _mm512_add_ps(_mm512_cvtepi32_ps(ia[2 * p + h]), _mm512_cvtepi32_ps(ib[2 * p + h]))
                                  : _mm512_cvtepi32_ps(ia[2 * p + h]);
          A = _mm512_fmadd_ps(v, _mm512_mul_ps(h ? dds : dd, xd), A);
          if constexpr (kMins) A = _mm512_fnmadd_ps(h ? minss : mins, _mm512_load_ps(xb.s), A);
          if constexpr (kq_half_mins<E>()) A = _mm512_fnmadd_ps(h ? mins2s : mins2, _mm512_load_ps(xb.s2), A);
        }
      }
    }
    avx512::pair_store(acc, out);
  }

};

}  // namespace

bool avx512_kquant_encoding(DType t) { return kq_row_dots<Avx512K>(t) != nullptr; }

void avx512_kquant_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx) {
  if (T == 1) {
    const Tensor* w = &W;
    return avx512_kquant_decode(x, K, &w, &y, 1, ctx);
  }
  kq_expanded_prefill<Avx512K>(x, W, T, K, y, ctx);
}

void avx512_kquant_decode(const float* x, int64_t K, const Tensor* const* W, float* const* y, int n,
                          ExecContext& ctx) {
  kq_decode_token<Avx512K>(x, K, W, y, n, ctx, quantize_row_q16k, quantize_row_split);
}

}  // namespace cpu
}  // namespace cyb
