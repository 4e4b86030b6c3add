// The scalar reference kernels: plain loops that accumulate in double and round
// to f32 once per output element. They are the arbiter every fast kernel is
// judged against, and they stay in the code. Weights are decoded one block at a
// time (never a whole dequantized matrix). Rows are spread over the thread pool
// so a forced-scalar run stays usable; per-thread scratch grows at warm-up only.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "dispatch/op_schema.h"
#include "core/quant.h"
#include "backends/cpu/simd_common.h"
#include "core/array_elems.h"
#include "core/math_policy.h"
#include "dispatch/ref/v2_kernel_table.h"

namespace cyb {
namespace cpu {

float load_elem(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return static_cast<const float*>(t.data)[i];
    case DType::F16: return fp16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    default: return 0.f;
  }
}

namespace {

void store_elem(const Tensor& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::F32: static_cast<float*>(t.data)[i] = static_cast<float>(v); break;
    case DType::F16: static_cast<uint16_t*>(t.data)[i] = f32_to_fp16(static_cast<float>(v)); break;
    case DType::BF16: static_cast<uint16_t*>(t.data)[i] = f32_to_bf16(static_cast<float>(v)); break;
    default: break;
  }
}

template <class F>
void par_rows(ExecContext& ctx, int64_t n, F&& f) {  // f(begin, end, item)
  parallel_rows(ctx, n, 1, f);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// y[t, n] = sum_k x[t, k] * W[n, k] (+ bias[n]) for t < T, n in [n0, n1), in double.
// W is decoded one block at a time; each block is used for all T rows.
void matmul_rows(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                 int64_t N, int64_t n0, int64_t n1, double* acc) {
  const int64_t bs = block_size(W.dtype), bb = block_bytes(W.dtype);
  const size_t rb = row_bytes(W.dtype, K);
  float blk[kMaxBlock];
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t t = 0; t < T; ++t) acc[t] = 0.0;
    const uint8_t* row = static_cast<const uint8_t*>(W.data) + static_cast<size_t>(n) * rb;
    for (int64_t b = 0; b < K / bs; ++b) {
      dequant_block(W.dtype, row + b * bb, blk);
      for (int64_t t = 0; t < T; ++t) {
        const float* xr = x + t * K + b * bs;
        double s = 0.0;
        for (int64_t i = 0; i < bs; ++i) s += static_cast<double>(xr[i]) * static_cast<double>(blk[i]);
        acc[t] += s;
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      double v = acc[t];
      if (bias) v += static_cast<double>(bias[n]);
      y[t * N + n] = static_cast<float>(v);
    }
  }
}

void matmul_full(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y,
                 ExecContext& ctx) {
  const int64_t N = W.shape.d[0];
  double* acc = scratch<double>(kScratchItems, static_cast<size_t>(T * row_items(ctx, N, 1)));
  par_rows(ctx, N, [&](int64_t b, int64_t e, int item) { matmul_rows(x, T, K, W, bias, y, N, b, e, acc + T * item); });
}

// One normalized row (RmsNorm semantics), computed in double and rounded to f32.
void rms_row(const float* x, const float* w, int64_t D, double eps, bool plus_one, float* y) {
  double ss = 0.0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
  for (int64_t i = 0; i < D; ++i) {
    const double wi = plus_one ? 1.0 + static_cast<double>(w[i]) : static_cast<double>(w[i]);
    y[i] = static_cast<float>(static_cast<double>(x[i]) * r * wi);
  }
}

void k_embedding(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const int32_t* ids = static_cast<const int32_t*>(in[0].data);
  const Tensor& tab = in[1];
  const int64_t T = in[0].shape.numel(), D = tab.shape.d[1];
  const size_t rb = row_bytes(tab.dtype, D);
  const int64_t bs = block_size(tab.dtype), bb = block_bytes(tab.dtype);
  float blk[kMaxBlock];
  for (int64_t t = 0; t < T; ++t) {
    const uint8_t* row = static_cast<const uint8_t*>(tab.data) + static_cast<size_t>(ids[t]) * rb;
    float* y = out[0].f32() + t * D;
    for (int64_t b = 0; b < D / bs; ++b) {
      dequant_block(tab.dtype, row + b * bb, blk);
      for (int64_t i = 0; i < bs; ++i)
        y[b * bs + i] = static_cast<float>(static_cast<double>(blk[i]) * static_cast<double>(op.a.scale));
    }
  }
}

void k_matmul(const Op&, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  const int64_t K = in[1].shape.d[1];
  const int64_t T = in[0].shape.numel() / K;
  matmul_full(in[0].f32(), T, K, in[1], n_in > 2 ? in[2].f32() : nullptr, out[0].f32(), ctx);
}

void k_rms_norm(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
  par_rows(ctx, R, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r)
      rms_row(in[0].f32() + r * D, in[1].f32(), D, op.a.eps, op.a.norm_plus_one, out[0].f32() + r * D);
  });
}

