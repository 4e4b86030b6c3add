// ARM NEON kernels (baseline ARMv8-A: every arm64 CPU; chosen at run time on arm64).
// Fast mode: activations quantized to BlockQ16 (int16 per 32-block, same rule as
// x86), each weight row unpacked once into int8 values with one f32 scale per 16
// values and a per-32 "min" coefficient, then 16-bit integer dot products
// (weights widened with vmovl_s8, vmull_s16 / vmlal_s16) per token.
// Precise mode and float weights: f32 FMA (weights decoded block by block).
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "core/quant.h"
#include "backends/cpu/simd_common.h"

namespace cyb_neon {
namespace {

using cyb::DType;
using cyb::ExecContext;
using cyb::Op;
using cyb::OpKind;
using cyb::Tensor;
using cyb::cpu::BlockQ16;

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return cyb::fp16_to_f32(h);
}

void quantize_row_q16(const float* x, int64_t k, BlockQ16* out) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    float32x4_t v[8];
    float32x4_t m = vdupq_n_f32(0.f);
    for (int i = 0; i < 8; ++i) {
      v[i] = vld1q_f32(xb + 4 * i);
      m = vmaxq_f32(m, vabsq_f32(v[i]));
    }
    const float amax = vmaxvq_f32(m);
    const float d = amax / 32767.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < 8; ++i) {
      const int32x4_t q = vcvtnq_s32_f32(vmulq_n_f32(v[i], id));  // round half to even
      sum += vaddvq_s32(q);
      vst1_s16(out[b].qs + 4 * i, vqmovn_s32(q));
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
  }
}

// sum of 16 products int8 weights x int16 activations (exact: |w x| <= 127 * 32767).
inline int32_t dot16(const int8_t* a, const int16_t* b) {
  const int8x16_t va = vld1q_s8(a);
  const int16x8_t a0 = vmovl_s8(vget_low_s8(va)), a1 = vmovl_s8(vget_high_s8(va));
  const int16x8_t b0 = vld1q_s16(b), b1 = vld1q_s16(b + 8);
  int32x4_t p = vmull_s16(vget_low_s16(a0), vget_low_s16(b0));
  p = vmlal_s16(p, vget_high_s16(a0), vget_high_s16(b0));
  p = vmlal_s16(p, vget_low_s16(a1), vget_low_s16(b1));
  p = vmlal_s16(p, vget_high_s16(a1), vget_high_s16(b1));
  return vaddvq_s32(p);
}

// A weight row unpacked for integer dots: value i = d16[i/16] * q[i] (+ m32[i/32] per unit of x).
struct RowQ8 {
  int8_t* q;
  float* d16;
  float* m32;
};

