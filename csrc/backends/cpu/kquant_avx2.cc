// AVX2 (+ FMA, F16C) fast-mode matmul for the K-quant super-block encodings
// Q2_K, Q3_K, Q4_K, Q5_K and Q6_K: the avx2 counterpart of kquant_avx512.cc, on 256-bit
// registers and without VNNI. Chosen at run time at the avx2 level.
//
// Activations: one int16 scale per 256 values (BlockQ16K, the same quantization
// as the avx512 level: d = amax / 32767, q = round-half-even(x * (1 / d))),
// stored so that each 32-value group holds its 16 even elements, then its 16
// odd ones. Weights: a 32-byte register of codes (one byte per element, natural
// order) times the group's scales with vpmaddubsw twice (scale in the even byte
// of each 16-bit lane, then in the odd byte) gives the even and the odd
// elements as int16 weight x scale, with no lane shuffle; vpmaddwd + vpaddd then
// accumulate weight x activation in int32, converted to f32 once per super-block
// (Q4_K, Q5_K) or per half super-block (Q6_K).
//
// int32 bounds per lane (8 lanes; 4 products per lane per 32-value group):
// Q4_K |w*sc| <= 15*63 = 945: 32 products * 945 * 32767 < 2^30; Q5_K 31*63 = 1953:
// 32 * 1953 * 32767 = 2047806432 < 2^31 - 1; Q6_K |(q-32)*sc| <= 32*128 = 4096:
// 16 products (half a super-block) * 4096 * 32767 = 2147418112 < 2^31 - 1; Q3_K
// |(q-4)*sc| <= 4*32 and Q2_K |q*sc| <= 3*15: far inside.
//
// Prefill (T > 1) runs on expanded weights (kquant_x86.h: each block of 8 rows x
// 6 super-blocks expanded once, every 4-token tile against it); decode (kq_decode) reads each
// row once, super-block by super-block, with a software prefetch ahead: Q4_K, Q5_K and Q6_K on the
// same activations split into their high and low bytes (quantize_row_split, Avx2K::split_rows),
// the other encodings on BlockQ16K as above.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kquant_x86.h"
#include "backends/cpu/simd_common.h"
#include "core/dtype.h"

namespace cyb {
namespace cpu {
namespace {

inline int hsum8i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// ------------------------------------------------------------ activations

// The activations' int16 q of one 256-value super-block xs: d = amax / 32767 and
// q = round-half-even(x * (1 / d)) (|q| <= 32767); f(g, q) for the 8 groups of 32 values, q[j]
// = elements 32g + 8j .. + 7 as int32. Returns d. The one quantization of both activation forms
// (quantize_row_q16k, quantize_row_split).
template <class F>
inline float q16k_groups(const float* xs, F&& f) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 256; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xs + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  const float d = amax / 32767.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  KQ_UNROLL for (int g = 0; g < 8; ++g) {  // 32 elements per group
    __m256i q[4];
    KQ_UNROLL for (int j = 0; j < 4; ++j)  // cvtps rounds half to even (default MXCSR)
      q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xs + 32 * g + 8 * j), vid));
    f(g, q);
  }
  return d;
}

void quantize_row_q16k(const float* x, int64_t k, BlockQ16K* out) {
  // within each 128-bit lane: the 4 even 16-bit elements, then the 4 odd ones
  const __m256i eo = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                      0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    BlockQ16K& o = out[sb];
    int32_t s16[8], s32[8];  // sum(q) over each group's first 16 elements, over all 32
    o.d = q16k_groups(x + sb * 256, [&](int g, const __m256i* q) {
      const __m256i h0 = _mm256_add_epi32(q[0], q[1]);  // elements 0-15
      s16[g] = hsum8i(h0);
      s32[g] = hsum8i(_mm256_add_epi32(h0, _mm256_add_epi32(q[2], q[3])));
      // |q| <= 32767: packs is exact; packs interleaves the 128-bit lanes, the permute restores the order
      const __m256i a = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8);  // elements 0-15
      const __m256i b = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8);  // 16-31
      // per 128-bit lane: even then odd; then the qwords as [even a, even b | odd a, odd b]
      const __m256i ae = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(a, eo), 0xd8);  // [e0-14, o1-15]
      const __m256i be = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(b, eo), 0xd8);  // [e16-30, o17-31]
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.qs + 32 * g), _mm256_permute2x128_si256(ae, be, 0x20));
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.qs + 32 * g + 16), _mm256_permute2x128_si256(ae, be, 0x31));
    });
    for (int g = 0; g < 8; ++g) {
      o.s2[g] = o.d * static_cast<float>(s16[g]);
      o.s[g] = o.d * static_cast<float>(s32[g]);
    }
  }
}

