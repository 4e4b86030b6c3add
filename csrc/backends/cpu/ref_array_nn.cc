// The fast path of conv_transpose that the x86 levels register (kernels_x86_ops.inc): that level's
// panel GEMM then a col2im scatter-add (conv and matmul_nd have their own panel GEMM, nn_x86.inc). The
// reference kernels of the nn ops (shared with nox) are dispatch/ref/array_nn_kernels.h. docs/graph.md
// "Version 2".
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_common.h"
#include "core/array_elems.h"
#include "core/errors.h"
#include "core/math_policy.h"
#include "dispatch/nn_geom.h"
#include "dispatch/ref/array_nn_kernels.h"
#include "dispatch/op_schema.h"
#include "dispatch/op_schema_index.h"

namespace cyb {
namespace cpu {
namespace {

// x [N, C, in0, in1] with in1 = 1 for 1-D; positions flattened per (n, c).
inline int64_t sp(const ConvGeom& g) { return g.in[0] * g.in[1]; }
inline int64_t osp(const ConvGeom& g) { return g.out[0] * g.out[1]; }
inline int64_t ksz(const ConvGeom& g) { return g.k[0] * g.k[1]; }

}  // namespace

// conv_transpose as the level's GEMM then col2im: per image, group and chunk of input positions,
// cols [positions, O/group * k] = x^T [positions, C/group] @ W [C/group, O/group * k] (x and W read
// where they lie), and each column (o, j) of position p's row is added at
// y[o, p * stride + j * dilation - pad_begin] over the bias (threads own output channels: no two
// write one element).
void conv_transpose_col2im(const Op& op, const Tensor* in, int n_in, Tensor* out, ExecContext& ctx, StridedGemm gemm) {
  const ConvGeom g = conv_geom(op, in, n_in);
  const int64_t Cg = g.C / g.group, Og = g.O / g.group, KK = ksz(g), NC = Og * KK, P = sp(g), Q = osp(g);
  if (g.N == 0 || g.O == 0 || Q == 0) return;
  float* y = out[0].f32();
  const float* bias = n_in > 2 ? in[2].f32() : nullptr;
  parallel_rows(ctx, g.N * g.O, std::max<int64_t>(1, 16384 / Q), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) std::fill(y + r * Q, y + (r + 1) * Q, bias ? bias[r % g.O] : 0.f);
  });
  if (Cg == 0 || P == 0 || NC == 0) return;
  const int64_t chunk = std::min<int64_t>(P, std::max<int64_t>(64, (int64_t{1} << 18) / NC));
  float* cols = scratch<float>(kScratchGateUp, static_cast<size_t>(chunk * NC));
  const float* x = in[0].f32();
  // W read in place (f32); f16 weights widened: into the weight cache where the context has one
  // (once per model; the f16 pages then handed back), else per call
  F32View wv(in[1]);
  const float* w = nullptr;
  if (in[1].dtype != DType::F32 && ctx.weight_cache()) {
    const size_t n = static_cast<size_t>(in[1].shape.numel());
    w = static_cast<const float*>(ctx.weight_cache()->get(
        wv.key(), 0x43570000, n * sizeof(float),
        [&](void* dst) {
          for (size_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = static_cast<float>(get_f(in[1], static_cast<int64_t>(i)));
        },
        wv.source_bytes()));  // "CW"
  } else {
    w = wv.get();
  }
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.group; ++gi) {
      const float* xg = x + (n * g.C + gi * Cg) * P;
      for (int64_t p0 = 0; p0 < P; p0 += chunk) {
        const int64_t rows = std::min(chunk, P - p0);
        // A(r, c) = x[c, p0 + r], B(c, j) = W[gi * Cg + c, j]
        gemm(xg + p0, 1, P, w + gi * Cg * NC, NC, 1, rows, NC, Cg, cols, NC, ctx);
        float* yg = y + (n * g.O + gi * Og) * Q;
        parallel_rows(ctx, Og, 1, [&](int64_t o0, int64_t o1, int) {
          for (int64_t r = 0; r < rows; ++r) {  // cols row by row (in memory order), this item's channels
            const int64_t p = p0 + r, i0 = p / g.in[1], i1 = p % g.in[1];
            for (int64_t o = o0; o < o1; ++o) {
              float* yo = yg + o * Q;
              const float* cr = cols + r * NC + o * KK;
              for (int64_t j0 = 0; j0 < g.k[0]; ++j0) {
                const int64_t q0 = i0 * g.stride[0] + j0 * g.dil[0] - g.pb[0];
                if (q0 < 0 || q0 >= g.out[0]) continue;
                float* yr = yo + q0 * g.out[1];
                for (int64_t j1 = 0; j1 < g.k[1]; ++j1) {
                  const int64_t q1 = i1 * g.stride[1] + j1 * g.dil[1] - g.pb[1];
                  if (q1 >= 0 && q1 < g.out[1]) yr[q1] += cr[j0 * g.k[1] + j1];
                }
              }
            }
          }
        });
      }
    }
}

