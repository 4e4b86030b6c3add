// AMX-INT8 fast-mode matmul (the amx CPU level) for Q4_K and Q6_K weights and
// several tokens (prefill), in exact integer arithmetic. Activations are the
// avx512 K-quant ones: int16 per 256 values (d = amax / 32767, q =
// round-half-even(x * (1 / d))). Weights are decoded per super-block into their
// int16 values times the sub-block scale (Q4_K q * sc <= 945, Q6_K |(q - 32) *
// sc| <= 4096). Both sides are split exactly into bytes, a = 256 * ah + al
// (al u8, ah s8), so the super-block dot is
//   sum w x = sum wl xl + 256 * (sum wl xh + sum wh xl) + 65536 * sum wh xh,
// four int8 tile products into three int32 tiles, each below 2^24 over 256
// values (wl xl <= 256 * 255 * 255), so exact in f32; the combination and the
// scales d_w * d_x are f32.
// Tiles: A = 16 weight rows x 64 values (natural layout), B = 64 values of 16
// tokens in the tile unit's 4-byte-interleaved layout (prepared once per
// matmul), C = 16 rows x 16 tokens.
#include "backends/cpu/amx_common.h"
#include "backends/cpu/avx512_common.h"

#include <algorithm>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_common.h"
#include "core/dtype.h"

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace cyb {
namespace cpu {
namespace {

using avx512::f16v;
using avx512::k_scales_mins;

// Every tile is 16 rows x 64 bytes: 0 / 1 = activations lo / hi, 2 / 3 = weights
// lo / hi, 4 / 5 / 6 / 7 = C of wl*xl, wl*xh, wh*xl, wh*xh (four independent
// accumulation chains: a tile product's latency is several times its issue rate).
void load_tiles() { amx::load_full_tiles(8); }

// Activations of one matmul, tokens padded to a multiple of 16 with zeros.
struct Acts {
  const uint32_t* lo;  // [K/4][Tp]: 4 consecutive low bytes of token t
  const uint32_t* hi;  // [K/4][Tp]
  const float* d;      // [K/QB][Tp]: the scales (QB = 256 or 32)
  const float* s;      // [K/32][Tp]: d * sum(q) of each 32-block
  int64_t Tp;
};

// One scale per QB values (256: the K-quant activations, 32: BlockQ16's), in
// the tile layout: lo / hi [K/4][Tp] dwords, d [K/QB][Tp], s [K/32][Tp].
template <int QB>
void quantize(const float* x, int64_t T, int64_t K, int64_t Tp, uint32_t* lo, uint32_t* hi, float* d, float* s) {
  for (int64_t t = T; t < Tp; ++t) {  // padding tokens: zeros
    for (int64_t k = 0; k < K / 4; ++k) lo[k * Tp + t] = hi[k * Tp + t] = 0;
    for (int64_t b = 0; b < K / QB; ++b) d[b * Tp + t] = 0.f;
    for (int64_t b = 0; b < K / 32; ++b) s[b * Tp + t] = 0.f;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t blk = 0; blk < K / QB; ++blk) {
      const float* xs = x + t * K + blk * QB;
      __m512 m = _mm512_setzero_ps();
      for (int i = 0; i < QB; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xs + i)));
      const float amax = _mm512_reduce_max_ps(m);
      const float dd = amax / 32767.0f;
      const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
      const __m512 vid = _mm512_set1_ps(id);
      d[blk * Tp + t] = dd;
      for (int c = 0; c < QB / 32; ++c) {  // cvtps rounds half to even (default MXCSR)
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 32 * c), vid));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 32 * c + 16), vid));
        // sums of |q| <= 2^20: exact in f32
        s[(blk * (QB / 32) + c) * Tp + t] =
            dd * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
        alignas(16) uint32_t l8[8], h8[8];
        _mm_store_si128(reinterpret_cast<__m128i*>(l8), _mm512_cvtepi32_epi8(q0));
        _mm_store_si128(reinterpret_cast<__m128i*>(l8 + 4), _mm512_cvtepi32_epi8(q1));
        _mm_store_si128(reinterpret_cast<__m128i*>(h8), _mm512_cvtepi32_epi8(_mm512_srai_epi32(q0, 8)));
        _mm_store_si128(reinterpret_cast<__m128i*>(h8 + 4), _mm512_cvtepi32_epi8(_mm512_srai_epi32(q1, 8)));
        const int64_t k0 = (blk * QB + 32 * c) / 4;
        for (int i = 0; i < 8; ++i) {
          lo[(k0 + i) * Tp + t] = l8[i];
          hi[(k0 + i) * Tp + t] = h8[i];
        }
      }
    }
}