inline void k_scales(const uint8_t* sc, int j, int* s, int* m) {
  if (j < 4) {
    *s = sc[j] & 63;
    *m = sc[j + 4] & 63;
  } else {
    *s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
    *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}

bool unpack_row(DType t, const uint8_t* row, int64_t k, RowQ8& r) {
  const int64_t nb = k / 32;
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
      for (int64_t b = 0; b < nb; ++b) {
        const bool q41 = t == DType::Q4_1;
        const uint8_t* p = row + b * (q41 ? 20 : 18);
        const uint8x16_t raw = vld1q_u8(p + (q41 ? 4 : 2));
        int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(15)));
        int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));
        if (!q41) {
          lo = vsubq_s8(lo, vdupq_n_s8(8));
          hi = vsubq_s8(hi, vdupq_n_s8(8));
        }
        vst1q_s8(r.q + 32 * b, lo);
        vst1q_s8(r.q + 32 * b + 16, hi);
        r.d16[2 * b] = r.d16[2 * b + 1] = f16(p);
        r.m32[b] = q41 ? f16(p + 2) : 0.f;
      }
      return true;
    case DType::Q5_0:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* p = row + b * 22;
        uint32_t qh;
        std::memcpy(&qh, p + 2, 4);
        for (int j = 0; j < 16; ++j) {
          r.q[32 * b + j] = static_cast<int8_t>(((p[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16);
          r.q[32 * b + j + 16] = static_cast<int8_t>(((p[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
        }
        r.d16[2 * b] = r.d16[2 * b + 1] = f16(p);
        r.m32[b] = 0.f;
      }
      return true;
    case DType::Q8_0:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* p = row + b * 34;
        std::memcpy(r.q + 32 * b, p + 2, 32);
        r.d16[2 * b] = r.d16[2 * b + 1] = f16(p);
        r.m32[b] = 0.f;
      }
      return true;
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool q5 = t == DType::Q5_K;
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* p = row + sb * (q5 ? 176 : 144);
        const float d = f16(p), dmin = f16(p + 2);
        const uint8_t* qh = p + 16;
        const uint8_t* qs = p + (q5 ? 48 : 16);
        for (int j = 0; j < 8; ++j) {
          int s, m;
          k_scales(p + 4, j, &s, &m);
          const int64_t b = sb * 8 + j;
          r.d16[2 * b] = r.d16[2 * b + 1] = d * static_cast<float>(s);
          r.m32[b] = -(dmin * static_cast<float>(m));
          const int pp = j / 2, hi = j % 2;
          for (int l = 0; l < 32; ++l) {
            int v = hi ? (qs[32 * pp + l] >> 4) : (qs[32 * pp + l] & 15);
            if (q5) v |= ((qh[l] >> j) & 1) << 4;
            r.q[32 * b + l] = static_cast<int8_t>(v);
          }
        }
      }
      return true;
    }
    case DType::Q6_K:
      for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t* p = row + sb * 210;
        const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = f16(p + 208);
        int8_t* q = r.q + sb * 256;
        for (int h = 0; h < 2; ++h) {
          const uint8_t* L = p + 64 * h;
          const uint8_t* H = p + 128 + 32 * h;
          for (int l = 0; l < 32; ++l) {
            q[128 * h + l] = static_cast<int8_t>(((L[l] & 15) | ((H[l] >> 0) & 3) << 4) - 32);
            q[128 * h + 32 + l] = static_cast<int8_t>(((L[l + 32] & 15) | ((H[l] >> 2) & 3) << 4) - 32);
            q[128 * h + 64 + l] = static_cast<int8_t>(((L[l] >> 4) | ((H[l] >> 4) & 3) << 4) - 32);
            q[128 * h + 96 + l] = static_cast<int8_t>(((L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4) - 32);
          }
        }
        for (int i = 0; i < 16; ++i) r.d16[sb * 16 + i] = d * static_cast<float>(sc[i]);
        for (int j = 0; j < 8; ++j) r.m32[sb * 8 + j] = 0.f;
      }
      return true;
    default:
      return false;
  }
}

bool is_q16_encoding(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q8_0 || t == DType::Q4_K ||
         t == DType::Q5_K || t == DType::Q6_K;
}

float dot_row_q16(const RowQ8& r, const BlockQ16* x, int64_t nb) {
  float32x4_t acc = vdupq_n_f32(0.f);
  float mins = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    const int32_t p0 = dot16(r.q + 32 * b, x[b].qs), p1 = dot16(r.q + 32 * b + 16, x[b].qs + 16);
    const float32x2_t pv = {static_cast<float>(p0), static_cast<float>(p1)};
    const float32x2_t dv = {r.d16[2 * b] * x[b].d, r.d16[2 * b + 1] * x[b].d};
    acc = vcombine_f32(vfma_f32(vget_low_f32(acc), pv, dv), vget_high_f32(acc));
    mins += r.m32[b] * x[b].s;
  }
  return vaddvq_f32(acc) + mins;
}

float dot_f32(const float* w, const float* x, int64_t k) {
  float32x4_t a0 = vdupq_n_f32(0.f), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    a0 = vfmaq_f32(a0, vld1q_f32(w + i), vld1q_f32(x + i));
    a1 = vfmaq_f32(a1, vld1q_f32(w + i + 4), vld1q_f32(x + i + 4));
    a2 = vfmaq_f32(a2, vld1q_f32(w + i + 8), vld1q_f32(x + i + 8));
    a3 = vfmaq_f32(a3, vld1q_f32(w + i + 12), vld1q_f32(x + i + 12));
  }
  float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
  for (; i < k; ++i) s += w[i] * x[i];
  return s;
}

inline float32x4_t load4_h(const uint16_t* p, bool bf) {
  const uint16x4_t u = vld1_u16(p);
  if (bf) return vreinterpretq_f32_u32(vshll_n_u16(u, 16));
  return vcvt_f32_f16(vreinterpret_f16_u16(u));
}

