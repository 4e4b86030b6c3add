// The index and data-dependent-shape ops of graph v2 (op.h tags 60-79, ONNX semantics), one definition
// for the cpu backend (M = StdMath) and nox (M = NoxMath; core/math_policy.h): gathers and scatters
// move element bytes (any dtype), cumsum sums floats in double and integers exactly in int64 in index
// order, random_normal_like draws from the counter-based generator (core/counter_rng.h) under M.
// Shapes and index ranges were checked by the op's schema row (dispatch/op_schema_index.cc).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/array_elems.h"
#include "core/errors.h"
#include "core/exec_context.h"
#include "dispatch/op.h"
#include "dispatch/op_schema.h"
#include "core/counter_rng.h"
#include "dispatch/op_schema_index.h"

namespace cyb {

template <class M>
struct ArrayIndexKernels {
  static int64_t wrap(int64_t v, int64_t dim) { return v < 0 ? v + dim : v; }

  // out[i.., j.., k..] = data[i.., indices[j..], k..]
  static void gather(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int ax = index_op_axis(op, xs.ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; ++i) outer *= xs.d[i];
    for (int i = ax + 1; i < xs.ndim; ++i) inner *= xs.d[i];
    const int64_t dim = xs.d[ax], n_idx = in[1].shape.numel();
    const size_t es = elem_bytes(in[0].dtype), row = static_cast<size_t>(inner) * es;
    const auto* x = static_cast<const uint8_t*>(in[0].data);
    auto* y = static_cast<uint8_t*>(out[0].data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n_idx; ++j) {
        const int64_t k = wrap(get_i(in[1], j), dim);
        std::memcpy(y + static_cast<size_t>(o * n_idx + j) * row, x + static_cast<size_t>(o * dim + k) * row, row);
      }
  }

  // out[idx] = data[idx with idx[axis] = indices[idx]]
  static void gather_elements(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int ax = index_op_axis(op, xs.ndim);
    int64_t st[Shape::kMaxDims] = {};
    strides_of(xs, st);
    const size_t es = elem_bytes(in[0].dtype);
    gather_bytes(
        out[0].shape, out[0].data,
        [&](const int64_t* idx) {
          int64_t off = 0;
          for (int d = 0; d < xs.ndim; ++d) off += idx[d] * st[d];
          int64_t lin = 0;  // the index element at idx (indices has out's shape)
          for (int d = 0; d < xs.ndim; ++d) lin = lin * out[0].shape.d[d] + idx[d];
          return off + (wrap(get_i(in[1], lin), xs.d[ax]) - idx[ax]) * st[ax];
        },
        in[0].data, es, nullptr);
  }

  // Batches of b leading dims; each index tuple of m values selects a slice data[b.., t0.., tm-1, ...].
  static void gather_nd(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape &xs = in[0].shape, &is = in[1].shape;
    const int b = op.a.batch_dims, q = is.ndim;
    const int64_t m = is.d[q - 1];
    int64_t st[Shape::kMaxDims] = {};
    strides_of(xs, st);
    int64_t batches = 1, tuples = 1;
    for (int i = 0; i < b; ++i) batches *= xs.d[i];
    for (int i = b; i < q - 1; ++i) tuples *= is.d[i];
    const int64_t slice = st[b + m - 1];  // elements per selected slice (the dims after b + m)
    const int64_t batch_stride = b > 0 ? st[b - 1] : xs.numel();
    const size_t es = elem_bytes(in[0].dtype), sb = static_cast<size_t>(slice) * es;
    const auto* x = static_cast<const uint8_t*>(in[0].data);
    auto* y = static_cast<uint8_t*>(out[0].data);
    for (int64_t bi = 0; bi < batches; ++bi)
      for (int64_t t = 0; t < tuples; ++t) {
        const int64_t base = (bi * tuples + t) * m;
        int64_t off = bi * batch_stride;
        for (int64_t k = 0; k < m; ++k) {
          const int d = b + static_cast<int>(k);
          off += wrap(get_i(in[1], base + k), xs.d[d]) * st[d];
        }
        std::memcpy(y + static_cast<size_t>(bi * tuples + t) * sb, x + static_cast<size_t>(off) * es, sb);
      }
  }

  // dst element = (reduction add) dst + src, else src
  static void put_update(const Tensor& o, int64_t dst, const Tensor& u, int64_t src, int reduction) {
    if (reduction == kScatterAdd) {
      if (is_float_dtype(o.dtype)) put_f(o, dst, get_f(o, dst) + get_f(u, src));
      else if (o.dtype == DType::BOOL) put_i(o, dst, get_i(o, dst) || get_i(u, src));
      else put_i(o, dst, static_cast<int64_t>(static_cast<uint64_t>(get_i(o, dst)) + static_cast<uint64_t>(get_i(u, src))));
    } else {
      const size_t es = elem_bytes(o.dtype);
      std::memcpy(static_cast<uint8_t*>(o.data) + dst * es, static_cast<const uint8_t*>(u.data) + src * es, es);
    }
  }

