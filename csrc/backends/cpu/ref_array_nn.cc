// The fast paths of the nn ops of graph v2 that the x86 levels register (kernels_x86_ops.inc): conv as
// im2col + that level's matmul, matmul_nd as one level matmul per batch. Their reference kernels
// (shared with nox) are dispatch/ref/array_nn_kernels.h. docs/graph.md "Version 2".
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_common.h"
#include "core/array_elems.h"
#include "core/errors.h"
#include "dispatch/nn_geom.h"
#include "dispatch/op_schema.h"

namespace cyb {
namespace cpu {
namespace {

// x [N, C, in0, in1] with in1 = 1 for 1-D; positions flattened per (n, c).
inline int64_t sp(const ConvGeom& g) { return g.in[0] * g.in[1]; }
inline int64_t osp(const ConvGeom& g) { return g.out[0] * g.out[1]; }
inline int64_t ksz(const ConvGeom& g) { return g.k[0] * g.k[1]; }

// Disables the context's weight cache for one call: the fast paths hand run-time arrays (and
// transposed copies in scratch) to the level matmul as its weight.
struct NoWeightCache {
  ExecContext& c;
  WeightCache* keep;
  explicit NoWeightCache(ExecContext& ctx) : c(ctx), keep(ctx.weight_cache()) { c.set_weight_cache(nullptr); }
  ~NoWeightCache() { c.set_weight_cache(keep); }
};

}  // namespace

// conv as im2col + the level's matmul: per image, group and chunk of output positions, rows of
// the patch matrix [positions, C/group * k] times the group's weights [O/group, C/group * k]^T,
// then the product (positions-major) transposed into [O, positions] with the bias.
void conv_im2col(const Op& op, const Tensor* in, int n_in, Tensor* out, ExecContext& ctx, LevelMatmul mm) {
  const ConvGeom g = conv_geom(op, in, n_in);
  const int64_t Cg = g.C / g.group, Og = g.O / g.group, KK = ksz(g), K = Cg * KK, P = osp(g);
  if (g.N == 0 || g.O == 0 || P == 0) return;
  float* y = out[0].f32();
  const float* bias = n_in > 2 ? in[2].f32() : nullptr;
  if (K == 0) {  // no input channels: the bias alone
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t o = 0; o < g.O; ++o)
        for (int64_t p = 0; p < P; ++p) y[(n * g.O + o) * P + p] = bias ? bias[o] : 0.f;
    return;
  }
  NoWeightCache nwc(ctx);
  const int64_t chunk = std::min<int64_t>(P, std::max<int64_t>(64, (int64_t{1} << 22) / K));
  float* cols = scratch<float>(kScratchNorm, static_cast<size_t>(chunk * K));
  float* prod = scratch<float>(kScratchGateUp, static_cast<size_t>(chunk * Og));
  const float* x = in[0].f32();
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.group; ++gi) {
      const float* xg = x + (n * g.C + gi * Cg) * sp(g);
      Tensor W = in[1];
      W.data = const_cast<float*>(in[1].f32() + gi * Og * K);
      W.shape = Shape{Og, K};
      for (int64_t p0 = 0; p0 < P; p0 += chunk) {
        const int64_t rows = std::min(chunk, P - p0);
        parallel_rows(ctx, rows, std::max<int64_t>(1, 8192 / K), [&](int64_t r0, int64_t r1, int) {
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t p = p0 + r, q0 = p / g.out[1], q1 = p % g.out[1];
            float* row = cols + r * K;
            for (int64_t c = 0; c < Cg; ++c) {
              const float* xc = xg + c * sp(g);
              for (int64_t j0 = 0; j0 < g.k[0]; ++j0) {
                const int64_t i0 = q0 * g.stride[0] + j0 * g.dil[0] - g.pb[0];
                float* dst = row + (c * g.k[0] + j0) * g.k[1];
                if (i0 < 0 || i0 >= g.in[0]) {
                  std::fill(dst, dst + g.k[1], 0.f);
                  continue;
                }
                const float* xr = xc + i0 * g.in[1];
                for (int64_t j1 = 0; j1 < g.k[1]; ++j1) {
                  const int64_t i1 = q1 * g.stride[1] + j1 * g.dil[1] - g.pb[1];
                  dst[j1] = i1 < 0 || i1 >= g.in[1] ? 0.f : xr[i1];
                }
              }
            }
          }
        });
        mm(cols, rows, K, W, nullptr, prod, ctx);
        float* yg = y + (n * g.O + gi * Og) * P + p0;
        parallel_rows(ctx, Og, 1, [&](int64_t o0, int64_t o1, int) {
          for (int64_t o = o0; o < o1; ++o) {
            const float b = bias ? bias[gi * Og + o] : 0.f;
            float* yo = yg + o * P;
            for (int64_t r = 0; r < rows; ++r) yo[r] = prod[r * Og + o] + b;
          }
        });
      }
    }
}

// matmul_nd per batch matrix: b's matrix transposed into scratch as the level matmul's weight.
void matmul_nd_fast(const Op& op, const Tensor* in, int, Tensor* out, ExecContext& ctx, LevelMatmul mm) {
  const MatmulGeom g = matmul_geom(op, in[0].shape, in[1].shape);
  float* y = out[0].f32();
  if (g.M == 0 || g.N == 0 || g.batch == 0) return;
  if (g.K == 0) {
    std::fill(y, y + g.batch * g.M * g.N, 0.f);
    return;
  }
  NoWeightCache nwc(ctx);
  float* bt = scratch<float>(kScratchGateUp, static_cast<size_t>(g.N * g.K));
  const float* a = in[0].f32();
  const float* b = in[1].f32();
  int64_t last_bo = -1;
  for_each_index(g.batch_shape, [&](int64_t bi, const int64_t* idx) {
    int64_t ao = 0, bo = 0;
    for (int d = 0; d < g.batch_shape.ndim; ++d) {
      ao += idx[d] * g.a_bstride[d];
      bo += idx[d] * g.b_bstride[d];
    }
    if (bo != last_bo) {
      const float* bm = b + bo * g.K * g.N;
      parallel_rows(ctx, g.N, std::max<int64_t>(1, 4096 / g.K), [&](int64_t n0, int64_t n1, int) {
        for (int64_t nn = n0; nn < n1; ++nn)
          for (int64_t k = 0; k < g.K; ++k) bt[nn * g.K + k] = bm[k * g.N + nn];
      });
      last_bo = bo;
    }
    Tensor W;
    W.dtype = DType::F32;
    W.shape = Shape{g.N, g.K};
    W.data = bt;
    mm(a + ao * g.M * g.K, g.M, g.K, W, nullptr, y + bi * g.M * g.N, ctx);
  });
}

}  // namespace cpu
}  // namespace cyb