void k_layer_norm(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
  const float* w = in[1].f32();
  const float* bias = n_in > 2 ? in[2].f32() : nullptr;
  par_rows(ctx, R, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const float* x = in[0].f32() + r * D;
      float* y = out[0].f32() + r * D;
      double mean = 0.0;
      for (int64_t i = 0; i < D; ++i) mean += x[i];
      mean /= static_cast<double>(D);
      double var = 0.0;
      for (int64_t i = 0; i < D; ++i) var += (x[i] - mean) * (x[i] - mean);
      var /= static_cast<double>(D);
      const double rs = 1.0 / std::sqrt(var + static_cast<double>(op.a.eps));
      for (int64_t i = 0; i < D; ++i) {
        double v = (x[i] - mean) * rs * static_cast<double>(w[i]);
        if (bias) v += static_cast<double>(bias[i]);
        y[i] = static_cast<float>(v);
      }
    }
  });
}

// y = x / max(||x||_2, eps) per row; the sum of squares in double.
void k_l2_normalize(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
  par_rows(ctx, R, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const float* x = in[0].f32() + r * D;
      float* y = out[0].f32() + r * D;
      double ss = 0.0;
      for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
      const double n = std::max(std::sqrt(ss), static_cast<double>(op.a.eps));
      for (int64_t i = 0; i < D; ++i) y[i] = static_cast<float>(static_cast<double>(x[i]) / n);
    }
  });
}

// Per sequence of x [.., S, D] under mask [.., S]: row 0 (cls), the mean or the
// max of the rows whose mask is nonzero (0 when there is none); sums in double.
void k_masked_pool(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const Shape& xs = in[0].shape;
  const int64_t D = xs.cols(), S = xs.d[xs.ndim - 2], B = xs.numel() / (S * D);
  const float* m = in[1].f32();
  std::vector<double> acc(static_cast<size_t>(D));
  for (int64_t b = 0; b < B; ++b) {
    const float* x = in[0].f32() + b * S * D;
    float* y = out[0].f32() + b * D;
    if (op.a.pool_mode == 0) {
      for (int64_t i = 0; i < D; ++i) y[i] = x[i];
      continue;
    }
    int64_t n = 0;
    for (int64_t s = 0; s < S; ++s) {
      if (m[b * S + s] == 0.f) continue;
      for (int64_t i = 0; i < D; ++i) {
        const double v = x[s * D + i];
        double& a = acc[static_cast<size_t>(i)];
        a = op.a.pool_mode == 1 ? (n == 0 ? v : a + v) : (n == 0 || v > a ? v : a);
      }
      ++n;
    }
    for (int64_t i = 0; i < D; ++i)
      y[i] = n == 0 ? 0.f
                    : static_cast<float>(op.a.pool_mode == 1 ? acc[static_cast<size_t>(i)] / static_cast<double>(n)
                                                              : acc[static_cast<size_t>(i)]);
  }
}