float dot_h16(const uint16_t* w, const float* x, int64_t k, bool bf) {
  float32x4_t a0 = vdupq_n_f32(0.f), a1 = a0;
  int64_t i = 0;
  for (; i + 8 <= k; i += 8) {
    a0 = vfmaq_f32(a0, load4_h(w + i, bf), vld1q_f32(x + i));
    a1 = vfmaq_f32(a1, load4_h(w + i + 4, bf), vld1q_f32(x + i + 4));
  }
  float s = vaddvq_f32(vaddq_f32(a0, a1));
  for (; i < k; ++i) s += (bf ? cyb::bf16_to_f32(w[i]) : cyb::fp16_to_f32(w[i])) * x[i];
  return s;
}

void matmul_any(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                ExecContext& ctx) {
  const int64_t N = W.shape.d[0];
  const size_t rb = cyb::row_bytes(W.dtype, K);
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  const bool qa = !ctx.precise() && is_q16_encoding(W.dtype);
  // Rows per work item: at least ~32K multiply-adds, so small matrices still split.
  const int64_t grain = std::max<int64_t>(4, 32768 / std::max<int64_t>(1, T * K));
  if (qa) {
    const int64_t nb = K / 32;
    BlockQ16* xq = cyb::cpu::scratch<BlockQ16>(cyb::cpu::kScratchXq, static_cast<size_t>(T * nb));
    for (int64_t t = 0; t < T; ++t) quantize_row_q16(x + t * K, K, xq + t * nb);
    const size_t per = static_cast<size_t>((K + K / 16 * 4 + K / 32 * 4 + 127) / 64 * 64);
    uint8_t* items = cyb::cpu::scratch<uint8_t>(cyb::cpu::kScratchItems, per * static_cast<size_t>(cyb::cpu::row_items(ctx, N, grain)));
    cyb::cpu::parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int item) {
      uint8_t* mem = items + per * static_cast<size_t>(item);
      RowQ8 r{reinterpret_cast<int8_t*>(mem), reinterpret_cast<float*>(mem + K), reinterpret_cast<float*>(mem + K + K / 16 * 4)};
      for (int64_t n = b; n < e; ++n) {
        unpack_row(W.dtype, base + n * rb, K, r);
        for (int64_t t = 0; t < T; ++t) y[t * N + n] = dot_row_q16(r, xq + t * nb, nb);
      }
    });
  } else {
    const size_t per = static_cast<size_t>((K + 15) / 16 * 16);
    float* items = cyb::cpu::scratch<float>(cyb::cpu::kScratchItems, per * static_cast<size_t>(cyb::cpu::row_items(ctx, N, grain)));
    cyb::cpu::parallel_rows(ctx, N, grain, [&](int64_t b, int64_t e, int item) {
      float* wf = nullptr;
      if (W.dtype != DType::F32 && W.dtype != DType::F16 && W.dtype != DType::BF16)
        wf = items + per * static_cast<size_t>(item);
      for (int64_t n = b; n < e; ++n) {
        const uint8_t* row = base + n * rb;
        if (wf) cyb::dequant_row(W.dtype, row, wf, K);  // one row at a time, never the matrix
        for (int64_t t = 0; t < T; ++t) {
          const float* xt = x + t * K;
          float v;
          if (W.dtype == DType::F32) v = dot_f32(reinterpret_cast<const float*>(row), xt, K);
          else if (W.dtype == DType::F16) v = dot_h16(reinterpret_cast<const uint16_t*>(row), xt, K, false);
          else if (W.dtype == DType::BF16) v = dot_h16(reinterpret_cast<const uint16_t*>(row), xt, K, true);
          else v = dot_f32(wf, xt, K);
          y[t * N + n] = v;
        }
      }
    });
  }
  if (bias)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) y[t * N + n] += bias[n];
}

void k_matmul(const Op&, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  const int64_t K = in[1].shape.d[1];
  matmul_any(in[0].f32(), in[0].shape.numel() / K, K, in[1], n_in > 2 ? in[2].f32() : nullptr, out[0].f32(), ctx);
}

void k_fused_norm_matmul(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  const int64_t K = in[0].shape.cols(), T = in[0].shape.numel() / K;
  float* xn = cyb::cpu::scratch<float>(cyb::cpu::kScratchGateUp, static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t) {
    const float* x = in[0].f32() + t * K;
    const float r = 1.0f / std::sqrt(dot_f32(x, x, K) / static_cast<float>(K) + op.a.eps);
    for (int64_t i = 0; i < K; ++i) xn[t * K + i] = x[i] * r * ((op.a.norm_plus_one ? 1.f : 0.f) + in[1].f32()[i]);
  }
  matmul_any(xn, T, K, in[2], n_in > 3 ? in[3].f32() : nullptr, out[0].f32(), ctx);
}

