// The wgpu+rs Backend (make_wgpu_backend): device tensors, weights, supports() and execute(),
// whose switch hands each op to its encoder. The encoders, by kind of kernel:
//   wgpu_ops_matmul.cc     matmul (row, matrix-vector, tiled and split-K GEMM), fused_qkv,
//                          fused_norm_matmul / _qkv / _swiglu (the norm folded in), conv1d
//   wgpu_ops_attention.cc  attention, encoder attention, rope, fused_rope_kv, fused_rope_attention, kv_write
//   wgpu_ops_norm.cc       rms_norm, l2_normalize, softmax, fused_skip_norm, layer_norm,
//                          element-wise ops
//   wgpu_ops_data.cc       embedding, copy, masked_pool
//   wgpu_ops_array.cc      the f32 array ops of graph v2 (unary, binary, where, layout, reduce,
//                          softmax_axis, instance_norm, matmul_nd, conv, conv_transpose) and its
//                          index ops on f32 / i32 / i64 values (gather.., scatter_nd, cumsum, layout)
//   wgpu_ops_sampling.cc   device sampling (sample_rows, take_draws), beam candidates (beam_rows)
// Private to csrc/backends/wgpu/.
#pragma once

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/wgpu/wgpu_buffers.h"
#include "backends/wgpu/wgpu_device.h"
#include "backends/wgpu/wgpu_pipeline.h"
#include "backends/wgpu/wgpu_state.h"
#include "dispatch/backend.h"
#include "dispatch/op.h"

namespace cyb {
namespace wgpu {

template <class T>
uint32_t u(T v) {
  return static_cast<uint32_t>(v);
}

// The bits of a float, as a parameter word.
inline uint32_t f2u(float f) {
  uint32_t v;
  std::memcpy(&v, &f, 4);
  return v;
}

inline bool float_act(const Tensor& t) { return t.dtype == DType::F32; }

// The sizes the array kernels index with u32 (wgpu_ops_array.cc): whole buffers, inputs and
// outputs of 1 .. 2^31 - 1 elements.
bool array_op_fits(const Op& op, const Tensor* in, int n_in);

inline bool weight_ok(const Tensor& w) { return enc_fn(w.dtype) != nullptr && w.shape.ndim == 2; }

class WgpuBackend : public Backend {
 public:
  explicit WgpuBackend(Gpu& g) : g_(g) {}
  ~WgpuBackend() override;
  const char* name() const override { return g_.impl->backend; }  // wgpu+rs, webgpu:dawn
  bool host_memory() const override { return false; }

  // The context's State (created at its first use); remembered as the last one recording.
  State& state(ExecContext& ctx);

  void begin_forward(ExecContext& ctx) override {
    ctx.frame().reset();
    state(ctx).reset();
  }
  Tensor alloc_frame(ExecContext& ctx, const Shape& shape) override;
  Tensor alloc_frame_as(ExecContext& ctx, const Shape& shape, DType dtype) override;
  void release_frame(ExecContext& ctx, const Tensor& t) override;
  void end_forward(ExecContext& ctx) override { state(ctx).submit(); }

  Tensor alloc(const Shape& shape, DType dtype) override;
  Tensor upload(const void* data, const Shape& shape, DType dtype) override;
  void release(Tensor& t) override;
  // Buffer copies work in whole 4-byte words; a tensor whose bytes start or end inside a
  // word (an odd number of f16 values, a view at an odd element) is moved through the
  // words that cover it (buffers are padded past their last word: create_buffer).
  void read_bytes(const Tensor& t, void* dst) override;
  void write_bytes(const Tensor& t, const void* src) override;
  void download_f32(const Tensor& t, float* out) override;

  bool can_sample() const override { return true; }
  void sample_rows(const Tensor& logits, const DeviceSampling* s, DeviceDraw* out, int64_t rows,
                   ExecContext& ctx) override;
  void take_draws(ExecContext& ctx, DeviceDraw* out, int64_t rows) override;
  bool can_beam() const override { return true; }
  void beam_rows(const Tensor& logits, const BeamRow* p, int64_t rows, const BeamSpec& spec, float* score,
                 int32_t* token, int64_t* first_nonfinite, ExecContext& ctx) override;
  Tensor sampled_token(ExecContext& ctx) override;

  bool supports(const Op& op, const Tensor* in, int n_in) const override;
  void execute(const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out, ExecContext& ctx) override;

