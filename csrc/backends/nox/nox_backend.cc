#include "backends/nox/nox_backend.h"

#include <cstring>

#include "core/quant.h"
#include "backends/nox/nox_math.h"
#include "core/errors.h"
#include "core/frame_allocator.h"

namespace cyb {

namespace {

float load(const Tensor& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return static_cast<const float*>(t.data)[i];
    case DType::F16: return fp16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    default: return bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
  }
}

void store(const Tensor& t, int64_t i, float v) {
  switch (t.dtype) {
    case DType::F32: static_cast<float*>(t.data)[i] = v; break;
    case DType::F16: static_cast<uint16_t*>(t.data)[i] = f32_to_fp16(v); break;
    default: static_cast<uint16_t*>(t.data)[i] = f32_to_bf16(v); break;
  }
}

double sigmoid(double x) { return 1.0 / (1.0 + nox::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double gelu_erf(double x) { return 0.5 * x * (1.0 + nox::erf(x * 0.70710678118654752440)); }
double gelu_tanh(double x) {
  const double k = 0.79788456080286535588;  // sqrt(2 / pi)
  return 0.5 * x * (1.0 + nox::tanh(k * (x + 0.044715 * x * x * x)));
}

[[noreturn]] void position_error(const Op& op, int64_t last, int64_t limit, const char* what) {
  throw_invalid_config("position", std::string(op.label ? op.label : op_name(op.kind)) + ": positions up to " +
                                       std::to_string(last) + " exceed the " + what + " (" +
                                       std::to_string(limit) + " positions)");
}

// One row of y = x W^T: W decoded one block at a time, each dot product summed
// in double strictly left to right.
void matmul(const float* x, int64_t T, int64_t K, const Tensor& W, const float* bias, float* y) {
  const int64_t N = W.shape.d[0], bs = block_size(W.dtype), bb = block_bytes(W.dtype);
  const size_t rb = row_bytes(W.dtype, K);
  std::vector<float> row(static_cast<size_t>(K));
  float blk[kMaxBlock];
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* wr = static_cast<const uint8_t*>(W.data) + static_cast<size_t>(n) * rb;
    for (int64_t b = 0; b < K / bs; ++b) {
      dequant_block(W.dtype, wr + b * bb, blk);
      std::memcpy(row.data() + b * bs, blk, static_cast<size_t>(bs) * sizeof(float));
    }
    for (int64_t t = 0; t < T; ++t) {
      const float* xr = x + t * K;
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(xr[k]) * static_cast<double>(row[static_cast<size_t>(k)]);
      if (bias) s += static_cast<double>(bias[n]);
      y[t * N + n] = static_cast<float>(s);
    }
  }
}

void rms(const float* x, const float* w, int64_t D, double eps, bool plus_one, float* y) {
  double ss = 0.0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  const double r = 1.0 / nox::sqrt(ss / static_cast<double>(D) + eps);
  for (int64_t i = 0; i < D; ++i) {
    const double wi = plus_one ? 1.0 + static_cast<double>(w[i]) : static_cast<double>(w[i]);
    y[i] = static_cast<float>(static_cast<double>(x[i]) * r * wi);
  }
}

template <class F>
void unary(const Tensor* in, Tensor* out, F f) {
  const int64_t n = in[0].shape.numel();
  for (int64_t i = 0; i < n; ++i) out[0].f32()[i] = static_cast<float>(f(static_cast<double>(in[0].f32()[i])));
}

template <class F>
void binary(const Tensor* in, Tensor* out, F f) {
  const int64_t n = in[0].shape.numel(), nb = in[1].shape.numel();
  for (int64_t i = 0; i < n; ++i)
    out[0].f32()[i] = static_cast<float>(
        f(static_cast<double>(in[0].f32()[i]), static_cast<double>(in[1].f32()[i % nb])));
}

}  // namespace

// Capability only (validity is the dispatcher's validate_op): host tensors and
// the ops nox has a kernel for, listed one by one so that a new op is declined
// (and falls back) until nox gets its own deterministic kernel. Fused ops are
// declined on purpose: the graph stays unfused on nox, so the digest chain
// covers the unfused graph.
bool NoxBackend::supports(const Op& op, const Tensor* in, int n_in) const {
  for (int i = 0; i < n_in; ++i)
    if (in[i].device != Device::Host) return false;
  if (nox_v2_kernel(op.kind)) return true;  // the graph-v2 ops (nox_v2.cc)
  switch (op.kind) {
    case OpKind::Embedding:
    case OpKind::Matmul:
    case OpKind::RmsNorm:
    case OpKind::LayerNorm:
    case OpKind::Rope:
    case OpKind::Attention:
    case OpKind::KvWrite:
    case OpKind::Softmax:
    case OpKind::Add:
    case OpKind::Mul:
    case OpKind::Scale:
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::GeluTanh:
    case OpKind::SwiGlu:
    case OpKind::GeGlu:
    case OpKind::Softcap:
    case OpKind::Copy:
    case OpKind::L2Normalize:
    case OpKind::MaskedPool:
    case OpKind::Relu:
      return true;
    default:
      return false;
  }
}

void NoxBackend::execute(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) {
  if (!supports(op, in, n_in))
    throw_unsupported_op(op_name(op.kind), "nox", n_in > 0 ? dtype_name(in[0].dtype) : "none");
  if (const NoxV2Kernel k = nox_v2_kernel(op.kind)) {
    k(op, in, n_in, out, n_out, ctx);
    return;
  }
  switch (op.kind) {
    case OpKind::Embedding: {
      const int32_t* ids = static_cast<const int32_t*>(in[0].data);
      const Tensor& tab = in[1];
      const int64_t T = in[0].shape.numel(), V = tab.shape.d[0], D = tab.shape.d[1];
      const int64_t bs = block_size(tab.dtype), bb = block_bytes(tab.dtype);
      const size_t rb = row_bytes(tab.dtype, D);
      float blk[kMaxBlock];
      for (int64_t t = 0; t < T; ++t) {
        if (ids[t] < 0 || ids[t] >= V)
          throw_invalid_config("token id", "id " + std::to_string(ids[t]) + " is outside the vocabulary [0, " +
                                               std::to_string(V) + ")");
        const uint8_t* row = static_cast<const uint8_t*>(tab.data) + static_cast<size_t>(ids[t]) * rb;
        for (int64_t b = 0; b < D / bs; ++b) {
          dequant_block(tab.dtype, row + b * bb, blk);
          for (int64_t i = 0; i < bs; ++i)
            out[0].f32()[t * D + b * bs + i] =
                static_cast<float>(static_cast<double>(blk[i]) * static_cast<double>(op.a.scale));
        }
      }
      return;
    }
    case OpKind::Matmul: {
      const int64_t K = in[1].shape.d[1];
      matmul(in[0].f32(), in[0].shape.numel() / K, K, in[1], n_in > 2 ? in[2].f32() : nullptr, out[0].f32());
      return;
    }
    case OpKind::RmsNorm: {
      const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
      for (int64_t r = 0; r < R; ++r)
        rms(in[0].f32() + r * D, in[1].f32(), D, op.a.eps, op.a.norm_plus_one, out[0].f32() + r * D);
      return;
    }
    case OpKind::LayerNorm: {
      const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
      for (int64_t r = 0; r < R; ++r) {
        const float* x = in[0].f32() + r * D;
        double mean = 0.0;
        for (int64_t i = 0; i < D; ++i) mean += static_cast<double>(x[i]);
        mean /= static_cast<double>(D);
        double var = 0.0;
        for (int64_t i = 0; i < D; ++i) var += (x[i] - mean) * (x[i] - mean);
        var /= static_cast<double>(D);
        const double rs = 1.0 / nox::sqrt(var + static_cast<double>(op.a.eps));
        for (int64_t i = 0; i < D; ++i) {
          double v = (x[i] - mean) * rs * static_cast<double>(in[1].f32()[i]);
          if (n_in > 2) v += static_cast<double>(in[2].f32()[i]);
          out[0].f32()[r * D + i] = static_cast<float>(v);
        }
      }
      return;
    }
    case OpKind::Rope: {
      const RopeTable& rt = *op.a.rope;
      const int hd = op.a.head_dim, nh = op.a.n_heads, rot = rt.rot_dims, half = rot / 2;
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd);
      if (op.a.pos0 < 0 || op.a.pos0 + T > rt.max_pos) position_error(op, op.a.pos0 + T - 1, rt.max_pos, "RoPE table");
      const float* x = in[0].f32();
      float* y = out[0].f32();
      for (int64_t t = 0; t < T; ++t) {
        const float* c = rt.cos + (op.a.pos0 + t) * half;
        const float* s = rt.sin + (op.a.pos0 + t) * half;
        for (int h = 0; h < nh; ++h) {
          const float* xh = x + (t * nh + h) * hd;
          float* yh = y + (t * nh + h) * hd;
          for (int i = 0; i < half; ++i) {
            const int i0 = rt.neox ? i : 2 * i, i1 = rt.neox ? i + half : 2 * i + 1;
            const double x0 = xh[i0], x1 = xh[i1];
            const double y0 = x0 * c[i] - x1 * s[i];
            const double y1 = x1 * c[i] + x0 * s[i];
            yh[i0] = static_cast<float>(y0);
            yh[i1] = static_cast<float>(y1);
          }
          for (int i = rot; i < hd; ++i) yh[i] = xh[i];
        }
      }
      return;
    }
    case OpKind::Attention: {
      const int nh = op.a.n_heads, nkv = op.a.n_kv_heads, hd = op.a.head_dim, group = nh / nkv;
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nh) * hd), C = in[1].shape.d[1];
      if (op.a.pos0 < 0 || op.a.pos0 + T > C) position_error(op, op.a.pos0 + T - 1, C, "KV cache");
      const double scale = op.a.scale, cap = op.a.softcap;
      std::vector<double> sc(static_cast<size_t>(C)), acc(static_cast<size_t>(hd));
      for (int64_t t = 0; t < T; ++t) {
        for (int h = 0; h < nh; ++h) {
          const int kh = h / group;
          const int64_t p = op.a.pos0 + t;
          const int64_t lo = op.a.window > 0 && p - op.a.window + 1 > 0 ? p - op.a.window + 1 : 0;
          const float* q = in[0].f32() + (t * nh + h) * hd;
          const int64_t base = static_cast<int64_t>(kh) * C * hd;
          double mx = 0.0;
          for (int64_t j = lo; j <= p; ++j) {
            double d = 0.0;
            for (int i = 0; i < hd; ++i) d += static_cast<double>(q[i]) * static_cast<double>(load(in[1], base + j * hd + i));
            d *= scale;
            if (cap > 0) d = cap * nox::tanh(d / cap);
            sc[static_cast<size_t>(j)] = d;
            if (j == lo || d > mx) mx = d;
          }
          double den = 0.0;
          for (int64_t j = lo; j <= p; ++j) {
            sc[static_cast<size_t>(j)] = nox::exp(sc[static_cast<size_t>(j)] - mx);
            den += sc[static_cast<size_t>(j)];
          }
          for (int i = 0; i < hd; ++i) acc[static_cast<size_t>(i)] = 0.0;
          for (int64_t j = lo; j <= p; ++j) {
            const double w = sc[static_cast<size_t>(j)] / den;
            for (int i = 0; i < hd; ++i)
              acc[static_cast<size_t>(i)] += w * static_cast<double>(load(in[2], base + j * hd + i));
          }
          float* o = out[0].f32() + (t * nh + h) * hd;
          for (int i = 0; i < hd; ++i) o[i] = static_cast<float>(acc[static_cast<size_t>(i)]);
        }
      }
      return;
    }
    case OpKind::KvWrite: {
      const int nkv = op.a.n_kv_heads, hd = op.a.head_dim;
      const int64_t T = in[0].shape.numel() / (static_cast<int64_t>(nkv) * hd), C = out[0].shape.d[1];
      if (op.a.pos0 < 0 || op.a.pos0 + T > C) position_error(op, op.a.pos0 + T - 1, C, "KV cache");
      for (int64_t t = 0; t < T; ++t)
        for (int h = 0; h < nkv; ++h)
          for (int i = 0; i < hd; ++i)
            store(out[0], (h * C + op.a.pos0 + t) * hd + i, in[0].f32()[(t * nkv + h) * hd + i]);
      return;
    }
    case OpKind::Softmax: {
      const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
      std::vector<double> e(static_cast<size_t>(D));
      for (int64_t r = 0; r < R; ++r) {
        const float* x = in[0].f32() + r * D;
        double mx = x[0];
        for (int64_t i = 1; i < D; ++i)
          if (x[i] > mx) mx = x[i];
        double s = 0.0;
        for (int64_t i = 0; i < D; ++i) {
          e[static_cast<size_t>(i)] = nox::exp(x[i] - mx);
          s += e[static_cast<size_t>(i)];
        }
        for (int64_t i = 0; i < D; ++i) out[0].f32()[r * D + i] = static_cast<float>(e[static_cast<size_t>(i)] / s);
      }
      return;
    }
    case OpKind::Add: binary(in, out, [](double a, double b) { return a + b; }); return;
    case OpKind::Mul: binary(in, out, [](double a, double b) { return a * b; }); return;
    case OpKind::Scale: {
      const double s = op.a.scale;
      unary(in, out, [s](double a) { return a * s; });
      return;
    }
    case OpKind::Relu: unary(in, out, [](double a) { return a > 0.0 ? a : 0.0; }); return;
    case OpKind::Silu: unary(in, out, silu); return;
    case OpKind::Gelu: unary(in, out, gelu_erf); return;
    case OpKind::GeluTanh: unary(in, out, gelu_tanh); return;
    case OpKind::SwiGlu: binary(in, out, [](double g, double u) { return silu(g) * u; }); return;
    case OpKind::GeGlu:
      if (op.a.gelu_erf) binary(in, out, [](double g, double u) { return gelu_erf(g) * u; });
      else binary(in, out, [](double g, double u) { return gelu_tanh(g) * u; });
      return;
    case OpKind::Softcap: {
      const double c = op.a.softcap;
      unary(in, out, [c](double a) { return c * nox::tanh(a / c); });
      return;
    }
    case OpKind::Copy: {
      const int64_t n = in[0].shape.numel();
      for (int64_t i = 0; i < n; ++i) store(out[0], i, load(in[0], i));
      return;
    }
    case OpKind::L2Normalize: {
      // Sum of squares left to right in double, nox's sqrt, one division per value.
      const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
      for (int64_t r = 0; r < R; ++r) {
        const float* x = in[0].f32() + r * D;
        double ss = 0.0;
        for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * static_cast<double>(x[i]);
        double n = nox::sqrt(ss);
        if (n < static_cast<double>(op.a.eps)) n = static_cast<double>(op.a.eps);
        for (int64_t i = 0; i < D; ++i) out[0].f32()[r * D + i] = static_cast<float>(static_cast<double>(x[i]) / n);
      }
      return;
    }
    case OpKind::MaskedPool: {
      // Masked rows in sequence order: sum in double then one division (mean), or the max.
      const Shape& xs = in[0].shape;
      const int64_t D = xs.cols(), S = xs.d[xs.ndim - 2], B = xs.numel() / (S * D);
      const float* m = in[1].f32();
      std::vector<double> acc(static_cast<size_t>(D));
      for (int64_t b = 0; b < B; ++b) {
        const float* x = in[0].f32() + b * S * D;
        float* y = out[0].f32() + b * D;
        for (int64_t i = 0; i < D; ++i) acc[static_cast<size_t>(i)] = op.a.pool_mode == 0 ? x[i] : 0.0;
        int64_t n = op.a.pool_mode == 0 ? 1 : 0;
        for (int64_t s = 0; s < S && op.a.pool_mode != 0; ++s) {
          if (m[b * S + s] == 0.f) continue;
          for (int64_t i = 0; i < D; ++i) {
            const double v = x[s * D + i];
            double& a = acc[static_cast<size_t>(i)];
            if (op.a.pool_mode == 1) a += v;
            else if (n == 0 || v > a) a = v;
          }
          ++n;
        }
        for (int64_t i = 0; i < D; ++i) {
          const double a = acc[static_cast<size_t>(i)];
          y[i] = n == 0 ? 0.f : static_cast<float>(op.a.pool_mode == 1 ? a / static_cast<double>(n) : a);
        }
      }
      return;
    }
    default: break;
  }
  throw_unsupported_op(op_name(op.kind), "nox", n_in > 0 ? dtype_name(in[0].dtype) : "none");
}