void k_fused_swiglu(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const int64_t K = in[0].shape.cols(), T = in[0].shape.numel() / K, N = in[1].shape.d[0];
  float* g = cyb::cpu::scratch<float>(cyb::cpu::kScratchGateUp, static_cast<size_t>(2 * T * N));
  float* u = g + T * N;
  matmul_any(in[0].f32(), T, K, in[1], nullptr, g, ctx);
  matmul_any(in[0].f32(), T, K, in[2], nullptr, u, ctx);
  float* y = out[0].f32();
  for (int64_t i = 0; i < T * N; ++i) y[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
}

void k_rms_norm(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
  for (int64_t r = 0; r < R; ++r) {
    const float* x = in[0].f32() + r * D;
    float* y = out[0].f32() + r * D;
    const float s = 1.0f / std::sqrt(dot_f32(x, x, D) / static_cast<float>(D) + op.a.eps);
    for (int64_t i = 0; i < D; ++i) y[i] = x[i] * s * ((op.a.norm_plus_one ? 1.f : 0.f) + in[1].f32()[i]);
  }
}

inline size_t attention_scratch(int64_t max_ctx, int hd) {
  return static_cast<size_t>((3 * max_ctx + 2 * hd + 47) / 16 * 16);
}

template <bool F16>
void attention_rows(const Op& op, const Tensor* in, Tensor* out, int64_t r0, int64_t r1, float* sc) {
  const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t max_ctx = in[1].shape.d[1];
  const int group = nh / nkv;
  // scores in double until the max is known (large softcapped logits lose nothing)
  double* sd = reinterpret_cast<double*>(sc + ((max_ctx + 7) & ~int64_t{7}));
  float* acc = reinterpret_cast<float*>(sd + max_ctx) + 8;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t t = r / nh;
    const int h = static_cast<int>(r % nh), kh = h / group;
    const int64_t p = op.a.pos0 + t;
    const int64_t lo = op.a.window > 0 ? std::max<int64_t>(0, p - op.a.window + 1) : 0;
    const float* q = in[0].f32() + (t * nh + h) * hd;
    const size_t base = static_cast<size_t>(kh) * max_ctx * hd;
    double mx = -INFINITY;
    for (int64_t j = lo; j <= p; ++j) {
      const float s = F16 ? dot_h16(static_cast<const uint16_t*>(in[1].data) + base + j * hd, q, hd, false)
                          : dot_f32(static_cast<const float*>(in[1].data) + base + j * hd, q, hd);
      double sv = static_cast<double>(s) * op.a.scale;
      if (op.a.softcap > 0.f) sv = op.a.softcap * std::tanh(sv / op.a.softcap);
      sd[j - lo] = sv;
      mx = std::max(mx, sv);
    }
    const int64_t n = p - lo + 1;
    float den = 0.f;
    for (int64_t j = 0; j < n; ++j) den += (sc[j] = std::exp(static_cast<float>(sd[j] - mx)));
    for (int i = 0; i < hd; ++i) acc[i] = 0.f;
    for (int64_t j = 0; j < n; ++j) {
      const float w = sc[j];
      if (F16) {
        const uint16_t* v = static_cast<const uint16_t*>(in[2].data) + base + (lo + j) * hd;
        int i = 0;
        for (; i + 4 <= hd; i += 4) vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), load4_h(v + i, false), w));
        for (; i < hd; ++i) acc[i] += w * cyb::fp16_to_f32(v[i]);
      } else {
        const float* v = static_cast<const float*>(in[2].data) + base + (lo + j) * hd;
        int i = 0;
        for (; i + 4 <= hd; i += 4) vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), vld1q_f32(v + i), w));
        for (; i < hd; ++i) acc[i] += w * v[i];
      }
    }
    float* o = out[0].f32() + (t * nh + h) * hd;
    for (int i = 0; i < hd; ++i) o[i] = acc[i] / den;
  }
}

void k_attention(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const int64_t rows = in[0].shape.numel() / op.a.head_dim;
  const size_t per = attention_scratch(in[1].shape.d[1], op.a.head_dim);
  float* base = cyb::cpu::scratch<float>(cyb::cpu::kScratchItems, per * static_cast<size_t>(cyb::cpu::row_items(ctx, rows, 1)));
  cyb::cpu::parallel_rows(ctx, rows, 1, [&](int64_t b, int64_t e, int item) {
    float* sc = base + per * static_cast<size_t>(item);
    if (in[1].dtype == DType::F16) attention_rows<true>(op, in, out, b, e, sc);
    else attention_rows<false>(op, in, out, b, e, sc);
  });
}