// Q4_K / Q5_K / Q6_K decode activations (Avx2K::split_rows), in BlockQ16K storage: quantize_row_q16k's
// q split as q = 256 hi + lo (hi = q >> 8 in [-128, 127], lo = q & 255 in [0, 255]), qs's 512
// bytes holding hi[256] (int8) then lo[256] (uint8), both in natural element order; d, s and s2
// as quantize_row_q16k's. Nothing is lost: the dots rebuild each exact code x q product from the
// two bytes.
void quantize_row_split(const float* x, int64_t k, BlockQ16K* out) {
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    BlockQ16K& o = out[sb];
    int8_t* hi = reinterpret_cast<int8_t*>(o.qs);
    int32_t s16[8], s32[8];
    o.d = q16k_groups(x + sb * 256, [&](int g, const __m256i* q) {
      const __m256i h0 = _mm256_add_epi32(q[0], q[1]);
      s16[g] = hsum8i(h0);
      s32[g] = hsum8i(_mm256_add_epi32(h0, _mm256_add_epi32(q[2], q[3])));
      const __m256i m8 = _mm256_set1_epi32(255);
      // the int32 -> int16 -> int8 packs interleave 128-bit lanes; the dword permute restores the order
      const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
      const __m256i h = _mm256_packs_epi16(_mm256_packs_epi32(_mm256_srai_epi32(q[0], 8), _mm256_srai_epi32(q[1], 8)),
                                           _mm256_packs_epi32(_mm256_srai_epi32(q[2], 8), _mm256_srai_epi32(q[3], 8)));
      const __m256i l = _mm256_packus_epi16(_mm256_packs_epi32(_mm256_and_si256(q[0], m8), _mm256_and_si256(q[1], m8)),
                                            _mm256_packs_epi32(_mm256_and_si256(q[2], m8), _mm256_and_si256(q[3], m8)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + 32 * g), _mm256_permutevar8x32_epi32(h, order));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + 256 + 32 * g), _mm256_permutevar8x32_epi32(l, order));
    });
    for (int g = 0; g < 8; ++g) {
      o.s2[g] = o.d * static_cast<float>(s16[g]);
      o.s[g] = o.d * static_cast<float>(s32[g]);
    }
  }
}

// ------------------------------------------------------------ weights

// Hides where p points from the optimizer.
template <class T>
inline void launder(T*& p) {
#if defined(__GNUC__)
  __asm__("" : "+r"(p));
#else
  (void)p;
#endif
}

// The vpmaddubsw scale operands of 32-value group g for encodings with 16-value sub-blocks
// (Q2_K, Q3_K, Q6_K; sc: their 16 scales in both 128-bit lanes): sub-block 2g's scale for
// elements 0-15 (lane 0), 2g + 1's for 16-31, in the even byte of each 16-bit lane (pe) or the
// odd one (po), the other byte 0.
inline void sub16_operands(__m256i sc, int g, __m256i* pe, __m256i* po) {
  const __m256i ie = _mm256_setr_epi64x(0x8000800080008000ll | 0x0001000100010001ll * (2 * g),
                                        0x8000800080008000ll | 0x0001000100010001ll * (2 * g),
                                        0x8000800080008000ll | 0x0001000100010001ll * (2 * g + 1),
                                        0x8000800080008000ll | 0x0001000100010001ll * (2 * g + 1));
  const __m256i io = _mm256_or_si256(_mm256_slli_epi16(ie, 8), _mm256_set1_epi16(0x80));
  *pe = _mm256_shuffle_epi8(sc, ie);
  *po = _mm256_shuffle_epi8(sc, io);
}

// Q4_K / Q5_K: group g's vpmaddubsw scale operands as dwords in memory, [sc, 0, sc, 0] at sp[g]
// and [0, sc, 0, sc] at sp[8 + g] (sm: the header's scales in its bytes 0-7): a vpbroadcastd
// from memory is a load alone, where a vpshufb per operand took a vector ALU slot.
inline void q45_operands(__m128i sm, int32_t* sp) {
  const __m256i s32 = _mm256_cvtepu8_epi32(sm);
  const __m256i se = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));
  _mm256_store_si256(reinterpret_cast<__m256i*>(sp), se);
  _mm256_store_si256(reinterpret_cast<__m256i*>(sp + 8), _mm256_slli_epi32(se, 8));
}