void NoxBackend::download_f32(const Tensor& t, float* out) {
  const int64_t n = t.shape.numel();
  if (t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = load(t, i);
    return;
  }
  throw_unsupported_op("download_f32", "nox", dtype_name(t.dtype));
}

NoxBackend& nox_backend() {
  static NoxBackend* b = new NoxBackend;
  return *b;
}

// ------------------------------------------------------------- RoPE tables

namespace {

int64_t floor_i(double x) {
  const int64_t i = static_cast<int64_t>(x);
  return static_cast<double>(i) > x ? i - 1 : i;
}

// The math policy of core/rope.h: nox's own elementary functions (no libm).
struct NoxRopeMath {
  static double pow(double b, double e) { return nox::pow(b, e); }
  static double log(double x) { return nox::log(x); }
  static double floor(double x) { return static_cast<double>(floor_i(x)); }
  static double ceil(double x) {
    const int64_t f = floor_i(x);
    return static_cast<double>(static_cast<double>(f) == x ? f : f + 1);
  }
  static double cos(double x) { return nox::cos(x); }
  static double sin(double x) { return nox::sin(x); }
};

}  // namespace

void nox_build_rope_table(int rot_dims, int64_t max_pos, double theta, const RopeScaling& sc,
                          std::vector<float>& cos, std::vector<float>& sin) {
  build_rope_table_with<NoxRopeMath>(rot_dims, max_pos, theta, sc, cos, sin);
}