// Non-causal attention with a key padding mask (and an optional |t - s| window): the real
// keys of each sequence listed once, f32 dot products, the weighted values 4 lanes at a time.
void k_encoder_attention(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t B = in[3].shape.d[0], S = in[3].shape.d[1];
  const int64_t T = in[0].shape.numel() / (B * nh * hd), rows = B * T * nh;
  const int group = nh / nkv;
  const int64_t win = op.a.window;
  int32_t* real = cyb::cpu::scratch<int32_t>(cyb::cpu::kScratchKv, static_cast<size_t>(B * (S + 1)));
  for (int64_t b = 0; b < B; ++b) {
    int32_t* r = real + b * (S + 1);
    int32_t n = 0;
    for (int64_t s = 0; s < S; ++s) {
      const bool ok = in[3].dtype == DType::I32 ? static_cast<const int32_t*>(in[3].data)[b * S + s] != 0
                                                : in[3].f32()[b * S + s] != 0.f;
      if (ok) r[1 + n++] = static_cast<int32_t>(s);
    }
    r[0] = n;
  }
  const size_t per = static_cast<size_t>((S + hd + 15) / 8 * 8);
  float* base = cyb::cpu::scratch<float>(cyb::cpu::kScratchItems,
                                         per * static_cast<size_t>(cyb::cpu::row_items(ctx, rows, 1)));
  const int64_t ks = static_cast<int64_t>(nkv) * hd;
  cyb::cpu::parallel_rows(ctx, rows, 1, [&](int64_t r0, int64_t r1, int item) {
    float* sc = base + per * static_cast<size_t>(item);
    float* acc = sc + ((S + 7) & ~int64_t{7});
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (T * nh), t = (r / nh) % T;
      const int h = static_cast<int>(r % nh), kh = h / group;
      const int32_t* idx = real + b * (S + 1) + 1;
      int64_t n = idx[-1];
      if (win > 0) {
        const int32_t* lo = std::lower_bound(idx, idx + n, static_cast<int32_t>(std::max<int64_t>(0, t - win)));
        const int32_t* hi = std::upper_bound(lo, idx + n, static_cast<int32_t>(std::min<int64_t>(S - 1, t + win)));
        idx = lo;
        n = hi - lo;
      }
      const float* q = in[0].f32() + r * hd;
      const float* kb = in[1].f32() + b * S * ks + kh * hd;
      const float* vb = in[2].f32() + b * S * ks + kh * hd;
      float* o = out[0].f32() + r * hd;
      if (n == 0) {
        for (int i = 0; i < hd; ++i) o[i] = 0.f;
        continue;
      }
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        sc[j] = dot_f32(kb + idx[j] * ks, q, hd) * op.a.scale;
        mx = std::max(mx, sc[j]);
      }
      float den = 0.f;
      for (int64_t j = 0; j < n; ++j) den += (sc[j] = std::exp(sc[j] - mx));
      for (int i = 0; i < hd; ++i) acc[i] = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        const float* v = vb + idx[j] * ks;
        const float w = sc[j];
        int i = 0;
        for (; i + 4 <= hd; i += 4) vst1q_f32(acc + i, vfmaq_n_f32(vld1q_f32(acc + i), vld1q_f32(v + i), w));
        for (; i < hd; ++i) acc[i] += w * v[i];
      }
      for (int i = 0; i < hd; ++i) o[i] = acc[i] / den;
    }
  });
}

}  // namespace
}  // namespace cyb_neon

namespace cyb {
namespace cpu {
void fill_neon_kernels(KernelTable& t) {
  t[OpKind::Matmul] = cyb_neon::k_matmul;
  t[OpKind::FusedNormMatmul] = cyb_neon::k_fused_norm_matmul;
  t[OpKind::FusedSwiGlu] = cyb_neon::k_fused_swiglu;
  t[OpKind::RmsNorm] = cyb_neon::k_rms_norm;
  t[OpKind::Attention] = cyb_neon::k_attention;
  t[OpKind::EncoderAttention] = cyb_neon::k_encoder_attention;
}
bool neon_q16_encoding(DType t) { return cyb_neon::is_q16_encoding(t); }
}  // namespace cpu
}  // namespace cyb