namespace {

// n elements of es bytes, each the value at v.
void fill_elems(uint8_t* dst, int64_t n, const uint8_t* v, size_t es) {
  if (n <= 0) return;
  switch (es) {
    case 1: std::memset(dst, *v, static_cast<size_t>(n)); return;
    case 2: { uint16_t t; std::memcpy(&t, v, 2); std::fill_n(reinterpret_cast<uint16_t*>(dst), n, t); return; }
    case 4: { uint32_t t; std::memcpy(&t, v, 4); std::fill_n(reinterpret_cast<uint32_t*>(dst), n, t); return; }
    case 8: { uint64_t t; std::memcpy(&t, v, 8); std::fill_n(reinterpret_cast<uint64_t*>(dst), n, t); return; }
    default:
      for (int64_t i = 0; i < n; ++i) std::memcpy(dst + static_cast<size_t>(i) * es, v, es);
  }
}

// out[idx] = x[first + idx - before] per dim within [0, kept); outside it the fill value (mode 0),
// the mirror (1, reflect) or the nearest kept element (2, edge), as the reference's pad / pad_dyn;
// here one output row (every dim but the last) at a time: its source row, then the last dim's pads
// around one memcpy. Threaded over rows.
void pad_rows(const Tensor& x, Tensor& y, const int64_t* first, const int64_t* kept, const int64_t* before, int mode,
              double value, ExecContext& ctx) {
  const Shape& xs = x.shape;
  const Shape& os = y.shape;
  const int nd = xs.ndim;
  const int64_t total = os.numel();
  if (total == 0) return;
  const size_t es = elem_bytes(x.dtype);
  uint8_t fill[8] = {};
  Tensor f;
  f.dtype = y.dtype;
  f.data = fill;
  put_f(f, 0, value);
  const auto* xb = static_cast<const uint8_t*>(x.data);
  auto* yb = static_cast<uint8_t*>(y.data);
  if (nd == 0) {
    std::memcpy(yb, xb, es);
    return;
  }
  int64_t st[Shape::kMaxDims];
  st[nd - 1] = 1;
  for (int d = nd - 2; d >= 0; --d) st[d] = st[d + 1] * xs.d[d + 1];
  const auto src_index = [&](int d, int64_t i, int64_t* j) {  // false: outside (constant mode)
    int64_t v = i - before[d];
    const int64_t n = kept[d];
    if (v < 0 || v >= n) {
      if (mode == 0) return false;
      if (mode == 1) v = v < 0 ? -v : 2 * (n - 1) - v;
      else v = v < 0 ? 0 : n - 1;
    }
    *j = first[d] + v;
    return true;
  };
  const int64_t W = os.d[nd - 1], rows = total / W;
  const int L = nd - 1;
  // the last dim: outputs [lo, hi) copy x's run from first + lo - before; the rest per element
  const int64_t lo = std::clamp<int64_t>(before[L], 0, W), hi = std::clamp<int64_t>(before[L] + kept[L], lo, W);
  parallel_rows(ctx, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, W)), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* dst = yb + static_cast<size_t>(r * W) * es;
      int64_t rem = r, off = 0;
      bool inside = true;
      for (int d = L - 1; d >= 0 && inside; --d) {
        int64_t j = 0;
        inside = src_index(d, rem % os.d[d], &j);
        rem /= os.d[d];
        off += j * st[d];
      }
      if (!inside) {
        fill_elems(dst, W, fill, es);
        continue;
      }
      const uint8_t* src = xb + static_cast<size_t>(off) * es;
      for (int64_t q = 0; q < lo; ++q) {
        int64_t j = 0;
        if (src_index(L, q, &j)) std::memcpy(dst + static_cast<size_t>(q) * es, src + static_cast<size_t>(j) * es, es);
        else std::memcpy(dst + static_cast<size_t>(q) * es, fill, es);
      }
      if (hi > lo)
        std::memcpy(dst + static_cast<size_t>(lo) * es, src + static_cast<size_t>(first[L] + lo - before[L]) * es,
                    static_cast<size_t>(hi - lo) * es);
      for (int64_t q = hi; q < W; ++q) {
        int64_t j = 0;
        if (src_index(L, q, &j)) std::memcpy(dst + static_cast<size_t>(q) * es, src + static_cast<size_t>(j) * es, es);
        else std::memcpy(dst + static_cast<size_t>(q) * es, fill, es);
      }
    }
  });
}

}  // namespace

