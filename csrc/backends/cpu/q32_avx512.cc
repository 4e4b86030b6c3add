// AVX-512 (BW, VNNI) fast-mode prefill matmul (several tokens) for the 32-value block encodings
// Q4_0, Q4_1, Q5_0 and Q8_0. Chosen at run time at the avx512 level only (one token takes the
// 256-bit dots of kernels_x86_matmul.inc).
//
// Activations are quantized exactly as BlockQ16 (int16 per 32-block, d = amax / 32767, q =
// round-half-even(x * (1 / d))). Blocks go in groups of 8 (256 values; a row's last group padded
// with zero blocks), each group transposed so that 32-bit lane l of a 16-value chunk holds two
// values of block l: chunk c = values 2c and 2c + 1 of each of the 8 blocks. Weights are widened to
// int16 in the same order once per block of rows (ExpG), and the dot is the K-quant one
// (avx512_common.h pair_group_sums: two rows x two tokens a register pair, vpdpwssd), with each
// lane's int32 sum the dot of one block (32 products, |w| <= 128): converted and scaled per lane
// by its block's d_w * d_x, 16 blocks (8 of each of two rows) a multiply.
#include "backends/cpu/avx512_common.h"

#include <algorithm>
#include <cstdlib>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_common.h"
#include "core/dtype.h"
#include "core/errors.h"

namespace cyb {
namespace cpu {
namespace {
using avx512::f16v;
using avx512::kTileT;
using avx512::BlockQ16P;

// The block's 32 weight values as int16 (natural order), its scale, and for
// Q4_1 its min (others: 0).
template <DType E>
inline __m512i widen(const uint8_t* b, float& dw, float& mw) {
  mw = 0.f;
  if constexpr (E == DType::Q8_0) {
    dw = f16v(b);
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)));
  } else {
    const int off = E == DType::Q4_1 ? 4 : E == DType::Q5_0 ? 6 : 2;
    const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + off));
    const __m128i m = _mm_set1_epi8(0x0f);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(t, m)),
                                        _mm_and_si128(_mm_srli_epi16(t, 4), m), 1);
    dw = f16v(b);
    if constexpr (E == DType::Q4_1) mw = f16v(b + 2);
    if constexpr (E == DType::Q5_0) {
      uint32_t qh;  // bit j is the fifth bit of value j
      std::memcpy(&qh, b + 2, 4);
      v = _mm256_mask_add_epi8(v, static_cast<__mmask32>(qh), v, _mm256_set1_epi8(16));
    }
    __m512i w = _mm512_cvtepu8_epi16(v);
    if constexpr (E == DType::Q4_0) w = _mm512_sub_epi16(w, _mm512_set1_epi16(8));
    if constexpr (E == DType::Q5_0) w = _mm512_sub_epi16(w, _mm512_set1_epi16(16));
    return w;
  }
}

constexpr int64_t kGroupBlocks = 8;  // blocks per 256-value group

template <DType E>
constexpr int64_t q32_bytes() {
  return E == DType::Q4_0 ? 18 : E == DType::Q4_1 ? 20 : E == DType::Q5_0 ? 22 : 34;
}

// 16 registers of 16 32-bit lanes (blocks l = 0..15 of two groups, lane c = their values 2c and
// 2c + 1) transposed and stored as the groups' chunks: chunk c of the first group (blocks 0-7) at
// dst0 + stride * c, of the second at dst1 + stride * c (16 int16 each; dst1 null: no second group).
inline void transpose_store(const __m512i* v, int16_t* dst0, int16_t* dst1, int64_t stride) {
  __m512 r[16];
  KQ_UNROLL for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(v[i]);
  avx512::transpose16(r);  // r[c] lane l = block l's lane c
  KQ_UNROLL for (int c = 0; c < 16; ++c) {
    const __m512i rc = _mm512_castps_si512(r[c]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst0 + stride * c), _mm512_castsi512_si256(rc));
    if (dst1) _mm256_store_si256(reinterpret_cast<__m256i*>(dst1 + stride * c), _mm512_extracti64x4_epi64(rc, 1));
  }
}

