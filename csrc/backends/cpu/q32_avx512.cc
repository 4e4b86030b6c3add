// AVX-512 (BW, VNNI) fast-mode matmul for the 32-value block encodings Q4_0,
// Q4_1, Q5_0 and Q8_0. Chosen at run time at the avx512 level only.
//
// Activations are quantized exactly as BlockQ16 (int16 per 32-block, d = amax /
// 32767, q = round-half-even(x * (1 / d))), stored as three arrays per token so
// that each block's 32 int16 values are one aligned 64-byte load: qs[nb][32],
// d[nb], s[nb] = d * sum(q). A weight block is widened to 32 int16 lanes once
// and shared by up to 8 tokens: vpdpwssd gives the exact int32 block dot (|w| <=
// 128, two products per lane), converted and scaled by d_w * d_x per block.
// Prefill uses the same L1/L2 blocking as the K-quant kernels (avx512_common.h).
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
using avx512::reduce8;
using avx512::reduce8_two_rows;

struct XQ {  // one matmul's activations: T tokens x nb blocks
  const int16_t* qs;  // [T][nb][32]
  const float* d;     // [T][nb]
  const float* s;     // [T][nb]
  int64_t nb;
};

void quantize(const float* x, int64_t T, int64_t K, int16_t* qs, float* d, float* s) {
  const int64_t nb = K / 32;
  for (int64_t i = 0; i < T * nb; ++i) {
    const float* xb = x + (i / nb) * K + (i % nb) * 32;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float dd = amax / 32767.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    // cvtps rounds half to even (default MXCSR); |q| <= 32767, so the narrowing is exact
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    _mm512_store_si512(qs + 32 * i, _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(q0)),
                                                       _mm512_cvtepi32_epi16(q1), 1));
    d[i] = dd;
    s[i] = dd * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
  }
}

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

constexpr int64_t kPrefetch = 8192;  // bytes ahead (decode)
constexpr int64_t kChunk = 32;       // blocks per dot call

// out[t] = row . x_{t0+t}, blocks [c0, c0 + nc) (w points at block c0).
// Blocks go in pairs: the two int32 block dots are folded into one vector
// (lanes 0-7: block b, 8-15: block b+1) so that one conversion and one FMA with
// the per-lane scale d_w * d_x serve both. Q4_1's min term sum_b m_b * s_b is a
// separate f32 dot per token at the end.
// A row's chunk of kChunk blocks widened once (prefill): values, d_w and (Q4_1) m_w per block.
struct alignas(64) ExpChunk {
  int16_t w[kChunk][32];
  float d[kChunk];
  float m[kChunk];
};

template <DType E>
constexpr int64_t q32_bytes() {
  return E == DType::Q4_0 ? 18 : E == DType::Q4_1 ? 20 : E == DType::Q5_0 ? 22 : 34;
}

template <DType E>
void expand_chunk(const uint8_t* w, int64_t nc, ExpChunk* out) {
  for (int64_t b = 0; b < nc; ++b)
    _mm512_store_si512(out->w[b], widen<E>(w + b * q32_bytes<E>(), out->d[b], out->m[b]));
}

// On the row's bytes, widening per tile: CYB_Q32_REWIDEN=1 only (A/B); prefill otherwise takes dot_pair.
template <DType E, int NT>
void dot_row(const uint8_t* w, const XQ& x, int64_t c0, int64_t t0, int64_t nc, float* out) {
  constexpr int64_t kBytes = q32_bytes<E>();
  auto block = [&](int64_t b, float& d, float& m) -> __m512i { return widen<E>(w + b * kBytes, d, m); };
  alignas(64) float mwv[kChunk];
  const __m512i lanes01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512 acc[8];
  KQ_UNROLL for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nc; b += 2) {
    const uint8_t* blk = w + b * kBytes;
    if (NT == 1) _mm_prefetch(reinterpret_cast<const char*>(blk + kPrefetch), _MM_HINT_T0);
    float d0, d1;
    const __m512i w0 = block(b, d0, mwv[b]);
    const __m512i w1 = block(b + 1, d1, mwv[b + 1]);
    // from registers: a 64-bit reload of two 32-bit stores would miss store forwarding
    const __m128 dw2 = _mm_unpacklo_ps(_mm_set_ss(d0), _mm_set_ss(d1));
    KQ_UNROLL for (int t = 0; t < NT; ++t) {
      const int64_t i = (t0 + t) * x.nb + c0 + b;
      const __m512i p0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0, _mm512_load_si512(x.qs + 32 * i));
      const __m512i p1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w1, _mm512_load_si512(x.qs + 32 * i + 32));
      const __m512i sum = _mm512_add_epi32(_mm512_shuffle_i64x2(p0, p1, 0x44), _mm512_shuffle_i64x2(p0, p1, 0xee));
      const __m128 sc = _mm_mul_ps(dw2, _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.d + i))));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_permutexvar_ps(lanes01, _mm512_castps128_ps512(sc)),
                               acc[t]);
    }
  }
  if (b < nc) {  // odd tail block
    float d0;
    const __m512i w0 = block(b, d0, mwv[b]);
    KQ_UNROLL for (int t = 0; t < NT; ++t) {
      const int64_t i = (t0 + t) * x.nb + c0 + b;
      const __m512i p = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0, _mm512_load_si512(x.qs + 32 * i));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(d0 * x.d[i]), acc[t]);
    }
  }
  float macc[8] = {};
  if constexpr (E == DType::Q4_1) {
    KQ_UNROLL for (int t = 0; t < NT; ++t) {
      const float* s = x.s + (t0 + t) * x.nb + c0;
      __m512 m = _mm512_setzero_ps();
      int64_t j = 0;
      for (; j + 16 <= nc; j += 16) m = _mm512_fmadd_ps(_mm512_load_ps(mwv + j), _mm512_loadu_ps(s + j), m);
      float r = _mm512_reduce_add_ps(m);
      for (; j < nc; ++j) r += mwv[j] * s[j];
      macc[t] = r;
    }
  }
  if (NT == 1) {
    out[0] = _mm512_reduce_add_ps(acc[0]) + macc[0];
    return;
  }
  alignas(32) float r[8];
  _mm256_store_ps(r, reduce8(acc));
  KQ_UNROLL for (int t = 0; t < NT; ++t) out[t] = r[t] + macc[t];
}