// ------------------------------------------------------------- the digest

Sha256::Digest nox_tensor_digest(const Tensor& t, int64_t visible) {
  Sha256 h;
  const char* enc = dtype_info(t.dtype).encoding;
  h.update(enc, std::strlen(enc) + 1);
  h.update_u8(static_cast<uint8_t>(t.shape.ndim));
  if (visible >= 0 && t.shape.ndim == 3) {
    const int64_t heads = t.shape.d[0], C = t.shape.d[1], hd = t.shape.d[2];
    h.update_u64le(static_cast<uint64_t>(heads));
    h.update_u64le(static_cast<uint64_t>(visible));
    h.update_u64le(static_cast<uint64_t>(hd));
    const size_t row = row_bytes(t.dtype, hd);
    for (int64_t k = 0; k < heads; ++k)
      h.update(static_cast<const uint8_t*>(t.data) + static_cast<size_t>(k * C) * row,
               static_cast<size_t>(visible) * row);
    return h.finish();
  }
  for (int i = 0; i < t.shape.ndim; ++i) h.update_u64le(static_cast<uint64_t>(t.shape.d[i]));
  h.update(t.data, t.nbytes());
  return h.finish();
}

Sha256::Digest NoxWeightDigests::get(const Tensor& t) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = cache_.find(t.data);
  if (it != cache_.end()) return it->second;
  const Sha256::Digest d = nox_tensor_digest(t);
  cache_[t.data] = d;
  return d;
}

}  // namespace cyb
