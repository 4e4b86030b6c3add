// AMX-BF16 matmul of many tokens on F32 / F16 / BF16 weights (the amx level, fast
// mode only; precise mode keeps the f32 kernels). Each f32 value v is split into
// two bfloat16 numbers, hi = bf16(v) and lo = bf16(v - hi) (round to nearest
// even both), which together carry 16 significant bits; the product is
//   x . w = xh . wh + xl . wh + xh . wl   (+ xl . wl, below 2^-16 relative: dropped)
// as three bf16 tile products per 32 values of K (BF16 weights are exact in one
// bf16, wl = 0: two products), summed in f32 starting from the bias. On
// all-MiniLM-L6-v2 this leaves embeddings within about 2e-6 of the f32 result
// (docs/encoders.md "Speed").
//
// Layout: K is padded to a multiple of 32 (Ks, kpc = Ks / 32 blocks).
// A = the activations (tokens padded to 16 with zeros), xh and xl stored tile by
// tile (16 tokens x 32 values, 1 KB contiguous: the kpc xh tiles, then the kpc xl
// tiles of each 16 tokens). B = the weights in panels of 16 columns: kpc 1 KB
// tiles of wh, then kpc of wl, in the tile unit's pair layout (row r = values
// 2r, 2r + 1 of the 16 columns), made by transposing 16 x 16 dwords in registers.
// The panels are packed once and kept where the context offers a weight cache
// (the encoder family: as many bytes as the F32 weights), else packed per call;
// either way the columns go in L2-sized chunks (1 MB of panels), each chunk's
// panels used by every token group before the next. Work items take 32 tokens x
// up to kPairs pairs of panels, K in passes of kKc blocks (4 C tiles, 2 A and
// 2 B tiles; per block xh and wh are each loaded once for their two products:
// 8 tile loads per 12 products); the last pass stores whole C tiles straight
// into the output.
#include "backends/cpu/amx_common.h"
#include "backends/cpu/avx512_common.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_common.h"
#include "core/dtype.h"

namespace cyb {
namespace cpu {
namespace {

// Rounds 16 floats to bfloat16 (nearest even) in the low half of each dword.
inline __m512i bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
}
inline __m512 bf16_value(__m512i b) { return _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)); }

// 32 values as hi and lo bf16 vectors of 32 (in order: value k at 16-bit lane k).
inline void split32(__m512 a, __m512 b, __m512i& hi, __m512i& lo) {
  const __m512i ha = bf16_bits(a), hb = bf16_bits(b);
  const __m512i la = bf16_bits(_mm512_sub_ps(a, bf16_value(ha))), lb = bf16_bits(_mm512_sub_ps(b, bf16_value(hb)));
  hi = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(ha)), _mm512_cvtepi32_epi16(hb), 1);
  lo = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(la)), _mm512_cvtepi32_epi16(lb), 1);
}

inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : n <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << n) - 1);
}


struct Shape {
  int64_t K, Ks, kpc, copies;  // Ks = K padded to 32, kpc = Ks / 32; copies: 3 (wl stored) or 2 (BF16 weights)
  int64_t panel_dw;            // dwords per 16-column weight panel: hi tiles, then lo tiles
};

// Panel of columns [n0, n0 + cols) (cols <= 16): kpc hi tiles, then (three
// products) kpc lo tiles, 256 dwords each.
template <DType E>
void pack_panel(const uint8_t* base, size_t rb, int64_t n0, int64_t cols, const Shape& s, uint32_t* panel) {
  for (int64_t kb = 0; kb < s.kpc; ++kb) {
    const int64_t k = kb * 32;
    __m512 hi[16], lo[16];
    for (int j = 0; j < 16; ++j) {
      if (j >= cols) {
        hi[j] = lo[j] = _mm512_setzero_ps();
        continue;
      }
      const uint8_t* row = base + (n0 + j) * rb;
      const __m512 a = avx512::load_weights16<E>(row, k, lanes(s.K - k)), b = avx512::load_weights16<E>(row, k + 16, lanes(s.K - k - 16));
      __m512i h, l;
      split32(a, b, h, l);
      hi[j] = _mm512_castsi512_ps(h);
      lo[j] = _mm512_castsi512_ps(l);
    }
    avx512::transpose16(hi);  // hi[r] = the pair (2r, 2r + 1) of each column
    uint32_t* tile = panel + (kb << 8);
    for (int r = 0; r < 16; ++r) _mm512_store_ps(reinterpret_cast<float*>(tile + 16 * r), hi[r]);
    if (s.copies == 3) {
      avx512::transpose16(lo);
      tile = panel + ((s.kpc + kb) << 8);
      for (int r = 0; r < 16; ++r) _mm512_store_ps(reinterpret_cast<float*>(tile + 16 * r), lo[r]);
    }
  }
}