void k_rope(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const RopeTable& rt = *op.a.rope;
  const int hd = op.a.head_dim, nh = op.a.n_heads, rot = rt.rot_dims, half = rot / 2;
  const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
  const float* x = in[0].f32();
  float* y = out[0].f32();
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = op.a.pos0 + t;
    const float* c = rt.cos + p * half;
    const float* s = rt.sin + p * half;
    for (int h = 0; h < nh; ++h) {
      const float* xh = x + (t * nh + h) * hd;
      float* yh = y + (t * nh + h) * hd;
      for (int i = 0; i < half; ++i) {
        const int i0 = rt.neox ? i : 2 * i, i1 = rt.neox ? i + half : 2 * i + 1;
        const double x0 = xh[i0], x1 = xh[i1];
        yh[i0] = static_cast<float>(x0 * c[i] - x1 * s[i]);
        yh[i1] = static_cast<float>(x1 * c[i] + x0 * s[i]);
      }
      if (yh != xh)
        for (int i = rot; i < hd; ++i) yh[i] = xh[i];
    }
  }
}

void k_attention(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
  const int64_t max_ctx = in[1].shape.d[1];
  const int group = nh / nkv;
  const double scale = op.a.scale, cap = op.a.softcap;
  const size_t per = static_cast<size_t>(max_ctx + hd);
  double* scr = scratch<double>(kScratchItems, per * static_cast<size_t>(row_items(ctx, T * nh, 1)));
  par_rows(ctx, T * nh, [&](int64_t b, int64_t e, int item) {
    double* sc = scr + per * static_cast<size_t>(item);
    for (int64_t r = b; r < e; ++r) {
      const int64_t t = r / nh;
      const int h = static_cast<int>(r % nh), kh = h / group;
      const int64_t p = op.a.pos0 + t;
      const int64_t lo = op.a.window > 0 ? std::max<int64_t>(0, p - op.a.window + 1) : 0;
      const float* q = in[0].f32() + (t * nh + h) * hd;
      const int64_t base = static_cast<int64_t>(kh) * max_ctx * hd;
      double mx = -INFINITY;
      for (int64_t j = lo; j <= p; ++j) {
        double d = 0.0;
        for (int i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * load_elem(in[1], base + j * hd + i);
        d *= scale;
        if (cap > 0) d = cap * std::tanh(d / cap);
        sc[j] = d;
        if (d > mx) mx = d;
      }
      double den = 0.0;
      for (int64_t j = lo; j <= p; ++j) {
        sc[j] = std::exp(sc[j] - mx);
        den += sc[j];
      }
      double* acc = sc + max_ctx;
      for (int i = 0; i < hd; ++i) acc[i] = 0.0;
      for (int64_t j = lo; j <= p; ++j) {
        const double w = sc[j] / den;
        for (int i = 0; i < hd; ++i) acc[i] += w * load_elem(in[2], base + j * hd + i);
      }
      float* o = out[0].f32() + (t * nh + h) * hd;
      for (int i = 0; i < hd; ++i) o[i] = static_cast<float>(acc[i]);
    }
  });
}

// Non-causal attention, batch b: query rows of b over the keys of b whose mask
// is nonzero; logits and the weighted sum in double.
void k_encoder_attention(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t B = in[3].shape.d[0], S = in[3].shape.d[1];
  const int64_t T = in[0].shape.numel() / (B * nh * hd);
  const int group = nh / nkv;
  const double scale = op.a.scale;
  const Tensor& mask = in[3];
  const bool mask_i32 = mask.dtype == DType::I32;
  const int64_t win = op.a.window;
  auto real = [&](int64_t b, int64_t t, int64_t s) {
    if (win > 0 && (s - t > win || t - s > win)) return false;
    return mask_i32 ? static_cast<const int32_t*>(mask.data)[b * S + s] != 0 : mask.f32()[b * S + s] != 0.f;
  };
  const size_t per = static_cast<size_t>(S + hd);
  double* scr = scratch<double>(kScratchItems, per * static_cast<size_t>(row_items(ctx, B * T * nh, 1)));
  par_rows(ctx, B * T * nh, [&](int64_t rb, int64_t re, int item) {
    double* sc = scr + per * static_cast<size_t>(item);
    double* acc = sc + S;
    for (int64_t r = rb; r < re; ++r) {
      const int64_t bt = r / nh, b = bt / T, t = bt % T;
      const int h = static_cast<int>(r % nh), kh = h / group;
      const float* q = in[0].f32() + r * hd;
      const float* kb = in[1].f32() + (b * S * nkv + kh) * hd;
      const float* vb = in[2].f32() + (b * S * nkv + kh) * hd;
      double mx = -INFINITY;
      for (int64_t s = 0; s < S; ++s) {
        if (!real(b, t, s)) continue;
        const float* kr = kb + s * nkv * hd;
        double d = 0.0;
        for (int i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * static_cast<double>(kr[i]);
        sc[s] = d * scale;
        if (sc[s] > mx) mx = sc[s];
      }
      double den = 0.0;
      for (int64_t s = 0; s < S; ++s)
        if (real(b, t, s)) {
          sc[s] = std::exp(sc[s] - mx);
          den += sc[s];
        }
      for (int i = 0; i < hd; ++i) acc[i] = 0.0;
      for (int64_t s = 0; s < S; ++s) {
        if (!real(b, t, s)) continue;
        const double w = sc[s] / den;
        const float* vr = vb + s * nkv * hd;
        for (int i = 0; i < hd; ++i) acc[i] += w * static_cast<double>(vr[i]);
      }
      float* o = out[0].f32() + r * hd;
      for (int i = 0; i < hd; ++i) o[i] = static_cast<float>(acc[i]);  // 0 when no key is real
    }
  });
}

void k_kv_write(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const int nkv = op.a.n_kv_heads, hd = op.a.head_dim;
  const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nkv) * hd);
  const int64_t max_ctx = out[0].shape.d[1];
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < nkv; ++h)
      for (int i = 0; i < hd; ++i)
        store_elem(out[0], (h * max_ctx + op.a.pos0 + t) * hd + i, in[0].f32()[(t * nkv + h) * hd + i]);
}