  static void scatter_nd(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape &xs = in[0].shape, &is = in[1].shape;
    const int q = is.ndim;
    const int64_t m = is.d[q - 1];
    int64_t st[Shape::kMaxDims] = {};
    strides_of(xs, st);
    const int64_t tuples = is.numel() / m, slice = st[m - 1];  // the dims after m
    std::memcpy(out[0].data, in[0].data, static_cast<size_t>(xs.numel()) * elem_bytes(in[0].dtype));
    for (int64_t t = 0; t < tuples; ++t) {  // in index order: a repeated index keeps the last update
      int64_t off = 0;
      for (int64_t k = 0; k < m; ++k) off += wrap(get_i(in[1], t * m + k), xs.d[k]) * st[k];
      for (int64_t e = 0; e < slice; ++e) put_update(out[0], off + e, in[2], t * slice + e, op.a.mode);
    }
  }

  static void scatter_elements(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int ax = index_op_axis(op, xs.ndim);
    int64_t st[Shape::kMaxDims] = {};
    strides_of(xs, st);
    std::memcpy(out[0].data, in[0].data, static_cast<size_t>(xs.numel()) * elem_bytes(in[0].dtype));
    for_each_index(in[1].shape, [&](int64_t i, const int64_t* idx) {
      int64_t off = 0;
      for (int d = 0; d < xs.ndim; ++d) off += (d == ax ? wrap(get_i(in[1], i), xs.d[ax]) : idx[d]) * st[d];
      put_update(out[0], off, in[2], i, op.a.mode);
    });
  }

  static void nonzero(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int64_t n = out[0].shape.d[1];
    const bool fl = is_float_dtype(in[0].dtype);
    auto* y = static_cast<int64_t*>(out[0].data);
    int64_t c = 0;
    for_each_index(xs, [&](int64_t i, const int64_t* idx) {
      if (fl ? get_f(in[0], i) == 0.0 : get_i(in[0], i) == 0) return;
      if (xs.ndim == 0) y[c] = 0;
      for (int d = 0; d < xs.ndim; ++d) y[d * n + c] = idx[d];
      ++c;
    });
  }

  // onnxruntime's loop: value = start, then value += delta in the element type.
  static void range(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const int64_t n = out[0].shape.numel();
    if (is_float_dtype(in[0].dtype)) {
      float v = static_cast<float>(get_f(in[0], 0));
      const float d = static_cast<float>(get_f(in[2], 0));
      for (int64_t i = 0; i < n; ++i, v += d) put_f(out[0], i, v);
    } else {
      const int64_t s = get_i(in[0], 0), d = get_i(in[2], 0);
      for (int64_t i = 0; i < n; ++i) put_i(out[0], i, s + i * d);  // stays within [start, limit)
    }
  }

  static void cumsum(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int ax = index_op_axis(op, xs.ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; ++i) outer *= xs.d[i];
    for (int i = ax + 1; i < xs.ndim; ++i) inner *= xs.d[i];
    const int64_t dim = xs.d[ax];
    const bool fl = is_float_dtype(in[0].dtype);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < inner; ++r) {
        double acc = 0.0;
        int64_t iacc = 0;
        for (int64_t s = 0; s < dim; ++s) {
          const int64_t k = op.a.reverse ? dim - 1 - s : s, e = (o * dim + k) * inner + r;
          if (fl) {
            const double v = get_f(in[0], e);
            if (!op.a.exclusive) acc += v;
            put_f(out[0], e, acc);
            if (op.a.exclusive) acc += v;
          } else {
            const int64_t v = get_i(in[0], e);
            if (!op.a.exclusive) iacc = static_cast<int64_t>(static_cast<uint64_t>(iacc) + static_cast<uint64_t>(v));
            put_i(out[0], e, iacc);
            if (op.a.exclusive) iacc = static_cast<int64_t>(static_cast<uint64_t>(iacc) + static_cast<uint64_t>(v));
          }
        }
      }
  }

  static void constant_of_shape(const Op& op, const Tensor*, int, Tensor* out, int, ExecContext&) {
    const int64_t n = out[0].shape.numel();
    if (n == 0) return;
    put_f(out[0], 0, op.a.fill);
    const size_t es = elem_bytes(out[0].dtype);
    auto* y = static_cast<uint8_t*>(out[0].data);
    for (int64_t i = 1; i < n; ++i) std::memcpy(y + static_cast<size_t>(i) * es, y, es);
  }