void pack_panels(const uint8_t* base, size_t rb, DType dt, int64_t c0, int64_t c1, const Shape& s, uint32_t* wp,
                 int64_t p0, int64_t p1) {
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = c0 + 16 * p, cols = std::min<int64_t>(16, c1 - n0);
    switch (dt) {
      case DType::F32: pack_panel<DType::F32>(base, rb, n0, cols, s, wp + p * s.panel_dw); break;
      case DType::F16: pack_panel<DType::F16>(base, rb, n0, cols, s, wp + p * s.panel_dw); break;
      default: pack_panel<DType::BF16>(base, rb, n0, cols, s, wp + p * s.panel_dw); break;
    }
  }
}

// A = [xh | xl] per token row, rows T..Tp-1 zero, stored tile by tile: tile
// (g, kb) = tokens 16g..16g+15, values 32kb..32kb+31 of xh (kb < kpc) or xl (1 KB).
void pack_acts(const float* x, int64_t T, const Shape& s, uint16_t* a, int64_t t0, int64_t t1) {
  const int64_t kb_per_copy = s.kpc;
  for (int64_t t = t0; t < t1; ++t) {
    uint16_t* base = a + (t / 16) * 2 * s.kpc * 512 + (t % 16) * 32;
    for (int64_t kb = 0; kb < kb_per_copy; ++kb) {
      const int64_t k = kb * 32;
      __m512i h = _mm512_setzero_si512(), l = _mm512_setzero_si512();
      if (t < T) {
        const __m512 v0 = _mm512_maskz_loadu_ps(lanes(s.K - k), x + t * s.K + k);
        const __m512 v1 = _mm512_maskz_loadu_ps(lanes(s.K - k - 16), x + t * s.K + k + 16);
        split32(v0, v1, h, l);
      }
      _mm512_store_si512(base + kb * 512, h);
      _mm512_store_si512(base + (kb_per_copy + kb) * 512, l);
    }
  }
}

// Where a micro-kernel reads or writes its C tiles: tile (i, j) (token tile i,
// column tile j) at p + i * roff + 16 * j, rows ld bytes apart. ld = 0 repeats
// one row (a bias), p = nullptr reads zeros.
struct TileIO {
  float* p;
  int64_t ld, roff;
  float* at(int i, int j) const { return p + i * roff + 16 * j; }
};