void pad_fast(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext& ctx) {
  int64_t first[Shape::kMaxDims] = {}, kept[Shape::kMaxDims] = {}, before[Shape::kMaxDims] = {};
  if (op.kind == OpKind::PadDyn) {
    const PadDynPlan p = pad_dyn_plan(op, in);
    for (int d = 0; d < in[0].shape.ndim; ++d) {
      first[d] = p.first[d];
      kept[d] = p.kept[d];
      before[d] = p.before[d];
    }
    return pad_rows(in[0], out[0], first, kept, before, op.a.mode, op.a.fill, ctx);
  }
  for (int d = 0; d < in[0].shape.ndim; ++d) {
    kept[d] = in[0].shape.d[d];
    before[d] = op.a.ints[d];
  }
  pad_rows(in[0], out[0], first, kept, before, op.a.mode, op.a.value, ctx);
}

void pool_fast(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
  const ConvGeom g = conv_geom(op, in, n_in);
  const bool inside = g.pb[0] == 0 && g.pb[1] == 0 && (g.out[0] - 1) * g.stride[0] + (g.k[0] - 1) * g.dil[0] < g.in[0] &&
                      (g.out[1] - 1) * g.stride[1] + (g.k[1] - 1) * g.dil[1] < g.in[1];
  if (inside && g.out[0] > 0 && g.out[1] > 0) {
    // Every window within x (no pads, no ceil-mode window past the end: the UNet's 2 x 2 average
    // pools): per output row, each tap's values folded into a row of double sums (max: the running
    // max) in the reference's tap order, so the same values as pool_planes without its per-tap bounds
    // checks and count; threaded over output rows.
    const bool mx = op.a.mode == 1;
    const double cnt = static_cast<double>(g.k[0] * g.k[1]);  // avg: every tap counts, pads or not
    const float* x = in[0].f32();
    float* y = out[0].f32();
    parallel_rows(ctx, g.N * g.C * g.out[0], std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.out[1] * ksz(g))),
                  [&](int64_t r0, int64_t r1, int) {
                    std::vector<double> acc(static_cast<size_t>(g.out[1]));
                    for (int64_t r = r0; r < r1; ++r) {
                      const int64_t nc = r / g.out[0], p0 = r % g.out[0];
                      std::fill(acc.begin(), acc.end(), mx ? -std::numeric_limits<double>::infinity() : 0.0);
                      for (int64_t j0 = 0; j0 < g.k[0]; ++j0) {
                        const float* xr = x + nc * sp(g) + (p0 * g.stride[0] + j0 * g.dil[0]) * g.in[1];
                        for (int64_t j1 = 0; j1 < g.k[1]; ++j1) {
                          const float* xt = xr + j1 * g.dil[1];
                          if (mx) {
                            for (int64_t p1 = 0; p1 < g.out[1]; ++p1) {
                              const double v = xt[p1 * g.stride[1]];
                              double& a = acc[static_cast<size_t>(p1)];
                              a = (v > a || std::isnan(v)) ? v : a;
                            }
                          } else {
                            for (int64_t p1 = 0; p1 < g.out[1]; ++p1) acc[static_cast<size_t>(p1)] += xt[p1 * g.stride[1]];
                          }
                        }
                      }
                      float* yr = y + r * g.out[1];
                      for (int64_t p1 = 0; p1 < g.out[1]; ++p1)
                        yr[p1] = static_cast<float>(mx ? acc[static_cast<size_t>(p1)] : acc[static_cast<size_t>(p1)] / cnt);
                    }
                  });
    return;
  }
  const int64_t plane = std::max<int64_t>(1, g.out[0] * g.out[1] * g.k[0] * g.k[1]);
  parallel_rows(ctx, g.N * g.C, std::max<int64_t>(1, 16384 / plane), [&](int64_t b, int64_t e, int) {
    ArrayNnKernels<StdMath>::pool_planes(op, g, in[0].f32(), out[0].f32(), b, e);
  });
}