// Q4_K / Q5_K: f(g, we, wo) for the 8 groups of one super-block, the scale operands at sp
// (q45_operands). Bytes 32c..32c+31 hold elements 64c + l (low nibbles, scale 2c) and
// 64c + 32 + l (high, 2c + 1).
template <DType E, class F>
inline void q45_groups(const uint8_t* blk, const int32_t* sp, F&& f) {
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  const uint8_t* qs = blk + (E == DType::Q5_K ? 48 : 16);
  __m256i qh = E == DType::Q5_K ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16))
                                : _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi8(1);
  KQ_UNROLL for (int c = 0; c < 4; ++c) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    __m256i X[2] = {_mm256_and_si256(raw, lo4), _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4)};
    KQ_UNROLL for (int j = 0; j < 2; ++j) {
      const int g = 2 * c + j;
      if constexpr (E == DType::Q5_K) {  // bit g of qh[l] is the fifth bit of element 32g + l
        X[j] = _mm256_or_si256(X[j], _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
        qh = _mm256_srli_epi16(qh, 1);  // (16-bit shifts keep bit g of each byte in its bit 0)
      }
      const __m256i pe = _mm256_set1_epi32(sp[g]), po = _mm256_set1_epi32(sp[8 + g]);
      f(g, _mm256_maddubs_epi16(X[j], pe), _mm256_maddubs_epi16(X[j], po));
    }
  }
}

// Calls f(g, we, wo) for the 8 groups of 32 values of one super-block, in order:
// we / wo = the 16 even / odd elements of group g times their sub-block scale, int16.
// sm: the header's scales (header below: Q4_K / Q5_K scales / mins bytes, k_scales_mins;
// Q2_K / Q3_K the 16 sub-block scales; Q6_K unused). kOffset = false
// leaves Q3_K's offset of -4 out (its codes 0..7 times the scale; the decode dot subtracts
// 4 * scale x the activation sums per super-block instead: 3 fewer vector operations a group).
template <DType E, bool kOffset = true, class F>
inline void expand_groups(const uint8_t* blk, __m128i sm, F&& f) {
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  if constexpr (E == DType::Q6_K) {
    // codes 0..63, value (q - 32) * sc[e / 16]: group g takes sc[2g] (bytes 0-15), sc[2g + 1] (16-31)
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
    // (the high bit pair j of H lands on bits 4-5 with one shift and a mask of 0x30: the 16-bit
    // shifts carry bits across bytes only where the mask clears them)
    const __m256i hi2 = _mm256_set1_epi8(0x30), c32 = _mm256_set1_epi8(32);
    KQ_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256i L0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
      const __m256i L1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
      const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      __m256i X[4];
      X[0] = _mm256_or_si256(_mm256_and_si256(L0, lo4), _mm256_and_si256(_mm256_slli_epi16(H, 4), hi2));
      X[1] = _mm256_or_si256(_mm256_and_si256(L1, lo4), _mm256_and_si256(_mm256_slli_epi16(H, 2), hi2));
      X[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), lo4), _mm256_and_si256(H, hi2));
      X[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), lo4),
                             _mm256_and_si256(_mm256_srli_epi16(H, 2), hi2));
      KQ_UNROLL for (int j = 0; j < 4; ++j) {
        const int g = 4 * h + j;
        __m256i pe, po;
        sub16_operands(sc, g, &pe, &po);
        const __m256i off = _mm256_maddubs_epi16(c32, pe);  // 32 * sc per 16-bit lane
        f(g, _mm256_sub_epi16(_mm256_maddubs_epi16(X[j], pe), off),
          _mm256_sub_epi16(_mm256_maddubs_epi16(X[j], po), off));
      }
    }
  } else if constexpr (E == DType::Q3_K || E == DType::Q2_K) {
    // 2-bit codes: group g = 4h + j is bits 2j..2j+1 of qs bytes 32h..32h+31 (element 32g + l in
    // byte l), with scale 2g for its elements 0-15 and 2g + 1 for 16-31. Q3_K: bit g of hmask[l]
    // is the code's third bit, value (q - 4) * sc; Q2_K: value q * sc, the mins apart (q2k_header).
    const __m256i sc = _mm256_broadcastsi128_si256(sm);
    const uint8_t* qs = blk + (E == DType::Q3_K ? 32 : 16);
    const __m256i hm =
        E == DType::Q3_K ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)) : _mm256_setzero_si256();
    const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    KQ_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h));
      KQ_UNROLL for (int j = 0; j < 4; ++j) {
        const int g = 4 * h + j;
        __m256i X = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), three);
        if constexpr (E == DType::Q3_K) {  // bit g of each hmask byte moved to bit 2 (the 16-bit
          // shifts by at most 5 carry bits across bytes only where the mask clears them)
          const __m256i hg = g < 2 ? _mm256_slli_epi16(hm, 2 - g) : g > 2 ? _mm256_srli_epi16(hm, g - 2) : hm;
          X = _mm256_or_si256(X, _mm256_and_si256(hg, four));
        }
        __m256i pe, po;
        sub16_operands(sc, g, &pe, &po);
        if constexpr (E == DType::Q3_K && kOffset) {
          const __m256i off = _mm256_maddubs_epi16(four, pe);  // 4 * sc per 16-bit lane
          f(g, _mm256_sub_epi16(_mm256_maddubs_epi16(X, pe), off), _mm256_sub_epi16(_mm256_maddubs_epi16(X, po), off));
        } else {
          f(g, _mm256_maddubs_epi16(X, pe), _mm256_maddubs_epi16(X, po));
        }
      }
    }
  } else {
    alignas(32) int32_t scb[16];
    q45_operands(sm, scb);
    const int32_t* sp = scb;
    launder(sp);  // the broadcasts read memory (not a register extract of the stored vectors)
    q45_groups<E>(blk, sp, f);
  }
}