 private:
  // Reads staged draws into out (sample_rows, take_draws).
  void read_draws(State& st, DeviceDraw* out, int64_t rows, bool newest);
  // The state whose command stream last wrote `d` (so a read sees its results).
  State* reader(DevBuf* d) {
    State* st = d->owner ? d->owner : static_cast<State*>(g_.last_state.load());
    if (!st) {
      fresh_.g = &g_;
      st = &fresh_;
    }
    return st;
  }
  // The op's encoder (execute's switch) on device outputs.
  void encode(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out, int n_out);
  // A weight (or any long-lived host tensor) on the device, uploaded at first use; while an op
  // with host outputs runs (uncached_ set), a frame buffer written for that op only.
  DevBuf* weight(const Tensor& t);
  // An activation buffer: a device tensor, or host data copied into a frame buffer (ids).
  WGPUBuffer act(State& st, const Tensor& t);

  // ---- the op encoders (execute's cases), each recording its dispatches into st

  // wgpu_ops_matmul.cc
  // epilogue: nullptr, "GELU", "GELU_TANH" or "ADD" (residual: the tensor added, laid out as y).
  // `norm` (an rms_norm op and its weight): the product takes rms_norm(x) (fused_norm_*): the
  // matrix-vector kernel folds it in (matvec.wgsl NORM), the other paths normalize into a frame first.
  struct RowNorm {
    const Op* op;
    const Tensor* w;
  };
  void matmul(State& st, const Tensor& x, const Tensor& W, const Tensor* bias, const Tensor* W2, Tensor& y,
              const char* epilogue = nullptr, const Tensor* residual = nullptr, const RowNorm* norm = nullptr);
  void qkv(State& st, const Tensor* in, int n_in, Tensor* out, const RowNorm* norm = nullptr);
  Tensor normed_rows(State& st, const Tensor& x, const RowNorm& norm);
  void conv1d(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out);
  void matvec_variant(int64_t K, int64_t T, int64_t rows, bool ks_ok, std::vector<std::string>& defs,
                      int64_t* rows_per_wg, int64_t* tokens_per_wg) const;

  // wgpu_ops_attention.cc
  void attention(State& st, const Op& op, const Tensor* in, Tensor* out);
  void encoder_attention(State& st, const Op& op, const Tensor* in, Tensor* out);
  void attention_nd(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out);
  void kv_write(State& st, const Op& op, const Tensor* in, Tensor* out);
  void rope(State& st, const Op& op, const Tensor* in, Tensor* out);
  void fused_rope_kv(State& st, const Op& op, const Tensor* in, Tensor* out);
  void fused_rope_attention(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out);
  // A RopeTable's cos and sin tables on the device (uploaded once, as weights are).
  std::pair<WGPUBuffer, WGPUBuffer> rope_tables(const RopeTable& rt);

  // wgpu_ops_norm.cc
  // rms_norm, l2_normalize, softmax and fused_skip_norm: shaders/wgsl/norm.wgsl.
  void norm(State& st, const Op& op, const Tensor* in, Tensor* out);
  void layer_norm(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out);
  void eltwise(State& st, const Op& op, const Tensor* in, Tensor* out);

  // wgpu_ops_array.cc: the f32 array ops of graph v2 (shaders/wgsl/array.wgsl, array_nn.wgsl)
  void array_op(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out);
  // wgpu_ops_array.cc: the index ops (gather, gather_elements, gather_nd, scatter_nd, cumsum) and the
  // strided copies (transpose, slice, slice_dyn, expand) of f32 / i32 / i64 values (shaders/wgsl/index.wgsl)
  void index_op(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out);
  // wgpu_ops_array.cc: binary / unary / cast with integer or bool inputs or results (shaders/wgsl/typed.wgsl)
  void typed_op(State& st, const Op& op, const Tensor* in, int n_in, Tensor* out);

  // wgpu_ops_data.cc
  void embedding(State& st, const Op& op, const Tensor* in, Tensor* out);
  void copy_tensor(State& st, const Tensor* in, Tensor* out);
  void masked_pool(State& st, const Op& op, const Tensor* in, Tensor* out);

  Gpu& g_;
  std::mutex mu_;
  struct PairHash {
    size_t operator()(const std::pair<const void*, uint64_t>& k) const {
      return std::hash<const void*>()(k.first) ^ (k.second * 0x9e3779b97f4a7c15ull);
    }
  };
  std::unordered_map<std::pair<const void*, uint64_t>, DevBuf*, PairHash> weights_;
  State* uncached_ = nullptr;  // execute() with host outputs: host weights are not cached
  State fresh_;
};

}  // namespace wgpu
}  // namespace cyb