// One super-block of 16 weight rows: value * sub-block scale, split into low
// (u8) and high (s8) bytes, row-major; the super-block scale of each row, and
// Q4_K's mins (dmin * m) per sub-block.
struct RowBlock {
  alignas(64) uint8_t wl[16][256];
  alignas(64) int8_t wh[16][256];
  alignas(64) float d[16];
  alignas(64) float mn[8][16];  // [sub][row]
};

// 32 int16 values -> their low and high bytes at wl / wh.
inline void split_store(__m512i v, uint8_t* wl, int8_t* wh) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(wl), _mm512_cvtepi16_epi8(v));
  _mm256_store_si256(reinterpret_cast<__m256i*>(wh), _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
}

template <DType E>
void decode_rows(const uint8_t* base, size_t rb, int64_t sb, int64_t n0, int64_t nrows, RowBlock& R) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  for (int r = 0; r < 16; ++r) {
    if (r >= nrows) {  // past the last row: zero weights
      std::memset(R.wl[r], 0, 256);
      std::memset(R.wh[r], 0, 256);
      R.d[r] = 0.f;
      for (int j = 0; j < 8; ++j) R.mn[j][r] = 0.f;
      continue;
    }
    if constexpr (E == DType::Q4_K) {
      const uint8_t* blk = base + (n0 + r) * rb + sb * 144;
      R.d[r] = f16v(blk);
      const float dmin = f16v(blk + 2);
      alignas(16) uint8_t sm[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(sm), k_scales_mins(blk + 4));
      for (int j = 0; j < 8; ++j) R.mn[j][r] = dmin * static_cast<float>(sm[8 + j]);
      for (int c = 0; c < 2; ++c) {
        const __m512i raw = _mm512_loadu_si512(blk + 16 + 64 * c);
        const __m512i lo = _mm512_and_si512(raw, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
        // values 128c + 32i (i = 0..3): low nibbles of bytes 0-31, high of 0-31, low of 32-63, high of 32-63
        const __m256i q[4] = {_mm512_castsi512_si256(lo), _mm512_castsi512_si256(hi),
                              _mm512_extracti64x4_epi64(lo, 1), _mm512_extracti64x4_epi64(hi, 1)};
        for (int i = 0; i < 4; ++i) {
          const int j = 4 * c + i;  // sub-block
          const __m512i v = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(q[i]), _mm512_set1_epi16(sm[j]));
          split_store(v, R.wl[r] + 32 * j, R.wh[r] + 32 * j);
        }
      }
    } else {  // Q6_K: scale per 16 values
      const uint8_t* blk = base + (n0 + r) * rb + sb * 210;
      R.d[r] = f16v(blk + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      const __m512i three = _mm512_set1_epi8(3), c32 = _mm512_set1_epi8(32);
      for (int h = 0; h < 2; ++h) {
        const __m512i L = _mm512_loadu_si512(blk + 64 * h);
        const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
        const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(H), _mm256_srli_epi16(H, 2), 1);
        const __m512i hz2 = _mm512_srli_epi16(hz, 4);
        const __m512i x[2] = {
            _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(L, lo4), _mm512_slli_epi16(_mm512_and_si512(hz, three), 4)),
                            c32),
            _mm512_sub_epi8(_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), lo4),
                                            _mm512_slli_epi16(_mm512_and_si512(hz2, three), 4)),
                            c32)};
        for (int g = 0; g < 2; ++g)      // values 128h + 64g ..
          for (int i = 0; i < 2; ++i) {  // 32 values: scales 2k and 2k+1, k = 4h + 2g + i
            const int k = 4 * h + 2 * g + i;
            const __m256i q = i == 0 ? _mm512_castsi512_si256(x[g]) : _mm512_extracti64x4_epi64(x[g], 1);
            const __m512i scv = _mm512_inserti64x4(_mm512_set1_epi16(sc[2 * k]), _mm256_set1_epi16(sc[2 * k + 1]), 1);
            split_store(_mm512_mullo_epi16(_mm512_cvtepi8_epi16(q), scv), R.wl[r] + 32 * k, R.wh[r] + 32 * k);
          }
      }
    }
  }
}