// d of a super-block and its scales for expand_groups (Q4_K / Q5_K: the scales / mins bytes,
// with dmin * m[j] in mins; Q2_K / Q3_K: the 16 sub-block scales, Q2_K's min term by q2k_header).
template <DType E>
inline __m128i header(const uint8_t* blk, float* d, float* mins, float* dmin, int8_t* dm) {
  if constexpr (E == DType::Q6_K) {
    *d = f16v(blk + 208);
    return _mm_setzero_si128();
  } else if constexpr (E == DType::Q3_K) {
    *d = f16v(blk + 108);
    return q3k_scales(blk + 96);
  } else if constexpr (E == DType::Q2_K) {
    q2k_header(blk, d, dmin, mins, dm);
    return q2k_scales(blk);
  } else {
    return kq_header(blk, d, mins);
  }
}

// 32-bit lanes summed per super-block: Q6_K flushes after each half (bounds above).
template <DType E>
constexpr int kFlushGroups = E == DType::Q6_K ? 4 : 8;

inline __m256i madd_group(__m256i we, __m256i wo, const int16_t* xq) {
  return _mm256_add_epi32(_mm256_madd_epi16(we, _mm256_load_si256(reinterpret_cast<const __m256i*>(xq))),
                          _mm256_madd_epi16(wo, _mm256_load_si256(reinterpret_cast<const __m256i*>(xq + 16))));
}

// Keeps the running int32 sum a chain (kquant_x86.h in_register).
inline void chain(__m256i& v) { in_register(v); }


// Groups whose codes split_codes builds at once: Q4_K's / Q5_K's two of one 32-byte load; Q6_K's
// one (its four code registers of a half at once need more than AVX2's 16 registers for two rows).
template <DType E>
constexpr int kSplitChunk = E == DType::Q6_K ? 1 : 2;

// The codes of groups kSplitChunk<E> c + k (32 values each) of a Q4_K, Q5_K or Q6_K super-block
// as bytes, X[k] byte l = element 32 g + l (the split activations' order): Q4_K's 0..15 (bytes
// 32c + l hold elements 64c + l in the low nibble, 64c + 32 + l in the high), Q5_K's 0..31 (the
// same nibbles and bit g of qh[l]), Q6_K's 0..63 (the
// offset of 32 left in; group g = 4h + j from ql's low (j < 2) or high nibbles and the 2-bit
// field j of qh).
template <DType E>
inline void split_codes(const uint8_t* blk, int c, __m256i* X) {
  const __m256i lo4 = _mm256_set1_epi8(0x0f);
  if constexpr (E == DType::Q4_K || E == DType::Q5_K) {
    const uint8_t* qs = blk + (E == DType::Q5_K ? 48 : 16);
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    X[0] = _mm256_and_si256(raw, lo4);
    X[1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4);
    if constexpr (E == DType::Q5_K) {  // bit g of qh[l] is the fifth bit of element 32g + l: moved to bit 4
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      KQ_UNROLL for (int k = 0; k < 2; ++k) {
        const int g = 2 * c + k;
        const __m256i b = _mm256_and_si256(qh, _mm256_set1_epi8(static_cast<char>(1 << g)));
        X[k] = _mm256_or_si256(X[k], g < 4 ? _mm256_slli_epi16(b, 4 - g) : _mm256_srli_epi16(b, g - 4));
      }
    }
  } else {
    static_assert(E == DType::Q6_K, "split_codes: Q4_K, Q5_K or Q6_K");
    const int h = c / 4, j = c % 4;
    const __m256i L = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (j & 1)));
    const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i low = _mm256_and_si256(j < 2 ? L : _mm256_srli_epi16(L, 4), lo4);
    const __m256i top = j == 0   ? _mm256_slli_epi16(H, 4)
                        : j == 1 ? _mm256_slli_epi16(H, 2)
                        : j == 2 ? H
                                 : _mm256_srli_epi16(H, 2);
    X[0] = _mm256_or_si256(low, _mm256_and_si256(top, _mm256_set1_epi8(0x30)));
  }
}

