// AMX-INT8 fast-mode matmul (the amx CPU level) for Q4_K and Q6_K weights and
// several tokens (prefill). Exact integer products, the same activations as
// the avx512 K-quant path: int16 per 256 values (d = amax / 32767, q =
// round-half-even(x * (1 / d))), split exactly as q = 256 * hi + lo with lo in
// [0, 255] (u8) and hi in [-128, 127] (s8), so two int8 tile products give the
// exact int32 dot of each sub-block (|.| <= 2^24, exact in f32):
//   C[row][token] = sum_k w[row][k] * lo[token][k] + 256 * sum_k w[row][k] * hi[token][k]
// Tiles: A = 16 weight rows x one sub-block (decoded to bytes, natural order),
// B = the activations of 16 tokens in the tile unit's 4-byte-interleaved layout
// (prepared once per matmul), C = 16 x 16 int32. Each sub-block's C is scaled
// in f32 by the row's sub-block scale, each super-block by the token's d.
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

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: 0 = weights (16 x sub bytes), 1 / 2 = activations lo / hi (sub/4 x 64), 4 / 5 = C lo / hi.
void load_tiles(int sub) {
  TileConfig c;
  c.rows[0] = 16;
  c.colsb[0] = static_cast<uint16_t>(sub);
  c.rows[1] = c.rows[2] = static_cast<uint8_t>(sub / 4);
  c.colsb[1] = c.colsb[2] = 64;
  c.rows[4] = c.rows[5] = 16;
  c.colsb[4] = c.colsb[5] = 64;
  _tile_loadconfig(&c);
}

// Activations of one matmul, tokens padded to a multiple of 16 with zeros.
struct Acts {
  const uint32_t* lo;  // [K/4][Tp]: 4 consecutive low bytes of token t
  const uint32_t* hi;  // [K/4][Tp]
  const float* d;      // [K/256][Tp]
  const float* s;      // [K/32][Tp]: d * sum(q) of each 32-block
  int64_t Tp;
};

void quantize(const float* x, int64_t T, int64_t K, int64_t Tp, uint32_t* lo, uint32_t* hi, float* d, float* s) {
  const int64_t nsb = K / 256;
  for (int64_t t = T; t < Tp; ++t) {  // padding tokens: zeros
    for (int64_t k = 0; k < K / 4; ++k) lo[k * Tp + t] = hi[k * Tp + t] = 0;
    for (int64_t b = 0; b < nsb; ++b) d[b * Tp + t] = 0.f;
    for (int64_t b = 0; b < K / 32; ++b) s[b * Tp + t] = 0.f;
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const float* xs = x + t * K + sb * 256;
      __m512 m = _mm512_setzero_ps();
      for (int i = 0; i < 256; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xs + i)));
      const float amax = _mm512_reduce_max_ps(m);
      const float dd = amax / 32767.0f;
      const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
      const __m512 vid = _mm512_set1_ps(id);
      d[sb * Tp + t] = dd;
      for (int c = 0; c < 16; ++c) {  // 16 values = 4 dwords of lo and of hi
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xs + 16 * c), vid));
        if (c % 2 == 0) s[(sb * 8 + c / 2) * Tp + t] = 0.f;
        s[(sb * 8 + c / 2) * Tp + t] += static_cast<float>(_mm512_reduce_add_epi32(q));
        alignas(16) uint32_t l4[4], h4[4];
        _mm_store_si128(reinterpret_cast<__m128i*>(l4), _mm512_cvtepi32_epi8(q));
        _mm_store_si128(reinterpret_cast<__m128i*>(h4), _mm512_cvtepi32_epi8(_mm512_srai_epi32(q, 8)));
        const int64_t k0 = sb * 64 + 4 * c;
        for (int i = 0; i < 4; ++i) {
          lo[(k0 + i) * Tp + t] = l4[i];
          hi[(k0 + i) * Tp + t] = h4[i];
        }
      }
      for (int j = 0; j < 8; ++j) s[(sb * 8 + j) * Tp + t] *= dd;  // sums of |q| <= 2^20: exact in f32
    }
  }
}

// One super-block of 16 weight rows, decoded: bytes in natural order (Q4_K:
// u8 0..15, Q6_K: s8 -32..31), per-sub-block f32 scales, and Q4_K's mins.
struct RowBlock {
  alignas(64) uint8_t q[16][256];
  alignas(64) float sc[16][16];  // [sub][row]
  alignas(64) float mn[8][16];   // [sub][row] (Q4_K)
};