// Rows [n0, n1) (n0 a multiple of 16) of y[T, N]. acc: 16 x Tp floats of scratch.
template <DType E>
void rows_amx(const Acts& a, int64_t T, int64_t K, const uint8_t* base, size_t rb, float* y, int64_t N, int64_t n0,
              int64_t n1, float* acc, RowBlock& R) {
  const int64_t nsb = K / 256, Tp = a.Tp;
  alignas(64) int32_t c[2][4][16][16];
  load_tiles();
  const __m512i rows_idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(static_cast<int>(Tp)));
  for (int64_t r0 = n0; r0 < n1; r0 += 16) {
    const int64_t nrows = std::min<int64_t>(16, n1 - r0);
    std::fill(acc, acc + 16 * Tp, 0.f);
    for (int64_t sb = 0; sb < nsb; ++sb) {
      decode_rows<E>(base, rb, sb, r0, nrows, R);
      // Software pipeline over token tiles: the products of tile i+1 are
      // issued before the vector unit scales the stored products of tile i.
      auto products = [&](int64_t t0, int buf) {
        _tile_zero(4);
        _tile_zero(5);
        _tile_zero(6);
        _tile_zero(7);
        for (int k = 0; k < 4; ++k) {  // 64 values at a time
          const int64_t kq = sb * 64 + 16 * k;
          _tile_loadd(0, a.lo + kq * Tp + t0, Tp * 4);
          _tile_loadd(1, a.hi + kq * Tp + t0, Tp * 4);
          _tile_loadd(2, R.wl[0] + 64 * k, 256);
          _tile_loadd(3, R.wh[0] + 64 * k, 256);
          _tile_dpbuud(4, 2, 0);  // wl x xl
          _tile_dpbusd(5, 2, 1);  // wl x xh
          _tile_dpbsud(6, 3, 0);  // wh x xl
          _tile_dpbssd(7, 3, 1);  // wh x xh
        }
        _tile_stored(4, c[buf][0], 64);
        _tile_stored(5, c[buf][1], 64);
        _tile_stored(6, c[buf][2], 64);
        _tile_stored(7, c[buf][3], 64);
      };
      auto scale = [&](int64_t t0, int buf) {
        const __m512 dx = _mm512_loadu_ps(a.d + sb * Tp + t0);
        for (int r = 0; r < 16; ++r) {
          // lo*hi + hi*lo stays below 2^24 (exact in f32 and in the int32 sum)
          const __m512i mid = _mm512_add_epi32(_mm512_load_si512(c[buf][1][r]), _mm512_load_si512(c[buf][2][r]));
          __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[buf][3][r])), _mm512_set1_ps(65536.f),
                                     _mm512_cvtepi32_ps(_mm512_load_si512(c[buf][0][r])));
          v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mid), _mm512_set1_ps(256.f), v);
          float* ar = acc + r * Tp + t0;
          __m512 o = _mm512_fmadd_ps(v, _mm512_mul_ps(dx, _mm512_set1_ps(R.d[r])), _mm512_load_ps(ar));
          if constexpr (E == DType::Q4_K)
            for (int j = 0; j < 8; ++j)
              o = _mm512_fnmadd_ps(_mm512_set1_ps(R.mn[j][r]), _mm512_loadu_ps(a.s + (sb * 8 + j) * Tp + t0), o);
          _mm512_store_ps(ar, o);
        }
      };
      products(0, 0);
      for (int64_t t0 = 16; t0 < Tp; t0 += 16) {
        const int buf = static_cast<int>((t0 / 16) & 1);
        products(t0, buf);
        scale(t0 - 16, buf ^ 1);
      }
      scale(Tp - 16, static_cast<int>(((Tp - 16) / 16) & 1));
    }
    // y[t][r0 + r] = acc[r][t], 16 rows per token in one store
    const __mmask16 m = static_cast<__mmask16>((1u << nrows) - 1);
    for (int64_t t = 0; t < T; ++t)
      _mm512_mask_storeu_ps(y + t * N + r0, m, _mm512_i32gather_ps(rows_idx, acc + t, 4));
  }
  _tile_release();
}

