// The graph-v2 ops of op.h tags 33..39 (sigmoid, tanh, sqrt, transpose, slice, pad, lstm) and conv1d
// (28), one definition for the cpu backend (M = StdMath) and nox (M = NoxMath; core/math_policy.h):
// floats in double, rounded once to f32; every reduction in index order.
#pragma once
#include <cstring>
#include <vector>

#include "core/array_elems.h"
#include "core/exec_context.h"
#include "dispatch/op.h"
#include "dispatch/op_schema.h"

namespace cyb {

template <class M>
struct V2ElemKernels {
  static double logistic(double x) { return 1.0 / (1.0 + M::exp(-x)); }

  template <class F>
  static void each(const Tensor* in, Tensor* out, F f) {
    const int64_t n = in[0].shape.numel();
    const float* a = in[0].f32();
    float* y = out[0].f32();
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(f(static_cast<double>(a[i])));
  }

  // conv1d output rows [r0, r1) (row r = (batch, time)): every output (b, t, o) summed in double over
  // (c, j) in that order, x read through its layout (the caller may spread the rows over threads).
  static void conv1d_rows(const Op& op, const Tensor* in, int n_in, Tensor* out, int64_t r0, int64_t r1) {
    const Shape& xs = in[0].shape;
    const bool cf = op.a.channels_first;
    const int64_t C = cf ? xs.d[xs.ndim - 2] : xs.d[xs.ndim - 1], L = cf ? xs.d[xs.ndim - 1] : xs.d[xs.ndim - 2];
    const int64_t O = in[1].shape.d[0], k = in[1].shape.d[2], stride = op.a.stride, pad = op.a.padding;
    const int64_t L_out = (L + 2 * pad - k) / stride + 1;
    const float* bias = n_in > 2 ? in[2].f32() : nullptr;
    const float* x = in[0].f32();
    float* y = out[0].f32();
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / L_out, t = r % L_out;
      const float* xb = x + b * C * L;
      for (int64_t o = 0; o < O; ++o) {
        double acc = bias ? static_cast<double>(bias[o]) : 0.0;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t j = 0; j < k; ++j) {
            const int64_t s = t * stride + j - pad;
            if (s < 0 || s >= L) continue;
            const double xv = cf ? xb[c * L + s] : xb[s * C + c];
            acc += xv * get_f(in[1], (o * C + c) * k + j);  // f32 / f16 / bf16 weights, exact in double
          }
        y[r * O + o] = static_cast<float>(acc);
      }
    }
  }
  // The number of conv1d output rows (batch x L_out).
  static int64_t conv1d_row_count(const Op& op, const Tensor* in) {
    const Shape& xs = in[0].shape;
    const int64_t L = op.a.channels_first ? xs.d[xs.ndim - 1] : xs.d[xs.ndim - 2];
    return (xs.ndim == 3 ? xs.d[0] : 1) * ((L + 2 * op.a.padding - in[1].shape.d[2]) / op.a.stride + 1);
  }
  static void conv1d(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext&) {
    conv1d_rows(op, in, n_in, out, 0, conv1d_row_count(op, in));
  }

  static void sigmoid(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    each(in, out, [](double a) { return logistic(a); });
  }
  static void tanh(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    each(in, out, [](double a) { return M::tanh(a); });
  }
  static void sqrt(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    each(in, out, [](double a) { return M::sqrt(a); });
  }

  // y[r * n + t] = x[base(r) + t * s] for t < n: one output row (typed copies by element size).
  template <class T>
  static void strided_row(const uint8_t* x, int64_t s, int64_t n, uint8_t* y) {
    const T* xs = reinterpret_cast<const T*>(x);
    T* ys = reinterpret_cast<T*>(y);
    for (int64_t t = 0; t < n; ++t) std::memcpy(ys + t, xs + t * s, sizeof(T));
  }

  static void transpose(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const Shape& os = out[0].shape;
    int64_t st[Shape::kMaxDims];
    strides_of(xs, st);
    const int nd = xs.ndim;
    const size_t es = elem_bytes(in[0].dtype);
    if (nd == 0 || os.numel() == 0) {
      gather_bytes(os, out[0].data, [](const int64_t*) { return int64_t{0}; }, in[0].data, es, nullptr);
      return;
    }
    // rows of the output's last dim, each read with the stride of the input dim it comes from: the
    // same bytes as an element-wise gather
    const int64_t n = os.d[nd - 1], s = st[op.a.ints[nd - 1]];
    Shape rows;
    for (int i = 0; i + 1 < nd; ++i) rows.d[rows.ndim++] = os.d[i];
    const auto* x = static_cast<const uint8_t*>(in[0].data);
    auto* y = static_cast<uint8_t*>(out[0].data);
    for_each_index(rows, [&](int64_t r, const int64_t* idx) {
      int64_t base = 0;
      for (int i = 0; i + 1 < nd; ++i) base += idx[i] * st[op.a.ints[i]];
      const uint8_t* src = x + static_cast<size_t>(base) * es;
      uint8_t* dst = y + static_cast<size_t>(r * n) * es;
      switch (es) {
        case 1: strided_row<uint8_t>(src, s, n, dst); break;
        case 2: strided_row<uint16_t>(src, s, n, dst); break;
        case 4: strided_row<uint32_t>(src, s, n, dst); break;
        default: strided_row<uint64_t>(src, s, n, dst); break;
      }
    });
  }

  static void slice(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    int64_t st[Shape::kMaxDims];
    strides_of(xs, st);
    int ax = 0;
    int64_t start = 0, count = 0;
    slice_bounds(op, xs, &ax, &start, &count);
    const int64_t step = op.a.ints[2];
    if (out[0].shape.numel() == 0) return;
    // rows of the dims before the axis; per row, `count` runs of the dims after it (one run when
    // step 1): the same bytes as an element-wise gather, moved by memcpy
    int64_t outer = 1;
    for (int i = 0; i < ax; ++i) outer *= xs.d[i];
    const size_t run = static_cast<size_t>(st[ax]) * elem_bytes(in[0].dtype);
    const auto* x = static_cast<const uint8_t*>(in[0].data);
    auto* y = static_cast<uint8_t*>(out[0].data);
    for (int64_t o = 0; o < outer; ++o) {
      const uint8_t* src = x + static_cast<size_t>(o * xs.d[ax] + start) * run;
      uint8_t* dst = y + static_cast<size_t>(o * count) * run;
      if (step == 1) {
        std::memcpy(dst, src, static_cast<size_t>(count) * run);
      } else {
        for (int64_t c = 0; c < count; ++c) std::memcpy(dst + static_cast<size_t>(c) * run, src + static_cast<size_t>(c * step) * run, run);
      }
    }
  }

  static void pad(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    int64_t st[Shape::kMaxDims];
    strides_of(xs, st);
    const int nd = xs.ndim, mode = op.a.mode;
    uint8_t fill[8] = {};
    Tensor f;
    f.dtype = out[0].dtype;
    f.data = fill;
    put_f(f, 0, op.a.value);
    gather_bytes(out[0].shape, out[0].data, [&](const int64_t* idx) {
      int64_t o = 0;
      for (int i = 0; i < nd; ++i) {
        int64_t j = idx[i] - op.a.ints[i];
        const int64_t n = xs.d[i];
        if (j < 0 || j >= n) {
          if (mode == 0) return int64_t{-1};
          if (mode == 1) j = j < 0 ? -j : 2 * (n - 1) - j;  // reflect: pads < n (checked)
          else j = j < 0 ? 0 : n - 1;                        // edge
        }
        o += j * st[i];
      }
      return o;
    }, in[0].data, elem_bytes(in[0].dtype), fill);
  }

  // lstm: the ONNX gate order i, o, f, c; every gate pre-activation summed in double.
  static void lstm(const Op&, const Tensor* in, int n_in, Tensor* out, int, ExecContext&) {
    const int64_t S = in[0].shape.d[0], B = in[0].shape.d[1], I = in[0].shape.d[2], H = in[1].shape.d[0] / 4;
    const float* x = in[0].f32();
    const float* W = in[1].f32();
    const float* R = in[2].f32();
    const float* bias = in[3].f32();
    float* Y = out[0].f32();
    std::vector<double> h(static_cast<size_t>(B * H), 0.0), c(static_cast<size_t>(B * H), 0.0), g(static_cast<size_t>(4 * H));
    if (n_in > 4)
      for (int64_t i = 0; i < B * H; ++i) h[i] = in[4].f32()[i];
    if (n_in > 5)
      for (int64_t i = 0; i < B * H; ++i) c[i] = in[5].f32()[i];
    std::vector<double> hprev(h);
    for (int64_t s = 0; s < S; ++s) {
      hprev = h;
      for (int64_t b = 0; b < B; ++b) {
        const float* xs = x + (s * B + b) * I;
        const double* hp = hprev.data() + b * H;
        // four rows at a time (4H of them): four independent sums, each in the order of one row
        // alone (the same numbers), so the adds of one row do not wait for each other's latency
        for (int64_t r = 0; r < 4 * H; r += 4) {
          double a[4];
          for (int q = 0; q < 4; ++q) a[q] = static_cast<double>(bias[r + q]) + bias[4 * H + r + q];
          for (int64_t k = 0; k < I; ++k)
            for (int q = 0; q < 4; ++q) a[q] += static_cast<double>(xs[k]) * W[(r + q) * I + k];
          for (int64_t k = 0; k < H; ++k)
            for (int q = 0; q < 4; ++q) a[q] += hp[k] * static_cast<double>(R[(r + q) * H + k]);
          for (int q = 0; q < 4; ++q) g[r + q] = a[q];
        }
        for (int64_t j = 0; j < H; ++j) {
          const double ig = logistic(g[j]), og = logistic(g[H + j]), fg = logistic(g[2 * H + j]);
          const double cg = M::tanh(g[3 * H + j]);
          // The state is carried in f32 between steps, as a caller carrying hn/cn across calls sees it.
          const double cn = static_cast<float>(fg * c[b * H + j] + ig * cg);
          const double hn = static_cast<float>(og * M::tanh(cn));
          c[b * H + j] = cn;
          h[b * H + j] = hn;
          Y[(s * B + b) * H + j] = static_cast<float>(hn);
        }
      }
    }
    for (int64_t i = 0; i < B * H; ++i) {
      out[1].f32()[i] = static_cast<float>(h[i]);
      out[2].f32()[i] = static_cast<float>(c[i]);
    }
  }
};

}  // namespace cyb
