// The nn ops of graph v2 (op.h tags 50-59: conv, conv_transpose, matmul_nd, instance_norm, group_norm,
// resize, concat, pool, softmax_axis; 85: attention_nd), one definition for the cpu backend's reference level
// (M = StdMath) and nox (M = NoxMath; core/math_policy.h): every output summed in double in index
// order, rounded once to f32. docs/graph.md "Version 2".
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/array_elems.h"
#include "core/errors.h"
#include "core/exec_context.h"
#include "dispatch/op.h"
#include "dispatch/op_schema.h"
#include "dispatch/nn_geom.h"

namespace cyb {

template <class M>
struct ArrayNnKernels {
  // x [N, C, in0, in1] with in1 = 1 for 1-D; positions flattened per (n, c).
  static int64_t sp(const ConvGeom& g) { return g.in[0] * g.in[1]; }
  static int64_t osp(const ConvGeom& g) { return g.out[0] * g.out[1]; }
  static int64_t ksz(const ConvGeom& g) { return g.k[0] * g.k[1]; }

  static void conv(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext&) {
    const ConvGeom g = conv_geom(op, in, n_in);
    const float* x = in[0].f32();
    F32View wv(in[1]);  // f32, or f16 widened once per call
    const float* w = wv.get();
    const float* bias = n_in > 2 ? in[2].f32() : nullptr;
    float* y = out[0].f32();
    const int64_t Cg = g.C / g.group, Og = g.O / g.group, KK = ksz(g);
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < g.O; ++o) {
        const int64_t c0 = (o / Og) * Cg;
        for (int64_t p0 = 0; p0 < g.out[0]; ++p0)
          for (int64_t p1 = 0; p1 < g.out[1]; ++p1) {
            double s = bias ? bias[o] : 0.0;
            for (int64_t c = 0; c < Cg; ++c) {
              const float* xc = x + (n * g.C + c0 + c) * sp(g);
              const float* wc = w + (o * Cg + c) * KK;
              for (int64_t j0 = 0; j0 < g.k[0]; ++j0) {
                const int64_t i0 = p0 * g.stride[0] + j0 * g.dil[0] - g.pb[0];
                if (i0 < 0 || i0 >= g.in[0]) continue;
                for (int64_t j1 = 0; j1 < g.k[1]; ++j1) {
                  const int64_t i1 = p1 * g.stride[1] + j1 * g.dil[1] - g.pb[1];
                  if (i1 < 0 || i1 >= g.in[1]) continue;
                  s += static_cast<double>(xc[i0 * g.in[1] + i1]) * wc[j0 * g.k[1] + j1];
                }
              }
            }
            y[((n * g.O + o) * g.out[0] + p0) * g.out[1] + p1] = static_cast<float>(
                conv_activation<double>(op.a.activation, static_cast<double>(op.a.alpha), s,
                                        [](double v) { return M::exp(v); }));
          }
      }
  }