// ------------------------------------------------------------ 32-value blocks
// Q4_0 / Q4_1 / Q5_0 / Q8_0: activations quantized exactly as BlockQ16 (one
// scale per 32 values); each weight block's values fit a byte as they are, so a
// block is two tile products (low and high activation bytes, K = 32), scaled
// in f32 by d_w * d_x per block (Q4_1: plus m_w * s_x).

constexpr int kBlocks32 = 16;  // weight blocks decoded at once per row block

struct RowBlock32 {
  alignas(64) int8_t w[16][32 * kBlocks32];  // values (Q4_1: u8 0..15), natural order
  alignas(64) float d[kBlocks32][16];         // [block][row]
  alignas(64) float m[kBlocks32][16];         // Q4_1 mins
};

template <DType E>
void decode_rows32(const uint8_t* base, size_t rb, int64_t b0, int nbk, int64_t n0, int64_t nrows, RowBlock32& R) {
  constexpr int64_t kBytes = E == DType::Q4_0 ? 18 : E == DType::Q4_1 ? 20 : E == DType::Q5_0 ? 22 : 34;
  const __m128i lo4 = _mm_set1_epi8(0x0f);
  for (int r = 0; r < 16; ++r) {
    if (r >= nrows) {
      std::memset(R.w[r], 0, sizeof(R.w[r]));
      for (int b = 0; b < nbk; ++b) R.d[b][r] = R.m[b][r] = 0.f;
      continue;
    }
    for (int b = 0; b < nbk; ++b) {
      const uint8_t* blk = base + (n0 + r) * rb + (b0 + b) * kBytes;
      int8_t* o = R.w[r] + 32 * b;
      R.d[b][r] = f16v(blk);
      R.m[b][r] = E == DType::Q4_1 ? f16v(blk + 2) : 0.f;
      if constexpr (E == DType::Q8_0) {
        std::memcpy(o, blk + 2, 32);
      } else {
        const int off = E == DType::Q4_1 ? 4 : E == DType::Q5_0 ? 6 : 2;
        const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + off));
        __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(t, lo4)),
                                            _mm_and_si128(_mm_srli_epi16(t, 4), lo4), 1);
        if constexpr (E == DType::Q5_0) {
          uint32_t qh;  // bit j is the fifth bit of value j
          std::memcpy(&qh, blk + 2, 4);
          v = _mm256_sub_epi8(_mm256_mask_add_epi8(v, static_cast<__mmask32>(qh), v, _mm256_set1_epi8(16)),
                              _mm256_set1_epi8(16));
        }
        if constexpr (E == DType::Q4_0) v = _mm256_sub_epi8(v, _mm256_set1_epi8(8));
        _mm256_store_si256(reinterpret_cast<__m256i*>(o), v);
      }
    }
  }
}