void k_softmax(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
  for (int64_t r = 0; r < R; ++r) {
    const float* x = in[0].f32() + r * D;
    float* y = out[0].f32() + r * D;
    double mx = -INFINITY;
    for (int64_t i = 0; i < D; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    double s = 0.0;
    for (int64_t i = 0; i < D; ++i) s += std::exp(x[i] - mx);
    for (int64_t i = 0; i < D; ++i) y[i] = static_cast<float>(std::exp(x[i] - mx) / s);
  }
}

// Binary ops: b has the same number of elements as a, or one row broadcast over a's rows.
template <class F>
void binary(const Tensor* in, Tensor* out, F f) {
  const int64_t n = in[0].shape.numel(), nb = in[1].shape.numel();
  const float* a = in[0].f32();
  const float* b = in[1].f32();
  float* y = out[0].f32();
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(f(static_cast<double>(a[i]), static_cast<double>(b[i % nb])));
}

template <class F>
void unary(const Tensor* in, Tensor* out, F f) {
  const int64_t n = in[0].shape.numel();
  const float* a = in[0].f32();
  float* y = out[0].f32();
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(f(static_cast<double>(a[i])));
}

void k_add(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  binary(in, out, [](double a, double b) { return a + b; });
}
void k_mul(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  binary(in, out, [](double a, double b) { return a * b; });
}
void k_scale(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const double s = op.a.scale;
  unary(in, out, [s](double a) { return a * s; });
}
void k_silu(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) { unary(in, out, silu); }
void k_gelu(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) { unary(in, out, gelu_erf); }
void k_gelu_tanh(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  unary(in, out, gelu_tanh);
}
void k_relu(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  unary(in, out, [](double a) { return a > 0.0 ? a : 0.0; });
}
void k_swiglu(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  binary(in, out, [](double g, double u) { return silu(g) * u; });
}
void k_geglu(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  if (op.a.gelu_erf) binary(in, out, [](double g, double u) { return gelu_erf(g) * u; });
  else binary(in, out, [](double g, double u) { return gelu_tanh(g) * u; });
}
void k_softcap(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const double c = op.a.softcap;
  unary(in, out, [c](double a) { return c * std::tanh(a / c); });
}

void k_fused_skip_norm(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
  for (int64_t r = 0; r < R; ++r) {
    const float* x = in[0].f32() + r * D;
    const float* res = in[1].f32() + r * D;
    float* sum = out[1].f32() + r * D;
    for (int64_t i = 0; i < D; ++i) sum[i] = static_cast<float>(static_cast<double>(x[i]) + res[i]);
    rms_row(sum, in[2].f32(), D, op.a.eps, op.a.norm_plus_one, out[0].f32() + r * D);
  }
}

void k_fused_norm_matmul(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  const int64_t K = in[0].shape.cols(), T = in[0].shape.numel() / K;
  float* xn = scratch<float>(kScratchNorm, static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t)
    rms_row(in[0].f32() + t * K, in[1].f32(), K, op.a.eps, op.a.norm_plus_one, xn + t * K);
  matmul_full(xn, T, K, in[2], n_in > 3 ? in[3].f32() : nullptr, out[0].f32(), ctx);
}

void k_fused_swiglu(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  const int64_t K = in[0].shape.cols(), T = in[0].shape.numel() / K, N = in[1].shape.d[0];
  float* g = scratch<float>(kScratchGateUp, static_cast<size_t>(2 * T * N));
  float* u = g + T * N;
  matmul_full(in[0].f32(), T, K, in[1], nullptr, g, ctx);
  matmul_full(in[0].f32(), T, K, in[2], nullptr, u, ctx);
  float* y = out[0].f32();
  for (int64_t i = 0; i < T * N; ++i) y[i] = static_cast<float>(silu(g[i]) * static_cast<double>(u[i]));
}

void k_copy(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
  const int64_t n = in[0].shape.numel();
  for (int64_t i = 0; i < n; ++i) store_elem(out[0], i, load_elem(in[0], i));
}

// conv1d: the shared kernel (dispatch/ref/v2_elem_kernels.h), its output rows spread over the pool.
void k_conv1d(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  using E = V2ElemKernels<StdMath>;
  par_rows(ctx, E::conv1d_row_count(op, in), [&](int64_t r0, int64_t r1, int) { E::conv1d_rows(op, in, n_in, out, r0, r1); });
}


}  // namespace