// Prefill on two widened rows at once: out[t] = row0 . x_{t0+t}, out[kTileT + t] = row1 . x_{t0+t}
// (blocks [c0, c0 + nc) of chunks e0, e1). As in kquant_avx512.cc's dot_expanded, each weight
// register holds 16 values of row 0 (lanes 0-7) and the same 16 of row 1 (lanes 8-15) against
// those 16 activations broadcast to both halves: a block is two vpdpwssd whose sum (4 products
// per lane, |w| <= 128) is the exact int32 block dot of each row spread over its 8 lanes, so one
// conversion and one FMA with the lanes' d_w * d_x serve both rows.
template <DType E, int NT>
void dot_pair(const ExpChunk* e0, const ExpChunk* e1, const XQ& x, int64_t c0, int64_t t0, int64_t nc, float* out) {
  auto pair = [](const int16_t* a, const int16_t* b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(a))),
                              _mm256_load_si256(reinterpret_cast<const __m256i*>(b)), 1);
  };
  auto bcast = [](const int16_t* q) {
    return _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(q)));
  };
  __m512 acc[8];
  KQ_UNROLL for (int t = 0; t < 8; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nc; ++b) {
    const __m512i lo = pair(e0->w[b], e1->w[b]), hi = pair(e0->w[b] + 16, e1->w[b] + 16);
    const __m512 dd = _mm512_insertf32x8(_mm512_set1_ps(e0->d[b]), _mm256_set1_ps(e1->d[b]), 1);
    KQ_UNROLL for (int t = 0; t < NT; ++t) {
      const int64_t i = (t0 + t) * x.nb + c0 + b;
      const int16_t* q = x.qs + 32 * i;
      const __m512i p = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), lo, bcast(q)), hi, bcast(q + 16));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dd, _mm512_set1_ps(x.d[i])), acc[t]);
    }
  }
  reduce8_two_rows(acc, out);  // (avx512_common.h)
  if constexpr (E == DType::Q4_1) {  // + sum_b m_b * s_b per row and token
    const ExpChunk* e[2] = {e0, e1};
    for (int r = 0; r < 2; ++r)
      KQ_UNROLL for (int t = 0; t < NT; ++t) {
        const float* s = x.s + (t0 + t) * x.nb + c0;
        __m512 m = _mm512_setzero_ps();
        int64_t j = 0;
        for (; j + 16 <= nc; j += 16) m = _mm512_fmadd_ps(_mm512_load_ps(e[r]->m + j), _mm512_loadu_ps(s + j), m);
        float v = _mm512_reduce_add_ps(m);
        for (; j < nc; ++j) v += e[r]->m[j] * s[j];
        out[r * kTileT + t] += v;
      }
  }
}

using DotFn = void (*)(const uint8_t*, const XQ&, int64_t, int64_t, int64_t, float*);

template <DType E>
struct Dots {
  static constexpr DotFn f[kTileT + 1] = {nullptr,         dot_row<E, 1>, dot_row<E, 2>, dot_row<E, 3>,
                                          dot_row<E, 4>,   dot_row<E, 5>, dot_row<E, 6>, dot_row<E, 7>,
                                          dot_row<E, 8>};
};