// The decode dots' loop over a row's nsb super-blocks (kBytes each, from w): body(sb, i, blk) for
// each, with prepare(sb + 1, i ^ 1) decoding the next super-block's header into the other of two
// buffers first, so that the header's scalar chain overlaps this super-block's products instead
// of heading the next one's (AMD Zen 4 at avx2: docs/cpu-backend.md). prefetch: decode's software
// prefetch ahead (kq_decode_prefetch), for each of R rows rs bytes apart (body's blk: row 0's).
template <int64_t kBytes, int R = 1, class P, class B>
inline void headers_ahead(const uint8_t* w, size_t rs, int64_t nsb, bool prefetch, P&& prepare, B&& body) {
  if (nsb > 0) prepare(0, 0);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int i = static_cast<int>(sb & 1);
    const uint8_t* blk = w + sb * kBytes;
    if (prefetch) KQ_UNROLL for (int r = 0; r < R; ++r) kq_decode_prefetch<kBytes>(blk + r * rs);
    if (sb + 1 < nsb) prepare(sb + 1, i ^ 1);
    body(sb, i, blk);
  }
}

struct Avx2K {
  static constexpr int kTileT = 4;
  static constexpr int kRows = 1;
  using Act = BlockQ16K;  // one token a block
  static constexpr int kActTokens = 1;
  static void quantize_prefill(const float* x, int64_t T, int64_t K, BlockQ16K* out) {
    for (int64_t t = 0; t < T; ++t) quantize_row_q16k(x + t * K, K, out + t * (K / 256));
  }