  static void expand(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& os = out[0].shape;
    int64_t st[Shape::kMaxDims] = {};
    broadcast_strides(in[0].shape, os, st);
    gather_bytes(
        os, out[0].data,
        [&](const int64_t* idx) {
          int64_t off = 0;
          for (int d = 0; d < os.ndim; ++d) off += idx[d] * st[d];
          return off;
        },
        in[0].data, elem_bytes(in[0].dtype), nullptr);
  }

  static void tile(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape &xs = in[0].shape, &os = out[0].shape;
    int64_t st[Shape::kMaxDims] = {};
    strides_of(xs, st);
    gather_bytes(
        os, out[0].data,
        [&](const int64_t* idx) {
          int64_t off = 0;
          for (int d = 0; d < os.ndim; ++d) off += (idx[d] % xs.d[d]) * st[d];
          return off;
        },
        in[0].data, elem_bytes(in[0].dtype), nullptr);
  }

  static void random_normal_like(const Op& op, const Tensor*, int, Tensor* out, int, ExecContext&) {
    const int64_t n = out[0].shape.numel();
    for (int64_t i = 0; i < n; ++i)
      put_f(out[0], i, static_cast<double>(op.a.alpha) + static_cast<double>(op.a.scale) * normal_of_with<M>(op.a.seed, i));
  }

  static void argmax(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int ax = index_op_axis(op, xs.ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; ++i) outer *= xs.d[i];
    for (int i = ax + 1; i < xs.ndim; ++i) inner *= xs.d[i];
    const int64_t dim = xs.d[ax];
    const bool fl = is_float_dtype(in[0].dtype);
    auto* y = static_cast<int64_t*>(out[0].data);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < inner; ++r) {
        int64_t best = 0;
        const int64_t e0 = o * dim * inner + r;
        if (fl) {
          double bv = get_f(in[0], e0);
          for (int64_t k = 1; k < dim && !std::isnan(bv); ++k) {
            const double v = get_f(in[0], e0 + k * inner);
            if (std::isnan(v) || v > bv || (op.a.select_last && v == bv)) {
              bv = v;
              best = k;
            }
          }
        } else {
          int64_t bv = get_i(in[0], e0);
          for (int64_t k = 1; k < dim; ++k) {
            const int64_t v = get_i(in[0], e0 + k * inner);
            if (v > bv || (op.a.select_last && v == bv)) {
              bv = v;
              best = k;
            }
          }
        }
        y[o * inner + r] = best;
      }
  }

  // out[idx] = x[start + idx * step] per dim (negative steps read backwards).
  static void slice_dyn(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext&) {
    const SliceDynPlan p = slice_dyn_plan(op, in, n_in);
    const Shape& xs = in[0].shape;
    int64_t st[Shape::kMaxDims] = {};
    strides_of(xs, st);
    int64_t base = 0, mul[Shape::kMaxDims] = {};
    for (int d = 0; d < xs.ndim; ++d) {
      base += p.start[d] * st[d];
      mul[d] = p.step[d] * st[d];
    }
    gather_bytes(
        out[0].shape, out[0].data,
        [&](const int64_t* idx) {
          int64_t off = base;
          for (int d = 0; d < xs.ndim; ++d) off += idx[d] * mul[d];
          return off;
        },
        in[0].data, elem_bytes(in[0].dtype), nullptr);
  }

  // out[idx] = x[first + idx - before] per dim within the kept range; outside it: attr value
  // (constant), the mirror (reflect) or the nearest kept element (edge).
  static void pad_dyn(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const PadDynPlan p = pad_dyn_plan(op, in);
    const Shape& xs = in[0].shape;
    int64_t st[Shape::kMaxDims] = {};
    strides_of(xs, st);
    const int nd = xs.ndim, mode = op.a.mode;
    uint8_t fill[8] = {};
    Tensor f;
    f.dtype = out[0].dtype;
    f.data = fill;
    put_f(f, 0, op.a.fill);
    gather_bytes(
        out[0].shape, out[0].data,
        [&](const int64_t* idx) {
          int64_t off = 0;
          for (int d = 0; d < nd; ++d) {
            int64_t j = idx[d] - p.before[d];
            const int64_t n = p.kept[d];
            if (j < 0 || j >= n) {
              if (mode == 0) return int64_t{-1};
              if (mode == 1) j = j < 0 ? -j : 2 * (n - 1) - j;  // reflect: pads < n (checked)
              else j = j < 0 ? 0 : n - 1;                        // edge
            }
            off += (p.first[d] + j) * st[d];
          }
          return off;
        },
        in[0].data, elem_bytes(in[0].dtype), fill);
  }
};

}  // namespace cyb