inline __m128i k_scales_mins(const uint8_t* p) {
  uint32_t a, b, c;
  std::memcpy(&a, p, 4);
  std::memcpy(&b, p + 4, 4);
  std::memcpy(&c, p + 8, 4);
  const uint32_t s03 = a & 0x3f3f3f3fu, m03 = b & 0x3f3f3f3fu;
  const uint32_t s47 = (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4);
  const uint32_t m47 = ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4);
  return _mm_set_epi32(static_cast<int>(m47), static_cast<int>(m03), static_cast<int>(s47),
                       static_cast<int>(s03));
}

template <DType E>
void decode_rows(const uint8_t* base, size_t rb, int64_t sb, int64_t n0, int64_t nrows, RowBlock& R) {
  const __m512i lo4 = _mm512_set1_epi8(0x0f);
  for (int r = 0; r < 16; ++r) {
    if (r >= nrows) {  // past the last row: zero weights and scales
      std::memset(R.q[r], 0, 256);
      for (int j = 0; j < 16; ++j) R.sc[j][r] = 0.f;
      for (int j = 0; j < 8; ++j) R.mn[j][r] = 0.f;
      continue;
    }
    if constexpr (E == DType::Q4_K) {
      const uint8_t* blk = base + (n0 + r) * rb + sb * 144;
      const float d = f16v(blk), dmin = f16v(blk + 2);
      alignas(16) uint8_t sm[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(sm), k_scales_mins(blk + 4));
      for (int j = 0; j < 8; ++j) {
        R.sc[j][r] = d * static_cast<float>(sm[j]);
        R.mn[j][r] = dmin * static_cast<float>(sm[8 + j]);
      }
      for (int c = 0; c < 2; ++c) {
        const __m512i raw = _mm512_loadu_si512(blk + 16 + 64 * c);
        const __m512i lo = _mm512_and_si512(raw, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
        _mm512_store_si512(R.q[r] + 128 * c, _mm512_shuffle_i64x2(lo, hi, 0x44));      // 128c + 0..63
        _mm512_store_si512(R.q[r] + 128 * c + 64, _mm512_shuffle_i64x2(lo, hi, 0xee));  // 128c + 64..127
      }
    } else {  // Q6_K
      const uint8_t* blk = base + (n0 + r) * rb + sb * 210;
      const float d = f16v(blk + 208);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      for (int j = 0; j < 16; ++j) R.sc[j][r] = d * static_cast<float>(sc[j]);
      const __m512i three = _mm512_set1_epi8(3), c32 = _mm512_set1_epi8(32);
      for (int h = 0; h < 2; ++h) {
        const __m512i L = _mm512_loadu_si512(blk + 64 * h);
        const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
        const __m512i hz = _mm512_inserti64x4(_mm512_castsi256_si512(H), _mm256_srli_epi16(H, 2), 1);
        const __m512i hz2 = _mm512_srli_epi16(hz, 4);
        const __m512i x0 = _mm512_or_si512(_mm512_and_si512(L, lo4), _mm512_slli_epi16(_mm512_and_si512(hz, three), 4));
        const __m512i x1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), lo4),
                                           _mm512_slli_epi16(_mm512_and_si512(hz2, three), 4));
        _mm512_store_si512(R.q[r] + 128 * h, _mm512_sub_epi8(x0, c32));
        _mm512_store_si512(R.q[r] + 128 * h + 64, _mm512_sub_epi8(x1, c32));
      }
    }
  }
}

