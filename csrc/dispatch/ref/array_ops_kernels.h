// The element-wise and reduction array ops of graph v2 (unary, binary, where, cast, reduce, shape_of),
// one definition for the cpu backend (M = StdMath) and nox (M = NoxMath; core/math_policy.h): floats
// computed in double and rounded once to the output type, integers exact in int64, numpy broadcasting
// through stride-0 dims, every element in index order. docs/graph.md "Version 2".
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

namespace cyb {

template <class M>
struct ArrayOpKernels {
  static double unary_f(int fn, double x, double alpha, double beta) {
    switch (fn) {
      case kUNeg: return -x;
      case kUAbs: return std::fabs(x);
      case kUExp: return M::exp(x);
      case kULog: return M::log(x);
      case kUErf: return M::erf(x);
      case kUSin: return M::sin(x);
      case kUCos: return M::cos(x);
      case kUCeil: return std::ceil(x);
      case kUFloor: return std::floor(x);
      case kURound: return std::nearbyint(x);  // ONNX Round: half to even (the default rounding mode)
      case kUSign: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
      case kUReciprocal: return 1.0 / x;
      case kUSoftplus: return x > 0 ? x + M::log1p(M::exp(-x)) : M::log1p(M::exp(x));
      case kULeakyRelu: return x >= 0 ? x : alpha * x;
      case kUNot: return x == 0.0 ? 1.0 : 0.0;
      case kUIsNan: return std::isnan(x) ? 1.0 : 0.0;
      case kUIsInf: return std::isinf(x) ? 1.0 : 0.0;
      case kUClip: return x < alpha ? alpha : (x > beta ? beta : x);
    }
    return x;
  }

  static int64_t unary_i(int fn, int64_t x, int64_t lo, int64_t hi) {
    switch (fn) {
      case kUNeg: return -x;
      case kUAbs: return x < 0 ? -x : x;
      case kUSign: return x > 0 ? 1 : (x < 0 ? -1 : 0);
      case kUNot: return x == 0;
      case kUIsNan:
      case kUIsInf: return 0;
      case kUClip: return x < lo ? lo : (x > hi ? hi : x);
    }
    return x;
  }