// Tiles: 0 = weights (16 rows x 32 bytes), 1 / 2 = activations lo / hi (8 x 64),
// 4 / 5 and 6 / 7 = C lo / hi of even and odd blocks.
void load_tiles32() {
  amx::TileConfig c;
  c.rows[0] = 16;
  c.colsb[0] = 32;
  c.rows[1] = c.rows[2] = 8;
  c.colsb[1] = c.colsb[2] = 64;
  for (int i = 4; i < 8; ++i) {
    c.rows[i] = 16;
    c.colsb[i] = 64;
  }
  amx::tile_config_barrier(&c);
  _tile_loadconfig(&c);
}

template <DType E>
void rows_amx32(const Acts& a, int64_t T, int64_t K, const uint8_t* base, size_t rb, float* y, int64_t N, int64_t n0,
                int64_t n1, float* acc, RowBlock32& R) {
  const int64_t nb = K / 32, Tp = a.Tp;
  alignas(64) int32_t c[2][2][16][16];
  load_tiles32();
  const __m512i rows_idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(static_cast<int>(Tp)));
  for (int64_t r0 = n0; r0 < n1; r0 += 16) {
    const int64_t nrows = std::min<int64_t>(16, n1 - r0);
    std::fill(acc, acc + 16 * Tp, 0.f);
    for (int64_t b0 = 0; b0 < nb; b0 += kBlocks32) {
      const int nbk = static_cast<int>(std::min<int64_t>(kBlocks32, nb - b0));
      decode_rows32<E>(base, rb, b0, nbk, r0, nrows, R);
      for (int64_t t0 = 0; t0 < Tp; t0 += 16) {
        auto products = [&](int b, int buf) {
          const int64_t kq = (b0 + b) * 8;
          _tile_loadd(0, R.w[0] + 32 * b, 32 * kBlocks32);
          _tile_loadd(1, a.lo + kq * Tp + t0, Tp * 4);
          _tile_loadd(2, a.hi + kq * Tp + t0, Tp * 4);
          if (buf == 0) {
            _tile_zero(4);
            _tile_zero(5);
            if constexpr (E == DType::Q4_1) {
              _tile_dpbuud(4, 0, 1);
              _tile_dpbusd(5, 0, 2);
            } else {
              _tile_dpbsud(4, 0, 1);
              _tile_dpbssd(5, 0, 2);
            }
            _tile_stored(4, c[0][0], 64);
            _tile_stored(5, c[0][1], 64);
          } else {
            _tile_zero(6);
            _tile_zero(7);
            if constexpr (E == DType::Q4_1) {
              _tile_dpbuud(6, 0, 1);
              _tile_dpbusd(7, 0, 2);
            } else {
              _tile_dpbsud(6, 0, 1);
              _tile_dpbssd(7, 0, 2);
            }
            _tile_stored(6, c[1][0], 64);
            _tile_stored(7, c[1][1], 64);
          }
        };
        auto scale = [&](int b, int buf) {
          const __m512 dx = _mm512_loadu_ps(a.d + (b0 + b) * Tp + t0);
          const __m512 sx = _mm512_loadu_ps(a.s + (b0 + b) * Tp + t0);
          for (int r = 0; r < 16; ++r) {
            const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[buf][1][r])), _mm512_set1_ps(256.f),
                                             _mm512_cvtepi32_ps(_mm512_load_si512(c[buf][0][r])));
            float* ar = acc + r * Tp + t0;
            __m512 o = _mm512_fmadd_ps(v, _mm512_mul_ps(dx, _mm512_set1_ps(R.d[b][r])), _mm512_load_ps(ar));
            if constexpr (E == DType::Q4_1) o = _mm512_fmadd_ps(sx, _mm512_set1_ps(R.m[b][r]), o);
            _mm512_store_ps(ar, o);
          }
        };
        products(0, 0);
        for (int b = 1; b < nbk; ++b) {
          products(b, b & 1);
          scale(b - 1, (b - 1) & 1);
        }
        scale(nbk - 1, (nbk - 1) & 1);
      }
    }
    const __mmask16 m = static_cast<__mmask16>((1u << nrows) - 1);
    for (int64_t t = 0; t < T; ++t)
      _mm512_mask_storeu_ps(y + t * N + r0, m, _mm512_i32gather_ps(rows_idx, acc + t, 4));
  }
  _tile_release();
}

