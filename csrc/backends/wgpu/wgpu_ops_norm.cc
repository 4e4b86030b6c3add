#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_backend_impl.h"

#include <algorithm>

#include "core/errors.h"

namespace cyb {
namespace wgpu {

// rms_norm, l2_normalize (no weight), softmax (the L2 variant's bindings, the SOFTMAX body) and
// fused_skip_norm (SKIP: the residual sum written too): shaders/wgsl/norm.wgsl, one workgroup a row.
void WgpuBackend::norm(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  // Softmax: the L2 variant's bindings (no weight), the SOFTMAX body
  const bool skip = op.kind == OpKind::FusedSkipNorm,
             l2 = op.kind == OpKind::L2Normalize || op.kind == OpKind::Softmax;
  const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
  WGPUBuffer xb = act(st, in[0]), yb = dev(out[0])->bufs[0];
  const bool inplace = !skip && xb == yb;
  std::vector<std::string> defs;
  if (inplace) defs.push_back("INPLACE");
  if (skip) defs.push_back("SKIP");
  if (l2) defs.push_back("L2");
  if (op.kind == OpKind::Softmax) defs.push_back("SOFTMAX");
  Pipeline& pl = pipeline(g_, "norm", defs);
  uint32_t p[4] = {u(D), u(R), f2u(op.a.eps), op.a.norm_plus_one ? 1u : 0u};
  const uint32_t nx = u(std::min<int64_t>(R, 65535)), ny = u((R + 65534) / 65535);
  if (l2) {  // no weight
    if (inplace) {
      Bind b[] = {{2, yb, 0, W}};
      st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
    } else {
      Bind b[] = {{2, yb, 0, W}, {3, xb, 0, W}};
      st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
    }
    return;
  }
  WGPUBuffer wb = weight(skip ? in[2] : in[1])->bufs[0];
  if (skip) {
    Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {3, xb, 0, W}, {4, act(st, in[1]), 0, W},
                {5, dev(out[1])->bufs[0], 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  } else if (inplace) {
    Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  } else {
    Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {3, xb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  }
}

// shaders/wgsl/layer_norm.wgsl: one workgroup a row, in place or not, with or without bias.
void WgpuBackend::layer_norm(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const int64_t D = in[0].shape.cols(), R = in[0].shape.numel() / D;
  WGPUBuffer xb = act(st, in[0]), yb = dev(out[0])->bufs[0];
  const bool inplace = xb == yb, bias = n_in > 2;
  std::vector<std::string> defs;
  if (inplace) defs.push_back("INPLACE");
  if (bias) defs.push_back("BIAS");
  Pipeline& pl = pipeline(g_, "layer_norm", defs);
  uint32_t p[4] = {u(D), u(R), f2u(op.a.eps), 0};
  const uint32_t nx = u(std::min<int64_t>(R, 65535)), ny = u((R + 65534) / 65535);
  WGPUBuffer wb = weight(in[1])->bufs[0], bb = bias ? weight(in[2])->bufs[0] : nullptr;
  if (inplace && bias) {
    Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {4, bb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  } else if (inplace) {
    Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  } else if (bias) {
    Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {3, xb, 0, W}, {4, bb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  } else {
    Bind b[] = {{1, wb, 0, W}, {2, yb, 0, W}, {3, xb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  }
}

// Element-wise: shaders/wgsl/eltwise.wgsl, unary (in place or not) or binary.
void WgpuBackend::eltwise(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  uint32_t code = 0;
  bool binary = false;
  switch (op.kind) {
    case OpKind::Scale: code = 0; break;
    case OpKind::Silu: code = 1; break;
    case OpKind::Gelu: code = 2; break;
    case OpKind::GeluTanh: code = 3; break;
    case OpKind::Softcap: code = 4; break;
    case OpKind::Relu: code = 5; break;
    case OpKind::Add: code = 16; binary = true; break;
    case OpKind::Mul: code = 17; binary = true; break;
    case OpKind::SwiGlu: code = 18; binary = true; break;
    case OpKind::GeGlu: code = op.a.gelu_erf ? 20 : 19; binary = true; break;
    default: throw_unsupported_op(op_name(op.kind), "wgpu+rs", "-");
  }
  const int64_t n = in[0].shape.numel();
  WGPUBuffer ab = act(st, in[0]), yb = dev(out[0])->bufs[0];
  const bool inplace = !binary && ab == yb;
  std::vector<std::string> defs;
  if (binary) defs.push_back("BINARY");
  if (inplace) defs.push_back("INPLACE");
  Pipeline& pl = pipeline(g_, "eltwise", defs);
  const uint32_t wgs = u((n + 255) / 256), nx = std::min<uint32_t>(wgs, 65535), ny = (wgs + nx - 1) / nx;
  uint32_t p[8] = {u(n), binary ? u(in[1].shape.numel()) : 1u, code, nx, f2u(op.a.scale), f2u(op.a.softcap), 0, 0};
  if (binary) {
    WGPUBuffer bb = act(st, in[1]);
    if (bb == yb || ab == yb) throw_unsupported_op(std::string(op_name(op.kind)) + " (in place)", "wgpu+rs", "-");
    Bind b[] = {{1, yb, 0, W}, {2, ab, 0, W}, {3, bb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  } else if (inplace) {
    Bind b[] = {{1, yb, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  } else {
    Bind b[] = {{1, yb, 0, W}, {2, ab, 0, W}};
    st.dispatch(pl, p, sizeof(p), b, nx, ny, 1);
  }
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