// Prefill, rows [n0, n1) of y[T, N]: per K chunk, per group of up to kExpGroupT tokens,
// per block of kExpRows rows (the K-quant driver's blocking, kquant_x86.h): widen the rows' chunk once (16 KiB, in L1), then every
// 8-token tile against it, two rows per dot_pair (the per-tile widening of parallel_blocked repeated it T / 8 times).
template <DType E>
void prefill_rows(const uint8_t* base, size_t rb, const XQ& xq, int64_t T, float* y, int64_t N, int64_t n0,
                  int64_t n1) {
  using PairFn = void (*)(const ExpChunk*, const ExpChunk*, const XQ&, int64_t, int64_t, int64_t, float*);
  static constexpr PairFn f[kTileT + 1] = {nullptr,           dot_pair<E, 1>, dot_pair<E, 2>, dot_pair<E, 3>,
                                           dot_pair<E, 4>,    dot_pair<E, 5>, dot_pair<E, 6>, dot_pair<E, 7>,
                                           dot_pair<E, 8>};
  alignas(64) ExpChunk buf[kExpRows];
  float r[2 * kTileT];
  for (int64_t c0 = 0; c0 < xq.nb; c0 += kChunk) {
    const int64_t nc = std::min(kChunk, xq.nb - c0);
    for (int64_t g0 = 0; g0 < T; g0 += kExpGroupT)
      for (int64_t r0 = n0; r0 < n1; r0 += kExpRows) {
        const int64_t r1 = std::min(n1, r0 + kExpRows);
        for (int64_t n = r0; n < r1; ++n) expand_chunk<E>(base + n * rb + c0 * q32_bytes<E>(), nc, buf + (n - r0));
        const int64_t g1 = std::min(T, g0 + kExpGroupT);
        for (int64_t t0 = g0; t0 < g1; t0 += kTileT) {
          const int nt = static_cast<int>(std::min<int64_t>(kTileT, T - t0));
          kq_prefetch_out(y + r0, N, t0 + kTileT, std::min<int64_t>(g1, t0 + 2 * kTileT));  // (kquant_x86.h)
          for (int64_t n = r0; n < r1; n += 2) {  // two rows per dot (a last odd row as both)
            const int nr = n + 1 < r1 ? 2 : 1;
            f[nt](buf + (n - r0), buf + (n - r0) + (nr - 1), xq, c0, t0, nc, r);
            kq_store_tile<kTileT>(y, N, t0, n, nr, nt, r, c0 == 0);  // (kquant_x86.h)
          }
        }
      }
  }
}

using PrefillFn = void (*)(const uint8_t*, size_t, const XQ&, int64_t, float*, int64_t, int64_t, int64_t);
PrefillFn prefill_for(DType t) {
  switch (t) {
    case DType::Q4_0: return prefill_rows<DType::Q4_0>;
    case DType::Q4_1: return prefill_rows<DType::Q4_1>;
    case DType::Q5_0: return prefill_rows<DType::Q5_0>;
    default: return prefill_rows<DType::Q8_0>;
  }
}

// CYB_Q32_REWIDEN=1: the per-tile widening (parallel_blocked), for A/B measurement.
bool q32_rewiden() {
  static const bool v = [] {
    const char* e = std::getenv("CYB_Q32_REWIDEN");
    return e && e[0] == '1';
  }();
  return v;
}

const DotFn* dots_for(DType t) {
  switch (t) {
    case DType::Q4_0: return Dots<DType::Q4_0>::f;
    case DType::Q4_1: return Dots<DType::Q4_1>::f;
    case DType::Q5_0: return Dots<DType::Q5_0>::f;
    case DType::Q8_0: return Dots<DType::Q8_0>::f;
    default: return nullptr;
  }
}

}  // namespace

bool avx512_q32_encoding(DType t) { return dots_for(t) != nullptr; }

void avx512_q32_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx) {
  // one token takes the 256-bit dots (kernels_x86.inc); a whole row would overrun the chunk buffers
  if (T < 2) throw_unsupported_op("matmul", "cpu avx512 block tiles", "a single token");
  const DotFn* f = dots_for(W.dtype);
  const int64_t N = W.shape.d[0], nb = K / 32;
  // qs (64-byte aligned blocks), then d, then s
  uint8_t* buf = scratch<uint8_t>(kScratchXq, static_cast<size_t>(T * nb) * (64 + 8));
  int16_t* qs = reinterpret_cast<int16_t*>(buf);
  float* d = reinterpret_cast<float*>(buf + T * nb * 64);
  float* s = d + T * nb;
  quantize(x, T, K, qs, d, s);
  const XQ xq{qs, d, s, nb};
  const size_t rb = row_bytes(W.dtype, K);
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  if (!q32_rewiden()) {
    const PrefillFn pf = prefill_for(W.dtype);
    const int64_t grain = std::max<int64_t>(16, 32768 / std::max<int64_t>(T * K, 1));
    parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int) { pf(base, rb, xq, T, y, N, b, e); });
    return;
  }
  // K chunks of 32 blocks: an 8-token activation tile is 16 KiB (called for T > 1
  // only, so every dot covers at most one chunk)
  avx512::parallel_blocked(ctx, T, K, N, nb, kChunk, base, rb, y,
                           [&](int nt, const uint8_t* w, int64_t c0, int64_t t0, int64_t nc, float* r) {
                             f[nt](w, xq, c0, t0, nc, r);
                           });
}

}  // namespace cpu
}  // namespace cyb