void fill_reference_kernels(KernelTable& t) {
  t[OpKind::Embedding] = k_embedding;
  t[OpKind::Matmul] = k_matmul;
  t[OpKind::RmsNorm] = k_rms_norm;
  t[OpKind::LayerNorm] = k_layer_norm;
  t[OpKind::Rope] = k_rope;
  t[OpKind::Attention] = k_attention;
  t[OpKind::Softmax] = k_softmax;
  t[OpKind::Add] = k_add;
  t[OpKind::Mul] = k_mul;
  t[OpKind::Scale] = k_scale;
  t[OpKind::Silu] = k_silu;
  t[OpKind::Gelu] = k_gelu;
  t[OpKind::GeluTanh] = k_gelu_tanh;
  t[OpKind::SwiGlu] = k_swiglu;
  t[OpKind::GeGlu] = k_geglu;
  t[OpKind::Softcap] = k_softcap;
  t[OpKind::FusedSkipNorm] = k_fused_skip_norm;
  t[OpKind::FusedNormMatmul] = k_fused_norm_matmul;
  t[OpKind::FusedSwiGlu] = k_fused_swiglu;
  t[OpKind::KvWrite] = k_kv_write;
  t[OpKind::Copy] = k_copy;
  t[OpKind::L2Normalize] = k_l2_normalize;
  t[OpKind::MaskedPool] = k_masked_pool;
  t[OpKind::EncoderAttention] = k_encoder_attention;
  t[OpKind::Relu] = k_relu;
  fill_v2_kernels<StdMath>(t);  // the graph-v2 ops: one definition with nox (dispatch/ref/)
  t[OpKind::Elementwise] = &ArrayOpKernels<StdMath>::elementwise;  // fused: not nox's (it declines)
  t[OpKind::Conv1d] = k_conv1d;  // threaded over its output rows
}

}  // namespace cpu
}  // namespace cyb
