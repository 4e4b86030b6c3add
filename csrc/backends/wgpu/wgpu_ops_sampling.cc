#if defined(CYB_HAVE_WGPU)

#include "backends/wgpu/wgpu_backend_impl.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/errors.h"

namespace cyb {
namespace wgpu {

// shaders/wgsl/sample.wgsl: one workgroup per row; a submit and a read-back of 16
// bytes a row.
void WgpuBackend::sample_rows(const Tensor& logits, const DeviceSampling* s, DeviceDraw* out, int64_t rows,
                              ExecContext& ctx) {
  const int64_t n = logits.shape.cols();
  if (logits.dtype != DType::F32 || rows <= 0 || rows > 65535 || n <= 0 || logits.shape.numel() != rows * n ||
      logits.offset % 4 != 0)
    throw_shape_mismatch("sample", {rows, n}, {logits.shape.numel() / std::max<int64_t>(n, 1), n});
  State& st = state(ctx);
  const int64_t words = (n + 31) / 32;
  std::vector<uint32_t> prm(static_cast<size_t>(rows) * 12), masks;
  for (int64_t r = 0; r < rows; ++r) {
    const DeviceSampling& d = s[r];
    uint32_t* q = prm.data() + r * 12;
    q[0] = u(n);
    q[1] = u(std::max<int32_t>(d.top_k, 0));
    q[2] = (d.allowed ? 1u : 0u) | (d.chain ? 2u : 0u);
    q[3] = u(masks.size());
    q[4] = f2u(d.temperature);
    q[5] = f2u(d.top_p);
    q[6] = f2u(d.min_p);
    q[7] = f2u(d.uniform);
    q[8] = f2u(d.uniform_if_used);
    if (d.allowed) masks.insert(masks.end(), d.allowed, d.allowed + words);
  }
  if (masks.empty()) masks.push_back(0);
  DevBuf* pb = st.persistent(0, prm.size() * 4);
  DevBuf* mb = st.persistent(1, masks.size() * 4);
  DevBuf* sb = st.persistent(2, static_cast<uint64_t>(rows) * 2 * static_cast<uint64_t>(n) * 4);
  DevBuf* rb = st.persistent(3, static_cast<uint64_t>(rows) * 16);
  DevBuf* xb = st.persistent(4, static_cast<uint64_t>(rows) * static_cast<uint64_t>(n) * 4);
  A.wgpuQueueWriteBuffer(g_.queue, pb->bufs[0], 0, prm.data(), prm.size() * 4);
  A.wgpuQueueWriteBuffer(g_.queue, mb->bufs[0], 0, masks.data(), masks.size() * 4);
  Pipeline& pl = pipeline(g_, "sample", n <= 4096 ? std::vector<std::string>{"WG64"} : std::vector<std::string>{});
  uint32_t p[4] = {u(rows), u(n), u(logits.offset / 4), 0};
  const uint64_t W = WGPU_WHOLE_SIZE;
  Bind b[] = {{1, act(st, logits), 0, W}, {2, pb->bufs[0], 0, W}, {3, mb->bufs[0], 0, W},
              {4, sb->bufs[0], 0, W}, {5, rb->bufs[0], 0, W}, {6, xb->bufs[0], 0, W}};
  st.dispatch(pl, p, sizeof(p), b, u(rows), 1, 1);
  st.stage_draws(rb->bufs[0], static_cast<uint64_t>(rows) * 16, rows);
  if (out) read_draws(st, out, rows, true);
}

// Called without the device lock (Model::forward_sample_take): touches only this context's
// state (not Gpu::last_state) and the device's thread-safe poll, so another conversation records and
// submits while this one waits for its step.
void WgpuBackend::take_draws(ExecContext& ctx, DeviceDraw* out, int64_t rows) {
  auto* st = static_cast<State*>(ctx.backend_state().get());
  if (!st) throw_invalid_config("conversation", "no device draw of this conversation is pending");
  read_draws(*st, out, rows, false);
}

void WgpuBackend::read_draws(State& st, DeviceDraw* out, int64_t rows, bool newest) {
  std::vector<int32_t> res(static_cast<size_t>(rows) * 4);
  st.take_staged(res.data(), res.size() * 4, rows, newest);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* q = res.data() + r * 4;
    out[r].token = q[0];
    out[r].used_uniform = q[1] != 0;
    out[r].first_nan = q[2] < 0 ? -1 : q[2];
    out[r].first_nonfinite = q[3] < 0 ? -1 : q[3];
  }
}

// shaders/wgsl/beam.wgsl: one workgroup per row; one submit and a read-back of (2k + 1) words a row.
void WgpuBackend::beam_rows(const Tensor& logits, const BeamRow* p, int64_t rows, const BeamSpec& spec, float* score,
                            int32_t* token, int64_t* first_nonfinite, ExecContext& ctx) {
  const int64_t n = logits.shape.cols();
  if (logits.dtype != DType::F32 || rows <= 0 || rows > 65535 || n <= 0 || logits.shape.numel() != rows * n ||
      logits.offset % 4 != 0)
    throw_shape_mismatch("beam_rows", {rows, n}, {logits.shape.numel() / std::max<int64_t>(n, 1), n});
  check_beam_spec(spec, n);
  State& st = state(ctx);
  const int64_t words = (n + 31) / 32;
  std::vector<uint32_t> rm(static_cast<size_t>(rows) * 4);
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t* q = rm.data() + r * 4;
    q[0] = (p[r].allowed ? 1u : 0u) | (p[r].check ? 2u : 0u);
    q[1] = u(rm.size());
    q[2] = f2u(p[r].cum);
    if (p[r].allowed) rm.insert(rm.end(), p[r].allowed, p[r].allowed + words);
  }
  const uint64_t k = static_cast<uint64_t>(spec.k), out_words = static_cast<uint64_t>(rows) * (2 * k + 1);
  DevBuf* rb = st.persistent(State::kBeamRows, rm.size() * 4);
  DevBuf* ob = st.persistent(State::kBeamOut, out_words * 4);
  A.wgpuQueueWriteBuffer(g_.queue, rb->bufs[0], 0, rm.data(), rm.size() * 4);
  Pipeline& pl = pipeline(g_, "beam", {});
  uint32_t prm[8] = {u(rows), u(n), u(logits.offset / 4), u(k), u(spec.ts_begin), u(spec.ts_end), 0, 0};
  const uint64_t W = WGPU_WHOLE_SIZE;
  Bind b[] = {{1, act(st, logits), 0, W}, {2, rb->bufs[0], 0, W}, {3, ob->bufs[0], 0, W}};
  st.dispatch(pl, prm, sizeof(prm), b, u(rows), 1, 1);
  std::vector<uint32_t> res(static_cast<size_t>(out_words));
  st.read(ob->bufs[0], 0, res.data(), out_words * 4);
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t* q = res.data() + r * static_cast<int64_t>(2 * k + 1);
    for (uint64_t j = 0; j < k; ++j) {
      std::memcpy(&score[r * static_cast<int64_t>(k) + static_cast<int64_t>(j)], &q[j], 4);
      token[r * static_cast<int64_t>(k) + static_cast<int64_t>(j)] = static_cast<int32_t>(q[k + j]);
    }
    first_nonfinite[r] = q[2 * k] == 0xFFFFFFFFu ? -1 : static_cast<int64_t>(q[2 * k]);
  }
}

}  // namespace wgpu
}  // namespace cyb

#endif  // CYB_HAVE_WGPU
