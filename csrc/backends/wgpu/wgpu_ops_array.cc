#if defined(CYB_HAVE_WGPU)

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/wgpu/wgpu_backend_impl.h"
#include "backends/wgpu/wgpu_settings.h"
#include "core/array_elems.h"
#include "core/counter_rng.h"
#include "core/errors.h"
#include "dispatch/nn_geom.h"
#include "dispatch/op_schema.h"
#include "dispatch/op_schema_index.h"

namespace cyb {
namespace wgpu {

namespace {

// The parameter block of shaders/wgsl/array.wgsl and array_nn.wgsl (array.wgsl reads the first 160 bytes).
struct ArrayParams {
  uint32_t n = 0, nx = 0, code = 0, ndim = 0;
  float f0 = 0.f, f1 = 0.f;
  uint32_t base = 0;  // array.wgsl (pad_dyn), index.wgsl
  float one = 1.f;    // array_nn.wgsl: 1.0 at run time (its compensated sums)
  uint32_t shape[8] = {}, sa[8] = {}, sb[8] = {}, sc[8] = {};
  uint32_t u[20] = {};
};
static_assert(sizeof(ArrayParams) == 240, "array params: shaders/wgsl/array_params.wgsl struct P");

// The strides of x read as an array of the output's rank (right-aligned; 0 along broadcast dims).
void bcast_strides(const Shape& x, const Shape& out, uint32_t* st) {
  int64_t xs[Shape::kMaxDims] = {};
  strides_of(x, xs);
  const int off = out.ndim - x.ndim;
  for (int d = 0; d < out.ndim; ++d) {
    const int xd = d - off;
    st[d] = xd < 0 || x.d[xd] == 1 ? 0u : u(xs[xd]);
  }
}

void set_shape(ArrayParams& p, const Shape& s) {
  p.ndim = u(s.ndim);
  for (int d = 0; d < s.ndim; ++d) p.shape[d] = u(s.d[d]);
}

// REDUCE's layout (array_nn.wgsl, and typed.wgsl's integer REDUCE): the kept dims in shape / sa, the
// reduced ones' sizes and strides in sb / sc; returns {reduced dims, reduced elements per output}.
std::pair<int, int64_t> reduce_layout(const Op& op, const Shape& xs, ArrayParams& p) {
  int64_t xst[Shape::kMaxDims];
  strides_of(xs, xst);
  bool red[Shape::kMaxDims] = {};
  for (int d = 0; d < xs.ndim && d < Shape::kMaxDims; ++d) red[d] = op.a.n_ints == 0;
  for (int i = 0; i < op.a.n_ints; ++i) {
    const int64_t a = op.a.ints[i] < 0 ? op.a.ints[i] + xs.ndim : op.a.ints[i];
    if (a < 0 || a >= xs.ndim) throw_invalid_config("reduce.axes", "an axis outside the input's dims");
    red[a] = true;
  }
  int nk = 0, nr = 0;
  int64_t cnt = 1;
  for (int d = 0; d < xs.ndim && d < Shape::kMaxDims; ++d) {
    if (red[d]) {
      p.sb[nr] = u(xs.d[d]);
      p.sc[nr++] = u(xst[d]);
      cnt *= xs.d[d];
    } else {
      p.shape[nk] = u(xs.d[d]);
      p.sa[nk++] = u(xst[d]);
    }
  }
  p.ndim = u(nk);
  return {nr, cnt};
}

// Whether a conv runs as the tiled implicit GEMM of shaders/wgsl/conv_gemm.wgsl: one group (the
// direct kernel of array_nn.wgsl keeps grouped and depthwise convs, transposes and small shapes:
// under 16 output channels or 32 values of K = C k0 k1, where most of a 64 x 64 tile would be idle),
// and a grid of at most 65535 column tiles; CYB_WGPU_CONV=direct keeps every conv on the direct kernel.
bool conv_gemm_fits(const ConvGeom& g) {
  const int64_t cols = g.N * g.out[0] * g.out[1];
  return conv_gemm_setting() && g.group == 1 && g.O >= 16 && g.C * g.k[0] * g.k[1] >= 32 && (cols + 63) / 64 <= 65535 &&
         (g.O + 63) / 64 <= 65535;
}

}  // namespace

bool array_op_fits(const Op& op, const Tensor* in, int n_in) {
  const int64_t lim = int64_t{1} << 31;
  for (int i = 0; i < n_in; ++i)
    if (in[i].offset != 0 || in[i].shape.numel() >= lim || in[i].shape.numel() == 0) return false;
  // The outputs too (a broadcast, pad, resize, concat or matmul may be larger than any input);
  // inputs whose shapes do not make outputs (a load-time question without shapes) are declined.
  try {
    for (const Shape& s : infer_output_shapes(op, in, n_in))
      if (s.numel() >= lim) return false;
  } catch (const Error&) {
    return false;
  }
  return true;
}

// The array ops of graph v2 with WGSL kernels (supports() declined everything else).
void WgpuBackend::array_op(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  ArrayParams p;
  const Shape& ys = out[0].shape;
  WGPUBuffer yb = dev(out[0])->bufs[0];
  auto grid = [&](int64_t n, uint32_t* nx, uint32_t* ny) {
    const int64_t wgs = (n + 255) / 256;
    *nx = u(std::min<int64_t>(wgs, 65535));
    *ny = u((wgs + 65534) / 65535);
    p.n = u(n);
    p.nx = *nx;
  };
  uint32_t nx = 0, ny = 0;
  auto run = [&](const char* shader, const std::vector<std::string>& defs, const std::vector<Bind>& b) {
    st.dispatch(pipeline(g_, shader, defs), &p, sizeof(p), b.data(), b.size(), nx, ny, 1);
  };
  if ((op.kind == OpKind::Transpose || op.kind == OpKind::Slice) && in[0].dtype != DType::F32)
    return index_op(st, op, in, n_in, out);  // integer values: moved as words
  if (op.kind == OpKind::Cast || op.kind == OpKind::Range ||
      ((op.kind == OpKind::Binary || op.kind == OpKind::Unary || op.kind == OpKind::Reduce) &&
       (in[0].dtype != DType::F32 || out[0].dtype != DType::F32)))
    return typed_op(st, op, in, n_in, out);
  switch (op.kind) {
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Sqrt:
    case OpKind::Unary: {
      p.code = op.kind == OpKind::Sigmoid ? 32u : op.kind == OpKind::Tanh ? 33u : op.kind == OpKind::Sqrt ? 34u : u(op.a.fn);
      p.f0 = op.a.alpha;
      p.f1 = op.a.beta;
      grid(ys.numel(), &nx, &ny);
      return run("array", {"UNARY"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::Binary: {
      p.code = u(op.a.fn);
      set_shape(p, ys);
      bcast_strides(in[0].shape, ys, p.sa);
      bcast_strides(in[1].shape, ys, p.sb);
      grid(ys.numel(), &nx, &ny);
      return run("array", {"BINARY"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}});
    }
    case OpKind::Where: {  // cond, x, y: A = x, B = y, C = cond
      set_shape(p, ys);
      bcast_strides(in[1].shape, ys, p.sa);
      bcast_strides(in[2].shape, ys, p.sb);
      bcast_strides(in[0].shape, ys, p.sc);
      grid(ys.numel(), &nx, &ny);
      return run("array", {"WHERE"},
                 {{1, yb, 0, W}, {2, act(st, in[1]), 0, W}, {3, act(st, in[2]), 0, W}, {4, act(st, in[0]), 0, W}});
    }
    case OpKind::Transpose: {
      const Shape& xs = in[0].shape;
      int64_t xst[Shape::kMaxDims];
      strides_of(xs, xst);
      set_shape(p, ys);
      for (int d = 0; d < ys.ndim; ++d) {
        const int64_t pd = op.a.n_ints ? op.a.ints[d] : xs.ndim - 1 - d;
        p.sa[d] = u(xst[pd]);
      }
      grid(ys.numel(), &nx, &ny);
      return run("array", {"GATHER"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::Slice: {
      const Shape& xs = in[0].shape;
      int axis = 0;
      int64_t start = 0, count = 0;
      slice_bounds(op, xs, &axis, &start, &count);
      const int64_t step = op.a.n_ints > 2 ? op.a.ints[2] : 1;
      int64_t xst[Shape::kMaxDims];
      strides_of(xs, xst);
      set_shape(p, ys);
      for (int d = 0; d < ys.ndim; ++d) p.sa[d] = u(d == axis ? xst[d] * step : xst[d]);
      p.base = u(start * xst[axis]);
      grid(ys.numel(), &nx, &ny);
      return run("array", {"GATHER"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::Pad: {
      const Shape& xs = in[0].shape;
      int64_t xst[Shape::kMaxDims];
      strides_of(xs, xst);
      set_shape(p, ys);
      for (int d = 0; d < ys.ndim; ++d) {
        p.sa[d] = u(xst[d]);
        p.sb[d] = u(op.a.ints[d]);  // pads before (a negative one crops: two's complement, read as i32)
        p.sc[d] = u(xs.d[d]);
      }
      p.code = u(op.a.mode);
      p.f0 = op.a.value;
      grid(ys.numel(), &nx, &ny);
      return run("array", {"PAD"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::PadDyn: {  // the plan from the host pads: the kept part of x padded (array.wgsl PAD)
      const PadDynPlan pl = pad_dyn_plan(op, in);
      const Shape& xs = in[0].shape;
      int64_t xst[Shape::kMaxDims];
      strides_of(xs, xst);
      set_shape(p, ys);
      int64_t base = 0;
      for (int d = 0; d < ys.ndim; ++d) {
        p.sa[d] = u(xst[d]);
        p.sb[d] = u(pl.before[d]);
        p.sc[d] = u(pl.kept[d]);
        base += pl.first[d] * xst[d];
      }
      p.base = u(base);
      p.code = u(op.a.mode);
      p.f0 = op.a.fill;
      grid(ys.numel(), &nx, &ny);
      return run("array", {"PAD"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::Concat: {
      int64_t yst[Shape::kMaxDims];
      strides_of(ys, yst);
      const int axis = op.a.axis < 0 ? op.a.axis + ys.ndim : op.a.axis;
      int64_t at = 0;
      for (int j = 0; j < n_in; ++j) {
        const Shape& xs = in[j].shape;
        if (xs.numel() > 0) {
          p = ArrayParams{};
          set_shape(p, xs);
          for (int d = 0; d < xs.ndim; ++d) p.sa[d] = u(yst[d]);
          p.base = u(at * yst[axis]);
          grid(xs.numel(), &nx, &ny);
          run("array", {"SCATTER"}, {{1, yb, 0, W}, {2, act(st, in[j]), 0, W}});
        }
        at += xs.d[axis];
      }
      return;
    }
    case OpKind::Reduce: {
      const auto [nr, cnt] = reduce_layout(op, in[0].shape, p);
      p.u[0] = u(nr);
      p.u[1] = u(cnt);
      p.code = u(op.a.fn);
      grid(ys.numel(), &nx, &ny);
      return run("array_nn", {"REDUCE"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::SoftmaxAxis: {
      const Shape& xs = in[0].shape;
      const int ax = nn_axis(op, xs.ndim);
      int64_t inner = 1;
      for (int d = ax + 1; d < xs.ndim; ++d) inner *= xs.d[d];
      p.u[0] = u(xs.d[ax]);
      p.u[1] = u(inner);
      grid(xs.numel() / xs.d[ax], &nx, &ny);
      return run("array_nn", {"SOFTMAX"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::InstanceNorm:
    case OpKind::GroupNorm: {
      const Shape& xs = in[0].shape;
      const int64_t G = op.kind == OpKind::GroupNorm ? op.a.group : xs.d[1];
      // shaders/wgsl/inorm.wgsl: one workgroup a (batch, group) row
      const int64_t rows = xs.d[0] * G;
      const uint32_t wx = u(std::min<int64_t>(rows, 65535));
      const uint32_t q[8] = {u(rows), wx, u(xs.numel() / (xs.d[0] * xs.d[1])), u(xs.d[1]), u(xs.d[1] / G),
                             f2u(op.a.eps), f2u(1.f), 0};
      Bind b[] = {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}, {4, act(st, in[2]), 0, W}};
      st.dispatch(pipeline(g_, "inorm", {}), q, sizeof(q), b, wx, u((rows + 65534) / 65535), 1);
      return;
    }
    case OpKind::MatmulNd: {
      const MatmulGeom g = matmul_geom(op, in[0].shape, in[1].shape);
      set_shape(p, g.batch_shape);
      for (int d = 0; d < g.batch_shape.ndim; ++d) {
        p.sa[d] = u(g.a_bstride[d]);
        p.sb[d] = u(g.b_bstride[d]);
      }
      p.u[0] = u(g.M);
      p.u[1] = u(g.K);
      p.u[2] = u(g.N);
      grid(g.batch_shape.numel() * g.M * g.N, &nx, &ny);
      return run("array_nn", {"MATMUL"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}});
    }
    case OpKind::Conv:
    case OpKind::ConvTranspose: {
      const ConvGeom g = conv_geom(op, in, n_in);
      const int64_t v[15] = {g.C,         g.O,         g.in[0],  g.in[1],  g.out[0], g.out[1], g.k[0], g.k[1],
                             g.stride[0], g.stride[1], g.dil[0], g.dil[1], g.pb[0],  g.pb[1],  g.group};
      for (int k = 0; k < 15; ++k) p.u[k] = u(v[k]);
      std::vector<Bind> b = {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}};
      if (n_in > 2) b.push_back({4, act(st, in[2]), 0, W});
      const bool f16 = in[1].dtype == DType::F16;  // f16 weights: the kernels' F16 variant
      if (op.kind == OpKind::Conv && conv_gemm_fits(g)) {  // conv_gemm.wgsl: 64 x 64 output tiles
        const int64_t cols = g.N * g.out[0] * g.out[1], total = cols * g.O;
        p.n = u(cols);
        nx = u((cols + 63) / 64);
        ny = u((g.O + 63) / 64);
        // Split K where the grid has few tiles, as the tiled matmul (splitk_parts): parts of at
        // least kSplitKMinChunks chunks of 32, the parts within one binding.
        const int64_t nch = (g.C * g.k[0] * g.k[1] + 31) / 32;
        const int64_t fit = static_cast<int64_t>(g_.limits.maxStorageBufferBindingSize / 4) / total;
        int64_t splits = splitk_parts(int64_t{nx} * ny, std::min(nch / kSplitKMinChunks, fit));
        if (splits < 2) {
          std::vector<std::string> defs;
          if (n_in > 2) defs.push_back("BIAS");
          if (f16) defs.push_back("F16");
          return run("conv_gemm", defs, b);
        }
        const int64_t cps = (nch + splits - 1) / splits;
        splits = (nch + cps - 1) / cps;  // no empty part
        p.u[15] = u(splits);
        p.u[16] = u(cps);
        WGPUBuffer parts = st.scratch(State::kSplitKParts, uint64_t(splits * total) * 4)->bufs[0];
        Bind b1[] = {{1, parts, 0, W}, b[1], b[2]};
        st.dispatch(pipeline(g_, "conv_gemm", f16 ? std::vector<std::string>{"SPLITK", "F16"}
                                                  : std::vector<std::string>{"SPLITK"}),
                    &p, sizeof(p), b1, 3, nx, ny, u(splits));
        p.n = u(total);
        grid(total, &nx, &ny);
        std::vector<Bind> b2 = {{1, yb, 0, W}, {2, parts, 0, W}};
        if (n_in > 2) b2.push_back(b[3]);
        return run("conv_gemm", n_in > 2 ? std::vector<std::string>{"SPLITK_SUM", "BIAS"}
                                         : std::vector<std::string>{"SPLITK_SUM"}, b2);
      }
      grid(g.N * g.O * g.out[0] * g.out[1], &nx, &ny);
      std::vector<std::string> defs = {"CONV"};
      if (op.kind == OpKind::ConvTranspose) defs.push_back("TRANSPOSE");
      if (n_in > 2) defs.push_back("BIAS");
      if (f16) defs.push_back("F16");
      return run("array_nn", defs, b);
    }
    case OpKind::Pool: {
      const ConvGeom g = conv_geom(op, in, n_in);
      const int64_t v[20] = {g.C,         g.C,         g.in[0],    g.in[1],  g.out[0], g.out[1], g.k[0],
                             g.k[1],      g.stride[0], g.stride[1], g.dil[0], g.dil[1], g.pb[0],  g.pb[1],
                             1,           op.a.mode,   op.a.count_include_pad ? 1 : 0,      g.pe[0],  g.pe[1],
                             g.sd};
      for (int k = 0; k < 20; ++k) p.u[k] = u(v[k]);
      grid(g.N * g.C * g.out[0] * g.out[1], &nx, &ny);
      return run("array_nn", {"POOL"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::Resize: {
      // The source index pair and upper weight of every output index along every dim, from the
      // host (the coordinate rules in double, as the cpu reference computes them).
      const Shape& xs = in[0].shape;
      std::vector<float> tab;
      int64_t xst[Shape::kMaxDims];
      strides_of(xs, xst);
      set_shape(p, ys);
      for (int d = 0; d < xs.ndim; ++d) {
        p.sa[d] = u(xst[d]);
        p.sb[d] = u(tab.size());
        const int64_t n_in = xs.d[d], n_out = ys.d[d];
        for (int64_t o = 0; o < n_out; ++o) {
          int64_t a = o, b = o;
          double f = 0.0;
          resize_source(op, o, n_in, n_out, &a, &b, &f);
          const uint32_t ua = u(a), ub = u(b);
          float fa, fb;
          std::memcpy(&fa, &ua, 4);
          std::memcpy(&fb, &ub, 4);
          tab.push_back(fa);
          tab.push_back(fb);
          tab.push_back(static_cast<float>(f));
        }
      }
      Tensor tt;
      tt.dtype = DType::F32;
      tt.shape = Shape{static_cast<int64_t>(tab.size())};
      tt.data = tab.data();
      grid(ys.numel(), &nx, &ny);
      return run("array_nn", {"RESIZE"}, {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, tt), 0, W}});
    }
    case OpKind::Lstm: {  // shaders/wgsl/lstm.wgsl: h0 / c0 copied into the final-state outputs first
      const Shape& xs = in[0].shape;
      const int64_t S = xs.d[0], B = xs.d[1], I = xs.d[2], H = in[1].shape.d[0] / 4;
      if (n_in > 4) copy_tensor(st, &in[4], &out[1]);
      if (n_in > 5) copy_tensor(st, &in[5], &out[2]);
      const uint32_t q[8] = {u(S), u(B), u(I), u(H), n_in > 4 ? 1u : 0u, n_in > 5 ? 1u : 0u, f2u(1.f), 0};
      Bind b[] = {{1, yb, 0, W},
                  {2, act(st, in[0]), 0, W},
                  {3, act(st, in[1]), 0, W},
                  {4, act(st, in[2]), 0, W},
                  {5, act(st, in[3]), 0, W},
                  {6, dev(out[1])->bufs[0], 0, W},
                  {7, dev(out[2])->bufs[0], 0, W}};
      st.dispatch(pipeline(g_, "lstm", {}), q, sizeof(q), b, u(B), 1, 1);
      return;
    }
    default: return index_op(st, op, in, n_in, out);
  }
}

// typed.wgsl's element type codes
uint32_t typed_code(DType t) {
  return t == DType::F32 ? 0u : t == DType::I32 ? 1u : t == DType::I64 ? 2u : 3u;
}

void WgpuBackend::typed_op(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  ArrayParams p;
  const Shape& ys = out[0].shape;
  auto grid = [&](int64_t n) {
    const int64_t wgs = (n + 255) / 256;
    p.n = u(n);
    p.nx = u(std::min<int64_t>(wgs, 65535));
    return u((wgs + 65534) / 65535);
  };
  if (op.kind == OpKind::Range) {  // start and delta: host values (the shape rule read them too)
    p.u[2] = typed_code(out[0].dtype);
    p.u[3] = u(ys.numel());
    if (out[0].dtype == DType::F32) {
      p.f0 = static_cast<float>(get_f(in[0], 0));
      p.f1 = static_cast<float>(get_f(in[2], 0));
    } else {
      const uint64_t s0 = static_cast<uint64_t>(get_i(in[0], 0)), d0 = static_cast<uint64_t>(get_i(in[2], 0));
      p.u[4] = static_cast<uint32_t>(s0);
      p.u[5] = static_cast<uint32_t>(s0 >> 32);
      p.u[6] = static_cast<uint32_t>(d0);
      p.u[7] = static_cast<uint32_t>(d0 >> 32);
    }
    const uint32_t ny = grid(out[0].dtype == DType::F32 ? 1 : ys.numel());
    Bind b[] = {{1, dev(out[0])->bufs[0], 0, W}, {2, act(st, in[0]), 0, W}};  // (A: typed.wgsl's layout; unread)
    st.dispatch(pipeline(g_, "typed", {"RANGE"}), &p, sizeof(p), b, 2, p.nx, ny, 1);
    return;
  }
  if (op.kind == OpKind::Reduce) {  // i32 / i64 sum, max, min (array_nn.wgsl REDUCE's layout)
    const auto [nr, cnt] = reduce_layout(op, in[0].shape, p);
    p.u[0] = typed_code(in[0].dtype);
    p.u[2] = typed_code(out[0].dtype);
    p.u[4] = u(nr);
    p.u[5] = u(cnt);
    p.code = u(op.a.fn);
    const uint32_t ny = grid(ys.numel());
    Bind b[] = {{1, dev(out[0])->bufs[0], 0, W}, {2, act(st, in[0]), 0, W}};
    st.dispatch(pipeline(g_, "typed", {"REDUCE"}), &p, sizeof(p), b, 2, p.nx, ny, 1);
    return;
  }
  set_shape(p, ys);
  bcast_strides(in[0].shape, ys, p.sa);
  const bool binary = op.kind == OpKind::Binary;
  if (binary) bcast_strides(in[1].shape, ys, p.sb);
  p.u[0] = typed_code(in[0].dtype);
  p.u[1] = binary ? typed_code(in[1].dtype) : 0u;
  p.u[2] = typed_code(out[0].dtype);
  p.u[3] = u(ys.numel());
  p.code = op.kind == OpKind::Cast ? 128u : op.kind == OpKind::Unary ? 64u + u(op.a.fn) : u(op.a.fn);
  const int64_t n = out[0].dtype == DType::BOOL ? (ys.numel() + 3) / 4 : ys.numel();  // bool: a word each
  const int64_t wgs = (n + 255) / 256;
  const uint32_t nx = u(std::min<int64_t>(wgs, 65535)), ny = u((wgs + 65534) / 65535);
  p.n = u(n);
  p.nx = nx;
  std::vector<Bind> b = {{1, dev(out[0])->bufs[0], 0, W}, {2, act(st, in[0]), 0, W}};
  if (binary) b.push_back({3, act(st, in[1]), 0, W});
  (void)n_in;
  st.dispatch(pipeline(g_, "typed", {binary ? "BINARY" : "ONE"}), &p, sizeof(p), b.data(), b.size(), nx, ny, 1);
}

// Words of one element of the dtypes the index kernels move (f32, i32, i64); 0: none of them.
uint32_t index_words(DType t) {
  return t == DType::F32 || t == DType::I32 ? 1u : t == DType::I64 ? 2u : 0u;
}

// The index ops and the strided copies of other dtypes (shaders/wgsl/index.wgsl).
void WgpuBackend::index_op(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out) {
  (void)n_in;
  const uint64_t W = WGPU_WHOLE_SIZE;
  ArrayParams p;
  p.one = 1.f;
  const Shape& ys = out[0].shape;
  WGPUBuffer yb = dev(out[0])->bufs[0];
  p.u[19] = index_words(in[0].dtype);
  uint32_t nx = 0, ny = 0;
  auto grid = [&](int64_t n) {
    const int64_t wgs = (n + 255) / 256;
    nx = u(std::min<int64_t>(wgs, 65535));
    ny = u((wgs + 65534) / 65535);
    p.n = u(n);
    p.nx = nx;
  };
  auto run = [&](const char* def, const std::vector<Bind>& b) {
    st.dispatch(pipeline(g_, "index", {def}), &p, sizeof(p), b.data(), b.size(), nx, ny, 1);
  };
  // y = x read at base + sum_d c_d sa[d] (sa: x's strides, set by the caller)
  auto strided = [&](uint64_t base) {
    set_shape(p, ys);
    p.base = u(base);
    if (in[0].dtype == DType::BOOL) {  // one-byte elements: a word of four a invocation
      p.u[17] = u(ys.numel());
      grid((ys.numel() + 3) / 4);
      return run("STRIDED_BYTES", {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    grid(ys.numel());
    run("STRIDED", {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
  };
  int64_t xst[Shape::kMaxDims] = {};
  strides_of(in[0].shape, xst);
  switch (op.kind) {
    case OpKind::Transpose: {  // (f32 runs array.wgsl)
      for (int d = 0; d < ys.ndim; ++d) p.sa[d] = u(xst[op.a.n_ints ? op.a.ints[d] : in[0].shape.ndim - 1 - d]);
      return strided(0);
    }
    case OpKind::Slice: {
      int axis = 0;
      int64_t start = 0, count = 0;
      slice_bounds(op, in[0].shape, &axis, &start, &count);
      const int64_t step = op.a.n_ints > 2 ? op.a.ints[2] : 1;
      for (int d = 0; d < ys.ndim; ++d) p.sa[d] = u(d == axis ? xst[d] * step : xst[d]);
      return strided(static_cast<uint64_t>(start * xst[axis]));
    }
    case OpKind::SliceDyn: {  // the plan from the host bounds; a negative step wraps in u32 as it should
      const SliceDynPlan pl = slice_dyn_plan(op, in, n_in);
      int64_t base = 0;
      for (int d = 0; d < ys.ndim; ++d) {
        p.sa[d] = u(xst[d] * pl.step[d]);
        base += pl.start[d] * xst[d];
      }
      return strided(static_cast<uint64_t>(base));
    }
    case OpKind::Expand: {
      bcast_strides(in[0].shape, ys, p.sa);
      return strided(0);
    }
    case OpKind::Gather: {
      const Shape& xs = in[0].shape;
      const int ax = index_op_axis(op, xs.ndim);
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < ax; ++i) outer *= xs.d[i];
      for (int i = ax + 1; i < xs.ndim; ++i) inner *= xs.d[i];
      const int64_t v[4] = {outer, in[1].shape.numel(), xs.d[ax], inner};
      for (int k = 0; k < 4; ++k) p.u[k] = u(v[k]);
      p.u[18] = index_words(in[1].dtype);
      const std::vector<Bind> b = {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}};
      if (in[0].dtype == DType::BOOL) {  // one-byte elements: a word of four an invocation
        p.u[17] = u(ys.numel());
        grid((ys.numel() + 3) / 4);
        return st.dispatch(pipeline(g_, "index", {"GATHER_AX", "BYTES"}), &p, sizeof(p), b.data(), b.size(), nx, ny, 1);
      }
      grid(ys.numel());
      return run("GATHER_AX", b);
    }
    case OpKind::GatherElements: {
      const int ax = index_op_axis(op, in[0].shape.ndim);
      set_shape(p, ys);
      for (int d = 0; d < ys.ndim; ++d) p.sa[d] = u(xst[d]);
      p.u[0] = u(ax);
      p.u[1] = u(in[0].shape.d[ax]);
      p.u[18] = index_words(in[1].dtype);
      grid(ys.numel());
      return run("GATHER_EL", {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}});
    }
    case OpKind::GatherNd:
    case OpKind::ScatterNd: {
      if (op.kind == OpKind::ScatterNd && in[2].shape.numel() == 0) {  // no updates: y is data
        grid(ys.numel());
        return run("COPY", {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
      }
      const Shape &xs = in[0].shape, &is = in[1].shape;
      const int b = op.kind == OpKind::GatherNd ? op.a.batch_dims : 0, q = is.ndim;
      const int64_t m = is.d[q - 1];
      int64_t tuples = 1;
      for (int i = b; i < q - 1; ++i) tuples *= is.d[i];
      for (int k = 0; k < m; ++k) {
        p.sa[k] = u(xst[b + k]);
        p.sb[k] = u(xs.d[b + k]);
      }
      p.u[0] = u(m);
      p.u[1] = u(xst[b + m - 1]);
      p.u[18] = index_words(in[1].dtype);
      if (op.kind == OpKind::GatherNd) {
        p.u[2] = u(tuples);
        p.u[3] = u(b > 0 ? xst[b - 1] : xs.numel());
        grid(ys.numel());
        return run("GATHER_ND", {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}});
      }
      grid(ys.numel());  // data into y, then the updates
      run("COPY", {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
      p.u[2] = u(is.numel() / m);
      p.u[3] = op.a.mode == kScatterAdd ? 1u : 0u;
      grid(in[2].shape.numel());
      return run("SCATTER_ND", {{1, yb, 0, W}, {3, act(st, in[1]), 0, W}, {4, act(st, in[2]), 0, W}});
    }
    case OpKind::CumSum: {
      const Shape& xs = in[0].shape;
      const int ax = index_op_axis(op, xs.ndim);
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < ax; ++i) outer *= xs.d[i];
      for (int i = ax + 1; i < xs.ndim; ++i) inner *= xs.d[i];
      const int64_t v[5] = {outer, xs.d[ax], inner, op.a.exclusive ? 1 : 0, op.a.reverse ? 1 : 0};
      for (int k = 0; k < 5; ++k) p.u[k] = u(v[k]);
      grid(outer * inner);
      return run("CUMSUM", {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}});
    }
    case OpKind::NonZero: {  // nonzero.wgsl; the count is the shape rule's (its input is a host value)
      set_shape(p, in[0].shape);
      p.n = u(in[0].shape.numel());
      p.u[0] = in[0].dtype == DType::BOOL ? 3u : typed_code(in[0].dtype);
      p.u[1] = u(ys.d[1]);
      Bind b[] = {{1, yb, 0, W}, {2, act(st, in[0]), 0, W}};
      st.dispatch(pipeline(g_, "nonzero", {}), &p, sizeof(p), b, 2, 1, 1, 1);
      return;
    }
    case OpKind::RandomNormalLike: {
      // The noise of the counter-based generator (core/counter_rng.h), made on the host as the cpu
      // reference makes it (its Box-Muller runs in double, which WGSL lacks), then copied into y:
      // the same numbers as every other backend, bit for bit. A host step, counted in the bench.
      std::vector<float> v(static_cast<size_t>(ys.numel()));
      Tensor ht;
      ht.dtype = DType::F32;
      ht.shape = ys;
      ht.data = v.data();
      for (int64_t i = 0; i < ys.numel(); ++i)
        put_f(ht, i, static_cast<double>(op.a.alpha) + static_cast<double>(op.a.scale) * normal_of(op.a.seed, i));
      p.u[19] = 1;
      grid(ys.numel());
      return run("COPY", {{1, yb, 0, W}, {2, act(st, ht), 0, W}});
    }
    default: throw_unsupported_op(op_name(op.kind), "wgpu+rs", "-");
  }
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