// Tokens 2p and 2p + 1 of x[T, K] as pairs of groups: out[p * ng + g] for ng = ceil(K / 256)
// (BlockQ16P: chunk c of each token in group order; d, s: the token's block scales and d * sum(q)
// per lane; zeros past K and past T).
void quantize_pairs(const float* x, int64_t T, int64_t K, BlockQ16P* out) {
  const int64_t nb = K / 32, ng = (nb + kGroupBlocks - 1) / kGroupBlocks;
  for (int64_t p = 0; p < (T + 1) / 2; ++p)
    for (int64_t g0 = 0; g0 < ng; g0 += 2) {  // two groups (16 blocks) a transpose
      const int ngroups = g0 + 1 < ng ? 2 : 1;
      BlockQ16P* o = out + p * ng + g0;
      for (int h = 0; h < 2; ++h) {
        const int64_t t = 2 * p + h;
        __m512i v[16];
        alignas(64) float dv[16], sv[16];
        for (int l = 0; l < 16; ++l) {
          const int64_t b = g0 * kGroupBlocks + l;
          v[l] = _mm512_setzero_si512();
          dv[l] = sv[l] = 0.0f;
          if (t >= T || b >= nb) continue;
          const float* xb = x + t * K + b * 32;
          const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
          const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
          const float dd = amax / 32767.0f;
          const __m512 vid = _mm512_set1_ps(dd != 0.0f ? 1.0f / dd : 0.0f);
          // cvtps rounds half to even (default MXCSR); |q| <= 32767, so the narrowing is exact
          const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
          v[l] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(q0)), _mm512_cvtepi32_epi16(q1), 1);
          dv[l] = dd;
          sv[l] = dd * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
        }
        // chunk c of token h at qs + 32c + 16h
        transpose_store(v, o[0].qs + 16 * h, ngroups > 1 ? o[1].qs + 16 * h : nullptr, 32);
        for (int gi = 0; gi < ngroups; ++gi) {
          std::memcpy(o[gi].d + 8 * h, dv + 8 * gi, 8 * sizeof(float));
          std::memcpy(o[gi].s + 8 * h, sv + 8 * gi, 8 * sizeof(float));
        }
      }
    }
}

// One row's 256-value group, widened: chunk c (values 2c, 2c + 1 of block l in 32-bit lane l) at
// w + 16c, the blocks' d_w and (Q4_1) m_w (zeros for padding blocks).
struct alignas(64) ExpG {
  int16_t w[256];
  float d[8];
  float m[8];
};
static_assert(sizeof(ExpG) == 576, "ExpG layout");

// Groups [g0, g0 + ngc) of a row (nb blocks in all) widened into out[0..ngc).
template <DType E>
void expand_groups(const uint8_t* row, int64_t nb, int64_t g0, int64_t ngc, ExpG* out) {
  for (int64_t gi = 0; gi < ngc; gi += 2) {
    const int ngroups = gi + 1 < ngc ? 2 : 1;
    __m512i v[16];
    alignas(64) float dv[16], mv[16];
    for (int l = 0; l < 16; ++l) {
      const int64_t b = (g0 + gi) * kGroupBlocks + l;
      if (l >= ngroups * kGroupBlocks || b >= nb) {
        v[l] = _mm512_setzero_si512();
        dv[l] = mv[l] = 0.0f;
      } else {
        v[l] = widen<E>(row + b * q32_bytes<E>(), dv[l], mv[l]);
      }
    }
    ExpG* o = out + gi;
    transpose_store(v, o[0].w, ngroups > 1 ? o[1].w : nullptr, 16);
    for (int h = 0; h < ngroups; ++h) {
      std::memcpy(o[h].d, dv + 8 * h, 8 * sizeof(float));
      std::memcpy(o[h].m, mv + 8 * h, 8 * sizeof(float));
    }
  }
}

// Prefill on two widened rows (e0, e1: ngc groups each) and NT tokens (token pairs x[p * xs]):
// out[t] = row0 . x_t, out[kTileT + t] = row1 . x_t. Per group: the int32 block dots
// (pair_group_sums; |sum| <= 32 * 128 * 32767 per lane), converted, times d_w d_x per lane; Q4_1
// adds m_w s_x per lane.
template <DType E, int NT>
void dot_pairs(const ExpG* e0, const ExpG* e1, const BlockQ16P* x, int64_t ngc, int64_t xs, float* out) {
  constexpr int NP = (NT + 1) / 2;
  __m512 acc[8];
  KQ_UNROLL for (int i = 0; i < 8; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ngc; ++g) {
    __m512i ia[2 * NP], ib[2 * NP];
    avx512::pair_group_sums<NP, false>(e0[g].w, e1[g].w, x + g, xs, ia, ib);
    const __m512 dd = avx512::halves(_mm256_load_ps(e0[g].d), _mm256_load_ps(e1[g].d)), dds = avx512::swap_halves(dd);
    __m512 mm = _mm512_setzero_ps();
    if constexpr (E == DType::Q4_1) mm = avx512::halves(_mm256_load_ps(e0[g].m), _mm256_load_ps(e1[g].m));
    const __m512 mms = avx512::swap_halves(mm);
    KQ_UNROLL for (int p = 0; p < NP; ++p) {
      const BlockQ16P& xb = x[p * xs + g];
      const __m512 xd = _mm512_load_ps(xb.d);
      KQ_UNROLL for (int h = 0; h < 2; ++h) {
        __m512& A = acc[2 * p + h];
        A = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[2 * p + h]), _mm512_mul_ps(h ? dds : dd, xd), A);
        if constexpr (E == DType::Q4_1) A = _mm512_fmadd_ps(h ? mms : mm, _mm512_load_ps(xb.s), A);
      }
    }
  }
  avx512::pair_store(acc, out);
}