  // f32 -> f32 without the per-element dtype dispatch: the same values as the general loop (the
  // functions exact in f32 directly, the others through unary_f in double, rounded once).
  static void unary_f32(int fn, const float* x, float* y, int64_t n, float alpha, float beta) {
    switch (fn) {
      case kUNeg: for (int64_t i = 0; i < n; ++i) y[i] = -x[i]; return;
      case kUAbs: for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]); return;
      case kULeakyRelu:  // alpha * x of two floats is exact in double: one rounding either way
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0.f ? x[i] : alpha * x[i];
        return;
      case kUClip: for (int64_t i = 0; i < n; ++i) y[i] = x[i] < alpha ? alpha : (x[i] > beta ? beta : x[i]); return;
      default:
        for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(unary_f(fn, x[i], alpha, beta));
    }
  }

  static void unary(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const int64_t n = in[0].shape.numel();
    const int fn = op.a.fn;
    if (in[0].dtype == DType::F32 && out[0].dtype == DType::F32) {
      unary_f32(fn, in[0].f32(), out[0].f32(), n, op.a.alpha, op.a.beta);
    } else if (is_float_dtype(in[0].dtype)) {
      for (int64_t i = 0; i < n; ++i) put_f(out[0], i, unary_f(fn, get_f(in[0], i), op.a.alpha, op.a.beta));
    } else {
      const auto lo = static_cast<int64_t>(std::ceil(op.a.alpha)), hi = static_cast<int64_t>(std::floor(op.a.beta));
      for (int64_t i = 0; i < n; ++i) put_i(out[0], i, unary_i(fn, get_i(in[0], i), lo, hi));
    }
  }

  static double binary_f(int fn, double a, double b) {
    switch (fn) {
      case kBAdd: return a + b;
      case kBSub: return a - b;
      case kBMul: return a * b;
      case kBDiv: return a / b;
      case kBPow: return M::pow(a, b);
      case kBMin: return a < b ? a : b;
      case kBMax: return a > b ? a : b;
      case kBMod: {
        const double r = std::fmod(a, b);
        return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
      }
      case kBEqual: return a == b;
      case kBLess: return a < b;
      case kBLessEqual: return a <= b;
      case kBGreater: return a > b;
      case kBGreaterEqual: return a >= b;
      case kBAnd: return (a != 0) && (b != 0);
      case kBOr: return (a != 0) || (b != 0);
      case kBXor: return (a != 0) != (b != 0);
    }
    return 0.0;
  }

  static int64_t ipow(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : (a == -1 ? (b % 2 ? -1 : 1) : 0);
    int64_t r = 1;
    while (b > 0) {
      if (b & 1) r *= a;
      a *= a;
      b >>= 1;
    }
    return r;
  }

  // Integer arithmetic (wrapping as the element type would); division by zero is an error, not a signal.
  static int64_t binary_i(const Op& op, int fn, int64_t a, int64_t b) {
    switch (fn) {
      case kBAdd: return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      case kBSub: return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
      case kBMul: return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      case kBDiv:
      case kBMod:
        if (b == 0) throw_invalid_config(std::string(op.label ? op.label : "binary"), "integer division by zero");
        if (b == -1) return fn == kBDiv ? static_cast<int64_t>(0 - static_cast<uint64_t>(a)) : 0;
        if (fn == kBDiv) return a / b;  // truncation toward zero (ONNX Div on integers)
        {
          const int64_t r = a % b;
          return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;  // numpy's sign (ONNX Mod, fmod = 0)
        }
      case kBPow: return ipow(a, b);
      case kBMin: return a < b ? a : b;
      case kBMax: return a > b ? a : b;
      case kBEqual: return a == b;
      case kBLess: return a < b;
      case kBLessEqual: return a <= b;
      case kBGreater: return a > b;
      case kBGreaterEqual: return a >= b;
      case kBAnd: return (a != 0) && (b != 0);
      case kBOr: return (a != 0) || (b != 0);
      case kBXor: return (a != 0) != (b != 0);
    }
    return 0;
  }

  // y[i] = f(a[i * as], b[i * bs]) for i < n, as / bs 0 (one value broadcast) or 1.
  template <class F>
  static void binary_run(F f, const float* a, int64_t as, const float* b, int64_t bs, float* y, int64_t n) {
    if (as && bs) {
      for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
    } else if (as) {
      const float bv = *b;
      for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], bv);
    } else if (bs) {
      const float av = *a;
      for (int64_t i = 0; i < n; ++i) y[i] = f(av, b[i]);
    } else {
      const float v = f(*a, *b);
      for (int64_t i = 0; i < n; ++i) y[i] = v;
    }
  }

  // f32 add / sub / mul / div / min / max in f32: for these a double holds the exact result of two
  // floats or rounds it innocuously (53 >= 2 * 24 + 2 bits), so rounding the double result once (the
  // general loop) gives the same float. The output is walked in runs of trailing dims along which
  // each input is contiguous or one broadcast value (elements still in index order). False: not
  // such an op.
  static bool binary_f32(const Op& op, const Tensor* in, Tensor* out, const int64_t* sa, const int64_t* sb) {
    const int fn = op.a.fn;
    if (in[0].dtype != DType::F32 || in[1].dtype != DType::F32 || out[0].dtype != DType::F32 ||
        !(fn == kBAdd || fn == kBSub || fn == kBMul || fn == kBDiv || fn == kBMin || fn == kBMax))
      return false;
    const Shape& os = out[0].shape;
    int64_t inner = 1;
    bool a_run = true, a_one = true, b_run = true, b_one = true;  // contiguous / one value so far
    int d = os.ndim - 1;
    for (; d >= 0; --d) {
      if (os.d[d] == 1) continue;
      const bool ar = a_run && sa[d] == inner, ao = a_one && sa[d] == 0;
      const bool br = b_run && sb[d] == inner, bo = b_one && sb[d] == 0;
      if (!(ar || ao) || !(br || bo)) break;
      a_run = ar, a_one = ao, b_run = br, b_one = bo;
      inner *= os.d[d];
    }
    const int64_t as = a_one ? 0 : 1, bs = b_one ? 0 : 1;  // a run of one element: either reads it
    Shape outer;  // the dims before the runs
    for (int i = 0; i <= d; ++i) outer.d[outer.ndim++] = os.d[i];
    const float* a = in[0].f32();
    const float* b = in[1].f32();
    float* y = out[0].f32();
    auto rows = [&](auto f) {
      for_each_index(outer, [&](int64_t r, const int64_t* idx) {
        int64_t ia = 0, ib = 0;
        for (int k = 0; k < outer.ndim; ++k) {
          ia += idx[k] * sa[k];
          ib += idx[k] * sb[k];
        }
        binary_run(f, a + ia, as, b + ib, bs, y + r * inner, inner);
      });
    };
    switch (fn) {
      case kBAdd: rows([](float u, float v) { return u + v; }); break;
      case kBSub: rows([](float u, float v) { return u - v; }); break;
      case kBMul: rows([](float u, float v) { return u * v; }); break;
      case kBDiv: rows([](float u, float v) { return u / v; }); break;
      case kBMin: rows([](float u, float v) { return u < v ? u : v; }); break;
      default: rows([](float u, float v) { return u > v ? u : v; }); break;
    }
    return true;
  }

  static void binary(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& os = out[0].shape;
    int64_t sa[Shape::kMaxDims], sb[Shape::kMaxDims];
    broadcast_strides(in[0].shape, os, sa);
    broadcast_strides(in[1].shape, os, sb);
    if (os.numel() > 0 && binary_f32(op, in, out, sa, sb)) return;
    const int nd = os.ndim, fn = op.a.fn;
    const bool fl = is_float_dtype(in[0].dtype);
    for_each_index(os, [&](int64_t i, const int64_t* idx) {
      int64_t ia = 0, ib = 0;
      for (int d = 0; d < nd; ++d) {
        ia += idx[d] * sa[d];
        ib += idx[d] * sb[d];
      }
      if (fl) put_f(out[0], i, binary_f(fn, get_f(in[0], ia), get_f(in[1], ib)));
      else put_i(out[0], i, binary_i(op, fn, get_i(in[0], ia), get_i(in[1], ib)));
    });
  }

  // elementwise (op.h): the program at each output element in index order, its f32 steps
  // (elementwise_step) on a stack of values. Not in nox's table: the fusion pass writes it only where
  // the backend supports it, and nox keeps its graphs unfused.
  static void elementwise(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext&) {
    const Shape& os = out[0].shape;
    int64_t st[kElementwiseMaxInputs][Shape::kMaxDims];
    for (int k = 0; k < n_in; ++k) broadcast_strides(in[k].shape, os, st[k]);
    const int nd = os.ndim;
    float* y = out[0].f32();
    for_each_index(os, [&](int64_t i, const int64_t* idx) {
      float v[16];
      int sp = 0;
      for (int t = 0; t < op.a.n_ints; ++t) {
        const int64_t s = op.a.ints[t];
        if (s >= 0) {
          int64_t o = 0;
          for (int d = 0; d < nd; ++d) o += idx[d] * st[s][d];
          v[sp++] = in[s].f32()[o];
        } else if (s == kEwLeakyRelu) {
          v[sp - 1] = elementwise_step(kEwLeakyRelu, 0.f, v[sp - 1], op.a.alpha);
        } else {
          --sp;
          v[sp - 1] = elementwise_step(static_cast<int>(s), v[sp - 1], v[sp], op.a.alpha);
        }
      }
      y[i] = v[0];
    });
  }

  static void where(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& os = out[0].shape;
    int64_t sc[Shape::kMaxDims], sx[Shape::kMaxDims], sy[Shape::kMaxDims];
    broadcast_strides(in[0].shape, os, sc);
    broadcast_strides(in[1].shape, os, sx);
    broadcast_strides(in[2].shape, os, sy);
    const int nd = os.ndim;
    const size_t es = elem_bytes(in[1].dtype);
    const auto* c = static_cast<const uint8_t*>(in[0].data);
    const auto* x = static_cast<const uint8_t*>(in[1].data);
    const auto* y = static_cast<const uint8_t*>(in[2].data);
    auto* o = static_cast<uint8_t*>(out[0].data);
    // a row of the last dim at a time: the inputs' offsets once per row, then each element picked
    // along the row (stride 1 or 0 per input), copied as one integer of its size
    const int64_t n = nd ? os.d[nd - 1] : 1, jc = nd ? sc[nd - 1] : 0, jx = nd ? sx[nd - 1] : 0,
                  jy = nd ? sy[nd - 1] : 0;
    Shape rows = os;
    if (nd) rows.d[nd - 1] = 1;
    const auto pick = [&](auto word) {
      using T = decltype(word);
      for_each_index(rows, [&](int64_t r, const int64_t* idx) {
        int64_t ic = 0, ix = 0, iy = 0;
        for (int d = 0; d + 1 < nd; ++d) {
          ic += idx[d] * sc[d];
          ix += idx[d] * sx[d];
          iy += idx[d] * sy[d];
        }
        const uint8_t* cr = c + ic;
        const uint8_t* xr = x + ix * es;
        const uint8_t* yr = y + iy * es;
        uint8_t* orow = o + r * n * es;
        for (int64_t j = 0; j < n; ++j) {
          T v;
          std::memcpy(&v, cr[j * jc] ? xr + j * jx * es : yr + j * jy * es, sizeof(T));
          std::memcpy(orow + j * es, &v, sizeof(T));
        }
      });
    };
    switch (es) {
      case 1: return pick(uint8_t{});
      case 2: return pick(uint16_t{});
      case 4: return pick(uint32_t{});
      case 8: return pick(uint64_t{});
      default:
        for_each_index(os, [&](int64_t i, const int64_t* idx) {
          int64_t ic = 0, ix = 0, iy = 0;
          for (int d = 0; d < nd; ++d) {
            ic += idx[d] * sc[d];
            ix += idx[d] * sx[d];
            iy += idx[d] * sy[d];
          }
          std::memcpy(o + i * es, c[ic] ? x + ix * es : y + iy * es, es);
        });
    }
  }

  static void cast(const Op&, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const int64_t n = in[0].shape.numel();
    const bool from_float = is_float_dtype(in[0].dtype), to_float = is_float_dtype(out[0].dtype);
    for (int64_t i = 0; i < n; ++i) {
      if (out[0].dtype == DType::BOOL) put_i(out[0], i, get_f(in[0], i) != 0.0);
      else if (to_float) put_f(out[0], i, get_f(in[0], i));
      else if (from_float) put_i(out[0], i, static_cast<int64_t>(std::trunc(get_f(in[0], i))));
      else put_i(out[0], i, get_i(in[0], i));
    }
  }

  static void reduce(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int nd = xs.ndim, fn = op.a.fn;
    bool red[Shape::kMaxDims] = {};
    for (int i = 0; i < nd; ++i) red[i] = op.a.n_ints == 0;
    for (int i = 0; i < op.a.n_ints; ++i) red[op.a.ints[i] < 0 ? op.a.ints[i] + nd : op.a.ints[i]] = true;
    // The output index of each input element: the kept dims' strides of the output (keepdims or not).
    Shape ks;  // the output shape with reduced dims kept as 1
    ks.ndim = nd;
    for (int i = 0; i < nd; ++i) ks.d[i] = red[i] ? 1 : xs.d[i];
    int64_t kst[Shape::kMaxDims];
    strides_of(ks, kst);
    const int64_t n_out = ks.numel();
    int64_t count = 1;
    for (int i = 0; i < nd; ++i)
      if (red[i]) count *= xs.d[i];
    const bool fl = is_float_dtype(in[0].dtype);
    std::vector<double> acc(static_cast<size_t>(n_out));
    std::vector<int64_t> iacc(static_cast<size_t>(n_out));
    const double init = fn == kRProd ? 1.0
                        : fn == kRMax ? -std::numeric_limits<double>::infinity()
                        : fn == kRMin ? std::numeric_limits<double>::infinity()
                                      : 0.0;
    const int64_t iinit = fn == kRProd ? 1
                          : fn == kRMax ? std::numeric_limits<int64_t>::min()
                          : fn == kRMin ? std::numeric_limits<int64_t>::max()
                                        : 0;
    std::fill(acc.begin(), acc.end(), init);
    std::fill(iacc.begin(), iacc.end(), iinit);
    for_each_index(xs, [&](int64_t i, const int64_t* idx) {
      int64_t o = 0;
      for (int d = 0; d < nd; ++d) o += red[d] ? 0 : idx[d] * kst[d];
      if (fl) {
        const double v = get_f(in[0], i);
        double& a = acc[static_cast<size_t>(o)];
        switch (fn) {
          case kRSum: case kRMean: a += v; break;
          case kRProd: a *= v; break;
          case kRMax: a = (v > a || std::isnan(v)) ? v : a; break;
          case kRMin: a = (v < a || std::isnan(v)) ? v : a; break;
        }
      } else {
        const int64_t v = get_i(in[0], i);
        int64_t& a = iacc[static_cast<size_t>(o)];
        switch (fn) {
          case kRSum: case kRMean: a += v; break;
          case kRProd: a *= v; break;
          case kRMax: a = v > a ? v : a; break;
          case kRMin: a = v < a ? v : a; break;
        }
      }
    });
    for (int64_t o = 0; o < n_out; ++o) {
      if (fl) put_f(out[0], o, fn == kRMean ? acc[static_cast<size_t>(o)] / static_cast<double>(count) : acc[static_cast<size_t>(o)]);
      else put_i(out[0], o, fn == kRMean && count ? iacc[static_cast<size_t>(o)] / count : iacc[static_cast<size_t>(o)]);
    }
  }

  static void shape_of(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    int64_t st = 0, en = 0;
    shape_of_bounds(op, in[0].shape.ndim, &st, &en);
    for (int64_t i = st; i < en; ++i) put_i(out[0], i - st, in[0].shape.d[i]);
  }
};

}  // namespace cyb