// C tiles 0..3 = (token tile i, column tile j) at 2i + j; A tiles 4 / 5, B 6 / 7.
// C = src + the blocks [j0, j1) of K (each: xh.wl, xh.wh, xl.wh, or without wl for
// BF16 weights), stored to dst. Per block, xh is loaded once for both of its
// products and wh once for both of its: 8 tile loads per 12 products.
template <int MT, int NT>
void micro(const uint16_t* a, const Shape& s, int64_t j0, int64_t j1, const uint32_t* p0, const uint32_t* p1,
           const TileIO& src, const TileIO& dst) {
  const int64_t na = 2 * s.kpc;  // A tiles per 16 tokens
  if (!src.p) {
    _tile_zero(0);
    if constexpr (NT == 2) _tile_zero(1);
    if constexpr (MT == 2) _tile_zero(2);
    if constexpr (MT == 2 && NT == 2) _tile_zero(3);
  } else {
    _tile_loadd(0, src.at(0, 0), src.ld);
    if constexpr (NT == 2) _tile_loadd(1, src.at(0, 1), src.ld);
    if constexpr (MT == 2) _tile_loadd(2, src.at(1, 0), src.ld);
    if constexpr (MT == 2 && NT == 2) _tile_loadd(3, src.at(1, 1), src.ld);
  }
  auto products = [] {
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
  };
  for (int64_t j = j0; j < j1; ++j) {
    const uint16_t* xh = a + (j << 9);
    const uint16_t* xl = a + ((s.kpc + j) << 9);
    _tile_loadd(4, xh, 64);
    if constexpr (MT == 2) _tile_loadd(5, xh + (na << 9), 64);
    if (s.copies == 3) {  // xh . wl
      const int64_t wl = (s.kpc + j) << 8;
      _tile_loadd(6, p0 + wl, 64);
      if constexpr (NT == 2) _tile_loadd(7, p1 + wl, 64);
      products();
    }
    _tile_loadd(6, p0 + (j << 8), 64);  // xh . wh
    if constexpr (NT == 2) _tile_loadd(7, p1 + (j << 8), 64);
    products();
    _tile_loadd(4, xl, 64);  // xl . wh
    if constexpr (MT == 2) _tile_loadd(5, xl + (na << 9), 64);
    products();
  }
  _tile_stored(0, dst.at(0, 0), dst.ld);
  if constexpr (NT == 2) _tile_stored(1, dst.at(0, 1), dst.ld);
  if constexpr (MT == 2) _tile_stored(2, dst.at(1, 0), dst.ld);
  if constexpr (MT == 2 && NT == 2) _tile_stored(3, dst.at(1, 1), dst.ld);
}

// Blocks of K per pass over a work item's column pairs: the item's 32 tokens x
// kKc blocks of activations (xh and xl: 16 KB) stay in L1 while the weight tiles stream from L2.
constexpr int64_t kKc = 4;
// Column pairs (32 columns each) per work item at most.
constexpr int64_t kPairs = 4;

}  // namespace