// Groups per K chunk: 8 rows x 6 x 576 B = 27 KiB of widened weights (the K-quant blocking).
constexpr int64_t kChunkG = kExpChunk;

// Prefill, rows [n0, n1) of y[T, N]: per K chunk, per group of up to kExpGroupT tokens, per block
// of kExpRows rows (the K-quant driver's blocking, kquant_x86.h): widen the rows' chunk once, then
// every 8-token tile against it, two rows per dot_pairs (a last odd row as both).
template <DType E>
void prefill_rows(const uint8_t* base, size_t rb, const BlockQ16P* xq, int64_t T, int64_t nb, float* y, int64_t N,
                  int64_t n0, int64_t n1) {
  using PairFn = void (*)(const ExpG*, const ExpG*, const BlockQ16P*, int64_t, int64_t, float*);
  static constexpr PairFn f[kTileT + 1] = {nullptr,           dot_pairs<E, 1>, dot_pairs<E, 2>, dot_pairs<E, 3>,
                                           dot_pairs<E, 4>,   dot_pairs<E, 5>, dot_pairs<E, 6>, dot_pairs<E, 7>,
                                           dot_pairs<E, 8>};
  const int64_t ng = (nb + kGroupBlocks - 1) / kGroupBlocks;
  alignas(64) ExpG buf[kExpRows * kChunkG];
  float r[2 * kTileT];
  for (int64_t c0 = 0; c0 < ng; c0 += kChunkG) {
    const int64_t nc = std::min(kChunkG, ng - c0);
    for (int64_t g0 = 0; g0 < T; g0 += kExpGroupT)
      for (int64_t r0 = n0; r0 < n1; r0 += kExpRows) {
        const int64_t r1 = std::min(n1, r0 + kExpRows);
        for (int64_t n = r0; n < r1; ++n) expand_groups<E>(base + n * rb, nb, c0, nc, buf + (n - r0) * kChunkG);
        const int64_t cb = c0 * kGroupBlocks * q32_bytes<E>();
        kq_prefetch_block(base + cb, rb, r1, std::min(n1, r1 + kExpRows),
                          std::min<int64_t>(nc * kGroupBlocks, nb - c0 * kGroupBlocks) * q32_bytes<E>());
        const int64_t g1 = std::min(T, g0 + kExpGroupT);
        for (int64_t t0 = g0; t0 < g1; t0 += kTileT) {
          const int nt = static_cast<int>(std::min<int64_t>(kTileT, T - t0));
          kq_prefetch_out(y + r0, N, t0 + kTileT, std::min<int64_t>(g1, t0 + 2 * kTileT));  // (kquant_x86.h)
          for (int64_t n = r0; n < r1; n += 2) {
            const int nr = n + 1 < r1 ? 2 : 1;
            const ExpG* e0 = buf + (n - r0) * kChunkG;
            f[nt](e0, e0 + (nr - 1) * kChunkG, xq + t0 / 2 * ng + c0, nc, ng, r);
            kq_store_tile<kTileT>(y, N, t0, n, nr, nt, r, c0 == 0);  // (kquant_x86.h)
          }
        }
      }
  }
}

using PrefillFn = void (*)(const uint8_t*, size_t, const BlockQ16P*, int64_t, int64_t, float*, int64_t, int64_t,
                           int64_t);
PrefillFn prefill_for(DType t) {
  switch (t) {
    case DType::Q4_0: return prefill_rows<DType::Q4_0>;
    case DType::Q4_1: return prefill_rows<DType::Q4_1>;
    case DType::Q5_0: return prefill_rows<DType::Q5_0>;
    case DType::Q8_0: return prefill_rows<DType::Q8_0>;
    default: return nullptr;
  }
}

}  // namespace

bool avx512_q32_encoding(DType t) { return prefill_for(t) != nullptr; }

void avx512_q32_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx) {
  // one token takes the 256-bit dots (kernels_x86_matmul.inc)
  if (T < 2) throw_unsupported_op("matmul", "cpu avx512 block tiles", "a single token");
  const int64_t N = W.shape.d[0], nb = K / 32, ng = (nb + kGroupBlocks - 1) / kGroupBlocks;
  BlockQ16P* xq = scratch<BlockQ16P>(kScratchXq, static_cast<size_t>((T + 1) / 2 * ng));
  quantize_pairs(x, T, K, xq);
  const PrefillFn pf = prefill_for(W.dtype);
  const size_t rb = row_bytes(W.dtype, K);
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  const int64_t grain = std::max<int64_t>(16, 32768 / std::max<int64_t>(T * K, 1));
  parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int) { pf(base, rb, xq, T, nb, y, N, b, e); });
}

}  // namespace cpu
}  // namespace cyb
