// AVX-512 attention for several query tokens over an f32 cache (prefill): a
// tile of 4 consecutive tokens of one head (2 when head_dim > 64) shares every
// key and value row it reads. Scores are f32 dot products, then scaled,
// softcapped and compared in double as in kernels_x86_ops.inc (large logits lose
// nothing before the max is known); exp runs in f32 on s - max.
#include "backends/cpu/avx512_common.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_common.h"

namespace cyb {
namespace cpu {
namespace {

struct Args {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t T, pos0, ctx;  // ctx: positions per kv head in k / v
  int nh, nkv, hd;
  int64_t window;
  float scale, cap;
};

// One tile: QT tokens t0.. of head h. C = head_dim / 16 vectors per row.
template <int QT, int C>
void tile(const Args& a, int64_t t0, int h, double* sd, float* w) {
  const int kh = h / (a.nh / a.nkv);
  const int qt = static_cast<int>(std::min<int64_t>(QT, a.T - t0));
  int64_t p[QT], lo[QT];
  for (int i = 0; i < QT; ++i) {
    p[i] = a.pos0 + t0 + std::min(i, qt - 1);
    lo[i] = a.window > 0 ? std::max<int64_t>(0, p[i] - a.window + 1) : 0;
  }
  const int64_t jlo = lo[0], jhi = p[QT - 1], n = jhi - jlo + 1;
  const float* kb = a.k + static_cast<int64_t>(kh) * a.ctx * a.hd;
  const float* vb = a.v + static_cast<int64_t>(kh) * a.ctx * a.hd;
  __m512 qv[QT][C];
  KQ_UNROLL for (int i = 0; i < QT; ++i)
    KQ_UNROLL for (int c = 0; c < C; ++c)
      qv[i][c] = _mm512_loadu_ps(a.q + ((t0 + std::min(i, qt - 1)) * a.nh + h) * a.hd + 16 * c);
  // scores: 8 / QT keys x QT tokens per reduction
  constexpr int KB = 8 / QT;
  double mx[QT];
  for (int i = 0; i < QT; ++i) mx[i] = -INFINITY;
  for (int64_t j0 = jlo; j0 <= jhi; j0 += KB) {
    __m512 acc[8];
    KQ_UNROLL for (int u = 0; u < 8; ++u) acc[u] = _mm512_setzero_ps();
    KQ_UNROLL for (int kk = 0; kk < KB; ++kk) {
      const int64_t j = std::min(j0 + kk, jhi);
      KQ_UNROLL for (int c = 0; c < C; ++c) {
        const __m512 kv = _mm512_loadu_ps(kb + j * a.hd + 16 * c);
        KQ_UNROLL for (int i = 0; i < QT; ++i) acc[kk * QT + i] = _mm512_fmadd_ps(qv[i][c], kv, acc[kk * QT + i]);
      }
    }
    alignas(32) float s[8];
    _mm256_store_ps(s, avx512::reduce8(acc));
    for (int kk = 0; kk < KB && j0 + kk <= jhi; ++kk)
      for (int i = 0; i < QT; ++i) {
        const int64_t j = j0 + kk;
        double sv = -INFINITY;
        if (j >= lo[i] && j <= p[i]) {
          sv = static_cast<double>(s[kk * QT + i]) * a.scale;
          if (a.cap > 0.f) sv = a.cap * std::tanh(sv / a.cap);
          mx[i] = std::max(mx[i], sv);
        }
        sd[i * n + (j - jlo)] = sv;
      }
  }
  // weights
  float den[QT];
  for (int i = 0; i < QT; ++i) {
    float* wi = w + i * n;
    for (int64_t j = 0; j < n; ++j) wi[j] = static_cast<float>(sd[i * n + j] - mx[i]);  // -inf stays -inf
    __m512 vs = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      const __m512 e = avx512::exp16(_mm512_loadu_ps(wi + j));
      _mm512_storeu_ps(wi + j, e);
      vs = _mm512_add_ps(vs, e);
    }
    float d = _mm512_reduce_add_ps(vs);
    for (; j < n; ++j) d += (wi[j] = std::exp(wi[j]));
    den[i] = d;
  }
  // values
  __m512 o[QT][C];
  KQ_UNROLL for (int i = 0; i < QT; ++i)
    KQ_UNROLL for (int c = 0; c < C; ++c) o[i][c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const float* vr = vb + (jlo + j) * a.hd;
    KQ_UNROLL for (int c = 0; c < C; ++c) {
      const __m512 vv = _mm512_loadu_ps(vr + 16 * c);
      KQ_UNROLL for (int i = 0; i < QT; ++i) o[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(w[i * n + j]), vv, o[i][c]);
    }
  }
  for (int i = 0; i < qt; ++i) {
    const __m512 inv = _mm512_set1_ps(1.f / den[i]);
    float* dst = a.out + ((t0 + i) * a.nh + h) * a.hd;
    KQ_UNROLL for (int c = 0; c < C; ++c) _mm512_storeu_ps(dst + 16 * c, _mm512_mul_ps(o[i][c], inv));
  }
}

template <int QT, int C>
void run(const Args& a, ExecContext& ctx) {
  const int64_t tiles_t = (a.T + QT - 1) / QT, n_tiles = tiles_t * a.nh;
  const int64_t span = a.pos0 + a.T;  // most keys one tile reads
  const size_t per = static_cast<size_t>(QT * span) * 12 + 64;
  const int items = row_items(ctx, n_tiles, 1);
  uint8_t* buf = scratch<uint8_t>(kScratchItems, per * static_cast<size_t>(items));
  parallel_rows(ctx, n_tiles, 1, [&](int64_t b, int64_t e, int item) {
    uint8_t* p = buf + per * static_cast<size_t>(item);
    double* sd = reinterpret_cast<double*>(p);
    float* w = reinterpret_cast<float*>(p + static_cast<size_t>(QT * span) * 8);
    for (int64_t i = b; i < e; ++i) tile<QT, C>(a, (i % tiles_t) * QT, static_cast<int>(i / tiles_t), sd, w);
  });
}

}  // namespace

bool avx512_attention_tiles(const Op& op, int64_t T, const float* q, const float* k, const float* v, int64_t cache_ctx,
                            float* out, ExecContext& ctx) {
  const int hd = op.a.head_dim;
  if (T < 8 || hd % 16 != 0 || hd > 128) return false;
  const Args a{q, k, v, out, T, op.a.pos0, cache_ctx, op.a.n_heads, op.a.n_kv_heads, hd, static_cast<int64_t>(op.a.window),
               op.a.scale, op.a.softcap};
  switch (hd / 16) {
    case 1: run<4, 1>(a, ctx); return true;
    case 2: run<4, 2>(a, ctx); return true;
    case 3: run<4, 3>(a, ctx); return true;
    case 4: run<4, 4>(a, ctx); return true;
    case 5: run<2, 5>(a, ctx); return true;
    case 6: run<2, 6>(a, ctx); return true;
    case 7: run<2, 7>(a, ctx); return true;
    default: run<2, 8>(a, ctx); return true;
  }
}

}  // namespace cpu
}  // namespace cyb