bool amx_permitted() {
#if defined(__linux__)
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

bool amx_available() {
  static const bool ok = amx_permitted();
  return ok;
}

namespace {

// Quantizes the activations (one scale per QB values), then runs
// rows(acts, b, e, acc, row_block) over work items of whole 16-row blocks, each
// with its own accumulators (16 x Tp floats) and decoded-weights buffer RB.
template <int QB, class RB, class Rows>
void run_amx(const float* x, int64_t T, int64_t K, int64_t N, ExecContext& ctx, Rows&& rows) {
  const int64_t Tp = (T + 15) / 16 * 16;
  const size_t n_lo = static_cast<size_t>(K / 4 * Tp), n_d = static_cast<size_t>(K / QB * Tp),
               n_s = static_cast<size_t>(K / 32 * Tp);
  uint32_t* lo = scratch<uint32_t>(kScratchXq, 2 * n_lo + n_d + n_s + 16);
  uint32_t* hi = lo + n_lo;
  float* d = reinterpret_cast<float*>(hi + n_lo);
  float* s = d + n_d;
  quantize<QB>(x, T, K, Tp, lo, hi, d, s);
  const Acts a{lo, hi, d, s, Tp};
  const int64_t grain = 16;
  const int items = row_items(ctx, N, grain);
  const size_t per = (static_cast<size_t>(16 * Tp) * 4 + sizeof(RB) + 63) / 64 * 64;
  uint8_t* buf = scratch<uint8_t>(kScratchItems, per * static_cast<size_t>(items) + 64);
  parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int item) {
    uint8_t* p = buf + per * static_cast<size_t>(item);
    rows(a, b, e, reinterpret_cast<float*>(p), *reinterpret_cast<RB*>(p + static_cast<size_t>(16 * Tp) * 4));
  });
}

}  // namespace

constexpr int64_t kAmx32MinTokens = 5;
bool amx_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx) {
  // K-quants from 8 tokens; the 32-value blocks from kAmx32MinTokens (a beam of 5; below, the 256-bit
  // dot kernels of kernels_x86_matmul.inc; the same exact integer sums either way)
  const bool blocks32 = W.dtype == DType::Q4_0 || W.dtype == DType::Q4_1 || W.dtype == DType::Q5_0 || W.dtype == DType::Q8_0;
  if (T < (blocks32 ? kAmx32MinTokens : 8)) return false;
  const int64_t N = W.shape.d[0];
  const size_t rb = row_bytes(W.dtype, K);
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  switch (W.dtype) {
    case DType::Q4_K:
    case DType::Q6_K:
      run_amx<256, RowBlock>(x, T, K, N, ctx, [&](const Acts& a, int64_t b, int64_t e, float* acc, RowBlock& R) {
        if (W.dtype == DType::Q4_K) rows_amx<DType::Q4_K>(a, T, K, base, rb, y, N, b, e, acc, R);
        else rows_amx<DType::Q6_K>(a, T, K, base, rb, y, N, b, e, acc, R);
      });
      return true;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q8_0:
      run_amx<32, RowBlock32>(x, T, K, N, ctx, [&](const Acts& a, int64_t b, int64_t e, float* acc, RowBlock32& R) {
        switch (W.dtype) {
          case DType::Q4_0: rows_amx32<DType::Q4_0>(a, T, K, base, rb, y, N, b, e, acc, R); break;
          case DType::Q4_1: rows_amx32<DType::Q4_1>(a, T, K, base, rb, y, N, b, e, acc, R); break;
          case DType::Q5_0: rows_amx32<DType::Q5_0>(a, T, K, base, rb, y, N, b, e, acc, R); break;
          default: rows_amx32<DType::Q8_0>(a, T, K, base, rb, y, N, b, e, acc, R); break;
        }
      });
      return true;
    default:
      return false;
  }
}

}  // namespace cpu
}  // namespace cyb
