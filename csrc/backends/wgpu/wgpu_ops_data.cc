#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_backend_impl.h"

#include <algorithm>

#include "core/errors.h"

namespace cyb {
namespace wgpu {

// shaders/wgsl/embedding.wgsl: the rows of the ids decoded from the table (each row chunk of a
// split table its own dispatch), scaled.
void WgpuBackend::embedding(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const Tensor& tab = in[1];
  const int64_t T = in[0].shape.numel(), D = tab.shape.d[1];
  DevBuf* w = weight(tab);
  WGPUBuffer ids = act(st, in[0]), yb = dev(out[0])->bufs[0];
  Pipeline& pl = pipeline(g_, "embedding", {}, tab.dtype);
  for (size_t c = 0; c < w->bufs.size(); ++c) {
    const int64_t r0 = w->row0[c];
    const int64_t nr = (c + 1 < w->bufs.size() ? w->row0[c + 1] : tab.shape.d[0]) - r0;
    uint32_t p[8] = {u(D), u(T), u(dev_row_bytes(tab.dtype, D)), u(r0), u(nr), f2u(op.a.scale), 0, 0};
    Bind b[] = {{1, w->bufs[c], 0, W}, {2, ids, 0, W}, {3, yb, 0, W}};
    // tokens over y and z: at most 65535 workgroups a dimension
    st.dispatch(pl, p, sizeof(p), b, u(((D + 31) / 32 + 63) / 64), u(std::min<int64_t>(T, 65535)),
                u((T + 65534) / 65535));
  }
}

// shaders/wgsl/copy.wgsl: f32 / f16 / bf16 each way, whole words.
void WgpuBackend::copy_tensor(State& st, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const int64_t n = in[0].shape.numel();
  if (out[0].offset % 4 != 0)
    throw_unsupported_op("copy (an output at a byte offset not a multiple of 4)", "wgpu+rs", "-");
  std::vector<std::string> defs;
  if (in[0].dtype == DType::F16) defs.push_back("IN_F16");
  if (in[0].dtype == DType::BF16) defs.push_back("IN_BF16");
  if (out[0].dtype != DType::F32) defs.push_back("OUT16");
  if (out[0].dtype == DType::BF16) defs.push_back("OUT_BF16");
  const int64_t wgs = (n + 1) / 2 / 256 + 1;
  const uint32_t nx = u(std::min<int64_t>(wgs, 65535)), ny = u((wgs + 65534) / 65535);
  const uint64_t in_off = in[0].device == Device::Wgpu ? in[0].offset : 0;  // host data: a fresh buffer
  uint32_t p[4] = {u(n), u(in_off / block_bytes(in[0].dtype)), u(out[0].offset / block_bytes(out[0].dtype)), nx};
  Bind b[] = {{1, dev(out[0])->bufs[0], 0, W}, {2, act(st, in[0]), 0, W}};
  st.dispatch(pipeline(g_, "copy", defs), p, sizeof(p), b, nx, ny, 1);
}

// shaders/wgsl/masked_pool.wgsl: the rows of each sequence pooled under its mask.
void WgpuBackend::masked_pool(State& st, const Op& op, const Tensor* in, Tensor* out) {
  const uint64_t W = WGPU_WHOLE_SIZE;
  const Shape& xs = in[0].shape;
  const int64_t D = xs.cols(), S = xs.d[xs.ndim - 2], B = xs.numel() / (S * D);
  Pipeline& pl = pipeline(g_, "masked_pool", {});
  uint32_t p[4] = {u(D), u(S), u(B), u(op.a.pool_mode)};
  Bind b[] = {{1, dev(out[0])->bufs[0], 0, W}, {2, act(st, in[0]), 0, W}, {3, act(st, in[1]), 0, W}};
  st.dispatch(pl, p, sizeof(p), b, u((D + 63) / 64), u(B), 1);
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