void constant_of_shape_fast(const Op& op, const Tensor*, int, Tensor* out, int, ExecContext& ctx) {
  const int64_t n = out[0].shape.numel();
  if (n == 0) return;
  uint8_t v[8] = {};
  Tensor f;
  f.dtype = out[0].dtype;
  f.data = v;
  put_f(f, 0, op.a.fill);
  const size_t es = elem_bytes(out[0].dtype);
  auto* y = static_cast<uint8_t*>(out[0].data);
  parallel_rows(ctx, n, 1 << 16, [&](int64_t b, int64_t e, int) { fill_elems(y + static_cast<size_t>(b) * es, e - b, v, es); });
}

// resize, mode nearest: a source index per output index and dim (as the reference picks them), then
// per output row (every dim but the last) one source row, its values gathered through the last
// dim's table (a copy where that dim keeps its size); threaded over rows. The values are copies,
// as the reference's (1.0 * x): equal. Linear: the reference.
void resize_fast(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) {
  using R = ArrayNnKernels<StdMath>;
  if (op.a.mode != 0) return R::resize(op, in, n_in, out, n_out, ctx);
  const Shape& xs = in[0].shape;
  const Shape& os = out[0].shape;
  const int nd = xs.ndim;
  if (nd == 0 || os.numel() == 0) return R::resize(op, in, n_in, out, n_out, ctx);
  std::vector<std::vector<int64_t>> src(static_cast<size_t>(nd));
  for (int d = 0; d < nd; ++d)
    for (int64_t o = 0; o < os.d[d]; ++o)
    {
      int64_t a = o, b = o;
      double f = 0.0;
      resize_source(op, o, xs.d[d], os.d[d], &a, &b, &f);  // the reference's coordinate rules (nn_geom.cc)
      src[static_cast<size_t>(d)].push_back(a);
    }
  int64_t st[Shape::kMaxDims];
  strides_of(xs, st);
  const int64_t W = os.d[nd - 1], rows = os.numel() / W;
  const std::vector<int64_t>& last = src[static_cast<size_t>(nd - 1)];
  const bool same_last = xs.d[nd - 1] == W;
  const float* x = in[0].f32();
  float* y = out[0].f32();
  parallel_rows(ctx, rows, std::max<int64_t>(1, 4096 / W), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t off = 0, rem = r;
      for (int d = nd - 2; d >= 0; --d) {
        off += src[static_cast<size_t>(d)][static_cast<size_t>(rem % os.d[d])] * st[d];
        rem /= os.d[d];
      }
      const float* xr = x + off;
      float* yr = y + r * W;
      if (same_last) std::memcpy(yr, xr, static_cast<size_t>(W) * sizeof(float));
      else
        for (int64_t i = 0; i < W; ++i) yr[i] = xr[last[static_cast<size_t>(i)]];
    }
  });
}

}  // namespace cpu
}  // namespace cyb