  // y[n, o, q] = bias[o] + sum over (c in o's group, j, i with q = i*stride + j*dil - pb) x[n, c, i] W[c, o % Og, j].
  static void conv_transpose(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext&) {
    const ConvGeom g = conv_geom(op, in, n_in);
    const float* x = in[0].f32();
    F32View wv(in[1]);  // f32, or f16 widened once per call
    const float* w = wv.get();
    const float* bias = n_in > 2 ? in[2].f32() : nullptr;
    float* y = out[0].f32();
    const int64_t Cg = g.C / g.group, Og = g.O / g.group, KK = ksz(g);
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < g.O; ++o) {
        const int64_t grp = o / Og, ol = o % Og;
        for (int64_t q0 = 0; q0 < g.out[0]; ++q0)
          for (int64_t q1 = 0; q1 < g.out[1]; ++q1) {
            double s = bias ? bias[o] : 0.0;
            for (int64_t j0 = 0; j0 < g.k[0]; ++j0) {
              const int64_t t0 = q0 + g.pb[0] - j0 * g.dil[0];
              if (t0 < 0 || t0 % g.stride[0]) continue;
              const int64_t i0 = t0 / g.stride[0];
              if (i0 >= g.in[0]) continue;
              for (int64_t j1 = 0; j1 < g.k[1]; ++j1) {
                const int64_t t1 = q1 + g.pb[1] - j1 * g.dil[1];
                if (t1 < 0 || t1 % g.stride[1]) continue;
                const int64_t i1 = t1 / g.stride[1];
                if (i1 >= g.in[1]) continue;
                for (int64_t c = 0; c < Cg; ++c) {
                  const int64_t ci = grp * Cg + c;
                  s += static_cast<double>(x[(n * g.C + ci) * sp(g) + i0 * g.in[1] + i1]) *
                       w[((ci * Og + ol) * KK) + j0 * g.k[1] + j1];
                }
              }
            }
            y[((n * g.O + o) * g.out[0] + q0) * g.out[1] + q1] = static_cast<float>(s);
          }
      }
  }

  static void matmul_nd(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const MatmulGeom g = matmul_geom(op, in[0].shape, in[1].shape);
    const float* a = in[0].f32();
    const float* b = in[1].f32();
    float* y = out[0].f32();
    for_each_index(g.batch_shape, [&](int64_t bi, const int64_t* idx) {
      int64_t ao = 0, bo = 0;
      for (int d = 0; d < g.batch_shape.ndim; ++d) {
        ao += idx[d] * g.a_bstride[d];
        bo += idx[d] * g.b_bstride[d];
      }
      const float* am = a + ao * g.M * g.K;
      const float* bm = b + bo * g.K * g.N;
      float* ym = y + bi * g.M * g.N;
      for (int64_t m = 0; m < g.M; ++m)
        for (int64_t nn = 0; nn < g.N; ++nn) {
          double s = 0.0;
          for (int64_t k = 0; k < g.K; ++k) s += static_cast<double>(am[m * g.K + k]) * bm[k * g.N + nn];
          ym[m * g.N + nn] = static_cast<float>(s);
        }
    });
  }

  // instance_norm (groups of 1 channel) and group_norm: mean / variance in double over each group's
  // channels and spatial positions, two passes.
  static void norm_groups(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int64_t N = xs.d[0], C = xs.d[1], S = xs.ndim > 2 ? xs.numel() / std::max<int64_t>(1, N * C) : 1;
    const int64_t G = op.kind == OpKind::GroupNorm ? op.a.group : C, Cg = G ? C / G : 0;
    const float* x = in[0].f32();
    const float* sc = in[1].f32();
    const float* bi = in[2].f32();
    float* y = out[0].f32();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t gi = 0; gi < G; ++gi) {
        const int64_t base = (n * C + gi * Cg) * S, cnt = Cg * S;
        if (cnt == 0) continue;
        double mean = 0.0;
        for (int64_t i = 0; i < cnt; ++i) mean += x[base + i];
        mean /= static_cast<double>(cnt);
        double var = 0.0;
        for (int64_t i = 0; i < cnt; ++i) {
          const double d = x[base + i] - mean;
          var += d * d;
        }
        var /= static_cast<double>(cnt);
        const double inv = 1.0 / M::sqrt(var + static_cast<double>(op.a.eps));
        for (int64_t c = 0; c < Cg; ++c) {
          const int64_t ch = gi * Cg + c;
          for (int64_t s = 0; s < S; ++s) {
            const int64_t i = base + c * S + s;
            y[i] = static_cast<float>((x[i] - mean) * inv * sc[ch] + bi[ch]);
          }
        }
      }
  }

  static void resize(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const Shape& os = out[0].shape;
    const int nd = xs.ndim;
    // Per dim and output index: its taps (dispatch/nn_geom.cc resize_taps: one for nearest, up to two
    // for linear, four for cubic; the linear ones shared with the GPU kernel's tables).
    struct Taps {
      int n;
      int64_t i[4];
      double w[4];
    };
    std::vector<std::vector<Taps>> taps(static_cast<size_t>(nd));
    for (int d = 0; d < nd; ++d)
      for (int64_t o = 0; o < os.d[d]; ++o) {
        Taps t{};
        t.n = resize_taps(op, o, xs.d[d], os.d[d], t.i, t.w);
        taps[static_cast<size_t>(d)].push_back(t);
      }
    int64_t st[Shape::kMaxDims];
    strides_of(xs, st);
    const float* x = in[0].f32();
    float* y = out[0].f32();
    for_each_index(os, [&](int64_t li, const int64_t* idx) {
      // the product of every dim's taps, dim 0's changing fastest; a zero weight skips its terms
      const Taps* td[Shape::kMaxDims];
      int64_t total = 1;
      for (int d = 0; d < nd; ++d) {
        td[d] = &taps[static_cast<size_t>(d)][static_cast<size_t>(idx[d])];
        total *= td[d]->n;
      }
      double s = 0.0;
      for (int64_t m = 0; m < total; ++m) {
        double wt = 1.0;
        int64_t off = 0, r = m;
        for (int d = 0; d < nd && wt != 0.0; ++d) {
          const int k = static_cast<int>(r % td[d]->n);
          r /= td[d]->n;
          wt *= td[d]->w[k];
          off += td[d]->i[k] * st[d];
        }
        if (wt != 0.0) s += wt * x[off];
      }
      y[li] = static_cast<float>(s);
    });
  }

  static void concat(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext&) {
    const Shape& os = out[0].shape;
    const int ax = nn_axis(op, os.ndim);
    const size_t es = elem_bytes(out[0].dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= os.d[d];
    for (int d = ax + 1; d < os.ndim; ++d) inner *= os.d[d];
    auto* y = static_cast<uint8_t*>(out[0].data);
    const size_t row = static_cast<size_t>(os.d[ax] * inner) * es;
    size_t at = 0;
    for (int i = 0; i < n_in; ++i) {
      const size_t chunk = static_cast<size_t>(in[i].shape.d[ax] * inner) * es;
      if (chunk == 0) continue;
      const auto* x = static_cast<const uint8_t*>(in[i].data);
      for (int64_t o = 0; o < outer; ++o) std::memcpy(y + static_cast<size_t>(o) * row + at, x + static_cast<size_t>(o) * chunk, chunk);
      at += chunk;
    }
  }

  static void pool(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext&) {
    const ConvGeom g = conv_geom(op, in, n_in);
    pool_planes(op, g, in[0].f32(), out[0].f32(), 0, g.N * g.C);
  }
  // pool over the planes (n, c) in [nc0, nc1) (the cpu's threaded kernel splits them).
  static void pool_planes(const Op& op, const ConvGeom& g, const float* x, float* y, int64_t nc0, int64_t nc1) {
    const bool mx = op.a.mode == 1;
    for (int64_t nc = nc0; nc < nc1; ++nc) {
      const float* xc = x + nc * sp(g);
      for (int64_t p0 = 0; p0 < g.out[0]; ++p0)
        for (int64_t p1 = 0; p1 < g.out[1]; ++p1) {
          double s = mx ? -std::numeric_limits<double>::infinity() : 0.0;
          int64_t cnt = 0;
          for (int64_t j0 = 0; j0 < g.k[0]; ++j0) {
            const int64_t i0 = p0 * g.stride[0] + j0 * g.dil[0] - g.pb[0];
            if (i0 < 0 || i0 >= g.in[0]) continue;
            for (int64_t j1 = 0; j1 < g.k[1]; ++j1) {
              const int64_t i1 = p1 * g.stride[1] + j1 * g.dil[1] - g.pb[1];
              if (i1 < 0 || i1 >= g.in[1]) continue;
              const double v = xc[i0 * g.in[1] + i1];
              if (mx) s = (v > s || std::isnan(v)) ? v : s;
              else s += v;
              ++cnt;
            }
          }
          if (!mx) {
            if (op.a.count_include_pad) {  // the window clipped to the padded input
              cnt = 1;
              for (int d = 0; d < g.sd; ++d) {
                const int64_t p = d == 0 ? p0 : p1;
                const int64_t b = p * g.stride[d] - g.pb[d];
                const int64_t e = std::min(b + g.k[d], g.in[d] + g.pe[d]);
                cnt *= e - b;
              }
            }
            s = cnt ? s / static_cast<double>(cnt) : 0.0;
          }
          y[(nc * g.out[0] + p0) * g.out[1] + p1] = static_cast<float>(s);
        }
    }
  }

  static void softmax_axis(const Op& op, const Tensor* in, int, Tensor* out, int, ExecContext&) {
    const Shape& xs = in[0].shape;
    const int ax = nn_axis(op, xs.ndim);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= xs.d[d];
    for (int d = ax + 1; d < xs.ndim; ++d) inner *= xs.d[d];
    const int64_t D = xs.d[ax];
    const float* x = in[0].f32();
    float* y = out[0].f32();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * D * inner + i;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t d = 0; d < D; ++d) m = std::max(m, static_cast<double>(x[base + d * inner]));
        double s = 0.0;
        for (int64_t d = 0; d < D; ++d) s += M::exp(x[base + d * inner] - m);
        for (int64_t d = 0; d < D; ++d) y[base + d * inner] = static_cast<float>(M::exp(x[base + d * inner] - m) / s);
      }
  }

  // attention_nd (op.h): per output row (b, h, t), the scores scale * q.k of the attended keys (each
  // dot product summed in double in index order), their softmax (max subtracted), times v summed in
  // double in key order, rounded once; a row with no attended key is 0. Rows split over the
  // context's threads (one thread on nox): each row is computed the same way wherever it runs.
  static void attention_nd(const Op& op, const Tensor* in, int n_in, Tensor* out, int, ExecContext& ctx) {
    const Shape& os = out[0].shape;
    const Shape &qs = in[0].shape, &ks = in[1].shape, &vs = in[2].shape;
    const int64_t H = os.d[1], T = os.d[2], Dv = os.d[3], D = qs.d[3], S = ks.d[2];
    // element strides of the batch and head dims (0 along a broadcast dim)
    auto bh = [](const Shape& s, int64_t block) {  // block: the elements of one (b, h)
      return std::array<int64_t, 2>{s.d[0] == 1 ? 0 : s.d[1] * block, s.d[1] == 1 ? 0 : block};
    };
    const auto qst = bh(qs, T * D), kst = bh(ks, S * D), vst = bh(vs, S * Dv);
    const bool has_mask = n_in > 3;
    int64_t mst[4] = {0, 0, 0, 0};
    const uint8_t* mk = nullptr;
    if (has_mask) {
      const Shape& ms = in[3].shape;
      mk = static_cast<const uint8_t*>(in[3].data);
      int64_t st = 1;
      for (int i = ms.ndim - 1; i >= 0; --i) {
        mst[i + 4 - ms.ndim] = ms.d[i] == 1 ? 0 : st;
        st *= ms.d[i];
      }
    }
    const float* q = in[0].f32();
    const float* k = in[1].f32();
    const float* v = in[2].f32();
    float* y = out[0].f32();
    const double scale = op.a.scale;
    auto rows = [&](int64_t r0, int64_t r1) {
      std::vector<double> sc(static_cast<size_t>(S)), acc(static_cast<size_t>(Dv));
      std::vector<char> keep(static_cast<size_t>(S));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / (H * T), h = (r / T) % H, t = r % T;
        const float* qr = q + b * qst[0] + h * qst[1] + t * D;
        const float* kb = k + b * kst[0] + h * kst[1];
        const float* vb = v + b * vst[0] + h * vst[1];
        double mx = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (int64_t j = 0; j < S; ++j) {
          keep[static_cast<size_t>(j)] = !mk || mk[b * mst[0] + h * mst[1] + t * mst[2] + j * mst[3]];
          if (!keep[static_cast<size_t>(j)]) continue;
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * kb[j * D + d];
          sc[static_cast<size_t>(j)] = dot * scale;
          mx = any ? std::max(mx, sc[static_cast<size_t>(j)]) : sc[static_cast<size_t>(j)];
          any = true;
        }
        float* yr = y + r * Dv;
        if (!any) {
          std::fill(yr, yr + Dv, 0.f);
          continue;
        }
        double sum = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < S; ++j) {
          if (!keep[static_cast<size_t>(j)]) continue;
          const double e = M::exp(sc[static_cast<size_t>(j)] - mx);
          sum += e;
          for (int64_t d = 0; d < Dv; ++d) acc[static_cast<size_t>(d)] += e * vb[j * Dv + d];
        }
        for (int64_t d = 0; d < Dv; ++d) yr[d] = static_cast<float>(acc[static_cast<size_t>(d)] / sum);
      }
    };
    const int64_t n = os.numel() / std::max<int64_t>(Dv, 1);
    if (Dv == 0 || n == 0) return;
    if (ctx.pool() && n > 1) ctx.pool()->parallel_for(n, rows);
    else rows(0, n);
  }
};

}  // namespace cyb