// Rows [n0, n1) (n0 a multiple of 16) of y[T, N]. acc: 16 x Tp floats of scratch.
template <DType E>
void rows_amx(const Acts& a, int64_t T, int64_t K, const uint8_t* base, size_t rb, float* y, int64_t N, int64_t n0,
              int64_t n1, float* acc, RowBlock& R) {
  constexpr int kSub = E == DType::Q4_K ? 32 : 16;  // values per scale
  constexpr int kSubs = 256 / kSub;
  const int64_t nsb = K / 256, Tp = a.Tp;
  alignas(64) int32_t clo[16][16], chi[16][16];
  load_tiles(kSub);
  for (int64_t r0 = n0; r0 < n1; r0 += 16) {
    const int64_t nrows = std::min<int64_t>(16, n1 - r0);
    std::fill(acc, acc + 16 * Tp, 0.f);
    for (int64_t sb = 0; sb < nsb; ++sb) {
      decode_rows<E>(base, rb, sb, r0, nrows, R);
      for (int64_t t0 = 0; t0 < Tp; t0 += 16) {
        __m512 as[16];
        KQ_UNROLL for (int r = 0; r < 16; ++r) as[r] = _mm512_setzero_ps();
        for (int j = 0; j < kSubs; ++j) {
          const int64_t kq = sb * 64 + j * (kSub / 4);  // first dword row of this sub-block
          _tile_loadd(0, R.q[0] + j * kSub, 256);
          _tile_loadd(1, a.lo + kq * Tp + t0, Tp * 4);
          _tile_loadd(2, a.hi + kq * Tp + t0, Tp * 4);
          _tile_zero(4);
          _tile_zero(5);
          if constexpr (E == DType::Q4_K) {
            _tile_dpbuud(4, 0, 1);
            _tile_dpbusd(5, 0, 2);
          } else {
            _tile_dpbsud(4, 0, 1);
            _tile_dpbssd(5, 0, 2);
          }
          _tile_stored(4, clo, 64);
          _tile_stored(5, chi, 64);
          KQ_UNROLL for (int r = 0; r < 16; ++r) {
            const __m512i c = _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(chi[r]), 8),
                                               _mm512_load_si512(clo[r]));
            as[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(R.sc[j][r]), as[r]);
          }
        }
        const __m512 dx = _mm512_loadu_ps(a.d + sb * Tp + t0);
        for (int r = 0; r < 16; ++r) {
          float* ar = acc + r * Tp + t0;
          __m512 v = _mm512_fmadd_ps(as[r], dx, _mm512_load_ps(ar));
          if constexpr (E == DType::Q4_K)
            for (int j = 0; j < 8; ++j)
              v = _mm512_fnmadd_ps(_mm512_set1_ps(R.mn[j][r]), _mm512_loadu_ps(a.s + (sb * 8 + j) * Tp + t0), v);
          _mm512_store_ps(ar, v);
        }
      }
    }
    for (int64_t r = 0; r < nrows; ++r)
      for (int64_t t = 0; t < T; ++t) y[t * N + r0 + r] = acc[r * Tp + t];
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

bool amx_matmul(const float* x, int64_t T, int64_t K, const Tensor& W, float* y, ExecContext& ctx) {
  if (T < 8 || (W.dtype != DType::Q4_K && W.dtype != DType::Q6_K)) return false;
  const int64_t N = W.shape.d[0], Tp = (T + 15) / 16 * 16;
  // activations: lo, hi (K/4 x Tp dwords each), d (K/256 x Tp), s (K/32 x Tp)
  const size_t n_lo = static_cast<size_t>(K / 4 * Tp), n_d = static_cast<size_t>(K / 256 * Tp),
               n_s = static_cast<size_t>(K / 32 * Tp);
  uint32_t* lo = scratch<uint32_t>(kScratchXq, 2 * n_lo + n_d + n_s + 16);
  uint32_t* hi = lo + n_lo;
  float* d = reinterpret_cast<float*>(hi + n_lo);
  float* s = d + n_d;
  quantize(x, T, K, Tp, lo, hi, d, s);
  const Acts a{lo, hi, d, s, Tp};
  // per work item: the f32 accumulators of a 16-row block and its decoded super-block
  const int64_t grain = 16;
  const int items = row_items(ctx, N, grain);
  const size_t per = (static_cast<size_t>(16 * Tp) * 4 + sizeof(RowBlock) + 63) / 64 * 64;
  uint8_t* buf = scratch<uint8_t>(kScratchItems, per * static_cast<size_t>(items) + 64);
  const size_t rb = row_bytes(W.dtype, K);
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int item) {
    uint8_t* p = buf + per * static_cast<size_t>(item);
    float* acc = reinterpret_cast<float*>(p);
    RowBlock& R = *reinterpret_cast<RowBlock*>(p + static_cast<size_t>(16 * Tp) * 4);
    if (W.dtype == DType::Q4_K) rows_amx<DType::Q4_K>(a, T, K, base, rb, y, N, b, e, acc, R);
    else rows_amx<DType::Q6_K>(a, T, K, base, rb, y, N, b, e, acc, R);
  });
  return true;
}

}  // namespace cpu
}  // namespace cyb