bool amx_float_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                      ExecContext& ctx, const BlockEpilogue* epi) {
  if (T < kPackedMinTokens || !float_weights(W.dtype) || !amx_available()) return false;
  const int64_t N = W.shape.d[0];
  const size_t rb = row_bytes(W.dtype, K);
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  Shape s;
  s.K = K;
  s.Ks = (K + 31) / 32 * 32;
  s.kpc = s.Ks / 32;
  s.copies = W.dtype == DType::BF16 ? 2 : 3;
  s.panel_dw = (s.copies == 3 ? 2 : 1) * s.kpc * 256;
  const int64_t Tp = (T + 15) / 16 * 16, n_pad = (N + 15) / 16 * 16;
  const int threads = ctx.pool() ? ctx.pool()->size() : 1;
  const int64_t tg = (Tp + 31) / 32;  // groups of 32 tokens
  // The whole matrix packed once and kept (the model's weight cache), else columns
  // in chunks whose packed panels fit in about 1 MB (L2), packed per call.
  const uint32_t* cached = nullptr;
  if (WeightCache* wc = ctx.weight_cache()) {
    constexpr int kTag = 0x414d5842;  // this layout
    cached = static_cast<const uint32_t*>(wc->get(W.data, kTag, static_cast<size_t>(n_pad / 16 * s.panel_dw * 4),
                                                  [&](void* dst) {
      parallel_rows(ctx, n_pad / 16, 1, [&](int64_t b, int64_t e, int) {
        pack_panels(base, rb, W.dtype, 0, N, s, static_cast<uint32_t*>(dst), b, e);
      });
    }, static_cast<size_t>(N) * rb));
  }
  const int64_t chunk = std::min(n_pad, std::max<int64_t>(32, (int64_t(1) << 20) / (s.panel_dw * 4) * 16 / 32 * 32));
  const int max_items = 4 * threads;  // row_items() never makes more
  const size_t acts_b = static_cast<size_t>(Tp * s.Ks * 2 * 2 + 63) / 64 * 64;
  const size_t wp_b = cached ? 0 : static_cast<size_t>((chunk + 15) / 16 * s.panel_dw * 4);
  const size_t cb_b = static_cast<size_t>(max_items) * kPairs * 4096;
  uint8_t* buf = scratch<uint8_t>(kScratchPack, acts_b + wp_b + cb_b + static_cast<size_t>(n_pad) * 4 + 64);
  uint16_t* acts = reinterpret_cast<uint16_t*>(buf);
  uint32_t* wbuf = reinterpret_cast<uint32_t*>(buf + acts_b);
  float* cbufs = reinterpret_cast<float*>(buf + acts_b + wp_b);
  // the bias padded with zeros to whole column tiles: the first pass starts from it
  float* bias_p = nullptr;
  if (bias) {
    bias_p = reinterpret_cast<float*>(buf + acts_b + wp_b + cb_b);
    std::memcpy(bias_p, bias, static_cast<size_t>(N) * 4);
    std::fill(bias_p + N, bias_p + n_pad, 0.f);
  }
  parallel_rows(ctx, Tp, 16, [&](int64_t b, int64_t e, int) { pack_acts(x, T, s, acts, b, e); });
  for (int64_t c0 = 0; c0 < N; c0 += chunk) {
    const int64_t c1 = std::min(N, c0 + chunk), np = (c1 - c0 + 15) / 16, pp = (np + 1) / 2;
    const uint32_t* wp = cached ? cached + (c0 / 16) * s.panel_dw : wbuf;
    if (!cached)
      parallel_rows(ctx, np, 1, [&](int64_t b, int64_t e, int) { pack_panels(base, rb, W.dtype, c0, c1, s, wbuf, b, e); });
    // Work items: (group of 32 tokens, up to kPairs column pairs), token-major.
    const int64_t per = tg * ((pp + kPairs - 1) / kPairs) >= 2 * threads ? kPairs : 1;
    const int64_t ranges = (pp + per - 1) / per;
    parallel_rows(ctx, tg * ranges, 1, [&](int64_t b, int64_t e, int item) {
      amx::load_full_tiles(8);
      float* cb = cbufs + static_cast<int64_t>(item) * kPairs * 1024;
      for (int64_t i = b; i < e; ++i) {
        const int64_t t0 = (i / ranges) * 32, q0 = (i % ranges) * per, q1 = std::min(pp, q0 + per);
        const bool two_t = Tp - t0 > 16;
        const uint16_t* a = acts + t0 * s.Ks * 2;
        const int64_t rows = std::min<int64_t>(32, T - t0);
        for (int64_t k0 = 0; k0 < s.kpc; k0 += kKc) {
          const int64_t k1 = std::min(s.kpc, k0 + kKc);
          for (int64_t q = q0; q < q1; ++q) {
            const int64_t p = 2 * q;
            const bool two_n = p + 1 < np;
            const uint32_t* w0 = wp + p * s.panel_dw;
            const uint32_t* w1 = w0 + s.panel_dw;
            float* c = cb + (q - q0) * 1024;
            const int64_t n0 = c0 + 32 * q, cols = std::min<int64_t>(32, c1 - n0);
            const TileIO part{c, 128, 16 * 32};
            const TileIO src = k0 > 0 ? part : TileIO{bias_p ? bias_p + n0 : nullptr, 0, 0};
            // the last pass stores whole tiles straight into y
            const bool direct = k1 == s.kpc && rows >= (two_t ? 32 : 16) && cols == (two_n ? 32 : 16);
            const TileIO dst = direct ? TileIO{y + t0 * N + n0, N * 4, 16 * N} : part;
            if (two_t && two_n) micro<2, 2>(a, s, k0, k1, w0, w1, src, dst);
            else if (two_t) micro<2, 1>(a, s, k0, k1, w0, w1, src, dst);
            else if (two_n) micro<1, 2>(a, s, k0, k1, w0, w1, src, dst);
            else micro<1, 1>(a, s, k0, k1, w0, w1, src, dst);
            if (k1 < s.kpc) continue;
            if (!direct) {
              const __mmask16 m0 = lanes(cols), m1 = lanes(cols - 16);
              for (int64_t r = 0; r < rows; ++r) {
                float* yr = y + (t0 + r) * N + n0;
                _mm512_mask_storeu_ps(yr, m0, _mm512_load_ps(c + r * 32));
                if (m1) _mm512_mask_storeu_ps(yr + 16, m1, _mm512_load_ps(c + r * 32 + 16));
              }
            }
            if (epi) (*epi)(t0, rows, n0, cols);
          }
        }
      }
      _tile_release();
    });
  }
  return true;
}

}  // namespace cpu
}  // namespace cyb