  // Decode (one token) of R Q4_K, Q5_K or Q6_K rows (w, w + rs) on the split activations
  // (quantize_row_split): the codes stay bytes (split_codes, the activations' order) and
  // vpmaddubsw multiplies them by the activations' high bytes (code u8 x hi s8) and low bytes (lo
  // u8 x code s8), 32 products an instruction, pairs summed in int16 without saturation (|code x
  // hi| pairs <= 2 * 63 * 128, |lo x code| pairs <= 2 * 255 * 63 = 32130). vpmaddwd by the scale
  // (Q4_K, Q5_K: the group's 6-bit sc, broadcast from memory into both 16-bit halves of each dword;
  // Q6_K: the 16-value sub-blocks' int8 scales, 2g in the low 128 bits and 2g + 1 in the high by
  // one vpshufb) widens them, scaled, into two int32 sums for the whole super-block (hi: |sum| <=
  // 8 * 2 * 16128 * 128 < 2^25; lo < 2^26; Q4_K's below 2^22 and 2^23), so no per-group
  // reduction follows: 256 hi + lo (Q4_K, Q5_K: in int32, below 2^30 and 8 * 4 * 63 * (31 * 128 *
  // 256 + 255 * 31) = 2063805408 < 2^31, then converted; Q6_K: the two
  // sums converted, exact below 2^24, and joined by one FMA) is the super-block's sum of sc x
  // code x q in f32, scaled by d d_x. The min (Q4_K, Q5_K: dmin m per 32 values) or offset (Q6_K: - 32 d
  // sum_i sc[i] S_i, on the activations' per-16 sums S_2g = s2[g], S_2g+1 = s[g] - s2[g]) terms
  // are taken apart in f32. 32 multiplies a super-block where an int16 dot takes 16, but no code
  // widening, no horizontal adds (vphaddd ymm: one every 2 cycles on AMD Zen 4) and no scale
  // vectors to build: on Zen 4 at avx2, where these dots are bound by their instructions, one
  // thread's Q4_K 32.5 -> 30.3, Q5_K 41 -> 37.5 and Q6_K 42 -> 38.5 cycles a super-block
  // (docs/cpu-backend.md).
  // Each super-block's header is decoded one super-block ahead (headers_ahead); two rows
  // (decode_dot2) share each activation load, each row's sum formed as one row's is.
  template <DType E, int R>
  static void split_rows(const uint8_t* w, size_t rs, const BlockQ16K* x, int64_t nsb, float* out) {
    constexpr int64_t kBytes = kq_bytes<E>();
    // Q4_K / Q5_K: group g's sc in both 16-bit halves; Q6_K: int16, the even then the odd sub-blocks' scales
    alignas(32) int32_t sc[R][2][8];
    alignas(32) float ta[R][2][8], tb[R][2][8];  // subtracted: ta . s (+ tb . s2 for Q6_K)
    float dd[R][2];
    auto prepare = [&](int64_t sb, int i) {
      KQ_UNROLL for (int r = 0; r < R; ++r) {
        const uint8_t* blk = w + r * rs + sb * kBytes;
        __m256i* scp = reinterpret_cast<__m256i*>(sc[r][i]);
        if constexpr (kq_mins<E>()) {  // Q4_K, Q5_K
          const __m256i s32 = _mm256_cvtepu8_epi32(kq_header(blk, &dd[r][i], ta[r][i]));
          _mm256_store_si256(scp, _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16)));
        } else {
          const float d = dd[r][i] = f16v(blk + 208);
          const __m128i eo = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)),
                                              _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
          _mm256_store_si256(scp, _mm256_cvtepi8_epi16(eo));
          const __m256 ev = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eo));
          const __m256 od = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(eo, 8)));
          const __m256 d32 = _mm256_set1_ps(32.0f * d);
          _mm256_store_ps(ta[r][i], _mm256_mul_ps(d32, od));
          _mm256_store_ps(tb[r][i], _mm256_mul_ps(d32, _mm256_sub_ps(ev, od)));
        }
      }
    };
    __m256 ap[R], am[R];
    KQ_UNROLL for (int r = 0; r < R; ++r) ap[r] = am[r] = _mm256_setzero_ps();
    headers_ahead<kBytes, R>(w, rs, nsb, true, prepare, [&](int64_t sb, int i, const uint8_t* blk0) {
      const BlockQ16K& xb = x[sb];
      const int8_t* xh = reinterpret_cast<const int8_t*>(xb.qs);
      __m256i ah[R], al[R], X[R][kSplitChunk<E>];  // X: the codes of g's chunk
      KQ_UNROLL for (int r = 0; r < R; ++r) ah[r] = al[r] = _mm256_setzero_si256();
      KQ_UNROLL for (int g = 0; g < 8; ++g) {
        constexpr int kc = kSplitChunk<E>;
        if (g % kc == 0) KQ_UNROLL for (int r = 0; r < R; ++r) split_codes<E>(blk0 + r * rs, g / kc, X[r]);
        const __m256i xhi = _mm256_load_si256(reinterpret_cast<const __m256i*>(xh + 32 * g));
        const __m256i xlo = _mm256_load_si256(reinterpret_cast<const __m256i*>(xh + 256 + 32 * g));
        KQ_UNROLL for (int r = 0; r < R; ++r) {
          __m256i s;
          if constexpr (kq_mins<E>())
            s = _mm256_set1_epi32(sc[r][i][g]);
          else  // word g of each 128-bit half: sub-block 2g's scale (low), 2g + 1's (high)
            s = _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc[r][i])),
                                    _mm256_set1_epi16(static_cast<int16_t>(0x0101 * (2 * g) + 0x0100)));
          ah[r] = _mm256_add_epi32(ah[r], _mm256_madd_epi16(_mm256_maddubs_epi16(X[r][g % kc], xhi), s));
          al[r] = _mm256_add_epi32(al[r], _mm256_madd_epi16(_mm256_maddubs_epi16(xlo, X[r][g % kc]), s));
          chain(ah[r]);
          chain(al[r]);
        }
      }
      KQ_UNROLL for (int r = 0; r < R; ++r) {
        __m256 sum;
        if constexpr (kq_mins<E>())  // exact in int32 (Q4_K < 2^30, Q5_K < 2^31)
          sum = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(ah[r], 8), al[r]));
        else
          sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ah[r]), _mm256_set1_ps(256.0f), _mm256_cvtepi32_ps(al[r]));
        ap[r] = _mm256_fmadd_ps(sum, _mm256_set1_ps(dd[r][i] * xb.d), ap[r]);
        am[r] = _mm256_fmadd_ps(_mm256_load_ps(ta[r][i]), _mm256_load_ps(xb.s), am[r]);
        if constexpr (E == DType::Q6_K) am[r] = _mm256_fmadd_ps(_mm256_load_ps(tb[r][i]), _mm256_load_ps(xb.s2), am[r]);
      }
    });
    KQ_UNROLL for (int r = 0; r < R; ++r) out[r] = hsum8(_mm256_sub_ps(ap[r], am[r]));
  }
  template <DType E>
  static void split_dot(const uint8_t* w, const BlockQ16K* x, int64_t nsb, int64_t, float* out) {
    split_rows<E, 1>(w, 0, x, nsb, out);
  }
  static RowDotFn decode_dot(DType t) {
    return t == DType::Q4_K   ? &split_dot<DType::Q4_K>
           : t == DType::Q5_K ? &split_dot<DType::Q5_K>
           : t == DType::Q6_K ? &split_dot<DType::Q6_K>
                              : nullptr;
  }
  static RowPairFn decode_dot2(DType t) {
    return t == DType::Q4_K   ? &split_rows<DType::Q4_K, 2>
           : t == DType::Q5_K ? &split_rows<DType::Q5_K, 2>
           : t == DType::Q6_K ? &split_rows<DType::Q6_K, 2>
                              : nullptr;
  }

  // out[t] = row . x_t for NT tokens (x_t = x + t * xs super-blocks), on the row's bytes.
  template <DType E, int NT>
  static void dot_row(const uint8_t* w, const BlockQ16K* x, int64_t nsb, int64_t xs, float* out) {
    constexpr int64_t kBytes = kq_bytes<E>();
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    if constexpr (E == DType::Q5_K) {
      // The scale-expanding dot (expand_groups' operands), each super-block's header (d, the mins,
      // the scale operands) decoded one super-block ahead (headers_ahead).
      alignas(32) int32_t scb[2][16];
      alignas(32) float mins[2][8];
      float d[2];
      auto prepare = [&](int64_t sb, int i) {
        q45_operands(kq_header(w + sb * kBytes, &d[i], mins[i]), scb[i]);
      };
      headers_ahead<kBytes>(w, 0, nsb, NT == 1, prepare, [&](int64_t sb, int i, const uint8_t* blk) {
        const int32_t* sp = scb[i];
        launder(sp);
        __m256i ia[NT];
        for (int t = 0; t < NT; ++t) ia[t] = _mm256_setzero_si256();
        q45_groups<E>(blk, sp, [&](int g, __m256i we, __m256i wo) {
          KQ_UNROLL for (int t = 0; t < NT; ++t) {
            ia[t] = _mm256_add_epi32(ia[t], madd_group(we, wo, x[t * xs + sb].qs + 32 * g));
            chain(ia[t]);
          }
        });
        const __m256 mv = _mm256_load_ps(mins[i]);
        KQ_UNROLL for (int t = 0; t < NT; ++t) {
          const BlockQ16K& xb = x[t * xs + sb];
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t]), _mm256_set1_ps(d[i] * xb.d), acc[t]);
          acc[t] = _mm256_fnmadd_ps(mv, _mm256_load_ps(xb.s), acc[t]);
        }
      });
      for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
      return;
    }
    alignas(32) float mins[8] = {};
    alignas(8) int8_t dm[8] = {};
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kBytes;
      if (NT == 1) kq_decode_prefetch<kBytes>(blk);  // decode streams the weights once (kquant_x86.h)
      float d, dmin = 0.0f;
      const __m128i sm = header<E>(blk, &d, mins, &dmin, dm);
      __m256i ia[NT];
      for (int t = 0; t < NT; ++t) ia[t] = _mm256_setzero_si256();
      expand_groups<E, E != DType::Q3_K>(blk, sm, [&](int g, __m256i we, __m256i wo) {
        KQ_UNROLL for (int t = 0; t < NT; ++t) {
          const BlockQ16K& xb = x[t * xs + sb];
          ia[t] = _mm256_add_epi32(ia[t], madd_group(we, wo, xb.qs + 32 * g));
          chain(ia[t]);
          if ((g + 1) % kFlushGroups<E> == 0) {
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t]), _mm256_set1_ps(d * xb.d), acc[t]);
            ia[t] = _mm256_setzero_si256();
          }
        }
      });
      if constexpr (kq_mins<E>()) {
        const __m256 mv = _mm256_load_ps(mins);
        KQ_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm256_fnmadd_ps(mv, _mm256_load_ps(x[t * xs + sb].s), acc[t]);
      }
      if constexpr (kq_half_mins<E>()) {
        const __m256 mv = q2k_half_mins(dmin, dm);
        KQ_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm256_fnmadd_ps(mv, _mm256_load_ps(x[t * xs + sb].s2), acc[t]);
      }
      if constexpr (E == DType::Q3_K) {  // the offset: - 4 d sum_i sc[i] S_i (kq_odd_diff)
        const auto od = kq_odd_diff(sm);
        const __m256 a = kq_scaled_bytes(od.odd, 4.0f * d), b = kq_scaled_bytes(od.diff, 4.0f * d);
        KQ_UNROLL for (int t = 0; t < NT; ++t) {
          const BlockQ16K& xb = x[t * xs + sb];
          acc[t] = _mm256_fnmadd_ps(a, _mm256_load_ps(xb.s), _mm256_fnmadd_ps(b, _mm256_load_ps(xb.s2), acc[t]));
        }
      }
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
  }

  // nsb super-blocks of a row, expanded: group g's even / odd elements at w + 32 g / + 16.
  template <DType E>
  static void expand_row(const uint8_t* w, int64_t nsb, ExpSB* out) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* blk = w + sb * kq_bytes<E>();
      ExpSB& o = out[sb];
      const __m128i sm = header<E>(blk, &o.d, o.mins, &o.dmin, o.dm);
      expand_groups<E>(blk, sm, [&](int g, __m256i we, __m256i wo) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(o.w + 32 * g), we);
        _mm256_store_si256(reinterpret_cast<__m256i*>(o.w + 32 * g + 16), wo);
      });
    }
  }

  // out[t] = row . x_t for NT tokens, the row given as nsb expanded super-blocks (one row: ws unused).
  template <DType E, int NT>
  static void dot_expanded(const ExpSB* w, int64_t /*ws*/, const BlockQ16K* x, int64_t nsb, int64_t xs,
                           float* out) {
    constexpr int kFlush = kFlushGroups<E>;
    __m256 acc[NT];
    KQ_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const ExpSB& e = w[sb];
      KQ_UNROLL for (int h = 0; h < 8; h += kFlush) {
        __m256i ia[NT];
        KQ_UNROLL for (int t = 0; t < NT; ++t) ia[t] = _mm256_setzero_si256();
        KQ_UNROLL for (int g = h; g < h + kFlush; ++g) {
          const __m256i we = _mm256_load_si256(reinterpret_cast<const __m256i*>(e.w + 32 * g));
          const __m256i wo = _mm256_load_si256(reinterpret_cast<const __m256i*>(e.w + 32 * g + 16));
          KQ_UNROLL for (int t = 0; t < NT; ++t) {
            ia[t] = _mm256_add_epi32(ia[t], madd_group(we, wo, x[t * xs + sb].qs + 32 * g));
            chain(ia[t]);
          }
        }
        KQ_UNROLL for (int t = 0; t < NT; ++t)
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t]), _mm256_set1_ps(e.d * x[t * xs + sb].d), acc[t]);
      }
      if constexpr (kq_mins<E>()) {
        const __m256 mv = _mm256_load_ps(e.mins);
        KQ_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm256_fnmadd_ps(mv, _mm256_load_ps(x[t * xs + sb].s), acc[t]);
      }
      if constexpr (kq_half_mins<E>()) {
        const __m256 mv = q2k_half_mins(e.dmin, e.dm);
        KQ_UNROLL for (int t = 0; t < NT; ++t) acc[t] = _mm256_fnmadd_ps(mv, _mm256_load_ps(x[t * xs + sb].s2), acc[t]);
      }
    }
    KQ_UNROLL for (int t = 0; t < NT; ++t) out[t] = hsum8(acc[t]);
  }
};

}  // namespace

bool avx2_kquant_encoding(DType t) { return kq_row_dots<Avx2K>(t) != nullptr; }

void avx2_kquant_decode(const float* x, int64_t K, const Tensor* const* W, float* const* y, int n, ExecContext& ctx) {
  kq_decode_token<Avx2K>(x, K, W, y, n, ctx, quantize_row_q16k, quantize_row_split);
}

void avx2_kquant_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx) {
  if (T == 1) {
    const Tensor* w = &W;
    return avx2_kquant_decode(x, K, &w, &y, 1, ctx);
  }
  kq_expanded_prefill<Avx2K>(x, W, T, K, y, ctx);
}

}  // namespace cpu
}  // namespace cyb
